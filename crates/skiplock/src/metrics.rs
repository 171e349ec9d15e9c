//! Metrics, recorded through the [`metrics`](https://docs.rs/metrics) facade: skiplock
//! installs no recorder, so an application chooses its own (a Prometheus exporter, say) and
//! every count below goes there; without one, recording costs next to nothing. The
//! `skiplock` command installs a Prometheus recorder for `--metrics-addr`.
//!
//! Names start with `skiplock_` and carry their unit (`_seconds`, `_total`). Each name is a
//! constant here; [`describe`] gives every one its help text and unit in the recorder
//! installed at the time of the call.
//!
//! **Recorded by every process, as things happen** (a worker's, and the client's enqueues):
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | [`JOBS_ENQUEUED`] | counter | `queue`, `kind` | jobs inserted by this process's client (a unique job's duplicate is not counted; inside the caller's transaction, counted when the insert ran, even if it later rolls back; a periodic schedule's fires, by the process that fired them, and `run_schedule_now`) |
//! | [`JOBS_CLAIMED`] | counter | `queue` | jobs this worker claimed |
//! | [`JOBS_FINISHED`] | counter | `queue`, `kind`, `outcome`, `state` | attempts of this worker that ended: `outcome` is what was written (`complete`, `retry`, `discard`, `snooze`, `hand_back`, `unserved`) or `lost` (the result was refused or dropped: the job was no longer this worker's); `state` is the state the job went to (`done`, `queued`, `failed`; `none` for `lost`) |
//! | [`JOB_RUN`] | histogram | `queue`, `kind` | how long each handler ran, seconds |
//! | [`JOB_QUEUE_WAIT`] | histogram | `queue` | from a job's `run_at` to its claim, seconds (by the database's clock) |
//! | [`CLAIM_DURATION`] | histogram | `queue` | how long each claim statement took, seconds, including getting a connection |
//! | [`CLAIM_BATCH_SIZE`] | histogram | `queue` | jobs per claim (empty claims included) |
//! | [`CLAIM_ERRORS`] | counter | `queue` | claims that failed |
//! | [`HEARTBEAT_ROUNDS`] | counter | | heartbeat rounds that ran (only while the worker holds jobs) |
//! | [`HEARTBEAT_RENEWED`] | counter | | leases renewed |
//! | [`HEARTBEAT_LOST`] | counter | | renewals refused: the job was no longer this worker's |
//! | [`HEARTBEAT_ERRORS`] | counter | | heartbeat rounds whose statement failed |
//! | [`JOBS_UNSERVED`] | counter | `queue`, `kind` | jobs this worker handed back, at no cost in attempts, because it has no handler for their kind |
//! | [`JOBS_REAPED`] | counter | `state` | jobs with expired leases this worker's reaper moved: back to `queued`, or to `failed` (no attempt left) |
//! | [`LISTENER_CONNECTED`] | gauge | | 1 while the worker's LISTEN connection is up, else 0 |
//! | [`POLLING_FALLBACK`] | gauge | | 1 while the worker polls because its LISTEN connection cannot be relied on |
//!
//! **Read from the database on a timer by one process at a time** (the worker setting
//! [`WorkerConfig::metrics_gauges_interval`](crate::WorkerConfig::metrics_gauges_interval),
//! or [`publish_gauges`]), never per scrape; elected by a maintenance lock, so that only the
//! process holding it publishes them:
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | [`JOBS`] | gauge | `queue`, `state` | jobs per queue and state (`queued`, `running`, `done`, `failed`) |
//! | [`JOBS_READY`] | gauge | `queue` | queued jobs that are due and have an attempt left |
//! | [`JOBS_UNSERVED_WAITING`] | gauge | `queue` | queued jobs a worker handed back for want of a handler for their kind, waiting for one that handles it |
//! | [`OLDEST_READY_AGE`] | gauge | `queue` | age of the oldest ready job, seconds (0 when none) |
//! | [`QUEUE_PAUSED`] | gauge | `queue` | 1 while the queue is paused |
//! | [`JOBS_HELD`] | gauge | `queue` | queued jobs held back: waiting for their turn in a sequence (not ready, whatever their `run_at`) |
//! | [`QUEUE_LIMIT_BOUND`] | gauge | `queue`, `reason` | 1 when the queue's last claim left ready jobs behind for want of a concurrency or per-key slot (`reason` `slots`) or of room in the rate window (`rate`), else 0; for queues with limits (and 0 for one whose limits were lifted) |
//! | [`QUEUE_CONCURRENCY_LIMIT`] | gauge | `queue` | the queue's concurrency limit: at most this many of its jobs run at once (0: none); for queues with limits (and 0 for one whose limits were lifted), as are the three below |
//! | [`QUEUE_PER_KEY_LIMIT`] | gauge | `queue` | its per-key limit: at most this many jobs of one key run at once (0: none) |
//! | [`QUEUE_RATE_LIMIT`] | gauge | `queue` | its rate limit: at most this many starts in any interval of [`QUEUE_RATE_PERIOD`] (0: none) |
//! | [`QUEUE_RATE_PERIOD`] | gauge | `queue` | its rate limit's period, seconds (0: none) |
//! | [`TABLE_DEAD_TUPLES`] | gauge | | the jobs table's dead row versions |
//! | [`TABLE_LIVE_TUPLES`] | gauge | | the jobs table's live rows |
//! | [`TABLE_BYTES`] | gauge | | the jobs table's size with its indexes, bytes |
//! | [`OLDEST_XMIN_AGE`] | gauge | | the oldest open transaction that holds back vacuum's horizon in this database, seconds (0 when none) |
//! | [`GAUGES_UPDATED`] | gauge | | when these gauges were last read, Unix seconds |

