//! Typed jobs and the registry that maps a job's kind to the code that runs it.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::input;
use crate::job::{Backoff, JobId, NewJob, DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE};

/// A boxed error from a job handler.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A job type: a serde struct whose payload is the job's arguments, with the code that runs
/// it.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use skiplock::{Job, JobContext, JobError};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail {
///     to: String,
/// }
///
/// impl Job for SendEmail {
///     const KIND: &'static str = "send_email";
///     const QUEUE: &'static str = "emails";
///
///     async fn run(self, ctx: JobContext) -> Result<(), JobError> {
///         if self.to.is_empty() {
///             return Err(JobError::discard("no recipient"));
///         }
///         // `?` on any error makes the attempt retryable.
///         // ... send, checking ctx.is_cancelled() in long loops ...
///         let _ = ctx.attempt;
///         Ok(())
///     }
/// }
///
/// // Enqueue with: client.enqueue(&SendEmail { to: "a@example.com".into() }),
/// // or with options: client.enqueue(&NewJob::of(&SendEmail { .. }).priority(-1))
/// ```
pub trait Job: Serialize + DeserializeOwned + Send + 'static {
    /// The kind stored with each job; routes it to this type. `[A-Za-z0-9_.:-]{1,128}`.
    const KIND: &'static str;
    /// The queue [`NewJob::of`] puts it in (default `"default"`).
    const QUEUE: &'static str = DEFAULT_QUEUE;

    /// Per-kind settings: attempts, backoff, timeout, heartbeats.
    fn options() -> JobOptions {
        JobOptions::default()
    }

    /// The key [`NewJob::of`] gives this job (default none): what a queue's per-key limit
    /// counts, for example the tenant or the API host it calls. See [`NewJob::key`].
    fn key(&self) -> Option<String> {
        None
    }

    /// The sequence [`NewJob::of`] puts this job in (default none): jobs of one sequence run
    /// one at a time, in enqueue order. See [`NewJob::sequence`].
    fn sequence(&self) -> Option<String> {
        None
    }

    /// Runs one attempt. `Ok` marks the job done; see [`JobError`] for the rest. A panic is
    /// caught and counts as a retryable error.
    fn run(self, ctx: JobContext) -> impl Future<Output = Result<(), JobError>> + Send;
}

/// How one attempt ended, when it did not succeed. `?` on any error gives
/// [`JobError::Retry`].
///
/// The words are the outcome statement's own (`retry`, `discard`, `snooze`), and the ones
/// [`RunStats`](crate::RunStats) counts.
///
/// (It deliberately does not implement `std::error::Error`, so that every error converts
/// into it.)
#[non_exhaustive]
pub enum JobError {
    /// Try again after the kind's backoff (`least(cap, base * 2^attempts)`), or `failed` once
    /// `max_attempts` is used up. The message goes to `last_error`.
    Retry(BoxError),
    /// Do not try again: `failed` now. The message goes to `last_error`.
    Discard(BoxError),
    /// The old name of [`JobError::Discard`]; does the same.
    #[deprecated(
        since = "0.2.0",
        note = "renamed JobError::Discard, the outcome's word in SQL"
    )]
    Permanent(BoxError),
    /// Not now: back to `queued`, to run after the duration. Costs no attempt (`max_attempts`
    /// is raised by one, since `attempts` never goes down).
    Snooze(Duration),
}

impl JobError {
    /// A retryable error with this message.
    pub fn retry(msg: impl Into<BoxError>) -> Self {
        JobError::Retry(msg.into())
    }

    /// An error that ends the job now (`failed`, no retry), with this message.
    pub fn discard(msg: impl Into<BoxError>) -> Self {
        JobError::Discard(msg.into())
    }

    /// The old name of [`JobError::discard`].
    #[deprecated(
        since = "0.2.0",
        note = "renamed JobError::discard, the outcome's word in SQL"
    )]
    pub fn permanent(msg: impl Into<BoxError>) -> Self {
        JobError::Discard(msg.into())
    }

    /// Run again after `after`, without spending an attempt.
    pub fn snooze(after: Duration) -> Self {
        JobError::Snooze(after)
    }
}

impl<E: Into<BoxError>> From<E> for JobError {
    fn from(e: E) -> Self {
        JobError::Retry(e.into())
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        #[allow(deprecated)]
        match self {
            JobError::Retry(e) => write!(f, "Retry({e})"),
            JobError::Discard(e) | JobError::Permanent(e) => write!(f, "Discard({e})"),
            JobError::Snooze(d) => write!(f, "Snooze({d:?})"),
        }
    }
}

