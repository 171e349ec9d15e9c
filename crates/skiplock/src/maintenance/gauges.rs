//! Publishes the database-derived gauges of [`crate::metrics`] (jobs per queue and state,
//! the oldest ready job's age, held jobs, the queues' limits and why their last claims were
//! bound, the jobs table's tuples, the oldest transaction holding back vacuum) on a timer,
//! from one process at a time, so that scrapes never touch the database.
//!
//! - Read with the health report's statements (`health_queues.sql`, `health_table.sql`,
//!   `health_blockers.sql`); the first is one pass over the jobs table. Held jobs and limits
//!   come from `queue_list.sql` ([`Client::queues`]), which reads only the queued and running
//!   rows (their partial indexes) and the `queues` table's few rows.
//! - One process at a time: the `metrics` maintenance lock, kept by its holder from round to
//!   round (renewed each round, expiring after three intervals), so that one process keeps
//!   publishing; the others skip the round and publish nothing. A process that loses the
//!   lock leaves its last values in place (read [`crate::metrics::GAUGES_UPDATED`] for their
//!   age).
//! - A queue that disappears from the table (its jobs pruned) gets zeros, not its last counts;
//!   the limit gauges are published for the queues with limits, and a queue whose limits are
//!   lifted gets zeros.
//! - Each round also writes the per-queue, per-minute rollup `queue_stats` (migration 14,
//!   `queue_stats_write.sql`) from the same pass: the jobs that reached done and failed in
//!   the current minute so far (the minute's row is overwritten by every round in it, so it
//!   holds the latest exact count) and in the minute before (final once a round ran after
//!   it ended), and the depths at the round (available, scheduled, running). Rows older than
//!   25 hours are deleted in the same statement. Read with [`Client::queue_stats`]. A failed
//!   write is logged and the gauges are still published.
//! - In a worker, with the poll off, a round runs only when there was real work since the
//!   last one, never on a bare timer (see [`Service::AFTER_WORK_ONLY`]): an idle worker sends
//!   nothing, and the gauges keep the values read after the last work.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::metrics::gauge;
use tokio_util::sync::CancellationToken;

use super::{LeaseLock, Service};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::metrics as m;
use crate::QueueLimits;

const LOCK: &str = "metrics";

/// What one round did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GaugesReport {
    /// Another process holds the lock: nothing published.
    NotElected,
    /// Published, for this many queues.
    Published { queues: usize },
}

/// The gauges service.
pub(crate) struct Gauges {
    client: Client,
    interval: Duration,
    lock: LeaseLock,
    /// The queues published last round, so that vanished ones get zeros.
    known: Known,
}

/// The queues published last round.
#[derive(Debug, Default)]
pub(crate) struct Known {
    /// Every queue: vanished ones get zeros.
    queues: HashSet<String>,
    /// The queues with limits: one whose limits were lifted gets zero limits.
    limited: HashSet<String>,
}

impl Gauges {
    pub(crate) fn new(client: Client, interval: Duration) -> Self {
        Gauges {
            client,
            interval,
            lock: LeaseLock::new(LOCK, interval.saturating_mul(3)),
            known: Known::default(),
        }
    }
}

impl Service for Gauges {
    type Report = GaugesReport;
    const NAME: &'static str = "reading the metrics gauges";

    fn first_wait(&self) -> Duration {
        // At once: a freshly started process shows its gauges on its first scrape.
        Duration::ZERO
    }

    async fn run_once(&mut self) -> Result<GaugesReport> {
        run_once(&self.client, &self.lock, &mut self.known).await
    }

    fn next(&mut self, _last: &Result<GaugesReport>) -> Option<Duration> {
        Some(self.interval)
    }
}

