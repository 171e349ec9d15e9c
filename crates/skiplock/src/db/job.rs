//! The job lifecycle statements, bound and decoded for tokio-postgres, and the [`Store`]
//! methods that run them.
//!
//! Every call uses an unnamed statement with its parameter types given (`query_typed`): one
//! round trip, and no named prepared statements, so it also works through PgBouncer in
//! transaction mode. The exceptions are the hot path's claims, outcome writes and
//! heartbeats on a pooled connection of a client with prepared statements on.

use std::time::SystemTime;

use deadpool_postgres::Object;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error as PgError, GenericClient, Row};

use super::{job_state, on_conn, Sql, Store};
use crate::caller_tx::Conn;
use crate::job::{ClaimedJob, EncodedBatch, EncodedJob, JobId, JobRow, JobState, ReapedJob};
use crate::outcome::Outcome;

use crate::error::{Error, Result};

impl Store {
    /// `job_insert.sql`: enqueues one job; returns its id.
    pub(crate) async fn job_insert(&self, conn: Conn<'_>, j: &EncodedJob) -> Result<JobId> {
        on_conn!(conn, "enqueue a job",
            |c| insert(c, &self.sql, j),
            sqlx: super::sqlx::insert(c, &self.sql, j),
        )
    }

    /// `job_insert_many.sql`: enqueues many jobs in one statement; returns their ids in
    /// input order.
    pub(crate) async fn job_insert_many(
        &self,
        conn: Conn<'_>,
        b: &EncodedBatch,
    ) -> Result<Vec<JobId>> {
        on_conn!(conn, "enqueue jobs",
            |c| insert_many(c, &self.sql, b),
            sqlx: super::sqlx::insert_many(c, &self.sql, b),
        )
    }

    /// `job_claim.sql`: claims up to `limit` ready jobs of `queue` on a pooled connection
    /// (a prepared statement cached on it when prepared statements are on), in claim order.
    pub(crate) async fn job_claim(
        &self,
        conn: &Object,
        queue: &str,
        limit: i64,
        lease_us: i64,
    ) -> Result<Vec<ClaimedJob>> {
        claim(
            &***conn,
            self.cache(conn),
            &self.sql,
            queue,
            limit,
            lease_us,
        )
        .await
        .map_err(Error::db("claim jobs"))
    }

    /// `job_reap.sql`: one reaper round (at most [`REAP_BATCH`] rows of each kind); the
    /// caller repeats while a round comes back full.
    pub(crate) async fn job_reap<C: GenericClient + Sync>(&self, c: &C) -> Result<Vec<ReapedJob>> {
        const OP: &str = "reap expired leases";
        let rows = c
            .query_typed(&self.sql.reap, &[(&REAP_BATCH, Type::INT8)])
            .await
            .map_err(Error::db(OP))?;
        rows.iter()
            .map(|r| {
                let (id, status, attempts) = (|| {
                    Ok::<_, PgError>((
                        r.try_get("id")?,
                        r.try_get::<_, &str>("status")?,
                        r.try_get("attempts")?,
                    ))
                })()
                .map_err(Error::db(OP))?;
                Ok(ReapedJob {
                    id: JobId(id),
                    state: job_state(OP, status)?,
                    attempts,
                })
            })
            .collect()
    }

    /// `reaper_try_lock.sql`: tries the reaper's advisory lock for the current transaction.
    pub(crate) async fn reaper_try_lock<C: GenericClient + Sync>(
        &self,
        c: &C,
        key: i64,
    ) -> Result<bool> {
        async {
            c.query_typed_one(&self.sql.reaper_try_lock, &[(&key, Type::INT8)])
                .await?
                .try_get(0)
        }
        .await
        .map_err(Error::db("take the reaper's lock"))
    }