/// Per-kind settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobOptions {
    /// Attempts before `failed` (default 5). Used when enqueueing with [`NewJob::of`].
    pub max_attempts: i32,
    /// Wait between attempts (default: the article's 10 s base, 1 hour cap).
    pub backoff: Backoff,
    /// Longest one attempt may run; then the handler is cancelled and the attempt fails
    /// with `timeout` (default: none).
    pub timeout: Option<Duration>,
    /// Whether the worker renews this kind's leases while it runs (default true). Without
    /// heartbeats, an attempt longer than the lease is reaped and may run again elsewhere.
    pub heartbeat: bool,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff: Backoff::default(),
            timeout: None,
            heartbeat: true,
        }
    }
}

/// What a handler knows about the attempt it runs.
#[derive(Clone)]
pub struct JobContext {
    /// The job's id.
    pub id: JobId,
    /// This attempt's number (1 for the first run).
    pub attempt: i32,
    /// The job's `max_attempts`.
    pub max_attempts: i32,
    /// The job's queue.
    pub queue: String,
    /// The job's kind.
    pub kind: String,
    /// When the job was enqueued (database clock).
    pub created_at: SystemTime,
    /// When the job became ready (database clock).
    pub run_at: SystemTime,
    /// When this attempt was claimed (database clock).
    pub claimed_at: SystemTime,
    pub(crate) cancel: CancellationToken,
    pub(crate) client: Client,
    pub(crate) slot: Arc<std::sync::Mutex<AttemptSlot>>,
    pub(crate) data: DataMap,
}

