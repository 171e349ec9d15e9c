//! The queue pause statements, bound and decoded for tokio-postgres and, with the `sqlx-0_8`
//! feature, for sqlx (same SQL text). Times travel as microseconds since the epoch, which
//! both drivers read without a date-time feature.

use tokio_postgres::types::Type;
use tokio_postgres::{Error, GenericClient, Row};

use super::{on_conn, Sql, Store};
use crate::caller_tx::Conn;
use crate::queue::state::{time, QueueState};

impl Store {
    /// `queue_pause.sql`: pauses `queue` (for every worker), through the caller's connection.
    pub(crate) async fn queue_pause(
        &self,
        conn: Conn<'_>,
        queue: &str,
        by: Option<&str>,
    ) -> crate::error::Result<PauseRow> {
        on_conn!(conn, "pause a queue",
            |c| pause(c, &self.sql, queue, by),
            sqlx: sqlx::pause(c, &self.sql, queue, by),
        )
    }

    /// `queue_resume.sql`: resumes `queue`; whether it was paused.
    pub(crate) async fn queue_resume(
        &self,
        conn: Conn<'_>,
        queue: &str,
    ) -> crate::error::Result<bool> {
        on_conn!(conn, "resume a queue",
            |c| resume(c, &self.sql, queue),
            sqlx: sqlx::resume(c, &self.sql, queue),
        )
    }

    /// `queue_limit.sql`: sets `queue`'s limits (checked by the caller).
    pub(crate) async fn queue_limit<C: GenericClient + Sync>(
        &self,
        c: &C,
        queue: &str,
        l: &crate::queue::limits::EncodedLimits,
        by: Option<&str>,
    ) -> crate::error::Result<()> {
        c.query_typed_one(
            &self.sql.queue_limit,
            &[
                (&queue, Type::TEXT),
                (&l.concurrency, Type::INT4),
                (&l.per_key, Type::INT4),
                (&l.rate_limit, Type::INT4),
                (&l.rate_period_us, Type::INT8),
                (&by, Type::TEXT),
            ],
        )
        .await
        .map(|_| ())
        .map_err(crate::error::Error::db("set a queue's limits"))
    }

    /// `queue_known.sql`: whether a `queues` row or a queued or running job names `queue`.
    pub(crate) async fn queue_known<C: GenericClient + Sync>(
        &self,
        c: &C,
        queue: &str,
    ) -> crate::error::Result<bool> {
        known(c, &self.sql, queue)
            .await
            .map_err(crate::error::Error::db("look the queue up"))
    }

    /// `queue_flags.sql`: whether `queue` is paused, and its limit bound (`'slots'`,
    /// `'rate'`, or none).
    pub(crate) async fn queue_flags<C: GenericClient + Sync>(
        &self,
        c: &C,
        queue: &str,
    ) -> crate::error::Result<(bool, Option<String>)> {
        async {
            let row = c
                .query_typed_one(&self.sql.queue_flags, &[(&queue, Type::TEXT)])
                .await?;
            Ok::<_, tokio_postgres::Error>((row.try_get("paused")?, row.try_get("bound")?))
        }
        .await
        .map_err(crate::error::Error::db("read the queue's pause"))
    }

    /// `queue_list.sql`: every queue's pause and its queued, ready and running jobs.
    pub(crate) async fn queue_list<C: GenericClient + Sync>(
        &self,
        c: &C,
    ) -> crate::error::Result<Vec<QueueState>> {
        list(c, &self.sql)
            .await
            .map_err(crate::error::Error::db("list the queues"))
    }
}

/// What `queue_pause.sql` returns.
pub(crate) struct PauseRow {
    pub paused_at_us: Option<i64>,
    pub paused_by: Option<String>,
    pub changed: bool,
}

async fn pause<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    queue: &str,
    by: Option<&str>,
) -> Result<PauseRow, Error> {
    let r = c
        .query_typed_one(&sql.queue_pause, &[(&queue, Type::TEXT), (&by, Type::TEXT)])
        .await?;
    Ok(PauseRow {
        paused_at_us: r.try_get("paused_at_us")?,
        paused_by: r.try_get("paused_by")?,
        changed: r.try_get("changed")?,
    })
}

/// Whether the queue was paused.
async fn resume<C: GenericClient + Sync>(c: &C, sql: &Sql, queue: &str) -> Result<bool, Error> {
    c.query_typed_one(&sql.queue_resume, &[(&queue, Type::TEXT)])
        .await?
        .try_get("changed")
}

async fn known<C: GenericClient + Sync>(c: &C, sql: &Sql, queue: &str) -> Result<bool, Error> {
    c.query_typed_one(&sql.queue_known, &[(&queue, Type::TEXT)])
        .await?
        .try_get("known")
}

async fn list<C: GenericClient + Sync>(c: &C, sql: &Sql) -> Result<Vec<QueueState>, Error> {
    let rows = c.query_typed(&sql.queue_list, &[]).await?;
    rows.iter().map(state).collect()
}

fn state(r: &Row) -> Result<QueueState, Error> {
    Ok(QueueState {
        queue: r.try_get("name")?,
        paused: r.try_get("paused")?,
        paused_at: time(r.try_get("paused_at_us")?),
        paused_by: r.try_get("paused_by")?,
        updated_at: time(r.try_get("updated_at_us")?),
        queued: r.try_get("queued")?,
        ready: r.try_get("ready")?,
        held: r.try_get("held")?,
        running: r.try_get("running")?,
        limits: crate::QueueLimits::decode(
            r.try_get("concurrency")?,
            r.try_get("per_key")?,
            r.try_get("rate_limit")?,
            r.try_get("rate_period_us")?,
        ),
        bound: r.try_get("bound")?,
        limits_by: r.try_get("limits_by")?,
    })
}

#[cfg(feature = "sqlx-0_8")]
pub(crate) mod sqlx {
    use sqlx::{PgConnection, Row as _};

    use super::{PauseRow, Sql};

    pub(crate) async fn pause(
        c: &mut PgConnection,
        sql: &Sql,
        queue: &str,
        by: Option<&str>,
    ) -> Result<PauseRow, sqlx::Error> {
        let r = sqlx::query(&sql.queue_pause)
            .bind(queue)
            .bind(by)
            .fetch_one(c)
            .await?;
        Ok(PauseRow {
            paused_at_us: r.try_get("paused_at_us")?,
            paused_by: r.try_get("paused_by")?,
            changed: r.try_get("changed")?,
        })
    }

    pub(crate) async fn resume(
        c: &mut PgConnection,
        sql: &Sql,
        queue: &str,
    ) -> Result<bool, sqlx::Error> {
        let r = sqlx::query(&sql.queue_resume)
            .bind(queue)
            .fetch_one(c)
            .await?;
        r.try_get("changed")
    }
}
