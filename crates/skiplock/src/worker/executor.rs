//! Runs one job: finds its handler, runs it outside any transaction with its timeout,
//! catches a panic, and turns the result into an outcome for the completer. A job whose
//! lease was lost while it ran has its result dropped.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt as _;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::events::JobEnd;
use super::state::{AttemptKey, RunningJob, Shared};
use crate::db::job::Finish;
use crate::error::error_chain;
use crate::handler::{AttemptSlot, JobContext, JobError};
use crate::job::{Backoff, ClaimedJob};
use crate::outcome::Outcome;

/// The name of the span each attempt runs in, at INFO, with the job's `kind`, `id`,
/// `attempt` and `queue` as fields, so that a handler's log lines say which job they are
/// about. A subscriber that formats spans (tracing-subscriber's `fmt` layer) renders those
/// fields for every job as it starts, which costs more than running a short job: a
/// subscriber may leave the span out (as `skiplock work` does: its metadata has this name
/// and the target [`JOB_SPAN_TARGET`]), and the worker's own log lines about an attempt
/// then carry the same four fields themselves.
pub const JOB_SPAN: &str = "job";
/// The target of the [`JOB_SPAN`] span.
pub const JOB_SPAN_TARGET: &str = module_path!();

/// An event of an attempt: inside its span, which names the job, or with the job's fields on
/// the event itself when the span is off (filtered out, as `skiplock work` does), so that a
/// log line about a job always says which.
macro_rules! job_event {
    ($level:expr, $span:expr, $job:expr, $($rest:tt)+) => {
        if $span.is_disabled() {
            tracing::event!(
                $level,
                kind = %$job.kind,
                id = %$job.id,
                attempt = $job.attempt,
                queue = %$job.queue,
                $($rest)+
            )
        } else {
            tracing::event!($level, $($rest)+)
        }
    };
}

/// This worker's record of one running attempt, in [`Shared::running`] from before its task
/// starts until it ends, however it ends: the guard removes the entry when dropped (also on a
/// panic, or when the task is aborted), so that the heartbeat never renews a lease nobody
/// works on.
pub(crate) struct Attempt {
    shared: Arc<Shared>,
    key: AttemptKey,
    cancel: CancellationToken,
    /// Removed by [`Attempt::finish`]: nothing left for the guard to do.
    finished: bool,
}

impl Attempt {
    /// Records `job` as this worker's: running (`started`), or claimed ahead and waiting for
    /// a slot, its lease renewed all the same, even for a kind that opted out of heartbeats
    /// (see [`Attempt::start`]). A newer attempt of the same job (the lease was lost, and
    /// this worker claimed the job again) makes every older one lost: its handler is told to
    /// stop and its result will be dropped.
    pub(crate) fn register(
        shared: &Arc<Shared>,
        job: &ClaimedJob,
        heartbeat: bool,
        started: bool,
    ) -> Attempt {
        let key = (job.id, job.attempt);
        let cancel = shared.hard_stop.child_token();
        let mut running = shared.running();
        let mut superseded = false;
        for (attempt, r) in running.attempts_mut(job.id) {
            if attempt < job.attempt {
                if !r.lost {
                    tracing::warn!(id = %job.id, attempt, newer = job.attempt, "a newer attempt of this job started here: the older one is no longer ours; cancelling its handler");
                }
                r.lost = true;
                r.cancel.cancel();
            } else {
                // Cannot happen (attempts only grow), but never let a stale attempt win.
                superseded = true;
            }
        }
        if superseded {
            cancel.cancel();
        }
        running.insert(
            key,
            RunningJob {
                cancel: cancel.clone(),
                heartbeat: heartbeat || !started,
                lost: superseded,
                started,
            },
        );
        drop(running);
        Attempt {
            shared: shared.clone(),
            key,
            cancel,
            finished: false,
        }
    }

    /// A job claimed ahead gets its slot: it counts as running from now on, and its lease is
    /// renewed from now on only if its kind wants heartbeats (`heartbeat`). Returns whether
    /// the attempt was lost while it waited (its lease expired, or the job was cancelled):
    /// it must not run then.
    pub(crate) fn start(&self, heartbeat: bool) -> bool {
        match self.shared.running().get_mut(&self.key) {
            Some(r) => {
                r.started = true;
                r.heartbeat = heartbeat;
                r.lost
            }
            None => true,
        }
    }

