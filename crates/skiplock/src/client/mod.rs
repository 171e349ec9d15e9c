//! [`Client`]: the queue's lifecycle calls over a connection pool.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;

use crate::db::job::{After, Finish, Verdict, Written};
use crate::tls::Connector;

use crate::caller_tx::Executor;
use crate::db::{self, Statement, Store};
use crate::error::{Error, Result};
use crate::handler::AsNewJob;
use crate::input;
use crate::job::{
    ClaimedJob, EncodedBatch, FailOutcome, JobFamily, JobId, JobRow, JobState, NewJob, Retry,
    Transition,
};
use crate::migrate::{self, MigrationReport};
use crate::outcome::Outcome;
use crate::schema::Schema;

mod builder;

pub(crate) use builder::harden;
#[allow(deprecated)]
pub use builder::DEFAULT_LEASE;
use builder::{build_pool, Source};
pub use builder::{ClientBuilder, ServerTimeouts, DEFAULT_POOL_SIZE, DEFAULT_POOL_WAIT_TIMEOUT};

/// The queue's lifecycle calls: enqueue, claim, complete, fail, extend, reap.
///
/// Each call is one SQL statement in autocommit on a pooled connection (no transaction is
/// held open while a job runs). Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    schema: Schema,
    /// Every statement, for this schema and these settings.
    store: Store,
    max_payload_bytes: usize,
    max_output_bytes: usize,
    /// The connection settings, when known (not for a client built from a pool): workers
    /// open their LISTEN connection with them.
    config: Option<tokio_postgres::Config>,
    /// Opens connections with the TLS settings of the URL (shared with the pool's manager).
    connector: Connector,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("schema", &self.inner.schema)
            .field("max_payload_bytes", &self.inner.max_payload_bytes)
            .finish_non_exhaustive()
    }
}

/// A busy row (locked by another session) is tried again after this, doubling...
const BUSY_FIRST_WAIT: Duration = Duration::from_millis(20);
/// ... up to this ...
const BUSY_MAX_WAIT: Duration = Duration::from_millis(500);
/// ... for about this long before the manual call reports [`Error::Busy`].
const BUSY_GIVE_UP: Duration = Duration::from_secs(10);

fn finish(id: JobId, attempt: i32, outcome: Outcome) -> Finish {
    Finish {
        output: None,
        in_tx: false,
        kind: std::sync::Arc::from(""),
        id,
        attempt,
        queue: std::sync::Arc::from(""),
        outcome,
    }
}

/// Whether `e` is the database refusing a text it cannot store in its encoding.
fn is_encoding(e: &Error) -> bool {
    matches!(e, Error::Database { source, .. } if is_encoding_error(source))
}

/// Whether `e` is the database refusing a text it cannot store in its encoding.
pub(crate) fn is_encoding_error(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code().is_some_and(|c| {
        *c == SqlState::UNTRANSLATABLE_CHARACTER || *c == SqlState::CHARACTER_NOT_IN_REPERTOIRE
    })
}

impl Client {
    /// The lease suggested for a manual [`Client::claim`]: 5 minutes, as in the article. A
    /// [`Worker`](crate::Worker) renews shorter leases with its heartbeat: see
    /// [`WorkerConfig::DEFAULT_LEASE`](crate::WorkerConfig::DEFAULT_LEASE).
    pub const DEFAULT_CLAIM_LEASE: Duration = Duration::from_secs(300);
    /// The connections of the pool a client opens from a URL, unless told otherwise.
    pub const DEFAULT_POOL_SIZE: usize = builder::DEFAULT_POOL_SIZE;
    /// How long a call waits for a pooled connection unless told otherwise.
    pub const DEFAULT_POOL_WAIT_TIMEOUT: Duration = builder::DEFAULT_POOL_WAIT_TIMEOUT;
    /// The `application_name` connections report unless told otherwise.
    pub const DEFAULT_APPLICATION_NAME: &'static str = builder::DEFAULT_APPLICATION_NAME;
    /// The largest payload accepted unless told otherwise (1 MiB).
    pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = input::DEFAULT_MAX_PAYLOAD_BYTES;
    /// The largest job output accepted unless told otherwise (1 MiB).
    pub const DEFAULT_MAX_OUTPUT_BYTES: usize = input::DEFAULT_MAX_OUTPUT_BYTES;
    /// How long a connection attempt may take.
    pub const CONNECT_TIMEOUT: Duration = builder::CONNECT_TIMEOUT;
    /// TCP keepalive idle time on every connection.
    pub const KEEPALIVE_IDLE: Duration = builder::KEEPALIVE_IDLE;

