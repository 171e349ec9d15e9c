//! Keeps the jobs table's dead row versions bounded by vacuuming it when they pass
//! [`VacuumConfig::threshold`] (a worker's `vacuum_threshold`).
//!
//! Every job leaves two dead row versions (its claim and its outcome are updates). Autovacuum
//! would remove them, but it looks at a table only every `autovacuum_naptime` (60 s by
//! default, a server-wide setting no table can lower), so at a steady load dead tuples climb
//! to a minute's worth between its visits. This service reads the table's dead-tuple count
//! every few seconds (`job_dead_tuples.sql`: the statistics system only, no table access) and,
//! past the threshold, runs `VACUUM` on the hot table itself (`job_vacuum.sql`), which takes
//! milliseconds when the table is small or mostly all-visible.
//!
//! - One process at a time: the vacuum maintenance lock (a row with an expiry, as the prune's,
//!   so that it works through PgBouncer); the others skip the round. `SKIP_LOCKED` also skips
//!   the table while an autovacuum worker holds it.
//! - In autocommit on a pooled connection (VACUUM cannot run in a transaction block), bounded
//!   by the connection's `statement_timeout` (skiplock's server timeouts, 60 s by default).
//! - It gives way to DDL as autovacuum does: while the VACUUM runs, another connection asks
//!   every [`GIVE_WAY_EVERY`] whether a session waits for a lock on the table that the VACUUM
//!   holds (`job_vacuum_give_way.sql`), and if one does, cancels the VACUUM. A migration's
//!   `CREATE INDEX` or `ALTER TABLE` then waits at most that long for it, instead of queueing
//!   every claim and heartbeat behind itself until the VACUUM ends.
//! - A role without the right to vacuum the table (the owner, or MAINTAIN on 17 and later)
//!   gets one warning, and the service stops: autovacuum alone, as before.
//! - While a snapshot holds vacuum back, a VACUUM removes nothing: the checks back off
//!   (doubling to [`VacuumConfig::max_interval`]) and return to
//!   [`VacuumConfig::check_interval`] once one removes dead tuples again.
//! - With the worker's poll off, a round runs only when there was real work since the last
//!   one, never on a bare timer (see [`Service::AFTER_WORK_ONLY`]).

use std::time::Duration;

use super::{LeaseLock, Service};
use crate::client::Client;
use crate::error::{Error, Result};

const LOCK: &str = "vacuum";
/// Long enough for any VACUUM the statement timeout lets run; released after each.
const LOCK_TTL: Duration = Duration::from_secs(120);
/// How often a running VACUUM looks for sessions waiting behind it.
pub(crate) const GIVE_WAY_EVERY: Duration = Duration::from_millis(100);

/// The vacuum service's settings in a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VacuumConfig {
    /// Vacuum when the table's dead row versions reach this many (default
    /// [`VacuumConfig::DEFAULT_THRESHOLD`], 1,000; at least 1).
    pub threshold: u64,
    /// How often the dead-tuple count is read while there is work (default 5 s).
    pub check_interval: Duration,
    /// The longest wait between checks while vacuums remove nothing (a held snapshot) or
    /// fail (default 30 s).
    pub max_interval: Duration,
}

impl VacuumConfig {
    /// The default threshold.
    pub(crate) const DEFAULT_THRESHOLD: u64 = 1_000;
    /// The default check interval.
    pub(crate) const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(5);
    /// The default longest wait.
    pub(crate) const DEFAULT_MAX_INTERVAL: Duration = Duration::from_secs(30);

    /// The defaults with `threshold`.
    pub(crate) fn with_threshold(threshold: u64) -> Self {
        VacuumConfig {
            threshold,
            ..Self::default()
        }
    }
}

impl Default for VacuumConfig {
    fn default() -> Self {
        VacuumConfig {
            threshold: Self::DEFAULT_THRESHOLD,
            check_interval: Self::DEFAULT_CHECK_INTERVAL,
            max_interval: Self::DEFAULT_MAX_INTERVAL,
        }
    }
}

/// What one round did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum VacuumReport {
    /// Under the threshold, or another process holds the vacuum lock.
    Nothing,
    /// Vacuumed; dead tuples left afterwards, when the statistics system shows the vacuum
    /// already.
    Vacuumed { before: i64, after: Option<i64> },
    /// This role may not vacuum the table.
    NotAllowed,
    /// The VACUUM was cancelled to let a session that waited for a lock on the table go
    /// first (a migration's DDL); the next round tries again.
    GaveWay,
}

/// The vacuum service, with its current wait between checks.
pub(crate) struct Vacuum {
    client: Client,
    cfg: VacuumConfig,
    threshold: i64,
    lock: LeaseLock,
    interval: Duration,
}

