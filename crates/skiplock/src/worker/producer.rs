//! One producer per queue: wait for a reason to claim (a notification, a free slot while
//! more may be ready, the fallback poll, a known due time), claim as many jobs as the queue
//! has free slots in short statements, and hand each to the executor.
//!
//! Up to [`WorkerConfig::claims_in_flight`](super::WorkerConfig::claims_in_flight) claims run
//! at once, each on its own connection. The jobs running, those waiting for a slot and those
//! the claims out asked for together never exceed the queue's concurrency plus what it may
//! claim ahead (none unless its jobs are short): a claim asks for no more than that leaves.
//! A notification that arrives while a claim is in flight starts another claim at once
//! instead of waiting for the first to return. Claimed jobs start in claim order as the
//! queue's semaphore gives them a slot: never more than the concurrency run at once.
//!
//! While the queue's recent jobs are short, claims may take jobs beyond the free slots
//! ([`WorkerConfig::claim_ahead`](super::WorkerConfig::claim_ahead)): those wait here, in
//! claim order, their leases renewed by the heartbeat, and start as slots free, so that the
//! next claim is out before the slots are. How many may wait is bounded by the time they
//! would wait ([`AHEAD_WAIT`] at the queue's mean run time); one that waits
//! [`AHEAD_MAX_WAIT`] anyway (the running jobs turned long) goes back to the queue, as do
//! all of them at shutdown.
//!
//! After a short claim (in serve mode), a lookup of when the next queued job becomes ready
//! runs beside the claims, off the path from a notification to a claim. Lookups start at
//! most once per [`LOOKUP_GAP`]: a short claim inside the gap defers one lookup to its end,
//! so that at high rates a pickup costs one statement, not two.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::backoff::backoff;
use super::events::WorkerEvent;
use super::executor;
use super::position::Position;
use super::state::{Counters, QueueSlot, Shared};
use crate::db::job::After;
use crate::error::{error_chain, Error};
use crate::job::ClaimedJob;
use crate::metrics as m;
use ::metrics::{counter, histogram};

/// The least time between the starts of two next-due lookups of one queue.
pub(crate) const LOOKUP_GAP: Duration = Duration::from_millis(50);

/// After a short claim while jobs arrive at [`CLAIM_AGAIN_RATE`] or faster: claim again after
/// this long instead of waiting for a notification. A worker that waits makes every INSERT
/// notify, and PostgreSQL serialises the commits of notifying transactions (through their WAL
/// flush), so at such a rate the enqueuers would slow to one commit at a time. Below it the
/// worker waits and a notification starts its claim at once: the notifying commits are few
/// enough not to queue, and a job waits for no timer.
pub(crate) const CLAIM_AGAIN_AFTER: Duration = Duration::from_millis(1);

/// See [`CLAIM_AGAIN_AFTER`]: jobs per second, as the queue's claims found them over the last
/// [`ARRIVAL_WINDOW`].
pub(crate) const CLAIM_AGAIN_RATE: u64 = 600;

/// How far back [`Arrivals`] counts the jobs the claims found.
pub(crate) const ARRIVAL_WINDOW: Duration = Duration::from_millis(50);

/// The jobs a queue's claims found over the last [`ARRIVAL_WINDOW`]: the rate at which jobs
/// arrive, as this worker sees it.
#[derive(Default)]
struct Arrivals {
    claims: VecDeque<(Instant, u32)>,
    jobs: u64,
}

impl Arrivals {
    /// Counts a claim that found `got` jobs at `now`; whether the jobs found over the window
    /// come to [`CLAIM_AGAIN_RATE`] or more.
    fn fast(&mut self, now: Instant, got: u32) -> bool {
        while let Some(&(at, n)) = self.claims.front() {
            if now.saturating_duration_since(at) < ARRIVAL_WINDOW {
                break;
            }
            self.jobs -= u64::from(n);
            self.claims.pop_front();
        }
        if got > 0 {
            self.claims.push_back((now, got));
            self.jobs += u64::from(got);
        }
        // jobs / window >= rate, in whole numbers.
        u128::from(self.jobs) * 1_000_000
            >= u128::from(CLAIM_AGAIN_RATE) * ARRIVAL_WINDOW.as_micros()
    }
}

