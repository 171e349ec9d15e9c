//! Keeps the jobs table's dead row versions bounded by vacuuming it when they pass
//! [`WorkerConfig::vacuum_threshold`](super::WorkerConfig::vacuum_threshold).
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
//! - A role without the right to vacuum the table (the owner, or MAINTAIN on 17 and later)
//!   gets one warning, and the service stops: autovacuum alone, as before.
//! - While a snapshot holds vacuum back, a VACUUM removes nothing: the checks back off
//!   (doubling to [`MAX_INTERVAL`]) and return to [`CHECK_INTERVAL`] once one removes dead
//!   tuples again.
//! - With the poll off, a round runs only when there was real work since the last one, never on
//!   a bare timer (see [`Shared::worked_since`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Shared;
use crate::db;
use crate::error::Error;

/// How often the dead-tuple count is read while there is work.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// The longest wait between checks while vacuums remove nothing (a held snapshot).
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(30);
const LOCK: &str = "vacuum";
/// Long enough for any VACUUM the statement timeout lets run; released after each.
const LOCK_TTL: Duration = Duration::from_secs(120);

/// What one round did.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    /// Under the threshold, or another process holds the vacuum lock.
    Nothing,
    /// Vacuumed; dead tuples left afterwards, when the statistics system shows the vacuum
    /// already.
    Vacuumed { before: i64, after: Option<i64> },
    /// This role may not vacuum the table.
    NotAllowed,
}

pub(crate) async fn run(shared: Arc<Shared>) {
    let Some(threshold) = shared.cfg.vacuum_threshold else {
        return;
    };
    let threshold = i64::try_from(threshold).unwrap_or(i64::MAX).max(1);
    let holder = holder_id();
    let mut interval = CHECK_INTERVAL;
    let mut seen = shared.activity();
    loop {
        tokio::select! {
            () = shared.stop_services.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        if !shared.worked_since(&mut seen) {
            continue;
        }
        match round(&shared, threshold, &holder).await {
            Ok(Round::Nothing) => interval = CHECK_INTERVAL,
            Ok(Round::Vacuumed { before, after }) => {
                tracing::debug!(before, after, "vacuumed the jobs table");
                // Still over the threshold right after a VACUUM: something (a long
                // transaction, a replication slot) holds the dead tuples back. Look less
                // often until that passes.
                interval = if after.is_some_and(|a| a >= threshold) {
                    (interval * 2).min(MAX_INTERVAL)
                } else {
                    CHECK_INTERVAL
                };
            }
            Ok(Round::NotAllowed) => {
                not_allowed();
                return;
            }
            Err(e) if insufficient_privilege(&e) => {
                not_allowed();
                return;
            }
            Err(e) => {
                tracing::warn!(error = %super::producer::error_chain(&e), "vacuuming failed");
                interval = (interval * 2).min(MAX_INTERVAL);
            }
        }
    }
}

fn not_allowed() {
    tracing::warn!(
        "this role may not VACUUM the jobs table (it needs to own it, or MAINTAIN on \
         PostgreSQL 17 and later): dead tuples are left to autovacuum"
    );
}

async fn round(shared: &Shared, threshold: i64, holder: &str) -> Result<Round, Error> {
    const OP: &str = "vacuum the jobs table";
    let sql = shared.client.sql();
    let conn = shared.client.conn(OP).await?;
    let (before, vacuums, may) = db::maintenance::dead_tuples(&**conn, sql)
        .await
        .map_err(Error::db(OP))?;
    if !may {
        return Ok(Round::NotAllowed);
    }
    if before < threshold {
        return Ok(Round::Nothing);
    }
    let ttl_us = crate::input::micros("lock", LOCK_TTL)?;
    if !db::maintenance::lock_acquire(&**conn, sql, LOCK, holder, ttl_us)
        .await
        .map_err(Error::db(OP))?
    {
        return Ok(Round::Nothing);
    }
    let vacuumed = db::maintenance::vacuum(&**conn, sql)
        .await
        .map_err(Error::db(OP));
    let after = match &vacuumed {
        Ok(()) => db::maintenance::dead_tuples(&**conn, sql)
            .await
            .map(|(d, n, _)| (n > vacuums).then_some(d))
            .map_err(Error::db(OP)),
        Err(_) => Ok(None),
    };
    let released = db::maintenance::lock_release(&**conn, sql, LOCK, holder)
        .await
        .map_err(Error::db(OP));
    vacuumed?;
    released?;
    Ok(Round::Vacuumed {
        before,
        after: after?,
    })
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

fn holder_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("pid {} {nanos}", std::process::id())
}