/// The application state handlers reach through [`JobContext::data`]: one value per type.
#[derive(Clone, Default)]
pub(crate) struct DataMap(Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl DataMap {
    fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        Arc::make_mut(&mut self.0).insert(TypeId::of::<T>(), Arc::new(value));
    }

    fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref::<T>()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// What a handler left for the worker besides its result.
#[derive(Debug, Default)]
pub(crate) struct AttemptSlot {
    /// The output to store with the completion (JSON text).
    pub output: Option<String>,
    /// Whether [`JobContext::complete_tx`] completed the job in a transaction of the
    /// handler's (which may or may not have committed).
    pub completed_in_tx: bool,
}

impl JobContext {
    /// Whether the worker wants this attempt to stop: its lease was lost, the job was
    /// cancelled, or this worker started a newer attempt of the same job (in these cases the
    /// job is no longer this attempt's and its result will not be written), or shutdown
    /// reached its deadline.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when [`JobContext::is_cancelled`] becomes true; `select!` on it in long work.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// How long the job waited from enqueue to this attempt's claim, by the database's clock
    /// (zero if the clock went backwards).
    pub fn pickup_latency(&self) -> Duration {
        self.claimed_at
            .duration_since(self.created_at)
            .unwrap_or(Duration::ZERO)
    }

    /// The queue's client (for enqueueing follow-up jobs, or the pool).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The application state of type `T` given to the worker with
    /// [`WorkerBuilder::data`](crate::WorkerBuilder::data) (or [`Registry::data`]): an HTTP
    /// client, a mailer, the application's own database pool. Typed, and shared by every
    /// attempt; no globals.
    ///
    /// [`Error::MissingData`] names the type if none was given: with `?` the attempt fails
    /// (and is retried) with that message.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use skiplock::{Job, JobContext, JobError};
    ///
    /// struct Mailer { from: String }
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Welcome { to: String }
    ///
    /// impl Job for Welcome {
    ///     const KIND: &'static str = "welcome";
    ///     async fn run(self, ctx: JobContext) -> Result<(), JobError> {
    ///         let mailer = ctx.data::<Mailer>()?;
    ///         let _ = (&mailer.from, &self.to);
    ///         Ok(())
    ///     }
    /// }
    /// // Worker::builder(client, Registry::new().register::<Welcome>())
    /// //     .data(Mailer { from: "hello@example.com".into() })
    /// ```
    pub fn data<T: Send + Sync + 'static>(&self) -> Result<&T> {
        self.data.get::<T>().ok_or(Error::MissingData {
            type_name: std::any::type_name::<T>(),
        })
    }

    /// Sets the job's output: `value` serialized as JSON, stored with the job's completion
    /// in the same guarded statement (no extra round trip) if this attempt succeeds, and
    /// readable afterwards with [`Client::get`] ([`JobRow::output`](crate::JobRow::output)),
    /// `skiplock show`, the dashboard, and by the jobs that wait for this one
    /// ([`JobContext::parent_outputs`]). A later call replaces it. Refused (and nothing set)
    /// past the client's [`max_output_bytes`](crate::ClientBuilder::max_output_bytes)
    /// (1 MiB by default): return the error with `?` and the attempt fails with that message.
    pub fn set_output<T: Serialize + ?Sized>(&self, value: &T) -> Result<()> {
        let json = serde_json::to_string(value)
            .map_err(|e| Error::invalid("output", format!("it could not be serialized: {e}")))?;
        input::output(&json, self.client.max_output_bytes())?;
        if let Ok(mut slot) = self.slot.lock() {
            slot.output = Some(json);
        }
        Ok(())
    }

    /// The outputs of the jobs this job waits for ([`NewJob::after`], [`Workflow`](crate::Workflow)),
    /// by id: JSON `null` for a parent that stored none. Empty for a job that waits for none.
    /// One query.
    pub async fn parent_outputs(
        &self,
    ) -> Result<std::collections::BTreeMap<JobId, serde_json::Value>> {
        let conn = self
            .client
            .conn("read the outputs of a job's parents")
            .await?;
        let rows = self
            .client
            .store()
            .job_parent_outputs(&**conn, self.id)
            .await?;
        rows.into_iter()
            .map(|(id, out)| {
                let v = match out {
                    Some(text) => serde_json::from_str(&text).map_err(|e| Error::Decode {
                        op: "read the outputs of a job's parents",
                        detail: format!("job {id}'s output: {e}"),
                    })?,
                    None => serde_json::Value::Null,
                };
                Ok((id, v))
            })
            .collect()
    }

    /// Completes the job inside the caller's transaction (or connection), with the output
    /// set by [`JobContext::set_output`], guarded by this attempt like every outcome write:
    /// the job is done if and only if that transaction commits, so the handler's own writes
    /// in it and the completion take effect together, exactly once.
    ///
    /// [`Error::LeaseLost`] means the job is no longer this attempt's (its lease expired and
    /// another attempt started, or it was cancelled): nothing was written; return the error
    /// so that the transaction is dropped (rolled back) with the writes in it.
    ///
    /// Works with tokio-postgres, deadpool-postgres and sqlx transactions (see
    /// [`Executor`](crate::Executor)); the transaction must be on the database the queue is
    /// in. After it, the handler's result no longer decides the outcome: if the transaction
    /// committed the job is done; if it rolled back, the worker records the attempt as failed
    /// (retried) — whatever the handler returns.
    ///
    /// ```no_run
    /// # async fn f(ctx: skiplock::JobContext, pool: sqlx::PgPool) -> Result<(), skiplock::JobError> {
    /// let mut tx = pool.begin().await?;
    /// sqlx::query("INSERT INTO invoices (order_id) VALUES ($1)").bind(7_i64).execute(&mut *tx).await?;
    /// ctx.complete_tx(&mut *tx).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn complete_tx<'c>(&self, conn: impl crate::Executor<'c>) -> Result<()> {
        let output = self.slot.lock().ok().and_then(|s| s.output.clone());
        let written = self
            .client
            .store()
            .job_complete_tx(conn.into_conn(), self.id, self.attempt, output.as_deref())
            .await?;
        if !written {
            return Err(Error::LeaseLost {
                id: self.id,
                attempt: self.attempt,
            });
        }
        if let Ok(mut slot) = self.slot.lock() {
            slot.completed_in_tx = true;
        }
        Ok(())
    }
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .field("queue", &self.queue)
            .field("kind", &self.kind)
            .field("data", &self.data.len())
            .finish_non_exhaustive()
    }
}

/// Code that runs jobs of one kind from their JSON payload. [`Job`] types get one
/// automatically; implement it directly for untyped handlers (the `skiplock work --exec`
/// runner does).
pub trait Handler: Send + Sync + 'static {
    /// Runs one attempt of a job whose payload is `payload` (JSON text).
    fn call(&self, payload: String, ctx: JobContext) -> BoxFuture<Result<(), JobError>>;
}

struct Typed<J>(std::marker::PhantomData<fn() -> J>);

impl<J: Job> Handler for Typed<J> {
    fn call(&self, payload: String, ctx: JobContext) -> BoxFuture<Result<(), JobError>> {
        Box::pin(async move {
            match serde_json::from_str::<J>(&payload) {
                Ok(job) => job.run(ctx).await,
                Err(e) => Err(JobError::Discard(
                    format!("payload does not deserialize into {}: {e}", J::KIND).into(),
                )),
            }
        })
    }
}

