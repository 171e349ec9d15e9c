//! The unique enqueue's statements (`job_insert_unique.sql`, `job_unique_replace.sql`,
//! `job_unique_lookup.sql`) and the operator's retry (`job_retry.sql`), on either driver.

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use super::{on_conn, Sql, Store};
use crate::caller_tx::Conn;
use crate::error::{Error, Result};
use crate::job::{EncodedBatch, JobId};

impl Store {
    /// `job_retry.sql`: makes the jobs `ids` ready again; returns the ids it changed, or
    /// (having changed nothing) the jobs that would duplicate an active job's unique key,
    /// each with that job.
    pub(crate) async fn job_retry(&self, conn: Conn<'_>, ids: &[i64]) -> Result<Retried> {
        on_conn!(conn, "retry jobs",
            |c| retry(c, &self.sql, ids),
            sqlx: retry_sqlx(c, &self.sql, ids),
        )
    }
}

/// Jobs with uniqueness rules, one array per column, as bound to `job_insert_unique.sql`.
#[derive(Debug, Default)]
pub(crate) struct UniqueBatch {
    pub base: EncodedBatch,
    pub unique_by: Vec<&'static str>,
    pub fields: Vec<Option<String>>,
    pub key: Vec<Option<String>>,
    pub by_queue: Vec<bool>,
    pub period_us: Vec<i64>,
    pub queued_only: Vec<bool>,
}

/// One row of `job_insert_unique.sql`: the element's 1-based position, its key, and the id
/// inserted for it (`None`: not inserted).
#[derive(Debug)]
pub(crate) struct Inserted {
    pub n: usize,
    pub key: String,
    pub id: Option<JobId>,
}

/// Payloads (and run_at) for the queued jobs of some keys, as bound to
/// `job_unique_replace.sql`.
#[derive(Debug, Default)]
pub(crate) struct Replacement {
    pub key: Vec<String>,
    pub payload: Vec<String>,
    pub run_at_us: Vec<Option<i64>>,
    pub delay_us: Vec<i64>,
    pub replace_run_at: Vec<bool>,
}

const OP: &str = "enqueue jobs";

/// The unique enqueue's statements, through a tokio-postgres or an sqlx connection.
pub(crate) trait Link {
    async fn insert_plain(&mut self, sql: &Sql, b: &EncodedBatch) -> Result<Vec<JobId>>;
    async fn insert_unique(&mut self, sql: &Sql, b: &UniqueBatch) -> Result<Vec<Inserted>>;
    async fn replace(&mut self, sql: &Sql, r: &Replacement) -> Result<Vec<(String, JobId)>>;
    async fn lookup(&mut self, sql: &Sql, keys: &[String]) -> Result<Vec<(String, JobId)>>;
}

pub(crate) struct Tokio<'a, C>(pub &'a C);

fn position(n: i64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl<C: GenericClient + Sync> Link for Tokio<'_, C> {
    async fn insert_plain(&mut self, sql: &Sql, b: &EncodedBatch) -> Result<Vec<JobId>> {
        super::job::insert_many(self.0, sql, b)
            .await
            .map_err(Error::db(OP))
    }

    async fn insert_unique(&mut self, sql: &Sql, b: &UniqueBatch) -> Result<Vec<Inserted>> {
        let a = &b.base;
        let rows = self
            .0
            .query_typed(
                &sql.insert_unique,
                &[
                    (&a.queue, Type::TEXT_ARRAY),
                    (&a.kind, Type::TEXT_ARRAY),
                    (&a.payload, Type::TEXT_ARRAY),
                    (&a.priority, Type::INT2_ARRAY),
                    (&a.max_attempts, Type::INT4_ARRAY),
                    (&a.run_at_us, Type::INT8_ARRAY),
                    (&a.delay_us, Type::INT8_ARRAY),
                    (&b.unique_by, Type::TEXT_ARRAY),
                    (&b.fields, Type::TEXT_ARRAY),
                    (&b.key, Type::TEXT_ARRAY),
                    (&b.by_queue, Type::BOOL_ARRAY),
                    (&b.period_us, Type::INT8_ARRAY),
                    (&b.queued_only, Type::BOOL_ARRAY),
                    (&a.key, Type::TEXT_ARRAY),
                    (&a.sequence, Type::TEXT_ARRAY),
                ],
            )
            .await
            .map_err(Error::db(OP))?;
        rows.iter()
            .map(|r| {
                Ok(Inserted {
                    n: position(r.try_get("n")?),
                    key: r.try_get("ukey")?,
                    id: r.try_get::<_, Option<i64>>("id")?.map(JobId),
                })
            })
            .collect::<std::result::Result<_, tokio_postgres::Error>>()
            .map_err(Error::db(OP))
    }

    async fn replace(&mut self, sql: &Sql, r: &Replacement) -> Result<Vec<(String, JobId)>> {
        let rows = self
            .0
            .query_typed(
                &sql.unique_replace,
                &[
                    (&r.key, Type::TEXT_ARRAY),
                    (&r.payload, Type::TEXT_ARRAY),
                    (&r.run_at_us, Type::INT8_ARRAY),
                    (&r.delay_us, Type::INT8_ARRAY),
                    (&r.replace_run_at, Type::BOOL_ARRAY),
                ],
            )
            .await
            .map_err(Error::db(OP))?;
        key_ids(&rows)
    }

    async fn lookup(&mut self, sql: &Sql, keys: &[String]) -> Result<Vec<(String, JobId)>> {
        let rows = self
            .0
            .query_typed(&sql.unique_lookup, &[(&keys, Type::TEXT_ARRAY)])
            .await
            .map_err(Error::db(OP))?;
        key_ids(&rows)
    }
}

