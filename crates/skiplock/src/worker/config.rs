//! The worker's settings: [`WorkerConfig`], with a default for each, the
//! [`WorkerBuilder`]'s setters, and their checks. The maintenance services' own settings
//! are derived from them here.

use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::handler::Registry;
use crate::input;
use crate::maintenance::idle::IdleConfig;
use crate::maintenance::pruner::PrunerConfig;
use crate::maintenance::reaper::ReaperConfig;
use crate::maintenance::vacuum::VacuumConfig;
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
    /// (default 20 s; must be shorter than the lease). It also bounds how long the worker
    /// waits for the database's reply on a connection that went silent (half-open): half of
    /// it for a heartbeat, all of it for an outcome write; the statement is then abandoned
    /// and its connection closed. And it is how often the LISTEN connection is checked for
    /// silence (with the poll off, only after real work or while a job runs).
    pub heartbeat_interval: Duration,
    /// The fallback poll: how often each queue claims even without a notification (default
    /// 5 s). `None` turns it off: the worker then sends no statement at all while idle, and
    /// wakes only on notifications, on its own retries and snoozes and the scheduled jobs it
    /// knows of, on jobs its reaper returns, and after reconnecting its LISTEN connection.
    /// While the LISTEN connection is down, or hears nothing (its self-test notification did
    /// not come back, as through a transaction-pooling proxy), the worker polls at
    /// [`WorkerConfig::DEFAULT_POLL_INTERVAL`] instead (see
    /// [`StatsHandle::polling_fallback`](crate::StatsHandle::polling_fallback)).
    pub poll_interval: Option<Duration>,
    /// How often expired leases are reaped (default 30 s). At most one reaper runs at a time
    /// across all processes. With the poll off, the reaper runs only after real work (a claim
    /// or a notification), never on a bare timer.
    pub reap_interval: Duration,
    /// How long shutdown waits for running jobs before cancelling them and putting them back
    /// in the queue (default 30 s). A shutdown ends within this plus 15 s whatever the
    /// database does: up to 5 s for the jobs to be handed back (a claim still out is then
    /// dropped), and up to 10 s for the last outcomes to be written (those that cannot be
    /// are logged and left to the reaper, as at a `kill -9`).
    pub shutdown_timeout: Duration,
    /// The most jobs one claim takes (default 500); a claim never takes more than the queue
    /// has free slots, plus what it may claim ahead of them (see
    /// [`WorkerConfig::claim_ahead`]). A claim in turn that had to wait for its turn takes up
    /// to [`WorkerConfig::max_claim_batch_waited`] instead.
    pub max_claim_batch: u32,
    /// The most jobs a claim in turn ([`WorkerConfig::claim_in_turn`]) takes when it had to
    /// wait for its turn because another worker's claim of the queue held it (default
    /// `None`: four times `max_claim_batch`, 2,000 with the default batch; a value under
    /// `max_claim_batch` acts as `max_claim_batch`). Such a claim is one of several queued
    /// for the turn, the one step of a backlog that runs one at a time across processes, and
    /// each turn has a fixed cost besides its rows (its commit, and the handing of the turn
    /// to the next session), paid less often in larger claims. A claim that finds the turn
    /// free (one process, or the first of several) takes at most `max_claim_batch`. The same
    /// limits hold as for every claim: the free slots plus what the queue may claim ahead,
    /// which is at most this many times its claims in flight (and as many as its slots start
    /// within 5 ms); lowering `max_claim_batch` for large payloads lowers this default with
    /// it (migration 19; docs/SCALING.md).
    pub max_claim_batch_waited: Option<u32>,
    /// The most outcomes written in one statement (default 1,000).
    pub max_finish_batch: usize,
    /// How many claims one queue may have running at once, each on its own connection
    /// (default `None`: automatic, see [`WorkerConfig::claims_in_flight_for`], and
    /// [`WorkerConfig::backlog_claims_in_flight_for`] for a backlog of short jobs). Each claim
    /// asks for at most `max_claim_batch` jobs and at most the queue's concurrency (plus what
    /// it may claim ahead) divided by this number, and all claims together never take more
    /// jobs than the queue has free slots plus what it may claim ahead. Several claims in flight keep a large queue fed while earlier claims' jobs are
    /// still being written, and let a notification start a claim at once while another is
    /// still out. The worker's own pool grows by one connection per claim in flight.
    pub claims_in_flight: Option<usize>,
    /// Whether a queue may claim jobs ahead of its free slots while its jobs are short
    /// (default true). A claim then takes up to `max_claim_batch` jobs even with fewer slots
    /// free, and the jobs without a slot wait in the worker for one, in claim order, their
    /// leases renewed by the heartbeat (also for kinds that opted out of heartbeats while
    /// they run); never more than the concurrency run at once. The worker holds at most as
    /// many ahead as its slots would start within 5 ms at the mean run time of the queue's
    /// recent jobs (concurrency × 5 ms / mean run time), and at most `max_claim_batch` times
    /// its claims in flight: none once the mean run time reaches the concurrency times 5 ms
    /// (20 ms at concurrency 4, 500 ms at 100), none before a job has run, and none while the
    /// oldest waiting job has waited 20 ms (the running jobs turned long). A job that waits
    /// 10 s goes back to the queue without spending an attempt, as all of them do at shutdown
    /// (and the queue claims none ahead until a job has run again). Short jobs then cost
    /// fewer and larger claims, and the next claim is out before the slots free; `false`
    /// keeps every claim within the free slots. Jobs claimed ahead are `running` in the
    /// database (and count against a queue's flow-control limits) from their claim.
    pub claim_ahead: bool,
    /// Whether a queue working through a backlog claims in turn with the other workers of
    /// the queue on this database (default true): while its last claim came back full, a
    /// claim runs in a short transaction that first locks the queue's turn (migration 24:
    /// `job_claim_turn_try.sql`, or `job_claim_in_turn.sql` to wait for it, then
    /// `job_claim.sql`, then COMMIT, in one round trip), so such claims run one at a time
    /// across processes, each after the one before it committed, instead of stepping past
    /// each other's rows at the queue's front. The wait takes no snapshot, so claims queued
    /// for the turn hold back no one's view of which rows are dead. Short claims (no
    /// backlog) never wait for it, and a claim waits 2 s at most for its turn, then claims
    /// without it. On two cores,
    /// eight processes of concurrency 25 drained a queue of no-op jobs 10-15% faster with it,
    /// spending a fifth less of the server's CPU per job (docs/SCALING.md); `false` lets the
    /// claims of several processes run at once, which may suit a server with many cores and
    /// a queue whose claims are few and large.
    pub claim_in_turn: bool,
    /// Whether a job that completes is deleted by the statement that completes it instead of
    /// being kept as `done` until pruning (default false), for queues whose history nobody
    /// reads. Kept whatever this says: a job whose handler set an output (its result stays
    /// readable), a job in a workflow (it waits for parents, or other jobs wait for it), a
    /// job completed in its handler's own transaction, a batch written through the fallback
    /// statement (a row held past the completion's lock bound), and every job that fails. A
    /// deleted job leaves no row: `show`, `jobs` and the dashboard's lists no longer find
    /// it. The same statement counts its deletions per queue and minute (`done_deleted`,
    /// migration 21), so that the per-minute counts of done jobs stay exact; the worker's
    /// counters and metrics count them done. A deletion writes no new row version and no
    /// index entry (docs/OPERATIONS.md, "Completed jobs not kept"). The role needs DELETE on
    /// `jobs` and the grants on `done_deleted`.
    pub delete_done: bool,
    /// Whether the worker's claims, lease renewals and outcome writes use the client's own
    /// pool instead of a small pool of their own (default false). A pool of its own keeps
    /// handlers that hold every connection of the application's pool from delaying lease
    /// renewals until leases expire on a live worker; sharing saves the connections the
    /// application's pool already holds (the `skiplock work` command shares: its handlers
    /// hold no connection while they run, and its start-up checks then open no connection
    /// of their own). When sharing, the worker raises the pool's size by what its runtime
    /// needs (one connection per claim in flight and one per queue, plus two), so that
    /// handlers and runtime do not wait for each other's connections, and the worker's
    /// closing of idle connections ([`WorkerConfig::idle_connection_timeout`]) and of those
    /// that gave no reply in time applies to that pool.
    pub share_client_pool: bool,
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
    /// How often to read the database-derived gauges of [`crate::metrics`] (jobs per queue and
    /// state, the oldest ready job's age, the jobs table's tuples, the oldest transaction
    /// holding back vacuum) into the installed metrics recorder (default `None`: off). One
    /// process at a time reads them (a maintenance lock elects it); with the poll off, only
    /// after real work. The counters and histograms of [`crate::metrics`] are recorded
    /// whatever this says.
    pub metrics_gauges_interval: Option<Duration>,
    /// How often the worker writes its presence to the `workers` table (default 10 s): when
    /// it was last seen and how many jobs it runs. Readers show a worker gone once it has been
    /// silent for this long plus as much again (at least 2 s), unless its poll is off: it
    /// then writes only around real work (at most once per interval) and is shown sleeping
    /// while silent.
    pub presence_interval: Duration,
    /// A test seam: every queue's claim loop panics at its start.
    pub(crate) panic_in_claim_loop: bool,
    /// A test seam: claims start where the last one ended from the start (see
    /// `worker::position`), not only once a claim from the front has become slow.
    pub(crate) claim_positions: bool,
}

