//! The worker's shared runtime state: its counts and their live view ([`StatsHandle`]),
//! the queues it serves with their slots and wake-ups, the attempts it runs, and the
//! [`Shared`] state every task of the worker holds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{broadcast, Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::WorkerConfig;
use super::events::{Events, JobEnd, WorkerEvent};
use super::outbox::Outbox;
use crate::client::Client;
use crate::error::Result;
use crate::handler::Registry;
use crate::job::JobId;
use crate::maintenance::reaper::ReapReport;

/// Counts of what a worker did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunStats {
    /// Jobs claimed.
    pub claimed: u64,
    /// Jobs marked done.
    pub done: u64,
    /// Attempts that failed and will be retried (outcome `retry`).
    pub retried: u64,
    /// Jobs marked failed: discarded ([`JobError::Discard`](crate::JobError::Discard)), or
    /// out of attempts.
    pub failed: u64,
    /// Jobs the handler snoozed ([`JobError::Snooze`](crate::JobError::Snooze)): back in
    /// the queue for later, without spending an attempt.
    pub snoozed: u64,
    /// Jobs handed back to the queue without spending an attempt and at their old place in
    /// line: cancelled at the end of a shutdown's grace, or of a kind this worker has no
    /// handler for.
    pub handed_back: u64,
    /// `snoozed + handed_back`.
    #[deprecated(since = "0.2.0", note = "counted apart: snoozed and handed_back")]
    pub requeued: u64,
    /// Results dropped because the job was no longer this worker's (lease lost).
    pub lost: u64,
    /// Jobs the reaper moved (expired leases, from any worker).
    pub reaped: u64,
}

/// A live view of a worker's counts (see [`Worker::stats_handle`](crate::Worker::stats_handle)).
#[derive(Clone)]
pub struct StatsHandle(pub(super) Arc<Counters>);

impl StatsHandle {
    /// The counts so far.
    pub fn snapshot(&self) -> RunStats {
        self.0.snapshot()
    }

    /// Whether the worker currently polls because its LISTEN connection cannot be relied on:
    /// it is down, or its self-test found that notifications do not come back (LISTEN through
    /// a transaction-pooling proxy hears nothing). Such a worker polls at the configured
    /// interval, or at [`WorkerConfig::DEFAULT_POLL_INTERVAL`] if the poll was off.
    pub fn polling_fallback(&self) -> bool {
        self.0.listen_deaf.load(Ordering::Relaxed)
    }

    /// Subscribes to the worker's events from now on (see
    /// [`Worker::subscribe`](crate::Worker::subscribe)), also while it runs.
    pub fn subscribe(&self) -> broadcast::Receiver<WorkerEvent> {
        self.0.events.subscribe()
    }

    /// The old name of [`StatsHandle::subscribe`].
    #[doc(hidden)]
    #[deprecated(since = "0.2.0", note = "renamed StatsHandle::subscribe")]
    pub fn events(&self) -> broadcast::Receiver<WorkerEvent> {
        self.subscribe()
    }
}

impl std::fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

/// The worker's counts and events, shared with its [`StatsHandle`]s.
#[derive(Default)]
pub(crate) struct Counters {
    pub claimed: AtomicU64,
    pub done: AtomicU64,
    pub retried: AtomicU64,
    pub failed: AtomicU64,
    pub snoozed: AtomicU64,
    pub handed_back: AtomicU64,
    pub lost: AtomicU64,
    pub reaped: AtomicU64,
    /// The LISTEN connection is down or hears nothing: poll instead.
    pub listen_deaf: AtomicBool,
    pub events: Events,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> RunStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        #[allow(deprecated)]
        RunStats {
            claimed: l(&self.claimed),
            done: l(&self.done),
            retried: l(&self.retried),
            failed: l(&self.failed),
            snoozed: l(&self.snoozed),
            handed_back: l(&self.handed_back),
            requeued: l(&self.snoozed) + l(&self.handed_back),
            lost: l(&self.lost),
            reaped: l(&self.reaped),
        }
    }

    pub(crate) fn add(a: &AtomicU64, n: u64) {
        a.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts how an attempt ended, and tells the event subscribers.
    pub(crate) fn ended(&self, id: JobId, attempt: i32, end: JobEnd) {
        let counter = match end {
            JobEnd::Done => &self.done,
            JobEnd::Retried => &self.retried,
            JobEnd::Failed => &self.failed,
            JobEnd::Snoozed => &self.snoozed,
            JobEnd::HandedBack => &self.handed_back,
            JobEnd::Lost => &self.lost,
        };
        Self::add(counter, 1);
        self.events
            .emit(|| WorkerEvent::Finished { id, attempt, end });
    }
}

