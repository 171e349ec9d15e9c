//! The worker runtime: claims jobs per queue up to each queue's concurrency, runs them
//! outside any transaction, writes their outcomes in batches, renews their leases, listens
//! for wake-ups and reaps expired leases.
//!
//! One module per lifecycle step: [`producer`] (wait, claim, dispatch), [`executor`] (run one
//! job), [`completer`] (batched outcome writes), [`heartbeat`] (batched lease renewal),
//! [`listener`] (the LISTEN connection), [`reaper`] (expired leases), [`pruner`] (finished
//! jobs), [`vacuum`] (dead row versions) and [`idle`] (closing idle pool connections).

mod completer;
mod executor;
mod heartbeat;
mod idle;
mod listener;
mod producer;
mod pruner;
mod reaper;
mod vacuum;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::handler::Registry;
use crate::input;
use crate::job::JobId;
use crate::maintenance::PruneOptions;

/// Worker settings, all with defaults; see each field.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// How long a claim's lease lasts, renewed by heartbeats while the job runs (default
    /// 60 s). A worker that dies holds its jobs at most this long before the reaper hands them
    /// to another worker.
    pub lease: Duration,
    /// How often the leases of running jobs are renewed, in one statement for all of them
    /// (default 20 s; must be shorter than the lease).
    pub heartbeat_interval: Duration,
    /// The fallback poll: how often each queue claims even without a notification (default
    /// 5 s). `None` turns it off: the worker then sends no statement at all while idle, and
    /// wakes only on notifications, on its own retries and snoozes and the scheduled jobs it
    /// knows of, on jobs its reaper returns, and after reconnecting its LISTEN connection.
    /// While the LISTEN connection is down, or hears nothing (its self-test notification did
    /// not come back, as through a transaction-pooling proxy), the worker polls at
    /// [`WorkerConfig::DEFAULT_POLL_INTERVAL`] instead (see
    /// [`StatsHandle::polling_fallback`]).
    pub poll_interval: Option<Duration>,
    /// How often expired leases are reaped (default 30 s). At most one reaper runs at a time
    /// across all processes. With the poll off, the reaper runs only after real work (a claim
    /// or a notification), never on a bare timer.
    pub reap_interval: Duration,
    /// How long shutdown waits for running jobs before cancelling them and putting them back
    /// in the queue (default 30 s).
    pub shutdown_timeout: Duration,
    /// The most jobs one claim takes (default 100); a claim never takes more than the queue
    /// has free slots.
    pub max_claim_batch: u32,
    /// The most outcomes written in one statement (default 1,000).
    pub max_finish_batch: usize,
    /// How many claims one queue may have running at once, each on its own connection
    /// (default `None`: automatic, see [`WorkerConfig::claims_in_flight_for`]). Each claim
    /// asks for at most `max_claim_batch` jobs and at most the queue's concurrency divided by
    /// this number, and all claims together never take more jobs than the queue has free
    /// slots. Several claims in flight keep a large queue fed while earlier claims' jobs are
    /// still being written, and let a notification start a claim at once while another is
    /// still out. The worker's own pool grows by one connection per claim in flight.
    pub claims_in_flight: Option<usize>,
    /// Whether to LISTEN for wake-ups (default true).
    pub listen: bool,
    /// Pruning of finished jobs by the worker (default: `done` jobs older than 7 days,
    /// deleted); `None` turns it off. One process prunes at a time.
    pub prune: Option<PruneOptions>,
    /// How often the worker prunes (default 1 hour). With the poll off, only after real work.
    pub prune_interval: Duration,
    /// Pool connections unused for this long are closed (default 5 minutes), so that an idle
    /// worker keeps only its LISTEN connection. `None` keeps them. Sends no statement.
    pub idle_connection_timeout: Option<Duration>,
    /// Vacuum the jobs table when its dead row versions pass this many (default 1,000),
    /// checked every 5 s while there is work, one process at a time; `None` leaves them to
    /// autovacuum alone. Needs the right to VACUUM the table (its owner, or MAINTAIN on
    /// PostgreSQL 17 and later): without it, one warning and autovacuum alone.
    pub vacuum_threshold: Option<u64>,
}