    /// `job_get.sql`: one job by id, or `None`.
    pub(crate) async fn job_get<C: GenericClient + Sync>(
        &self,
        c: &C,
        id: JobId,
    ) -> Result<Option<JobRow>> {
        const OP: &str = "read a job";
        let row = c
            .query_typed_opt(&self.sql.get, &[(&id.0, Type::INT8)])
            .await
            .map_err(Error::db(OP))?;
        let Some(r) = row else {
            return Ok(None);
        };
        let status: String = r.try_get("status").map_err(Error::db(OP))?;
        let state = job_state(OP, &status)?;
        job_row(&r, state).map(Some).map_err(Error::db(OP))
    }

    /// `job_finish_many.sql` on a pooled connection (a prepared statement cached on it when
    /// prepared statements are on): writes many outcomes; one verdict per element of
    /// `batch`, in its order.
    pub(crate) async fn job_finish_many(
        &self,
        conn: &Object,
        batch: &[Finish],
    ) -> Result<Vec<Verdict<Written>>> {
        const OP: &str = "write job outcomes";
        let raw = finish_many(&***conn, self.cache(conn), &self.sql, batch)
            .await
            .map_err(Error::db(OP))?;
        raw.into_iter().map(|v| written(OP, v)).collect()
    }

    /// `job_finish_many.sql` with a batch of one, as an unnamed statement.
    pub(crate) async fn job_finish_one<C: GenericClient + Sync>(
        &self,
        c: &C,
        f: &Finish,
    ) -> Result<Verdict<Written>> {
        const OP: &str = "write a job's outcome";
        let raw = finish_many(c, None, &self.sql, std::slice::from_ref(f))
            .await
            .map_err(Error::db(OP))?;
        written(OP, raw.into_iter().next().unwrap_or(Verdict::Lost))
    }

    /// `job_extend_many.sql` on a pooled connection (a prepared statement cached on it
    /// when prepared statements are on): renews many leases; one verdict per element of
    /// `jobs`, in its order.
    pub(crate) async fn job_extend_many(
        &self,
        conn: &Object,
        jobs: &[(JobId, i32)],
        lease_us: i64,
    ) -> Result<Vec<Verdict<()>>> {
        extend_many(&***conn, self.cache(conn), &self.sql, jobs, lease_us)
            .await
            .map_err(Error::db("renew leases"))
    }

    /// `job_extend_many.sql` with a batch of one, as an unnamed statement.
    pub(crate) async fn job_extend_one<C: GenericClient + Sync>(
        &self,
        c: &C,
        id: JobId,
        attempt: i32,
        lease_us: i64,
    ) -> Result<Verdict<()>> {
        extend_many(c, None, &self.sql, &[(id, attempt)], lease_us)
            .await
            .map(|v| v.into_iter().next().unwrap_or(Verdict::Lost))
            .map_err(Error::db("extend a lease"))
    }

    /// `job_next_run_at.sql`: microseconds until the next queued job of `queue` is due, if
    /// any is queued and the queue is not paused; and whether it is paused.
    pub(crate) async fn job_next_run_at<C: GenericClient + Sync>(
        &self,
        c: &C,
        queue: &str,
    ) -> Result<(Option<i64>, bool)> {
        async {
            let row = c
                .query_typed_one(&self.sql.next_run_at, &[(&queue, Type::TEXT)])
                .await?;
            Ok((row.try_get("wait_us")?, row.try_get("paused")?))
        }
        .await
        .map_err(Error::db("look up the next due job"))
    }

    /// `job_retry.sql`: makes the jobs `ids` ready again; returns the ids it changed, or
    /// (having changed nothing) the jobs that would duplicate an active job's unique key,
    /// each with that job.
    pub(crate) async fn job_retry(
        &self,
        conn: Conn<'_>,
        ids: &[i64],
    ) -> Result<super::unique::Retried> {
        on_conn!(conn, "retry jobs",
            |c| super::unique::retry(c, &self.sql, ids),
            sqlx: super::unique::retry_sqlx(c, &self.sql, ids),
        )
    }

    /// `job_cancel.sql`: cancels the jobs `ids`; returns the ids it changed.
    pub(crate) async fn job_cancel(&self, conn: Conn<'_>, ids: &[i64]) -> Result<Vec<JobId>> {
        self.admin(conn, &self.sql.cancel, "cancel jobs", ids).await
    }

