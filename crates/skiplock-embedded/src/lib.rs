//! A local PostgreSQL cluster in a folder of its own, run from the local server binaries.
//!
//! [`LocalCluster`] creates (`initdb`), starts, reports on and stops a cluster kept in one
//! folder; [`find_pg_bin`] finds the server binaries it runs. The `skiplock` command's
//! embedded default database and its torture harness use it, and so does `skiplock-testdb`
//! for the throwaway cluster of a test process.
//!
//! ```no_run
//! use skiplock_embedded::{LocalCluster, StartOptions};
//!
//! # fn demo() -> Result<(), skiplock_embedded::Error> {
//! let cluster = LocalCluster::new("./.pg")?;
//! if !cluster.is_initialized() {
//!     cluster.init()?;
//! }
//! let port = cluster.start(&StartOptions::default())?;
//! println!("{}", LocalCluster::url(port, "postgres"));
//! cluster.stop(false)?;
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod bindir;
mod cluster;
mod watchdog;

pub use bindir::{find_pg_bin, PG_BIN_ENV};
pub use cluster::{free_port, LocalCluster, StartOptions, SERVER_USER, SUPERUSER};
pub use watchdog::kill_on_exit;

use std::path::{Path, PathBuf};

/// Why a server could not be had, or a cluster operation failed.
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
