//! skiplock: a background-job queue that keeps its jobs in PostgreSQL.
//!
//! One table; claims with `FOR UPDATE SKIP LOCKED` in a short transaction that records a
//! lease; completion and retry guarded by the attempt count; a reaper for expired leases;
//! `LISTEN/NOTIFY` as a wake-up hint. No extensions, plain SQL, PostgreSQL 13 and later.
//!
//! ```no_run
//! use std::time::Duration;
//! use skiplock::{Client, NewJob, Retry};
//!
//! # async fn run() -> Result<(), skiplock::Error> {
//! let client = Client::connect("postgres://postgres@127.0.0.1/app")?;
//! client.migrate().await?;
//!
//! // Enqueue (or use enqueue_tx inside your own transaction).
//! let id = client
//!     .enqueue(&NewJob::new("send_email", &serde_json::json!({ "to": "a@example.com" })))
//!     .await?;
//!
//! // Claim a batch with a lease, run each job outside any transaction, then finish it
//! // with a write guarded by the attempt the claim returned.
//! for job in client.claim("default", 10, Duration::from_secs(300)).await? {
//!     let outcome = match send(&job.payload).await {
//!         Ok(()) => client.complete(job.id, job.attempt).await?.is_applied(),
//!         Err(e) => !matches!(
//!             client.fail(job.id, job.attempt, &e, Retry::default()).await?,
//!             skiplock::FailOutcome::Lost
//!         ),
//!     };
//!     if !outcome {
//!         // The lease expired and the job was taken over: not ours to count.
//!     }
//! }
//! # let _ = id; Ok(())
//! # }
//! # async fn send(_: &str) -> Result<(), String> { Ok(()) }
//! ```
//!
//! Every statement lives in the crate's `queries/` folder, one file per statement, and can
//! be read at run time with [`Client::statement`].
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod caller_tx;
mod client;
mod db;
mod error;
mod handler;
pub mod health;
mod input;
mod job;
mod job_id;
mod maintenance;
pub mod metrics;
mod migrate;
mod outcome;
pub mod periodic;
mod queue;
mod schema;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod tls;
mod unique;
mod worker;
mod workflow;

/// A map for the worker's per-job lookups (handlers, names, queues, pending outcomes): keys
/// the application or the database chooses, hashed with foldhash, seeded per process, at a
/// fraction of SipHash's cost for short keys.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// A set of the same kind ([`FastMap`]).
pub(crate) type FastSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

pub use admin::AdminReport;
pub use caller_tx::{Conn, Executor};
#[allow(deprecated)]
pub use client::DEFAULT_LEASE;
pub use client::{Client, ClientBuilder, ServerTimeouts};
pub use db::job::{claim_turn, CLAIM_TURNS};
pub use db::Statement;
pub use error::{Error, Result};
pub use handler::{
    AsNewJob, BoxError, BoxFuture, Handler, Job, JobContext, JobError, JobOptions, Registry,
};
pub use job::{
    AttemptError, Backoff, ClaimedJob, FailOutcome, JobFamily, JobId, JobRow, JobState, NewJob,
    ReapedJob, Relative, Retry, Transition,
};
pub use maintenance::gauges::QueueMinute;
pub use maintenance::{PruneOptions, PruneReport};
pub use migrate::{latest_version, migrate, Migration, MigrationReport, MIGRATIONS};
pub use periodic::{Missed, Schedule};
pub use queue::{QueueLimits, QueuePause, QueueState, Rate};
pub use schema::Schema;
pub use unique::{Enqueued, OnConflict, Unique};
pub use worker::{JobEnd, WorkerEvent, JOB_SPAN, JOB_SPAN_TARGET};
pub use worker::{
    RunStats, StatsHandle, StopNow, Worker, WorkerBuilder, WorkerConfig, WorkerRow, WorkerState,
};
pub use workflow::{Step, Workflow};

