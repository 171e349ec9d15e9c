//! Which database a command talks to: `--database-url`, else `DATABASE_URL`, else the
//! embedded default, a private cluster kept in `./.skiplock` (or `$SKIPLOCK_HOME`).

use crate::output::errln;
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use skiplock_embedded::{LocalCluster, StartOptions};

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
        // The port it had before, so that URLs handed out before a stop keep working.
        let (port, moved_from) = cluster
            .start_on_last_port(&StartOptions {
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
        if let Some(old) = moved_from {
            errln!(
                "warning: port {old} of the embedded database in {} is taken by another \
                 program; it now listens on port {port}: update DATABASE_URL (skiplock pg url) \
                 and restart workers and dashboards that use the old URL",
                self.dir.display()
            );
        }
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

/// How many times a permanent connection error is seen before `skiplock work` gives up, and
/// the wait between tries (5 tries over about 10 seconds: long enough for a role or database
/// being created at the same moment, short enough to notice a mistake).
const PERMANENT_TRIES: u32 = 5;
const PERMANENT_RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Waits until the database answers. A permanent error (login refused, database or role
/// missing, TLS refused, a startup parameter refused) ends it after [`PERMANENT_TRIES`] tries;
/// a transient one (server down, starting, out of connections) is retried for as long as it
/// lasts, as the worker would.
pub async fn wait_reachable(client: &skiplock::Client) -> anyhow::Result<()> {
    let mut permanent = 0;
    let mut transient = 0u32;
    loop {
        let e = match client.server_version().await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if is_permanent(&e) {
            permanent += 1;
            if permanent >= PERMANENT_TRIES {
                return Err(anyhow::Error::new(e)
                    .context(format!("could not connect ({PERMANENT_TRIES} tries)")));
            }
            tracing::warn!(error = %one_line(&e), "could not connect; trying again");
            tokio::time::sleep(PERMANENT_RETRY_WAIT).await;
        } else {
            transient += 1;
            if transient == 1 || transient % 10 == 0 {
                tracing::warn!(error = %one_line(&e), "the database is not reachable yet; retrying");
            }
            tokio::time::sleep(PERMANENT_RETRY_WAIT.min(std::time::Duration::from_millis(
                250 * u64::from(transient.min(8)),
            )))
            .await;
        }
    }
}

fn one_line(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s.replace('\n', " ")
}

/// Whether a connection error will not go away by itself.
fn is_permanent(e: &skiplock::Error) -> bool {
    use skiplock::reexports::tokio_postgres;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(pg) = err.downcast_ref::<tokio_postgres::Error>() {
            if let Some(db) = pg.as_db_error() {
                let code = db.code().code();
                // 28: authorization (password, pg_hba.conf, missing role); 3D000: no such
                // database; 08P01: a startup parameter refused (by a pooler); 42501: no
                // CONNECT privilege.
                return code.starts_with("28") || matches!(code, "3D000" | "08P01" | "42501");
            }
            // tokio-postgres reports every TLS failure (handshake refused, certificate
            // rejected, TLS required but not offered) under this one message.
            let text = pg.to_string();
            return text.contains("TLS");
        }
        cur = err.source();
    }
    false
}