impl WorkerConfig {
    /// The default lease.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
    /// The default heartbeat interval.
    pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(20);
    /// The default fallback poll interval.
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);
    /// The default reaper interval.
    pub const DEFAULT_REAP_INTERVAL: Duration = Duration::from_secs(30);
    /// The default shutdown timeout.
    pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
    /// The default prune interval.
    pub const DEFAULT_PRUNE_INTERVAL: Duration = Duration::from_secs(3600);
    /// The default idle connection timeout.
    pub const DEFAULT_IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(300);
    /// The default vacuum threshold.
    pub const DEFAULT_VACUUM_THRESHOLD: u64 = 1_000;
    /// The most claims in flight per queue that the automatic setting picks.
    pub const AUTO_CLAIMS_IN_FLIGHT_MAX: usize = 4;

    /// The claims in flight a queue of `concurrency` gets: the setting, or automatically
    /// one per `max_claim_batch` of concurrency, at least 2 (so that a notification never
    /// waits for a claim in flight) and at most [`Self::AUTO_CLAIMS_IN_FLIGHT_MAX`]; never
    /// more than the concurrency.
    pub fn claims_in_flight_for(&self, concurrency: usize) -> usize {
        let n = self.claims_in_flight.unwrap_or_else(|| {
            let batch = usize::try_from(self.max_claim_batch)
                .unwrap_or(usize::MAX)
                .max(1);
            concurrency
                .div_ceil(batch)
                .clamp(2, Self::AUTO_CLAIMS_IN_FLIGHT_MAX)
        });
        n.clamp(1, concurrency.max(1))
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            lease: Self::DEFAULT_LEASE,
            heartbeat_interval: Self::DEFAULT_HEARTBEAT_INTERVAL,
            poll_interval: Some(Self::DEFAULT_POLL_INTERVAL),
            reap_interval: Self::DEFAULT_REAP_INTERVAL,
            shutdown_timeout: Self::DEFAULT_SHUTDOWN_TIMEOUT,
            max_claim_batch: 100,
            max_finish_batch: 1_000,
            claims_in_flight: None,
            listen: true,
            prune: Some(PruneOptions::default()),
            prune_interval: Self::DEFAULT_PRUNE_INTERVAL,
            idle_connection_timeout: Some(Self::DEFAULT_IDLE_CONNECTION_TIMEOUT),
            vacuum_threshold: Some(Self::DEFAULT_VACUUM_THRESHOLD),
        }
    }
}

/// Counts of what a worker did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunStats {
    /// Jobs claimed.
    pub claimed: u64,
    /// Jobs marked done.
    pub done: u64,
    /// Attempts that failed and will be retried.
    pub retried: u64,
    /// Jobs marked failed (permanent error, or out of attempts).
    pub failed: u64,
    /// Jobs put back in the queue without spending an attempt (snoozed, or handed back at
    /// shutdown).
    pub requeued: u64,
    /// Results dropped because the job was no longer this worker's (lease lost).
    pub lost: u64,
    /// Jobs the reaper moved (expired leases, from any worker).
    pub reaped: u64,
}

/// A live view of a worker's counts (see [`Worker::stats_handle`]).
#[derive(Clone)]
pub struct StatsHandle(Arc<Counters>);

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
}

impl std::fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    claimed: AtomicU64,
    done: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
    requeued: AtomicU64,
    lost: AtomicU64,
    reaped: AtomicU64,
    /// The LISTEN connection is down or hears nothing: poll instead.
    listen_deaf: AtomicBool,
}

impl Counters {
    fn snapshot(&self) -> RunStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RunStats {
            claimed: l(&self.claimed),
            done: l(&self.done),
            retried: l(&self.retried),
            failed: l(&self.failed),
            requeued: l(&self.requeued),
            lost: l(&self.lost),
            reaped: l(&self.reaped),
        }
    }

    fn add(a: &AtomicU64, n: u64) {
        a.fetch_add(n, Ordering::Relaxed);
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
}

