//! The worker runtime: claims jobs per queue up to each queue's concurrency, runs them
//! outside any transaction, writes their outcomes in batches, renews their leases, listens
//! for wake-ups and drives the maintenance services.
//!
//! This module starts, runs and shuts the worker down; one module per lifecycle step does
//! the rest: [`producer`] (wait, claim, dispatch), [`executor`] (run one job), [`completer`]
//! (batched outcome writes, through the [`outbox`]), [`heartbeat`] (batched lease renewal)
//! and [`listener`] (the LISTEN connection). [`config`] holds the settings, [`state`] the
//! state the tasks share, [`events`] what they report to subscribers, [`backoff`] the
//! waits between retries. The maintenance services (reaper, pruner, vacuum, idle-connection
//! closer) live in [`crate::maintenance`].

pub(crate) mod backoff;
mod completer;
mod config;
mod events;
mod executor;
mod heartbeat;
mod listener;
#[cfg(feature = "testing")]
mod one;
mod outbox;
mod position;
pub(crate) mod presence;
mod producer;
mod reply;
pub(crate) mod state;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use config::{WorkerBuilder, WorkerConfig};
pub use events::{JobEnd, WorkerEvent};
pub use executor::{JOB_SPAN, JOB_SPAN_TARGET};
pub use presence::{WorkerRow, WorkerState};
pub use state::{RunStats, StatsHandle};

use crate::client::Client;
use crate::error::{error_chain, Error, Result};
use crate::handler::Registry;
use crate::input;
use crate::maintenance::gauges::Gauges;
use crate::maintenance::idle::IdleCloser;
use crate::maintenance::pruner::Pruner;
use crate::maintenance::reaper::{self, Reaper};
use crate::maintenance::vacuum::Vacuum;
use crate::maintenance::{self, Service};
use producer::Mode;
use state::{Counters, QueueSlot, Shared};

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
    queues: crate::FastMap<String, Arc<QueueSlot>>,
    listen_config: Option<(tokio_postgres::Config, crate::tls::Connector)>,
    lease_us: i64,
    periodic: crate::periodic::Periodic,
    /// Ends the shutdown's grace at once (see [`Worker::stop_now_handle`]).
    stop_now: CancellationToken,
}

/// Makes a running worker stop at once: it stops claiming, cancels its running jobs and
/// hands them back to the queue without spending an attempt (as at the end of
/// [`WorkerConfig::shutdown_timeout`]), writes their outcomes and returns. For a second
/// Ctrl-C. Get one with [`Worker::stop_now_handle`]; cheap to clone.
#[derive(Debug, Clone)]
pub struct StopNow(CancellationToken);

impl StopNow {
    /// Stops the worker at once (see [`StopNow`]); does nothing once it has stopped.
    pub fn stop_now(&self) {
        self.0.cancel();
    }
}

/// After the shutdown timeout, how long the producers have to hand their jobs back before
/// they are dropped (a claim still out on a connection that does not answer): their jobs
/// are left to the reaper, as at a `kill -9`.
pub(crate) const HAND_BACK_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// At the end of a shutdown, how long the outcomes of the last jobs may take to be written
/// (retries included) before they are given up: those jobs are left to the reaper, as at
/// a `kill -9`, and logged. With [`HAND_BACK_GRACE`], a shutdown ends within
/// [`WorkerConfig::shutdown_timeout`] plus 15 s, whatever the database does.
pub(crate) const WRITE_AT_STOP: std::time::Duration = std::time::Duration::from_secs(10);

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

