//! The lab's statements: the wrong claims the article warns about, and its result table.

use tokio_postgres::types::Type;
use tokio_postgres::{Error, GenericClient};

use super::Sql;

/// Runs one of the lab's claim statements; returns `(id, attempts)` of each job taken.
pub(crate) async fn claim_with<C: GenericClient + Sync>(
    c: &C,
    statement: &str,
    queue: &str,
    limit: i64,
) -> Result<Vec<(i64, i32)>, Error> {
    let rows = c
        .query_typed(statement, &[(&queue, Type::TEXT), (&limit, Type::INT8)])
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// `(status, count, max attempts)` for one queue.
pub(crate) async fn status<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    queue: &str,
) -> Result<Vec<(String, i64, i32)>, Error> {
    let rows = c
        .query_typed(&sql.lab_status, &[(&queue, Type::TEXT)])
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect()
}