impl QueueSlot {
    fn new(name: String, concurrency: usize) -> Self {
        QueueSlot {
            name,
            concurrency,
            slots: Arc::new(Semaphore::new(concurrency)),
            wake: Notify::new(),
            wake_at: Mutex::new(None),
            reschedule: Notify::new(),
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

/// A job this worker is running.
pub(crate) struct RunningJob {
    pub cancel: CancellationToken,
    pub heartbeat: bool,
    pub lost: bool,
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
    pub queues: HashMap<String, Arc<QueueSlot>>,
    pub running: Mutex<HashMap<AttemptKey, RunningJob>>,
    /// Outcomes for the completer, and the jobs whose outcome is not written yet.
    pub finish_tx: completer::Outbox,
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
}

impl Shared {
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

    /// The attempts whose leases the heartbeat renews.
    pub(crate) fn held_leases(&self) -> Vec<AttemptKey> {
        self.running()
            .iter()
            .filter(|(_, r)| r.heartbeat && !r.lost)
            .map(|(k, _)| *k)
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
        for (_, r) in self.running().iter_mut().filter(|(k, _)| k.0 == id) {
            if !r.lost {
                r.lost = true;
                r.cancel.cancel();
                n += 1;
            }
        }
        n
    }

    pub(crate) fn running(&self) -> MutexGuard<'_, HashMap<AttemptKey, RunningJob>> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts
        // and removes), so a poisoned lock is still usable.
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Builds a [`Worker`].
#[must_use]
pub struct WorkerBuilder {
    client: Client,
    registry: Registry,
    queues: Vec<(String, usize)>,
    cfg: WorkerConfig,
    listen_url: Option<String>,
    pub(crate) periodic: crate::periodic::Periodic,
}

impl WorkerBuilder {
    /// Serve `queue` with at most `concurrency` jobs running at once. Call once per queue.
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        self.queues.push((queue.into(), concurrency));
        self
    }

    /// Replaces all settings at once.
    pub fn config(mut self, cfg: WorkerConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// See [`WorkerConfig::lease`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.cfg.lease = lease;
        self
    }

    /// See [`WorkerConfig::heartbeat_interval`].
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.cfg.heartbeat_interval = every;
        self
    }

    /// See [`WorkerConfig::poll_interval`]; `None` turns the fallback poll off.
    pub fn poll_interval(mut self, every: Option<Duration>) -> Self {
        self.cfg.poll_interval = every;
        self
    }

    /// See [`WorkerConfig::reap_interval`].
    pub fn reap_interval(mut self, every: Duration) -> Self {
        self.cfg.reap_interval = every;
        self
    }

    /// See [`WorkerConfig::shutdown_timeout`].
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.cfg.shutdown_timeout = timeout;
        self
    }

    /// See [`WorkerConfig::prune`]; `None` turns the worker's pruning off.
    pub fn prune(mut self, prune: Option<PruneOptions>) -> Self {
        self.cfg.prune = prune;
        self
    }

    /// See [`WorkerConfig::prune_interval`].
    pub fn prune_interval(mut self, every: Duration) -> Self {
        self.cfg.prune_interval = every;
        self
    }

    /// See [`WorkerConfig::idle_connection_timeout`]; `None` keeps idle connections open.
    pub fn idle_connection_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.cfg.idle_connection_timeout = timeout;
        self
    }

    /// See [`WorkerConfig::vacuum_threshold`]; `None` leaves the table to autovacuum.
    pub fn vacuum_threshold(mut self, dead_tuples: Option<u64>) -> Self {
        self.cfg.vacuum_threshold = dead_tuples;
        self
    }

    /// See [`WorkerConfig::claims_in_flight`] (default: picked from each queue's
    /// concurrency).
    pub fn claims_in_flight(mut self, n: usize) -> Self {
        self.cfg.claims_in_flight = Some(n);
        self
    }

    /// See [`WorkerConfig::listen`].
    pub fn listen(mut self, listen: bool) -> Self {
        self.cfg.listen = listen;
        self
    }

