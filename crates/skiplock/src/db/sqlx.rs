//! The insert statements bound for sqlx (the `sqlx-0_8` feature), for enqueueing inside a
//! caller's sqlx transaction. Same SQL text as the tokio-postgres path.

use sqlx::PgConnection;

use super::Sql;
use crate::job::{EncodedBatch, EncodedJob, JobId, JobState};

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
        .fetch_all(c)
        .await?;
    Ok(ids.into_iter().map(JobId).collect())
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

/// [`super::job::states`] for sqlx.
pub(crate) async fn states(
    c: &mut PgConnection,
    sql: &Sql,
    ids: &[i64],
) -> Result<Vec<(JobId, JobState)>, sqlx::Error> {
    let rows: Vec<(i64, String)> = sqlx::query_as(&sql.states).bind(ids).fetch_all(c).await?;
    Ok(rows
        .into_iter()
        .map(|(id, s)| (JobId(id), JobState::parse(&s).unwrap_or(JobState::Failed)))
        .collect())
}
