//! Pruning finished jobs: deleted, or moved to `jobs_archive`, in batches of at most
//! 10,000, by one process at a time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::Client;
use crate::db;
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

impl Client {
    /// Deletes (or archives) finished jobs older than the retention, in batches, each its
    /// own short statement, until none is left. Only one process prunes a schema at a time;
    /// a second one returns at once with [`PruneReport::skipped`].
    pub async fn prune(&self, opts: PruneOptions) -> Result<PruneReport> {
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
        let ttl_us = input::micros("lock", LOCK_TTL)?;
        let holder = holder_id();
        let conn = self.conn(OP).await?;
        let sql = self.sql();
        let mut report = PruneReport {
            archived: opts.archive,
            ..PruneReport::default()
        };
        if !db::maintenance::lock_acquire(&**conn, sql, PRUNE_LOCK, &holder, ttl_us)
            .await
            .map_err(Error::db(OP))?
        {
            report.skipped = true;
            return Ok(report);
        }
        let result = async {
            loop {
                let n = db::maintenance::prune_batch(
                    &**conn,
                    sql,
                    opts.archive,
                    retention_us,
                    opts.include_failed,
                    i64::from(opts.batch_size),
                )
                .await
                .map_err(Error::db(OP))?;
                if n > 0 {
                    report.removed += n.unsigned_abs();
                    report.batches += 1;
                }
                if n < i64::from(opts.batch_size) {
                    return Ok(());
                }
                // Renew the lock between batches.
                db::maintenance::lock_acquire(&**conn, sql, PRUNE_LOCK, &holder, ttl_us)
                    .await
                    .map_err(Error::db(OP))?;
            }
        }
        .await;
        let released = db::maintenance::lock_release(&**conn, sql, PRUNE_LOCK, &holder)
            .await
            .map_err(Error::db(OP));
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

    /// Takes the maintenance lock `name` for `ttl` (renewing it if this holder has it).
    #[doc(hidden)]
    pub async fn try_maintenance_lock(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool> {
        const OP: &str = "take a maintenance lock";
        let ttl_us = input::micros("lock", ttl)?;
        let conn = self.conn(OP).await?;
        db::maintenance::lock_acquire(&**conn, self.sql(), name, holder, ttl_us)
            .await
            .map_err(Error::db(OP))
    }
}

fn holder_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("pid {} {nanos}", std::process::id())
}
