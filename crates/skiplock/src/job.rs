//! Jobs: what is enqueued, what a claim hands out, and the states a job moves through.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::input;
pub use crate::job_id::JobId;

/// The four states of the article's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for `run_at`, then for a claim.
    Queued,
    /// Claimed; `locked_until` is the lease.
    Running,
    /// Completed.
    Done,
    /// Gave up: a permanent error, or `max_attempts` used up.
    Failed,
}

impl JobState {
    /// The value stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "done" => JobState::Done,
            "failed" => JobState::Failed,
            _ => return None,
        })
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The queue a job goes to unless told otherwise.
pub const DEFAULT_QUEUE: &str = "default";
/// The kind of a job inserted without one (the `kind` column's default: plain SQL inserts).
pub const DEFAULT_KIND: &str = "default";
/// The article's default `max_attempts`.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;

impl NewJob {
    /// The queue a job goes to unless told otherwise: `default`.
    pub const DEFAULT_QUEUE: &'static str = DEFAULT_QUEUE;
    /// Attempts before `failed` unless told otherwise: 5.
    pub const DEFAULT_MAX_ATTEMPTS: i32 = DEFAULT_MAX_ATTEMPTS;
    /// The kind a job stored without one gets (the column's default): `default`.
    pub const DEFAULT_KIND: &'static str = DEFAULT_KIND;
    /// The most attempts a job may be given.
    pub const MAX_ATTEMPTS: i32 = crate::input::MAX_ATTEMPTS_LIMIT;
    /// The longest queue or kind name, in bytes.
    pub const MAX_NAME_LEN: usize = crate::input::MAX_NAME_LEN;
    /// The most jobs one job may wait for ([`NewJob::after`]).
    pub const MAX_AFTER: usize = MAX_AFTER;
    /// The largest total payload size of one [`Client::enqueue_many`](crate::Client::enqueue_many) batch.
    pub const MAX_BATCH_BYTES: usize = MAX_BATCH_BYTES;
    /// The longest delay a job may be given.
    pub const MAX_DELAY: Duration = crate::input::MAX_DELAY;

    /// Checks a queue name as an enqueue would (1 to 128 characters from
    /// `[A-Za-z0-9_.-]`), for a program that takes one from its user before it has a job.
    pub fn check_queue(name: &str) -> crate::Result<()> {
        crate::input::queue_name(name)
    }

    /// Checks a key ([`NewJob::key`]) as an enqueue would.
    pub fn check_key(key: &str) -> crate::Result<()> {
        crate::input::job_key("job key", key)
    }

    /// Checks a sequence name ([`NewJob::sequence`]) as an enqueue would.
    pub fn check_sequence(sequence: &str) -> crate::Result<()> {
        crate::input::job_key("sequence", sequence)
    }
}

/// A job to enqueue: a kind (which handler runs it), a JSON payload and options.
///
/// ```
/// use std::time::Duration;
/// use skiplock::NewJob;
///
/// let job = NewJob::new("send_email", &serde_json::json!({ "to": "a@example.com" }))
///     .queue("emails")
///     .priority(-1)
///     .max_attempts(10)
///     .delay(Duration::from_secs(30));
/// ```
///
/// Nothing is checked until the job is enqueued; then every field is validated before any
/// SQL runs, and a refused job leaves the queue untouched.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub(crate) kind: String,
    pub(crate) payload: std::result::Result<String, String>,
    pub(crate) queue: String,
    pub(crate) priority: i16,
    pub(crate) max_attempts: i32,
    pub(crate) schedule: Schedule,
    pub(crate) unique: Option<crate::unique::rule::Unique>,
    pub(crate) key: Option<String>,
    pub(crate) sequence: Option<String>,
    pub(crate) after: Vec<JobId>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Schedule {
    Delay(Duration),
    At(SystemTime),
}

impl NewJob {
    /// A job of `kind` whose payload is `payload` serialized as JSON.
    pub fn new<T: Serialize + ?Sized>(kind: impl Into<String>, payload: &T) -> Self {
        Self::with_payload(
            kind.into(),
            serde_json::to_string(payload).map_err(|e| e.to_string()),
        )
    }

