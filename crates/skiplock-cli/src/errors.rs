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

/// Turns "relation does not exist" errors into the refusal of a schema that has not been
/// migrated (exit status 2, naming `migrate`).
pub fn schema_hint(e: skiplock::Error, schema: &str) -> anyhow::Error {
    let missing = e
        .code()
        .is_some_and(|c| *c == tokio_postgres::error::SqlState::UNDEFINED_TABLE);
    if missing {
        crate::connect::missing_schema(schema)
    } else {
        anyhow::Error::from(e)
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

/// The whole cause chain on one line, `outer: cause: its cause`, with the database's
/// multi-line reports folded. A cause whose text the one before it already contains is left
/// out (drivers repeat their cause in their own message: "error connecting to server:
/// Connection refused" over "Connection refused").
pub fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string().replace('\n', " ");
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        if parts.last().is_some_and(|prev| prev.contains(text)) {
            continue;
        }
        parts.push(text.to_owned());
    }
    if parts.is_empty() {
        return "unknown error".to_owned();
    }
    parts.join(": ")
}

/// A clap usage error on one line: its message with what it names (the missing argument,
/// the allowed values, a suggestion), without the usage block and the `--help` pointer.
pub fn clap_one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut parts: Vec<&str> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if line.is_empty() {
            continue;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line));
    }
    if parts.is_empty() {
        return "invalid arguments".to_owned();
    }
    // "…were not provided:" is followed by the arguments it names, an invalid value by
    // "[possible values: …]", other messages by a "tip: …".
    let mut msg = String::new();
    for p in parts {
        if !msg.is_empty() {
            msg.push_str(if msg.ends_with(':') || p.starts_with('[') {
                " "
            } else {
                "; "
            });
        }
        msg.push_str(p);
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_repeated_by_its_parent_is_printed_once() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let inner = E("Connection refused (os error 111)", None);
        let driver = E(
            "error connecting to server: Connection refused (os error 111)",
            Some(Box::new(inner)),
        );
        let pool = E(
            "error connecting to server: Connection refused (os error 111)",
            Some(Box::new(driver)),
        );
        let e = anyhow::Error::new(pool)
            .context("could not get a database connection to enqueue a job");
        assert_eq!(
            one_line(&e),
            "could not get a database connection to enqueue a job: error connecting to server: \
             Connection refused (os error 111)"
        );
    }
}