/// One round: takes (or renews) the lock, reads, and sets the gauges.
pub(crate) async fn run_once(
    client: &Client,
    lock: &LeaseLock,
    known: &mut Known,
) -> Result<GaugesReport> {
    const OP: &str = "read the metrics gauges";
    let store = client.store();
    let conn = client.conn(OP).await?;
    if !lock.acquire(&**conn, store).await? {
        return Ok(GaugesReport::NotElected);
    }
    let (queues, minute): (Vec<_>, Vec<_>) = store
        .health_queues_rollup(&**conn)
        .await?
        .into_iter()
        .unzip();
    if let Err(e) = store.queue_stats_write(&**conn, &minute).await {
        // The gauges are still published.
        tracing::warn!(error = %crate::error::error_chain(&e), "writing the per-minute counts failed");
    }
    let table = store.health_table(&**conn, client.schema().name()).await?;
    let blockers = store.health_blockers(&**conn, 0).await?;
    let states = store.queue_list(&**conn).await?;
    drop(conn);
    let held: HashMap<&str, i64> = states.iter().map(|s| (s.queue.as_str(), s.held)).collect();

    let mut seen = HashSet::with_capacity(queues.len());
    for q in &queues {
        let name = q.queue.clone();
        for (state, n) in [
            ("queued", q.queued),
            ("running", q.running),
            ("done", q.done),
            ("failed", q.failed),
        ] {
            gauge!(m::JOBS, "queue" => name.clone(), "state" => state).set(n as f64);
        }
        gauge!(m::JOBS_READY, "queue" => name.clone()).set(q.ready as f64);
        gauge!(m::JOBS_UNSERVED_WAITING, "queue" => name.clone()).set(q.unserved as f64);
        gauge!(m::OLDEST_READY_AGE, "queue" => name.clone()).set(q.oldest_ready_age_s);
        m::flag_labelled(m::QUEUE_PAUSED, &name, q.paused);
        let h = held.get(name.as_str()).copied().unwrap_or(0);
        gauge!(m::JOBS_HELD, "queue" => name.clone()).set(h as f64);
        seen.insert(name);
    }
    for gone in known.queues.difference(&seen) {
        for state in ["queued", "running", "done", "failed"] {
            gauge!(m::JOBS, "queue" => gone.clone(), "state" => state).set(0.0);
        }
        gauge!(m::JOBS_READY, "queue" => gone.clone()).set(0.0);
        gauge!(m::JOBS_UNSERVED_WAITING, "queue" => gone.clone()).set(0.0);
        gauge!(m::OLDEST_READY_AGE, "queue" => gone.clone()).set(0.0);
        m::flag_labelled(m::QUEUE_PAUSED, gone, false);
        gauge!(m::JOBS_HELD, "queue" => gone.clone()).set(0.0);
    }
    let published = seen.len();
    known.queues = seen;
    let mut limited = HashSet::new();
    for s in states.iter().filter(|s| s.limits.is_limited()) {
        limits(&s.queue, &s.limits, s.bound.as_deref());
        limited.insert(s.queue.clone());
    }
    for lifted in known.limited.difference(&limited) {
        limits(lifted, &QueueLimits::none(), None);
    }
    known.limited = limited;
    if let Some(t) = table {
        gauge!(m::TABLE_DEAD_TUPLES).set(t.n_dead_tup as f64);
        gauge!(m::TABLE_LIVE_TUPLES).set(t.n_live_tup as f64);
        gauge!(m::TABLE_BYTES).set(t.total_bytes as f64);
    }
    let oldest = blockers
        .iter()
        .map(|b| b.transaction_age_s)
        .fold(0.0_f64, f64::max);
    gauge!(m::OLDEST_XMIN_AGE).set(oldest);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    gauge!(m::GAUGES_UPDATED).set(now);
    Ok(GaugesReport::Published { queues: published })
}