    /// `job_delete.sql`: deletes the jobs `ids` that are not running; returns the ids it
    /// deleted.
    pub(crate) async fn job_delete(&self, conn: Conn<'_>, ids: &[i64]) -> Result<Vec<JobId>> {
        self.admin(conn, &self.sql.delete, "delete jobs", ids).await
    }

    async fn admin(
        &self,
        conn: Conn<'_>,
        statement: &str,
        op: &'static str,
        ids: &[i64],
    ) -> Result<Vec<JobId>> {
        on_conn!(conn, op,
            |c| admin(c, statement, ids),
            sqlx: super::sqlx::admin(c, statement, ids),
        )
    }

    /// `job_states.sql`: the state of each of `ids` that exists.
    pub(crate) async fn job_states(
        &self,
        conn: Conn<'_>,
        ids: &[i64],
    ) -> Result<Vec<(JobId, JobState)>> {
        const OP: &str = "read the jobs' states";
        let rows = on_conn!(conn, OP,
            |c| states(c, &self.sql, ids),
            sqlx: super::sqlx::states(c, &self.sql, ids),
        )?;
        rows.into_iter()
            .map(|(id, s)| Ok((id, job_state(OP, &s)?)))
            .collect()
    }
}

/// For the hot-path statements: a pooled connection whose statement cache to use (named
/// prepared statements, parsed and planned once per connection), or `None` for unnamed
/// statements (one round trip, PgBouncer-safe).
pub(crate) type Cache<'a> = Option<&'a deadpool_postgres::ClientWrapper>;

async fn rows<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    statement: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, PgError> {
    match cache {
        Some(w) => {
            let types: Vec<Type> = params.iter().map(|p| p.1.clone()).collect();
            let prepared = w.prepare_typed_cached(statement, &types).await?;
            let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.0).collect();
            w.query(&prepared, &values).await
        }
        None => c.query_typed(statement, params).await,
    }
}

async fn insert<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    j: &EncodedJob,
) -> Result<JobId, PgError> {
    let row = c
        .query_typed_one(
            &sql.insert,
            &[
                (&j.queue, Type::TEXT),
                (&j.kind, Type::TEXT),
                (&j.payload, Type::TEXT),
                (&j.priority, Type::INT2),
                (&j.max_attempts, Type::INT4),
                (&j.run_at_us, Type::INT8),
                (&j.delay_us, Type::INT8),
            ],
        )
        .await?;
    Ok(JobId(row.try_get(0)?))
}

pub(crate) async fn insert_many<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    b: &EncodedBatch,
) -> Result<Vec<JobId>, PgError> {
    if b.len() == 0 {
        return Ok(Vec::new());
    }
    let rows = c
        .query_typed(
            &sql.insert_many,
            &[
                (&b.queue, Type::TEXT_ARRAY),
                (&b.kind, Type::TEXT_ARRAY),
                (&b.payload, Type::TEXT_ARRAY),
                (&b.priority, Type::INT2_ARRAY),
                (&b.max_attempts, Type::INT4_ARRAY),
                (&b.run_at_us, Type::INT8_ARRAY),
                (&b.delay_us, Type::INT8_ARRAY),
            ],
        )
        .await?;
    rows.iter().map(|r| Ok(JobId(r.try_get(0)?))).collect()
}

/// Claims up to `limit` ready jobs of `queue`, in claim order: what [`Store::job_claim`]
/// runs, and what the lab and the benchmark run on connections of their own.
pub(crate) async fn claim<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    queue: &str,
    limit: i64,
    lease_us: i64,
) -> Result<Vec<ClaimedJob>, PgError> {
    let rows = rows(
        c,
        cache,
        &sql.claim,
        &[
            (&queue, Type::TEXT),
            (&limit, Type::INT8),
            (&lease_us, Type::INT8),
        ],
    )
    .await?;
    let mut jobs = rows
        .iter()
        .map(claimed_job)
        .collect::<Result<Vec<_>, _>>()?;
    // UPDATE ... RETURNING has no order; hand jobs out in claim order.
    jobs.sort_by_key(|j| (j.priority, j.run_at, j.id));
    Ok(jobs)
}