    /// A job of `kind` whose payload is JSON text (checked when enqueued).
    pub fn from_json(kind: impl Into<String>, json: impl Into<String>) -> Self {
        Self::with_payload(kind.into(), Ok(json.into()))
    }

    fn with_payload(kind: String, payload: std::result::Result<String, String>) -> Self {
        NewJob {
            kind,
            payload,
            queue: DEFAULT_QUEUE.to_owned(),
            priority: 0,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            schedule: Schedule::Delay(Duration::ZERO),
            unique: None,
            key: None,
            sequence: None,
            after: Vec::new(),
        }
    }

    /// The queue (default `"default"`): 1 to 128 characters from `[A-Za-z0-9_.-]`.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// The priority (default 0). Lower runs first; within a priority, earlier `run_at`, then
    /// lower id.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// How many times the job may be claimed before it is `failed` (default 5; 1 to 10,000).
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Run no earlier than `delay` after the database's `now()` at enqueue (at most 100 years).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.schedule = Schedule::Delay(delay);
        self
    }

    /// Run no earlier than `at` (a time in the past means at once).
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.schedule = Schedule::At(at);
        self
    }

    /// The job's key: a tenant, an account, an API host. A queue with a per-key limit
    /// ([`QueueLimits::per_key`](crate::QueueLimits::per_key)) runs at most that many jobs of
    /// one key at once, and shares its claims fairly across keys. 1 to 128 characters from
    /// `[A-Za-z0-9_.:@/-]`. A job without a key is subject to its queue's global limit and
    /// rate only.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The job's sequence: jobs of one sequence run one at a time, in the order they were
    /// enqueued (id order), each only once the one before has reached a final state (done,
    /// or failed for good or cancelled: a failed member does not stop the rest). Same
    /// characters as [`NewJob::key`]. Sequences span queues.
    pub fn sequence(mut self, sequence: impl Into<String>) -> Self {
        self.sequence = Some(sequence.into());
        self
    }

    /// Jobs this job waits for (its parents): it becomes ready only once every one of them is
    /// done, and ends `failed` (with a `last_error` naming it) if one of them fails for good
    /// or is cancelled or deleted. Calling it again adds to the list. At most 10,000; a job
    /// with parents cannot also belong to a sequence.
    ///
    /// Enqueueing refuses the job (and its whole batch) if a parent does not exist or has
    /// failed; a parent already done counts as satisfied. Parents are locked while the job
    /// is inserted, so a parent completing at that moment is never missed. To enqueue jobs
    /// together with the jobs they wait for, see [`Workflow`](crate::Workflow).
    pub fn after(mut self, parents: impl IntoIterator<Item = JobId>) -> Self {
        self.after.extend(parents);
        self
    }

    /// A uniqueness rule: at most one active (queued or running) job per key the rule
    /// derives. Enqueue such a job with [`Client::enqueue_unique`](crate::Client::enqueue_unique)
    /// or [`Client::enqueue_many_unique`](crate::Client::enqueue_many_unique) (and their `_tx`
    /// forms), which say whether it was inserted or was a duplicate; the plain `enqueue`
    /// calls refuse it, so that a duplicate is never skipped silently. See [`Unique`](crate::Unique).
    pub fn unique(mut self, rule: crate::unique::rule::Unique) -> Self {
        self.unique = Some(rule);
        self
    }

    /// Validates every field and turns the job into the values bound to the insert. A job
    /// with a uniqueness rule is refused: only the unique enqueues report duplicates.
    pub(crate) fn encode(&self, max_payload_bytes: usize) -> Result<EncodedJob> {
        if self.unique.is_some() {
            return Err(Error::invalid(
                "job",
                "it has a uniqueness rule; enqueue it with enqueue_unique or enqueue_many_unique, \
                 which say whether it was inserted or was a duplicate",
            ));
        }
        self.encode_base(max_payload_bytes)
    }

    /// [`NewJob::encode`] without a look at the uniqueness rule.
    pub(crate) fn encode_base(&self, max_payload_bytes: usize) -> Result<EncodedJob> {
        input::queue_name(&self.queue)?;
        input::kind_name(&self.kind)?;
        input::max_attempts(self.max_attempts)?;
        let payload = self
            .payload
            .as_ref()
            .map_err(|e| Error::invalid("payload", format!("it could not be serialized: {e}")))?;
        input::payload(payload, max_payload_bytes)?;
        if let Some(k) = &self.key {
            input::job_key("job key", k)?;
        }
        if let Some(s) = &self.sequence {
            input::job_key("sequence", s)?;
        }
        let (run_at_us, delay_us) = match self.schedule {
            Schedule::Delay(d) => (None, input::delay_micros(d)?),
            Schedule::At(t) => (Some(input::timestamp_micros(t)?), 0),
        };
        Ok(EncodedJob {
            queue: self.queue.clone(),
            kind: self.kind.clone(),
            payload: payload.clone(),
            priority: self.priority,
            max_attempts: self.max_attempts,
            run_at_us,
            delay_us,
            key: self.key.clone(),
            sequence: self.sequence.clone(),
            after: self.after_ids()?,
        })
    }

    /// The parents as bound: `None` for none; refused past [`MAX_AFTER`] or with a sequence.
    fn after_ids(&self) -> Result<Option<Vec<i64>>> {
        if self.after.is_empty() {
            return Ok(None);
        }
        if self.after.len() > MAX_AFTER {
            return Err(Error::invalid(
                "after",
                format!(
                    "{} jobs; a job may wait for at most {MAX_AFTER}",
                    self.after.len()
                ),
            ));
        }
        if self.sequence.is_some() {
            return Err(Error::invalid(
                "after",
                "the job also has a sequence; a job may wait for other jobs or belong to a sequence, not both",
            ));
        }
        let mut ids: Vec<i64> = self.after.iter().map(|j| j.0).collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(Some(ids))
    }
}

