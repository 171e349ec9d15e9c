//! What the command prints: standard output and error written so that a reader that went
//! away never makes it panic, JSON lines, times.

use std::time::SystemTime;

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
        $crate::output::write_quietly(::std::io::stdout().lock(), format_args!($($arg)*), false)
    };
}

/// `outln!` that never panics (see [`write_quietly`]).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_quietly(::std::io::stdout().lock(), format_args!($($arg)*), true)
    };
}

/// `errln!` that never panics (see [`write_quietly`]).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write_quietly(::std::io::stderr().lock(), format_args!($($arg)*), true)
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
