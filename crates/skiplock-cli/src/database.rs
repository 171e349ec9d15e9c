//! Which database a command talks to: `--database-url`, else `DATABASE_URL`, else the
//! embedded default, a private cluster kept in `./.skiplock` (or `$SKIPLOCK_HOME`).

use crate::util::errln;
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use skiplock_testdb::{LocalCluster, StartOptions};

/// Where the embedded default database lives, unless `SKIPLOCK_HOME` says otherwise.
pub const DEFAULT_HOME: &str = ".skiplock";

/// The URL to use: the given one, or the embedded default (created and started if needed).
pub fn resolve(url: Option<&str>) -> anyhow::Result<String> {
    match url.filter(|u| !u.trim().is_empty()) {
        Some(url) => Ok(url.to_owned()),
        None => Home::locate()?.ensure_running(),
    }
}

/// The embedded default database's folder.
pub struct Home {
    dir: PathBuf,
}

impl Home {
    pub fn locate() -> anyhow::Result<Home> {
        let dir = match std::env::var_os("SKIPLOCK_HOME").filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d),
            None => std::env::current_dir()
                .context("could not read the current directory")?
                .join(DEFAULT_HOME),
        };
        Ok(Home { dir })
    }

    fn cluster(&self) -> anyhow::Result<LocalCluster> {
        LocalCluster::new(&self.dir).context("the embedded database needs PostgreSQL")
    }

    /// Creates the cluster if it does not exist, starts it if it is not running, and returns
    /// its URL.
    pub fn ensure_running(&self) -> anyhow::Result<String> {
        let cluster = self.cluster()?;
        if let Some(port) = cluster.running_port() {
            return Ok(LocalCluster::url(port, "postgres"));
        }
        if !cluster.is_initialized() {
            if self.dir.join("data").exists() {
                bail!(
                    "{} holds an unfinished database (no PG_VERSION); remove it or set SKIPLOCK_HOME",
                    self.dir.join("data").display()
                );
            }
            errln!("creating the embedded database in {}", self.dir.display());
            cluster.init().with_context(|| {
                format!(
                    "could not create the embedded database in {} (SKIPLOCK_HOME chooses another folder)",
                    self.dir.display()
                )
            })?;
        }
        let port = cluster
            .start(&StartOptions {
                port: None,
                unsafe_fast: false,
                settings: vec![("max_connections".into(), "200".into())],
            })
            .with_context(|| {
                format!(
                    "could not start the embedded database in {}",
                    self.dir.display()
                )
            })?;
        Ok(LocalCluster::url(port, "postgres"))
    }

    pub fn stop(&self) -> anyhow::Result<()> {
        let cluster = self.cluster()?;
        if cluster.running_port().is_none() {
            return Ok(());
        }
        Ok(cluster.stop(false)?)
    }

    pub fn status(&self) -> String {
        let Ok(cluster) = self.cluster() else {
            return format!(
                "{}: no PostgreSQL server binaries found",
                self.dir.display()
            );
        };
        match (cluster.is_initialized(), cluster.running_port()) {
            (false, _) => format!("{}: not created yet", self.dir.display()),
            (true, None) => format!("{}: stopped", self.dir.display()),
            (true, Some(port)) => format!(
                "{}: running, {} (PostgreSQL from {})",
                self.dir.display(),
                LocalCluster::url(port, "postgres"),
                cluster.bin_dir().display()
            ),
        }
    }
}