/// The most jobs one job may wait for ([`NewJob::after`]).
pub const MAX_AFTER: usize = 10_000;

/// A validated job, as bound to `job_insert.sql`.
#[derive(Debug, Clone)]
pub(crate) struct EncodedJob {
    pub queue: String,
    pub kind: String,
    pub payload: String,
    pub priority: i16,
    pub max_attempts: i32,
    pub run_at_us: Option<i64>,
    pub delay_us: i64,
    pub key: Option<String>,
    pub sequence: Option<String>,
    /// The jobs it waits for, sorted (`None`: none).
    pub after: Option<Vec<i64>>,
}

/// Validated jobs as one array per column, as bound to `job_insert_many.sql`.
#[derive(Debug, Default)]
pub(crate) struct EncodedBatch {
    pub queue: Vec<String>,
    pub kind: Vec<String>,
    pub payload: Vec<String>,
    pub priority: Vec<i16>,
    pub max_attempts: Vec<i32>,
    pub run_at_us: Vec<Option<i64>>,
    pub delay_us: Vec<i64>,
    pub key: Vec<Option<String>>,
    pub sequence: Vec<Option<String>>,
    /// Each job's parents as the text of an array (`{1,2}`), or `None`.
    pub after: Vec<Option<String>>,
}

/// The most payload bytes one batch may carry (PostgreSQL refuses messages over 1 GiB).
pub const MAX_BATCH_BYTES: usize = 256 * 1024 * 1024;

impl EncodedBatch {
    /// Counts the batch's jobs as enqueued (see [`crate::metrics::JOBS_ENQUEUED`]).
    pub(crate) fn count_enqueued(&self) {
        crate::metrics::enqueued(
            self.queue
                .iter()
                .zip(&self.kind)
                .map(|(q, k)| (q.as_str(), k.as_str())),
        );
    }

    /// Validates every job; the first refusal refuses the whole batch.
    pub(crate) fn encode(jobs: &[NewJob], max_payload_bytes: usize) -> Result<Self> {
        let mut b = EncodedBatch::default();
        let mut bytes = 0usize;
        for (index, job) in jobs.iter().enumerate() {
            let e = job
                .encode(max_payload_bytes)
                .map_err(|e| Error::InvalidBatchItem {
                    index,
                    source: Box::new(e),
                })?;
            bytes += e.payload.len();
            if bytes > MAX_BATCH_BYTES {
                return Err(Error::invalid(
                    "batch",
                    format!("its payloads exceed {MAX_BATCH_BYTES} bytes at job {index}; split it"),
                ));
            }
            b.push(e);
        }
        Ok(b)
    }

