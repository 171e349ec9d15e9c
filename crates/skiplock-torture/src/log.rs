//! The execution log: one append-only file per worker process, one line per event, written
//! with a single `write` each (O_APPEND), outside the database, so that it survives the
//! worker being killed and says what really ran.
//!
//! `S <job> <attempt> <pid> <ms>` when an execution starts and
//! `E <job> <attempt> <ok|err> <pid> <ms>` when it ends.

use std::io::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

pub fn append(path: &Path, line: &str) {
    let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    else {
        eprintln!("torture: cannot open the execution log {}", path.display());
        return;
    };
    let _ = f.write_all(format!("{line}\n").as_bytes());
}

pub fn start(path: &Path, job: i64, attempt: i32) {
    append(
        path,
        &format!("S {job} {attempt} {} {}", std::process::id(), now_ms()),
    );
}

pub fn end(path: &Path, job: i64, attempt: i32, ok: bool) {
    let r = if ok { "ok" } else { "err" };
    append(
        path,
        &format!("E {job} {attempt} {r} {} {}", std::process::id(), now_ms()),
    );
}

/// One parsed line.
#[derive(Debug, Clone)]
pub struct Event {
    pub start: bool,
    pub job: i64,
    pub attempt: i32,
    pub ok: bool,
    /// When, in milliseconds since the epoch by the writer's wall clock.
    pub ms: i64,
}

/// The events of one log; `offset_ms` is subtracted from their times (a worker whose clock
/// was set ahead).
pub fn read(path: &Path, offset_ms: i64) -> Vec<Event> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (start, job, attempt, ok, ms) = match f.as_slice() {
                ["S", job, attempt, _pid, ms] => (true, job, attempt, false, ms),
                ["E", job, attempt, r, _pid, ms] => (false, job, attempt, *r == "ok", ms),
                _ => return None,
            };
            Some(Event {
                start,
                job: job.parse().ok()?,
                attempt: attempt.parse().ok()?,
                ok,
                ms: ms.parse::<i64>().ok()? - offset_ms,
            })
        })
        .collect()
}