    /// The URL of the LISTEN connection, when it differs from the pool's (for example when
    /// the pool goes through PgBouncer in transaction mode, which cannot LISTEN). Required
    /// when the client was built from a pool.
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// Checks the settings and builds the worker.
    pub fn build(self) -> Result<Worker> {
        self.registry.validate()?;
        self.periodic.check()?;
        if self.queues.is_empty() {
            return Err(Error::invalid(
                "worker",
                "it serves no queue; call .queue(name, n)",
            ));
        }
        let mut queues = HashMap::new();
        for (name, concurrency) in self.queues {
            input::queue_name(&name)?;
            if concurrency == 0 || concurrency > Semaphore::MAX_PERMITS {
                return Err(Error::invalid(
                    "concurrency",
                    format!("queue {name}: it must be at least 1"),
                ));
            }
            let slot = Arc::new(QueueSlot::new(name.clone(), concurrency));
            if queues.insert(name.clone(), slot).is_some() {
                return Err(Error::invalid(
                    "worker",
                    format!("queue {name} is listed twice"),
                ));
            }
        }
        let cfg = self.cfg;
        let lease_us = input::lease_micros(cfg.lease)?;
        if cfg.heartbeat_interval.is_zero() || cfg.heartbeat_interval >= cfg.lease {
            return Err(Error::invalid(
                "heartbeat interval",
                format!(
                    "{:?} must be above zero and shorter than the lease ({:?})",
                    cfg.heartbeat_interval, cfg.lease
                ),
            ));
        }
        if cfg.vacuum_threshold == Some(0) {
            return Err(Error::invalid(
                "vacuum threshold",
                "it must be at least 1 dead tuple (use None to leave the table to autovacuum)",
            ));
        }
        if cfg.poll_interval == Some(Duration::ZERO)
            || cfg.reap_interval.is_zero()
            || cfg.prune_interval.is_zero()
            || cfg.idle_connection_timeout == Some(Duration::ZERO)
        {
            return Err(Error::invalid(
                "worker",
                "intervals and timeouts must be above zero (use None to turn one off)",
            ));
        }
        if cfg.max_claim_batch == 0 || cfg.max_finish_batch == 0 {
            return Err(Error::invalid("worker", "batch sizes must be at least 1"));
        }
        if cfg.claims_in_flight == Some(0) {
            return Err(Error::invalid(
                "claims in flight",
                "it must be at least 1 (or None: automatic)",
            ));
        }
        let listen_config = match (&self.listen_url, cfg.listen) {
            (_, false) => None,
            (Some(url), true) => {
                // Its own sslmode and sslrootcert, read as for the client's URL.
                let (mut c, tls) = crate::tls::parse(url)
                    .map_err(|e| Error::invalid("listen URL", e.to_string()))?;
                // No server timeouts: the connection only LISTENs, and a proxy in front of it
                // may refuse the `options` startup parameter they travel in.
                crate::client::harden(&mut c, "skiplock-listener", None);
                Some((c, crate::tls::Connector::new(&tls)?))
            }
            (None, true) => {
                let mut c = self.client.config().cloned().ok_or_else(|| {
                    Error::invalid(
                        "worker",
                        "a client built from a pool does not know its URL: give the LISTEN \
                         connection one with .listen_url(..), or turn listening off",
                    )
                })?;
                c.application_name("skiplock-listener");
                Some((c, self.client.connector().clone()))
            }
        };
        Ok(Worker {
            counters: Arc::default(),
            client: self.client,
            registry: self.registry,
            cfg,
            queues,
            listen_config,
            lease_us,
            periodic: self.periodic,
        })
    }
}