    /// Appends one job's values, one to each column (every column, so that none is left
    /// short).
    pub(crate) fn push(&mut self, e: EncodedJob) {
        let EncodedJob {
            queue,
            kind,
            payload,
            priority,
            max_attempts,
            run_at_us,
            delay_us,
            key,
            sequence,
            after,
        } = e;
        self.queue.push(queue);
        self.kind.push(kind);
        self.payload.push(payload);
        self.priority.push(priority);
        self.max_attempts.push(max_attempts);
        self.run_at_us.push(run_at_us);
        self.delay_us.push(delay_us);
        self.key.push(key);
        self.sequence.push(sequence);
        self.after.push(after.map(|ids| {
            let list: Vec<String> = ids.iter().map(i64::to_string).collect();
            format!("{{{}}}", list.join(","))
        }));
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

/// A job handed out by a claim. Its lease runs until `locked_until`; `attempt` is the
/// fencing token every later write of this job must present.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClaimedJob {
    /// The job's id.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// Its payload, as JSON text.
    pub payload: String,
    /// The attempt this claim started (1 for the first run). Present it to
    /// [`Client::complete`](crate::Client::complete) and friends.
    pub attempt: i32,
    /// How many attempts the job may have.
    pub max_attempts: i32,
    /// Its priority.
    pub priority: i16,
    /// When it became ready.
    pub run_at: SystemTime,
    /// When it was enqueued.
    pub created_at: SystemTime,
    /// The end of this claim's lease.
    pub locked_until: SystemTime,
}

impl ClaimedJob {
    /// The payload deserialized into `T`.
    pub fn payload_as<T: DeserializeOwned>(&self) -> std::result::Result<T, serde_json::Error> {
        serde_json::from_str(&self.payload)
    }
}

/// One job row, every column.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobRow {
    /// `id`
    pub id: JobId,
    /// `queue`
    pub queue: String,
    /// `kind`
    pub kind: String,
    /// `payload`, as JSON text
    pub payload: String,
    /// `status`
    pub state: JobState,
    /// `priority`
    pub priority: i16,
    /// `run_at`
    pub run_at: SystemTime,
    /// `attempts`
    pub attempts: i32,
    /// `max_attempts`
    pub max_attempts: i32,
    /// `locked_until`
    pub locked_until: Option<SystemTime>,
    /// `last_error`
    pub last_error: Option<String>,
    /// `created_at`
    pub created_at: SystemTime,
    /// `finished_at`
    pub finished_at: Option<SystemTime>,
    /// `attempted_at`: when the current (or last) attempt was claimed; `None` for a job never
    /// claimed, or last claimed before migration 14.
    pub attempted_at: Option<SystemTime>,
    /// `schedule`: the periodic schedule that enqueued the job (its `run_at` is then the fire
    /// time), `None` for every other job.
    pub schedule: Option<String>,
    /// `key`: what its queue's per-key limit counts ([`NewJob::key`]).
    pub key: Option<String>,
    /// `sequence`: its sequence ([`NewJob::sequence`]).
    pub sequence: Option<String>,
    /// `held`: why a queued job is not ready although its time has come: `"sequence"` (it
    /// waits for its turn in its sequence), `"after"` (it waits for the jobs in
    /// [`JobRow::after`] that are not done yet); `None` otherwise. A failed job with
    /// `held = "after"` failed because a job it waited for did (see `last_error`).
    pub held: Option<String>,
    /// `output`: what the handler stored with its completion, as JSON text
    /// ([`JobContext::set_output`](crate::JobContext::set_output)); `None` if nothing.
    pub output: Option<String>,
    /// `after`: the jobs this job waits for, sorted ([`NewJob::after`]); empty for none.
    pub after: Vec<JobId>,
    /// `waiting`: how many of [`JobRow::after`] are not done yet (`None` for a job that
    /// waits for none).
    pub waiting: Option<i32>,
    /// `unique_key`: the job's uniqueness key (a SHA-256 hex digest of its
    /// [`Unique`](crate::Unique) rule's fields), `None` for a job enqueued without a rule.
    pub unique_key: Option<String>,
    /// `unique_queued_only`: the rule lets a new job queue behind a running duplicate (the
    /// claim then clears `unique_key`).
    pub unique_queued_only: bool,
    /// `has_children`: `Some(true)` once another job waits for this one ([`NewJob::after`]).
    pub has_children: Option<bool>,
    /// `errors`: the job's last 20 failed attempts, oldest first (see [`AttemptError`]);
    /// empty for a job that never failed.
    pub errors: Vec<AttemptError>,
}

