//! [`ClientBuilder`]: the settings of a [`Client`], checked before any connection is made,
//! and the connection defaults.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use crate::db::{Sql, Store};
use crate::error::{Error, Result};
use crate::schema::Schema;
use crate::tls::{Connector, TlsSettings};

use super::{Client, Inner};

/// The `application_name` skiplock's connections use unless the URL sets one, so that they
/// are easy to find in `pg_stat_activity`.
pub const DEFAULT_APPLICATION_NAME: &str = "skiplock";

/// The default size of the connection pool.
pub const DEFAULT_POOL_SIZE: usize = 10;

/// How long a call waits for a pooled connection when all are in use, by default: then it
/// fails with [`Error::Pool`] instead of waiting forever.
pub const DEFAULT_POOL_WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The lease suggested for a manual [`Client::claim`]: 5 minutes, as in the article.
#[deprecated(
    note = "renamed `Client::DEFAULT_CLAIM_LEASE` (a `Worker`'s lease is `WorkerConfig::DEFAULT_LEASE`)"
)]
pub const DEFAULT_LEASE: Duration = Client::DEFAULT_CLAIM_LEASE;

/// Server-side limits set on skiplock's own connections (sent as `options` in the startup
/// packet), so that a stuck statement, a lock queue or a forgotten transaction cannot hold a
/// worker's connection, or vacuum, forever.
///
/// PgBouncer refuses the `options` startup parameter: when a server refuses it, skiplock
/// connects again without it and logs one warning. Behind PgBouncer, set the limits on the
/// role instead (`ALTER ROLE worker SET statement_timeout = '60s'`, and likewise the two
/// others), and turn these off with [`ClientBuilder::server_timeouts`]`(None)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerTimeouts {
    /// `statement_timeout` (default 60 s). Migrations lift it for their own transaction.
    pub statement: Duration,
    /// `lock_timeout` (default 10 s).
    pub lock: Duration,
    /// `idle_in_transaction_session_timeout` (default 60 s).
    pub idle_in_transaction: Duration,
}

impl Default for ServerTimeouts {
    fn default() -> Self {
        ServerTimeouts {
            statement: Duration::from_secs(60),
            lock: Duration::from_secs(10),
            idle_in_transaction: Duration::from_secs(60),
        }
    }
}

impl ServerTimeouts {
    fn options(&self) -> String {
        format!(
            "-c statement_timeout={} -c lock_timeout={} -c idle_in_transaction_session_timeout={}",
            self.statement.as_millis(),
            self.lock.as_millis(),
            self.idle_in_transaction.as_millis()
        )
    }
}

/// TCP keepalive idle time on skiplock's connections: a peer that vanished (a half-open
/// socket) is noticed in about a minute instead of hours.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);

/// `tcp_user_timeout` on skiplock's connections (unless the URL sets one): how long sent data
/// may stay unacknowledged before the kernel closes the connection. Keepalives only probe an
/// idle connection; this bounds one with a statement in flight on a path that went dead
/// without a reset (Linux; the setting is ignored elsewhere).
pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(60);

