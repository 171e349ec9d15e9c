//! The worker's presence in the `workers` table (migration 14), for `skiplock workers` and
//! the dashboard: one row per running [`Worker`](crate::Worker), registered as it starts
//! (`worker_register.sql`), kept current on the presence interval (`worker_seen.sql`: when
//! it was last seen and how many jobs it runs), and marked stopped at a clean shutdown
//! (`worker_stop.sql`).
//!
//! - Driven like a maintenance service ([`maintenance::drive`]): with the poll off, a round
//!   runs only when there was real work since the last one (a claim, a notification, a job
//!   running), at most once per interval, never on a bare timer, so that an idle worker sends
//!   nothing; its row then says `poll_off`, and readers show it sleeping, not gone. The first
//!   round (the registration) is due at once whatever the poll says, so that a worker appears
//!   as it starts.
//! - A registration that fails (the database is down, the schema predates migration 14) does
//!   not stop the worker: the round logs a warning and the next round tries again (and the
//!   worker's events say so: [`WorkerEvent::Registered`], [`WorkerEvent::PresenceFailed`]).
//! - Registering deletes the rows of workers stopped or silent for more than 24 hours; a
//!   worker whose row was deleted so (it slept that long) registers again at its next round.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::events::WorkerEvent;
use super::state::Shared;
use crate::client::Client;
use crate::error::{error_chain, Result};
use crate::maintenance::{self, Service};

/// No row registered yet.
const UNREGISTERED: i64 = 0;

/// The presence service of one worker.
struct Presence {
    shared: Arc<Shared>,
    /// The worker's row, once registered ([`UNREGISTERED`] before).
    id: Arc<AtomicI64>,
}

impl Presence {
    async fn register(&self) -> Result<i64> {
        const OP: &str = "register the worker";
        let shared = &self.shared;
        let mut queues: Vec<(&str, usize)> = shared
            .queues
            .values()
            .map(|q| (q.name.as_str(), q.concurrency))
            .collect();
        queues.sort_unstable();
        let map: serde_json::Map<String, serde_json::Value> = queues
            .iter()
            .map(|(name, n)| ((*name).to_owned(), serde_json::Value::from(*n)))
            .collect();
        let total: usize = queues.iter().map(|q| q.1).sum();
        let row = NewWorker {
            host: host_name(),
            pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
            queues: serde_json::Value::Object(map).to_string(),
            concurrency: i32::try_from(total).unwrap_or(i32::MAX),
            poll_off: shared.cfg.poll_interval.is_none(),
            heartbeat_us: i64::try_from(shared.cfg.presence_interval.as_micros())
                .unwrap_or(i64::MAX),
            version: env!("CARGO_PKG_VERSION"),
        };
        let conn = shared.client.conn(OP).await?;
        let id = shared.client.store().worker_register(&**conn, &row).await?;
        self.id.store(id, Ordering::Relaxed);
        shared
            .counters
            .events
            .emit(|| WorkerEvent::Registered { id });
        tracing::debug!(id, "worker registered");
        Ok(id)
    }

    async fn seen(&self, id: i64) -> Result<()> {
        const OP: &str = "write the worker's presence";
        // Jobs claimed ahead and still waiting for a slot are not running yet.
        let running = self
            .shared
            .running()
            .iter()
            .filter(|(_, r)| r.started)
            .count();
        let running = i32::try_from(running).unwrap_or(i32::MAX);
        let conn = self.shared.client.conn(OP).await?;
        let found = self
            .shared
            .client
            .store()
            .worker_seen(&**conn, id, running)
            .await?;
        drop(conn);
        if !found {
            // Deleted after a day of silence (a poll-off worker that slept that long).
            self.id.store(UNREGISTERED, Ordering::Relaxed);
            self.register().await?;
        }
        Ok(())
    }
}

impl Service for Presence {
    type Report = ();
    const NAME: &'static str = "writing the worker's presence";

    fn first_wait(&self) -> Duration {
        Duration::ZERO
    }

    fn due_in(&self) -> Option<Duration> {
        // Registering is due whatever the poll says; after that, only real work moves it.
        (self.id.load(Ordering::Relaxed) == UNREGISTERED).then_some(Duration::ZERO)
    }

    async fn run_once(&mut self) -> Result<()> {
        let r = match self.id.load(Ordering::Relaxed) {
            UNREGISTERED => self.register().await.map(|_| ()),
            id => self.seen(id).await,
        };
        if r.is_err() {
            self.shared
                .counters
                .events
                .emit(|| WorkerEvent::PresenceFailed);
        }
        r
    }

