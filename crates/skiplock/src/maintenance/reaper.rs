//! Returns jobs whose lease expired to the queue, and fails queued jobs with no attempt left
//! (`job_reap.sql`), at most one reaper at a time across all processes (a transaction-scoped
//! advisory lock; the others skip the round). Each round moves at most 1,000 rows of each
//! kind, in id order, skipping rows another session holds locked; rounds repeat while they
//! come back full. A worker reaps once as it starts, then every [`ReaperConfig::interval`],
//! and also when the earliest lease of a running job ends (read after each round,
//! `job_next_lease.sql`). With its fallback poll off, a round on the interval runs only when
//! there was real work since the last one, but the one at start and the one at a lease's end
//! always run: an idle worker cannot learn of a dead worker's lease otherwise, and a worker
//! with nothing running anywhere still sends nothing. [`Client::reap`] runs the same pass
//! under the same lock.

use std::time::Duration;

use tokio::time::Instant;

use super::Service;
use crate::client::Client;
use crate::db;
use crate::error::Result;
use crate::job::{JobState, ReapedJob};

/// The most rounds one pass runs.
pub(crate) const MAX_ROUNDS: usize = 100;

/// How long [`Client::reap`] waits for another process's round to end before it gives up
/// its own (that process is reaping the same rows).
const MANUAL_WAIT: Duration = Duration::from_secs(10);

/// How long after a lease's end, by the database's clock, the reaper looks at it, and the
/// least wait for a lease that has ended already (a row another session held locked in the
/// last round): a round never repeats faster than this.
const LEASE_GRACE: Duration = Duration::from_secs(1);

/// The reaper's settings in a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReaperConfig {
    /// How often (default [`ReaperConfig::DEFAULT_INTERVAL`], 30 s).
    pub interval: Duration,
}

impl ReaperConfig {
    /// The default interval between passes.
    pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
}

impl Default for ReaperConfig {
    fn default() -> Self {
        ReaperConfig {
            interval: Self::DEFAULT_INTERVAL,
        }
    }
}

/// What one reaper pass did.
#[derive(Debug, Default)]
pub(crate) struct ReapReport {
    /// The jobs it moved, in the order it moved them.
    pub jobs: Vec<ReapedJob>,
    /// Rounds that moved rows or found none (each its own transaction).
    pub rounds: u32,
    /// Another process held the reaper's lock: a round was skipped, and the pass ended.
    pub skipped: bool,
    /// After the last round that ran: microseconds until the earliest lease of a running job
    /// ends (zero or less: ended already), `None` when no job was running.
    pub next_lease_us: Option<i64>,
}

impl ReapReport {
    /// Jobs put back in the queue.
    pub(crate) fn requeued(&self) -> u64 {
        self.jobs
            .iter()
            .filter(|j| j.state == JobState::Queued)
            .count() as u64
    }

    /// Jobs moved to `failed` (no attempt left).
    pub(crate) fn failed(&self) -> u64 {
        self.jobs.len() as u64 - self.requeued()
    }
}

/// The reaper as a worker's service.
pub(crate) struct Reaper {
    client: Client,
    cfg: ReaperConfig,
    /// When a round is due whatever the worker did meanwhile: at start, and when the
    /// earliest lease it knows of ends.
    due_at: Option<Instant>,
}

impl Reaper {
    pub(crate) fn new(client: Client, cfg: ReaperConfig) -> Self {
        Reaper {
            client,
            cfg,
            due_at: Some(Instant::now()),
        }
    }
}

impl Service for Reaper {
    type Report = ReapReport;
    const NAME: &'static str = "reaping";

    fn first_wait(&self) -> Duration {
        Duration::ZERO
    }

    fn due_in(&self) -> Option<Duration> {
        self.due_at
            .map(|t| t.saturating_duration_since(Instant::now()))
    }

    async fn run_once(&mut self) -> Result<ReapReport> {
        run_once(&self.client).await
    }

    fn next(&mut self, last: &Result<ReapReport>) -> Option<Duration> {
        let lease = match last {
            Ok(r) if !r.skipped => r
                .next_lease_us
                .map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)) + LEASE_GRACE),
            // Another process reaps now, or the round failed: look again on the interval.
            _ => None,
        };
        self.due_at = lease.and_then(|w| Instant::now().checked_add(w));
        Some(self.cfg.interval)
    }
}

/// One reaper pass: rounds of at most 1,000 rows of each kind until one comes back short,
/// at most [`MAX_ROUNDS`], each in its own transaction under the reaper's lock.
pub(crate) async fn run_once(client: &Client) -> Result<ReapReport> {
    let mut report = ReapReport::default();
    for _ in 0..MAX_ROUNDS {
        let Some((round, next_lease_us)) = round(client).await? else {
            report.skipped = true;
            break;
        };
        let full = round.len() >= usize::try_from(db::job::REAP_BATCH).unwrap_or(usize::MAX);
        report.rounds += 1;
        report.jobs.extend(round);
        report.next_lease_us = next_lease_us;
        if !full {
            break;
        }
    }
    Ok(report)
}

/// One round in its own transaction: the rows it moved and how long until the earliest lease
/// of a running job ends, or `None` if another process holds the reaper's lock.
async fn round(client: &Client) -> Result<Option<(Vec<ReapedJob>, Option<i64>)>> {
    const OP: &str = "reap expired leases";
    let mut conn = client.conn(OP).await?;
    let store = client.store();
    let tx = store.begin(&mut conn, OP).await?;
    if !store.reaper_try_lock(&*tx, lock_key(client)).await? {
        return Ok(None);
    }
    let reaped = store.job_reap(&*tx).await?;
    let next_lease_us = store.job_next_lease(&*tx).await?;
    store.commit(tx, OP).await?;
    for r in &reaped {
        tracing::info!(id = %r.id, attempts = r.attempts, to = %r.state, "reaped");
    }
    Ok(Some((reaped, next_lease_us)))
}

/// The reaper's advisory lock key: the schema's migration lock key, plus one.
fn lock_key(client: &Client) -> i64 {
    crate::migrate::lock_key(client.schema()).wrapping_add(1)
}

impl Client {
    /// Returns jobs whose lease has expired to `queued`, or to `failed` if they have used all
    /// their attempts, and moves queued jobs with no attempt left to `failed`. Keeps an
    /// earlier `last_error`, else records `lease expired` (or `no attempts left`). Also
    /// releases the lease of a cancelled job once it has ended (its `locked_until` becomes
    /// NULL; it held the job's slot until then), which is not reported: its state stays.
    /// Runs the worker reaper's pass, under the same lock: rounds of up to 1,000 rows of each
    /// kind, each in its own transaction, until a round comes back short; a row another
    /// session holds locked is left for a later call. While another process's reaper holds
    /// the lock, it waits for that round to end (up to 10 s; past that, that process reaps
    /// the rows).
    pub async fn reap(&self) -> Result<Vec<ReapedJob>> {
        let give_up = tokio::time::Instant::now() + MANUAL_WAIT;
        let mut wait = Duration::from_millis(20);
        loop {
            let report = run_once(self).await?;
            if !report.skipped
                || !report.jobs.is_empty()
                || tokio::time::Instant::now() + wait > give_up
            {
                return Ok(report.jobs);
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_millis(500));
        }
    }
}