/// A worker: serves its queues until told to stop ([`Worker::run`]) or until nothing is ready
/// ([`Worker::run_until_idle`]).
///
/// ```no_run
/// # use skiplock::{Client, Registry, Worker};
/// # async fn demo(client: Client, registry: Registry) -> skiplock::Result<()> {
/// let worker = Worker::builder(client, registry)
///     .queue("default", 10)
///     .queue("emails", 4)
///     .build()?;
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// // ... call stop.send(()) from a signal handler to shut down gracefully ...
/// # drop(stop);
/// worker.run(async { let _ = stopped.await; }).await?;
/// # Ok(()) }
/// ```
pub struct Worker {
    counters: Arc<Counters>,
    client: Client,
    registry: Registry,
    cfg: WorkerConfig,
    queues: HashMap<String, Arc<QueueSlot>>,
    listen_config: Option<(tokio_postgres::Config, crate::tls::Connector)>,
    lease_us: i64,
    periodic: crate::periodic::Periodic,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut queues: Vec<(&str, usize)> = self
            .queues
            .values()
            .map(|q| (q.name.as_str(), q.concurrency))
            .collect();
        queues.sort_unstable();
        f.debug_struct("Worker")
            .field("queues", &queues)
            .field("registry", &self.registry)
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Serve until the shutdown signal.
    Serve,
    /// Return when nothing is ready.
    UntilIdle,
}

impl Worker {
    /// A builder for a worker on `client`'s queue running the kinds in `registry`.
    ///
    /// The worker claims, renews leases and writes outcomes on a small pool of its own (per
    /// queue one connection per claim in flight and one for its due-time lookup, plus two;
    /// with `client`'s settings), apart from the pool handlers use
    /// through [`JobContext::client`](crate::JobContext::client). A client built with
    /// [`Client::from_pool`] has no settings to open one with: the worker then shares the
    /// application's pool, and handlers that hold all of its connections delay lease renewals
    /// (give that pool a wait timeout and room for the worker, or build the client from a URL).
    pub fn builder(client: Client, registry: Registry) -> WorkerBuilder {
        WorkerBuilder {
            client,
            registry,
            queues: Vec::new(),
            cfg: WorkerConfig::default(),
            listen_url: None,
            periodic: Default::default(),
        }
    }

