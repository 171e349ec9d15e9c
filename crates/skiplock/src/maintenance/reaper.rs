//! Returns jobs whose lease expired to the queue, and fails queued jobs with no attempt left
//! (`job_reap.sql`, the statement [`Client::reap`](crate::Client::reap) runs too), at most
//! one reaper at a time across all processes (a transaction-scoped advisory lock; the others
//! skip the round). Each round moves at most 1,000 rows of each kind, in id order, skipping
//! rows another session holds locked; rounds repeat while they come back full. With the
//! fallback poll off, it runs only when there was real work since its last round.

use std::sync::Arc;

use super::{Counters, Shared};
use crate::db;
use crate::error::Error;

pub(crate) async fn run(shared: Arc<Shared>) {
    super::maintain(&shared, shared.cfg.reap_interval, || run_once(&shared)).await;
}

/// One reaper pass; errors are logged (the next pass tries again).
pub(crate) async fn run_once(shared: &Shared) {
    let mut total = 0;
    for _ in 0..crate::client::MAX_REAP_ROUNDS {
        match reap(shared).await {
            Ok((n, full)) => {
                total += n;
                if !full {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %super::producer::error_chain(&e), "reaping failed");
                break;
            }
        }
    }
    if total > 0 {
        Counters::add(&shared.counters.reaped, total);
        tracing::info!(
            reaped = total,
            "returned jobs with expired leases to the queue"
        );
        // They are ready now: look at once, even with the poll off.
        shared.wake_all();
    }
}

/// One round in its own transaction; returns how many rows it moved and whether the round
/// was full (so another may find more).
async fn reap(shared: &Shared) -> Result<(u64, bool), Error> {
    const OP: &str = "reap expired leases";
    let mut conn = shared.client.conn(OP).await?;
    let tx = conn.transaction().await.map_err(Error::db(OP))?;
    let sql = shared.client.sql();
    if !db::job::reaper_try_lock(&*tx, sql, lock_key(shared))
        .await
        .map_err(Error::db(OP))?
    {
        return Ok((0, false));
    }
    let reaped = db::job::reap(&*tx, sql).await.map_err(Error::db(OP))?;
    tx.commit().await.map_err(Error::db(OP))?;
    for r in &reaped {
        tracing::info!(id = %r.id, attempts = r.attempts, to = %r.state, "reaped");
    }
    let full = reaped.len() >= usize::try_from(db::job::REAP_BATCH).unwrap_or(usize::MAX);
    Ok((reaped.len() as u64, full))
}

fn lock_key(shared: &Shared) -> i64 {
    crate::migrate::lock_key(shared.client.schema()).wrapping_add(1)
}