/// One row of the per-queue, per-minute rollup ([`Client::queue_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueMinute {
    /// The queue.
    pub queue: String,
    /// The minute (its start, by the database's clock).
    pub minute: SystemTime,
    /// Jobs that reached `done` in this minute (still in the table when counted).
    pub done: i64,
    /// Jobs that reached `failed` in this minute.
    pub failed: i64,
    /// Jobs ready to run, at the minute's last round.
    pub available: i64,
    /// Queued jobs due later (retries waiting for their backoff included), at that round.
    pub scheduled: i64,
    /// Jobs running, at that round.
    pub running: i64,
}

impl Client {
    /// The per-queue, per-minute rollup since `since`, oldest first (the `queue_stats`
    /// table, kept for 25 hours). Written by the gauges service (a worker's
    /// [`WorkerConfig::metrics_gauges_interval`](crate::WorkerConfig::metrics_gauges_interval),
    /// or [`publish_gauges`](crate::metrics::publish_gauges)): without one running, it stays
    /// empty. A minute's done and failed counts are exact for the jobs that finished in it
    /// once a round ran after the minute ended; until then they count those finished by the
    /// last round.
    pub async fn queue_stats(&self, since: SystemTime) -> Result<Vec<QueueMinute>> {
        const OP: &str = "read the queues' per-minute counts";
        let conn = self.conn(OP).await?;
        self.store().queue_stats_list(&**conn, since).await
    }
}

/// Sets a queue's limit gauges (0: no such limit) and why its last claim was bound.
fn limits(queue: &str, l: &QueueLimits, bound: Option<&str>) {
    let n = |v: Option<u32>| v.map_or(0.0, f64::from);
    gauge!(m::QUEUE_CONCURRENCY_LIMIT, "queue" => queue.to_owned()).set(n(l.concurrency));
    gauge!(m::QUEUE_PER_KEY_LIMIT, "queue" => queue.to_owned()).set(n(l.per_key));
    gauge!(m::QUEUE_RATE_LIMIT, "queue" => queue.to_owned()).set(n(l.rate.map(|r| r.limit)));
    gauge!(m::QUEUE_RATE_PERIOD, "queue" => queue.to_owned())
        .set(l.rate.map_or(0.0, |r| r.period.as_secs_f64()));
    for reason in ["slots", "rate"] {
        let on = if bound == Some(reason) { 1.0 } else { 0.0 };
        gauge!(m::QUEUE_LIMIT_BOUND, "queue" => queue.to_owned(), "reason" => reason).set(on);
    }
}

