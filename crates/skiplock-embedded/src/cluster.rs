//! A local PostgreSQL cluster in a folder of its own, run from the local server binaries.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::{bindir, Error};

/// The operating-system user the server runs as when this process is root
/// (PostgreSQL refuses to run as root).
pub const SERVER_USER: &str = "postgres";

/// The database role and database every cluster made here has.
pub const SUPERUSER: &str = "postgres";

/// A PostgreSQL cluster kept in one folder: `data/` (the cluster), `postgres.log` (its log).
///
/// The server listens on 127.0.0.1 only, with trust authentication for the `postgres` role,
/// and keeps its Unix socket inside `data/`. When this process runs as root, `initdb`,
/// `pg_ctl` and `postgres` run as the `postgres` user (through `runuser`), and the folder is
/// handed to that user.
#[derive(Debug, Clone)]
pub struct LocalCluster {
    bin: PathBuf,
    dir: PathBuf,
    run_as: Option<String>,
}

/// How a server started by [`LocalCluster::start`] is configured.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// TCP port on 127.0.0.1; `None` picks a free one.
    pub port: Option<u16>,
    /// Trade durability for speed (`fsync`, `synchronous_commit` and `full_page_writes` off):
    /// right for throwaway test clusters, wrong for anything you want to keep.
    pub unsafe_fast: bool,
    /// Extra `name=value` server settings.
    pub settings: Vec<(String, String)>,
}

