//! The metrics a worker and a client record, read through a debugging recorder installed
//! for this test binary. This test's queues are its own, so that other tests running at the
//! same time, which record into the same recorder, do not disturb its counts.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use skiplock::metrics as m;
use skiplock::{JobContext, JobError, JobOptions, NewJob, Registry, Worker};

use crate::support::setup;
use crate::worker::{client, eventually, noop, spawn_worker};

fn snapshotter() -> &'static Snapshotter {
    static S: OnceLock<Snapshotter> = OnceLock::new();
    S.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let s = recorder.snapshotter();
        recorder.install().unwrap();
        s
    })
}

/// Everything recorded so far: a snapshot drains the recorder, so the tests of this file
/// share one record, each reading its own queues' series.
fn seen() -> MutexGuard<'static, Seen> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let mut guard = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    guard.take();
    guard
}

/// A metric's name and its sorted labels.
type Id = (String, Vec<(String, String)>);

/// What was recorded, summed over snapshots (a snapshot drains what it reads).
#[derive(Default)]
struct Seen {
    counters: HashMap<Id, u64>,
    gauges: HashMap<Id, f64>,
    histograms: HashMap<Id, Vec<f64>>,
}

impl Seen {
    fn take(&mut self) {
        for (ck, _, _, v) in snapshotter().snapshot().into_vec() {
            let (kind, key) = ck.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let id = (key.name().to_owned(), labels);
            match (kind, v) {
                (MetricKind::Counter, DebugValue::Counter(n)) => {
                    *self.counters.entry(id).or_default() += n
                }
                (MetricKind::Gauge, DebugValue::Gauge(g)) => {
                    self.gauges.insert(id, g.into_inner());
                }
                (MetricKind::Histogram, DebugValue::Histogram(h)) => self
                    .histograms
                    .entry(id)
                    .or_default()
                    .extend(h.into_iter().map(|f| f.into_inner())),
                _ => {}
            }
        }
    }

    fn matches(id: &Id, name: &str, labels: &[(&str, &str)]) -> bool {
        id.0 == name
            && labels
                .iter()
                .all(|(k, v)| id.1.iter().any(|(a, b)| a == k && b == v))
    }

    /// The sum of the counters `name` with all of `labels`.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters
            .iter()
            .filter(|(id, _)| Self::matches(id, name, labels))
            .map(|(_, n)| n)
            .sum()
    }

    /// The samples of the histograms `name` with all of `labels`.
    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.histograms
            .iter()
            .filter(|(id, _)| Self::matches(id, name, labels))
            .flat_map(|(_, h)| h.iter().copied())
            .collect()
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.gauges
            .iter()
            .find(|(id, _)| Self::matches(id, name, labels))
            .map(|(_, g)| *g)
    }
}

#[tokio::test]
async fn the_worker_and_the_client_record_what_they_did() {
    drop(seen()); // installs the recorder
    let b = setup().await;
    let (qa, qb) = ("metrics_a", "metrics_b");
    let opts = JobOptions::default();
    let registry = Registry::new()
        .register_handler("ok", opts, |_p: String, _c: JobContext| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<(), JobError>(())
        })
        .register_handler("perm", opts, |_p: String, _c: JobContext| async {
            Err::<(), JobError>(JobError::discard("no"))
        })
        .register_handler("again", opts, |_p: String, _c: JobContext| async {
            Err::<(), JobError>(JobError::retry("later"))
        })
        .register_handler("snoozes", opts, |_p: String, _c: JobContext| async {
            Err::<(), JobError>(JobError::snooze(Duration::from_secs(3600)))
        });

    for _ in 0..3 {
        b.client
            .enqueue(&NewJob::new("ok", &1).queue(qa))
            .await
            .unwrap();
    }
    b.client
        .enqueue_many(&[
            NewJob::new("perm", &1).queue(qa),
            NewJob::new("perm", &2).queue(qa),
            NewJob::new("again", &1).queue(qb).max_attempts(1),
            NewJob::new("snoozes", &1).queue(qb),
        ])
        .await
        .unwrap();
    let unique = NewJob::new("ok", &7)
        .queue(qb)
        .unique(skiplock::Unique::by_args());
    assert!(b
        .client
        .enqueue_unique(&unique)
        .await
        .unwrap()
        .is_inserted());
    assert!(!b
        .client
        .enqueue_unique(&unique)
        .await
        .unwrap()
        .is_inserted());
    {
        let seen = self::seen();
        let enq = |q, k| seen.counter(m::JOBS_ENQUEUED, &[("queue", q), ("kind", k)]);
        assert_eq!(
            (
                enq(qa, "ok"),
                enq(qa, "perm"),
                enq(qb, "again"),
                enq(qb, "snoozes"),
                enq(qb, "ok")
            ),
            (3, 2, 1, 1, 1),
            "a duplicate is not counted"
        );
    }

    let stats = Worker::builder(b.client.clone(), registry.clone())
        .queue(qa, 4)
        .queue(qb, 4)
        .build()
        .unwrap()
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!(stats.claimed, 8);
    {
        let seen = self::seen();
        assert_eq!(seen.counter(m::JOBS_CLAIMED, &[("queue", qa)]), 5);
        assert_eq!(seen.counter(m::JOBS_CLAIMED, &[("queue", qb)]), 3);
        let fin = |q, k, o, s| {
            seen.counter(
                m::JOBS_FINISHED,
                &[("queue", q), ("kind", k), ("outcome", o), ("state", s)],
            )
        };
        assert_eq!(fin(qa, "ok", "complete", "done"), 3);
        assert_eq!(fin(qa, "perm", "discard", "failed"), 2);
        assert_eq!(fin(qb, "again", "retry", "failed"), 1);
        assert_eq!(fin(qb, "snoozes", "snooze", "queued"), 1);
        assert_eq!(fin(qb, "ok", "complete", "done"), 1);
        assert_eq!(
            seen.counter(m::JOBS_FINISHED, &[("outcome", "lost"), ("queue", qa)]),
            0
        );
        let runs = seen.samples(m::JOB_RUN, &[("queue", qa), ("kind", "ok")]);
        assert_eq!(runs.len(), 3);
        assert!(runs.iter().all(|s| *s >= 0.02), "{runs:?}");
        assert_eq!(seen.samples(m::JOB_QUEUE_WAIT, &[("queue", qa)]).len(), 5);
        let batches = seen.samples(m::CLAIM_BATCH_SIZE, &[("queue", qa)]);
        assert_eq!(batches.iter().sum::<f64>(), 5.0, "{batches:?}");
        assert_eq!(
            seen.samples(m::CLAIM_DURATION, &[("queue", qa)]).len(),
            batches.len()
        );
    }

    // The database gauges: a serving worker with them on publishes them.
    let worker = Worker::builder(b.client.clone(), registry)
        .queue(qa, 1)
        .metrics_gauges_interval(Some(Duration::from_millis(50)))
        .build()
        .unwrap();
    worker
        .run(tokio::time::sleep(Duration::from_millis(600)))
        .await
        .unwrap();
    let seen = self::seen();
    let jobs = |q, s| seen.gauge(m::JOBS, &[("queue", q), ("state", s)]);
    assert_eq!(jobs(qa, "done"), Some(3.0));
    assert_eq!(jobs(qa, "failed"), Some(2.0));
    assert_eq!(jobs(qb, "queued"), Some(1.0), "the snoozed job");
    assert_eq!(seen.gauge(m::JOBS_READY, &[("queue", qb)]), Some(0.0));
    assert!(seen.gauge(m::TABLE_DEAD_TUPLES, &[]).is_some());
    assert!(seen.gauge(m::OLDEST_XMIN_AGE, &[]).is_some());
}