/// One failed attempt in a job's history ([`JobRow::errors`]): written by the statement
/// that records the failure (a retry or discard outcome, a timeout, [`Client::fail`], the
/// reaper for an expired lease), never by a completion. A job keeps its last 20.
///
/// [`Client::fail`]: crate::Client::fail
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptError {
    /// The attempt (1 for the first run).
    pub attempt: i32,
    /// When the attempt ended, by the database's clock.
    pub at: SystemTime,
    /// Its error (cut to 2048 characters; `last_error` keeps the last one whole);
    /// `"lease expired"` when the reaper ended it.
    pub error: Option<String>,
    /// How long it ran, from its claim to its end, in milliseconds; `None` if its claim
    /// predates the column that records it (migration 14).
    pub ran_ms: Option<i64>,
}

impl AttemptError {
    /// The history as stored (a JSON array, oldest first). Lenient: an element that is not an
    /// attempt as skiplock writes it (a hand-edited row) is left out, never an error.
    pub(crate) fn parse_history(text: Option<&str>) -> Vec<AttemptError> {
        let Some(text) = text else {
            return Vec::new();
        };
        let Ok(serde_json::Value::Array(items)) = serde_json::from_str(text) else {
            return Vec::new();
        };
        items
            .iter()
            .filter_map(|v| {
                let attempt = i32::try_from(v.get("attempt")?.as_i64()?).ok()?;
                let at = chrono::DateTime::parse_from_rfc3339(v.get("at")?.as_str()?).ok()?;
                Some(AttemptError {
                    attempt,
                    at: SystemTime::from(at),
                    error: v.get("error").and_then(|e| e.as_str()).map(str::to_owned),
                    ran_ms: v.get("ran_ms").and_then(serde_json::Value::as_i64),
                })
            })
            .collect()
    }
}

impl JobRow {
    /// The output deserialized into `T`; `None` if the job stored none.
    pub fn output_as<T: DeserializeOwned>(
        &self,
    ) -> Option<std::result::Result<T, serde_json::Error>> {
        self.output.as_deref().map(serde_json::from_str)
    }
}

/// A job's place in a workflow: the jobs it waits for and the jobs that wait for it
/// ([`Client::family`](crate::Client::family)).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct JobFamily {
    /// The jobs it waits for, lowest id first.
    pub parents: Vec<Relative>,
    /// The jobs that wait for it, lowest id first (at most the number asked for).
    pub children: Vec<Relative>,
    /// How many jobs wait for it in all.
    pub children_total: i64,
    /// How many of those still wait for it (it is not done yet).
    pub children_waiting: i64,
}

/// A parent or child in a [`JobFamily`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Relative {
    /// Its id.
    pub id: JobId,
    /// Its state; `None` if it was deleted (or pruned) since.
    pub state: Option<JobState>,
    /// Its kind (`None` if deleted).
    pub kind: Option<String>,
    /// Its queue (`None` if deleted).
    pub queue: Option<String>,
    /// Its `held` column (`"after"`: it still waits for a parent).
    pub held: Option<String>,
    /// Whether the edge is settled: the parent is done.
    pub satisfied: bool,
}

/// The result of a guarded write (complete, extend): whether the job was still this
/// worker's.
#[must_use = "a guarded write can be refused; a refused job is no longer yours"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The guard held: the row was `running` with the presented attempt, and was updated.
    Applied,
    /// The guard did not hold: the job is no longer this claim's (lease expired and reaped,
    /// re-claimed by another worker, cancelled). Nothing was written. Never count it as done.
    Lost,
}