    /// Removes the entry; returns whether the attempt was lost meanwhile.
    fn finish(mut self) -> bool {
        self.finished = true;
        self.shared
            .running()
            .remove(&self.key)
            .is_some_and(|r| r.lost)
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.running().remove(&self.key);
        }
    }
}

/// [`run`] as a task's future: boxed, so that the task moves a pointer, not the whole
/// state of a job's run (about a kilobyte, copied several times on its way into the task
/// and again when the task ends).
pub(crate) fn task(
    shared: Arc<Shared>,
    job: ClaimedJob,
    permit: OwnedSemaphorePermit,
    attempt: Attempt,
) -> std::pin::Pin<Box<impl std::future::Future<Output = ()> + Send>> {
    Box::pin(run(shared, job, permit, attempt))
}

pub(crate) async fn run(
    shared: Arc<Shared>,
    mut job: ClaimedJob,
    permit: OwnedSemaphorePermit,
    attempt: Attempt,
) {
    // The handler's own: nothing after it reads the payload.
    let payload = std::mem::take(&mut job.payload);
    let entry = shared.registry.get(&job.kind).cloned();
    let cancel = attempt.cancel.clone();
    let span = tracing::info_span!(
        target: JOB_SPAN_TARGET,
        JOB_SPAN,
        kind = %job.kind,
        id = %job.id,
        attempt = job.attempt,
        queue = %job.queue
    );
    let backoff = entry
        .as_ref()
        .map_or_else(Backoff::default, |e| e.options.backoff);
    let started = std::time::Instant::now();
    let slot = Arc::new(std::sync::Mutex::new(AttemptSlot::default()));
    let outcome = async {
        let Some(entry) = entry else {
            let mut kinds = shared.registry.kinds().join(", ");
            if kinds.is_empty() {
                kinds.push_str("none");
            }
            // Not this worker's to run: back to the queue at no cost in attempts, for a worker
            // that handles the kind, after this worker's back-off for the kind.
            return Outcome::unserved(
                &format!(
                    "no handler for job kind {:?} in the worker with pid {} (it handles: {kinds}); \
                     waiting for a worker that handles it",
                    job.kind,
                    std::process::id(),
                ),
                shared.unserved_delay(&job.kind),
            );
        };
        let ctx = JobContext {
            id: job.id,
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            queue: job.queue.clone(),
            kind: job.kind.clone(),
            created_at: job.created_at,
            run_at: job.run_at,
            claimed_at: job
                .locked_until
                .checked_sub(shared.cfg.lease)
                .unwrap_or(job.locked_until),
            cancel,
            client: shared.app_client.clone(),
            slot: slot.clone(),
            data: shared.registry.data.clone(),
        };
        // `call` itself may panic before it returns a future (a closure that panics before
        // its `async` block, a hand-written handler): caught like a panic in the future.
        let call = std::panic::catch_unwind(AssertUnwindSafe(|| {
            entry.handler.call(payload, ctx)
        }));
        let future = match call {
            Ok(f) => f,
            Err(panic) => {
                return Outcome::retry(&format!("panicked: {}", panic_message(&*panic)), backoff)
            }
        };
        let attempt = AssertUnwindSafe(future).catch_unwind();
        let attempt = async {
            match entry.options.timeout {
                Some(t) => tokio::time::timeout(t, attempt).await.ok(),
                None => Some(attempt.await),
            }
        };
        // The handler first: one that is done by its first poll (a short job) ends without
        // a waiter registered on the shutdown deadline, which every job shares. Past the
        // deadline the job goes back to the queue however its handler ended (a command
        // `work --exec` runs is stopped then, and fails).
        tokio::select! {
            biased;
            result = attempt => match result {
                _ if shared.hard_stop.is_cancelled() => Outcome::HandBack,
                None => Outcome::retry("timeout", backoff),
                Some(Err(panic)) => {
                    Outcome::retry(&format!("panicked: {}", panic_message(&*panic)), backoff)
                }
                Some(Ok(Ok(()))) if completed_in_tx(&slot) => Outcome::retry(IN_TX_ROLLED_BACK, backoff),
                Some(Ok(Ok(()))) => Outcome::Complete,
                Some(Ok(Err(JobError::Retry(e)))) => Outcome::retry(&error_chain(&*e), backoff),
                #[allow(deprecated)]
                Some(Ok(Err(JobError::Discard(e) | JobError::Permanent(e)))) => {
                    Outcome::discard(&error_chain(&*e))
                }
                Some(Ok(Err(JobError::Snooze(d)))) => Outcome::snooze(d),
            },
            () = shared.hard_stop.cancelled() => Outcome::HandBack,
        }
    }
    .instrument(span.clone())
    .await;

    let lost = attempt.finish();
    drop(permit);
    if let Some(q) = shared.queues.get(&job.queue) {
        q.note_run(started.elapsed());
    }
    // The worker's own copies of the names: labels and the outcome share them.
    let names = (shared.name(&job.queue), shared.name(&job.kind));
    ::metrics::histogram!(
        crate::metrics::JOB_RUN,
        "queue" => Arc::clone(&names.0),
        "kind" => Arc::clone(&names.1)
    )
    .record(crate::metrics::secs(started.elapsed()));
    let _enter = span.enter();
    let in_tx = completed_in_tx(&slot);
    if lost && !in_tx {
        shared.counters.ended(job.id, job.attempt, JobEnd::Lost);
        crate::metrics::finished(&names.0, &names.1, "lost", "none");
        job_event!(
            tracing::Level::WARN,
            span,
            job,
            "lease lost while running: result dropped (the job is no longer ours)"
        );
        return;
    }
    match &outcome {
        Outcome::Complete => job_event!(tracing::Level::DEBUG, span, job, "completed"),
        Outcome::Retry { error, .. } => {
            job_event!(tracing::Level::INFO, span, job, error = %error, "attempt failed");
        }
        Outcome::Discard { error } => {
            job_event!(tracing::Level::WARN, span, job, error = %error, "failed permanently");
        }
        Outcome::Snooze { delay } => job_event!(
            tracing::Level::INFO,
            span,
            job,
            after = ?delay,
            "snoozed: back to the queue"
        ),
        Outcome::HandBack => {
            job_event!(
                tracing::Level::INFO,
                span,
                job,
                "shutdown: back to the queue"
            );
        }
        Outcome::Unserved { error, delay } => {
            ::metrics::counter!(
                crate::metrics::JOBS_UNSERVED,
                "queue" => Arc::clone(&names.0),
                "kind" => Arc::clone(&names.1)
            )
            .increment(1);
            job_event!(
                tracing::Level::WARN,
                span,
                job,
                after = ?delay,
                error = %error,
                "no handler for this kind: back to the queue"
            );
        }
    }
    let (output, in_tx) = match slot.lock() {
        Ok(mut s) => (s.output.take(), s.completed_in_tx),
        Err(_) => (None, false),
    };
    send_with(&shared, &job, names, outcome, output, in_tx);
}

