//! The crate's error type.

/// What went wrong in a benchmark or an experiment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A skiplock call failed (an argument it refused, the database, the pool).
    #[error(transparent)]
    Skiplock(#[from] skiplock::Error),

    /// One of this crate's statements failed while doing `op`.
    #[error("could not {op}")]
    Database {
        /// What we were doing.
        op: &'static str,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },

    /// An argument was refused before anything ran.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// Which argument.
        what: &'static str,
        /// Why, in plain words.
        reason: String,
    },

    /// An option of a [`suite`](crate::suite) run was refused before anything ran; the
    /// message names it as `skiplock bench` spells it (`--jobs must be at least 1`).
    #[error("{message}")]
    Refused {
        /// What was refused, and why.
        message: String,
    },

    /// A task of the scenario failed (it panicked or was cancelled): a runtime failure, not
    /// a refused input.
    #[error("{what} failed")]
    Task {
        /// Which task (`a claimer task`, `an enqueue task`, ...).
        what: &'static str,
        /// Why it ended.
        #[source]
        source: tokio::task::JoinError,
    },

    /// A run did not do what it set out to (jobs not done, or not all enqueued).
    #[error("the run did not finish: {what}")]
    Incomplete {
        /// What was missing.
        what: String,
    },

    /// A worker process of the scenario could not be started, or did not end well.
    #[error("{what}")]
    Process {
        /// What happened (`cannot start PROGRAM`, `a worker process ended with STATUS`).
        what: String,
        /// The operating system's error, when there is one.
        #[source]
        source: Option<std::io::Error>,
    },

    /// The plot of a run could not be drawn or written (`could not write plot.svg: ...`).
    #[error("could not {what}")]
    Output {
        /// What, and why when there is no I/O error to say it.
        what: String,
        /// The operating system's error, when there is one.
        #[source]
        source: Option<std::io::Error>,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether the input was refused before anything ran.
    pub fn is_invalid_input(&self) -> bool {
        match self {
            Error::Invalid { .. } | Error::Refused { .. } => true,
            Error::Skiplock(e) => e.is_invalid_input(),
            _ => false,
        }
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            reason: reason.into(),
        }
    }

    pub(crate) fn refused(message: impl Into<String>) -> Self {
        Error::Refused {
            message: message.into(),
        }
    }

    /// A closure mapping a driver error to [`Error::Database`] for `op`.
    pub(crate) fn db(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Self {
        move |source| Error::Database { op, source }
    }

    /// A closure mapping a join error to [`Error::Task`] for `what`.
    pub(crate) fn task(what: &'static str) -> impl FnOnce(tokio::task::JoinError) -> Self {
        move |source| Error::Task { what, source }
    }

    /// A closure mapping an I/O error of a worker process to [`Error::Process`].
    pub(crate) fn process(what: String) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Error::Process {
            what,
            source: Some(source),
        }
    }
}
