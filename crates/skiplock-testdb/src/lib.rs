//! PostgreSQL for tests, the way skiplock's own suite gets it.
//!
//! [`TestDb::new`] hands each test a fresh, uniquely named schema on a real server:
//!
//! - with `DATABASE_URL` set, on that database (schemas are dropped again when the test ends);
//! - otherwise on a throwaway cluster that this process starts once from the local PostgreSQL
//!   server binaries (see [`find_pg_bin`]) in a temporary folder, and that is stopped and
//!   deleted when the process exits. As root the server runs as the `postgres` user.
//!
//! One cluster per test process and one schema per test, so tests run in parallel.
//!
//! ```no_run
//! # async fn demo() {
//! let db = skiplock_testdb::TestDb::new().await;
//! // Point the code under test at db.url() with schema db.schema().
//! # }
//! ```
//!
//! The cluster itself is [`skiplock_embedded`]'s [`LocalCluster`], re-exported here with the
//! rest of that crate's face, for a cluster you keep.
#![warn(missing_docs)]

mod bouncer;
pub mod proxy;
mod testdb;

pub use bouncer::{PgBouncer, REQUIRE_PGBOUNCER_ENV};
pub use proxy::FaultProxy;
pub use skiplock_embedded::{
    find_pg_bin, LocalCluster, StartOptions, PG_BIN_ENV, SERVER_USER, SUPERUSER,
};
pub use testdb::{server_url, TestDb, KEEP_ENV};

use std::path::{Path, PathBuf};

/// Why a server or a test database could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable server: binaries missing, `initdb` or `pg_ctl` failed.
    #[error("{0}")]
    NoServer(String),
    /// A file-system or process operation failed.
    #[error("could not {what} {}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path (or program) involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Talking to the server failed.
    #[error("{what}")]
    Sql {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: tokio_postgres::Error,
    },
}

impl From<skiplock_embedded::Error> for Error {
    fn from(e: skiplock_embedded::Error) -> Self {
        match e {
            skiplock_embedded::Error::Io { what, path, source } => Error::Io { what, path, source },
            other => Error::NoServer(other.to_string()),
        }
    }
}

impl Error {
    pub(crate) fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.to_owned(),
            source,
        }
    }
}