impl WorkerBuilder {
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
        let mut queues = crate::FastMap::default();
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
        let lease_us = cfg.check()?;
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
            stop_now: CancellationToken::new(),
        })
    }
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
    /// [`WorkerBuilder::share_client_pool`] makes a client built from a URL share its pool
    /// too, one connection fewer for a process whose handlers hold none while they run.
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

    /// A handle that makes this worker, once running, stop at once (see [`StopNow`]).
    pub fn stop_now_handle(&self) -> StopNow {
        StopNow(self.stop_now.clone())
    }

    /// Subscribes to the worker's events from the moment of the call (see
    /// [`WorkerEvent`]): claims, every attempt's end ([`JobEnd`]), heartbeat rounds, reaper
    /// passes, the LISTEN connection coming up. For an application's own metrics or logs, and
    /// for tests that wait for something to happen instead of polling the database. Subscribe
    /// before [`Worker::run`] to see every event; [`StatsHandle::subscribe`] subscribes
    /// while it runs.
    ///
    /// Cheap when nobody subscribes (no event is built). A receiver that falls more than
    /// 8,192 events behind misses the oldest and is told how many
    /// ([`broadcast::error::RecvError::Lagged`]); the worker never waits for a receiver.
    ///
    /// ```no_run
    /// # async fn f(worker: skiplock::Worker) {
    /// use skiplock::{JobEnd, WorkerEvent};
    /// let mut events = worker.subscribe();
    /// tokio::spawn(async move {
    ///     while let Ok(event) = events.recv().await {
    ///         if let WorkerEvent::Finished { id, end: JobEnd::Failed, .. } = event {
    ///             eprintln!("job {id} failed");
    ///         }
    ///     }
    /// });
    /// # }
    /// ```
    pub fn subscribe(&self) -> broadcast::Receiver<WorkerEvent> {
        self.counters.events.subscribe()
    }

    /// The old name of [`Worker::subscribe`].
    #[doc(hidden)]
    #[deprecated(since = "0.2.0", note = "renamed Worker::subscribe")]
    pub fn events(&self) -> broadcast::Receiver<WorkerEvent> {
        self.subscribe()
    }

    /// Serves the queues until `shutdown` resolves, then shuts down gracefully: stops
    /// claiming, lets running jobs finish for up to [`WorkerConfig::shutdown_timeout`], then
    /// cancels the rest and puts them back in the queue at once (without spending an
    /// attempt), writes every outcome, and returns what it did.
    ///
    /// Dropping the returned future instead stops everything abruptly, as a crash would: the
    /// jobs it held are reaped when their leases expire.
    ///
    /// Any future is a shutdown signal, whatever it returns:
    /// `worker.run(tokio::signal::ctrl_c())` works as written.
    ///
    /// Returns an error if one of the worker's own tasks (a queue's claim loop, the outcome
    /// writer, a service) panicked: the worker then shuts down as above and reports it, and
    /// does not serve on without it.
    pub async fn run(self, shutdown: impl Future + Send) -> Result<RunStats> {
        self.run_mode(Mode::Serve, async move {
            let _ = shutdown.await;
        })
        .await
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
    pub async fn run_until_idle_or(self, shutdown: impl Future + Send) -> Result<RunStats> {
        self.run_mode(Mode::UntilIdle, async move {
            let _ = shutdown.await;
        })
        .await
    }

    /// The state the worker's tasks share, with the runtime's own pool of `runtime_pool`
    /// connections (see [`Worker::builder`]) and the outcomes going to `finish_tx`; and the
    /// periodic schedules, for the scheduler.
    fn into_shared(
        self,
        finish_tx: outbox::Outbox,
        runtime_pool: usize,
    ) -> Result<(Arc<Shared>, crate::periodic::Periodic)> {
        let runtime = if self.cfg.share_client_pool {
            // Room for the runtime beside the handlers (see `WorkerConfig::share_client_pool`).
            let pool = self.client.pool();
            pool.resize(pool.status().max_size.saturating_add(runtime_pool));
            None
        } else {
            self.client.with_own_pool(runtime_pool)?
        };
        let names = self
            .queues
            .keys()
            .map(String::as_str)
            .chain(self.registry.kinds())
            .map(|n| (n.to_owned(), Arc::<str>::from(n)))
            .collect();
        let shared = Arc::new(Shared {
            client: runtime.unwrap_or_else(|| self.client.clone()),
            app_client: self.client,
            registry: self.registry,
            listen_config: self.listen_config,
            queues: self.queues,
            running: Mutex::new(state::Running::default()),
            finish_tx,
            stop_claiming: CancellationToken::new(),
            hard_stop: self.stop_now,
            stop_services: CancellationToken::new(),
            activity: AtomicU64::new(0),
            counters: self.counters,
            lease_us: self.lease_us,
            cfg: self.cfg,
            schedules_changed: Notify::new(),
            waits_changed: Notify::new(),
            unserved: Mutex::new(HashMap::new()),
            names,
        });
        Ok((shared, self.periodic))
    }

    async fn run_mode(
        self,
        mode: Mode,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<RunStats> {
        let (finish_tx, finish_rx) = outbox::channel();
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
        let (shared, periodic) = self.into_shared(finish_tx, runtime_pool)?;
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
        // Its own set: at a clean stop it marks the worker stopped before the services end.
        let mut presence = JoinSet::new();
        presence.spawn(presence::run(shared.clone()));
        if mode == Mode::Serve {
            spawn_maintenance(&shared, &mut services);
            services.spawn(crate::maintenance::scheduler::run(shared.clone(), periodic));
            if shared.listen_config.is_some() {
                services.spawn(listener::run(shared.clone()));
            }
        } else {
            let pass = reaper::run_once(&shared.client).await;
            if let Err(e) = &pass {
                tracing::warn!(error = %error_chain(e), "reaping failed");
            }
            shared.reaped(&pass);
            crate::maintenance::scheduler::run_until_idle(&*shared, periodic).await;
        }

        let mut producers = JoinSet::new();
        for slot in shared.queues.values() {
            producers.spawn(producer::run(shared.clone(), slot.clone(), mode));
        }

        // Serve until the signal (or, until idle, until every producer is done), a stop
        // now, or the death of one of the worker's own tasks.
        let mut died: Option<String> = None;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                () = shared.hard_stop.cancelled() => break,
                next = producers.join_next() => match next {
                    None => break,
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        died = Some(task_died("a queue's claim loop", &e));
                        break;
                    }
                },
                Some(Err(e)) = services.join_next() => {
                    died = Some(task_died("a background service", &e));
                    break;
                }
                Some(Err(e)) = completer.join_next() => {
                    died = Some(task_died("the outcome writer", &e));
                    break;
                }
            }
        }

        // Graceful shutdown: stop claiming, give running jobs until the deadline (or until a
        // stop now), then cancel them (they are handed back), and wait for the producers to
        // wind up.
        shared.stop_claiming.cancel();
        shared.wake_all();
        let drained = tokio::time::timeout(shared.cfg.shutdown_timeout, async {
            tokio::select! {
                () = async { while let Some(r) = producers.join_next().await { note_death(&mut died, r); } } => {}
                () = shared.hard_stop.cancelled() => {}
            }
        })
        .await;
        if drained.is_err() || !producers.is_empty() {
            if drained.is_err() {
                tracing::warn!(
                    running = shared.running().len(),
                    "shutdown deadline reached: cancelling running jobs and handing them back"
                );
            } else {
                tracing::warn!(
                    running = shared.running().len(),
                    "stopping now: cancelling running jobs and handing them back"
                );
            }
            shared.hard_stop.cancel();
            let handed = tokio::time::timeout(HAND_BACK_GRACE, async {
                while let Some(r) = producers.join_next().await {
                    note_death(&mut died, r);
                }
            })
            .await;
            if handed.is_err() {
                tracing::error!(
                    running = shared.running().len(),
                    "claims still out after the shutdown timeout (the database does not answer): \
                     dropping them; their jobs will be reaped when their leases expire"
                );
                producers.abort_all();
                while producers.join_next().await.is_some() {}
            }
        }

        // Every outcome is in the channel now: let the completer write them, then stop.
        shared.stop_services.cancel();
        let services_stopped = tokio::time::Instant::now();
        let written = tokio::time::timeout(WRITE_AT_STOP, async {
            while let Some(r) = completer.join_next().await {
                note_death(&mut died, r);
            }
        })
        .await;
        if written.is_err() {
            completer.abort_all();
            while completer.join_next().await.is_some() {}
        }
        let unwritten = shared.finish_tx.pending_jobs();
        if !unwritten.is_empty() {
            tracing::error!(
                jobs = unwritten.len(),
                ids = ?unwritten.iter().map(|(id, _)| id.0).collect::<Vec<_>>(),
                "could not write these job outcomes before stopping; their leases will expire \
                 and the reaper will retry them"
            );
        }
        // Marking the worker stopped runs beside the last writes, within their time.
        let _ =
            tokio::time::timeout_at(services_stopped + WRITE_AT_STOP, presence.join_next()).await;
        // A service in the middle of a round ends it, within the same time: aborted, its
        // statement would go on in the server after `run` returns, where it can meet the
        // caller's next statement (a DROP SCHEMA, a migration) in a deadlock. What is still
        // running at the deadline (a database that does not answer) is aborted.
        let _ = tokio::time::timeout_at(services_stopped + WRITE_AT_STOP, async {
            while let Some(r) = services.join_next().await {
                note_death(&mut died, r);
            }
        })
        .await;
        services.abort_all();
        while let Some(r) = services.join_next().await {
            if !matches!(&r, Err(e) if e.is_cancelled()) {
                note_death(&mut died, r);
            }
        }
        if let Some(what) = died {
            let stats = shared.counters.snapshot();
            tracing::error!(?stats, "worker stopped: {what}");
            return Err(Error::TaskDied(what));
        }
        let stats = shared.counters.snapshot();
        tracing::info!(?stats, "worker stopped");
        Ok(stats)
    }
}