/// One queue this worker serves.
pub(crate) struct QueueSlot {
    pub name: String,
    pub concurrency: usize,
    pub slots: Arc<Semaphore>,
    /// Woken by notifications and reconnects.
    pub wake: Notify,
    /// The earliest time a job of this queue is known to become ready (a retry or snooze
    /// this worker wrote), for the producer to wake at; see [`Shared::wake_queue_at`].
    pub wake_at: Mutex<Option<Instant>>,
    /// Tells the producer that `wake_at` or the poll interval in force moved.
    pub reschedule: Notify,
    /// Whether the queue is believed paused (a hint; the claim enforces the pause).
    pub pause: crate::queue::PauseHint,
    /// Waiting on this queue, so that INSERTs notify it (migration 15): the producer wants
    /// its LISTEN connection to wait (it claimed less than it asked for and may sleep) or
    /// not (it is busy claiming a backlog). See [`QueueSlot::want_wait`].
    pub wait_wanted: AtomicBool,
    /// Set by the listener once its connection holds every stripe of the queue while
    /// `wait_wanted` (it then wakes the producer for the claim that sees every job that sent
    /// no notification); cleared when the producer stops wanting it or the connection ends.
    pub waiting: AtomicBool,
    /// The mean time of this queue's recent handler runs, in microseconds (an exponentially
    /// weighted mean over about the last 16 jobs); `u64::MAX` until a job has run. It bounds
    /// how many jobs the producer claims ahead of its free slots (see
    /// [`QueueSlot::ahead_cap`]).
    pub mean_run_us: AtomicU64,
}

impl QueueSlot {
    pub(super) fn new(name: String, concurrency: usize) -> Self {
        QueueSlot {
            name,
            concurrency,
            slots: Arc::new(Semaphore::new(concurrency)),
            wake: Notify::new(),
            wake_at: Mutex::new(None),
            reschedule: Notify::new(),
            pause: Default::default(),
            wait_wanted: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            mean_run_us: AtomicU64::new(u64::MAX),
        }
    }

    /// Takes in how long one handler ran (see `mean_run_us`). Concurrent updates may lose
    /// one another; the mean is a hint.
    pub(crate) fn note_run(&self, took: Duration) {
        let x = u64::try_from(took.as_micros()).unwrap_or(u64::MAX / 2);
        let mean = self.mean_run_us.load(Ordering::Relaxed);
        let next = if mean == u64::MAX {
            x
        } else if x >= mean {
            mean + (x - mean).div_ceil(16)
        } else {
            mean - (mean - x) / 16
        };
        self.mean_run_us
            .store(next.min(u64::MAX / 2), Ordering::Relaxed);
    }

    /// Whether the queue's recent jobs ran `within` on average (false before one has run).
    pub(crate) fn runs_within(&self, within: Duration) -> bool {
        let mean = self.mean_run_us.load(Ordering::Relaxed);
        mean != u64::MAX && u128::from(mean) <= within.as_micros()
    }

    /// Forgets the mean run time: no job is claimed ahead until one has run again.
    pub(crate) fn forget_run_times(&self) {
        self.mean_run_us.store(u64::MAX, Ordering::Relaxed);
    }

