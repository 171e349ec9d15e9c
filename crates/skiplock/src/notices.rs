//! A connection of the client's own making, outside the pool, whose notices the caller reads.

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio_postgres::error::DbError;
use tokio_postgres::AsyncMessage;

use crate::client::Client;
use crate::error::{Error, Result};

impl Client {
    /// A connection outside the pool, opened as the pool opens its own (the URL's TLS
    /// settings; no `options` startup parameter where a pooler refuses it), its connection
    /// task spawned on the current tokio runtime. The server's notices on it (`RAISE NOTICE`,
    /// the report of `VACUUM (VERBOSE)`, ...) arrive on the receiver, in order; dropping the
    /// receiver drops them, and the connection goes on.
    ///
    /// Refused ([`Error::Invalid`]) for a client built from a pool ([`Client::from_pool`]),
    /// which does not know how to connect.
    pub async fn connect_with_notices(
        &self,
    ) -> Result<(tokio_postgres::Client, UnboundedReceiver<DbError>)> {
        const OP: &str = "open a connection outside the pool";
        let cfg = self.config().ok_or_else(|| {
            Error::invalid(
                "connection",
                "a client built from a pool does not know how to connect",
            )
        })?;
        let (client, mut conn) = self.connector().connect(cfg).await.map_err(Error::db(OP))?;
        let (tx, rx) = unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                if let AsyncMessage::Notice(n) = msg {
                    let _ = tx.send(n);
                }
            }
        });
        Ok((client, rx))
    }
}
