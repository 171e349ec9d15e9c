//! One producer per queue: wait for a reason to claim (a notification, a free slot while
//! more may be ready, the fallback poll, a known due time), claim as many jobs as the queue
//! has free slots in one short statement, and hand each to the executor.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{backoff, executor, Counters, Mode, QueueSlot, Shared};
use crate::db;
use crate::error::Error;

pub(crate) async fn run(shared: Arc<Shared>, slot: Arc<QueueSlot>, mode: Mode) {
    let mut jobs: JoinSet<()> = JoinSet::new();
    // Claim at once when starting.
    let mut claim_now = true;
    // The last claim filled every slot it asked for: more may be ready.
    let mut backlog = false;
    let mut failures = 0u32;
    let mut due: Option<Instant> = None;
    let mut next_poll = shared.poll_interval().map(|p| Instant::now() + p);

    loop {
        while jobs.try_join_next().is_some() {}
        if shared.stop_claiming.is_cancelled() {
            break;
        }
        // A retry or snooze this worker wrote: wake when it is due.
        if let Some(at) = slot.take_wake_at() {
            due = Some(due.map_or(at, |d| d.min(at)));
        }
        let free = slot.slots.available_permits();
        if claim_now && free > 0 {
            claim_now = false;
            let want = u32::try_from(free)
                .unwrap_or(u32::MAX)
                .min(shared.cfg.max_claim_batch);
            match claim(&shared, &slot, want, &mut jobs).await {
                Ok(got) => {
                    failures = 0;
                    backlog = got == want;
                    next_poll = shared.poll_interval().map(|p| Instant::now() + p);
                    if backlog {
                        claim_now = true;
                        continue;
                    }
                    if mode == Mode::UntilIdle && got == 0 && jobs.is_empty() {
                        break;
                    }
                    if mode == Mode::Serve {
                        due = next_due(&shared, &slot).await;
                    } else if got == 0 {
                        // Nothing ready; wait for our running jobs, then look again.
                        if jobs.join_next().await.is_some() {
                            claim_now = true;
                        }
                        continue;
                    }
                }
                Err(e) => {
                    failures += 1;
                    let wait = backoff(failures, Duration::from_secs(10));
                    tracing::warn!(queue = %slot.name, error = %error_chain(&e), retry_in = ?wait, "claim failed");
                    tokio::select! {
                        () = shared.stop_claiming.cancelled() => break,
                        () = tokio::time::sleep(wait) => {}
                    }
                    claim_now = true;
                    continue;
                }
            }
        }
        if mode == Mode::UntilIdle {
            // Free slots appear as jobs finish; claim again then.
            if jobs.join_next().await.is_some() || jobs.is_empty() {
                claim_now = true;
            }
            continue;
        }
        let wake_at = match (next_poll, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            () = shared.stop_claiming.cancelled() => break,
            () = slot.wake.notified() => claim_now = true,
            // `wake_at` moved (merged at the top of the loop), or the poll in force did (the
            // LISTEN connection went deaf: poll from now on).
            () = slot.reschedule.notified() => {
                if next_poll.is_none() {
                    next_poll = shared.poll_interval().map(|p| Instant::now() + p);
                }
            }
            Some(_) = jobs.join_next(), if !jobs.is_empty() => {
                // A slot freed: claim again if the last claim suggested more is ready.
                claim_now = backlog;
            }
            () = sleep_until(wake_at) => {
                claim_now = true;
                due = None;
                next_poll = shared.poll_interval().map(|p| Instant::now() + p);
            }
        }
    }

    // Shutdown: the running jobs finish (or are cancelled at the deadline by the executor).
    while jobs.join_next().await.is_some() {}
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Claims up to `want` jobs and starts them. Returns how many were claimed.
async fn claim(
    shared: &Arc<Shared>,
    slot: &Arc<QueueSlot>,
    want: u32,
    jobs: &mut JoinSet<()>,
) -> Result<u32, Error> {
    let claimed = {
        let conn = shared.client.conn("claim jobs").await?;
        db::job::claim(
            &**conn,
            shared.client.cache(&conn),
            shared.client.sql(),
            &slot.name,
            i64::from(want),
            shared.lease_us,
        )
        .await
        .map_err(Error::db("claim jobs"))?
    };
    let n = u32::try_from(claimed.len()).unwrap_or(u32::MAX);
    if n == 0 {
        return Ok(0);
    }
    shared.note_activity();
    Counters::add(&shared.counters.claimed, u64::from(n));
    tracing::debug!(queue = %slot.name, claimed = n, "claimed jobs");
    for job in claimed {
        if shared.stop_claiming.is_cancelled() {
            // Claimed but not started: hand it back at once.
            executor::hand_back(shared, &job);
            continue;
        }
        let Ok(permit) = slot.slots.clone().try_acquire_owned() else {
            // Cannot happen (only this producer takes slots, and it asked for no more than
            // were free), but never run beyond the limit.
            executor::hand_back(shared, &job);
            continue;
        };
        // Registered before its task starts (and removed however the task ends), so that
        // the heartbeat renews its lease from the first beat.
        let heartbeat = shared
            .registry
            .get(&job.kind)
            .is_none_or(|e| e.options.heartbeat);
        let attempt = executor::Attempt::register(shared, &job, heartbeat);
        jobs.spawn(executor::run(shared.clone(), job, permit, attempt));
    }
    Ok(n)
}

/// After a short claim: when the next queued job of this queue becomes ready, by the
/// database's clock, so that scheduled jobs and retries start on time even with no poll.
async fn next_due(shared: &Shared, slot: &QueueSlot) -> Option<Instant> {
    let conn = shared.client.conn("look up the next due job").await.ok()?;
    match db::job::next_run_at(&**conn, shared.client.sql(), &slot.name).await {
        Ok(Some(us)) => {
            let wait = Duration::from_micros(us.max(0).unsigned_abs());
            // Ready now but not claimed: another claimer holds it. Look again shortly.
            Some(Instant::now() + wait.max(Duration::from_millis(250)))
        }
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(queue = %slot.name, error = %e, "could not look up the next due job");
            None
        }
    }
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s.replace('\n', " ")
}