use std::collections::HashMap;
use std::time::Duration;

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};

pub use crate::maintenance::gauges::publish_gauges;

/// Jobs enqueued.
pub const JOBS_ENQUEUED: &str = "skiplock_jobs_enqueued_total";
/// Jobs claimed.
pub const JOBS_CLAIMED: &str = "skiplock_jobs_claimed_total";
/// Attempts ended, by outcome and resulting state.
pub const JOBS_FINISHED: &str = "skiplock_jobs_finished_total";
/// Handler run time.
pub const JOB_RUN: &str = "skiplock_job_run_seconds";
/// From `run_at` to the claim.
pub const JOB_QUEUE_WAIT: &str = "skiplock_job_queue_wait_seconds";
/// Claim statement time.
pub const CLAIM_DURATION: &str = "skiplock_claim_duration_seconds";
/// Jobs per claim.
pub const CLAIM_BATCH_SIZE: &str = "skiplock_claim_batch_size";
/// Failed claims.
pub const CLAIM_ERRORS: &str = "skiplock_claim_errors_total";
/// Heartbeat rounds.
pub const HEARTBEAT_ROUNDS: &str = "skiplock_heartbeat_rounds_total";
/// Leases renewed.
pub const HEARTBEAT_RENEWED: &str = "skiplock_heartbeat_renewed_total";
/// Lease renewals refused.
pub const HEARTBEAT_LOST: &str = "skiplock_heartbeat_lost_total";
/// Heartbeat rounds that failed.
pub const HEARTBEAT_ERRORS: &str = "skiplock_heartbeat_errors_total";
/// Jobs the reaper moved.
pub const JOBS_REAPED: &str = "skiplock_jobs_reaped_total";
/// Jobs handed back for want of a handler for their kind.
pub const JOBS_UNSERVED: &str = "skiplock_jobs_unserved_total";
/// Queued jobs waiting for a worker that handles their kind.
pub const JOBS_UNSERVED_WAITING: &str = "skiplock_jobs_unserved_waiting";
/// The LISTEN connection is up.
pub const LISTENER_CONNECTED: &str = "skiplock_listener_connected";
/// The worker polls instead of relying on LISTEN.
pub const POLLING_FALLBACK: &str = "skiplock_polling_fallback";
/// Jobs per queue and state.
pub const JOBS: &str = "skiplock_jobs";
/// Ready jobs per queue.
pub const JOBS_READY: &str = "skiplock_jobs_ready";
/// The oldest ready job's age.
pub const OLDEST_READY_AGE: &str = "skiplock_queue_oldest_ready_age_seconds";
/// A paused queue.
pub const QUEUE_PAUSED: &str = "skiplock_queue_paused";
/// Queued jobs held back, waiting for their turn in a sequence.
pub const JOBS_HELD: &str = "skiplock_jobs_held";
/// Why a limited queue's last claim left ready jobs behind (`reason`: `slots`, `rate`).
pub const QUEUE_LIMIT_BOUND: &str = "skiplock_queue_limit_bound";
/// A queue's concurrency limit (0: none).
pub const QUEUE_CONCURRENCY_LIMIT: &str = "skiplock_queue_concurrency_limit";
/// A queue's per-key limit (0: none).
pub const QUEUE_PER_KEY_LIMIT: &str = "skiplock_queue_per_key_limit";
/// A queue's rate limit: starts per period (0: none).
pub const QUEUE_RATE_LIMIT: &str = "skiplock_queue_rate_limit";
/// A queue's rate limit's period (0: none).
pub const QUEUE_RATE_PERIOD: &str = "skiplock_queue_rate_period_seconds";
/// The jobs table's dead tuples.
pub const TABLE_DEAD_TUPLES: &str = "skiplock_jobs_table_dead_tuples";
/// The jobs table's live tuples.
pub const TABLE_LIVE_TUPLES: &str = "skiplock_jobs_table_live_tuples";
/// The jobs table's size.
pub const TABLE_BYTES: &str = "skiplock_jobs_table_bytes";
/// The oldest transaction holding back vacuum.
pub const OLDEST_XMIN_AGE: &str = "skiplock_oldest_xmin_transaction_age_seconds";
/// When the database gauges were last read.
pub const GAUGES_UPDATED: &str = "skiplock_gauges_updated_timestamp_seconds";

