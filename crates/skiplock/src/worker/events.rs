//! The worker's events, for an application's own metrics and logs, and for tests and tools
//! that wait for something to happen instead of polling the database: claims, finished
//! attempts, heartbeat rounds, reaper passes and the LISTEN connection coming up. Subscribe
//! with [`Worker::subscribe`](crate::Worker::subscribe) or
//! [`StatsHandle::subscribe`](crate::StatsHandle::subscribe).
//!
//! Cheap when nobody listens: the channel is made on the first subscription, and no event
//! is built while it has no receiver.

use std::sync::OnceLock;

use tokio::sync::broadcast;

use crate::job::JobId;

/// Something a worker did (see [`Worker::subscribe`](crate::Worker::subscribe)). New
/// variants may be added: match with a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkerEvent {
    /// A claim took `n` jobs (at least one) from `queue`.
    Claimed {
        /// The queue.
        queue: String,
        /// How many jobs.
        n: usize,
    },
    /// An attempt ended: its outcome was written, or its result dropped because the job was
    /// no longer this worker's.
    Finished {
        /// The job.
        id: JobId,
        /// The attempt.
        attempt: i32,
        /// How it ended.
        end: JobEnd,
    },
    /// A heartbeat round renewed the leases it could (a round runs only while this worker
    /// holds jobs).
    Heartbeat {
        /// Leases renewed.
        renewed: usize,
        /// Renewals refused: those jobs are no longer this worker's.
        lost: usize,
    },
    /// One of this worker's reaper passes ran (expired leases, from any worker).
    Reaped {
        /// Jobs put back in the queue.
        requeued: u64,
        /// Jobs moved to `failed` (no attempt left).
        failed: u64,
        /// Another process held the reaper's lock, so the pass stopped early.
        skipped: bool,
    },
    /// The LISTEN connection is listening (after every connect and reconnect).
    Listening,
    /// The worker registered its row in the `workers` table.
    Registered {
        /// The row's id.
        id: i64,
    },
    /// A presence write (or the registration) failed; the next round tries again.
    PresenceFailed,
}

/// How an attempt ended, as counted in [`RunStats`](crate::RunStats), in the outcome
/// statement's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobEnd {
    /// Marked done.
    Done,
    /// Failed, to be retried.
    Retried,
    /// Marked failed (discarded, or out of attempts).
    Failed,
    /// Snoozed by its handler: back in the queue for later, without spending an attempt.
    Snoozed,
    /// Handed back to the queue at its old place in line without spending an attempt
    /// (cancelled at the end of a shutdown's grace, or of a kind this worker has no handler
    /// for).
    HandedBack,
    /// The job was no longer this worker's: its result was dropped.
    Lost,
}

/// The sending side of a worker's events.
#[derive(Default)]
pub(crate) struct Events(OnceLock<broadcast::Sender<WorkerEvent>>);

impl Events {
    /// Events a slow receiver may fall behind by before it misses some (and is told so).
    const CAPACITY: usize = 8192;

    /// A new receiver of the events from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<WorkerEvent> {
        self.0
            .get_or_init(|| broadcast::channel(Self::CAPACITY).0)
            .subscribe()
    }

    /// Sends the event that `event` builds, if anybody listens.
    pub(crate) fn emit(&self, event: impl FnOnce() -> WorkerEvent) {
        if let Some(tx) = self.0.get() {
            if tx.receiver_count() > 0 {
                let _ = tx.send(event());
            }
        }
    }
}