/// Scale to zero: with the poll off, the gauges are read only around real work, never by an
/// idle worker (no statement at all: its connections do not move).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_poll_off_an_idle_worker_reads_no_gauges() {
    drop(seen()); // installs the recorder
    let b = setup().await;
    let app = format!("gauges-idle-{}", b.db.schema());
    let q = "metrics_idle";
    let worker = Worker::builder(
        client(&b, &app),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue(q, 2)
    .poll_interval(None)
    .idle_connection_timeout(None)
    .vacuum_threshold(None)
    .prune(None)
    .metrics_gauges_interval(Some(Duration::from_millis(100)))
    .build()
    .unwrap();
    let (stop, handle) = spawn_worker(worker);
    // The start (its first claim) is work: let the rounds after it pass.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let snapshot = || async {
        let rows = b
            .raw
            .query(
                "SELECT pid, state_change::text FROM pg_stat_activity
                 WHERE application_name = $1 ORDER BY pid",
                &[&app],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|r| (r.get::<_, i32>(0), r.get::<_, String>(1)))
            .collect::<Vec<_>>()
    };
    let before = snapshot().await;
    assert!(!before.is_empty());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(before, snapshot().await, "a statement was sent while idle");

    // Real work: the gauges follow it.
    b.client
        .enqueue(&NewJob::new("k", &1).queue(q))
        .await
        .unwrap();
    eventually(Duration::from_secs(15), "the gauges after work", || async {
        self::seen().gauge(m::JOBS, &[("queue", q), ("state", "done")]) == Some(1.0)
    })
    .await;
    stop.send(()).unwrap();
    handle.await.unwrap();
}

/// A schedule's fires count as enqueued jobs of their queue and kind, in the process that
/// fired them, and so does a job made by `run_schedule_now`.
#[tokio::test]
async fn schedule_fires_and_run_now_are_counted_as_enqueued() {
    use skiplock::periodic::{run_once, Schedule, SchedulerConfig};
    drop(seen());
    let b = setup().await;
    let (queue, kind) = ("metrics_sched", "tick_m");
    b.client
        .add_schedule(&Schedule::new("m", "* * * * * *", kind).queue(queue))
        .await
        .unwrap();
    let start: std::time::SystemTime = b
        .raw
        .query_one("SELECT last_fire_at FROM schedules WHERE name = 'm'", &[])
        .await
        .unwrap()
        .get(0);
    let r = run_once(
        &b.client,
        &SchedulerConfig::default(),
        Some(start + Duration::from_secs(3)),
    )
    .await
    .unwrap();
    assert_eq!(r.enqueued, 3, "{r:?}");
    assert!(b.client.run_schedule_now("m").await.unwrap().is_some());
    let rows: i64 = b
        .raw
        .query_one("SELECT count(*) FROM jobs WHERE queue = $1", &[&queue])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 4);
    let labels = [("queue", queue), ("kind", kind)];
    assert_eq!(seen().counter(m::JOBS_ENQUEUED, &labels), 4);
}
