//! The per-test bundle: a migrated schema, a client on it, and a plain connection.

use std::time::Duration;

use skiplock::{Client, JobId};
use skiplock_testdb::TestDb;
use tokio_postgres::AsyncMessage;

pub struct Bundle {
    pub db: TestDb,
    pub client: Client,
    /// A plain connection whose search_path is the test schema.
    pub raw: tokio_postgres::Client,
}

pub async fn setup() -> Bundle {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
    let db = TestDb::new().await;
    let client = Client::builder(db.url())
        .schema(db.schema())
        .pool_size(16)
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let raw = db.connect().await.unwrap();
    raw.batch_execute(&format!("SET search_path TO \"{}\"", db.schema()))
        .await
        .unwrap();
    Bundle { db, client, raw }
}

impl Bundle {
    /// Moves a job's lease into the past, as if its worker had stalled past it.
    pub async fn expire_lease(&self, id: JobId) {
        let n = self
            .raw
            .execute(
                "UPDATE jobs SET locked_until = now() - interval '1 second' WHERE id = $1",
                &[&id.0],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
    }

    /// Makes a queued job ready now (instead of waiting for its backoff).
    pub async fn make_ready(&self, id: JobId) {
        self.raw
            .execute("UPDATE jobs SET run_at = now() WHERE id = $1", &[&id.0])
            .await
            .unwrap();
    }

    pub async fn count(&self, where_clause: &str) -> i64 {
        self.raw
            .query_one(
                &format!("SELECT count(*) FROM jobs WHERE {where_clause}"),
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }
}

/// A connection LISTENing on a channel; notifications arrive on the receiver.
pub struct Listener {
    /// Kept so that the connection stays open.
    pub _client: tokio_postgres::Client,
    pub rx: tokio::sync::mpsc::UnboundedReceiver<tokio_postgres::Notification>,
}

pub async fn listen(url: &str, channel_quoted: &str) -> Listener {
    let (client, mut conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(msg) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            match msg {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {channel_quoted}"))
        .await
        .unwrap();
    Listener {
        _client: client,
        rx,
    }
}

impl Listener {
    /// Waits on these queues from this session, as a worker's LISTEN connection does
    /// (`jobs_wait`, migration 15): only then do INSERTs into them notify while no worker
    /// waits on them.
    pub async fn wait_on(&self, schema: &skiplock::Schema, queues: &[&str]) {
        let sql = schema.render("SELECT {schema}.jobs_wait($1)");
        for q in queues {
            self._client.execute(&sql, &[q]).await.unwrap();
        }
    }

    /// The next notification, failing the test if none comes within 10 s.
    pub async fn next(&mut self) -> tokio_postgres::Notification {
        tokio::time::timeout(Duration::from_secs(10), self.rx.recv())
            .await
            .expect("no notification within 10 s")
            .expect("listener connection closed")
    }
}

/// `$4, $5, $6` of `job_claim.sql` for a claim from the front of the queue (the least
/// priority, `-infinity` as NULL, the least id).
pub(crate) const FRONT: (i16, Option<std::time::SystemTime>, i64) = (i16::MIN, None, i64::MIN);
