//! Pruning and maintenance locks.

use tokio_postgres::types::Type;
use tokio_postgres::{Error, GenericClient};

use super::Sql;

/// Deletes (or archives) one batch; returns how many rows it moved.
pub(crate) async fn prune_batch<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    archive: bool,
    retention_us: i64,
    include_failed: bool,
    batch: i64,
) -> Result<i64, Error> {
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

pub(crate) async fn lock_acquire<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    name: &str,
    holder: &str,
    ttl_us: i64,
) -> Result<bool, Error> {
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
) -> Result<(), Error> {
    c.execute_typed(
        &sql.lock_release,
        &[(&name, Type::TEXT), (&holder, Type::TEXT)],
    )
    .await
    .map(drop)
}

/// The jobs table's dead row versions and manual vacuum count, and whether this role may
/// vacuum it.
pub(crate) async fn dead_tuples<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
) -> Result<(i64, i64, bool), Error> {
    let row = c.query_typed_one(&sql.dead_tuples, &[]).await?;
    Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
}

/// VACUUM the jobs table; not in a transaction block (a simple query of one statement).
pub(crate) async fn vacuum<C: GenericClient + Sync>(c: &C, sql: &Sql) -> Result<(), Error> {
    c.batch_execute(&sql.vacuum).await
}
