//! Cleanup after this process exits, however it exits (even after a panic or Ctrl-C).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Error, LocalCluster};

/// A detached shell that waits for this process to exit, then stops the cluster and deletes
/// its folder, so that no throwaway cluster is left behind (even after a panic or Ctrl-C).
pub(crate) fn spawn_watchdog(cluster: &LocalCluster, dir: PathBuf) -> Result<(), Error> {
    const CLEANUP: &str = r#""$@" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1"#;
    watchdog(CLEANUP, &dir, &cluster.command_line("pg_ctl"))
}

/// Like [`LocalCluster::remove_on_exit`], for a helper process beside a cluster (a pooler,
/// say): once this process exits, kills process `child` (and anything still running from
/// `dir`) and deletes `dir`.
pub fn kill_on_exit(child: u32, dir: &Path) -> Result<(), Error> {
    const CLEANUP: &str = r#"kill "$1" 2>/dev/null; pkill -f "$dir/" 2>/dev/null"#;
    watchdog(CLEANUP, dir, &[child.to_string()])
}

/// A detached shell that waits for this process to exit, runs `cleanup` (with `$dir` set
/// and `args` as its positional parameters), then deletes `dir`. In a process group of its
/// own, so that a Ctrl-C at the terminal does not end it first.
fn watchdog(cleanup: &str, dir: &Path, args: &[String]) -> Result<(), Error> {
    use std::os::unix::process::CommandExt;
    let script = format!(
        "pid=$1; dir=$2; shift 2\nwhile kill -0 \"$pid\" 2>/dev/null; do sleep 1; done\n{cleanup}\nrm -rf \"$dir\""
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(std::process::id().to_string())
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| Error::io("start the cleanup watchdog for", dir, e))?;
    Ok(())
}
