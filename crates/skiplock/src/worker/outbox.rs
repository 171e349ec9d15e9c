//! The completer's outbox: the executors send each outcome through it, and the jobs whose
//! outcome is not written yet stay in its pending set, whose leases the heartbeat keeps
//! renewing.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::db::job::Finish;
use crate::job::JobId;

/// The sending side of the completer: the executors' outcomes, and the set of jobs whose
/// outcome is not written yet (their leases are still renewed).
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: mpsc::UnboundedSender<Finish>,
    pending: Arc<Mutex<crate::FastSet<(JobId, i32)>>>,
}

/// A new outbox and the completer's receiving end.
pub(crate) fn channel() -> (Outbox, mpsc::UnboundedReceiver<Finish>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        Outbox {
            tx,
            pending: Arc::default(),
        },
        rx,
    )
}

impl Outbox {
    /// Queues an outcome for writing; the job counts as pending until it is written. (The
    /// error hands the outcome back, as large as it is: it happens only once the completer
    /// has stopped.)
    #[allow(clippy::result_large_err)]
    pub(crate) fn send(&self, f: Finish) -> Result<(), mpsc::error::SendError<Finish>> {
        let key = (f.id, f.attempt);
        self.pending().insert(key);
        self.tx.send(f).inspect_err(|_| {
            self.pending().remove(&key);
        })
    }

    /// The jobs whose outcome is not written yet, with their attempt.
    pub(crate) fn pending_jobs(&self) -> Vec<(JobId, i32)> {
        self.pending().iter().copied().collect()
    }

    /// The outcome of `f` is written, or given up.
    pub(super) fn done_with(&self, f: &Finish) {
        self.pending().remove(&(f.id, f.attempt));
    }

    fn pending(&self) -> MutexGuard<'_, crate::FastSet<(JobId, i32)>> {
        // Single inserts and removes: a poisoned lock is still consistent.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}
