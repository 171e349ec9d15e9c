//! What the health report says: per-queue counts, the jobs table's dead tuples and vacuum
//! times, and the sessions that keep vacuum from removing dead rows.

use std::time::{Duration, SystemTime};

/// One queue's counts.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QueueHealth {
    /// The queue.
    pub queue: String,
    /// Jobs `queued` (ready now or scheduled).
    pub queued: i64,
    /// Of those, ready now.
    pub ready: i64,
    /// Jobs `running`.
    pub running: i64,
    /// Jobs `done` (still in the table).
    pub done: i64,
    /// Jobs `failed` (still in the table).
    pub failed: i64,
    /// How long the oldest ready job has waited, in seconds (0 when none is ready).
    pub oldest_ready_age_s: f64,
    /// Jobs that finished (done or failed) in the last minute. Jobs deleted as they completed
    /// ([`WorkerConfig::delete_done`](crate::WorkerConfig::delete_done)) are counted by the
    /// minute they completed in: for them this is an estimate (this minute's, and the share
    /// of the minute before that lies within the last 60 s, rounded up, so it is not 0 while
    /// such jobs finished); exact otherwise.
    pub finished_last_minute: i64,
    /// Queued jobs that a worker handed back because it had no handler for their kind, and
    /// that no worker has run since: they wait for a worker that handles their kind (their
    /// `last_error` names the kind and the kinds that worker handles).
    pub unserved: i64,
    /// Whether the queue is paused (see [`Client::pause_queue`](crate::Client::pause_queue)); a paused queue is listed
    /// even when it has no job.
    pub paused: bool,
}

/// The jobs table, from PostgreSQL's statistics views.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TableHealth {
    /// Estimated live rows.
    pub n_live_tup: i64,
    /// Estimated dead row versions not yet removed by vacuum.
    pub n_dead_tup: i64,
    /// The last manual vacuum.
    pub last_vacuum: Option<SystemTime>,
    /// The last autovacuum.
    pub last_autovacuum: Option<SystemTime>,
    /// Table size with its indexes and TOAST, in bytes.
    pub total_bytes: i64,
}

/// A session whose open transaction holds back the xmin horizon: while it stays open,
/// vacuum cannot remove row versions that died after it started, in any table.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Blocker {
    /// Its backend pid (`pg_terminate_backend(pid)` ends it).
    pub pid: i32,
    /// Its user.
    pub user: String,
    /// Its `application_name`.
    pub application_name: String,
    /// Its client address (`local` for a Unix socket).
    pub client: String,
    /// Its state (`idle in transaction`, `active`, ...).
    pub state: String,
    /// How many transactions old its snapshot or transaction id is.
    pub xmin_age: i64,
    /// How long its transaction has been open, in seconds.
    pub transaction_age_s: f64,
    /// How long it has been in its current state, in seconds.
    pub state_age_s: f64,
    /// The start of its last statement.
    pub query: String,
}

impl Blocker {
    /// A plain-language warning about this session.
    pub fn warning(&self) -> String {
        let app = if self.application_name.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.application_name)
        };
        format!(
            "session {}{app} from {} has had a transaction open for {:.0} s ({}, xmin age {}): \
             vacuum cannot remove rows that died since; commit or end it \
             (SELECT pg_terminate_backend({}))",
            self.pid, self.client, self.transaction_age_s, self.state, self.xmin_age, self.pid
        )
    }
}

/// The whole report.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HealthReport {
    /// Per queue, sorted by name.
    pub queues: Vec<QueueHealth>,
    /// The jobs table (`None` if the statistics views do not list it yet).
    pub table: Option<TableHealth>,
    /// Sessions holding back vacuum, oldest first.
    pub blockers: Vec<Blocker>,
    /// Plain-language warnings (blockers, a mostly dead table).
    pub warnings: Vec<String>,
}

/// The default age after which an open transaction is reported even when it is active.
pub const DEFAULT_BLOCKER_AGE: Duration = Duration::from_secs(30);
