//! Finding the PostgreSQL server binaries (`initdb`, `pg_ctl`, `postgres`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// The environment variable naming a folder that holds `initdb`, `pg_ctl` and `postgres`.
pub const PG_BIN_ENV: &str = "SKIPLOCK_PG_BIN";

const TOOLS: [&str; 3] = ["initdb", "pg_ctl", "postgres"];

/// Finds a folder holding the PostgreSQL server binaries.
///
/// Looks, in order, at `SKIPLOCK_PG_BIN`, every folder on `PATH`, `pg_config --bindir`, and
/// the newest `/usr/lib/postgresql/<major>/bin` (Debian and Ubuntu packages). The first folder
/// that holds `initdb`, `pg_ctl` and `postgres` wins.
pub fn find_pg_bin() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os(PG_BIN_ENV) {
        let dir = PathBuf::from(dir);
        return if has_tools(&dir) {
            Ok(dir)
        } else {
            Err(Error::NoServer(format!(
                "{PG_BIN_ENV}={} does not hold initdb, pg_ctl and postgres",
                dir.display()
            )))
        };
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_tools(&dir) {
                return Ok(dir);
            }
        }
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        if out.status.success() {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if has_tools(&dir) {
                return Ok(dir);
            }
        }
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_tools(&bin).then_some((major, bin))
        })
        .collect();
    debian.sort();
    if let Some((_, dir)) = debian.pop() {
        return Ok(dir);
    }
    Err(Error::NoServer(format!(
        "no PostgreSQL server binaries found (looked at {PG_BIN_ENV}, PATH, pg_config --bindir and \
         /usr/lib/postgresql/*/bin); install the PostgreSQL server or set {PG_BIN_ENV} or DATABASE_URL"
    )))
}

fn has_tools(dir: &Path) -> bool {
    TOOLS.iter().all(|t| dir.join(t).is_file())
}
