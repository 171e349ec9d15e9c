//! A uniqueness rule ([`Unique`]), its conflict mode ([`OnConflict`]) and what a unique
//! enqueue did ([`Enqueued`]): the types a [`NewJob`](crate::NewJob) carries, apart from the
//! enqueue that enforces them.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::input;
use crate::job_id::JobId;

/// The longest explicit unique key accepted, in bytes.
pub const MAX_UNIQUE_KEY_LEN: usize = 1024;
/// The most payload fields a rule may name.
pub const MAX_UNIQUE_FIELDS: usize = 64;
/// The shortest time bucket a rule may have.
pub const MIN_UNIQUE_PERIOD: Duration = Duration::from_secs(1);

impl Unique {
    /// The longest unique key accepted, in bytes.
    pub const MAX_KEY_LEN: usize = MAX_UNIQUE_KEY_LEN;
    /// The most payload fields one rule may name.
    pub const MAX_FIELDS: usize = MAX_UNIQUE_FIELDS;
    /// The shortest uniqueness period.
    pub const MIN_PERIOD: Duration = MIN_UNIQUE_PERIOD;
}

/// What a job's uniqueness rule compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum By {
    /// The whole payload.
    Args,
    /// These top-level fields of the payload.
    Fields(Vec<String>),
    /// An explicit key.
    Key(String),
}

/// What an enqueue does when an active job with the same key exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnConflict {
    /// Leave the duplicate as it is; the new job is not enqueued (the default).
    #[default]
    Skip,
    /// Debounce: a still-queued duplicate takes the new job's payload and run_at (so a burst
    /// of enqueues with a delay runs once, that long after the last of them).
    Replace,
    /// Throttle: a still-queued duplicate takes the new job's payload but keeps its run_at.
    KeepRunAt,
}

impl OnConflict {
    pub(crate) fn replaces(self) -> bool {
        self != OnConflict::Skip
    }
}

/// A job's uniqueness rule: at most one active (queued or running) job per key.
///
/// The key is the job's kind plus one of: the whole payload ([`Unique::by_args`]), some of
/// its top-level fields ([`Unique::by_fields`]), or an explicit key ([`Unique::key`]);
/// optionally also the queue ([`Unique::by_queue`]) and a time bucket
/// ([`Unique::period`]). Payloads compare as `jsonb` values: key order and spacing do not
/// matter (numbers compare as written: `1` and `1.0` differ).
///
/// ```
/// use std::time::Duration;
/// use skiplock::{NewJob, OnConflict, Unique};
///
/// // One sync per account per hour, whatever else the payload holds.
/// let job = NewJob::new("sync", &serde_json::json!({ "account": 7, "reason": "login" }))
///     .unique(Unique::by_fields(["account"]).period(Duration::from_secs(3600)));
///
/// // Debounce: a burst of edits runs one reindex, 30 s after the last edit.
/// let job = NewJob::new("reindex", &serde_json::json!({ "doc": 42 }))
///     .delay(Duration::from_secs(30))
///     .unique(Unique::key("doc-42").on_conflict(OnConflict::Replace));
/// ```
///
/// A running duplicate blocks a new job by default; with [`Unique::queue_behind_running`] a
/// new job may queue while the duplicate runs (the running job gives up its key as it
/// starts). A job's own retry, snooze, lease expiry or hand-back never conflicts with its
/// own key. An operator's [`Client::retry`](crate::Client::retry) of a finished job whose key another active job
/// holds fails with [`Error::UniqueConflict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unique {
    pub(crate) by: By,
    pub(crate) by_queue: bool,
    pub(crate) period: Option<Duration>,
    pub(crate) on_conflict: OnConflict,
    pub(crate) queue_behind_running: bool,
}

impl Unique {
    fn new(by: By) -> Self {
        Unique {
            by,
            by_queue: false,
            period: None,
            on_conflict: OnConflict::Skip,
            queue_behind_running: false,
        }
    }

    /// Jobs of the same kind with equal payloads are the same.
    pub fn by_args() -> Self {
        Self::new(By::Args)
    }

    /// Jobs of the same kind whose payloads agree on these top-level fields are the same (a
    /// missing field counts as `null`). 1 to 64 field names.
    pub fn by_fields<I, S>(fields: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(By::Fields(fields.into_iter().map(Into::into).collect()))
    }

    /// Jobs of the same kind with this key are the same (1 to 1,024 bytes).
    pub fn key(key: impl Into<String>) -> Self {
        Self::new(By::Key(key.into()))
    }

    /// The queue is part of the key too: the same job in two queues is not a duplicate.
    pub fn by_queue(mut self) -> Self {
        self.by_queue = true;
        self
    }

