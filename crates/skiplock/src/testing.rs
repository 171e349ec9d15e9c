//! Helpers for an application's own tests (the `testing` feature), in the manner of
//! `rivertest` and `Oban.Testing`:
//!
//! - [`assert_enqueued`], [`assert_not_enqueued`] and [`enqueued`] (and their `_tx` forms,
//!   which look through the caller's own transaction, before it commits): did the code
//!   under test enqueue a job of this kind, on this queue, with these payload fields?
//! - [`run_job`]: run one given job through the worker's real executor (its handler's
//!   timeout, panic capture, the guarded outcome write) and get its row back.
//! - [`drain`]: run a queue's jobs until nothing is ready.
//!
//! Both take the registry the same way (`&registry` or `registry`), and handlers see the
//! application state given with [`Registry::data`] as they would in a worker.
//!
//! ```toml
//! [dev-dependencies]
//! skiplock = { version = "*", features = ["testing"] }
//! ```
//!
//! ```no_run
//! use serde_json::json;
//! use skiplock::testing::{assert_enqueued, run_job, Expect};
//! use skiplock::{Client, JobState, NewJob, Registry};
//!
//! # async fn demo(client: Client, registry: Registry) -> skiplock::Result<()> {
//! let id = client
//!     .enqueue(&NewJob::new("send_email", &json!({ "to": "a@example.com", "n": 1 })).queue("mail"))
//!     .await?;
//! assert_enqueued(
//!     &client,
//!     Expect::kind("send_email").queue("mail").payload_includes(json!({ "to": "a@example.com" })),
//! )
//! .await;
//! let row = run_job(&client, &registry, id).await?;
//! assert_eq!(row.state, JobState::Done);
//! # Ok(()) }
//! ```

use std::borrow::Borrow;
use std::fmt;

use crate::caller_tx::Executor;
use crate::client::Client;
use crate::db::testing::Find;
use crate::error::{Error, Result};
use crate::handler::Registry;
use crate::job::{JobId, JobRow, JobState};
use crate::worker::{RunStats, Worker};

/// How many jobs a failed assertion lists.
const LISTED: usize = 20;

/// What an assertion looks for: a job kind, and optionally its queue, some payload fields
/// and its states. By default a job matches if it is [`JobState::Queued`] or
/// [`JobState::Running`]; see [`Expect::state`].
#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    kind: Option<String>,
    queue: Option<String>,
    payload: Option<serde_json::Value>,
    states: Vec<JobState>,
}

impl Expect {
    /// Jobs of this kind.
    pub fn kind(kind: impl Into<String>) -> Expect {
        Expect {
            kind: Some(kind.into()),
            ..Expect::any()
        }
    }

    /// Jobs of any kind.
    pub fn any() -> Expect {
        Expect {
            kind: None,
            queue: None,
            payload: None,
            states: Vec::new(),
        }
    }

    /// On this queue only.
    pub fn queue(mut self, queue: impl Into<String>) -> Expect {
        self.queue = Some(queue.into());
        self
    }

    /// Whose payload includes `fields`: a JSON subset (PostgreSQL's `jsonb @>`). Every field
    /// given must be present with an equal value, nested objects compared the same way;
    /// fields not given may hold anything. An array matches an array containing its
    /// elements.
    pub fn payload_includes(mut self, fields: serde_json::Value) -> Expect {
        self.payload = Some(fields);
        self
    }

    /// In this state; call it again to accept several. Without it: queued or running.
    pub fn state(mut self, state: JobState) -> Expect {
        if !self.states.contains(&state) {
            self.states.push(state);
        }
        self
    }