impl Vacuum {
    pub(crate) fn new(client: Client, cfg: VacuumConfig) -> Self {
        Vacuum {
            client,
            cfg,
            threshold: i64::try_from(cfg.threshold).unwrap_or(i64::MAX).max(1),
            lock: LeaseLock::new(LOCK, LOCK_TTL),
            interval: cfg.check_interval,
        }
    }
}

impl Service for Vacuum {
    type Report = VacuumReport;
    const NAME: &'static str = "vacuuming";

    fn first_wait(&self) -> Duration {
        self.interval
    }

    async fn run_once(&mut self) -> Result<VacuumReport> {
        match run_once(&self.client, self.threshold, &self.lock).await {
            Err(e) if insufficient_privilege(&e) => Ok(VacuumReport::NotAllowed),
            r => r,
        }
    }

    fn next(&mut self, last: &Result<VacuumReport>) -> Option<Duration> {
        let backed_off = (self.interval * 2).min(self.cfg.max_interval);
        self.interval = match last {
            Ok(VacuumReport::Nothing) => self.cfg.check_interval,
            Ok(VacuumReport::Vacuumed { before, after }) => {
                tracing::debug!(before, after, "vacuumed the jobs table");
                // Still over the threshold right after a VACUUM: something (a long
                // transaction, a replication slot) holds the dead tuples back. Look less
                // often until that passes.
                if after.is_some_and(|a| a >= self.threshold) {
                    backed_off
                } else {
                    self.cfg.check_interval
                }
            }
            Ok(VacuumReport::GaveWay) => {
                tracing::info!(
                    "the VACUUM of the jobs table gave way to a session waiting for its lock"
                );
                backed_off
            }
            Ok(VacuumReport::NotAllowed) => {
                tracing::warn!(
                    "this role may not VACUUM the jobs table (it needs to own it, or MAINTAIN on \
                     PostgreSQL 17 and later): dead tuples are left to autovacuum"
                );
                return None;
            }
            Err(_) => backed_off,
        };
        Some(self.interval)
    }
}

/// One round: reads the dead-tuple count and, at or past `threshold`, vacuums the table
/// under `lock`.
pub(crate) async fn run_once(
    client: &Client,
    threshold: i64,
    lock: &LeaseLock,
) -> Result<VacuumReport> {
    const OP: &str = "vacuum the jobs table";
    let store = client.store();
    let conn = client.conn(OP).await?;
    let (before, vacuums, may) = store.job_dead_tuples(&**conn).await?;
    if !may {
        return Ok(VacuumReport::NotAllowed);
    }
    if before < threshold {
        return Ok(VacuumReport::Nothing);
    }
    if !lock.acquire(&**conn, store).await? {
        return Ok(VacuumReport::Nothing);
    }
    let (vacuumed, gave_way) = vacuum_giving_way(client, &**conn).await;
    if gave_way && vacuumed.is_err() {
        lock.release(&**conn, store).await?;
        return Ok(VacuumReport::GaveWay);
    }
    let after = match &vacuumed {
        Ok(()) => store
            .job_dead_tuples(&**conn)
            .await
            .map(|(d, n, _)| (n > vacuums).then_some(d)),
        Err(_) => Ok(None),
    };
    let released = lock.release(&**conn, store).await;
    vacuumed?;
    released?;
    Ok(VacuumReport::Vacuumed {
        before,
        after: after?,
    })
}

/// Runs the VACUUM on `conn` while another pooled connection looks for sessions waiting
/// behind it every [`GIVE_WAY_EVERY`] and cancels it for them; the VACUUM's result, and
/// whether it was cancelled so (it may have ended just before).
async fn vacuum_giving_way<C: tokio_postgres::GenericClient + Sync>(
    client: &Client,
    conn: &C,
) -> (Result<()>, bool) {
    let store = client.store();
    let mut gave_way = false;
    let watch = async {
        loop {
            tokio::time::sleep(GIVE_WAY_EVERY).await;
            let asked = match client
                .conn("look for sessions waiting behind the VACUUM")
                .await
            {
                Ok(c) => store.job_vacuum_give_way(&**c).await,
                Err(e) => Err(e),
            };
            match asked {
                Ok(true) => {
                    gave_way = true;
                    // Cancelled: the VACUUM ends with an error now.
                    std::future::pending::<()>().await;
                }
                Ok(false) => {}
                Err(e) => {
                    // The VACUUM goes on as before; the statement timeout still bounds it.
                    tracing::debug!(error = %crate::error::error_chain(&e), "could not look behind the VACUUM");
                    std::future::pending::<()>().await;
                }
            }
        }
    };
    let vacuumed = tokio::select! {
        r = store.job_vacuum(conn) => r,
        () = watch => unreachable!("the watch never ends"),
    };
    (vacuumed, gave_way)
}

fn insufficient_privilege(e: &Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(db) = c
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::as_db_error)
        {
            return *db.code() == tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE;
        }
        cur = c.source();
    }
    false
}