/// Gives every metric its help text and unit, in the recorder installed now (call it after
/// installing one; recording works without it).
pub fn describe() {
    describe_counter!(JOBS_ENQUEUED, Unit::Count, "Jobs inserted by this process.");
    describe_counter!(JOBS_CLAIMED, Unit::Count, "Jobs claimed by this worker.");
    describe_counter!(
        JOBS_FINISHED,
        Unit::Count,
        "Attempts of this worker that ended, by outcome written (or lost) and resulting state."
    );
    describe_histogram!(JOB_RUN, Unit::Seconds, "Handler run time.");
    describe_histogram!(
        JOB_QUEUE_WAIT,
        Unit::Seconds,
        "Time from a job's run_at to its claim."
    );
    describe_histogram!(CLAIM_DURATION, Unit::Seconds, "Time one claim took.");
    describe_histogram!(CLAIM_BATCH_SIZE, Unit::Count, "Jobs per claim.");
    describe_counter!(CLAIM_ERRORS, Unit::Count, "Claims that failed.");
    describe_counter!(HEARTBEAT_ROUNDS, Unit::Count, "Heartbeat rounds.");
    describe_counter!(HEARTBEAT_RENEWED, Unit::Count, "Leases renewed.");
    describe_counter!(
        HEARTBEAT_LOST,
        Unit::Count,
        "Lease renewals refused: the job was no longer this worker's."
    );
    describe_counter!(
        HEARTBEAT_ERRORS,
        Unit::Count,
        "Heartbeat rounds that failed."
    );
    describe_counter!(
        JOBS_REAPED,
        Unit::Count,
        "Jobs with expired leases moved by this worker's reaper, by resulting state."
    );
    describe_gauge!(
        LISTENER_CONNECTED,
        "1 while the worker's LISTEN connection is up."
    );
    describe_gauge!(
        POLLING_FALLBACK,
        "1 while the worker polls because LISTEN cannot be relied on."
    );
    describe_gauge!(JOBS, Unit::Count, "Jobs per queue and state.");
    describe_gauge!(JOBS_READY, Unit::Count, "Due queued jobs per queue.");
    describe_counter!(
        JOBS_UNSERVED,
        Unit::Count,
        "Jobs this worker handed back because it has no handler for their kind."
    );
    describe_gauge!(
        JOBS_UNSERVED_WAITING,
        Unit::Count,
        "Queued jobs waiting for a worker that handles their kind."
    );
    describe_gauge!(
        OLDEST_READY_AGE,
        Unit::Seconds,
        "Age of the oldest ready job per queue."
    );
    describe_gauge!(QUEUE_PAUSED, "1 while the queue is paused.");
    describe_gauge!(
        JOBS_HELD,
        Unit::Count,
        "Queued jobs held back per queue, waiting for their turn in a sequence."
    );
    describe_gauge!(
        QUEUE_LIMIT_BOUND,
        "1 when the queue's last claim left ready jobs behind for want of a slot (reason=slots) \
         or of room in the rate window (reason=rate)."
    );
    describe_gauge!(
        QUEUE_CONCURRENCY_LIMIT,
        Unit::Count,
        "The queue's concurrency limit (0: none)."
    );
    describe_gauge!(
        QUEUE_PER_KEY_LIMIT,
        Unit::Count,
        "The queue's per-key concurrency limit (0: none)."
    );
    describe_gauge!(
        QUEUE_RATE_LIMIT,
        Unit::Count,
        "The queue's rate limit: starts allowed per period (0: none)."
    );
    describe_gauge!(
        QUEUE_RATE_PERIOD,
        Unit::Seconds,
        "The period of the queue's rate limit (0: none)."
    );
    describe_gauge!(
        TABLE_DEAD_TUPLES,
        Unit::Count,
        "Dead row versions in the jobs table."
    );
    describe_gauge!(
        TABLE_LIVE_TUPLES,
        Unit::Count,
        "Live rows in the jobs table."
    );
    describe_gauge!(
        TABLE_BYTES,
        Unit::Bytes,
        "Size of the jobs table with its indexes."
    );
    describe_gauge!(
        OLDEST_XMIN_AGE,
        Unit::Seconds,
        "Age of the oldest open transaction holding back vacuum in this database."
    );
    describe_gauge!(
        GAUGES_UPDATED,
        Unit::Seconds,
        "When the database gauges were last read (Unix time)."
    );
}