impl LocalCluster {
    /// A cluster kept in `dir`, run with the binaries [`bindir::find_pg_bin`] finds.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, Error> {
        Self::with_bin(dir, bindir::find_pg_bin()?)
    }

    /// A cluster kept in `dir`, run with the binaries in `bin`.
    pub fn with_bin(dir: impl Into<PathBuf>, bin: impl Into<PathBuf>) -> Result<Self, Error> {
        let run_as = if is_root()? {
            Some(SERVER_USER.to_owned())
        } else {
            None
        };
        Ok(Self {
            bin: bin.into(),
            dir: dir.into(),
            run_as,
        })
    }

    /// The folder holding the cluster.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of the server binaries in use.
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// Whether `initdb` has run in this folder.
    pub fn is_initialized(&self) -> bool {
        self.data_dir().join("PG_VERSION").is_file()
    }

    /// Runs `initdb` (UTF-8, C locale, trust authentication, superuser `postgres`).
    pub fn init(&self) -> Result<(), Error> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io("create the cluster folder", &self.dir, e))?;
        self.hand_over(&self.dir)?;
        self.check_reachable()?;
        let data = self.data_dir();
        let out = self.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                SUPERUSER.as_ref(),
                "--auth=trust".as_ref(),
                "--encoding=UTF8".as_ref(),
                "--locale=C".as_ref(),
                // No --no-instructions: PostgreSQL 13's initdb does not know it (the
                // instructions go to the captured output, unseen).
                "--no-sync".as_ref(),
            ],
        )?;
        check("initdb", out)
    }

    /// Starts the server and waits until it accepts connections. Returns its port.
    pub fn start(&self, opts: &StartOptions) -> Result<u16, Error> {
        let mut last = None;
        for _ in 0..5 {
            let port = match opts.port {
                Some(p) => p,
                None => free_port()?,
            };
            match self.start_on(port, opts) {
                Ok(()) => return Ok(port),
                Err(e) if opts.port.is_none() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::NoServer("could not start the server".into())))
    }

    /// Starts the server on the port it last listened on, so that URLs handed out before a
    /// stop (`DATABASE_URL`, a running worker's, a dashboard's) keep working after a
    /// restart; on a free port when it never ran, or when that port is taken now. Records the
    /// port before starting ([`LocalCluster::last_port`]). [`StartOptions::port`] is ignored.
    ///
    /// Returns the port, and the remembered port when it was taken (the caller should say
    /// so: URLs with the old port no longer reach this server).
    pub fn start_on_last_port(&self, opts: &StartOptions) -> Result<(u16, Option<u16>), Error> {
        let remembered = self.last_port();
        if let Some(p) = remembered.filter(|p| port_is_free(*p)) {
            self.record_port(p)?;
            match self.start_on(p, opts) {
                Ok(()) => return Ok((p, None)),
                // Taken between the check and the start: a free one, as below.
                Err(_) if !port_is_free(p) => {}
                Err(e) => return Err(e),
            }
        }
        let mut last = None;
        for _ in 0..5 {
            let port = free_port()?;
            self.record_port(port)?;
            match self.start_on(port, opts) {
                Ok(()) => return Ok((port, remembered)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::NoServer("could not start the server".into())))
    }

    /// The port the server last listened on, or was last started on: the one recorded by
    /// [`LocalCluster::start_on_last_port`], else the one in the server's own record of its
    /// last command line (`postmaster.opts`, for a cluster started otherwise). `None` when
    /// it never ran.
    pub fn last_port(&self) -> Option<u16> {
        let recorded = std::fs::read_to_string(self.port_file())
            .ok()
            .and_then(|t| t.trim().parse::<u16>().ok());
        recorded
            .or_else(|| {
                let opts = std::fs::read_to_string(self.data_dir().join("postmaster.opts")).ok()?;
                let words: Vec<&str> = opts
                    .split_whitespace()
                    .map(|w| w.trim_matches('"'))
                    .collect();
                let at = words.iter().position(|w| *w == "-p")?;
                words.get(at + 1)?.parse::<u16>().ok()
            })
            .filter(|p| *p != 0)
    }

    /// Where [`LocalCluster::start_on_last_port`] records the port.
    fn port_file(&self) -> PathBuf {
        self.dir.join("port")
    }

    fn record_port(&self, port: u16) -> Result<(), Error> {
        let path = self.port_file();
        let tmp = self.dir.join("port.tmp");
        std::fs::write(&tmp, format!("{port}\n")).map_err(|e| Error::io("write", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io("write", &path, e))
    }

    fn start_on(&self, port: u16, opts: &StartOptions) -> Result<(), Error> {
        let data = self.data_dir();
        let mut server_opts = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='{}'",
            data.display()
        );
        if opts.unsafe_fast {
            server_opts.push_str(" -c fsync=off -c synchronous_commit=off -c full_page_writes=off");
        }
        for (k, v) in &opts.settings {
            server_opts.push_str(&format!(" -c {k}={v}"));
        }
        let log = self.log_file();
        let out = self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-o".as_ref(),
                server_opts.as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                "60".as_ref(),
                "start".as_ref(),
            ],
        )?;
        check("pg_ctl start", out).map_err(|e| match std::fs::read_to_string(&log) {
            Ok(text) => {
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                Error::NoServer(format!("{e}; server log: {}", tail.join(" | ")))
            }
            Err(_) => e,
        })
    }

    /// Stops the server. `immediate` skips the shutdown checkpoint (a crash, as far as the
    /// cluster can tell; it recovers at the next start).
    pub fn stop(&self, immediate: bool) -> Result<(), Error> {
        let data = self.data_dir();
        let mode = if immediate { "immediate" } else { "fast" };
        let out = self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                mode.as_ref(),
                "-w".as_ref(),
                "stop".as_ref(),
            ],
        )?;
        check("pg_ctl stop", out)
    }

    /// Writes a file into the data directory (mode 0600, owned by the server's user), such as
    /// `pg_hba.conf` or a TLS certificate and key. Returns its path.
    pub fn write_file(&self, name: &str, contents: &[u8]) -> Result<PathBuf, Error> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.data_dir().join(name);
        std::fs::write(&path, contents).map_err(|e| Error::io("write", &path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io("set the permissions of", &path, e))?;
        self.hand_over(&path)?;
        Ok(path)
    }

    /// Stops the server and deletes the cluster's folder once this process exits (even after
    /// a panic), as the throwaway cluster of a test process does.
    pub fn remove_on_exit(&self) -> Result<(), Error> {
        crate::watchdog::spawn_watchdog(self, self.dir.clone())
    }

    /// The port of the running server, or `None` when it is not running.
    pub fn running_port(&self) -> Option<u16> {
        let data = self.data_dir();
        let status = self
            .run(
                "pg_ctl",
                &["-D".as_ref(), data.as_os_str(), "status".as_ref()],
            )
            .ok()?;
        if !status.status.success() {
            return None;
        }
        let pid_file = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
        pid_file.lines().nth(3)?.trim().parse().ok()
    }

    /// A connection URL for database `db` of a server listening on `port`.
    pub fn url(port: u16, db: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{port}/{db}")
    }

    /// The argument list that runs `tool` from this cluster's binaries as the right user.
    pub(crate) fn command_line(&self, tool: &str) -> Vec<String> {
        let prog = self.bin.join(tool).to_string_lossy().into_owned();
        match &self.run_as {
            Some(user) => vec![
                "runuser".into(),
                "-u".into(),
                user.clone(),
                "--".into(),
                prog,
            ],
            None => vec![prog],
        }
    }

    fn run(&self, tool: &str, args: &[&std::ffi::OsStr]) -> Result<Output, Error> {
        let line = self.command_line(tool);
        let mut cmd = Command::new(&line[0]);
        cmd.args(&line[1..])
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .env("LC_ALL", "C");
        cmd.output()
            .map_err(|e| Error::io("run", Path::new(&line[0]), e))
    }

    /// As root, the server user must be able to reach the folder (a checkout under a
    /// private home directory is not reachable).
    fn check_reachable(&self) -> Result<(), Error> {
        let Some(user) = &self.run_as else {
            return Ok(());
        };
        let ok = Command::new("runuser")
            .args(["-u", user, "--", "test", "-w"])
            .arg(&self.dir)
            .stdin(Stdio::null())
            .status()
            .map_err(|e| Error::io("run", Path::new("runuser"), e))?
            .success();
        if ok {
            Ok(())
        } else {
            Err(Error::NoServer(format!(
                "the {user} user (PostgreSQL refuses to run as root) cannot reach {}; \
                 choose a folder it can reach",
                self.dir.display()
            )))
        }
    }

    /// Gives `path` to the server user when running as root.
    pub(crate) fn hand_over(&self, path: &Path) -> Result<(), Error> {
        let Some(user) = &self.run_as else {
            return Ok(());
        };
        let out = Command::new("chown")
            .arg("-R")
            .arg(format!("{user}:"))
            .arg(path)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::io("run", Path::new("chown"), e))?;
        check("chown", out)
    }
}

fn check(what: &str, out: Output) -> Result<(), Error> {
    if out.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    if text.is_empty() {
        text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    }
    Err(Error::NoServer(format!(
        "{what} failed ({}): {}",
        out.status,
        text.lines().last().unwrap_or("no output")
    )))
}

/// A TCP port on 127.0.0.1 that is free now (the port [`LocalCluster::start`] picks when
/// [`StartOptions::port`] is `None`).
pub fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::io("find a free port on", Path::new("127.0.0.1"), e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("find a free port on", Path::new("127.0.0.1"), e))
}

/// Whether nothing listens on `port` of 127.0.0.1 now.
fn port_is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

fn is_root() -> Result<bool, Error> {
    let out = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| Error::io("run", Path::new("id"), e))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "0")
}
