//! Writes job outcomes in batches: everything that arrived since the last write goes to the
//! database in one guarded statement (`job_finish_many.sql`). A row the guard refuses was no
//! longer this worker's: logged, never counted as done.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{backoff, Counters, Shared};
use crate::db::{self, job::Finish};
use crate::error::Error;
use crate::job::{JobId, JobState};

pub(crate) async fn run(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Finish>) {
    let max = shared.cfg.max_finish_batch;
    let mut batch = Vec::with_capacity(max);
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Some(f) => batch.push(f),
                None => break,
            },
            () = shared.stop_services.cancelled() => break,
        }
        while batch.len() < max {
            match rx.try_recv() {
                Ok(f) => batch.push(f),
                Err(_) => break,
            }
        }
        flush(&shared, &mut batch).await;
    }
    // Stopping: write whatever is left.
    while let Ok(f) = rx.try_recv() {
        batch.push(f);
        if batch.len() >= max {
            flush(&shared, &mut batch).await;
        }
    }
    flush(&shared, &mut batch).await;
}

async fn flush(shared: &Shared, batch: &mut Vec<Finish>) {
    if batch.is_empty() {
        return;
    }
    let mut failures = 0u32;
    let written = loop {
        match write(shared, batch).await {
            Ok(rows) => break rows,
            Err(e) => {
                failures += 1;
                if failures > 20 {
                    tracing::error!(
                        jobs = batch.len(),
                        error = %super::producer::error_chain(&e),
                        "could not write job outcomes; their leases will expire and the reaper will retry them"
                    );
                    batch.clear();
                    return;
                }
                let wait = backoff(failures, Duration::from_secs(5));
                tracing::warn!(error = %super::producer::error_chain(&e), retry_in = ?wait, "writing job outcomes failed");
                tokio::time::sleep(wait).await;
            }
        }
    };
    let c = &shared.counters;
    let sent: HashMap<JobId, &Finish> = batch.iter().map(|f| (f.id, f)).collect();
    let mut seen = HashSet::with_capacity(written.len());
    for (id, state, run_at) in &written {
        seen.insert(*id);
        let outcome = sent.get(id).map_or("", |f| f.outcome);
        if let (JobState::Queued, Some(f)) = (state, sent.get(id)) {
            // Back in the queue (a retry, a snooze, a hand-back): wake its producer when it
            // is due, even with the poll off.
            shared.wake_queue_at(&f.queue, super::instant_of(*run_at));
        }
        match (outcome, state) {
            ("done", _) => Counters::add(&c.done, 1),
            (_, JobState::Failed) => Counters::add(&c.failed, 1),
            ("requeue", _) => Counters::add(&c.requeued, 1),
            _ => Counters::add(&c.retried, 1),
        }
    }
    for f in batch.iter().filter(|f| !seen.contains(&f.id)) {
        Counters::add(&c.lost, 1);
        if failures > 0 {
            tracing::warn!(id = %f.id, attempt = f.attempt, "outcome not applied; it may have been written before the connection failed");
        } else {
            tracing::warn!(id = %f.id, attempt = f.attempt, outcome = f.outcome, "outcome refused: the job is no longer this worker's");
        }
    }
    batch.clear();
}

async fn write(
    shared: &Shared,
    batch: &[Finish],
) -> Result<Vec<(JobId, JobState, std::time::SystemTime)>, Error> {
    let conn = shared.client.conn("write job outcomes").await?;
    let rows = db::job::finish_many(
        &**conn,
        shared.client.cache(&conn),
        shared.client.sql(),
        batch,
    )
    .await
    .map_err(Error::db("write job outcomes"))?;
    Ok(rows)
}