fn claimed_job(r: &Row) -> Result<ClaimedJob, PgError> {
    Ok(ClaimedJob {
        id: JobId(r.try_get("id")?),
        queue: r.try_get("queue")?,
        kind: r.try_get("kind")?,
        payload: r.try_get("payload")?,
        attempt: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        priority: r.try_get("priority")?,
        run_at: r.try_get("run_at")?,
        created_at: r.try_get("created_at")?,
        locked_until: r.try_get("locked_until")?,
    })
}

/// The most jobs one reaper round moves per kind (expired leases, exhausted queued jobs).
pub(crate) const REAP_BATCH: i64 = 1_000;

/// A job's row from `job_get.sql`, its status already read as `state`.
fn job_row(r: &Row, state: JobState) -> Result<JobRow, PgError> {
    Ok(JobRow {
        id: JobId(r.try_get("id")?),
        queue: r.try_get("queue")?,
        kind: r.try_get("kind")?,
        payload: r.try_get("payload")?,
        state,
        priority: r.try_get("priority")?,
        run_at: r.try_get::<_, SystemTime>("run_at")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        locked_until: r.try_get("locked_until")?,
        last_error: r.try_get("last_error")?,
        created_at: r.try_get("created_at")?,
        finished_at: r.try_get("finished_at")?,
        schedule: r.try_get("schedule")?,
    })
}

/// What a batched guarded write did to one element of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict<T> {
    /// The guard held and the row was written.
    Applied(T),
    /// The guard did not hold: the job is no longer this claim's.
    Lost,
    /// Another session held the row locked: nothing was written, nothing is known; try
    /// again shortly.
    Busy,
}

impl<T> Verdict<T> {
    pub(crate) fn is_busy(&self) -> bool {
        matches!(self, Verdict::Busy)
    }
}

/// A written outcome: the job's new status and run_at, and run_at - now() in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Written {
    pub state: JobState,
    pub run_at: SystemTime,
    pub retry_in_us: i64,
}

/// One job's outcome, as bound to `job_finish_many.sql`.
#[derive(Debug, Clone)]
pub(crate) struct Finish {
    pub id: JobId,
    /// The job's queue (not sent: the worker wakes that queue when the job is due again).
    pub queue: String,
    /// The job's kind (not sent: a label of the worker's metrics).
    pub kind: String,
    pub attempt: i32,
    pub outcome: Outcome,
}

impl Finish {
    /// A successful attempt of a job claimed outside the worker (no queue to wake).
    pub(crate) fn complete(id: JobId, attempt: i32) -> Finish {
        Finish {
            id,
            queue: String::new(),
            kind: String::new(),
            attempt,
            outcome: Outcome::Complete,
        }
    }
}

/// Places each row's verdict at its input position (`n`, 1-based). An element the
/// statement returned nothing for (a duplicate id in one batch) counts as lost.
fn by_position<T>(
    len: usize,
    rows: &[Row],
    verdict: impl Fn(&Row, &str) -> Result<Verdict<T>, PgError>,
) -> Result<Vec<Verdict<T>>, PgError> {
    let mut out: Vec<Verdict<T>> = (0..len).map(|_| Verdict::Lost).collect();
    for r in rows {
        let n: i64 = r.try_get("n")?;
        let result: &str = r.try_get("result")?;
        let v = verdict(r, result)?;
        if let Some(slot) = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| out.get_mut(i))
        {
            *slot = v;
        }
    }
    Ok(out)
}

/// A written outcome as the statement returns it: the status still as text.
struct RawWritten {
    status: String,
    run_at: SystemTime,
    retry_in_us: i64,
}

