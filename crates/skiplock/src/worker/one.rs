//! Runs one given job through the worker's own path, for
//! [`testing::run_job`](crate::testing::run_job): the worker's shared state (as
//! [`Worker::run`](super::Worker::run) builds it), the heartbeat and the completer, a claim
//! of that job alone (`job_claim_by_id.sql`, the claim's lease semantics), then the
//! [`executor`](super::executor) exactly as the producer starts it (timeout, panic capture,
//! the outcome through the outbox), and the completer's write (`job_finish_many.sql`).
//!
//! Only the claim differs from a serving worker: no producer, no queue slot, no listener and
//! no maintenance service.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::state::Counters;
use super::{completer, executor, heartbeat, outbox, Worker};
use crate::error::{Error, Result};
use crate::job::JobId;

impl Worker {
    /// Claims job `id` and runs it to its written outcome. Returns whether the job could be
    /// claimed (it was queued with an attempt left); the caller reads its row.
    pub(crate) async fn run_one(self, id: JobId) -> Result<bool> {
        let (finish_tx, finish_rx) = outbox::channel();
        // The claim, the heartbeat and the completer.
        let (shared, _periodic) = self.into_shared(finish_tx, 3)?;
        let mut completer = JoinSet::new();
        completer.spawn(completer::run(shared.clone(), finish_rx));
        let mut services = JoinSet::new();
        services.spawn(heartbeat::run(shared.clone()));

        let claimed = async {
            let conn = shared.client.conn("claim a job").await?;
            shared
                .client
                .store()
                .job_claim_by_id(&conn, id, shared.lease_us)
                .await
        }
        .await;
        let ran = match claimed {
            Ok(Some(job)) => {
                shared.note_activity();
                Counters::add(&shared.counters.claimed, 1);
                // The one slot this run has; the executor frees it when the job ends.
                let permit = Arc::new(Semaphore::new(1))
                    .try_acquire_owned()
                    .map_err(|_| Error::invalid("worker", "no slot to run the job in"));
                match permit {
                    Ok(permit) => {
                        let heartbeat = shared
                            .registry
                            .get(&job.kind)
                            .is_none_or(|e| e.options.heartbeat);
                        let attempt = executor::Attempt::register(&shared, &job, heartbeat, true);
                        executor::run(shared.clone(), job, permit, attempt).await;
                        Ok(true)
                    }
                    Err(e) => {
                        tracing::info!(id = %job.id, "no slot: handed back");
                        executor::hand_back(&shared, &job);
                        Err(e)
                    }
                }
            }
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        };

        // The outcome is in the outbox: let the completer write it, then stop.
        shared.stop_claiming.cancel();
        shared.stop_services.cancel();
        while completer.join_next().await.is_some() {}
        // A heartbeat in the middle of its round ends it (aborted, its statement would go
        // on in the server after this returns); one that does not within the time the
        // worker gives its last writes is aborted.
        let _ = tokio::time::timeout(super::WRITE_AT_STOP, async {
            while services.join_next().await.is_some() {}
        })
        .await;
        services.abort_all();
        while services.join_next().await.is_some() {}
        ran
    }
}
