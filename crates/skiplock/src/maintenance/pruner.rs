//! The pruner: deletes finished jobs past their retention, or moves them to `jobs_archive`,
//! in batches of at most 10,000, one process at a time (the `prune` maintenance lock, renewed
//! between batches). A worker prunes every [`PrunerConfig::interval`]; with its poll off, only
//! after real work. [`Client::prune`] runs the same round.

use std::time::Duration;

use super::{LeaseLock, Service};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::input;

/// What to prune.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneOptions {
    /// Remove jobs that finished longer ago than this (default 7 days).
    pub older_than: Duration,
    /// Remove `failed` jobs too, not only `done` ones (default false: failed jobs are kept
    /// for inspection).
    pub include_failed: bool,
    /// Move the jobs to `jobs_archive` instead of deleting them (default false).
    pub archive: bool,
    /// Jobs per statement (default and maximum 10,000).
    pub batch_size: u32,
}

impl PruneOptions {
    /// The default retention.
    pub const DEFAULT_OLDER_THAN: Duration = Duration::from_secs(7 * 24 * 3600);
    /// The largest batch.
    pub const MAX_BATCH: u32 = 10_000;

    /// Done jobs older than `older_than`, deleted, in batches of 10,000.
    pub fn older_than(older_than: Duration) -> Self {
        PruneOptions {
            older_than,
            ..Self::default()
        }
    }

    /// Removes failed jobs too.
    pub fn include_failed(mut self, yes: bool) -> Self {
        self.include_failed = yes;
        self
    }

    /// Archives instead of deleting.
    pub fn archive(mut self, yes: bool) -> Self {
        self.archive = yes;
        self
    }

    /// Sets the batch size (1 to 10,000).
    pub fn batch_size(mut self, n: u32) -> Self {
        self.batch_size = n;
        self
    }
}

impl Default for PruneOptions {
    fn default() -> Self {
        PruneOptions {
            older_than: Self::DEFAULT_OLDER_THAN,
            include_failed: false,
            archive: false,
            batch_size: Self::MAX_BATCH,
        }
    }
}

/// What a prune did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PruneReport {
    /// Jobs deleted or archived.
    pub removed: u64,
    /// Statements that removed at least one job.
    pub batches: u32,
    /// Whether they were archived.
    pub archived: bool,
    /// Another process was pruning: this one did nothing.
    pub skipped: bool,
}

const PRUNE_LOCK: &str = "prune";
const LOCK_TTL: Duration = Duration::from_secs(300);

/// The pruner's settings in a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrunerConfig {
    /// What to prune (default [`PruneOptions::default`]: `done` jobs older than 7 days,
    /// deleted).
    pub options: PruneOptions,
    /// How often (default [`PrunerConfig::DEFAULT_INTERVAL`], 1 hour).
    pub interval: Duration,
}

impl PrunerConfig {
    /// The default interval between rounds.
    pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(3600);
}

impl Default for PrunerConfig {
    fn default() -> Self {
        PrunerConfig {
            options: PruneOptions::default(),
            interval: Self::DEFAULT_INTERVAL,
        }
    }
}

/// The pruner as a worker's service.
pub(crate) struct Pruner {
    client: Client,
    cfg: PrunerConfig,
}

impl Pruner {
    pub(crate) fn new(client: Client, cfg: PrunerConfig) -> Self {
        Pruner { client, cfg }
    }
}

impl Service for Pruner {
    type Report = PruneReport;
    const NAME: &'static str = "pruning";

    fn first_wait(&self) -> Duration {
        self.cfg.interval
    }

    async fn run_once(&mut self) -> Result<PruneReport> {
        let report = run_once(&self.client, self.cfg.options).await;
        if report.as_ref().is_ok_and(|r| r.skipped) {
            tracing::debug!("another process is pruning");
        }
        report
    }

    fn next(&mut self, _: &Result<PruneReport>) -> Option<Duration> {
        Some(self.cfg.interval)
    }
}

/// One pruning round: deletes (or archives) finished jobs older than the retention, in
/// batches, each its own short statement, until none is left; skipped (see
/// [`PruneReport::skipped`]) while another process holds the `prune` lock.
pub(crate) async fn run_once(client: &Client, opts: PruneOptions) -> Result<PruneReport> {
    const OP: &str = "prune finished jobs";
    if opts.batch_size == 0 || opts.batch_size > PruneOptions::MAX_BATCH {
        return Err(Error::invalid(
            "batch size",
            format!(
                "{} is outside 1..={}",
                opts.batch_size,
                PruneOptions::MAX_BATCH
            ),
        ));
    }
    let retention_us = input::delay_micros(opts.older_than)?;
    let lock = LeaseLock::new(PRUNE_LOCK, LOCK_TTL);
    let conn = client.conn(OP).await?;
    let store = client.store();
    let mut report = PruneReport {
        archived: opts.archive,
        ..PruneReport::default()
    };
    if !lock.acquire(&**conn, store).await? {
        report.skipped = true;
        return Ok(report);
    }
    let result = async {
        loop {
            let batch = i64::from(opts.batch_size);
            let n = if opts.archive {
                store
                    .job_archive(&**conn, retention_us, opts.include_failed, batch)
                    .await?
            } else {
                store
                    .job_prune(&**conn, retention_us, opts.include_failed, batch)
                    .await?
            };
            if n > 0 {
                report.removed += n.unsigned_abs();
                report.batches += 1;
            }
            if n < i64::from(opts.batch_size) {
                return Ok(());
            }
            // Renew the lock between batches.
            lock.acquire(&**conn, store).await?;
        }
    }
    .await;
    let released = lock.release(&**conn, store).await;
    result?;
    released?;
    if report.removed > 0 {
        tracing::info!(
            removed = report.removed,
            batches = report.batches,
            archived = opts.archive,
            "pruned finished jobs"
        );
    }
    Ok(report)
}

impl Client {
    /// Deletes (or archives) finished jobs older than the retention, in batches, each its
    /// own short statement, until none is left. Only one process prunes a schema at a time;
    /// a second one returns at once with [`PruneReport::skipped`].
    pub async fn prune(&self, opts: PruneOptions) -> Result<PruneReport> {
        run_once(self, opts).await
    }
}
