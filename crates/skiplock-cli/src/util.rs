//! What every command shares: the database target, durations, URL redaction, output.

use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use skiplock::Client;

use crate::database;

/// Input the command refused (exit status 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A refusal of the user's input.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// The database and schema a command works on.
pub struct Target {
    pub url: Option<String>,
    pub schema: String,
    pub server_timeouts: bool,
}

impl Target {
    /// The URL: the given one, or the embedded default's (created, started and migrated on
    /// first use).
    pub async fn url(&self) -> anyhow::Result<String> {
        match self.url.as_deref().filter(|u| !u.trim().is_empty()) {
            Some(u) => Ok(u.to_owned()),
            None => {
                let url = tokio::task::spawn_blocking(|| database::resolve(None))
                    .await
                    .context("the embedded database task failed")??;
                Ok(url)
            }
        }
    }

    /// A client on the target. On the embedded default the schema is migrated first, so
    /// that a new user can start with any command.
    pub async fn client(&self, pool_size: usize) -> anyhow::Result<Client> {
        self.client_with(pool_size, true).await
    }

    /// A client on the target with named prepared statements on or off.
    pub async fn client_prepared(
        &self,
        pool_size: usize,
        prepared: bool,
    ) -> anyhow::Result<Client> {
        self.build(pool_size, true, prepared).await
    }

    /// A client on the target, migrating the embedded default only if `auto_migrate`.
    pub async fn client_with(
        &self,
        pool_size: usize,
        auto_migrate: bool,
    ) -> anyhow::Result<Client> {
        self.build(pool_size, auto_migrate, false).await
    }

    async fn build(
        &self,
        pool_size: usize,
        auto_migrate: bool,
        prepared: bool,
    ) -> anyhow::Result<Client> {
        let embedded = auto_migrate && self.url.as_deref().is_none_or(|u| u.trim().is_empty());
        let url = self.url().await?;
        let client = Client::builder(url)
            .schema(&self.schema)
            .pool_size(pool_size.max(1))
            .application_name("skiplock-cli")
            .server_timeouts(self.server_timeouts.then(skiplock::ServerTimeouts::default))
            .prepared_statements(prepared)
            .build()?;
        if embedded {
            client.migrate().await?;
        }
        Ok(client)
    }
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

/// Parses `250ms`, `30s`, `5m`, `2h`, `7d` (or a plain number of seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("{s:?} is not a duration like 500ms, 30s, 5m, 2h or 7d ({e})"))
}

/// A duration, or `off`.
pub fn parse_optional_duration(s: &str) -> Result<Option<Duration>, String> {
    if matches!(s.trim(), "off" | "none" | "0") {
        Ok(None)
    } else {
        parse_duration(s).map(Some)
    }
}

/// The URL with its password hidden.
pub fn redact(url: &str) -> String {
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        let auth_end = rest.find('@');
        let path_start = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = auth_end.filter(|at| *at < path_start) {
            let auth = &rest[..at];
            if let Some(colon) = auth.find(':') {
                return format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &auth[..colon],
                    &rest[at..]
                );
            }
        }
        return url.to_owned();
    }
    // key=value form
    url.split_whitespace()
        .map(|kv| {
            if kv.starts_with("password=") {
                "password=***"
            } else {
                kv
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// RFC 3339 in UTC, or `-`.
pub fn time(t: Option<SystemTime>) -> String {
    t.map_or_else(
        || "-".to_owned(),
        |t| humantime::format_rfc3339_seconds(t).to_string(),
    )
}

/// Prints one JSON value on one line.
pub fn print_json(v: &serde_json::Value) {
    outln!("{v}");
}

/// Writes to standard output or error, dropping the text if it cannot be written: a reader
/// that went away (`skiplock stats | head -1`, a log pipe closed under a worker) must neither
/// make the command panic, as `outln!` does on a closed pipe, nor stop its work.
pub fn write_quietly(mut w: impl std::io::Write, args: std::fmt::Arguments<'_>, newline: bool) {
    let _ = if newline {
        writeln!(w, "{args}")
    } else {
        write!(w, "{args}")
    };
    let _ = w.flush();
}

/// `out!` that never panics (see [`write_quietly`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::util::write_quietly(::std::io::stdout().lock(), format_args!($($arg)*), false)
    };
}

/// `outln!` that never panics (see [`write_quietly`]).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::util::write_quietly(::std::io::stdout().lock(), format_args!($($arg)*), true)
    };
}

/// `errln!` that never panics (see [`write_quietly`]).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::util::write_quietly(::std::io::stderr().lock(), format_args!($($arg)*), true)
    };
}

pub(crate) use {errln, out, outln};

/// The log's writer: standard error, write errors ignored (a closed log pipe drops the lines,
/// the work goes on).
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietStderr;

impl std::io::Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x?sslmode=require"),
            "postgres://app:***@db:5432/x?sslmode=require"
        );
        assert_eq!(redact("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(
            redact("host=db password=s3cret user=app"),
            "host=db password=*** user=app"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("12"), Ok(Duration::from_secs(12)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_optional_duration("off"), Ok(None));
    }
}