/// Counts inserted jobs, one increment per distinct queue and kind.
pub(crate) fn enqueued<'a>(jobs: impl IntoIterator<Item = (&'a str, &'a str)>) {
    let mut by: HashMap<(&str, &str), u64> = HashMap::new();
    for key in jobs {
        *by.entry(key).or_default() += 1;
    }
    for ((queue, kind), n) in by {
        counter!(JOBS_ENQUEUED, "queue" => queue.to_owned(), "kind" => kind.to_owned())
            .increment(n);
    }
}

/// Counts `n` inserted jobs of one queue and kind (a schedule's fires).
pub(crate) fn enqueued_n(queue: &str, kind: &str, n: u64) {
    if n > 0 {
        counter!(JOBS_ENQUEUED, "queue" => queue.to_owned(), "kind" => kind.to_owned())
            .increment(n);
    }
}

/// Counts one ended attempt.
pub(crate) fn finished(
    queue: &std::sync::Arc<str>,
    kind: &std::sync::Arc<str>,
    outcome: &'static str,
    state: &'static str,
) {
    finished_n(queue, kind, outcome, state, 1);
}

fn finished_n(
    queue: &std::sync::Arc<str>,
    kind: &std::sync::Arc<str>,
    outcome: &'static str,
    state: &'static str,
    n: u64,
) {
    counter!(
        JOBS_FINISHED,
        "queue" => std::sync::Arc::clone(queue),
        "kind" => std::sync::Arc::clone(kind),
        "outcome" => outcome,
        "state" => state
    )
    .increment(n);
}

/// Ended attempts counted by runs: consecutive ones with the same labels (a batch of
/// outcomes is mostly one queue's, one kind's and one outcome's) make one increment of
/// their number, not one key built and looked up per job. Counted when the labels change,
/// at [`FinishedTally::flush`], and when dropped.
#[derive(Default)]
pub(crate) struct FinishedTally {
    run: Option<FinishedRun>,
}

struct FinishedRun {
    queue: std::sync::Arc<str>,
    kind: std::sync::Arc<str>,
    outcome: &'static str,
    state: &'static str,
    n: u64,
}

impl FinishedTally {
    /// One ended attempt, as [`finished`] counts it.
    pub(crate) fn add(
        &mut self,
        queue: &std::sync::Arc<str>,
        kind: &std::sync::Arc<str>,
        outcome: &'static str,
        state: &'static str,
    ) {
        if let Some(r) = &mut self.run {
            if r.queue == *queue && r.kind == *kind && r.outcome == outcome && r.state == state {
                r.n += 1;
                return;
            }
        }
        self.flush();
        self.run = Some(FinishedRun {
            queue: std::sync::Arc::clone(queue),
            kind: std::sync::Arc::clone(kind),
            outcome,
            state,
            n: 1,
        });
    }

    /// Counts the run so far.
    pub(crate) fn flush(&mut self) {
        if let Some(r) = self.run.take() {
            finished_n(&r.queue, &r.kind, r.outcome, r.state, r.n);
        }
    }
}