/// Claimed ahead of the free slots: at most as many jobs as the slots would start within
/// this long at the queue's mean run time (see [`QueueSlot::ahead_cap`]).
pub(crate) const AHEAD_WAIT: Duration = Duration::from_millis(5);

/// A job claimed ahead that has waited this long for a slot goes back to the queue without
/// spending an attempt, for any worker to take. (Its lease is renewed while it waits, so
/// this bounds only how long a job another worker could run stays here.)
pub(crate) const AHEAD_MAX_WAIT: Duration = Duration::from_secs(10);

/// While the oldest job waiting for a slot has waited this long, the running jobs are longer
/// than the mean said: claim nothing more ahead.
pub(crate) const AHEAD_SLOW: Duration = Duration::from_millis(20);

/// At shutdown, how long the jobs claimed ahead wait for the claims still out to come back
/// before they go back to the queue (see the end of [`run`]).
pub(crate) const SHUTDOWN_CLAIMS_FIRST: Duration = Duration::from_secs(1);

/// A job starts without a task of its own (polled first by its queue's claim loop, see
/// [`launch`]) while the queue's recent jobs ran this long or less on average: short enough
/// that running them one after another here costs less than a task each. A job that turns
/// out long holds the loop up while it runs, and the mean it raises sends the next ones to
/// tasks of their own.
pub(crate) const INLINE_MEAN_RUN: Duration = Duration::from_micros(20);

/// A claimed job waiting for a slot.
struct Waiting {
    job: ClaimedJob,
    attempt: executor::Attempt,
    since: Instant,
    /// Whether its kind wants its lease renewed while it runs (it is renewed while it waits).
    heartbeat: bool,
}

/// How the producers run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Serve until the shutdown signal.
    Serve,
    /// Return when nothing is ready.
    UntilIdle,
}

/// What a claim task returns: how many it asked for, where it started, its statement's
/// time, and the jobs.
type Claimed = (u32, After, Duration, Result<Vec<ClaimedJob>, Error>);