    fn states(&self) -> Vec<&'static str> {
        if self.states.is_empty() {
            vec![JobState::Queued.as_str(), JobState::Running.as_str()]
        } else {
            self.states.iter().map(|s| s.as_str()).collect()
        }
    }

    fn find(&self, limit: i64) -> Result<Find<'_>> {
        let payload = self
            .payload
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| Error::invalid("payload", e.to_string()))?;
        Ok(Find {
            kind: self.kind.as_deref(),
            queue: self.queue.as_deref(),
            payload,
            states: self.states(),
            limit,
        })
    }

    /// The same states, any job: what is listed when an assertion fails.
    fn listing(&self) -> Find<'_> {
        Find {
            kind: None,
            queue: None,
            payload: None,
            states: self.states(),
            limit: i64::try_from(LISTED + 1).unwrap_or(i64::MAX),
        }
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Some(k) => write!(f, "kind {k:?}")?,
            None => f.write_str("any kind")?,
        }
        if let Some(q) = &self.queue {
            write!(f, ", queue {q:?}")?;
        }
        if let Some(p) = &self.payload {
            write!(f, ", payload including {p}")?;
        }
        write!(f, ", state {}", self.states().join(" or "))
    }
}

/// The jobs matching `expect`, oldest first, read on a pooled connection.
pub async fn enqueued(client: &Client, expect: &Expect) -> Result<Vec<JobRow>> {
    let conn = client.conn("find jobs").await?;
    enqueued_tx(client, &**conn, expect).await
}

/// The jobs matching `expect`, oldest first, read through the caller's connection or
/// transaction (see [`Executor`]): inside a transaction, its own uncommitted jobs are seen.
pub async fn enqueued_tx<'c>(
    client: &Client,
    conn: impl Executor<'c>,
    expect: &Expect,
) -> Result<Vec<JobRow>> {
    let find = expect.find(i64::MAX)?;
    client.store().job_find(conn.into_conn(), &find).await
}

/// Asserts that at least one job matches `expect` (read on a pooled connection); returns
/// the matching jobs.
///
/// # Panics
///
/// If none matches, with a message that lists the jobs that are there in the expected
/// states; or if the jobs cannot be read.
pub async fn assert_enqueued(client: &Client, expect: Expect) -> Vec<JobRow> {
    match client.conn("find jobs").await {
        Ok(conn) => assert_enqueued_tx(client, &**conn, expect).await,
        Err(e) => fail(&expect, &e),
    }
}

/// [`assert_enqueued`] through the caller's connection or transaction (see [`Executor`]),
/// so that a test can assert before its transaction commits.
///
/// # Panics
///
/// As [`assert_enqueued`].
pub async fn assert_enqueued_tx<'c>(
    client: &Client,
    conn: impl Executor<'c>,
    expect: Expect,
) -> Vec<JobRow> {
    let mut conn = conn.into_conn();
    let found = match expect.find(i64::MAX) {
        Ok(find) => client.store().job_find(conn.reborrow(), &find).await,
        Err(e) => Err(e),
    };
    let found = match found {
        Ok(found) => found,
        Err(e) => fail(&expect, &e),
    };
    if !found.is_empty() {
        return found;
    }
    let there = client
        .store()
        .job_find(conn.reborrow(), &expect.listing())
        .await;
    panic!(
        "expected a job with {expect}, found none; {}",
        listing("there are", there)
    );
}

/// Asserts that no job matches `expect` (read on a pooled connection).
///
/// # Panics
///
/// If any matches, with a message that lists them; or if the jobs cannot be read.
pub async fn assert_not_enqueued(client: &Client, expect: Expect) {
    match client.conn("find jobs").await {
        Ok(conn) => assert_not_enqueued_tx(client, &**conn, expect).await,
        Err(e) => fail(&expect, &e),
    }
}

/// [`assert_not_enqueued`] through the caller's connection or transaction (see
/// [`Executor`]).
///
/// # Panics
///
/// As [`assert_not_enqueued`].
pub async fn assert_not_enqueued_tx<'c>(client: &Client, conn: impl Executor<'c>, expect: Expect) {
    let found = match expect.find(i64::try_from(LISTED + 1).unwrap_or(i64::MAX)) {
        Ok(find) => client.store().job_find(conn.into_conn(), &find).await,
        Err(e) => Err(e),
    };
    match found {
        Ok(found) if found.is_empty() => {}
        Ok(found) => panic!(
            "expected no job with {expect}; {}",
            listing("found", Ok(found))
        ),
        Err(e) => fail(&expect, &e),
    }
}