fn key_ids(rows: &[tokio_postgres::Row]) -> Result<Vec<(String, JobId)>> {
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, JobId(r.try_get(1)?))))
        .collect::<std::result::Result<_, tokio_postgres::Error>>()
        .map_err(Error::db(OP))
}

/// What `job_retry.sql` did: the ids it moved, or (nothing moved) each job that would have
/// duplicated an active job's unique key, with that job's id.
pub(crate) type Retried = (Vec<JobId>, Vec<(JobId, JobId)>);

fn split_retried(rows: impl IntoIterator<Item = (i64, Option<i64>)>) -> Retried {
    let mut moved = Vec::new();
    let mut clashes = Vec::new();
    for (id, duplicate) in rows {
        match duplicate {
            None => moved.push(JobId(id)),
            Some(d) => clashes.push((JobId(id), JobId(d))),
        }
    }
    clashes.sort_unstable();
    (moved, clashes)
}

/// Runs `job_retry.sql` over `ids`.
pub(crate) async fn retry<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    ids: &[i64],
) -> std::result::Result<Retried, tokio_postgres::Error> {
    let rows = c
        .query_typed(&sql.retry, &[(&ids, Type::INT8_ARRAY)])
        .await?;
    let pairs = rows
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<std::result::Result<Vec<_>, tokio_postgres::Error>>()?;
    Ok(split_retried(pairs))
}

/// Whether `e` is the unique index of migration 6 refusing a second active job of a key.
pub(crate) fn is_unique_clash(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        *d.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && d.constraint() == Some("jobs_unique_idx")
    })
}

#[cfg(feature = "sqlx-0_8")]
pub(crate) use self::sqlx_link::{retry_sqlx, Sqlx};

#[cfg(feature = "sqlx-0_8")]
mod sqlx_link {
    use sqlx::PgConnection;

    use super::{split_retried, Inserted, Link, Replacement, Retried, UniqueBatch, OP};
    use crate::db::Sql;
    use crate::error::{Error, Result};
    use crate::job::{EncodedBatch, JobId};

    pub(crate) struct Sqlx<'a>(pub &'a mut PgConnection);

    fn wrap(source: sqlx::Error) -> Error {
        Error::Sqlx { op: OP, source }
    }

    fn key_ids(rows: Vec<(String, i64)>) -> Vec<(String, JobId)> {
        rows.into_iter().map(|(k, id)| (k, JobId(id))).collect()
    }

    impl Link for Sqlx<'_> {
        async fn insert_plain(&mut self, sql: &Sql, b: &EncodedBatch) -> Result<Vec<JobId>> {
            crate::db::sqlx::insert_many(self.0, sql, b)
                .await
                .map_err(wrap)
        }

        async fn insert_unique(&mut self, sql: &Sql, b: &UniqueBatch) -> Result<Vec<Inserted>> {
            let a = &b.base;
            let rows: Vec<(i64, String, Option<i64>)> = sqlx::query_as(&sql.insert_unique)
                .bind(&a.queue)
                .bind(&a.kind)
                .bind(&a.payload)
                .bind(&a.priority)
                .bind(&a.max_attempts)
                .bind(&a.run_at_us)
                .bind(&a.delay_us)
                .bind(&b.unique_by)
                .bind(&b.fields)
                .bind(&b.key)
                .bind(&b.by_queue)
                .bind(&b.period_us)
                .bind(&b.queued_only)
                .bind(&a.key)
                .bind(&a.sequence)
                .fetch_all(&mut *self.0)
                .await
                .map_err(wrap)?;
            Ok(rows
                .into_iter()
                .map(|(n, key, id)| Inserted {
                    n: super::position(n),
                    key,
                    id: id.map(JobId),
                })
                .collect())
        }

        async fn replace(&mut self, sql: &Sql, r: &Replacement) -> Result<Vec<(String, JobId)>> {
            let rows: Vec<(String, i64)> = sqlx::query_as(&sql.unique_replace)
                .bind(&r.key)
                .bind(&r.payload)
                .bind(&r.run_at_us)
                .bind(&r.delay_us)
                .bind(&r.replace_run_at)
                .fetch_all(&mut *self.0)
                .await
                .map_err(wrap)?;
            Ok(key_ids(rows))
        }

        async fn lookup(&mut self, sql: &Sql, keys: &[String]) -> Result<Vec<(String, JobId)>> {
            let rows: Vec<(String, i64)> = sqlx::query_as(&sql.unique_lookup)
                .bind(keys)
                .fetch_all(&mut *self.0)
                .await
                .map_err(wrap)?;
            Ok(key_ids(rows))
        }
    }

    /// [`super::retry`] for sqlx.
    pub(crate) async fn retry_sqlx(
        c: &mut PgConnection,
        sql: &Sql,
        ids: &[i64],
    ) -> std::result::Result<Retried, sqlx::Error> {
        let rows: Vec<(i64, Option<i64>)> =
            sqlx::query_as(&sql.retry).bind(ids).fetch_all(c).await?;
        Ok(split_retried(rows))
    }
}
