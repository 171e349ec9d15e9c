//! The health report's statements.

use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::{Error as PgError, GenericClient, Row};

use super::{Sql, Store};
use crate::health::report::{Blocker, QueueHealth, TableHealth};

use crate::error::{Error, Result};

/// The most sessions a health read lists (oldest first): enough to see who holds the
/// horizon back, bounded on a server with thousands of sessions.
pub(crate) const MAX_BLOCKERS: i64 = 100;

impl Store {
    /// `health_queues.sql`: per queue and state, counts and the oldest ready job's age.
    pub(crate) async fn health_queues<C: GenericClient + Sync>(
        &self,
        c: &C,
    ) -> Result<Vec<QueueHealth>> {
        queues(c, &self.sql)
            .await
            .map_err(Error::db("read the queues' health"))
    }

    /// `health_table.sql`: the jobs table's tuples, vacuums and size (`None` if the
    /// statistics views do not list it yet).
    pub(crate) async fn health_table<C: GenericClient + Sync>(
        &self,
        c: &C,
        schema: &str,
    ) -> Result<Option<TableHealth>> {
        table(c, &self.sql, schema)
            .await
            .map_err(Error::db("read the jobs table's health"))
    }

    /// `health_blockers.sql`: sessions holding back vacuum's horizon, the oldest
    /// [`MAX_BLOCKERS`].
    pub(crate) async fn health_blockers<C: GenericClient + Sync>(
        &self,
        c: &C,
        older_than_us: i64,
    ) -> Result<Vec<Blocker>> {
        blockers(c, &self.sql, older_than_us, MAX_BLOCKERS)
            .await
            .map_err(Error::db("read the sessions holding back vacuum"))
    }
}

async fn queues<C: GenericClient + Sync>(c: &C, sql: &Sql) -> Result<Vec<QueueHealth>, PgError> {
    let rows = c.query_typed(&sql.health_queues, &[]).await?;
    rows.iter().map(queue_health).collect()
}

/// One row of `health_queues.sql` as a [`QueueHealth`].
pub(super) fn queue_health(r: &Row) -> Result<QueueHealth, PgError> {
    Ok(QueueHealth {
        queue: r.try_get("queue")?,
        queued: r.try_get("queued")?,
        ready: r.try_get("ready")?,
        running: r.try_get("running")?,
        done: r.try_get("done")?,
        failed: r.try_get("failed")?,
        oldest_ready_age_s: r.try_get("oldest_ready_age_s")?,
        finished_last_minute: r.try_get("finished_last_minute")?,
        unserved: r.try_get("unserved")?,
        paused: r.try_get("paused")?,
    })
}

async fn table<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    schema: &str,
) -> Result<Option<TableHealth>, PgError> {
    let Some(r) = c
        .query_typed_opt(&sql.health_table, &[(&schema, Type::TEXT)])
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(TableHealth {
        n_live_tup: r.try_get("n_live_tup")?,
        n_dead_tup: r.try_get("n_dead_tup")?,
        last_vacuum: r.try_get::<_, Option<SystemTime>>("last_vacuum")?,
        last_autovacuum: r.try_get::<_, Option<SystemTime>>("last_autovacuum")?,
        total_bytes: r.try_get("total_bytes")?,
    }))
}

async fn blockers<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    older_than_us: i64,
    limit: i64,
) -> Result<Vec<Blocker>, PgError> {
    let rows = c
        .query_typed(
            &sql.health_blockers,
            &[(&older_than_us, Type::INT8), (&limit, Type::INT8)],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Blocker {
                pid: r.try_get("pid")?,
                user: r.try_get("usename")?,
                application_name: r.try_get("application_name")?,
                client: r.try_get("client")?,
                state: r.try_get("state")?,
                xmin_age: r.try_get::<_, Option<i64>>("xmin_age")?.unwrap_or(0),
                transaction_age_s: r.try_get("xact_age_s")?,
                state_age_s: r.try_get::<_, Option<f64>>("state_age_s")?.unwrap_or(0.0),
                query: r.try_get("query")?,
            })
        })
        .collect()
}