/// A raw verdict with its status read as a [`JobState`]; any other status is an
/// [`Error::Decode`](crate::Error::Decode) for `op`.
fn written(op: &'static str, v: Verdict<RawWritten>) -> Result<Verdict<Written>> {
    Ok(match v {
        Verdict::Applied(w) => Verdict::Applied(Written {
            state: job_state(op, &w.status)?,
            run_at: w.run_at,
            retry_in_us: w.retry_in_us,
        }),
        Verdict::Lost => Verdict::Lost,
        Verdict::Busy => Verdict::Busy,
    })
}

/// Writes many outcomes; returns one verdict per element of `batch`, in its order.
async fn finish_many<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    batch: &[Finish],
) -> Result<Vec<Verdict<RawWritten>>, PgError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = batch.iter().map(|f| f.id.0).collect();
    let attempts: Vec<i32> = batch.iter().map(|f| f.attempt).collect();
    let outcomes: Vec<&str> = batch.iter().map(|f| f.outcome.sql_name()).collect();
    let errors: Vec<&str> = batch.iter().map(|f| f.outcome.error()).collect();
    let delays: Vec<i64> = batch.iter().map(|f| f.outcome.delay_us()).collect();
    let (bases, caps): (Vec<i64>, Vec<i64>) = batch.iter().map(|f| f.outcome.backoff_us()).unzip();
    let rows = rows(
        c,
        cache,
        &sql.finish_many,
        &[
            (&ids, Type::INT8_ARRAY),
            (&attempts, Type::INT4_ARRAY),
            (&outcomes, Type::TEXT_ARRAY),
            (&errors, Type::TEXT_ARRAY),
            (&delays, Type::INT8_ARRAY),
            (&bases, Type::INT8_ARRAY),
            (&caps, Type::INT8_ARRAY),
        ],
    )
    .await?;
    by_position(batch.len(), &rows, |r, result| {
        Ok(match result {
            "written" => Verdict::Applied(RawWritten {
                status: r.try_get("status")?,
                run_at: r.try_get("run_at")?,
                retry_in_us: r.try_get("retry_in_us")?,
            }),
            "busy" => Verdict::Busy,
            _ => Verdict::Lost,
        })
    })
}

/// Renews many leases; returns one verdict per element of `jobs`, in its order.
async fn extend_many<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    jobs: &[(JobId, i32)],
    lease_us: i64,
) -> Result<Vec<Verdict<()>>, PgError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = jobs.iter().map(|j| j.0 .0).collect();
    let attempts: Vec<i32> = jobs.iter().map(|j| j.1).collect();
    let rows = rows(
        c,
        cache,
        &sql.extend_many,
        &[
            (&ids, Type::INT8_ARRAY),
            (&attempts, Type::INT4_ARRAY),
            (&lease_us, Type::INT8),
        ],
    )
    .await?;
    by_position(jobs.len(), &rows, |_, result| {
        Ok(match result {
            "renewed" => Verdict::Applied(()),
            "busy" => Verdict::Busy,
            _ => Verdict::Lost,
        })
    })
}

/// `s` with every character outside printable ASCII written as `\u{..}`: text that any
/// server encoding can store (for error messages a database refused to encode).
pub(crate) fn ascii_escaped(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if ch.is_ascii() && (!ch.is_ascii_control() || ch == '\n' || ch == '\t') {
            out.push(ch);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(ch));
        }
    }
    out
}

/// Runs one of the admin statements (retry, cancel, delete) over `ids`; returns the ids it
/// changed.
async fn admin<C: GenericClient + Sync>(
    c: &C,
    statement: &str,
    ids: &[i64],
) -> Result<Vec<JobId>, PgError> {
    let rows = c
        .query_typed(statement, &[(&ids, Type::INT8_ARRAY)])
        .await?;
    rows.iter().map(|r| Ok(JobId(r.try_get(0)?))).collect()
}

/// The status of each of `ids` that exists, as text.
async fn states<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    ids: &[i64],
) -> Result<Vec<(JobId, String)>, PgError> {
    let rows = c
        .query_typed(&sql.states, &[(&ids, Type::INT8_ARRAY)])
        .await?;
    rows.iter()
        .map(|r| Ok((JobId(r.try_get(0)?), r.try_get(1)?)))
        .collect()
}
