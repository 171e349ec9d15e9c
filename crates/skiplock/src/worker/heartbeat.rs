//! Renews the leases of all of this worker's jobs in one statement per interval
//! (`job_extend_many.sql`): the running ones, and the finished ones whose outcome the
//! completer has not written yet (so that a slow or retried write cannot let a lease expire
//! and the job run twice). A running job whose renewal is refused is no longer this
//! worker's: its handler is told (its context is cancelled) and its result will be dropped.
//! A job whose row another session holds locked (busy) is tried again a few times within
//! the beat, and is not counted lost. Sends nothing while no job runs. A beat with no reply
//! within half the interval (a half-open connection) is abandoned with its connection; the
//! next beat uses a new one (see `reply.rs`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::events::WorkerEvent;
use super::state::Shared;
use crate::db::job::Verdict;
use crate::error::{error_chain, Error};
use crate::job::JobId;

/// Busy rows are tried again within the beat after 100 ms, 200 ms, 400 ms, 800 ms.
const BUSY_RETRIES: u32 = 4;
const BUSY_FIRST_WAIT: Duration = Duration::from_millis(100);

pub(crate) async fn run(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(shared.cfg.heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            () = shared.stop_services.cancelled() => return,
            _ = tick.tick() => {}
        }
        beat(&shared).await;
    }
}

/// The jobs whose leases this worker keeps: running ones (unless their handler opted out of
/// heartbeats, or their lease is known lost) and those whose outcome is pending.
fn held(shared: &Shared) -> Vec<(JobId, i32)> {
    let mut held: Vec<(JobId, i32)> = shared.held_leases();
    let mut seen: HashSet<(JobId, i32)> = held.iter().copied().collect();
    for key in shared.finish_tx.pending_jobs() {
        if seen.insert(key) {
            held.push(key);
        }
    }
    held
}

/// One round; tells the event subscribers what it renewed, unless the statement failed.
async fn beat(shared: &Shared) {
    let mut todo = held(shared);
    if todo.is_empty() {
        return;
    }
    shared.note_activity();
    let (mut renewed, mut lost_n) = (0, 0);
    let mut wait = BUSY_FIRST_WAIT;
    for round in 0..=BUSY_RETRIES {
        let verdicts = match extend(shared, &todo).await {
            Ok(v) => v,
            Err(e) => {
                // The leases still run; the next beat tries again.
                ::metrics::counter!(crate::metrics::HEARTBEAT_ERRORS).increment(1);
                tracing::warn!(error = %error_chain(&e), "heartbeat failed");
                return;
            }
        };
        let mut busy = Vec::new();
        for (job, v) in todo.iter().zip(verdicts) {
            match v {
                Verdict::Applied(()) => renewed += 1,
                Verdict::Busy => busy.push(*job),
                Verdict::Lost => {
                    lost_n += 1;
                    lost(shared, *job);
                }
            }
        }
        if busy.is_empty() {
            break;
        }
        if round == BUSY_RETRIES {
            tracing::debug!(
                jobs = busy.len(),
                "leases not renewed this beat: rows locked by another session"
            );
            break;
        }
        tokio::time::sleep(wait).await;
        wait *= 2;
        todo = busy;
    }
    ::metrics::counter!(crate::metrics::HEARTBEAT_ROUNDS).increment(1);
    ::metrics::counter!(crate::metrics::HEARTBEAT_RENEWED).increment(renewed as u64);
    ::metrics::counter!(crate::metrics::HEARTBEAT_LOST).increment(lost_n as u64);
    shared.counters.events.emit(|| WorkerEvent::Heartbeat {
        renewed,
        lost: lost_n,
    });
}

/// A refused renewal: if the job is still running here, its handler is told to stop. (A job
/// whose outcome is pending learns it from the completer's write.)
fn lost(shared: &Shared, (id, attempt): (JobId, i32)) {
    if shared.mark_lost(id, attempt) {
        tracing::warn!(id = %id, attempt, "lease lost: the job is no longer ours; cancelling its handler");
    }
}

/// One renewal statement, abandoned (its connection closed) when no reply comes within half
/// the heartbeat interval: a half-open connection must not hold the beat past the lease.
async fn extend(shared: &Shared, held: &[(JobId, i32)]) -> Result<Vec<Verdict<()>>, Error> {
    const OP: &str = "renew leases";
    let conn = shared.client.conn(OP).await?;
    let limit = super::reply::heartbeat(shared.cfg.heartbeat_interval);
    let renew = shared
        .client
        .store()
        .job_extend_many(&conn, held, shared.lease_us);
    match tokio::time::timeout(limit, renew).await {
        Ok(r) => r,
        Err(_) => {
            super::reply::abandon(shared, conn);
            Err(Error::NoReply {
                op: OP,
                after: limit,
            })
        }
    }
}
