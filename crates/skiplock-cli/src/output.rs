//! What the command prints: standard output and error written so that a reader that went
//! away never makes it panic, JSON lines, times.

use std::time::SystemTime;

/// RFC 3339 in UTC to the second, or `-`. Any time PostgreSQL stores prints: years before 1
/// or after 9999 with their sign (`-0044-03-15T00:00:00Z`, `+10000-01-01T00:00:00Z`),
/// PostgreSQL's `infinity` and `-infinity` as those words.
pub fn time(t: Option<SystemTime>) -> String {
    let Some(t) = t else {
        return "-".to_owned();
    };
    // Nanoseconds from 1970, signed: a SystemTime before 1970 is an error of duration_since.
    let nanos: i128 = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_nanos()).unwrap_or(i128::MAX),
        Err(e) => i128::try_from(e.duration().as_nanos()).map_or(i128::MIN, |n| -n),
    };
    // PostgreSQL counts microseconds from 2000-01-01; its infinities are the i64 extremes.
    const PG_EPOCH_SECS: i128 = 946_684_800;
    let pg_micros = (nanos - PG_EPOCH_SECS * 1_000_000_000).div_euclid(1000);
    if pg_micros >= i128::from(i64::MAX) {
        return "infinity".to_owned();
    }
    if pg_micros <= i128::from(i64::MIN) {
        return "-infinity".to_owned();
    }
    let secs = nanos.div_euclid(1_000_000_000);
    let at = i64::try_from(secs)
        .ok()
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0));
    match at {
        Some(at) => at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => format!("{secs} s from 1970-01-01T00:00:00Z"),
    }
}

/// Whether text written to a stream may carry colour: only on a terminal (`terminal`), and
/// never with `NO_COLOR` set to a non-empty value (<https://no-color.org>).
pub fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A progress bar of `len` steps on standard error, drawn only there and only on a terminal:
/// hidden (nothing written at all) when standard error is not one, or when `hidden`.
/// `template` is indicatif's, without colours.
pub fn progress(len: u64, template: &str, hidden: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal as _;
    if hidden || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(len),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// A spinner with `message` and the time elapsed, on standard error, as [`progress`] draws:
/// for work whose length is not known. Finish it with `finish_and_clear`.
pub fn spinner(message: String, hidden: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal as _;
    if hidden || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.set_message(message);
    bar.enable_steady_tick(std::time::Duration::from_millis(100));
    bar
}

/// Prints one JSON value on one line.
pub fn print_json(v: &serde_json::Value) {
    outln!("{v}");
}

/// Writes to standard output or error, dropping the text if it cannot be written: a reader
/// that went away (`skiplock stats | head -1`, a log pipe closed under a worker) must neither
/// make the command panic, as `outln!` does on a closed pipe, nor stop its work.
pub fn write_quietly(mut w: impl std::io::Write, args: std::fmt::Arguments<'_>, newline: bool) {
    let _ = write_flushed(&mut w, args, newline);
}

fn write_flushed(
    w: &mut impl std::io::Write,
    args: std::fmt::Arguments<'_>,
    newline: bool,
) -> std::io::Result<()> {
    if newline {
        writeln!(w, "{args}")?;
    } else {
        write!(w, "{args}")?;
    }
    w.flush()
}

/// The first failure to write standard output, other than a reader that went away.
static STDOUT_FAILURE: std::sync::Mutex<Option<std::io::Error>> = std::sync::Mutex::new(None);

/// Writes to standard output like [`write_quietly`], and remembers a failure to write it (a
/// full disk, an I/O error) so that the command ends with exit status 1 and says so (see
/// [`stdout_failure`]). A reader that went away (a closed pipe) is not such a failure.
pub fn write_stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = write_flushed(&mut out, args, newline) {
        remember(e);
    }
}

fn remember(e: std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return;
    }
    if let Ok(mut first) = STDOUT_FAILURE.lock() {
        first.get_or_insert(e);
    }
}

/// Flushes standard output and returns the first failure to write it, if any (a closed pipe
/// is not one).
pub fn stdout_failure() -> Option<std::io::Error> {
    if let Err(e) = std::io::Write::flush(&mut std::io::stdout().lock()) {
        remember(e);
    }
    STDOUT_FAILURE.lock().ok().and_then(|mut f| f.take())
}

/// `out!` that never panics (see [`write_stdout`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*), false)
    };
}

/// `outln!` that never panics (see [`write_stdout`]).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*), true)
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
