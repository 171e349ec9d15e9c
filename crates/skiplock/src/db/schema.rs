//! The migration runner's statements (`schema_*.sql`), and the transaction a migration runs
//! in, on either driver.

use tokio_postgres::types::Type;
use tokio_postgres::{Error as PgError, GenericClient};

use super::{on_conn, Store};
use crate::caller_tx::Conn;
use crate::error::{Error, Result};

const BEGIN: &str = "begin the migration transaction";
const COMMIT: &str = "commit the migration";
const VERSION: &str = "read the schema version";

impl Store {
    /// Opens the migration's transaction on `conn` and lifts the statement and lock
    /// timeouts inside it (`schema_unlimit.sql`).
    pub(crate) async fn schema_begin<'a>(
        &self,
        conn: &'a mut tokio_postgres::Client,
    ) -> Result<tokio_postgres::Transaction<'a>> {
        let tx = conn.transaction().await.map_err(Error::db(BEGIN))?;
        self.schema_unlimit(&tx).await?;
        Ok(tx)
    }

    /// Commits the migration's transaction.
    pub(crate) async fn schema_commit(&self, tx: tokio_postgres::Transaction<'_>) -> Result<()> {
        tx.commit().await.map_err(Error::db(COMMIT))
    }

    /// Opens the migration's transaction on a caller's plain connection (one that is not in
    /// a transaction); [`Store::schema_commit_on`] or [`Store::schema_rollback_on`] ends it.
    pub(crate) async fn schema_begin_on(&self, c: &tokio_postgres::Client) -> Result<()> {
        c.batch_execute("BEGIN").await.map_err(Error::db(BEGIN))
    }

    /// Commits what [`Store::schema_begin_on`] opened.
    pub(crate) async fn schema_commit_on(&self, c: &tokio_postgres::Client) -> Result<()> {
        c.batch_execute("COMMIT").await.map_err(Error::db(COMMIT))
    }

    /// Rolls back what [`Store::schema_begin_on`] opened. Its error is dropped: the error
    /// that matters is the migration's, and a failed ROLLBACK leaves a broken connection the
    /// caller sees on its next use.
    pub(crate) async fn schema_rollback_on(&self, c: &tokio_postgres::Client) {
        let _ = c.batch_execute("ROLLBACK").await;
    }

    /// `schema_unlimit.sql`: lifts the statement and lock timeouts for the migration
    /// transaction.
    pub(crate) async fn schema_unlimit<C: GenericClient + Sync>(&self, tx: &C) -> Result<()> {
        tx.batch_execute(&self.sql.schema_unlimit)
            .await
            .map_err(Error::db(BEGIN))
    }

    /// `schema_exists.sql`: whether the migrations table exists.
    pub(crate) async fn schema_exists(&self, conn: Conn<'_>, schema: &str) -> Result<bool> {
        on_conn!(conn, VERSION,
            |c| exists(c, &self.sql.schema_exists, schema),
            sqlx: super::sqlx::schema_exists(c, &self.sql, schema),
        )
    }

    /// `schema_version.sql`: the highest applied migration.
    pub(crate) async fn schema_version(&self, conn: Conn<'_>) -> Result<i32> {
        on_conn!(conn, VERSION,
            |c| version(c, &self.sql.schema_version),
            sqlx: super::sqlx::schema_version(c, &self.sql),
        )
    }

    /// `schema_lock.sql`: the migration's transaction-scoped advisory lock.
    pub(crate) async fn schema_lock(&self, conn: Conn<'_>, key: i64) -> Result<()> {
        on_conn!(conn, "take the migration lock",
            |c| lock(c, &self.sql.schema_lock, key),
            sqlx: super::sqlx::schema_lock(c, &self.sql, key),
        )
    }

    /// `schema_bootstrap.sql`: creates the schema and its migrations table.
    pub(crate) async fn schema_bootstrap(&self, conn: Conn<'_>) -> Result<()> {
        on_conn!(conn, "create the schema and its migrations table",
            |c| c.batch_execute(&self.sql.schema_bootstrap),
            sqlx: super::sqlx::batch(c, &self.sql.schema_bootstrap),
        )
    }

    /// Applies one migration (`text`: its file rendered for the schema) and records it
    /// (`schema_record.sql`).
    pub(crate) async fn schema_apply(
        &self,
        conn: Conn<'_>,
        (version, name): (i32, &'static str),
        text: &str,
    ) -> Result<()> {
        match conn {
            Conn::TokioClient(c) => self.apply(c, (version, name), text).await,
            Conn::TokioTx(t) => self.apply(t, (version, name), text).await,
            #[cfg(feature = "sqlx-0_8")]
            Conn::Sqlx(c) => {
                const OP: &str = "apply a migration";
                super::sqlx::batch(&mut *c, text)
                    .await
                    .map_err(Error::sqlx(OP))?;
                super::sqlx::schema_record(c, &self.sql, version, name)
                    .await
                    .map_err(Error::sqlx(OP))
            }
        }
    }

    async fn apply<C: GenericClient + Sync>(
        &self,
        c: &C,
        (version, name): (i32, &'static str),
        text: &str,
    ) -> Result<()> {
        let applied = async {
            c.batch_execute(text).await?;
            c.execute_typed(
                &self.sql.schema_record,
                &[(&version, Type::INT4), (&name, Type::TEXT)],
            )
            .await
            .map(drop)
        };
        applied.await.map_err(|source| Error::Migration {
            version,
            name,
            source,
        })
    }

    /// `schema_drop.sql`: drops the schema and everything in it.
    pub(crate) async fn schema_drop<C: GenericClient + Sync>(&self, c: &C) -> Result<()> {
        c.batch_execute(&self.sql.schema_drop)
            .await
            .map_err(Error::db("drop the schema"))
    }
}

/// Opens the migration's transaction on an sqlx connection (a savepoint inside the
/// caller's transaction).
#[cfg(feature = "sqlx-0_8")]
pub(crate) async fn begin_sqlx(
    c: &mut sqlx::PgConnection,
) -> Result<sqlx::Transaction<'_, sqlx::Postgres>> {
    use sqlx::Connection as _;
    c.begin().await.map_err(Error::sqlx(BEGIN))
}

/// Commits what [`begin_sqlx`] opened.
#[cfg(feature = "sqlx-0_8")]
pub(crate) async fn commit_sqlx(tx: sqlx::Transaction<'_, sqlx::Postgres>) -> Result<()> {
    tx.commit().await.map_err(Error::sqlx(COMMIT))
}

async fn exists<C: GenericClient + Sync>(c: &C, sql: &str, schema: &str) -> Result<bool, PgError> {
    c.query_typed_one(sql, &[(&schema, Type::TEXT)])
        .await?
        .try_get(0)
}

async fn version<C: GenericClient + Sync>(c: &C, sql: &str) -> Result<i32, PgError> {
    c.query_typed_one(sql, &[]).await?.try_get(0)
}

async fn lock<C: GenericClient + Sync>(c: &C, sql: &str, key: i64) -> Result<(), PgError> {
    c.query_typed(sql, &[(&key, Type::INT8)]).await.map(drop)
}
