//! What the command reports when it fails, and with which exit status: 1 for a database or
//! runtime error, 2 for a usage error or input that was refused, 128 + N for a draining
//! worker stopped by signal N (130 for SIGINT, 143 for SIGTERM).

/// Input the command refused (exit status 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A draining worker (`work --drain`) stopped by a signal before nothing was left: exit
/// status 128 + the signal (130 for SIGINT, 143 for SIGTERM).
#[derive(Debug)]
pub struct Interrupted {
    /// The signal's number.
    pub signal: i32,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.signal {
            2 => "SIGINT",
            15 => "SIGTERM",
            _ => "a signal",
        };
        write!(
            f,
            "interrupted by {name} before the queues were drained (the jobs it was running were handed back)"
        )
    }
}

impl std::error::Error for Interrupted {}

/// The exit status of an interrupted drain (128 + the signal), if `e` is one.
pub fn interrupted_status(e: &anyhow::Error) -> Option<u8> {
    e.chain()
        .find_map(|c| c.downcast_ref::<Interrupted>())
        .and_then(|i| u8::try_from(128 + i.signal).ok())
}

/// A refusal of the user's input.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// Adds a hint to "relation does not exist" errors: the schema has not been migrated.
pub fn schema_hint(e: skiplock::Error, schema: &str) -> anyhow::Error {
    let missing = e
        .code()
        .is_some_and(|c| *c == tokio_postgres::error::SqlState::UNDEFINED_TABLE);
    let e = anyhow::Error::from(e);
    if missing {
        e.context(format!(
            "schema {schema} has no skiplock tables; run `skiplock --schema {schema} migrate` first"
        ))
    } else {
        e
    }
}

/// Whether a failure is input the command refused (exit status 2), not a database or runtime
/// error (1): a usage error, or an argument skiplock or its benchmarks refused.
pub fn is_usage(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<UsageError>().is_some()
            || c.downcast_ref::<skiplock::Error>()
                .is_some_and(skiplock::Error::is_invalid_input)
            || c.downcast_ref::<skiplock_bench::Error>()
                .is_some_and(skiplock_bench::Error::is_invalid_input)
    })
}

/// Whether a failure is that no connection could be had (the message then names the
/// database).
pub fn is_reaching_db(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        let library = c.downcast_ref::<skiplock::Error>().or_else(|| {
            match c.downcast_ref::<skiplock_bench::Error>() {
                Some(skiplock_bench::Error::Skiplock(e)) => Some(e),
                _ => None,
            }
        });
        matches!(library, Some(skiplock::Error::Pool { .. }))
    })
}