impl WorkerConfig {
    /// The default lease.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
    /// The default heartbeat interval.
    pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(20);
    /// The default fallback poll interval.
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);
    /// The default reaper interval.
    pub const DEFAULT_REAP_INTERVAL: Duration = ReaperConfig::DEFAULT_INTERVAL;
    /// The default presence interval.
    pub const DEFAULT_PRESENCE_INTERVAL: Duration = Duration::from_secs(10);
    /// The default shutdown timeout.
    pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
    /// The default prune interval.
    pub const DEFAULT_PRUNE_INTERVAL: Duration = PrunerConfig::DEFAULT_INTERVAL;
    /// The default idle connection timeout.
    pub const DEFAULT_IDLE_CONNECTION_TIMEOUT: Duration = IdleConfig::DEFAULT_TIMEOUT;
    /// The default vacuum threshold.
    pub const DEFAULT_VACUUM_THRESHOLD: u64 = VacuumConfig::DEFAULT_THRESHOLD;
    /// How often the vacuum service reads the jobs table's dead tuples while there is work.
    pub const DEFAULT_VACUUM_CHECK_INTERVAL: Duration = VacuumConfig::DEFAULT_CHECK_INTERVAL;
    /// The most claims in flight per queue that the automatic setting picks.
    pub const AUTO_CLAIMS_IN_FLIGHT_MAX: usize = 4;

    /// The most jobs a claim in turn takes after waiting for its turn: the setting, or four
    /// times `max_claim_batch`; never less than `max_claim_batch`.
    pub fn claim_batch_waited(&self) -> u32 {
        self.max_claim_batch_waited
            .unwrap_or_else(|| self.max_claim_batch.saturating_mul(4))
            .max(self.max_claim_batch)
    }

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

    /// The claims in flight a queue of `concurrency` keeps while it works through a backlog
    /// of short jobs, claiming ahead of its slots (see [`WorkerConfig::claim_ahead`]): the
    /// setting when there is one; automatically, one per twice `max_claim_batch` of
    /// concurrency (one up to 1,000 with the default batch of 500), and no more than
    /// [`Self::claims_in_flight_for`]: one whole claim, with the jobs waiting for a slot
    /// covering its round trip, costs the server less than several claims stepping past each
    /// other's rows at the front of the queue. Once a claim
    /// comes back short (no backlog), a notification that arrives while a claim is out
    /// starts another at once, up to [`Self::claims_in_flight_for`].
    pub fn backlog_claims_in_flight_for(&self, concurrency: usize) -> usize {
        let most = self.claims_in_flight_for(concurrency);
        if self.claims_in_flight.is_some() {
            return most;
        }
        let two_batches = usize::try_from(self.max_claim_batch)
            .unwrap_or(usize::MAX)
            .saturating_mul(2)
            .max(1);
        concurrency.div_ceil(two_batches).clamp(1, most)
    }

    /// Checks the settings; returns the lease in microseconds.
    pub(crate) fn check(&self) -> Result<i64> {
        let lease_us = input::lease_micros(self.lease)?;
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.lease {
            return Err(Error::invalid(
                "heartbeat interval",
                format!(
                    "{:?} must be above zero and shorter than the lease ({:?})",
                    self.heartbeat_interval, self.lease
                ),
            ));
        }
        if self.vacuum_threshold == Some(0) {
            return Err(Error::invalid(
                "vacuum threshold",
                "it must be at least 1 dead tuple (leave it unset to leave the table to autovacuum)",
            ));
        }
        if self.poll_interval == Some(Duration::ZERO)
            || self.reap_interval.is_zero()
            || self.prune_interval.is_zero()
            || self.idle_connection_timeout == Some(Duration::ZERO)
            || self.metrics_gauges_interval == Some(Duration::ZERO)
            || self.presence_interval.is_zero()
        {
            return Err(Error::invalid(
                "worker",
                "intervals and timeouts must be above zero (leave one unset to turn it off)",
            ));
        }
        let longest = [
            ("poll interval", self.poll_interval),
            ("reap interval", Some(self.reap_interval)),
            ("shutdown timeout", Some(self.shutdown_timeout)),
            ("prune interval", Some(self.prune_interval)),
            ("idle connection timeout", self.idle_connection_timeout),
            ("metrics gauges interval", self.metrics_gauges_interval),
            ("presence interval", Some(self.presence_interval)),
        ];
        for (what, d) in longest {
            if d.is_some_and(|d| d > input::MAX_DELAY) {
                return Err(Error::invalid(
                    what,
                    format!("{:?} is more than 100 years", d.unwrap_or_default()),
                ));
            }
        }
        if self.max_claim_batch == 0 || self.max_finish_batch == 0 {
            return Err(Error::invalid("worker", "batch sizes must be at least 1"));
        }
        if self.claims_in_flight == Some(0) {
            return Err(Error::invalid(
                "claims in flight",
                "it must be at least 1 (leave it unset to choose it automatically)",
            ));
        }
        Ok(lease_us)
    }

    /// How long an outcome write (or its read-back) waits for the database's reply before
    /// it is abandoned and its connection closed: one heartbeat interval (see
    /// `worker/reply.rs`).
    pub(crate) fn reply_timeout(&self) -> Duration {
        self.heartbeat_interval
    }

    /// The reaper's settings.
    pub(crate) fn reaper(&self) -> ReaperConfig {
        ReaperConfig {
            interval: self.reap_interval,
        }
    }

    /// The pruner's settings, if it runs.
    pub(crate) fn pruner(&self) -> Option<PrunerConfig> {
        self.prune.map(|options| PrunerConfig {
            options,
            interval: self.prune_interval,
        })
    }

    /// The idle-connection closer's settings, if it runs.
    pub(crate) fn idle(&self) -> Option<IdleConfig> {
        self.idle_connection_timeout
            .map(|timeout| IdleConfig { timeout })
    }

    /// The vacuum service's settings, if it runs.
    pub(crate) fn vacuum(&self) -> Option<VacuumConfig> {
        self.vacuum_threshold.map(VacuumConfig::with_threshold)
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
            max_claim_batch: 500,
            max_claim_batch_waited: None,
            max_finish_batch: 1_000,
            claims_in_flight: None,
            claim_ahead: true,
            claim_in_turn: true,
            delete_done: false,
            share_client_pool: false,
            listen: true,
            prune: Some(PruneOptions::default()),
            prune_interval: Self::DEFAULT_PRUNE_INTERVAL,
            idle_connection_timeout: Some(Self::DEFAULT_IDLE_CONNECTION_TIMEOUT),
            vacuum_threshold: Some(Self::DEFAULT_VACUUM_THRESHOLD),
            metrics_gauges_interval: None,
            presence_interval: Self::DEFAULT_PRESENCE_INTERVAL,
            panic_in_claim_loop: false,
            claim_positions: false,
        }
    }
}