impl Drop for FinishedTally {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Sets a 1/0 gauge.
pub(crate) fn flag(name: &'static str, on: bool) {
    gauge!(name).set(if on { 1.0 } else { 0.0 });
}

/// Sets a 1/0 gauge of one queue.
pub(crate) fn flag_labelled(name: &'static str, queue: &str, on: bool) {
    gauge!(name, "queue" => queue.to_owned()).set(if on { 1.0 } else { 0.0 });
}

/// Seconds as a histogram value.
pub(crate) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::DebuggingRecorder;
    use metrics_util::MetricKind;

    use super::*;

    /// Every metric: its constant's name, its name and its kind.
    macro_rules! all {
        ($($c:ident: $kind:ident,)*) => {
            &[$((stringify!($c), $c, MetricKind::$kind),)*]
        };
    }
    const ALL: &[(&str, &str, MetricKind)] = all! {
        JOBS_ENQUEUED: Counter,
        JOBS_CLAIMED: Counter,
        JOBS_FINISHED: Counter,
        JOB_RUN: Histogram,
        JOB_QUEUE_WAIT: Histogram,
        CLAIM_DURATION: Histogram,
        CLAIM_BATCH_SIZE: Histogram,
        CLAIM_ERRORS: Counter,
        HEARTBEAT_ROUNDS: Counter,
        HEARTBEAT_RENEWED: Counter,
        HEARTBEAT_LOST: Counter,
        HEARTBEAT_ERRORS: Counter,
        JOBS_REAPED: Counter,
        JOBS_UNSERVED: Counter,
        JOBS_UNSERVED_WAITING: Gauge,
        LISTENER_CONNECTED: Gauge,
        POLLING_FALLBACK: Gauge,
        JOBS: Gauge,
        JOBS_READY: Gauge,
        OLDEST_READY_AGE: Gauge,
        QUEUE_PAUSED: Gauge,
        JOBS_HELD: Gauge,
        QUEUE_LIMIT_BOUND: Gauge,
        QUEUE_CONCURRENCY_LIMIT: Gauge,
        QUEUE_PER_KEY_LIMIT: Gauge,
        QUEUE_RATE_LIMIT: Gauge,
        QUEUE_RATE_PERIOD: Gauge,
        TABLE_DEAD_TUPLES: Gauge,
        TABLE_LIVE_TUPLES: Gauge,
        TABLE_BYTES: Gauge,
        OLDEST_XMIN_AGE: Gauge,
        GAUGES_UPDATED: Gauge,
    };

    #[test]
    fn every_name_follows_the_conventions_and_is_in_the_tables() {
        let source = include_str!("metrics.rs");
        let docs: String = source
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        // Every `pub const ... &str` of this file is in ALL.
        let consts = source
            .lines()
            .filter(|l| l.starts_with("pub const ") && l.contains(": &str = \"skiplock_"))
            .count();
        assert_eq!(consts, ALL.len(), "a name constant is missing from ALL");
        let mut seen = std::collections::HashSet::new();
        for (ident, name, kind) in ALL {
            assert!(seen.insert(*name), "{name} twice");
            assert!(
                name.starts_with("skiplock_")
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
            assert_eq!(
                name.ends_with("_total"),
                *kind == MetricKind::Counter,
                "{name}: counters, and only counters, end in _total"
            );
            let kind_word = match kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            assert!(
                docs.contains(&format!("| [`{ident}`] | {kind_word} |")),
                "{ident} ({kind_word}) is not in the module's tables"
            );
        }
    }

    #[test]
    fn every_metric_is_described_with_its_unit() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            describe();
            for (_, name, kind) in ALL {
                match kind {
                    MetricKind::Counter => counter!(*name).increment(1),
                    MetricKind::Gauge => gauge!(*name).set(1.0),
                    MetricKind::Histogram => ::metrics::histogram!(*name).record(1.0),
                }
            }
        });
        let described: HashMap<String, (Option<Unit>, bool)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, unit, text, _)| (k.key().name().to_owned(), (unit, text.is_some())))
            .collect();
        for (_, name, _) in ALL {
            let Some((unit, text)) = described.get(*name) else {
                panic!("{name} was not recorded");
            };
            assert!(text, "{name} has no help text");
            if name.ends_with("_seconds") {
                assert_eq!(*unit, Some(Unit::Seconds), "{name}");
            }
            if name.ends_with("_bytes") {
                assert_eq!(*unit, Some(Unit::Bytes), "{name}");
            }
        }
    }
}
