//! The statements of [`crate::testing`] (the `testing` feature): `job_find.sql` through the
//! caller's connection or transaction, and `job_claim_by_id.sql` on a pooled connection.

use deadpool_postgres::Object;
use tokio_postgres::types::Type;
use tokio_postgres::{Error as PgError, GenericClient, Row};

use super::job::claimed_job;
use super::{job_state, on_conn, Sql, Store};
use crate::caller_tx::Conn;
use crate::error::{Error, Result};
use crate::job::{ClaimedJob, JobId, JobRow};
use crate::queue::state::time;

/// The filters of `job_find.sql`; `None` skips one.
#[derive(Debug, Clone)]
pub(crate) struct Find<'a> {
    pub kind: Option<&'a str>,
    pub queue: Option<&'a str>,
    /// A JSON text the payload must contain (`@>`).
    pub payload: Option<String>,
    pub states: Vec<&'static str>,
    pub limit: i64,
}

/// One row of `job_find.sql`, its status and times still raw.
struct RawRow {
    id: i64,
    queue: String,
    kind: String,
    payload: String,
    status: String,
    priority: i16,
    run_at_us: i64,
    attempts: i32,
    max_attempts: i32,
    locked_until_us: Option<i64>,
    last_error: Option<String>,
    created_at_us: i64,
    finished_at_us: Option<i64>,
    attempted_at_us: Option<i64>,
    schedule: Option<String>,
    key: Option<String>,
    sequence: Option<String>,
    held: Option<String>,
    output: Option<String>,
    after: Option<Vec<i64>>,
    waiting: Option<i32>,
    unique_key: Option<String>,
    unique_queued_only: bool,
    has_children: Option<bool>,
    errors: Option<String>,
}

impl Store {
    /// `job_find.sql`: the jobs matching `f`, oldest first.
    pub(crate) async fn job_find(&self, conn: Conn<'_>, f: &Find<'_>) -> Result<Vec<JobRow>> {
        const OP: &str = "find jobs";
        let rows = on_conn!(conn, OP,
            |c| find(c, &self.sql, f),
            sqlx: find_sqlx(c, &self.sql, f),
        )?;
        rows.into_iter()
            .map(|r| {
                let time_of = |us: i64| {
                    time(Some(us)).ok_or_else(|| Error::Decode {
                        op: OP,
                        detail: format!("job {}: a time out of range ({us} µs)", r.id),
                    })
                };
                Ok(JobRow {
                    id: JobId(r.id),
                    state: job_state(OP, &r.status)?,
                    run_at: time_of(r.run_at_us)?,
                    created_at: time_of(r.created_at_us)?,
                    locked_until: r.locked_until_us.map(time_of).transpose()?,
                    finished_at: r.finished_at_us.map(time_of).transpose()?,
                    attempted_at: r.attempted_at_us.map(time_of).transpose()?,
                    queue: r.queue,
                    kind: r.kind,
                    payload: r.payload,
                    priority: r.priority,
                    attempts: r.attempts,
                    max_attempts: r.max_attempts,
                    last_error: r.last_error,
                    schedule: r.schedule,
                    key: r.key,
                    sequence: r.sequence,
                    held: r.held,
                    output: r.output,
                    after: r.after.unwrap_or_default().into_iter().map(JobId).collect(),
                    waiting: r.waiting,
                    unique_key: r.unique_key,
                    unique_queued_only: r.unique_queued_only,
                    has_children: r.has_children,
                    errors: crate::job::AttemptError::parse_history(r.errors.as_deref()),
                })
            })
            .collect()
    }

    /// `job_claim_by_id.sql` on a pooled connection: claims job `id` with a lease of
    /// `lease_us`, or `None` if it is not queued with an attempt left (or another session
    /// holds its row).
    pub(crate) async fn job_claim_by_id(
        &self,
        conn: &Object,
        id: JobId,
        lease_us: i64,
    ) -> Result<Option<ClaimedJob>> {
        async {
            let row = conn
                .query_typed_opt(
                    &self.sql.claim_by_id,
                    &[(&id.0, Type::INT8), (&lease_us, Type::INT8)],
                )
                .await?;
            row.as_ref().map(claimed_job).transpose()
        }
        .await
        .map_err(Error::db("claim a job"))
    }
}

async fn find<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    f: &Find<'_>,
) -> Result<Vec<RawRow>, PgError> {
    let rows = c
        .query_typed(
            &sql.find,
            &[
                (&f.kind, Type::TEXT),
                (&f.queue, Type::TEXT),
                (&f.payload, Type::TEXT),
                (&f.states, Type::TEXT_ARRAY),
                (&f.limit, Type::INT8),
            ],
        )
        .await?;
    rows.iter().map(raw_row).collect()
}

/// A found row, from either driver's row type (both read a column by name with `try_get`).
macro_rules! raw_row {
    ($r:expr) => {{
        let r = $r;
        RawRow {
            id: r.try_get("id")?,
            queue: r.try_get("queue")?,
            kind: r.try_get("kind")?,
            payload: r.try_get("payload")?,
            status: r.try_get("status")?,
            priority: r.try_get("priority")?,
            run_at_us: r.try_get("run_at_us")?,
            attempts: r.try_get("attempts")?,
            max_attempts: r.try_get("max_attempts")?,
            locked_until_us: r.try_get("locked_until_us")?,
            last_error: r.try_get("last_error")?,
            created_at_us: r.try_get("created_at_us")?,
            finished_at_us: r.try_get("finished_at_us")?,
            attempted_at_us: r.try_get("attempted_at_us")?,
            schedule: r.try_get("schedule")?,
            key: r.try_get("key")?,
            sequence: r.try_get("sequence")?,
            held: r.try_get("held")?,
            output: r.try_get("output")?,
            after: r.try_get("after")?,
            waiting: r.try_get("waiting")?,
            unique_key: r.try_get("unique_key")?,
            unique_queued_only: r.try_get("unique_queued_only")?,
            has_children: r.try_get("has_children")?,
            errors: r.try_get("errors")?,
        }
    }};
}

fn raw_row(r: &Row) -> Result<RawRow, PgError> {
    Ok(raw_row!(r))
}

#[cfg(feature = "sqlx-0_8")]
async fn find_sqlx(
    c: &mut sqlx::PgConnection,
    sql: &Sql,
    f: &Find<'_>,
) -> Result<Vec<RawRow>, sqlx::Error> {
    use sqlx::Row as _;
    let rows = sqlx::query(&sql.find)
        .bind(f.kind)
        .bind(f.queue)
        .bind(f.payload.as_deref())
        .bind(&f.states)
        .bind(f.limit)
        .fetch_all(c)
        .await?;
    rows.iter().map(|r| Ok(raw_row!(r))).collect()
}