impl<F, Fut> Handler for F
where
    F: Fn(String, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    fn call(&self, payload: String, ctx: JobContext) -> BoxFuture<Result<(), JobError>> {
        Box::pin(self(payload, ctx))
    }
}

#[derive(Clone)]
pub(crate) struct Entry {
    pub handler: Arc<dyn Handler>,
    pub options: JobOptions,
}

/// Maps each job kind to its handler and options.
#[derive(Clone, Default)]
pub struct Registry {
    pub(crate) kinds: crate::FastMap<String, Entry>,
    pub(crate) fallback: Option<Entry>,
    pub(crate) data: DataMap,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Registers a [`Job`] type under its `KIND`, with its `options()`.
    pub fn register<J: Job>(self) -> Self {
        self.register_handler(J::KIND, J::options(), Typed::<J>(std::marker::PhantomData))
    }

    /// Registers an untyped handler (anything implementing [`Handler`], including an async
    /// closure `|payload: String, ctx: JobContext| async { ... }`).
    pub fn register_handler(
        mut self,
        kind: impl Into<String>,
        options: JobOptions,
        handler: impl Handler,
    ) -> Self {
        self.kinds.insert(
            kind.into(),
            Entry {
                handler: Arc::new(handler),
                options,
            },
        );
        self
    }

    /// Registers a handler for every kind that has no handler of its own (for example a
    /// runner that hands every job to an external program).
    pub fn fallback(mut self, options: JobOptions, handler: impl Handler) -> Self {
        self.fallback = Some(Entry {
            handler: Arc::new(handler),
            options,
        });
        self
    }

    /// Gives handlers a value of type `T` (application state: an HTTP client, a mailer, a
    /// database pool), read in a handler with [`JobContext::data`]. One value per type: a
    /// second value of the same type replaces the first. Wrap it in your own type to tell
    /// two values of one type apart. [`WorkerBuilder::data`](crate::WorkerBuilder::data)
    /// does the same; the registry carries it so that
    /// [`testing::run_job`](crate::testing) and `drain` see the same state as the worker.
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// Checks every kind name and option; [`WorkerBuilder::build`](crate::WorkerBuilder::build) calls it.
    pub(crate) fn validate(&self) -> Result<()> {
        for (kind, e) in &self.kinds {
            input::kind_name(kind)?;
            check_options(kind, &e.options)?;
        }
        if let Some(e) = &self.fallback {
            check_options("the fallback handler", &e.options)?;
        }
        Ok(())
    }

    /// The registered kinds, sorted.
    pub fn kinds(&self) -> Vec<&str> {
        let mut k: Vec<&str> = self.kinds.keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }

    pub(crate) fn get(&self, kind: &str) -> Option<&Entry> {
        self.kinds.get(kind).or(self.fallback.as_ref())
    }
}

fn check_options(kind: &str, o: &JobOptions) -> Result<()> {
    input::max_attempts(o.max_attempts)?;
    if o.timeout == Some(Duration::ZERO) {
        return Err(Error::invalid("timeout", format!("{kind}: it is zero")));
    }
    Ok(())
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("kinds", &self.kinds())
            .finish()
    }
}

/// What [`Client::enqueue`] and [`Client::enqueue_tx`] take: a [`NewJob`] (with its
/// options), or a value of a [`Job`] type, enqueued as [`NewJob::of`] would.
pub trait AsNewJob {
    /// The job to enqueue.
    fn as_new_job(&self) -> Cow<'_, NewJob>;
}

impl AsNewJob for NewJob {
    fn as_new_job(&self) -> Cow<'_, NewJob> {
        Cow::Borrowed(self)
    }
}

impl<J: Job> AsNewJob for J {
    fn as_new_job(&self) -> Cow<'_, NewJob> {
        Cow::Owned(NewJob::of(self))
    }
}

impl NewJob {
    /// A job of type `J`: its kind, default queue and `max_attempts` come from the type, and
    /// its key and sequence from [`Job::key`] and [`Job::sequence`].
    pub fn of<J: Job>(job: &J) -> NewJob {
        let mut j = NewJob::new(J::KIND, job)
            .queue(J::QUEUE)
            .max_attempts(J::options().max_attempts);
        j.key = job.key();
        j.sequence = job.sequence();
        j
    }
}