    /// How many jobs the producer may hold claimed beyond its slots: as many as its slots
    /// would start within `wait` at the mean run time of the recent jobs, at most `most`;
    /// none before a job has run, or with `enabled` false.
    pub(crate) fn ahead_cap(&self, enabled: bool, wait: Duration, most: usize) -> usize {
        let mean = self.mean_run_us.load(Ordering::Relaxed);
        if !enabled || mean == u64::MAX {
            return 0;
        }
        let n = self.concurrency as u128 * wait.as_micros() / u128::from(mean.max(1));
        usize::try_from(n).unwrap_or(usize::MAX).min(most)
    }

    /// Asks the LISTEN connection to wait on this queue (`yes`) or to stop; tells it only
    /// when that changes. Each change clears `waiting`: only the listener sets it, when it
    /// holds every stripe while the wait is wanted, and it then wakes the producer.
    pub(crate) fn want_wait(&self, shared: &Shared, yes: bool) {
        if self.wait_wanted.swap(yes, Ordering::SeqCst) != yes {
            self.waiting.store(false, Ordering::SeqCst);
            shared.waits_changed.notify_one();
        }
    }

    /// The listener holds every stripe of this queue: if the wait is still wanted, marks it
    /// waiting and wakes the producer (for the claim that sees every job whose INSERT sent
    /// no notification). A wait given up meanwhile is left unmarked.
    pub(crate) fn mark_waiting(&self) {
        if self.wait_wanted.load(Ordering::SeqCst) && !self.waiting.swap(true, Ordering::SeqCst) {
            if self.wait_wanted.load(Ordering::SeqCst) {
                self.wake.notify_one();
            } else {
                self.waiting.store(false, Ordering::SeqCst);
            }
        }
    }