fn fail(expect: &Expect, e: &Error) -> ! {
    panic!(
        "could not look for jobs with {expect}: {}",
        crate::error::error_chain(e)
    )
}

/// `what` followed by the jobs, one a line (at most [`LISTED`]).
fn listing(what: &str, jobs: Result<Vec<JobRow>>) -> String {
    use fmt::Write as _;
    let jobs = match jobs {
        Ok(jobs) => jobs,
        Err(e) => {
            return format!(
                "(could not list the jobs: {})",
                crate::error::error_chain(&e)
            )
        }
    };
    if jobs.is_empty() {
        return format!("{what} no jobs in those states");
    }
    let more = jobs.len() > LISTED;
    let mut s = format!("{what}:");
    for j in jobs.iter().take(LISTED) {
        let _ = write!(
            s,
            "\n  job {}: kind {:?}, queue {:?}, {}, payload {}",
            j.id,
            j.kind,
            j.queue,
            j.state.as_str(),
            j.payload
        );
    }
    if more {
        let _ = write!(s, "\n  (and more)");
    }
    s
}

/// Runs job `id` once through the worker's own executor, with the handlers of `registry`,
/// and returns its row afterwards.
///
/// The job is claimed alone, as a worker claims (its attempt counted, a lease taken),
/// whatever its `run_at` and even if its queue is paused: a test runs the job it names,
/// now. It then runs exactly as in a [`Worker`]: its handler's
/// [`timeout`](crate::JobOptions::timeout), a panic caught and recorded as a failed
/// attempt, its lease renewed while it runs, and its outcome written by the worker's
/// guarded outcome statement. So the row shows what a worker would have left: `done`; or
/// `queued` again with `last_error` and a `run_at` after the backoff; or `failed`.
///
/// A handler that never returns, with no timeout, makes this wait forever.
///
/// # Errors
///
/// [`Error::Invalid`] if the job does not exist, or is not queued with an attempt left;
/// a database error if it cannot be claimed or read.
pub async fn run_job(
    client: &Client,
    registry: impl Borrow<Registry>,
    id: JobId,
) -> Result<JobRow> {
    let registry = registry.borrow();
    let job = client
        .get(id)
        .await?
        .ok_or_else(|| Error::invalid("job", format!("job {id} does not exist")))?;
    let worker =
        quiet(Worker::builder(client.clone(), registry.clone()).queue(&job.queue, 1)).build()?;
    let claimed = worker.run_one(id).await?;
    let row = client
        .get(id)
        .await?
        .ok_or_else(|| Error::invalid("job", format!("job {id} was deleted while it ran")))?;
    if !claimed {
        return Err(Error::invalid(
            "job",
            format!(
                "job {id} is {} with {} of {} attempts used: there is nothing to run",
                row.state.as_str(),
                row.attempts,
                row.max_attempts
            ),
        ));
    }
    Ok(row)
}

/// Runs the jobs of `queue` with the handlers of `registry` until none is ready and none is
/// running, with a worker of 10 slots ([`Worker::run_until_idle`]); returns its counts.
///
/// The worker neither listens nor polls, and runs no pruning, vacuum or idle-connection
/// service: it claims, runs, and returns. It reaps expired leases once first. A job a
/// failed attempt put back in the queue waits for its backoff: it is not ready, so `drain`
/// does not wait for it (make it ready and drain again, or use [`run_job`]).
pub async fn drain(
    client: &Client,
    registry: impl Borrow<Registry>,
    queue: &str,
) -> Result<RunStats> {
    quiet(Worker::builder(client.clone(), registry.borrow().clone()).queue(queue, 10))
        .build()?
        .run_until_idle()
        .await
}

/// A worker with no listener, no poll and no maintenance service beyond the reaper.
fn quiet(b: crate::WorkerBuilder) -> crate::WorkerBuilder {
    b.listen(false)
        .poll_interval(None)
        .prune(None)
        .vacuum_threshold(None)
        .idle_connection_timeout(None)
}
