//! Pruning, vacuum and maintenance locks.

use tokio_postgres::types::Type;
use tokio_postgres::{Error as PgError, GenericClient};

use super::{Sql, Store};

use crate::error::{Error, Result};

impl Store {
    /// `job_prune.sql`: deletes one batch of jobs finished more than `retention_us` ago
    /// (failed ones too if `include_failed`); returns how many it deleted.
    pub(crate) async fn job_prune<C: GenericClient + Sync>(
        &self,
        c: &C,
        retention_us: i64,
        include_failed: bool,
        batch: i64,
    ) -> Result<i64> {
        prune_batch(c, &self.sql, false, retention_us, include_failed, batch)
            .await
            .map_err(Error::db("prune finished jobs"))
    }

    /// `job_archive.sql`: moves one batch of jobs finished more than `retention_us` ago to
    /// `jobs_archive`; returns how many it moved.
    pub(crate) async fn job_archive<C: GenericClient + Sync>(
        &self,
        c: &C,
        retention_us: i64,
        include_failed: bool,
        batch: i64,
    ) -> Result<i64> {
        prune_batch(c, &self.sql, true, retention_us, include_failed, batch)
            .await
            .map_err(Error::db("archive finished jobs"))
    }

    /// `lock_acquire.sql`: takes or renews the maintenance lock `name` for `holder`;
    /// whether it is now `holder`'s.
    pub(crate) async fn lock_acquire<C: GenericClient + Sync>(
        &self,
        c: &C,
        name: &str,
        holder: &str,
        ttl_us: i64,
    ) -> Result<bool> {
        lock_acquire(c, &self.sql, name, holder, ttl_us)
            .await
            .map_err(Error::db("take a maintenance lock"))
    }

    /// `lock_release.sql`: releases the maintenance lock `name` if `holder` holds it.
    pub(crate) async fn lock_release<C: GenericClient + Sync>(
        &self,
        c: &C,
        name: &str,
        holder: &str,
    ) -> Result<()> {
        lock_release(c, &self.sql, name, holder)
            .await
            .map_err(Error::db("release a maintenance lock"))
    }

    /// `job_dead_tuples.sql`: the jobs table's dead row versions and manual vacuum count,
    /// and whether this role may vacuum it.
    pub(crate) async fn job_dead_tuples<C: GenericClient + Sync>(
        &self,
        c: &C,
    ) -> Result<(i64, i64, bool)> {
        async {
            let row = c.query_typed_one(&self.sql.dead_tuples, &[]).await?;
            Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
        }
        .await
        .map_err(Error::db("read the jobs table's dead tuples"))
    }

    /// `job_vacuum_give_way.sql`: cancels the vacuum service's VACUUM if a session waits for
    /// a lock on the jobs table that it holds; whether one was cancelled.
    pub(crate) async fn job_vacuum_give_way<C: GenericClient + Sync>(&self, c: &C) -> Result<bool> {
        c.query_typed(&self.sql.vacuum_give_way, &[(&self.sql.vacuum, Type::TEXT)])
            .await
            .map(|rows| !rows.is_empty())
            .map_err(Error::db("look for sessions waiting behind the VACUUM"))
    }

    /// `job_vacuum.sql`: vacuums the jobs table; not in a transaction block (a simple
    /// query of one statement).
    pub(crate) async fn job_vacuum<C: GenericClient + Sync>(&self, c: &C) -> Result<()> {
        c.batch_execute(&self.sql.vacuum)
            .await
            .map_err(Error::db("vacuum the jobs table"))
    }
}

/// Deletes (or archives) one batch; returns how many rows it moved. [`Store::job_prune`]
/// and [`Store::job_archive`] run it.
async fn prune_batch<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    archive: bool,
    retention_us: i64,
    include_failed: bool,
    batch: i64,
) -> Result<i64, PgError> {
    let statement = if archive { &sql.archive } else { &sql.prune };
    c.query_typed_one(
        statement,
        &[
            (&retention_us, Type::INT8),
            (&include_failed, Type::BOOL),
            (&batch, Type::INT8),
        ],
    )
    .await?
    .try_get(0)
}

/// [`Store::lock_acquire`]'s statement, also called directly by `Client::prune` and
/// `Client::try_maintenance_lock`.
pub(crate) async fn lock_acquire<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    name: &str,
    holder: &str,
    ttl_us: i64,
) -> Result<bool, PgError> {
    Ok(c.query_typed_opt(
        &sql.lock_acquire,
        &[
            (&name, Type::TEXT),
            (&holder, Type::TEXT),
            (&ttl_us, Type::INT8),
        ],
    )
    .await?
    .is_some())
}

pub(crate) async fn lock_release<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    name: &str,
    holder: &str,
) -> Result<(), PgError> {
    c.execute_typed(
        &sql.lock_release,
        &[(&name, Type::TEXT), (&holder, Type::TEXT)],
    )
    .await
    .map(drop)
}