pub(crate) async fn run(shared: Arc<Shared>, slot: Arc<QueueSlot>, mode: Mode) {
    // The test seam of `WorkerBuilder::panic_in_claim_loop_for_tests`.
    assert!(
        !shared.cfg.panic_in_claim_loop,
        "queue {}: the claim loop panics, as a test asked",
        slot.name
    );
    let mut jobs: JoinSet<()> = JoinSet::new();
    let mut claims: JoinSet<Claimed> = JoinSet::new();
    let mut lookup = Lookup::default();
    let mut position = Position::new(shared.cfg.claim_positions);
    let max_in_flight = shared.cfg.claims_in_flight_for(slot.concurrency);
    // Working through a backlog with jobs claimed ahead: the claims out at once (the jobs
    // waiting for a slot cover a claim's round trip).
    let backlog_in_flight = shared.cfg.backlog_claims_in_flight_for(slot.concurrency);
    // Each claim asks for at most this many: the batch, or the share per claim of the slots
    // and of what may be claimed ahead of them.
    let chunk = |batch: u32, ahead: usize| {
        batch
            .min(
                u32::try_from((slot.concurrency + ahead).div_ceil(max_in_flight))
                    .unwrap_or(u32::MAX),
            )
            .max(1)
    };
    let max_wait = AHEAD_MAX_WAIT;
    // A claim in turn that waits for its turn may take this many instead (migration 19).
    let batch_waited = shared.cfg.claim_batch_waited();
    // Claimed ahead: at most as many as the claims in flight take at their largest, so that
    // every claim can be a whole batch while the slots are full.
    let ahead_most = |batch: u32| {
        usize::try_from(batch)
            .unwrap_or(usize::MAX)
            .saturating_mul(max_in_flight)
    };
    // Claimed jobs waiting for a slot, in claim order, and how many each claim out asked for.
    let mut waiting: VecDeque<Waiting> = VecDeque::new();
    let mut asked: HashMap<tokio::task::Id, usize> = HashMap::new();
    // Claim at once when starting.
    let mut claim_now = true;
    // The last claim filled every slot it asked for: more may be ready.
    let mut backlog = false;
    // The last claim to return found nothing (for `Mode::UntilIdle`).
    let mut found_nothing = false;
    let mut failures = 0u32;
    let mut paused_until: Option<Instant> = None;
    let mut due: Option<Instant> = None;
    let mut next_poll = poll_interval(&shared, &slot).map(|p| Instant::now() + p);
    let mut arrivals = Arrivals::default();
    // The loop turns once or more per job that ends: what it waits for is set up once, not
    // on every turn (a waiter registered and removed, a timer armed and disarmed, each
    // under a lock the other tasks share). A notification's waiter is renewed once it has
    // fired; a timer is moved only when its deadline does.
    let stop = shared.stop_claiming.cancelled();
    tokio::pin!(stop);
    let wake = slot.wake.notified();
    tokio::pin!(wake);
    let reschedule = slot.reschedule.notified();
    tokio::pin!(reschedule);
    let mut ahead_timer = Timer::default();
    let mut wake_timer = Timer::default();

    loop {
        while jobs.try_join_next().is_some() {}
        if shared.stop_claiming.is_cancelled() {
            break;
        }
        // Until idle, a job that ended is a reason to look again (as when a task ends).
        if start_waiting(&shared, &slot, &mut waiting, &mut jobs) && mode == Mode::UntilIdle {
            claim_now = true;
        }
        if hand_back_stale(&shared, &mut waiting, max_wait) {
            // The running jobs turned long: claim no more ahead until one has run again.
            slot.forget_run_times();
        }
        // A retry or snooze this worker wrote: wake when it is due.
        if let Some(at) = slot.take_wake_at() {
            due = Some(due.map_or(at, |d| d.min(at)));
        }
        // Start claims: one per reason to claim, up to the limit while a backlog is known.
        while (claim_now || backlog) && paused_until.is_none() && claims.len() < max_in_flight {
            let slow = waiting
                .front()
                .is_some_and(|w| w.since.elapsed() >= AHEAD_SLOW);
            let ahead = shared.cfg.claim_ahead && !slow;
            let cap = slot.ahead_cap(ahead, AHEAD_WAIT, ahead_most(shared.cfg.max_claim_batch));
            // A backlog of short jobs: fewer, whole claims. (A job enqueued meanwhile
            // queues behind the backlog anyway; once a claim comes back short, a
            // notification starts a claim at once again.)
            if backlog && cap > 0 && claims.len() >= backlog_in_flight {
                break;
            }
            let running = slot
                .concurrency
                .saturating_sub(slot.slots.available_permits());
            let held = running + waiting.len() + asked.values().sum::<usize>();
            let room = |cap: usize| {
                u32::try_from((slot.concurrency + cap).saturating_sub(held)).unwrap_or(u32::MAX)
            };
            let chunk_now = chunk(shared.cfg.max_claim_batch, cap);
            let room_now = room(cap);
            // With a claim already out, a further one only for a worthwhile share.
            if room_now == 0 || (!claims.is_empty() && backlog && room_now < chunk_now.div_ceil(2))
            {
                break;
            }
            let want = room_now.min(chunk_now);
            claim_now = false;
            let from = position.next(Instant::now());
            // Through a backlog: in turn with the queue's other workers (migration 16), up
            // to the larger batch if it waits for its turn (migration 19), within the same
            // limits computed for that batch.
            let in_turn = (backlog && shared.cfg.claim_in_turn).then(|| {
                let cap = slot.ahead_cap(ahead, AHEAD_WAIT, ahead_most(batch_waited));
                room(cap).min(chunk(batch_waited, cap)).max(want)
            });
            let (shared, slot) = (shared.clone(), slot.clone());
            let task = claims.spawn(async move {
                let (cost, r) = claim(&shared, &slot, want, &from, in_turn).await;
                (want, from, cost, r)
            });
            // Held for it: the most it may bring back.
            asked.insert(task.id(), in_turn.unwrap_or(want) as usize);
            if !backlog {
                break;
            }
        }
        if mode == Mode::UntilIdle
            && found_nothing
            && !claim_now
            && claims.is_empty()
            && jobs.is_empty()
            && waiting.is_empty()
            && paused_until.is_none()
        {
            break;
        }
        let wake_at = match (next_poll, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let wake_at = match mode {
            Mode::Serve => wake_at,
            // Draining: only a limit's wait (see `held_back`).
            Mode::UntilIdle => due,
        };
        ahead_timer.set(waiting.front().map(|w| w.since + max_wait));
        wake_timer.set(wake_at);
        tokio::select! {
            () = &mut stop => break,
            Some(done) = claims.join_next_with_id(), if !claims.is_empty() => {
                let (task, (want, from, cost, result)) = match done {
                    Ok(done) => done,
                    Err(e) => {
                        // A claim task panicked (it cannot: no unwrap on its path) or was
                        // aborted: claim again.
                        asked.remove(&e.id());
                        claim_now = true;
                        continue;
                    }
                };
                asked.remove(&task);
                match result {
                    Ok(claimed) => {
                        failures = 0;
                        let got = u32::try_from(claimed.len()).unwrap_or(u32::MAX);
                        position.claimed(&slot.name, from, cost, &claimed);
                        let ended = start(&shared, &slot, claimed, &mut jobs, &mut waiting);
                        claim_now |= ended && mode == Mode::UntilIdle;
                        // Whole (a claim that waited for its turn may bring more).
                        backlog = got >= want;
                        // Only a claim from the front finds a queue empty: one from the
                        // position asks for one from the front next, draining.
                        found_nothing = got == 0 && from == After::FRONT;
                        if got == 0 && from != After::FRONT && mode == Mode::UntilIdle {
                            position.front_next();
                            claim_now = true;
                        }
                        // Draining: a queue whose limit held its jobs back is not empty;
                        // wait for the limit (a freed slot's notification, the rate window,
                        // or a look again shortly) instead of stopping.
                        if mode == Mode::UntilIdle && found_nothing && jobs.is_empty() {
                            if let Some(at) = held_back(&shared, &slot).await {
                                found_nothing = false;
                                due = Some(due.map_or(at, |d| d.min(at)));
                            }
                        }
                        // Short but jobs are arriving fast: claim again shortly, not waiting.
                        let fast = arrivals.fast(Instant::now(), got);
                        let again = mode == Mode::Serve && !backlog && got > 0 && fast;
                        if again {
                            let at = Instant::now() + CLAIM_AGAIN_AFTER;
                            due = Some(due.map_or(at, |d| d.min(at)));
                        }
                        if mode == Mode::Serve && shared.listen_config.is_some() {
                            // Busy with a backlog, or claiming again shortly: it claims
                            // without a notification, so INSERTs need send none. Short and
                            // few: it may sleep, so they must.
                            slot.want_wait(&shared, !backlog && !again);
                        }
                        next_poll = poll_interval(&shared, &slot).map(|p| Instant::now() + p);
                        if mode == Mode::Serve && !backlog && !again {
                            lookup.want(&shared, &slot, position.lookup());
                            // Short from the key: the claim from the front when it is due.
                            if from != After::FRONT {
                                if let Some(at) = position.front_due() {
                                    due = Some(due.map_or(at, |d| d.min(at)));
                                }
                            }
                        }
                    }
                    Err(e) => {
                        backlog = false;
                        failures += 1;
                        let wait = backoff(failures, Duration::from_secs(10));
                        tracing::warn!(queue = %slot.name, error = %error_chain(&e), retry_in = ?wait, "claim failed");
                        paused_until = Some(Instant::now() + wait);
                    }
                }
            }
            // A notification (or a reconnect). While the queue is believed paused, new
            // jobs start no claim: the resume notification, or the poll, does.
            () = &mut wake => {
                wake.set(slot.wake.notified());
                claim_now |= !slot.pause.is_paused();
            }
            // `wake_at` moved (merged at the top of the loop), or the poll in force did (the
            // LISTEN connection went deaf: poll from now on).
            () = &mut reschedule => {
                reschedule.set(slot.reschedule.notified());
                if next_poll.is_none() {
                    next_poll = poll_interval(&shared, &slot).map(|p| Instant::now() + p);
                }
            }
            // The oldest job claimed ahead has waited too long: hand it back (at the top).
            () = ahead_timer.fired() => {}
            Some(_) = jobs.join_next(), if !jobs.is_empty() => {
                // A slot freed: with a backlog the loop claims again. Until idle, look
                // again whenever a job ends (no notification tells us otherwise).
                if mode == Mode::UntilIdle {
                    claim_now = true;
                }
            }
            Some(found) = lookup.running.join_next(), if !lookup.running.is_empty() => {
                if let Ok(Some(at)) = found {
                    due = Some(due.map_or(at, |d| d.min(at)));
                }
                if std::mem::take(&mut lookup.again) {
                    lookup.want(&shared, &slot, position.lookup());
                }
            }
            () = sleep_until(lookup.deferred) => {
                lookup.deferred = None;
                lookup.want(&shared, &slot, position.lookup());
            }
            () = sleep_until(paused_until) => {
                paused_until = None;
                claim_now = true;
            }
            () = wake_timer.fired() => {
                claim_now = true;
                due = None;
                next_poll = poll_interval(&shared, &slot).map(|p| Instant::now() + p);
            }
        }
    }

    // Shutdown: jobs claimed ahead go back at once, as do those of the claims still out
    // when they come back; the running jobs finish (or are cancelled at the deadline by
    // the executor). The claims still out come back first (for `SHUTDOWN_CLAIMS_FIRST` at
    // most): a claim that ran after the jobs claimed ahead went back would take them again,
    // only to hand them back twice.
    lookup.running.abort_all();
    let first = sleep_until(Some(Instant::now() + SHUTDOWN_CLAIMS_FIRST));
    tokio::pin!(first);
    loop {
        tokio::select! {
            done = claims.join_next() => match done {
                Some(Ok((_, _, _, Ok(claimed)))) => {
                    let _ = start(&shared, &slot, claimed, &mut jobs, &mut waiting);
                }
                Some(_) => {}
                None => break,
            },
            () = &mut first => break,
        }
    }
    let _ = hand_back_stale(&shared, &mut waiting, Duration::ZERO);
    while let Some(done) = claims.join_next().await {
        if let Ok((_, _, _, Ok(claimed))) = done {
            let _ = start(&shared, &slot, claimed, &mut jobs, &mut waiting);
        }
    }
    while jobs.join_next().await.is_some() {}
}

/// Starts the jobs claimed ahead, oldest first, while slots are free. One whose attempt was
/// lost while it waited (its lease expired, or it was cancelled) is dropped, as a running
/// one's result would be.
fn start_waiting(
    shared: &Arc<Shared>,
    slot: &QueueSlot,
    waiting: &mut VecDeque<Waiting>,
    jobs: &mut JoinSet<()>,
) -> bool {
    let mut ended = false;
    while !waiting.is_empty() {
        let Ok(permit) = slot.slots.clone().try_acquire_owned() else {
            return ended;
        };
        let Some(w) = waiting.pop_front() else {
            return ended;
        };
        if w.attempt.start(w.heartbeat) {
            shared
                .counters
                .ended(w.job.id, w.job.attempt, super::events::JobEnd::Lost);
            crate::metrics::finished(
                &shared.name(&w.job.queue),
                &shared.name(&w.job.kind),
                "lost",
                "none",
            );
            tracing::warn!(id = %w.job.id, attempt = w.job.attempt, "lease lost while waiting for a slot: not started (the job is no longer ours)");
            continue;
        }
        ended |= launch(
            slot,
            jobs,
            executor::task(shared.clone(), w.job, permit, w.attempt),
        );
    }
    ended
}

/// Starts one job's run; returns whether it has ended already. While the queue's recent jobs
/// ran within [`INLINE_MEAN_RUN`] on average, the run is polled once here first, and one that
/// ends on that poll (a short job) costs no task: no task to create, schedule and reap, and
/// no idle runtime thread woken to take it. One that does not end goes on in a task of its
/// own, as every job does otherwise; that task polls it again at once, with its own waker
/// (the one polled here is a no-op's: a future must wake the waker of its latest poll).
fn launch(
    slot: &QueueSlot,
    jobs: &mut JoinSet<()>,
    mut run: std::pin::Pin<Box<impl std::future::Future<Output = ()> + Send + 'static>>,
) -> bool {
    if slot.runs_within(INLINE_MEAN_RUN) {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // The handler's panics are caught inside the run (as a retry); one elsewhere in it
        // ends that run alone, as it would end its task.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.as_mut().poll(&mut cx)))
        {
            Ok(std::task::Poll::Pending) => {}
            Ok(std::task::Poll::Ready(())) | Err(_) => return true,
        }
    }
    jobs.spawn(run);
    false
}

/// Hands back the jobs claimed ahead that have waited `max_wait` or longer for a slot: back
/// to the queue without spending an attempt, for any worker. (All of them with zero.)
/// Returns whether it handed any back.
fn hand_back_stale(shared: &Shared, waiting: &mut VecDeque<Waiting>, max_wait: Duration) -> bool {
    let now = Instant::now();
    let mut any = false;
    while waiting
        .front()
        .is_some_and(|w| now.saturating_duration_since(w.since) >= max_wait)
    {
        let Some(w) = waiting.pop_front() else {
            return any;
        };
        if max_wait.is_zero() {
            tracing::info!(id = %w.job.id, "shutdown: a job claimed ahead handed back");
        } else {
            tracing::info!(id = %w.job.id, waited = ?now.saturating_duration_since(w.since), "claimed ahead but no slot freed in time: handed back");
        }
        executor::hand_back(shared, &w.job);
        // After the outcome is queued: the completer's pending set renews the lease now.
        drop(w.attempt);
        any = true;
    }
    any
}

/// The poll in force for this queue: the worker's ([`Shared::poll_interval`]), or, with the
/// poll off, the default one while the queue wants its LISTEN connection to wait on it and
/// it does not yet (INSERTs may send no notification until it does; the listener wakes the
/// producer when it does).
fn poll_interval(shared: &Shared, slot: &QueueSlot) -> Option<Duration> {
    use std::sync::atomic::Ordering;
    shared.poll_interval().or_else(|| {
        (shared.listen_config.is_some()
            && slot.wait_wanted.load(Ordering::SeqCst)
            && !slot.waiting.load(Ordering::SeqCst))
        .then_some(super::WorkerConfig::DEFAULT_POLL_INTERVAL)
    })
}

/// A timer for a deadline the claim loop computes on every turn: armed again only when the
/// deadline moves, pending while there is none.
struct Timer {
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    at: Option<Instant>,
}

impl Default for Timer {
    fn default() -> Self {
        Timer {
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            at: None,
        }
    }
}

impl Timer {
    fn set(&mut self, at: Option<Instant>) {
        if at != self.at {
            if let Some(at) = at {
                self.sleep.as_mut().reset(at);
            }
            self.at = at;
        }
    }

    /// Ends at the deadline; after that, pending until [`Timer::set`] gives one again.
    async fn fired(&mut self) {
        if self.at.is_none() {
            return std::future::pending().await;
        }
        self.sleep.as_mut().await;
        self.at = None;
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Claims up to `want` jobs after `from` on a connection of its own; records the claim's
/// metrics. Returns the time of the claim's statement (without waiting for a connection).
async fn claim(
    shared: &Shared,
    slot: &QueueSlot,
    want: u32,
    from: &After,
    in_turn: Option<u32>,
) -> (Duration, Result<Vec<ClaimedJob>, Error>) {
    let started = std::time::Instant::now();
    let mut cost = Duration::ZERO;
    let result = async {
        let conn = shared.client.conn("claim jobs").await?;
        let sent = std::time::Instant::now();
        let r = shared
            .client
            .store()
            .job_claim(
                &conn,
                &slot.name,
                i64::from(want),
                shared.lease_us,
                from,
                in_turn.map(i64::from),
            )
            .await;
        cost = sent.elapsed();
        r
    }
    .await;
    let queue = || slot.name.clone();
    histogram!(m::CLAIM_DURATION, "queue" => queue()).record(m::secs(started.elapsed()));
    match &result {
        Ok(jobs) => {
            histogram!(m::CLAIM_BATCH_SIZE, "queue" => queue()).record(jobs.len() as f64);
            if !jobs.is_empty() {
                counter!(m::JOBS_CLAIMED, "queue" => queue()).increment(jobs.len() as u64);
            }
            let wait = histogram!(m::JOB_QUEUE_WAIT, "queue" => queue());
            for job in jobs {
                // Claimed at the lease's start, by the database's clock, as `run_at`.
                let claimed_at = job
                    .locked_until
                    .checked_sub(shared.cfg.lease)
                    .unwrap_or(job.locked_until);
                let waited = claimed_at.duration_since(job.run_at).unwrap_or_default();
                wait.record(m::secs(waited));
            }
        }
        Err(_) => counter!(m::CLAIM_ERRORS, "queue" => queue()).increment(1),
    }
    (cost, result)
}

/// Starts the claimed jobs in claim order while the queue has free slots; the others (claimed
/// ahead) wait for one in `waiting`. After shutdown began, hands them back instead.
fn start(
    shared: &Arc<Shared>,
    slot: &QueueSlot,
    claimed: Vec<ClaimedJob>,
    jobs: &mut JoinSet<()>,
    waiting: &mut VecDeque<Waiting>,
) -> bool {
    let n = claimed.len();
    if n == 0 {
        return false;
    }
    let mut ended = false;
    shared.note_activity();
    Counters::add(&shared.counters.claimed, n as u64);
    shared.counters.events.emit(|| WorkerEvent::Claimed {
        queue: slot.name.clone(),
        n,
    });
    tracing::debug!(queue = %slot.name, claimed = n, "claimed jobs");
    let now = Instant::now();
    // Shutdown began: the whole batch goes back (checked once, not for every job).
    let stopping = shared.stop_claiming.is_cancelled();
    for job in claimed {
        if stopping {
            // Claimed but not started: hand it back at once.
            tracing::info!(id = %job.id, "claimed during shutdown: handed back");
            executor::hand_back(shared, &job);
            continue;
        }
        // Registered before its task starts (and removed however the task ends), so that
        // the heartbeat renews its lease from the first beat, also while it waits.
        let heartbeat = shared
            .registry
            .get(&job.kind)
            .is_none_or(|e| e.options.heartbeat);
        let permit = if waiting.is_empty() {
            slot.slots.clone().try_acquire_owned().ok()
        } else {
            None
        };
        let attempt = executor::Attempt::register(shared, &job, heartbeat, permit.is_some());
        match permit {
            Some(permit) => {
                ended |= launch(
                    slot,
                    jobs,
                    executor::task(shared.clone(), job, permit, attempt),
                );
            }
            None => waiting.push_back(Waiting {
                job,
                attempt,
                since: now,
                heartbeat,
            }),
        }
    }
    ended
}

/// Whether the queue's last claim left ready jobs behind for want of a slot or of room in
/// its rate window; if so, when to claim again: when the window has room, or shortly (a
/// freed slot's notification usually comes first).
///
/// The queue's row first (`queue_flags.sql`, one probe): a drain's last claims come back empty
/// while the ready index still holds the entries of every job just claimed, which
/// `job_next_run_at.sql` would walk; only a rate-bound queue asks it for the wait.
async fn held_back(shared: &Shared, slot: &QueueSlot) -> Option<Instant> {
    let conn = shared.client.conn("look up the next due job").await.ok()?;
    let store = shared.client.store();
    let (_, bound) = store.queue_flags(&**conn, &slot.name).await.ok()?;
    let retry = Duration::from_millis(250);
    match bound.as_deref() {
        Some("rate") => {
            let (wait, _, _) = store
                .job_next_run_at(&**conn, &slot.name, &After::FRONT)
                .await
                .ok()?;
            let us = wait.unwrap_or(0);
            let wait = if us <= 0 {
                retry
            } else {
                Duration::from_micros(us.unsigned_abs())
            };
            Some(Instant::now() + wait)
        }
        Some(_) => Some(Instant::now() + retry),
        None => None,
    }
}

/// The next-due lookups of one queue: at most one running, at most one start per
/// [`LOOKUP_GAP`], and none lost: a lookup wanted while one runs starts after it, and one
/// wanted inside the gap starts at its end.
#[derive(Default)]
struct Lookup {
    running: JoinSet<Option<Instant>>,
    /// Wanted while one was running: start another when it returns.
    again: bool,
    /// When the last one started.
    last: Option<Instant>,
    /// Wanted inside the gap: start one then.
    deferred: Option<Instant>,
}

impl Lookup {
    /// `after`: where the queue's claims start.
    fn want(&mut self, shared: &Arc<Shared>, slot: &Arc<QueueSlot>, after: After) {
        if !self.running.is_empty() {
            self.again = true;
            return;
        }
        let now = Instant::now();
        if let Some(last) = self.last {
            if now < last + LOOKUP_GAP {
                self.deferred.get_or_insert(last + LOOKUP_GAP);
                return;
            }
        }
        self.last = Some(now);
        self.deferred = None;
        let (shared, slot) = (shared.clone(), slot.clone());
        self.running
            .spawn(async move { next_due(&shared, &slot, &after).await });
    }
}

/// After a short claim: when the next queued job of this queue becomes ready, by the
/// database's clock, so that scheduled jobs and retries start on time even with no poll;
/// never while the queue is paused (which it also learns here). Only jobs after `after`,
/// where the claims start.
async fn next_due(shared: &Shared, slot: &QueueSlot, after: &After) -> Option<Instant> {
    let epoch = slot.pause.epoch();
    let conn = shared.client.conn("look up the next due job").await.ok()?;
    match shared
        .client
        .store()
        .job_next_run_at(&**conn, &slot.name, after)
        .await
    {
        Ok((wait, paused, _)) => {
            slot.pause.looked_up(&slot.name, paused, epoch);
            let us = wait?;
            // Ready now but not claimed: another claimer holds it. Look again shortly.
            let wait = if us <= 0 {
                Duration::from_millis(250)
            } else {
                Duration::from_micros(us.unsigned_abs())
            };
            Some(Instant::now() + wait)
        }
        Err(e) => {
            tracing::debug!(queue = %slot.name, error = %e, "could not look up the next due job");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_fast_from_the_rate_over_the_window() {
        let per_window =
            u32::try_from(u128::from(CLAIM_AGAIN_RATE) * ARRIVAL_WINDOW.as_millis() / 1_000)
                .unwrap();
        let t0 = Instant::now();
        let mut a = Arrivals::default();
        // One job a claim, spread evenly over the window: one short of the rate, then at it.
        let step = ARRIVAL_WINDOW / per_window;
        for i in 0..per_window - 1 {
            assert!(!a.fast(t0 + step * i, 1), "claim {i}");
        }
        assert!(a.fast(t0 + step * (per_window - 1), 1));
        // A claim that finds nothing adds nothing, and lets the claims older than the window
        // go.
        let last = t0 + step * (per_window - 1);
        assert!(a.fast(last, 0));
        assert!(!a.fast(last + ARRIVAL_WINDOW, 0));
        assert_eq!(a.jobs, 0);
        // Half the rate never gets there.
        let mut a = Arrivals::default();
        for i in 0..per_window * 4 {
            assert!(!a.fast(t0 + step * 2 * i, 1), "claim {i}");
        }
        // Many jobs in one claim (a clump) count as many.
        assert!(a.fast(t0 + step * 8 * per_window, per_window));
    }
}
