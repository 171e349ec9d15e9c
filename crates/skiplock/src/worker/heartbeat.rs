//! Renews the leases of all of this worker's running jobs in one statement per interval
//! (`job_extend_many.sql`). A job whose renewal is refused is no longer this worker's: its
//! handler is told (its context is cancelled) and its result will be dropped. Sends nothing
//! while no job runs.

use std::sync::Arc;

use super::Shared;
use crate::db;
use crate::error::Error;
use crate::job::JobId;

pub(crate) async fn run(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(shared.cfg.heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            () = shared.stop_services.cancelled() => return,
            _ = tick.tick() => {}
        }
        let held: Vec<(JobId, i32)> = shared.held_leases();
        if held.is_empty() {
            continue;
        }
        shared.note_activity();
        match extend(&shared, &held).await {
            Ok(renewed) => {
                if renewed.len() == held.len() {
                    continue;
                }
                let renewed: std::collections::HashSet<JobId> = renewed.into_iter().collect();
                for (id, attempt) in held.iter().filter(|(id, _)| !renewed.contains(id)) {
                    if shared.mark_lost(*id, *attempt) {
                        tracing::warn!(id = %id, attempt, "lease lost: the job is no longer ours; cancelling its handler");
                    }
                }
            }
            Err(e) => {
                // The leases still run; the next beat tries again.
                tracing::warn!(error = %super::producer::error_chain(&e), "heartbeat failed");
            }
        }
    }
}

async fn extend(shared: &Shared, held: &[(JobId, i32)]) -> Result<Vec<JobId>, Error> {
    let conn = shared.client.conn("renew leases").await?;
    db::job::extend_many(
        &**conn,
        shared.client.cache(&conn),
        shared.client.sql(),
        held,
        shared.lease_us,
    )
    .await
    .map_err(Error::db("renew leases"))
}
