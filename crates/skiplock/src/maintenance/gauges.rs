//! Publishes the database-derived gauges of [`crate::metrics`] (jobs per queue and state,
//! the oldest ready job's age, the jobs table's tuples, the oldest transaction holding back
//! vacuum) on a timer, from one process at a time, so that scrapes never touch the database.
//!
//! - Read with the health report's statements (`health_queues.sql`, `health_table.sql`,
//!   `health_blockers.sql`); the first is one pass over the jobs table.
//! - One process at a time: the `metrics` maintenance lock, kept by its holder from round to
//!   round (renewed each round, expiring after three intervals), so that one process keeps
//!   publishing; the others skip the round and publish nothing. A process that loses the
//!   lock leaves its last values in place (read [`crate::metrics::GAUGES_UPDATED`] for their
//!   age).
//! - A queue that disappears from the table (its jobs pruned) gets zeros, not its last counts.
//! - In a worker, with the poll off, a round runs only when there was real work since the
//!   last one, never on a bare timer (see [`Service::AFTER_WORK_ONLY`]): an idle worker sends
//!   nothing, and the gauges keep the values read after the last work.

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::metrics::gauge;
use tokio_util::sync::CancellationToken;

use super::{LeaseLock, Service};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::metrics as m;

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
    known: HashSet<String>,
}

impl Gauges {
    pub(crate) fn new(client: Client, interval: Duration) -> Self {
        Gauges {
            client,
            interval,
            lock: LeaseLock::new(LOCK, interval.saturating_mul(3)),
            known: HashSet::new(),
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
    known: &mut HashSet<String>,
) -> Result<GaugesReport> {
    const OP: &str = "read the metrics gauges";
    let store = client.store();
    let conn = client.conn(OP).await?;
    if !lock.acquire(&**conn, store).await? {
        return Ok(GaugesReport::NotElected);
    }
    let queues = store.health_queues(&**conn).await?;
    let table = store.health_table(&**conn, client.schema().name()).await?;
    let blockers = store.health_blockers(&**conn, 0).await?;
    drop(conn);

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
        seen.insert(name);
    }
    for gone in known.difference(&seen) {
        for state in ["queued", "running", "done", "failed"] {
            gauge!(m::JOBS, "queue" => gone.clone(), "state" => state).set(0.0);
        }
        gauge!(m::JOBS_READY, "queue" => gone.clone()).set(0.0);
        gauge!(m::JOBS_UNSERVED_WAITING, "queue" => gone.clone()).set(0.0);
        gauge!(m::OLDEST_READY_AGE, "queue" => gone.clone()).set(0.0);
        m::flag_labelled(m::QUEUE_PAUSED, gone, false);
    }
    let published = seen.len();
    *known = seen;
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
