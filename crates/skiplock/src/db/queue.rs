//! The queue pause statements, bound and decoded for tokio-postgres and, with the `sqlx-0_8`
//! feature, for sqlx (same SQL text). Times travel as microseconds since the epoch, which
//! both drivers read without a date-time feature.

use tokio_postgres::types::Type;
use tokio_postgres::{Error, GenericClient, Row};

use super::Sql;
use crate::queue::QueueState;

/// What `queue_pause.sql` returns.
pub(crate) struct PauseRow {
    pub paused_at_us: Option<i64>,
    pub paused_by: Option<String>,
    pub changed: bool,
}

pub(crate) async fn pause<C: GenericClient + Sync>(
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
pub(crate) async fn resume<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    queue: &str,
) -> Result<bool, Error> {
    c.query_typed_one(&sql.queue_resume, &[(&queue, Type::TEXT)])
        .await?
        .try_get("changed")
}

pub(crate) async fn list<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
) -> Result<Vec<QueueState>, Error> {
    let rows = c.query_typed(&sql.queue_list, &[]).await?;
    rows.iter().map(state).collect()
}

fn state(r: &Row) -> Result<QueueState, Error> {
    Ok(QueueState {
        queue: r.try_get("name")?,
        paused: r.try_get("paused")?,
        paused_at: crate::queue::time(r.try_get("paused_at_us")?),
        paused_by: r.try_get("paused_by")?,
        updated_at: crate::queue::time(r.try_get("updated_at_us")?),
        queued: r.try_get("queued")?,
        ready: r.try_get("ready")?,
        running: r.try_get("running")?,
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