impl Transition {
    /// Whether the write happened.
    pub fn is_applied(self) -> bool {
        self == Transition::Applied
    }
}

/// What [`Client::fail`](crate::Client::fail) did.
#[must_use = "a guarded write can be refused; a refused job is no longer yours"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// Back to `queued`, to run again at `run_at` (`retry_in` after the database's `now()`).
    Retrying {
        /// When it will be ready again.
        run_at: SystemTime,
        /// How long from the failure, by the database's clock.
        retry_in: Duration,
    },
    /// `failed` for good: a permanent error, or its last attempt.
    Failed,
    /// The guard did not hold (see [`Transition::Lost`]); nothing was written.
    Lost,
}

/// Whether a failed attempt may be retried, and after how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Retry {
    /// Retry (until `max_attempts`) after `least(cap, base * 2^attempts)`.
    Backoff(Backoff),
    /// Do not retry: `failed` now.
    Never,
}

impl Default for Retry {
    fn default() -> Self {
        Retry::Backoff(Backoff::default())
    }
}

/// Exponential backoff: attempt `n` failing waits `least(cap, base * 2^n)`.
///
/// The article's numbers are the default: base 10 s, cap 1 hour, so 20 s, 40 s, 80 s, 160 s
/// after attempts 1 to 4. The exponent is bounded in SQL, so no attempt count overflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
}

impl Backoff {
    /// The default base: 10 seconds.
    pub const DEFAULT_BASE: Duration = Duration::from_secs(10);
    /// The default cap: 1 hour.
    pub const DEFAULT_CAP: Duration = Duration::from_secs(3600);
    /// The largest cap accepted: 365 days.
    pub const MAX_CAP: Duration = Duration::from_secs(365 * 24 * 3600);

    /// A backoff with the given base and cap. The base must be positive and no larger than
    /// the cap, the cap at most 365 days.
    pub fn new(base: Duration, cap: Duration) -> Result<Self> {
        if base.is_zero() || base > cap || cap > Self::MAX_CAP {
            return Err(Error::invalid(
                "backoff",
                format!(
                    "base {base:?} and cap {cap:?}: need 0 < base <= cap <= {:?}",
                    Self::MAX_CAP
                ),
            ));
        }
        Ok(Backoff { base, cap })
    }

    /// The base.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The cap.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// The wait after attempt `attempts` fails: `least(cap, base * 2^attempts)`, computed the
    /// way the database does (this is for display; the database's value is the one used).
    pub fn delay_after(&self, attempts: i32) -> Duration {
        let exp = attempts.clamp(0, 60);
        let secs = self.base.as_secs_f64() * 2f64.powi(exp);
        Duration::from_secs_f64(secs.min(self.cap.as_secs_f64()))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Self::DEFAULT_BASE,
            cap: Self::DEFAULT_CAP,
        }
    }
}

/// A job the reaper moved because its lease had expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReapedJob {
    /// The job.
    pub id: JobId,
    /// Where it went: `Queued` (to run again) or `Failed` (no attempts left).
    pub state: JobState,
    /// Its attempts so far.
    pub attempts: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn article_backoff() {
        let b = Backoff::default();
        let got: Vec<u64> = (1..=4).map(|n| b.delay_after(n).as_secs()).collect();
        assert_eq!(got, [20, 40, 80, 160]);
        assert_eq!(b.delay_after(9).as_secs(), 3600);
        assert_eq!(b.delay_after(i32::MAX).as_secs(), 3600);
        assert!(Backoff::new(Duration::ZERO, Duration::from_secs(1)).is_err());
        assert!(Backoff::new(Duration::from_secs(2), Duration::from_secs(1)).is_err());
    }

    #[test]
    fn batch_is_all_or_nothing() {
        let jobs = vec![
            NewJob::new("k", &1),
            NewJob::new("k", &2).queue("bad queue"),
            NewJob::new("k", &3),
        ];
        match EncodedBatch::encode(&jobs, 1024) {
            Err(Error::InvalidBatchItem { index: 1, .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
