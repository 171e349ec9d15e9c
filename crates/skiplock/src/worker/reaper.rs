//! Returns jobs whose lease expired to the queue (`job_reap.sql`), at most one reaper at a
//! time across all processes (a transaction-scoped advisory lock; the others skip the round).
//! With the fallback poll off, it runs only when there was real work since its last round.

use std::sync::Arc;

use super::{Counters, Shared};
use crate::db;
use crate::error::Error;

pub(crate) async fn run(shared: Arc<Shared>) {
    super::maintain(&shared, shared.cfg.reap_interval, || run_once(&shared)).await;
}

/// One reaper round; errors are logged (the next round tries again).
pub(crate) async fn run_once(shared: &Shared) {
    match reap(shared).await {
        Ok(0) => {}
        Ok(n) => {
            Counters::add(&shared.counters.reaped, n);
            tracing::info!(reaped = n, "returned jobs with expired leases to the queue");
            // They are ready now: look at once, even with the poll off.
            shared.wake_all();
        }
        Err(e) => tracing::warn!(error = %super::producer::error_chain(&e), "reaping failed"),
    }
}

async fn reap(shared: &Shared) -> Result<u64, Error> {
    const OP: &str = "reap expired leases";
    let mut conn = shared.client.conn(OP).await?;
    let tx = conn.transaction().await.map_err(Error::db(OP))?;
    let sql = shared.client.sql();
    if !db::job::reaper_try_lock(&*tx, sql, lock_key(shared))
        .await
        .map_err(Error::db(OP))?
    {
        return Ok(0);
    }
    let reaped = db::job::reap(&*tx, sql).await.map_err(Error::db(OP))?;
    tx.commit().await.map_err(Error::db(OP))?;
    for r in &reaped {
        tracing::info!(id = %r.id, attempts = r.attempts, to = %r.state, "lease expired: reaped");
    }
    Ok(reaped.len() as u64)
}

fn lock_key(shared: &Shared) -> i64 {
    crate::migrate::lock_key(shared.client.schema()).wrapping_add(1)
}