/// Publishes the database gauges of [`crate::metrics`] every `interval` until `shutdown`
/// resolves, as a worker does with
/// [`WorkerConfig::metrics_gauges_interval`](crate::WorkerConfig::metrics_gauges_interval), for a
/// process that runs no worker (a dashboard, say). One process at a time publishes them
/// (a maintenance lock elects it). Unlike a worker's, these rounds run on the bare timer,
/// sending a few statements every `interval` even while the queue is idle.
pub async fn publish_gauges(
    client: &Client,
    interval: Duration,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    if interval.is_zero() {
        return Err(Error::invalid(
            "metrics gauges interval",
            "it must be above zero",
        ));
    }
    let stop = CancellationToken::new();
    let service = Gauges::new(client.clone(), interval);
    let driven = super::drive(service, &stop, || true, |_| {});
    tokio::select! {
        () = driven => {}
        () = shutdown => stop.cancel(),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

    use super::*;
    use crate::NewJob;

    /// A gauge's name and sorted labels.
    type Id = (String, Vec<(String, String)>);

    /// The gauges in the snapshot.
    fn gauges(s: &Snapshotter) -> HashMap<Id, f64> {
        s.snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(k, _, _, v)| match v {
                DebugValue::Gauge(g) => {
                    let key = k.key();
                    let mut labels: Vec<(String, String)> = key
                        .labels()
                        .map(|l| (l.key().to_owned(), l.value().to_owned()))
                        .collect();
                    labels.sort();
                    Some(((key.name().to_owned(), labels), g.into_inner()))
                }
                _ => None,
            })
            .collect()
    }

    fn get(g: &HashMap<Id, f64>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut want: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        want.sort();
        g.get(&(name.to_owned(), want)).copied()
    }

    /// Held jobs per queue, a limited queue's limits and why its last claim was bound, and
    /// zeros once the limits are lifted; a queue without limits has no limit gauges. Through
    /// a recorder of this test's thread only (a current-thread runtime), so that other tests
    /// do not disturb it.
    #[tokio::test]
    async fn held_jobs_limits_and_bounds_are_published() {
        let db = skiplock_testdb::TestDb::new().await;
        let client = Client::builder(db.url())
            .schema(db.schema())
            .build()
            .unwrap();
        client.migrate().await.unwrap();
        client
            .set_queue_limits(
                "lim",
                QueueLimits::none()
                    .concurrency(3)
                    .per_key(2)
                    .rate(10, Duration::from_millis(500)),
                None,
            )
            .await
            .unwrap();
        client
            .enqueue(&NewJob::from_json("k", "{}").queue("lim"))
            .await
            .unwrap();
        for _ in 0..3 {
            client
                .enqueue(&NewJob::from_json("k", "{}").queue("seq").sequence("s1"))
                .await
                .unwrap();
        }
        let raw = db.connect().await.unwrap();
        raw.batch_execute(&format!(
            "UPDATE \"{}\".queues SET limit_bound = 'rate' WHERE name = 'lim'",
            db.schema()
        ))
        .await
        .unwrap();

        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = ::metrics::set_default_local_recorder(&recorder);
        let lock = LeaseLock::new(LOCK, Duration::from_secs(30));
        let mut known = Known::default();
        let r = run_once(&client, &lock, &mut known).await.unwrap();
        assert_eq!(r, GaugesReport::Published { queues: 2 });
        let g = gauges(&snapshotter);
        assert_eq!(get(&g, m::JOBS_HELD, &[("queue", "seq")]), Some(2.0));
        assert_eq!(get(&g, m::JOBS_READY, &[("queue", "seq")]), Some(1.0));
        assert_eq!(get(&g, m::JOBS_HELD, &[("queue", "lim")]), Some(0.0));
        let lim = [("queue", "lim")];
        assert_eq!(get(&g, m::QUEUE_CONCURRENCY_LIMIT, &lim), Some(3.0));
        assert_eq!(get(&g, m::QUEUE_PER_KEY_LIMIT, &lim), Some(2.0));
        assert_eq!(get(&g, m::QUEUE_RATE_LIMIT, &lim), Some(10.0));
        assert_eq!(get(&g, m::QUEUE_RATE_PERIOD, &lim), Some(0.5));
        let bound = |g: &HashMap<_, f64>, reason| {
            get(
                g,
                m::QUEUE_LIMIT_BOUND,
                &[("queue", "lim"), ("reason", reason)],
            )
        };
        assert_eq!(bound(&g, "rate"), Some(1.0));
        assert_eq!(bound(&g, "slots"), Some(0.0));
        assert_eq!(
            get(&g, m::QUEUE_CONCURRENCY_LIMIT, &[("queue", "seq")]),
            None,
            "no limit gauges for a queue that never had limits"
        );

        // Limits lifted: zeros, not the last values.
        client
            .set_queue_limits("lim", QueueLimits::none(), None)
            .await
            .unwrap();
        run_once(&client, &lock, &mut known).await.unwrap();
        let g = gauges(&snapshotter);
        assert_eq!(get(&g, m::QUEUE_CONCURRENCY_LIMIT, &lim), Some(0.0));
        assert_eq!(get(&g, m::QUEUE_RATE_PERIOD, &lim), Some(0.0));
        assert_eq!(bound(&g, "rate"), Some(0.0));
        assert_eq!(get(&g, m::JOBS_HELD, &[("queue", "seq")]), Some(2.0));
    }
}
