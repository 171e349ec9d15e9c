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
    /// Of the queued jobs, those held: waiting for their turn in a sequence, not for time.
    pub held: i64,
    /// Jobs `running` (a pause lets them finish).
    pub running: i64,
    /// Its limits (concurrency, per key, rate).
    pub limits: crate::QueueLimits,
    /// Why its last claim left ready jobs behind, if it did: `"slots"` (a full concurrency
    /// or per-key limit) or `"rate"` (a full rate window).
    pub bound: Option<String>,
    /// Who set its limits, if the call said.
    pub limits_by: Option<String>,
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