    /// Takes the due time handed over by [`Shared::wake_queue_at`], if any.
    pub(crate) fn take_wake_at(&self) -> Option<Instant> {
        self.wake_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// Running attempts are keyed by job and attempt: after a lost lease the same worker may
/// claim the job again while the stale attempt still runs, and each must keep its own entry.
pub(crate) type AttemptKey = (JobId, i32);

/// The attempts this worker runs ([`Shared::running`]), found by job: each job's newest
/// attempt in a hash map, the older ones still running beside it (rare: a lease lost while
/// the handler ran, and the job claimed again here) in a short list. Every attempt of a job
/// is found without a walk through every job the worker holds.
#[derive(Default)]
pub(crate) struct Running {
    newest: crate::FastMap<JobId, (i32, RunningJob)>,
    older: Vec<(AttemptKey, RunningJob)>,
}

impl Running {
    pub(crate) fn len(&self) -> usize {
        self.newest.len() + self.older.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records an attempt (replacing the entry of the same attempt, if any).
    pub(crate) fn insert(&mut self, (id, attempt): AttemptKey, job: RunningJob) {
        match self.newest.get_mut(&id) {
            None => {
                self.newest.insert(id, (attempt, job));
            }
            Some(n) if n.0 == attempt => n.1 = job,
            Some(n) if n.0 < attempt => {
                let was = std::mem::replace(n, (attempt, job));
                self.older.push(((id, was.0), was.1));
            }
            Some(_) => match self.older.iter_mut().find(|(k, _)| *k == (id, attempt)) {
                Some(o) => o.1 = job,
                None => self.older.push(((id, attempt), job)),
            },
        }
    }

    pub(crate) fn get_mut(&mut self, (id, attempt): &AttemptKey) -> Option<&mut RunningJob> {
        match self.newest.get_mut(id) {
            Some(n) if n.0 == *attempt => Some(&mut n.1),
            _ => self
                .older
                .iter_mut()
                .find(|(k, _)| *k == (*id, *attempt))
                .map(|(_, r)| r),
        }
    }

    pub(crate) fn remove(&mut self, (id, attempt): &AttemptKey) -> Option<RunningJob> {
        if self.newest.get(id).is_some_and(|n| n.0 == *attempt) {
            return self.newest.remove(id).map(|n| n.1);
        }
        let at = self.older.iter().position(|(k, _)| *k == (*id, *attempt))?;
        Some(self.older.swap_remove(at).1)
    }

    /// Every attempt of job `id`, with its number.
    pub(crate) fn attempts_mut(
        &mut self,
        id: JobId,
    ) -> impl Iterator<Item = (i32, &mut RunningJob)> {
        let newest = self
            .newest
            .get_mut(&id)
            .map(|n| (n.0, &mut n.1))
            .into_iter();
        let older = self
            .older
            .iter_mut()
            .filter(move |(k, _)| k.0 == id)
            .map(|(k, r)| (k.1, r));
        newest.chain(older)
    }

    /// Every attempt, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (AttemptKey, &RunningJob)> {
        let newest = self.newest.iter().map(|(id, n)| ((*id, n.0), &n.1));
        let older = self.older.iter().map(|(k, r)| (*k, r));
        newest.chain(older)
    }
}

/// A job this worker is running.
pub(crate) struct RunningJob {
    pub cancel: CancellationToken,
    pub heartbeat: bool,
    pub lost: bool,
    /// Its handler has started; false while it waits in the producer's claimed-ahead
    /// buffer for a slot (its lease is renewed all the same).
    pub started: bool,
}

/// State shared by the worker's tasks.
pub(crate) struct Shared {
    /// The runtime's client: claims, heartbeats, outcome writes and maintenance. On a pool of
    /// its own when the application's client knows its settings, so that handlers holding
    /// the application's connections cannot starve the leases.
    pub client: Client,
    /// The application's client, handed to handlers in their [`JobContext`](crate::JobContext).
    pub app_client: Client,
    pub registry: Registry,
    pub cfg: WorkerConfig,
    /// The LISTEN connection's settings and the connector that opens it (its own TLS
    /// settings when it has its own URL).
    pub listen_config: Option<(tokio_postgres::Config, crate::tls::Connector)>,
    pub queues: crate::FastMap<String, Arc<QueueSlot>>,
    pub running: Mutex<Running>,
    /// Outcomes for the completer, and the jobs whose outcome is not written yet.
    pub finish_tx: Outbox,
    /// Stop claiming (shutdown has begun).
    pub stop_claiming: CancellationToken,
    /// The shutdown deadline passed: cancel running jobs and hand them back.
    pub hard_stop: CancellationToken,
    /// Stop the background services (after the completer has flushed).
    pub stop_services: CancellationToken,
    /// Counts claims, notifications and heartbeats; with polling off, the maintenance
    /// services run only when it moved since their last round.
    pub activity: AtomicU64,
    pub counters: Arc<Counters>,
    pub lease_us: i64,
    /// Woken by a notification that the schedules changed (see [`crate::periodic`]).
    pub schedules_changed: Notify,
    /// Woken when a producer starts or stops wanting its queue waited on
    /// ([`QueueSlot::want_wait`]); the listener acts on it.
    pub waits_changed: Notify,
    /// How many jobs of each kind without a handler this worker handed back (the back-off
    /// of the next: see [`Shared::unserved_delay`]).
    pub unserved: Mutex<HashMap<String, u32>>,
    /// The worker's queue names and its handlers' kinds, shared: a job's labels and its
    /// outcome's names are clones of these, not copies of its own strings
    /// ([`Shared::name`]).
    pub names: crate::FastMap<String, Arc<str>>,
}

impl Shared {
    /// `name` (a queue or a kind) as a shared string: this worker's own copy when it is one
    /// of its queues or kinds (no allocation), a new one otherwise.
    pub(crate) fn name(&self, name: &str) -> Arc<str> {
        self.names
            .get(name)
            .cloned()
            .unwrap_or_else(|| Arc::from(name))
    }

    /// The first wait before a job of a kind this worker has no handler for is claimable
    /// again; each further one of the kind doubles it, up to [`Shared::UNSERVED_MAX_DELAY`].
    pub(crate) const UNSERVED_FIRST_DELAY: Duration = Duration::from_secs(1);
    /// The longest such wait.
    pub(crate) const UNSERVED_MAX_DELAY: Duration = Duration::from_secs(60);

    /// The wait before a job of `kind`, which this worker cannot run, is claimable again: a
    /// per-kind back-off, so that a worker that serves a queue with such jobs claims each of
    /// them at most about once a minute, and a worker that handles the kind gets it soon.
    pub(crate) fn unserved_delay(&self, kind: &str) -> Duration {
        let mut seen = self.unserved.lock().unwrap_or_else(|e| e.into_inner());
        let n = seen.entry(kind.to_owned()).or_insert(0);
        let delay = Self::UNSERVED_FIRST_DELAY
            .saturating_mul(1u32 << (*n).min(16))
            .min(Self::UNSERVED_MAX_DELAY);
        *n = n.saturating_add(1);
        delay
    }

    pub(crate) fn note_activity(&self) {
        self.activity.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn activity(&self) -> u64 {
        self.activity.load(Ordering::Relaxed)
    }

    /// For a maintenance service: whether to run this round. Always with the poll on; with it
    /// off, only if there was real work since `seen` (which it updates) or a job is running.
    pub(crate) fn worked_since(&self, seen: &mut u64) -> bool {
        let now = self.activity();
        let worked = now != *seen || !self.running().is_empty();
        *seen = now;
        self.poll_interval().is_some() || worked
    }

    /// The fallback poll in force: the configured one, or the default one while the LISTEN
    /// connection is down or hears nothing and the poll was off.
    pub(crate) fn poll_interval(&self) -> Option<Duration> {
        self.cfg.poll_interval.or_else(|| {
            (self.listen_config.is_some() && self.counters.listen_deaf.load(Ordering::Relaxed))
                .then_some(WorkerConfig::DEFAULT_POLL_INTERVAL)
        })
    }

    /// Records whether the LISTEN connection can be relied on; when that changes, every
    /// producer picks up the poll interval now in force (without claiming at once: the
    /// listener wakes them when it connects).
    pub(crate) fn set_listen_deaf(&self, deaf: bool) {
        crate::metrics::flag(crate::metrics::POLLING_FALLBACK, deaf);
        if self.counters.listen_deaf.swap(deaf, Ordering::Relaxed) != deaf {
            for q in self.queues.values() {
                q.reschedule.notify_one();
            }
        }
    }

    /// Wakes every queue's producer to claim at once.
    pub(crate) fn wake_all(&self) {
        for q in self.queues.values() {
            q.wake.notify_one();
        }
    }

    /// Makes `queue`'s producer claim at `at` at the latest (a retry or snooze this worker
    /// wrote becomes ready then), even with the poll off. Unknown queues are ignored.
    pub(crate) fn wake_queue_at(&self, queue: &str, at: Instant) {
        let Some(q) = self.queues.get(queue) else {
            return;
        };
        {
            let mut w = q.wake_at.lock().unwrap_or_else(|p| p.into_inner());
            *w = Some(w.map_or(at, |w| w.min(at)));
        }
        q.reschedule.notify_one();
    }

    /// Takes in what a reaper pass of this worker did: counts the jobs it moved and, since
    /// they are ready now, wakes every producer (also after a failed pass, some of whose
    /// rounds may have committed), even with the poll off.
    pub(crate) fn reaped(&self, pass: &Result<ReapReport>) {
        let Ok(report) = pass else {
            self.wake_all();
            return;
        };
        self.counters.events.emit(|| WorkerEvent::Reaped {
            requeued: report.requeued(),
            failed: report.failed(),
            skipped: report.skipped,
        });
        let reaped = |state: &'static str, n: u64| {
            ::metrics::counter!(crate::metrics::JOBS_REAPED, "state" => state).increment(n);
        };
        reaped("queued", report.requeued());
        reaped("failed", report.failed());
        let total = report.jobs.len() as u64;
        if total > 0 {
            Counters::add(&self.counters.reaped, total);
            tracing::info!(
                reaped = total,
                "returned jobs with expired leases to the queue"
            );
            self.wake_all();
        }
    }

    /// The attempts whose leases the heartbeat renews.
    pub(crate) fn held_leases(&self) -> Vec<AttemptKey> {
        self.running()
            .iter()
            .filter(|(_, r)| r.heartbeat && !r.lost)
            .map(|(k, _)| k)
            .collect()
    }

    /// Marks one attempt as no longer this worker's: its handler is told to stop and its
    /// result will be dropped. Returns whether it was running and not already lost.
    pub(crate) fn mark_lost(&self, id: JobId, attempt: i32) -> bool {
        match self.running().get_mut(&(id, attempt)) {
            Some(r) if !r.lost => {
                r.lost = true;
                r.cancel.cancel();
                true
            }
            _ => false,
        }
    }

    /// Marks every attempt of job `id` this worker runs as lost (the job was cancelled).
    /// Returns how many there were.
    pub(crate) fn cancel_job(&self, id: JobId) -> usize {
        let mut n = 0;
        for (_, r) in self.running().attempts_mut(id) {
            if !r.lost {
                r.lost = true;
                r.cancel.cancel();
                n += 1;
            }
        }
        n
    }

    pub(crate) fn running(&self) -> MutexGuard<'_, Running> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts
        // and removes), so a poisoned lock is still usable.
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl crate::maintenance::scheduler::SchedulerHost for Shared {
    fn client(&self) -> &Client {
        &self.client
    }

    fn stopped(&self) -> &CancellationToken {
        &self.stop_services
    }

    fn schedules_changed(&self) -> &Notify {
        &self.schedules_changed
    }

    fn note_activity(&self) {
        Shared::note_activity(self);
    }

    fn poll_interval(&self) -> Option<Duration> {
        Shared::poll_interval(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(started: bool) -> RunningJob {
        RunningJob {
            cancel: CancellationToken::new(),
            heartbeat: true,
            lost: false,
            started,
        }
    }

    fn attempts(r: &mut Running, id: i64) -> Vec<i32> {
        let mut a: Vec<i32> = r.attempts_mut(JobId(id)).map(|(a, _)| a).collect();
        a.sort_unstable();
        a
    }

    #[test]
    fn running_finds_every_attempt_of_a_job_newer_or_older() {
        let mut r = Running::default();
        assert!(r.is_empty());
        r.insert((JobId(1), 1), job(true));
        r.insert((JobId(2), 1), job(true));
        // A newer attempt of job 1: the older one stays, beside it.
        r.insert((JobId(1), 3), job(false));
        // An older one registered after a newer (cannot happen, but must not be lost).
        r.insert((JobId(1), 2), job(true));
        assert_eq!(r.len(), 4);
        assert_eq!(attempts(&mut r, 1), vec![1, 2, 3]);
        assert_eq!(attempts(&mut r, 2), vec![1]);
        assert!(attempts(&mut r, 9).is_empty());
        // The same attempt again replaces its entry.
        r.insert((JobId(1), 3), job(true));
        assert_eq!(r.len(), 4);
        assert!(r.get_mut(&(JobId(1), 3)).is_some_and(|j| j.started));
        assert!(r.get_mut(&(JobId(1), 1)).is_some());
        assert!(r.get_mut(&(JobId(1), 4)).is_none());
        let mut all: Vec<AttemptKey> = r.iter().map(|(k, _)| k).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            vec![(JobId(1), 1), (JobId(1), 2), (JobId(1), 3), (JobId(2), 1)]
        );
        // Removing the newest leaves the older ones findable, and each goes once.
        assert!(r.remove(&(JobId(1), 3)).is_some());
        assert!(r.remove(&(JobId(1), 3)).is_none());
        assert_eq!(attempts(&mut r, 1), vec![1, 2]);
        assert!(r.remove(&(JobId(1), 1)).is_some());
        assert!(r.remove(&(JobId(1), 2)).is_some());
        assert!(r.remove(&(JobId(2), 1)).is_some());
        assert!(r.is_empty());
    }
}