    /// The key includes the time bucket `floor(now() / period)` (at least 1 s), by the
    /// database's clock (`now()`, the enqueuing transaction's start): at most one active job
    /// per key per bucket, e.g. once an hour with 1 h. A job from an earlier bucket that is
    /// still active does not block one of the next.
    pub fn period(mut self, period: Duration) -> Self {
        self.period = Some(period);
        self
    }

    /// What to do when a duplicate is active (default [`OnConflict::Skip`]). A running
    /// duplicate is never changed.
    pub fn on_conflict(mut self, mode: OnConflict) -> Self {
        self.on_conflict = mode;
        self
    }

    /// A running duplicate does not block: the new job queues behind it. Only a queued
    /// duplicate does. (Default: a queued or running duplicate blocks.)
    ///
    /// The job gives up its key when a worker starts it, so that a retry, snooze or
    /// hand-back of it never conflicts with the job queued behind it; it is then no longer
    /// unique (two such jobs may be queued after it fails and retries).
    pub fn queue_behind_running(mut self) -> Self {
        self.queue_behind_running = true;
        self
    }

    /// Validates the rule; returns the period in microseconds (0: none).
    pub(crate) fn check(&self) -> Result<i64> {
        match &self.by {
            By::Args => {}
            By::Fields(fields) => {
                if fields.is_empty() || fields.len() > MAX_UNIQUE_FIELDS {
                    return Err(Error::invalid(
                        "unique fields",
                        format!("give 1 to {MAX_UNIQUE_FIELDS} field names"),
                    ));
                }
                if let Some(f) = fields
                    .iter()
                    .find(|f| f.is_empty() || f.len() > input::MAX_NAME_LEN || f.contains('\0'))
                {
                    return Err(Error::invalid(
                        "unique fields",
                        format!(
                            "field name {f:?} must be 1 to {} bytes, without NUL",
                            input::MAX_NAME_LEN
                        ),
                    ));
                }
            }
            By::Key(key) => {
                if key.is_empty() || key.len() > MAX_UNIQUE_KEY_LEN || key.contains('\0') {
                    return Err(Error::invalid(
                        "unique key",
                        format!("it must be 1 to {MAX_UNIQUE_KEY_LEN} bytes, without NUL"),
                    ));
                }
            }
        }
        match self.period {
            None => Ok(0),
            Some(p) if p < MIN_UNIQUE_PERIOD || p > input::MAX_DELAY => Err(Error::invalid(
                "unique period",
                format!("{p:?} is outside {MIN_UNIQUE_PERIOD:?} to 100 years"),
            )),
            Some(p) => input::micros("unique period", p),
        }
    }
}

/// What a unique enqueue did with one job.
#[must_use = "a unique enqueue may not have inserted the job"]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Enqueued {
    /// The job was inserted, with this id.
    Inserted(JobId),
    /// An active job with the same key exists (this id) and the new job was not inserted.
    /// With [`OnConflict::Replace`] or [`OnConflict::KeepRunAt`] a queued duplicate took the
    /// new payload (and run_at).
    Duplicate(JobId),
}

impl Enqueued {
    /// The id of the inserted job, or of its duplicate.
    pub fn id(self) -> JobId {
        match self {
            Enqueued::Inserted(id) | Enqueued::Duplicate(id) => id,
        }
    }

    /// Whether the job was inserted.
    pub fn is_inserted(self) -> bool {
        matches!(self, Enqueued::Inserted(_))
    }

    /// Whether the job was a duplicate of an active job.
    pub fn is_duplicate(self) -> bool {
        matches!(self, Enqueued::Duplicate(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::NewJob;

    #[test]
    fn rules_are_checked() {
        assert!(Unique::by_args().check().is_ok());
        assert!(Unique::by_fields(Vec::<String>::new()).check().is_err());
        assert!(Unique::by_fields(["a", ""]).check().is_err());
        assert!(Unique::key("").check().is_err());
        assert!(Unique::key("a\0b").check().is_err());
        assert!(Unique::key("k".repeat(MAX_UNIQUE_KEY_LEN + 1))
            .check()
            .is_err());
        assert!(Unique::key("k")
            .period(Duration::from_millis(999))
            .check()
            .is_err());
        assert_eq!(
            Unique::key("k")
                .period(Duration::from_secs(3600))
                .check()
                .ok(),
            Some(3_600_000_000)
        );
    }

    #[test]
    fn plain_enqueue_refuses_a_rule() {
        let job = NewJob::new("k", &1).unique(Unique::by_args());
        assert!(job.encode(1024).unwrap_err().is_invalid_input());
    }
}