// The old names of the associated constants, kept as deprecated aliases (see CHANGELOG.md).
/// The old name of [`Client::CONNECT_TIMEOUT`].
#[deprecated(since = "0.2.0", note = "use Client::CONNECT_TIMEOUT")]
pub const CONNECT_TIMEOUT: std::time::Duration = Client::CONNECT_TIMEOUT;
/// The old name of [`Client::DEFAULT_APPLICATION_NAME`].
#[deprecated(since = "0.2.0", note = "use Client::DEFAULT_APPLICATION_NAME")]
pub const DEFAULT_APPLICATION_NAME: &str = Client::DEFAULT_APPLICATION_NAME;
/// The old name of [`Client::DEFAULT_POOL_SIZE`].
#[deprecated(since = "0.2.0", note = "use Client::DEFAULT_POOL_SIZE")]
pub const DEFAULT_POOL_SIZE: usize = Client::DEFAULT_POOL_SIZE;
/// The old name of [`Client::DEFAULT_POOL_WAIT_TIMEOUT`].
#[deprecated(since = "0.2.0", note = "use Client::DEFAULT_POOL_WAIT_TIMEOUT")]
pub const DEFAULT_POOL_WAIT_TIMEOUT: std::time::Duration = Client::DEFAULT_POOL_WAIT_TIMEOUT;
/// The old name of [`Client::KEEPALIVE_IDLE`].
#[deprecated(since = "0.2.0", note = "use Client::KEEPALIVE_IDLE")]
pub const KEEPALIVE_IDLE: std::time::Duration = Client::KEEPALIVE_IDLE;
/// The old name of [`NewJob::DEFAULT_KIND`].
#[deprecated(since = "0.2.0", note = "use NewJob::DEFAULT_KIND")]
pub const DEFAULT_KIND: &str = NewJob::DEFAULT_KIND;
/// The old name of [`NewJob::DEFAULT_MAX_ATTEMPTS`].
#[deprecated(since = "0.2.0", note = "use NewJob::DEFAULT_MAX_ATTEMPTS")]
pub const DEFAULT_MAX_ATTEMPTS: i32 = NewJob::DEFAULT_MAX_ATTEMPTS;
/// The old name of [`NewJob::DEFAULT_QUEUE`].
#[deprecated(since = "0.2.0", note = "use NewJob::DEFAULT_QUEUE")]
pub const DEFAULT_QUEUE: &str = NewJob::DEFAULT_QUEUE;
/// The old name of [`NewJob::MAX_AFTER`].
#[deprecated(since = "0.2.0", note = "use NewJob::MAX_AFTER")]
pub const MAX_AFTER: usize = NewJob::MAX_AFTER;
/// The old name of [`NewJob::MAX_BATCH_BYTES`].
#[deprecated(since = "0.2.0", note = "use NewJob::MAX_BATCH_BYTES")]
pub const MAX_BATCH_BYTES: usize = NewJob::MAX_BATCH_BYTES;
/// The old name of [`QueueLimits::MAX_LIMIT`].
#[deprecated(since = "0.2.0", note = "use QueueLimits::MAX_LIMIT")]
pub const MAX_LIMIT: u32 = QueueLimits::MAX_LIMIT;
/// The old name of [`QueuePause::MAX_BY_LEN`].
#[deprecated(since = "0.2.0", note = "use QueuePause::MAX_BY_LEN")]
pub const MAX_PAUSED_BY_LEN: usize = QueuePause::MAX_BY_LEN;
/// The old name of [`QueueLimits::MAX_RATE_PERIOD`].
#[deprecated(since = "0.2.0", note = "use QueueLimits::MAX_RATE_PERIOD")]
pub const MAX_RATE_PERIOD: std::time::Duration = QueueLimits::MAX_RATE_PERIOD;
/// The old name of [`QueueLimits::MIN_RATE_PERIOD`].
#[deprecated(since = "0.2.0", note = "use QueueLimits::MIN_RATE_PERIOD")]
pub const MIN_RATE_PERIOD: std::time::Duration = QueueLimits::MIN_RATE_PERIOD;
/// The old name of [`Schema::DEFAULT`].
#[deprecated(since = "0.2.0", note = "use Schema::DEFAULT")]
pub const DEFAULT_SCHEMA: &str = Schema::DEFAULT;
/// The old name of [`Schema::MAX_LEN`].
#[deprecated(since = "0.2.0", note = "use Schema::MAX_LEN")]
pub const MAX_SCHEMA_LEN: usize = Schema::MAX_LEN;
/// The old name of [`Unique::MAX_FIELDS`].
#[deprecated(since = "0.2.0", note = "use Unique::MAX_FIELDS")]
pub const MAX_UNIQUE_FIELDS: usize = Unique::MAX_FIELDS;
/// The old name of [`Unique::MAX_KEY_LEN`].
#[deprecated(since = "0.2.0", note = "use Unique::MAX_KEY_LEN")]
pub const MAX_UNIQUE_KEY_LEN: usize = Unique::MAX_KEY_LEN;
/// The old name of [`Unique::MIN_PERIOD`].
#[deprecated(since = "0.2.0", note = "use Unique::MIN_PERIOD")]
pub const MIN_UNIQUE_PERIOD: std::time::Duration = Unique::MIN_PERIOD;
/// The old name of [`Workflow::MAX_JOBS`].
#[deprecated(since = "0.2.0", note = "use Workflow::MAX_JOBS")]
pub const MAX_WORKFLOW_JOBS: usize = Workflow::MAX_JOBS;

/// Re-exported drivers, so that callers use the same versions skiplock does.
pub mod reexports {
    pub use deadpool_postgres;
    pub use tokio_postgres;
}

/// The README's Rust examples, compiled with the doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;