    fn next(&mut self, _last: &Result<()>) -> Option<Duration> {
        Some(self.shared.cfg.presence_interval)
    }
}

/// Runs the worker's presence until the services stop, then marks its row stopped (a clean
/// shutdown). Dropped instead (an abrupt stop), it leaves the row as it was: readers show the
/// worker gone once it has been silent past its interval (sleeping, if its poll is off).
pub(crate) async fn run(shared: Arc<Shared>) {
    let id = Arc::new(AtomicI64::new(UNREGISTERED));
    let service = Presence {
        shared: shared.clone(),
        id: id.clone(),
    };
    let mut seen = shared.activity();
    maintenance::drive(
        service,
        &shared.stop_services,
        || shared.worked_since(&mut seen),
        |_| {},
    )
    .await;
    let id = id.load(Ordering::Relaxed);
    if id == UNREGISTERED {
        return;
    }
    if let Err(e) = stop(&shared.client, id).await {
        tracing::warn!(error = %error_chain(&e), "could not mark the worker stopped");
    }
}

async fn stop(client: &Client, id: i64) -> Result<()> {
    const OP: &str = "mark the worker stopped";
    let conn = client.conn(OP).await?;
    client.store().worker_stop(&**conn, id).await
}

/// The host's name as the operating system gives it (`gethostname`), or `"unknown"`.
fn host_name() -> String {
    #[cfg(unix)]
    {
        if let Ok(name) = nix::unistd::gethostname() {
            return name.to_string_lossy().into_owned();
        }
    }
    #[cfg(not(unix))]
    {
        if let Ok(name) = std::env::var("COMPUTERNAME") {
            return name;
        }
    }
    "unknown".to_owned()
}

/// A registration's row.
pub(crate) struct NewWorker {
    pub host: String,
    pub pid: i32,
    /// JSON text: queue -> concurrency.
    pub queues: String,
    pub concurrency: i32,
    pub poll_off: bool,
    pub heartbeat_us: i64,
    pub version: &'static str,
}

/// A registered worker, as [`Client::workers`] lists it: its row in the `workers` table and
/// the state the database's clock gives it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WorkerRow {
    /// Its id (the table's).
    pub id: i64,
    /// The host it runs on (`gethostname`).
    pub host: String,
    /// Its process id.
    pub pid: i32,
    /// The queues it serves and the concurrency of each, sorted by queue.
    pub queues: Vec<(String, i64)>,
    /// Its total concurrency (the sum of [`WorkerRow::queues`]').
    pub concurrency: i32,
    /// Jobs it ran at its last presence write.
    pub running: i32,
    /// Whether its fallback poll is off: it writes nothing while idle.
    pub poll_off: bool,
    /// Its presence interval ([`WorkerConfig::presence_interval`](crate::WorkerConfig::presence_interval)).
    pub heartbeat: Duration,
    /// The skiplock version it runs.
    pub version: String,
    /// When it registered.
    pub started_at: SystemTime,
    /// Its last presence write.
    pub last_seen: SystemTime,
    /// When it stopped cleanly; `None` while it runs, or if it died.
    pub stopped_at: Option<SystemTime>,
    /// What its row says of it now.
    pub state: WorkerState,
}

/// What a worker's row says of it ([`WorkerRow::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WorkerState {
    /// Seen within its presence interval plus a grace of as much again (at least 2 s).
    Running,
    /// Its poll is off and it has been silent longer: it sends nothing while idle, by
    /// design, so silence does not mean it is gone. (A poll-off worker that dies without
    /// stopping shows sleeping until its row is deleted, a day later.)
    Sleeping,
    /// Stopped cleanly, or (poll on) silent for longer than its interval plus the grace: it
    /// died, or cannot reach the database.
    Gone,
}

impl WorkerState {
    /// `"running"`, `"sleeping"` or `"gone"`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Running => "running",
            WorkerState::Sleeping => "sleeping",
            WorkerState::Gone => "gone",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<WorkerState> {
        match s {
            "running" => Some(WorkerState::Running),
            "sleeping" => Some(WorkerState::Sleeping),
            "gone" => Some(WorkerState::Gone),
            _ => None,
        }
    }
}

impl std::fmt::Display for WorkerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Client {
    /// The workers registered in the last day and those still running, newest first, each
    /// with its state (see [`WorkerState`]). Reads the `workers` table (migration 14), which
    /// holds one row per worker started in the last day or still running.
    pub async fn workers(&self) -> Result<Vec<WorkerRow>> {
        const OP: &str = "list the workers";
        let conn = self.conn(OP).await?;
        self.store().worker_list(&**conn).await
    }
}
