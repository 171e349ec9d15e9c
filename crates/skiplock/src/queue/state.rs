//! A queue's state as the queue statements read it (the types `db::queue` fills in).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One queue's state ([`Client::queues`](crate::Client::queues)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueState {
    /// The queue.
    pub queue: String,
    /// Whether it is paused: no worker claims from it.
    pub paused: bool,
    /// When the pause began (database clock); `None` when not paused.
    pub paused_at: Option<SystemTime>,
    /// Who paused it, if the pausing call said.
    pub paused_by: Option<String>,
    /// The last pause or resume; `None` for a queue that was never paused.
    pub updated_at: Option<SystemTime>,
    /// Jobs `queued` (ready now or scheduled).
    pub queued: i64,
    /// Of those, ready now (they wait for the resume when the queue is paused).
    pub ready: i64,
    /// Jobs `running` (a pause lets them finish).
    pub running: i64,
}

/// Microseconds since the epoch (as the queue statements return times) as a time.
pub(crate) fn time(us: Option<i64>) -> Option<SystemTime> {
    let us = us?;
    let d = Duration::from_micros(us.unsigned_abs());
    if us >= 0 {
        UNIX_EPOCH.checked_add(d)
    } else {
        UNIX_EPOCH.checked_sub(d)
    }
}
