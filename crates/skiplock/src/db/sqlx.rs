//! The statements a caller's sqlx connection runs (the `sqlx-0_8` feature): enqueueing,
//! the admin actions and migrations, bound for sqlx. Same SQL text as the tokio-postgres
//! path; the [`Store`](super::Store) methods choose between the two.

use sqlx::PgConnection;

use super::Sql;
use crate::job::{EncodedBatch, EncodedJob, JobId};

pub(crate) async fn insert(
    c: &mut PgConnection,
    sql: &Sql,
    j: &EncodedJob,
) -> Result<JobId, sqlx::Error> {
    let id: i64 = sqlx::query_scalar(&sql.insert)
        .bind(&j.queue)
        .bind(&j.kind)
        .bind(&j.payload)
        .bind(j.priority)
        .bind(j.max_attempts)
        .bind(j.run_at_us)
        .bind(j.delay_us)
        .bind(&j.key)
        .bind(&j.sequence)
        .bind(&j.after)
        .fetch_one(c)
        .await?;
    Ok(JobId(id))
}

pub(crate) async fn insert_many(
    c: &mut PgConnection,
    sql: &Sql,
    b: &EncodedBatch,
) -> Result<Vec<JobId>, sqlx::Error> {
    if b.len() == 0 {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = sqlx::query_scalar(&sql.insert_many)
        .bind(&b.queue)
        .bind(&b.kind)
        .bind(&b.payload)
        .bind(&b.priority)
        .bind(&b.max_attempts)
        .bind(&b.run_at_us)
        .bind(&b.delay_us)
        .bind(&b.key)
        .bind(&b.sequence)
        .bind(&b.after)
        .fetch_all(c)
        .await?;
    Ok(ids.into_iter().map(JobId).collect())
}

/// [`super::job::enqueue_workflow`] for sqlx.
pub(crate) async fn enqueue_workflow(
    c: &mut PgConnection,
    sql: &Sql,
    json: &str,
) -> Result<Vec<JobId>, sqlx::Error> {
    let rows: Vec<(i32, i64)> = sqlx::query_as(&sql.enqueue_workflow)
        .bind(json)
        .fetch_all(c)
        .await?;
    Ok(rows.into_iter().map(|(_, id)| JobId(id)).collect())
}

/// [`super::job::complete_tx`] for sqlx.
pub(crate) async fn complete_tx(
    c: &mut PgConnection,
    sql: &Sql,
    id: JobId,
    attempt: i32,
    output: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let row: Option<i64> = sqlx::query_scalar(&sql.complete_tx)
        .bind(id.0)
        .bind(attempt)
        .bind(output)
        .fetch_optional(c)
        .await?;
    Ok(row.is_some())
}

/// [`super::job::admin`] for sqlx.
pub(crate) async fn admin(
    c: &mut PgConnection,
    statement: &str,
    ids: &[i64],
) -> Result<Vec<JobId>, sqlx::Error> {
    let changed: Vec<i64> = sqlx::query_scalar(statement).bind(ids).fetch_all(c).await?;
    Ok(changed.into_iter().map(JobId).collect())
}

/// The status of each of `ids` that exists, as text.
pub(crate) async fn states(
    c: &mut PgConnection,
    sql: &Sql,
    ids: &[i64],
) -> Result<Vec<(JobId, String)>, sqlx::Error> {
    let rows: Vec<(i64, String)> = sqlx::query_as(&sql.states).bind(ids).fetch_all(c).await?;
    Ok(rows.into_iter().map(|(id, s)| (JobId(id), s)).collect())
}

/// Runs `text` (one or more statements, no parameters).
pub(crate) async fn batch(c: &mut PgConnection, text: &str) -> Result<(), sqlx::Error> {
    // Through `Executor::execute`, whose future is a boxed `Send` one: `RawSql::execute`'s
    // cannot be proved `Send` inside a caller's future, and would make every migration's
    // future (the tokio-postgres path's too) not `Send`.
    sqlx::Executor::execute(c, sqlx::raw_sql(text))
        .await
        .map(drop)
}

pub(crate) async fn schema_exists(
    c: &mut PgConnection,
    sql: &Sql,
    schema: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(&sql.schema_exists)
        .bind(schema)
        .fetch_one(c)
        .await
}

pub(crate) async fn schema_version(c: &mut PgConnection, sql: &Sql) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar(&sql.schema_version).fetch_one(c).await
}

pub(crate) async fn schema_lock(
    c: &mut PgConnection,
    sql: &Sql,
    key: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(&sql.schema_lock)
        .bind(key)
        .execute(c)
        .await
        .map(drop)
}

pub(crate) async fn schema_record(
    c: &mut PgConnection,
    sql: &Sql,
    version: i32,
    name: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(&sql.schema_record)
        .bind(version)
        .bind(name)
        .execute(c)
        .await
        .map(drop)
}
