//! The process-wide test server and per-test schemas.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{Error, LocalCluster, StartOptions};

/// Set this environment variable (to anything) to keep test schemas after the tests end.
pub const KEEP_ENV: &str = "SKIPLOCK_TEST_KEEP";

struct Server {
    url: String,
    throwaway: bool,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The URL of the server tests use: `DATABASE_URL`, or the throwaway cluster of this process
/// (started on first use).
pub fn server_url() -> Result<String, Error> {
    server().map(|s| s.url.clone())
}

fn server() -> Result<&'static Server, Error> {
    SERVER
        .get_or_init(|| start_server().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| Error::NoServer(e.clone()))
}

fn start_server() -> Result<Server, Error> {
    if let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) {
        return Ok(Server {
            url,
            throwaway: false,
        });
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("skiplock-test-{}-{nanos}", std::process::id()));
    let cluster = LocalCluster::new(&dir)?;
    cluster.init()?;
    let port = cluster.start(&StartOptions {
        port: None,
        unsafe_fast: true,
        settings: vec![("max_connections".into(), "400".into())],
    })?;
    cluster.remove_on_exit()?;
    Ok(Server {
        url: LocalCluster::url(port, "postgres"),
        throwaway: true,
    })
}

/// A fresh schema name on the test server, for one test.
///
/// The schema itself is not created: the code under test creates it (skiplock's migrations
/// do). When the value is dropped the schema is dropped too, unless `SKIPLOCK_TEST_KEEP` is
/// set; on a throwaway cluster nothing needs dropping, since the whole cluster goes away.
#[derive(Debug)]
pub struct TestDb {
    url: String,
    schema: String,
    drop_schema: bool,
    /// `(server URL, database name)` of a database made for this test alone.
    own_database: Option<(String, String)>,
}

impl TestDb {
    /// A fresh schema name on the test server. Panics with the reason when no server can be
    /// had (this is test support: a test without a database cannot run).
    pub async fn new() -> Self {
        match Self::try_new().await {
            Ok(db) => db,
            Err(e) => panic!("no test database: {e}"),
        }
    }

    /// Like [`TestDb::new`], returning the error instead of panicking.
    pub async fn try_new() -> Result<Self, Error> {
        // The first call may start a server: a few seconds of blocking work, once per process.
        let server = server()?;
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let salt = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_micros())
            .unwrap_or(0);
        Ok(TestDb {
            url: server.url.clone(),
            schema: format!("t{}_{n}_{salt}", std::process::id()),
            drop_schema: !server.throwaway && std::env::var_os(KEEP_ENV).is_none(),
            own_database: None,
        })
    }

    /// Like [`TestDb::new`], in a database of its own (for tests whose figures other
    /// sessions of the same database would disturb, such as vacuum's). Needs the right to
    /// create databases. Panics when no server can be had.
    pub async fn new_database() -> Self {
        match Self::try_new_database().await {
            Ok(db) => db,
            Err(e) => panic!("no test database: {e}"),
        }
    }

    /// Like [`TestDb::new_database`], returning the error instead of panicking.
    pub async fn try_new_database() -> Result<Self, Error> {
        let mut db = Self::try_new().await?;
        let name = format!("db_{}", db.schema);
        let admin = connect(&db.url).await?;
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .map_err(|source| Error::Sql {
                what: "create a test database",
                source,
            })?;
        let own_url = database_url(&db.url, &name);
        let server_url = std::mem::replace(&mut db.url, own_url);
        db.own_database = Some((server_url, name));
        db.drop_schema = false;
        Ok(db)
    }

    /// The connection URL of the test database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// This test's schema name (letters, digits and `_` only; no quoting needed).
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// A new connection to the test database, its connection task spawned on the current
    /// tokio runtime.
    pub async fn connect(&self) -> Result<tokio_postgres::Client, Error> {
        connect(&self.url).await
    }
}

fn server_is_throwaway() -> bool {
    matches!(SERVER.get(), Some(Ok(s)) if s.throwaway)
}

/// Connects to `url` without TLS and spawns the connection task.
pub(crate) async fn connect(url: &str) -> Result<tokio_postgres::Client, Error> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|source| Error::Sql {
            what: "connect to the test database",
            source,
        })?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// `url` with its database name replaced by `name`.
fn database_url(url: &str, name: &str) -> String {
    // URLs made here and the usual DATABASE_URLs are `postgres://user@host:port/db?params`.
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..].find('/').map(|i| i + scheme_end);
    let host = path_start.map_or(base, |i| &base[..i]);
    format!("{host}/{name}{query}")
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let keep = std::env::var_os(KEEP_ENV).is_some();
        let (url, sql) = match (&self.own_database, self.drop_schema) {
            (Some((server, name)), _) => {
                if keep || server_is_throwaway() {
                    return;
                }
                (
                    server.clone(),
                    format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
                )
            }
            (None, true) => (
                self.url.clone(),
                format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema),
            ),
            (None, false) => return,
        };
        // Drop runs outside async context guarantees, so do the work on a thread of its own.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(client) = connect(&url).await {
                    let _ = client.batch_execute(&sql).await;
                }
            });
        })
        .join();
    }
}
