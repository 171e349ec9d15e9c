//! The migration runner's statements.

use tokio_postgres::types::Type;
use tokio_postgres::{Error, GenericClient};

use super::Sql;

pub(crate) async fn lock<C: GenericClient + Sync>(
    tx: &C,
    sql: &Sql,
    key: i64,
) -> Result<(), Error> {
    tx.query_typed(&sql.schema_lock, &[(&key, Type::INT8)])
        .await
        .map(drop)
}

pub(crate) async fn unlimit<C: GenericClient + Sync>(tx: &C, sql: &Sql) -> Result<(), Error> {
    tx.batch_execute(&sql.schema_unlimit).await
}

pub(crate) async fn exists<C: GenericClient + Sync>(
    tx: &C,
    sql: &Sql,
    schema: &str,
) -> Result<bool, Error> {
    tx.query_typed_one(&sql.schema_exists, &[(&schema, Type::TEXT)])
        .await?
        .try_get(0)
}

pub(crate) async fn version<C: GenericClient + Sync>(tx: &C, sql: &Sql) -> Result<i32, Error> {
    tx.query_typed_one(&sql.schema_version, &[])
        .await?
        .try_get(0)
}

pub(crate) async fn record<C: GenericClient + Sync>(
    tx: &C,
    sql: &Sql,
    version: i32,
    name: &str,
) -> Result<(), Error> {
    tx.execute_typed(
        &sql.schema_record,
        &[(&version, Type::INT4), (&name, Type::TEXT)],
    )
    .await
    .map(drop)
}