    /// A live view of this worker's counts, readable while it runs (for metrics) and after
    /// it stopped, even abruptly.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(self.counters.clone())
    }

    /// Serves the queues until `shutdown` resolves, then shuts down gracefully: stops
    /// claiming, lets running jobs finish for up to [`WorkerConfig::shutdown_timeout`], then
    /// cancels the rest and puts them back in the queue at once (without spending an
    /// attempt), writes every outcome, and returns what it did.
    ///
    /// Dropping the returned future instead stops everything abruptly, as a crash would: the
    /// jobs it held are reaped when their leases expire.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<RunStats> {
        self.run_mode(Mode::Serve, shutdown).await
    }

    /// Processes what is ready in the worker's queues and returns when nothing is (no job
    /// ready, none running). Reaps expired leases once first. The in-process "kick" for
    /// applications that enqueue and then want the work done without a poller.
    ///
    /// It cannot be told to stop early; see [`Worker::run_until_idle_or`].
    pub async fn run_until_idle(self) -> Result<RunStats> {
        self.run_mode(Mode::UntilIdle, std::future::pending()).await
    }

    /// [`Worker::run_until_idle`], but stops early when `shutdown` resolves, exactly as
    /// [`Worker::run`] does: stops claiming, lets running jobs finish for up to
    /// [`WorkerConfig::shutdown_timeout`], then cancels the rest and puts them back in the
    /// queue at once without spending an attempt. For a draining worker that a signal may
    /// stop (`skiplock work --drain` passes SIGINT/SIGTERM).
    pub async fn run_until_idle_or(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<RunStats> {
        self.run_mode(Mode::UntilIdle, shutdown).await
    }

    async fn run_mode(
        self,
        mode: Mode,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<RunStats> {
        let (finish_tx, finish_rx) = completer::channel();
        // Claims, heartbeats, outcome writes and maintenance get a small pool of their own
        // (one connection per claim in flight and one per queue for its due-time lookup,
        // plus the heartbeat and the completer; connections open as they are needed),
        // so that handlers holding every connection of the application's pool cannot hold
        // back lease renewals until the leases expire on a live worker. A client built from
        // the application's pool has no settings to open another with: the runtime shares
        // that pool (see [`Worker::builder`]).
        let runtime_pool = self
            .queues
            .values()
            .map(|q| self.cfg.claims_in_flight_for(q.concurrency) + 1)
            .sum::<usize>()
            + 2;
        let runtime = self.client.with_own_pool(runtime_pool)?;
        let shared = Arc::new(Shared {
            client: runtime.unwrap_or_else(|| self.client.clone()),
            app_client: self.client,
            registry: self.registry,
            listen_config: self.listen_config,
            queues: self.queues,
            running: Mutex::new(HashMap::new()),
            finish_tx,
            stop_claiming: CancellationToken::new(),
            hard_stop: CancellationToken::new(),
            stop_services: CancellationToken::new(),
            activity: AtomicU64::new(0),
            counters: self.counters,
            lease_us: self.lease_us,
            cfg: self.cfg,
            schedules_changed: Notify::new(),
        });
        tracing::info!(
            schema = %shared.client.schema(),
            queues = ?shared.queues.keys().collect::<Vec<_>>(),
            "worker starting"
        );

        // Dropping these sets (an abrupt stop) aborts every task in them.
        let mut services = JoinSet::new();
        let mut completer = JoinSet::new();
        completer.spawn(completer::run(shared.clone(), finish_rx));
        services.spawn(heartbeat::run(shared.clone()));
        if mode == Mode::Serve {
            services.spawn(reaper::run(shared.clone()));
            services.spawn(crate::periodic::scheduler::run(
                shared.clone(),
                self.periodic,
            ));
            services.spawn(pruner::run(shared.clone()));
            services.spawn(vacuum::run(shared.clone()));
            services.spawn(idle::run(shared.clone()));
            if shared.listen_config.is_some() {
                services.spawn(listener::run(shared.clone()));
            }
        } else {
            reaper::run_once(&shared).await;
            crate::periodic::scheduler::run_until_idle(&shared, self.periodic).await;
        }

        let mut producers = JoinSet::new();
        for slot in shared.queues.values() {
            producers.spawn(producer::run(shared.clone(), slot.clone(), mode));
        }

        // Serve until the signal (or, until idle, until every producer is done).
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                next = producers.join_next() => {
                    if next.is_none() {
                        break;
                    }
                }
            }
        }

        // Graceful shutdown: stop claiming, give running jobs until the deadline, then
        // cancel them (they are handed back), and wait for the producers to wind up.
        shared.stop_claiming.cancel();
        shared.wake_all();
        let drained = tokio::time::timeout(shared.cfg.shutdown_timeout, async {
            while producers.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                running = shared.running().len(),
                "shutdown deadline reached: cancelling running jobs and handing them back"
            );
            shared.hard_stop.cancel();
            while producers.join_next().await.is_some() {}
        }

        // Every outcome is in the channel now: let the completer write them, then stop.
        shared.stop_services.cancel();
        while completer.join_next().await.is_some() {}
        services.abort_all();
        while services.join_next().await.is_some() {}
        let stats = shared.counters.snapshot();
        tracing::info!(?stats, "worker stopped");
        Ok(stats)
    }
}

/// Runs a maintenance `round` every `interval` until the services stop. With the poll off,
/// a round runs only if there was real work since the last one (see
/// [`Shared::worked_since`]), so that an idle worker sends nothing.
pub(crate) async fn maintain<F, Fut>(shared: &Shared, interval: Duration, mut round: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut seen = shared.activity();
    loop {
        tokio::select! {
            () = shared.stop_services.cancelled() => return,
            _ = tick.tick() => {}
        }
        if shared.worked_since(&mut seen) {
            round().await;
        }
    }
}

/// A small pseudo-random jitter in `0..max` for reconnect and retry backoffs (no need for
/// cryptographic randomness; only to keep workers from moving in lockstep).
pub(crate) fn jitter(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(u64::from(std::process::id()));
    let r = h.finish();
    let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(r % max_us)
}

/// Capped exponential backoff with jitter: 100 ms, 200 ms, ... up to `cap`.
pub(crate) fn backoff(failures: u32, cap: Duration) -> Duration {
    let base = Duration::from_millis(100).saturating_mul(1u32 << failures.min(16));
    let d = base.min(cap);
    d / 2 + jitter(d / 2 + Duration::from_millis(1))
}
