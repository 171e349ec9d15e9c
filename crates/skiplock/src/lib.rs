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

pub use admin::AdminReport;
pub use caller_tx::{Conn, Executor};
#[allow(deprecated)]
pub use client::DEFAULT_LEASE;
pub use client::{
    Client, ClientBuilder, ServerTimeouts, CONNECT_TIMEOUT, DEFAULT_APPLICATION_NAME,
    DEFAULT_POOL_SIZE, DEFAULT_POOL_WAIT_TIMEOUT, KEEPALIVE_IDLE,
};
pub use db::Statement;
pub use error::{Error, Result};
pub use handler::{
    AsNewJob, BoxError, BoxFuture, Handler, Job, JobContext, JobError, JobOptions, Registry,
};
pub use job::{
    AttemptError, Backoff, ClaimedJob, FailOutcome, JobFamily, JobId, JobRow, JobState, NewJob,
    ReapedJob, Relative, Retry, Transition, DEFAULT_KIND, DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE,
    MAX_AFTER, MAX_BATCH_BYTES,
};
pub use maintenance::gauges::QueueMinute;
pub use maintenance::{PruneOptions, PruneReport};
pub use migrate::{latest_version, migrate, Migration, MigrationReport, MIGRATIONS};
pub use periodic::{Missed, Schedule};
pub use queue::{
    QueueLimits, QueuePause, QueueState, Rate, MAX_LIMIT, MAX_PAUSED_BY_LEN, MAX_RATE_PERIOD,
    MIN_RATE_PERIOD,
};
pub use schema::{Schema, DEFAULT_SCHEMA, MAX_SCHEMA_LEN};
pub use unique::{
    Enqueued, OnConflict, Unique, MAX_UNIQUE_FIELDS, MAX_UNIQUE_KEY_LEN, MIN_UNIQUE_PERIOD,
};
pub use worker::{JobEnd, WorkerEvent};
pub use worker::{
    RunStats, StatsHandle, StopNow, Worker, WorkerBuilder, WorkerConfig, WorkerRow, WorkerState,
};
pub use workflow::{Step, Workflow, MAX_WORKFLOW_JOBS};

/// Re-exported drivers, so that callers use the same versions skiplock does.
pub mod reexports {
    pub use deadpool_postgres;
    pub use tokio_postgres;
}

/// The README's Rust examples, compiled with the doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;