/// How long connecting may take (unless the URL says otherwise).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Applies skiplock's connection hygiene to a configuration: application name, keepalives,
/// connect timeout, `tcp_user_timeout` and server timeouts (each only where the configuration does not set it).
pub(crate) fn harden(
    cfg: &mut tokio_postgres::Config,
    app: &str,
    timeouts: Option<ServerTimeouts>,
) {
    if cfg.get_application_name().is_none() {
        cfg.application_name(app);
    }
    cfg.keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(Duration::from_secs(10))
        .keepalives_retries(3);
    if cfg.get_connect_timeout().is_none() {
        cfg.connect_timeout(CONNECT_TIMEOUT);
    }
    if cfg.get_tcp_user_timeout().is_none() {
        cfg.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    if let Some(t) = timeouts {
        let opts = match cfg.get_options() {
            Some(o) if !o.trim().is_empty() => format!("{o} {}", t.options()),
            _ => t.options(),
        };
        cfg.options(opts);
    }
}

pub(super) enum Source {
    Url(String),
    Config(Box<tokio_postgres::Config>),
    Pool(Pool),
}

/// Builds a [`Client`]. Every setting is checked in [`ClientBuilder::build`], before any
/// connection is made.
#[must_use]
pub struct ClientBuilder {
    pub(super) source: Source,
    pub(super) schema: String,
    pub(super) max_payload_bytes: usize,
    pub(super) max_output_bytes: usize,
    pub(super) pool_size: usize,
    pub(super) application_name: Option<String>,
    pub(super) server_timeouts: Option<ServerTimeouts>,
    pub(super) prepared_statements: bool,
    pub(super) unfenced: bool,
    pub(super) pool_wait_timeout: Option<Duration>,
}

impl ClientBuilder {
    /// The schema holding the queue (default `skiplock`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The largest payload accepted, in bytes of JSON text (default 1 MiB).
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// The largest job output accepted, in bytes of JSON text (default 1 MiB): what
    /// [`JobContext::set_output`](crate::JobContext::set_output) and
    /// [`JobContext::complete_tx`](crate::JobContext::complete_tx) store with a completion.
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// The most connections the pool opens (default 10). Ignored for a pool given with
    /// [`Client::from_pool`].
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// The `application_name` of the client's connections (default `skiplock`, unless the
    /// URL sets one), to recognise them in `pg_stat_activity`. Ignored for a pool given with
    /// [`Client::from_pool`].
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = Some(name.into());
        self
    }

    /// Server-side timeouts for the client's connections (default [`ServerTimeouts::default`];
    /// `None` sends none, as PgBouncer may require). Ignored for a pool given with
    /// [`Client::from_pool`].
    pub fn server_timeouts(mut self, timeouts: Option<ServerTimeouts>) -> Self {
        self.server_timeouts = timeouts;
        self
    }

    /// Use named prepared statements (parsed once per connection) for the hot path: claims,
    /// outcome writes and heartbeats. Each execution is still planned with its own values
    /// (`plan_cache_mode = force_custom_plan` on these connections): a generic plan cannot
    /// know how many jobs a claim takes and may abandon the ready index, which made claims
    /// several times slower in our benchmarks. Not through PgBouncer in transaction mode before
    /// 1.21 (or without its `max_prepared_statements`). Default false: unnamed statements, one
    /// round trip each, that work everywhere; docs/BENCHMARKS.md compares the two.
    pub fn prepared_statements(mut self, yes: bool) -> Self {
        self.prepared_statements = yes;
        self
    }

    /// For tests that must show a checker can fail; never use it.
    ///
    /// The client renders its outcome and heartbeat statements without the
    /// `attempts = <claim's attempt>` part of their guard, so that a stale worker's late write
    /// is applied to a job another claim now holds; and its schedule fires without their
    /// cursor's compare-and-set, so that racing schedulers enqueue a fire more than once.
    #[doc(hidden)]
    #[cfg(feature = "__test-hooks")]
    pub fn unfenced_for_negative_control(mut self) -> Self {
        self.unfenced = true;
        self
    }

    /// How long a call waits for a pooled connection when all of them are in use before it
    /// fails with [`Error::Pool`] (default [`Client::DEFAULT_POOL_WAIT_TIMEOUT`], 30 s; `None` waits
    /// forever). Ignored for a pool given with [`Client::from_pool`] (set it on that pool).
    pub fn pool_wait_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.pool_wait_timeout = timeout;
        self
    }

    /// Checks the settings and builds the client. Connects lazily: the first call that
    /// needs the database opens the first connection.
    pub fn build(self) -> Result<Client> {
        let schema = Schema::new(&self.schema)?;
        if self.pool_size == 0 {
            return Err(Error::invalid("pool size", "it must be at least 1"));
        }
        if self.pool_wait_timeout == Some(Duration::ZERO) {
            return Err(Error::invalid(
                "pool wait timeout",
                "it must be above zero (None waits forever)",
            ));
        }
        let (mut config, tls) = match self.source {
            Source::Pool(_) => (None, TlsSettings::default()),
            Source::Url(ref url) => {
                let (cfg, tls) = crate::tls::parse(url)?;
                (Some(cfg), tls)
            }
            Source::Config(ref cfg) => (Some((**cfg).clone()), TlsSettings::of_config(cfg)),
        };
        let connector = Connector::new(&tls)?;
        if let Some(cfg) = config.as_mut() {
            if let Some(name) = &self.application_name {
                cfg.application_name(name);
            }
            harden(cfg, DEFAULT_APPLICATION_NAME, self.server_timeouts);
            if self.prepared_statements {
                // A generic plan for the claim cannot know how many jobs a claim takes and
                // may give up the ready index; plan each execution with its values (the
                // statement is still parsed only once).
                let opts = match cfg.get_options() {
                    Some(o) if !o.trim().is_empty() => {
                        format!("{o} -c plan_cache_mode=force_custom_plan")
                    }
                    _ => "-c plan_cache_mode=force_custom_plan".to_owned(),
                };
                cfg.options(opts);
            }
        }
        let pool = match (self.source, &config) {
            (Source::Pool(pool), _) => pool,
            (_, Some(cfg)) => build_pool(
                cfg.clone(),
                connector.clone(),
                self.pool_size,
                self.pool_wait_timeout,
            )?,
            (_, None) => return Err(Error::invalid("database URL", "none was given")),
        };
        Ok(Client {
            inner: Arc::new(Inner {
                store: Store::new(
                    if self.unfenced {
                        Sql::unfenced(&schema)
                    } else {
                        Sql::new(&schema)
                    },
                    self.prepared_statements,
                ),
                schema,
                pool,
                max_payload_bytes: self.max_payload_bytes,
                max_output_bytes: self.max_output_bytes,
                config,
                connector,
            }),
        })
    }
}

pub(super) fn build_pool(
    cfg: tokio_postgres::Config,
    connector: Connector,
    size: usize,
    wait: Option<Duration>,
) -> Result<Pool> {
    // `Fast` recycling sends no health-check query: an idle queue sends nothing at all.
    let mgr = Manager::from_connect(
        cfg,
        PoolConnect(connector),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(mgr)
        .max_size(size)
        .wait_timeout(wait)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| Error::invalid("connection pool", e.to_string()))
}

/// The pool's way of connecting: the client's [`Connector`] (TLS, `options` fallback).
struct PoolConnect(Connector);

impl deadpool_postgres::Connect for PoolConnect {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> futures_util::future::BoxFuture<
        '_,
        std::result::Result<
            (tokio_postgres::Client, tokio::task::JoinHandle<()>),
            tokio_postgres::Error,
        >,
    > {
        let pg_config = pg_config.clone();
        Box::pin(async move {
            let (client, connection) = self.0.connect(&pg_config).await?;
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "pooled connection closed");
                }
            });
            Ok((client, task))
        })
    }
}