/// Builds a [`Worker`](crate::Worker).
#[must_use]
pub struct WorkerBuilder {
    pub(super) client: Client,
    pub(super) registry: Registry,
    pub(super) queues: Vec<(String, usize)>,
    pub(super) cfg: WorkerConfig,
    pub(super) listen_url: Option<String>,
    pub(crate) periodic: crate::periodic::Periodic,
}

impl WorkerBuilder {
    /// Serve `queue` with at most `concurrency` jobs running at once. Call once per queue.
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        self.queues.push((queue.into(), concurrency));
        self
    }

    /// Gives the handlers application state of type `T` (an HTTP client, a mailer, the
    /// application's database pool), read in a handler with
    /// [`JobContext::data`](crate::JobContext::data). Call once per type; a second value of
    /// one type replaces the first. Same as [`Registry::data`](crate::Registry::data).
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.registry = self.registry.data(value);
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

    /// See [`WorkerConfig::presence_interval`].
    pub fn presence_interval(mut self, every: Duration) -> Self {
        self.cfg.presence_interval = every;
        self
    }

    /// See [`WorkerConfig::metrics_gauges_interval`]; `None` (the default) reads none.
    pub fn metrics_gauges_interval(mut self, every: Option<Duration>) -> Self {
        self.cfg.metrics_gauges_interval = every;
        self
    }

    /// See [`WorkerConfig::vacuum_threshold`]; `None` leaves the table to autovacuum.
    pub fn vacuum_threshold(mut self, dead_tuples: Option<u64>) -> Self {
        self.cfg.vacuum_threshold = dead_tuples;
        self
    }

    /// See [`WorkerConfig::max_claim_batch`] (default 500; at least 1, checked by `build`).
    pub fn max_claim_batch(mut self, n: u32) -> Self {
        self.cfg.max_claim_batch = n;
        self
    }

    /// See [`WorkerConfig::max_claim_batch_waited`] (default: four times
    /// `max_claim_batch`; a value under `max_claim_batch` acts as `max_claim_batch`).
    pub fn max_claim_batch_waited(mut self, n: u32) -> Self {
        self.cfg.max_claim_batch_waited = Some(n);
        self
    }

    /// See [`WorkerConfig::claims_in_flight`] (default: picked from each queue's
    /// concurrency).
    pub fn claims_in_flight(mut self, n: usize) -> Self {
        self.cfg.claims_in_flight = Some(n);
        self
    }

    /// See [`WorkerConfig::claim_ahead`] (default true).
    pub fn claim_ahead(mut self, yes: bool) -> Self {
        self.cfg.claim_ahead = yes;
        self
    }

    /// See [`WorkerConfig::claim_in_turn`] (default true).
    pub fn claim_in_turn(mut self, yes: bool) -> Self {
        self.cfg.claim_in_turn = yes;
        self
    }

    /// See [`WorkerConfig::delete_done`] (default false).
    pub fn delete_done(mut self, yes: bool) -> Self {
        self.cfg.delete_done = yes;
        self
    }

    /// See [`WorkerConfig::share_client_pool`] (default false).
    pub fn share_client_pool(mut self, yes: bool) -> Self {
        self.cfg.share_client_pool = yes;
        self
    }

    /// For tests of the worker's own failures; never use it: every queue's claim loop
    /// panics as it starts.
    #[doc(hidden)]
    #[cfg(feature = "__test-hooks")]
    pub fn panic_in_claim_loop_for_tests(mut self) -> Self {
        self.cfg.panic_in_claim_loop = true;
        self
    }

    /// For tests of claim positions; never use it: every claim starts where the last one
    /// ended, and from the front only once a second, as when a snapshot held open on the
    /// server has made claims from the front slow.
    #[doc(hidden)]
    #[cfg(feature = "__test-hooks")]
    pub fn claim_positions_for_tests(mut self) -> Self {
        self.cfg.claim_positions = true;
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
}

