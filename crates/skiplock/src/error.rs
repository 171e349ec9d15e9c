//! The library's error type.

/// What went wrong in a skiplock call.
///
/// Each variant names *our* operation; the driver's error, when there is one, is the
/// [`source`](std::error::Error::source), not repeated in the message. Print the whole chain
/// (for example with `anyhow`'s `{:#}`) to see the database's own words.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was refused before any SQL ran. Nothing was written.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// Which argument (`queue name`, `payload`, `max_attempts`, ...).
        what: &'static str,
        /// Why, in plain words.
        reason: String,
    },

    /// One job of a batch was refused before any SQL ran. The batch is all-or-nothing:
    /// nothing of it was written.
    #[error("job {index} of the batch (counting from 0) was refused, so none was enqueued")]
    InvalidBatchItem {
        /// The position of the refused job in the batch.
        index: usize,
        /// Why it was refused (an [`Error::Invalid`]).
        #[source]
        source: Box<Error>,
    },

    /// The database returned an error, or the connection failed, while doing `op`.
    #[error("could not {op}")]
    Database {
        /// What we were doing, e.g. `claim jobs`.
        op: &'static str,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },

    /// A value read from the database is not one this skiplock knows while doing `op`, for
    /// example a job status other than the four states (a schema changed by hand, or by a
    /// newer skiplock). The message shows the value.
    #[error("could not {op}: {detail}")]
    Decode {
        /// What we were doing.
        op: &'static str,
        /// What was read, and why it was refused.
        detail: String,
    },

    /// Another session kept the job's row locked for seconds while doing `op` (a manual
    /// [`Client::complete`](crate::Client::complete), [`fail`](crate::Client::fail) or
    /// [`extend`](crate::Client::extend)). Nothing was written; the call may be repeated.
    #[error("could not {op}: job {id}'s row stayed locked by another session")]
    Busy {
        /// What we were doing.
        op: &'static str,
        /// The job.
        id: crate::job_id::JobId,
    },

    /// The database gave no reply within `after` while doing `op` (a half-open connection,
    /// a partition): the connection was closed. Whether the statement took effect is
    /// unknown.
    #[error("could not {op}: no reply from the database within {after:?}")]
    NoReply {
        /// What we were doing.
        op: &'static str,
        /// How long we waited.
        after: std::time::Duration,
    },

    /// No connection could be had from the pool while doing `op`.
    #[error("could not get a database connection to {op}")]
    Pool {
        /// What we were about to do.
        op: &'static str,
        /// The pool's error.
        #[source]
        source: deadpool_postgres::PoolError,
    },

    /// A migration failed; its transaction was rolled back, so the schema is as it was.
    #[error("migration {version} ({name}) failed")]
    Migration {
        /// The migration's version number.
        version: i32,
        /// The migration's name.
        name: &'static str,
        /// The database's error.
        #[source]
        source: tokio_postgres::Error,
    },

    /// The schema was migrated by a newer skiplock than this one.
    #[error(
        "schema {schema} is at migration {found}, newer than this skiplock knows ({known}); \
         upgrade skiplock"
    )]
    SchemaTooNew {
        /// The schema's name.
        schema: String,
        /// The version recorded in the schema.
        found: i32,
        /// The newest version this build knows.
        known: i32,
    },

    /// An operator's retry would have made job `id` active while job `duplicate` is active
    /// with the same unique key (or is retried with it in the same call). Nothing was
    /// retried.
    #[error(
        "could not retry job {id}: job {duplicate} is active with the same unique key; \
         nothing was retried"
    )]
    UniqueConflict {
        /// The job that was to be retried.
        id: crate::job_id::JobId,
        /// The active job with its key.
        duplicate: crate::job_id::JobId,
    },

    /// A unique enqueue met an active duplicate that had finished again each time it looked
    /// it up. Nothing more is known about the jobs of this call; through a transaction of
    /// the caller's, roll it back. Try again.
    #[error("could not enqueue jobs: the duplicates of their unique keys kept finishing")]
    UniqueChurn,

    /// [`JobContext::complete_tx`](crate::JobContext::complete_tx) found the job no longer
    /// this attempt's (its lease expired and another attempt started, or it was cancelled):
    /// nothing was written. Roll the transaction back, so that its writes go with it.
    #[error("job {id} is no longer this attempt's ({attempt}): roll its transaction back")]
    LeaseLost {
        /// The job.
        id: crate::JobId,
        /// The attempt that tried to complete it.
        attempt: i32,
    },

    /// A handler asked [`JobContext::data`](crate::JobContext::data) for application state
    /// of a type nobody gave the worker ([`WorkerBuilder::data`](crate::WorkerBuilder::data)).
    #[error(
        "no value of type {type_name} was given to the worker: add it with \
         WorkerBuilder::data (or Registry::data)"
    )]
    MissingData {
        /// The type asked for.
        type_name: &'static str,
    },

    /// One of a worker's own tasks (a queue's claim loop, the outcome writer, a background
    /// service) panicked; the worker shut down (its jobs handed back, their outcomes
    /// written) instead of serving on without it. The message names the task.
    #[error("the worker stopped: {0}")]
    TaskDied(String),

    /// The database returned an error through sqlx while doing `op`.
    #[cfg(feature = "sqlx-0_8")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlx-0_8")))]
    #[error("could not {op}")]
    Sqlx {
        /// What we were doing.
        op: &'static str,
        /// sqlx's error.
        #[source]
        source: sqlx::Error,
    },
}

/// `Result` with skiplock's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            reason: reason.into(),
        }
    }

    /// A closure mapping a driver error to [`Error::Database`] for `op`.
    pub(crate) fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Self {
        move |source| Error::Database { op, source }
    }

    /// A closure mapping an sqlx error to [`Error::Sqlx`] for `op`.
    #[cfg(feature = "sqlx-0_8")]
    pub(crate) fn sqlx(op: &'static str) -> impl FnOnce(sqlx::Error) -> Self {
        move |source| Error::Sqlx { op, source }
    }

    /// Whether the input was refused before any SQL ran.
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, Error::Invalid { .. } | Error::InvalidBatchItem { .. })
    }

    /// The database's error report, when the database returned one.
    pub fn as_db_error(&self) -> Option<&tokio_postgres::error::DbError> {
        match self {
            Error::Database { source, .. } | Error::Migration { source, .. } => {
                source.as_db_error()
            }
            _ => None,
        }
    }

    /// The SQLSTATE code, when the database returned one.
    pub fn code(&self) -> Option<&tokio_postgres::error::SqlState> {
        match self {
            Error::Database { source, .. } | Error::Migration { source, .. } => source.code(),
            _ => None,
        }
    }
}

/// `e` and its sources on one line, each after a `: `, for the log.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s.replace('\n', " ")
}
