//! The job lifecycle statements, bound and decoded for tokio-postgres.
//!
//! Every call uses an unnamed statement with its parameter types given (`query_typed`): one
//! round trip, and no named prepared statements, so it also works through PgBouncer in
//! transaction mode.

use std::time::SystemTime;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error, GenericClient, Row};

use super::Sql;
use crate::job::{
    ClaimedJob, EncodedBatch, EncodedJob, JobId, JobRow, JobState, ReapedJob, Transition,
};
use crate::outcome::Outcome;

/// For the hot-path statements: a pooled connection whose statement cache to use (named
/// prepared statements, parsed and planned once per connection), or `None` for unnamed
/// statements (one round trip, PgBouncer-safe).
pub(crate) type Cache<'a> = Option<&'a deadpool_postgres::ClientWrapper>;

async fn rows<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    statement: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, Error> {
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

pub(crate) async fn insert<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    j: &EncodedJob,
) -> Result<JobId, Error> {
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
) -> Result<Vec<JobId>, Error> {
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

pub(crate) async fn claim<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    queue: &str,
    limit: i64,
    lease_us: i64,
) -> Result<Vec<ClaimedJob>, Error> {
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

fn claimed_job(r: &Row) -> Result<ClaimedJob, Error> {
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

/// One reaper round (at most [`REAP_BATCH`] of each kind); the caller repeats while a round
/// comes back full.
pub(crate) async fn reap<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
) -> Result<Vec<ReapedJob>, Error> {
    let rows = c
        .query_typed(&sql.reap, &[(&REAP_BATCH, Type::INT8)])
        .await?;
    rows.iter()
        .map(|r| {
            let status: &str = r.try_get("status")?;
            Ok(ReapedJob {
                id: JobId(r.try_get("id")?),
                state: JobState::parse(status).unwrap_or(JobState::Queued),
                attempts: r.try_get("attempts")?,
            })
        })
        .collect()
}

pub(crate) async fn get<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    id: JobId,
) -> Result<Option<JobRow>, Error> {
    let Some(r) = c.query_typed_opt(&sql.get, &[(&id.0, Type::INT8)]).await? else {
        return Ok(None);
    };
    let status: &str = r.try_get("status")?;
    Ok(Some(JobRow {
        id: JobId(r.try_get("id")?),
        queue: r.try_get("queue")?,
        kind: r.try_get("kind")?,
        payload: r.try_get("payload")?,
        // The CHECK constraint allows only the four states.
        state: JobState::parse(status).unwrap_or(JobState::Failed),
        priority: r.try_get("priority")?,
        run_at: r.try_get::<_, SystemTime>("run_at")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        locked_until: r.try_get("locked_until")?,
        last_error: r.try_get("last_error")?,
        created_at: r.try_get("created_at")?,
        finished_at: r.try_get("finished_at")?,
        schedule: r.try_get("schedule")?,
    }))
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
    pub attempt: i32,
    pub outcome: Outcome,
}

impl Finish {
    /// A successful attempt of a job claimed outside the worker (no queue to wake).
    pub(crate) fn complete(id: JobId, attempt: i32) -> Finish {
        Finish {
            id,
            queue: String::new(),
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
    verdict: impl Fn(&Row, &str) -> Result<Verdict<T>, Error>,
) -> Result<Vec<Verdict<T>>, Error> {
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

/// Writes many outcomes; returns one verdict per element of `batch`, in its order.
pub(crate) async fn finish_many<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    batch: &[Finish],
) -> Result<Vec<Verdict<Written>>, Error> {
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
            "written" => {
                let status: &str = r.try_get("status")?;
                Verdict::Applied(Written {
                    // The CHECK constraint allows only the four states.
                    state: JobState::parse(status).unwrap_or(JobState::Failed),
                    run_at: r.try_get("run_at")?,
                    retry_in_us: r.try_get("retry_in_us")?,
                })
            }
            "busy" => Verdict::Busy,
            _ => Verdict::Lost,
        })
    })
}

/// Marks one job done with [`finish_many`] (a batch of one), for the lab and the benchmark.
/// A busy row (a concurrent claim's `FOR UPDATE` may hold it for a moment while it re-checks
/// the row and skips it) is tried again for up to about 5 s, then counts as not applied.
pub(crate) async fn complete<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    id: JobId,
    attempt: i32,
) -> Result<Transition, Error> {
    let f = Finish::complete(id, attempt);
    let mut wait = std::time::Duration::from_millis(1);
    for _ in 0..20 {
        match finish_many(c, None, sql, std::slice::from_ref(&f))
            .await?
            .first()
        {
            Some(Verdict::Applied(_)) => return Ok(Transition::Applied),
            Some(Verdict::Busy) => {}
            _ => return Ok(Transition::Lost),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(std::time::Duration::from_millis(500));
    }
    Ok(Transition::Lost)
}

/// Renews many leases; returns one verdict per element of `jobs`, in its order.
pub(crate) async fn extend_many<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    jobs: &[(JobId, i32)],
    lease_us: i64,
) -> Result<Vec<Verdict<()>>, Error> {
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

/// Microseconds until the next queued job of `queue` is due, if any is queued.
pub(crate) async fn next_run_at<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    queue: &str,
) -> Result<Option<i64>, Error> {
    c.query_typed_one(&sql.next_run_at, &[(&queue, Type::TEXT)])
        .await?
        .try_get(0)
}

/// Tries the reaper's advisory lock for the current transaction.
pub(crate) async fn reaper_try_lock<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    key: i64,
) -> Result<bool, Error> {
    c.query_typed_one(&sql.reaper_try_lock, &[(&key, Type::INT8)])
        .await?
        .try_get(0)
}

/// Runs one of the admin statements (retry, cancel, delete) over `ids`; returns the ids it
/// changed.
pub(crate) async fn admin<C: GenericClient + Sync>(
    c: &C,
    statement: &str,
    ids: &[i64],
) -> Result<Vec<JobId>, Error> {
    let rows = c
        .query_typed(statement, &[(&ids, Type::INT8_ARRAY)])
        .await?;
    rows.iter().map(|r| Ok(JobId(r.try_get(0)?))).collect()
}

/// The state of each of `ids` that exists.
pub(crate) async fn states<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    ids: &[i64],
) -> Result<Vec<(JobId, JobState)>, Error> {
    let rows = c
        .query_typed(&sql.states, &[(&ids, Type::INT8_ARRAY)])
        .await?;
    rows.iter()
        .map(|r| {
            let s: &str = r.try_get(1)?;
            Ok((
                JobId(r.try_get(0)?),
                JobState::parse(s).unwrap_or(JobState::Failed),
            ))
        })
        .collect()
}