impl WorkerBuilder {
    /// Registers `schedule` when the worker starts: added if new (firing from then on, no
    /// backfill), its definition updated if it exists (its cursor and paused state kept).
    /// Call once per schedule; every worker may register the same ones. A schedule that is
    /// no longer registered from code is not removed: use [`Client::remove_schedule`](crate::Client::remove_schedule).
    ///
    /// ```no_run
    /// # use skiplock::{Client, Missed, Registry, Schedule, Worker};
    /// # fn demo(client: Client, registry: Registry) -> skiplock::Result<()> {
    /// let worker = Worker::builder(client, registry)
    ///     .queue("default", 10)
    ///     .periodic(
    ///         Schedule::new("cleanup", "*/5 * * * *", "cleanup")
    ///             .payload(&serde_json::json!({ "older_than_days": 30 }))
    ///             .time_zone("Europe/Berlin")
    ///             .missed(Missed::Latest),
    ///     )
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn periodic(mut self, schedule: crate::periodic::Schedule) -> Self {
        self.periodic.schedules.push(schedule);
        self
    }

    /// The scheduler's settings (see [`SchedulerConfig`](crate::periodic::SchedulerConfig)).
    pub fn scheduler(mut self, config: crate::periodic::SchedulerConfig) -> Self {
        self.periodic.config = config;
        self
    }
}