    /// Creates or upgrades the schema through the caller's connection or transaction (see
    /// [`migrate`](crate::migrate())). Through a tokio-postgres transaction it runs inside
    /// it, under the caller's timeouts, and is applied only if and when that transaction
    /// commits; through a plain tokio-postgres connection it opens and commits a transaction
    /// of its own, as [`Client::migrate`] does; through an sqlx connection it opens a
    /// transaction, or a savepoint inside the caller's.
    pub async fn migrate_tx<'c>(&self, conn: impl Executor<'c>) -> Result<MigrationReport> {
        migrate::migrate_in(conn.into_conn(), &self.inner.schema).await
    }

    /// A builder for a client on the database at `url` (a `postgres://` URL or a libpq
    /// `key=value` string).
    ///
    /// TLS follows the URL's `sslmode` as libpq does: `disable`; `prefer` (the default: TLS
    /// if the server offers it, certificate not checked); `require` (TLS, certificate not
    /// checked unless `sslrootcert` is given); `verify-ca` (certificate signed by a CA of
    /// `sslrootcert`); `verify-full` (and valid for the host name). `sslrootcert` is a file
    /// of PEM certificates, or `system` for the system's trusted roots (which implies
    /// `verify-full`). Client certificates are not supported.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        Self::builder_from(Source::Url(url.into()))
    }

    /// A builder for a client on an existing tokio-postgres configuration.
    pub fn builder_from_config(config: tokio_postgres::Config) -> ClientBuilder {
        Self::builder_from(Source::Config(Box::new(config)))
    }

    /// A builder for a client on an existing deadpool-postgres pool (shared with the
    /// application, so that enqueueing can use the application's transactions).
    pub fn from_pool(pool: Pool) -> ClientBuilder {
        Self::builder_from(Source::Pool(pool))
    }

    fn builder_from(source: Source) -> ClientBuilder {
        ClientBuilder {
            source,
            schema: crate::schema::DEFAULT_SCHEMA.to_owned(),
            max_payload_bytes: input::DEFAULT_MAX_PAYLOAD_BYTES,
            max_output_bytes: input::DEFAULT_MAX_OUTPUT_BYTES,
            pool_size: DEFAULT_POOL_SIZE,
            application_name: None,
            server_timeouts: Some(ServerTimeouts::default()),
            prepared_statements: false,
            unfenced: false,
            pool_wait_timeout: Some(DEFAULT_POOL_WAIT_TIMEOUT),
        }
    }

    /// A client on `url` with the default settings and schema.
    pub fn connect(url: impl Into<String>) -> Result<Client> {
        Self::builder(url).build()
    }

    /// The schema this client works in.
    pub fn schema(&self) -> &Schema {
        &self.inner.schema
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The connection settings the client was built with (`None` for a client built from a
    /// pool).
    pub fn config(&self) -> Option<&tokio_postgres::Config> {
        self.inner.config.as_ref()
    }

    /// A client with the same settings on a small pool of its own (`None` for a client built
    /// from a pool): the worker runtime's claims, heartbeats and outcome writes use it, so
    /// that handlers holding the application's connections can never starve them.
    pub(crate) fn with_own_pool(&self, size: usize) -> Result<Option<Client>> {
        let Some(cfg) = &self.inner.config else {
            return Ok(None);
        };
        let i = &self.inner;
        Ok(Some(Client {
            inner: Arc::new(Inner {
                pool: build_pool(
                    cfg.clone(),
                    i.connector.clone(),
                    size,
                    Some(DEFAULT_POOL_WAIT_TIMEOUT),
                )?,
                schema: i.schema.clone(),
                store: i.store.clone(),
                max_payload_bytes: i.max_payload_bytes,
                max_output_bytes: i.max_output_bytes,
                config: i.config.clone(),
                connector: i.connector.clone(),
            }),
        }))
    }

    /// Opens connections as the pool does (TLS settings, `options` fallback): the worker's
    /// LISTEN connection uses it.
    pub(crate) fn connector(&self) -> &Connector {
        &self.inner.connector
    }

    /// Every statement the client runs, one method each.
    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The largest payload accepted, in bytes.
    pub(crate) fn max_payload_bytes(&self) -> usize {
        self.inner.max_payload_bytes
    }

    /// The largest job output accepted, in bytes.
    pub(crate) fn max_output_bytes(&self) -> usize {
        self.inner.max_output_bytes
    }

    pub(crate) async fn conn(&self, op: &'static str) -> Result<deadpool_postgres::Object> {
        self.inner
            .pool
            .get()
            .await
            .map_err(|source| Error::Pool { op, source })
    }

    /// The SQL text of a statement, as this client sends it (schema filled in).
    pub fn statement(&self, statement: Statement) -> &str {
        self.inner.store.sql().get(statement)
    }

    /// Creates or upgrades the schema (see [`migrate`](crate::migrate())).
    pub async fn migrate(&self) -> Result<MigrationReport> {
        let mut conn = self.conn("migrate").await?;
        let client: &mut tokio_postgres::Client = &mut conn;
        migrate::migrate(client, &self.inner.schema).await
    }

    /// Whether this client's schema has been created by [`Client::migrate`] (its migrations
    /// table exists), read from the catalog: no privilege needed, no lock taken, nothing
    /// created.
    pub async fn is_migrated(&self) -> Result<bool> {
        let conn = self.conn("look the schema up").await?;
        self.store()
            .schema_exists((&**conn).into_conn(), self.inner.schema.name())
            .await
    }

    /// The server's version string (`SHOW server_version`).
    pub async fn server_version(&self) -> Result<String> {
        let conn = self.conn("read the server version").await?;
        self.store().server_version(&conn).await
    }

    /// Drops the schema and everything in it: jobs, archive, migrations record. For scratch
    /// schemas (the lab, the demo, tests); there is no undo.
    pub async fn drop_schema(&self) -> Result<()> {
        let conn = self.conn("drop the schema").await?;
        self.store().schema_drop(&**conn).await
    }

    // ---- Enqueue -------------------------------------------------------------------------

    /// Enqueues one job in its own transaction. Returns its id.
    ///
    /// `job` is a [`NewJob`] (with its options) or a value of a [`Job`](crate::Job) type,
    /// enqueued as [`NewJob::of`] would: `client.enqueue(&WelcomeEmail { user_id: 42 })`.
    pub async fn enqueue<J: AsNewJob + ?Sized>(&self, job: &J) -> Result<JobId> {
        let j = job.as_new_job().encode(self.inner.max_payload_bytes)?;
        let conn = self.conn("enqueue a job").await?;
        let id = self.store().job_insert((&**conn).into_conn(), &j).await?;
        crate::metrics::enqueued([(j.queue.as_str(), j.kind.as_str())]);
        Ok(id)
    }

    /// Enqueues one job through the caller's connection or transaction (see [`Executor`]).
    ///
    /// Inside a transaction the job, and its wake-up notification, exist only once that
    /// transaction commits; a rollback removes both. Workers never see it before.
    pub async fn enqueue_tx<'c, J: AsNewJob + ?Sized>(
        &self,
        conn: impl Executor<'c>,
        job: &J,
    ) -> Result<JobId> {
        let j = job.as_new_job().encode(self.inner.max_payload_bytes)?;
        let id = self.store().job_insert(conn.into_conn(), &j).await?;
        crate::metrics::enqueued([(j.queue.as_str(), j.kind.as_str())]);
        Ok(id)
    }

    /// Enqueues many jobs in one statement (one array per column, so thousands per call).
    /// All or nothing: one refused job refuses the batch before any SQL runs
    /// ([`Error::InvalidBatchItem`] names it). Returns the ids in input order. The insert
    /// sends at most one notification per distinct queue, not one per job, and none for a
    /// queue that no worker waits on (its workers are busy; see docs/DESIGN.md).
    pub async fn enqueue_many(&self, jobs: &[NewJob]) -> Result<Vec<JobId>> {
        let b = EncodedBatch::encode(jobs, self.inner.max_payload_bytes)?;
        if b.len() == 0 {
            return Ok(Vec::new());
        }
        let conn = self.conn("enqueue jobs").await?;
        let ids = self
            .store()
            .job_insert_many((&**conn).into_conn(), &b)
            .await?;
        b.count_enqueued();
        Ok(ids)
    }

    /// [`Client::enqueue_many`] through the caller's connection or transaction.
    pub async fn enqueue_many_tx<'c>(
        &self,
        conn: impl Executor<'c>,
        jobs: &[NewJob],
    ) -> Result<Vec<JobId>> {
        let b = EncodedBatch::encode(jobs, self.inner.max_payload_bytes)?;
        let ids = self.store().job_insert_many(conn.into_conn(), &b).await?;
        b.count_enqueued();
        Ok(ids)
    }

    /// Enqueues a [`Workflow`](crate::Workflow): its jobs and the dependencies among them, in
    /// one statement and its own transaction. Returns the ids in the order the jobs were
    /// added. All or nothing: a refused job ([`Error::InvalidBatchItem`] names it), a parent
    /// that does not exist or has failed, refuse the whole workflow.
    pub async fn enqueue_workflow(&self, flow: &crate::Workflow) -> Result<Vec<JobId>> {
        if flow.is_empty() {
            return Ok(Vec::new());
        }
        let json = flow.encode(self.inner.max_payload_bytes)?;
        let conn = self.conn("enqueue a workflow").await?;
        self.store()
            .job_enqueue_workflow((&**conn).into_conn(), &json)
            .await
    }

    /// [`Client::enqueue_workflow`] through the caller's connection or transaction.
    pub async fn enqueue_workflow_tx<'c>(
        &self,
        conn: impl Executor<'c>,
        flow: &crate::Workflow,
    ) -> Result<Vec<JobId>> {
        if flow.is_empty() {
            return Ok(Vec::new());
        }
        let json = flow.encode(self.inner.max_payload_bytes)?;
        self.store()
            .job_enqueue_workflow(conn.into_conn(), &json)
            .await
    }

    // ---- Lifecycle -----------------------------------------------------------------------

    /// Claims up to `limit` ready jobs of `queue` and leases them for `lease` (1 s to 24 h),
    /// in one short autocommit statement (`FOR UPDATE SKIP LOCKED`). Each job's attempt
    /// count grows by one; present [`ClaimedJob::attempt`] to the calls that finish it.
    ///
    /// Jobs are returned in claim order (priority, run_at, id). An empty result means
    /// nothing is ready that another claimer does not hold.
    pub async fn claim(&self, queue: &str, limit: u32, lease: Duration) -> Result<Vec<ClaimedJob>> {
        input::queue_name(queue)?;
        let lease_us = input::lease_micros(lease)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let conn = self.conn("claim jobs").await?;
        self.store()
            .job_claim(
                &conn,
                queue,
                i64::from(limit),
                lease_us,
                &After::FRONT,
                None,
            )
            .await
    }

    /// For skiplock's own tests; never use it. The worker's claim while it works through a
    /// backlog: a claim in turn (migration 24) of up to `limit` jobs of `queue`, or up to
    /// `waited` if it had to wait for its turn, leased for `lease`.
    #[doc(hidden)]
    #[cfg(feature = "__test-hooks")]
    pub async fn claim_in_turn_for_tests(
        &self,
        queue: &str,
        limit: u32,
        waited: u32,
        lease: Duration,
    ) -> Result<Vec<ClaimedJob>> {
        input::queue_name(queue)?;
        let lease_us = input::lease_micros(lease)?;
        let conn = self.conn("claim jobs").await?;
        self.store()
            .job_claim(
                &conn,
                queue,
                i64::from(limit),
                lease_us,
                &After::FRONT,
                Some(i64::from(waited)),
            )
            .await
    }

    /// Marks a job done, if it is still `running` with this `attempt`.
    ///
    /// [`Transition::Lost`] means the job is no longer this claim's: nothing was written, and
    /// the job must not be counted as done. Runs the worker's own batched statement
    /// (`job_finish_many.sql`) with a batch of one.
    pub async fn complete(&self, id: JobId, attempt: i32) -> Result<Transition> {
        let f = Finish::complete(id, attempt);
        Ok(match self.finish_one(f, "complete a job").await? {
            Verdict::Applied(_) => Transition::Applied,
            _ => Transition::Lost,
        })
    }

    /// Records a failed attempt, guarded like [`Client::complete`]. With
    /// [`Retry::Backoff`] the job goes back to `queued` to run after the backoff, or to
    /// `failed` when it has used `max_attempts`; with [`Retry::Never`] it is `failed` now.
    /// `error` is kept in `last_error` (NULs removed, cut to 16 KiB; written with non-ASCII
    /// characters escaped if the database's encoding cannot store them).
    pub async fn fail(
        &self,
        id: JobId,
        attempt: i32,
        error: &str,
        retry: Retry,
    ) -> Result<FailOutcome> {
        let outcome = match retry {
            Retry::Backoff(backoff) => {
                input::micros("backoff", backoff.base())?;
                input::micros("backoff", backoff.cap())?;
                Outcome::retry(error, backoff)
            }
            Retry::Never => Outcome::discard(error),
        };
        let f = finish(id, attempt, outcome);
        Ok(match self.finish_one(f, "record a failed job").await? {
            Verdict::Applied(w) if w.state == JobState::Queued => FailOutcome::Retrying {
                run_at: w.run_at,
                retry_in: Duration::from_micros(w.retry_in_us.max(0).unsigned_abs()),
            },
            Verdict::Applied(_) => FailOutcome::Failed,
            _ => FailOutcome::Lost,
        })
    }

    /// Writes one outcome with the batched statement. A row another session holds locked
    /// (busy) is tried again for a few seconds; an error text the database's encoding
    /// cannot store is written again with its non-ASCII characters escaped.
    async fn finish_one(&self, mut f: Finish, op: &'static str) -> Result<Verdict<Written>> {
        let conn = self.conn(op).await?;
        let mut busy_wait = BUSY_FIRST_WAIT;
        let deadline = tokio::time::Instant::now() + BUSY_GIVE_UP;
        let mut escaped = false;
        loop {
            let verdict = match self.store().job_finish_one(&**conn, &f).await {
                Ok(v) => v,
                Err(e) if !escaped && is_encoding(&e) => {
                    escaped = true;
                    if let Some(error) = f.outcome.error_mut() {
                        *error = db::job::ascii_escaped(error);
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !verdict.is_busy() {
                return Ok(verdict);
            }
            if tokio::time::Instant::now() + busy_wait > deadline {
                return Err(Error::Busy { op, id: f.id });
            }
            tokio::time::sleep(busy_wait).await;
            busy_wait = (busy_wait * 2).min(BUSY_MAX_WAIT);
        }
    }

    /// Renews a running job's lease to `lease` from the database's `now()`, guarded like
    /// [`Client::complete`]. [`Transition::Lost`] means the job is no longer this claim's:
    /// stop working on it, and do not write its result. Runs the heartbeat's batched
    /// statement (`job_extend_many.sql`) with a batch of one.
    pub async fn extend(&self, id: JobId, attempt: i32, lease: Duration) -> Result<Transition> {
        const OP: &str = "extend a lease";
        let lease_us = input::lease_micros(lease)?;
        let conn = self.conn(OP).await?;
        let mut busy_wait = BUSY_FIRST_WAIT;
        let deadline = tokio::time::Instant::now() + BUSY_GIVE_UP;
        loop {
            match self
                .store()
                .job_extend_one(&**conn, id, attempt, lease_us)
                .await?
            {
                Verdict::Applied(()) => return Ok(Transition::Applied),
                Verdict::Lost => return Ok(Transition::Lost),
                Verdict::Busy => {}
            }
            if tokio::time::Instant::now() + busy_wait > deadline {
                return Err(Error::Busy { op: OP, id });
            }
            tokio::time::sleep(busy_wait).await;
            busy_wait = (busy_wait * 2).min(BUSY_MAX_WAIT);
        }
    }

    /// One job by id, or `None`.
    pub async fn get(&self, id: JobId) -> Result<Option<JobRow>> {
        let conn = self.conn("read a job").await?;
        self.store().job_get(&**conn, id).await
    }

    /// The jobs `id` waits for and the jobs that wait for it, each with its state (at most
    /// `max_children` children listed; [`JobFamily::children_total`] counts them all).
    pub async fn family(&self, id: JobId, max_children: usize) -> Result<JobFamily> {
        let conn = self.conn("read a job's parents and children").await?;
        let max = i64::try_from(max_children).unwrap_or(i64::MAX);
        self.store().job_family(&**conn, id, max).await
    }
}