/// The error written when a handler completed its job with [`JobContext::complete_tx`] and
/// returned `Ok`: if that transaction committed, the job is done and this write is refused
/// by the guard (and counted done); if it rolled back, the attempt failed, and this says why.
const IN_TX_ROLLED_BACK: &str =
    "the handler completed this job with complete_tx in a transaction that did not commit";

fn completed_in_tx(slot: &std::sync::Mutex<AttemptSlot>) -> bool {
    slot.lock().map(|s| s.completed_in_tx).unwrap_or(false)
}

/// Hands a claimed job that never started back to the queue at once (the caller logs why).
pub(crate) fn hand_back(shared: &Shared, job: &ClaimedJob) {
    send(shared, job, Outcome::HandBack);
}

fn send(shared: &Shared, job: &ClaimedJob, outcome: Outcome) {
    let names = (shared.name(&job.queue), shared.name(&job.kind));
    send_with(shared, job, names, outcome, None, false);
}

/// `names`: the job's queue and kind ([`Shared::name`]).
fn send_with(
    shared: &Shared,
    job: &ClaimedJob,
    names: (Arc<str>, Arc<str>),
    outcome: Outcome,
    output: Option<String>,
    in_tx: bool,
) {
    let (queue, kind) = names;
    let finish = Finish {
        id: job.id,
        queue,
        kind,
        attempt: job.attempt,
        output: if matches!(outcome, Outcome::Complete) {
            output
        } else {
            None
        },
        in_tx,
        outcome,
    };
    if shared.finish_tx.send(finish).is_err() {
        // Only after the completer has stopped (an abrupt stop): the lease expires and the
        // reaper hands the job to another worker.
        tracing::warn!(id = %job.id, "outcome not written: the worker is stopping");
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}
