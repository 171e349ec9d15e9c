//! Statements about the server and the connection rather than the queue: the server's
//! version, the LISTEN self-test, and the reaper's transaction.

use tokio_postgres::types::Type;

use super::Store;
use crate::error::{Error, Result};

impl Store {
    /// `server_version.sql`: the server's version string.
    pub(crate) async fn server_version(&self, c: &tokio_postgres::Client) -> Result<String> {
        c.query_one(&self.sql.server_version, &[])
            .await
            .and_then(|r| r.try_get(0))
            .map_err(Error::db("read the server version"))
    }

    /// `listen_probe.sql`: sends the LISTEN connection's self-test notification `token` on
    /// `channel`.
    pub(crate) async fn listen_probe(
        &self,
        c: &tokio_postgres::Client,
        channel: &str,
        token: &str,
    ) -> Result<()> {
        c.query_typed(
            &self.sql.listen_probe,
            &[(&channel, Type::TEXT), (&token, Type::TEXT)],
        )
        .await
        .map(drop)
        .map_err(Error::db("send the LISTEN self-test"))
    }

    /// `queue_wait.sql`: from the LISTEN connection `c`, tries the stripes of `queue` not in
    /// `held`; the stripes taken now, and whether every stripe is held after this.
    pub(crate) async fn queue_wait(
        &self,
        c: &tokio_postgres::Client,
        queue: &str,
        held: &[i32],
    ) -> Result<(Vec<i32>, bool)> {
        const OP: &str = "wait on a queue";
        let rows = c
            .query_typed(
                &self.sql.queue_wait,
                &[(&queue, Type::TEXT), (&held, Type::INT4_ARRAY)],
            )
            .await
            .map_err(Error::db(OP))?;
        let mut taken = Vec::with_capacity(rows.len());
        let mut all = true;
        for r in &rows {
            let stripe: i32 = r.try_get(0).map_err(Error::db(OP))?;
            if r.try_get::<_, bool>(1).map_err(Error::db(OP))? {
                taken.push(stripe);
            } else {
                all = false;
            }
        }
        Ok((taken, all))
    }

    /// `queue_unwait.sql`: from the LISTEN connection `c`, releases the stripes of `queue`
    /// in `held`.
    pub(crate) async fn queue_unwait(
        &self,
        c: &tokio_postgres::Client,
        queue: &str,
        held: &[i32],
    ) -> Result<()> {
        c.query_typed(
            &self.sql.queue_unwait,
            &[(&queue, Type::TEXT), (&held, Type::INT4_ARRAY)],
        )
        .await
        .map(drop)
        .map_err(Error::db("stop waiting on a queue"))
    }

    /// Opens a transaction on a pooled connection, for `op`.
    pub(crate) async fn begin<'a>(
        &self,
        conn: &'a mut deadpool_postgres::Object,
        op: &'static str,
    ) -> Result<deadpool_postgres::Transaction<'a>> {
        conn.transaction().await.map_err(Error::db(op))
    }

    /// Commits a transaction [`Store::begin`] opened, for `op`.
    pub(crate) async fn commit(
        &self,
        tx: deadpool_postgres::Transaction<'_>,
        op: &'static str,
    ) -> Result<()> {
        tx.commit().await.map_err(Error::db(op))
    }
}