/// The words for a task of the worker that ended abnormally (`e`: a panic or an abort).
fn task_died(what: &str, e: &tokio::task::JoinError) -> String {
    let why = if e.is_panic() {
        "panicked"
    } else {
        "was cancelled"
    };
    let msg = format!("{what} {why}");
    tracing::error!(error = %e, "{msg}; the worker shuts down");
    msg
}

/// Records the first abnormal end of a task while shutting down.
fn note_death(died: &mut Option<String>, r: std::result::Result<(), tokio::task::JoinError>) {
    if let Err(e) = r {
        let what = task_died("a task of the worker", &e);
        died.get_or_insert(what);
    }
}

/// Starts the maintenance services the settings turn on, each driven by
/// [`maintenance::drive`] until the services stop. With the poll off, a round of a service
/// that sends statements runs only if there was real work since the last one (see
/// [`Shared::worked_since`]), so that an idle worker sends nothing.
fn spawn_maintenance(shared: &Arc<Shared>, services: &mut JoinSet<()>) {
    let cfg = &shared.cfg;
    let client = shared.client.clone();
    services.spawn(maintain(
        shared.clone(),
        Reaper::new(client.clone(), cfg.reaper()),
        Shared::reaped,
    ));
    if let Some(p) = cfg.pruner() {
        services.spawn(maintain(
            shared.clone(),
            Pruner::new(client.clone(), p),
            |_, _| {},
        ));
    }
    if let Some(v) = cfg.vacuum() {
        services.spawn(maintain(
            shared.clone(),
            Vacuum::new(client.clone(), v),
            |_, _| {},
        ));
    }
    if let Some(every) = cfg.metrics_gauges_interval {
        services.spawn(maintain(
            shared.clone(),
            Gauges::new(client.clone(), every),
            |_, _| {},
        ));
    }
    if let Some(i) = cfg.idle() {
        let clients = [client, shared.app_client.clone()];
        services.spawn(maintain(
            shared.clone(),
            IdleCloser::new(clients, i),
            |_, _| {},
        ));
    }
}

/// Drives `service` in this worker, handing each round's result to `after`.
async fn maintain<S: Service>(
    shared: Arc<Shared>,
    service: S,
    after: fn(&Shared, &Result<S::Report>),
) {
    let mut seen = shared.activity();
    maintenance::drive(
        service,
        &shared.stop_services,
        || shared.worked_since(&mut seen),
        |r| after(&shared, r),
    )
    .await;
}
