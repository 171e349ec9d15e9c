//! A throwaway PgBouncer in transaction pooling mode in front of the test server, configured
//! as a user would (listen address, authentication, pool mode and sizes, nothing else): in
//! particular no `ignore_startup_parameters`, so that clients are tested against a stock
//! PgBouncer.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Error, SERVER_USER};

/// Set to make [`PgBouncer::start`] an error (instead of `Ok(None)`) when PgBouncer is not
/// installed, so that a CI run cannot skip the PgBouncer tests by accident.
pub const REQUIRE_PGBOUNCER_ENV: &str = "SKIPLOCK_REQUIRE_PGBOUNCER";

/// A PgBouncer process in transaction pooling mode, forwarding every database of one server.
/// Stopped (and its folder deleted) when dropped.
#[derive(Debug)]
pub struct PgBouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl PgBouncer {
    /// Starts PgBouncer (from `PATH` or `/usr/sbin`) in front of the server `server_url`
    /// points at. `Ok(None)` when PgBouncer is not installed (unless
    /// `SKIPLOCK_REQUIRE_PGBOUNCER` is set).
    pub fn start(server_url: &str) -> Result<Option<Self>, Error> {
        let Some(bin) = find_pgbouncer() else {
            if std::env::var_os(REQUIRE_PGBOUNCER_ENV).is_some() {
                return Err(Error::NoServer(format!(
                    "pgbouncer is not installed and {REQUIRE_PGBOUNCER_ENV} is set"
                )));
            }
            return Ok(None);
        };
        let cfg: tokio_postgres::Config = server_url.parse().map_err(|source| Error::Sql {
            what: "parse the server URL",
            source,
        })?;
        let host = match cfg.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".to_owned(),
        };
        let server_port = cfg.get_ports().first().copied().unwrap_or(5432);
        let user = cfg.get_user().unwrap_or("postgres").to_owned();
        let port = skiplock_embedded::free_port()?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "skiplock-test-bouncer-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("create", &dir, e))?;
        let ini = dir.join("pgbouncer.ini");
        let users = dir.join("userlist.txt");
        std::fs::write(&users, format!("\"{user}\" \"\"\n"))
            .map_err(|e| Error::io("write", &users, e))?;
        std::fs::write(
            &ini,
            format!(
                "[databases]\n* = host={host} port={server_port}\n\n[pgbouncer]\n\
                 listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                 auth_type = trust\nauth_file = {users}\npool_mode = transaction\n\
                 max_client_conn = 1000\ndefault_pool_size = 40\n\
                 logfile = {log}\n",
                users = users.display(),
                log = dir.join("pgbouncer.log").display(),
            ),
        )
        .map_err(|e| Error::io("write", &ini, e))?;
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false);
        let mut cmd = if as_root {
            let _ = Command::new("chown")
                .args(["-R", &format!("{SERVER_USER}:")])
                .arg(&dir)
                .status();
            let mut c = Command::new("runuser");
            c.args(["-u", SERVER_USER, "--"]).arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        let child = cmd
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::io("start", &bin, e))?;
        skiplock_embedded::kill_on_exit(child.id(), &dir)?;
        let bouncer = PgBouncer { child, dir, port };
        // Wait until it accepts connections.
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                let log =
                    std::fs::read_to_string(bouncer.dir.join("pgbouncer.log")).unwrap_or_default();
                return Err(Error::NoServer(format!(
                    "pgbouncer did not start: {}",
                    log.lines().last().unwrap_or("no log")
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Some(bouncer))
    }

    /// A URL for database `db` through this PgBouncer, as `user`.
    pub fn url(&self, user: &str, db: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.port)
    }

    /// `url` (of the server behind) rewritten to go through this PgBouncer.
    pub fn through(&self, url: &str) -> Result<String, Error> {
        let cfg: tokio_postgres::Config = url.parse().map_err(|source| Error::Sql {
            what: "parse the server URL",
            source,
        })?;
        Ok(self.url(
            cfg.get_user().unwrap_or("postgres"),
            cfg.get_dbname().unwrap_or("postgres"),
        ))
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // runuser forwards the kill; make sure the bouncer itself is gone too.
        let _ = Command::new("pkill")
            .args(["-f", &self.dir.join("pgbouncer.ini").to_string_lossy()])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn find_pgbouncer() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(PathBuf::from("/usr/sbin"));
    dirs.push(PathBuf::from("/usr/local/sbin"));
    dirs.into_iter()
        .map(|d| d.join("pgbouncer"))
        .find(|p| p.is_file())
}
