//! Benchmarks (`skiplock bench`): figures measured as ratios in one run on one machine.
//! Every function here is one kind of run, in scratch schemas of its own that it drops
//! afterwards; which runs each scenario makes, and its report, are the [`suite`]'s.
//!
//! [`suite`]: crate::suite
//!
//! - [`throughput`]: no-op jobs through a worker set up as a [`WorkerSetup`]; [`ceiling`]:
//!   the same claim and finish statements issued back to back by raw-SQL loops with no
//!   runtime around them (the best rate over several loop counts is the physical limit);
//! - [`latency`]: enqueue-to-start latency at a steady offered load, by the database's clock;
//! - [`enqueue`]: single-row transactions and the batch path;
//! - [`history`]: claim latency with many finished rows kept in the table;
//! - [`footprint`]: dead tuples, size, WAL and transactions per job at a steady load, with
//!   and without a bystander transaction holding back vacuum;
//! - [`processes`]: several `skiplock work` processes on one queue: total throughput and the
//!   claim latency beside them;
//! - [`workflow_enqueue`] and [`workflow_throughput`]: workflows ([`FlowShape`]) against the
//!   same number of plain jobs, enqueued in one call, and run through a worker.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use skiplock::reexports::deadpool_postgres;
use skiplock::{
    Client, JobContext, JobError, JobOptions, NewJob, Registry, Schema, Worker, WorkerConfig,
};
use tokio_postgres::types::Type;

use crate::db::{self, Statement};
use crate::error::{Error, Result};

pub(crate) const QUEUE: &str = "bench";
pub(crate) const LEASE_US: i64 = 300_000_000;

/// A scratch schema, migrated, dropped by [`Scratch::drop_now`].
pub(crate) struct Scratch {
    pub(crate) client: Client,
}

impl Scratch {
    pub(crate) async fn new(url: &str, base: &str, tag: &str, pool: usize) -> Result<Self> {
        let name = format!("{base}_bench_{tag}_{}", std::process::id());
        Schema::new(&name)?;
        let client = Client::builder(url)
            .schema(&name)
            .pool_size(pool.max(2))
            .application_name("skiplock-bench")
            .build()?;
        client.drop_schema().await?;
        client.migrate().await?;
        Ok(Scratch { client })
    }

    pub(crate) async fn fill(&self, jobs: usize) -> Result<()> {
        self.fill_keyed(jobs, 0).await
    }

    /// `jobs` no-op jobs; with `keys` > 0, spread evenly over that many keys (`k0`, `k1`, ...
    /// in turn, so that every key has jobs all along the queue).
    ///
    /// A checkpoint comes first ([`checkpoint`]), so that the run that follows starts in the
    /// same state of the WAL as every other.
    async fn fill_keyed(&self, jobs: usize, keys: usize) -> Result<()> {
        checkpoint(&self.client).await?;
        let all: Vec<NewJob> = (0..jobs)
            .map(|i| {
                let j = NewJob::from_json("noop", "{}").queue(QUEUE);
                if keys > 0 {
                    j.key(format!("k{}", i % keys))
                } else {
                    j
                }
            })
            .collect();
        for chunk in all.chunks(10_000) {
            self.client.enqueue_many(chunk).await?;
        }
        self.vacuum().await
    }

    /// Jobs done, jobs still running, and rows left.
    pub(crate) async fn status_counts(&self) -> Result<(usize, usize, usize)> {
        const OP: &str = "count the bench table's done and running jobs";
        let conn = conn(&self.client, OP).await?;
        let row = conn
            .query_one(&self.sql(Statement::BenchStatusCounts), &[])
            .await
            .map_err(Error::db(OP))?;
        let count = |name: &str| -> Result<usize> {
            let n: i64 = row.try_get(name).map_err(Error::db(OP))?;
            Ok(usize::try_from(n).unwrap_or(0))
        };
        Ok((count("done")?, count("running")?, count("rows")?))
    }

    async fn freeze_statistics(&self) -> Result<()> {
        let conn = conn(&self.client, "freeze the bench table's statistics").await?;
        conn.batch_execute(&self.sql(Statement::BenchFreezeStatistics))
            .await
            .map_err(Error::db("freeze the bench table's statistics"))
    }

    async fn vacuum(&self) -> Result<()> {
        let conn = conn(&self.client, "vacuum the bench table").await?;
        conn.batch_execute(&self.sql(Statement::BenchVacuum))
            .await
            .map_err(Error::db("vacuum the bench table"))
    }

    /// The client a worker set up as `setup` runs on: this one, or one of its own on the
    /// same schema with named prepared statements.
    fn worker_client(&self, url: &str, setup: &WorkerSetup) -> Result<Client> {
        Ok(if setup.prepared {
            Client::builder(url)
                .schema(self.client.schema().name())
                .pool_size(4)
                .application_name("skiplock-bench")
                .prepared_statements(true)
                .build()?
        } else {
            self.client.clone()
        })
    }

    /// Runs one of this crate's statements (without parameters) for the scratch schema.
    async fn execute(&self, statement: Statement, op: &'static str) -> Result<()> {
        let conn = conn(&self.client, op).await?;
        conn.batch_execute(&self.sql(statement))
            .await
            .map_err(Error::db(op))
    }

    /// One of this crate's statements, for the scratch schema.
    fn sql(&self, statement: Statement) -> String {
        statement.sql(self.client.schema())
    }

    pub(crate) async fn drop_now(self) -> Result<()> {
        Ok(self.client.drop_schema().await?)
    }
}

/// `CHECKPOINT`, before a run's table is filled (`queries/bench_checkpoint.sql`): with the
/// server's default `max_wal_size`, a cluster doing this work checkpoints every 10-15 s, and
/// a run that one begins in writes every page it touches again in full to the WAL, at a cost
/// that made the same run up to a fifth slower than its neighbours. After a checkpoint, no
/// other begins until the run has written hundreds of megabytes, so every run, the worker's
/// and the ceiling's alike, measures the same state. A role that may not checkpoint (neither
/// a superuser nor, from PostgreSQL 15, a member of `pg_checkpoint`) runs without it, with a
/// line saying so the first time.
pub async fn checkpoint(client: &Client) -> Result<()> {
    const OP: &str = "checkpoint before a run";
    static REFUSED: std::sync::Once = std::sync::Once::new();
    let conn = conn(client, OP).await?;
    match conn
        .batch_execute(&Statement::BenchCheckpoint.sql(client.schema()))
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            let e = e
                .as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_owned());
            REFUSED.call_once(|| {
                eprintln!(
                    "skiplock bench: this role may not CHECKPOINT ({e}): runs go on without one first, and a run that a checkpoint begins in measures slower than the rest"
                );
            });
            Ok(())
        }
        Err(e) => Err(Error::db(OP)(e)),
    }
}

/// A connection from `client`'s pool, for `op`.
async fn conn(client: &Client, op: &'static str) -> Result<deadpool_postgres::Object> {
    client
        .pool()
        .get()
        .await
        .map_err(|source| skiplock::Error::Pool { op, source }.into())
}

/// When each job started, and its enqueue-to-start latency (ms, database clock).
type Samples = Arc<Mutex<Vec<(Instant, f64)>>>;

/// A no-op handler that records each job's latency.
fn recording_registry(samples: Samples) -> Registry {
    Registry::new().register_handler(
        "noop",
        JobOptions::default(),
        move |_p: String, ctx: JobContext| {
            let samples = samples.clone();
            async move {
                let ms = ctx.pickup_latency().as_secs_f64() * 1000.0;
                samples
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((Instant::now(), ms));
                Ok::<(), JobError>(())
            }
        },
    )
}

fn noop_registry() -> Registry {
    Registry::new().register_handler(
        "noop",
        JobOptions::default(),
        |_p: String, _c: JobContext| async { Ok::<(), JobError>(()) },
    )
}

/// How the worker of one throughput run is set up; every field left alone is the default.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerSetup {
    /// The queue's concurrency.
    pub concurrency: usize,
    /// [`WorkerConfig::max_claim_batch`]; `None`: the default.
    pub batch: Option<u32>,
    /// [`WorkerConfig::claims_in_flight`]; `None`: automatic.
    pub claims_in_flight: Option<usize>,
    /// Named prepared statements ([`ClientBuilder::prepared_statements`](skiplock::ClientBuilder::prepared_statements)).
    pub prepared: bool,
    /// Statistics taken while every job was queued, kept for the whole run (autovacuum and
    /// autoanalyze off for the table).
    pub frozen_statistics: bool,
    /// The queue's limits during the run (`None`: none).
    pub limits: Option<skiplock::QueueLimits>,
    /// Jobs spread evenly over this many keys (0: no keys).
    pub keys: usize,
    /// [`WorkerConfig::delete_done`]: completed jobs deleted instead of kept.
    pub delete_done: bool,
}

impl WorkerSetup {
    /// A queue of `concurrency`, every other setting at its default.
    pub fn defaults(concurrency: usize) -> Self {
        WorkerSetup {
            concurrency,
            batch: None,
            claims_in_flight: None,
            prepared: false,
            frozen_statistics: false,
            limits: None,
            keys: 0,
            delete_done: false,
        }
    }

    /// With these limits on the queue.
    pub fn limits(mut self, limits: skiplock::QueueLimits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// With the jobs spread evenly over `keys` keys.
    pub fn keys(mut self, keys: usize) -> Self {
        self.keys = keys;
        self
    }

    /// With claims of at most `batch` jobs.
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = Some(batch);
        self
    }

    /// With `n` claims in flight.
    pub fn claims_in_flight(mut self, n: usize) -> Self {
        self.claims_in_flight = Some(n);
        self
    }

    /// With named prepared statements.
    pub fn prepared(mut self) -> Self {
        self.prepared = true;
        self
    }

    /// With completed jobs deleted instead of kept ([`WorkerConfig::delete_done`]).
    pub fn delete_done(mut self) -> Self {
        self.delete_done = true;
        self
    }

    /// With statistics frozen from an all-queued table.
    pub fn frozen_statistics(mut self) -> Self {
        self.frozen_statistics = true;
        self
    }

    /// Whether every setting but the concurrency is the default.
    pub fn is_default(&self) -> bool {
        *self == Self::defaults(self.concurrency)
    }

    fn config(&self) -> WorkerConfig {
        let mut cfg = WorkerConfig::default();
        if let Some(b) = self.batch {
            cfg.max_claim_batch = b;
        }
        cfg.claims_in_flight = self.claims_in_flight;
        cfg.delete_done = self.delete_done;
        cfg
    }
}

/// One worker throughput run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ThroughputPoint {
    /// Jobs processed.
    pub jobs: usize,
    /// The setup.
    pub setup: WorkerSetup,
    /// The batch in force.
    pub batch: u32,
    /// The claims in flight in force.
    pub claims_in_flight: usize,
    /// From start to the last outcome written.
    pub jobs_per_s: f64,
    /// The CPU of the run: the worker's (this process's) and the machine's (`None` where
    /// it cannot be read).
    pub cpu: Option<crate::cpu::CpuSplit>,
}

/// `jobs` no-op jobs, enqueued and analyzed beforehand, through one worker set up as `setup`
/// ([`Worker::run_until_idle`]): jobs per second from start to the last outcome written.
pub async fn throughput(
    url: &str,
    base: &str,
    jobs: usize,
    setup: &WorkerSetup,
) -> Result<ThroughputPoint> {
    let cfg = setup.config();
    let s = Scratch::new(url, base, "tput", 4).await?;
    if setup.frozen_statistics {
        s.freeze_statistics().await?;
    }
    s.fill_keyed(jobs, setup.keys).await?;
    if let Some(l) = setup.limits {
        s.client
            .set_queue_limits(QUEUE, l, Some("skiplock-bench"))
            .await?;
    }
    let client = s.worker_client(url, setup)?;
    let worker = Worker::builder(client, noop_registry())
        .queue(QUEUE, setup.concurrency)
        .config(cfg.clone())
        .build()?;
    let cpu_before = crate::cpu::Sample::now();
    let started = Instant::now();
    let stats = worker.run_until_idle().await?;
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_before.and_then(|b| crate::cpu::Sample::now()?.since(&b));
    s.drop_now().await?;
    Ok(ThroughputPoint {
        jobs,
        setup: setup.clone(),
        batch: cfg.max_claim_batch,
        // What runs through a drained backlog (one claim at a time for a small queue).
        claims_in_flight: if cfg.claim_ahead {
            cfg.backlog_claims_in_flight_for(setup.concurrency)
        } else {
            cfg.claims_in_flight_for(setup.concurrency)
        },
        jobs_per_s: stats.done as f64 / secs.max(1e-9),
        cpu,
    })
}

/// One raw-SQL ceiling run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CeilingPoint {
    /// Claim loops running at once, each on its own connection.
    pub loops: usize,
    /// Whether the outcomes were written by one separate loop in batches of up to 1,000
    /// (as the worker's completer writes them) while the claim loops went on claiming,
    /// rather than by each claim loop after its own claim.
    pub pipelined: bool,
    /// Jobs per claim.
    pub batch: u32,
    /// Jobs processed.
    pub jobs: usize,
    /// Jobs per second.
    pub jobs_per_s: f64,
}

/// The physical ceiling of the worker's statements on this server: `loops` loops, each on
/// its own connection, each claiming `batch` jobs and writing their outcomes in one
/// statement, back to back with nothing around them, until `jobs` pre-enqueued no-op jobs
/// are done. The statements are exactly the worker's ([`Statement::Claim`] and
/// [`Statement::FinishMany`], unnamed with their parameter types, as the worker sends them).
///
/// [`Statement::Claim`]: skiplock::Statement::Claim
/// [`Statement::FinishMany`]: skiplock::Statement::FinishMany
pub async fn ceiling(
    url: &str,
    base: &str,
    jobs: usize,
    batch: u32,
    loops: usize,
) -> Result<CeilingPoint> {
    let loops = loops.max(1);
    let s = Scratch::new(url, base, "ceil", loops + 1).await?;
    s.fill(jobs).await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..loops {
        let client = s.client.clone();
        tasks.push(tokio::spawn(
            async move { ceiling_loop(client, batch).await },
        ));
    }
    let mut done = 0usize;
    for t in tasks {
        done += t.await.map_err(Error::task("a ceiling task"))??;
    }
    let secs = started.elapsed().as_secs_f64();
    s.drop_now().await?;
    Ok(CeilingPoint {
        loops,
        pipelined: false,
        batch,
        jobs: done,
        jobs_per_s: done as f64 / secs.max(1e-9),
    })
}

/// The ceiling with the worker's shape: `loops` claim loops, each on its own connection,
/// hand what they claim to one finishing loop on a connection of its own, which writes every
/// outcome that has arrived (up to the worker's default [`WorkerConfig::max_finish_batch`])
/// in one statement while the claim loops go on claiming. The same two statements as
/// [`ceiling`].
pub async fn ceiling_pipelined(
    url: &str,
    base: &str,
    jobs: usize,
    batch: u32,
    loops: usize,
) -> Result<CeilingPoint> {
    let max_finish = WorkerConfig::default().max_finish_batch;
    let loops = loops.max(1);
    let s = Scratch::new(url, base, "ceilp", loops + 2).await?;
    s.fill(jobs).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<(i64, i32)>>();
    let started = Instant::now();
    let mut claimers = Vec::new();
    for _ in 0..loops {
        let (client, tx) = (s.client.clone(), tx.clone());
        claimers.push(tokio::spawn(async move {
            const OP: &str = "run a pipelined ceiling claim loop";
            let conn = conn(&client, OP).await?;
            let claim = client.statement(skiplock::Statement::Claim);
            let limit = i64::from(batch);
            loop {
                let jobs = db::claim(&**conn, claim, QUEUE, limit, LEASE_US)
                    .await
                    .map_err(Error::db(OP))?;
                if jobs.is_empty() || tx.send(jobs).is_err() {
                    return Ok::<(), Error>(());
                }
            }
        }));
    }
    drop(tx);
    let client = s.client.clone();
    let finisher = tokio::spawn(async move {
        const OP: &str = "run the pipelined ceiling finish loop";
        let conn = conn(&client, OP).await?;
        let finish = client.statement(skiplock::Statement::FinishMany);
        let mut done = 0usize;
        while let Some(first) = rx.recv().await {
            let mut pending = first;
            while pending.len() < max_finish {
                match rx.try_recv() {
                    Ok(more) => pending.extend(more),
                    Err(_) => break,
                }
            }
            let results = db::finish_complete(&**conn, finish, &pending)
                .await
                .map_err(Error::db(OP))?;
            done += results.iter().filter(|r| *r == "written").count();
        }
        Ok::<usize, Error>(done)
    });
    for c in claimers {
        c.await.map_err(Error::task("a ceiling claim task"))??;
    }
    let done = finisher
        .await
        .map_err(Error::task("the ceiling finish task"))??;
    let secs = started.elapsed().as_secs_f64();
    s.drop_now().await?;
    Ok(CeilingPoint {
        loops,
        pipelined: true,
        batch,
        jobs: done,
        jobs_per_s: done as f64 / secs.max(1e-9),
    })
}

async fn ceiling_loop(client: Client, batch: u32) -> Result<usize> {
    const OP: &str = "run the ceiling loop";
    let conn = conn(&client, OP).await?;
    let claim = client.statement(skiplock::Statement::Claim);
    let finish = client.statement(skiplock::Statement::FinishMany);
    let limit = i64::from(batch);
    let mut done = 0;
    loop {
        let jobs = db::claim(&**conn, claim, QUEUE, limit, LEASE_US)
            .await
            .map_err(Error::db(OP))?;
        if jobs.is_empty() {
            return Ok(done);
        }
        let results = db::finish_complete(&**conn, finish, &jobs)
            .await
            .map_err(Error::db(OP))?;
        done += results.iter().filter(|r| *r == "written").count();
    }
}

/// One latency point.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LatencyPoint {
    /// Jobs enqueued per second.
    pub offered_per_s: f64,
    /// Whether the worker listened for notifications (else it polled every second).
    pub listen: bool,
    /// Jobs measured.
    pub jobs: usize,
    /// Enqueue-to-start latency percentiles, milliseconds, by the database's clock.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
}

/// How long a latency point offers its load before the jobs it measures: the pool's
/// connections open and the worker settles, in every mode alike.
const WARM_UP: Duration = Duration::from_secs(1);

/// A worker with default settings (or polling every second instead of listening) while jobs
/// are enqueued one per statement at `rate` per second, for a one-second warm-up and then for
/// `duration`; the jobs that start during the warm-up are not counted. Latency is the claim's
/// `now()` minus the enqueue's `now()`.
pub async fn latency(
    url: &str,
    base: &str,
    rate: f64,
    duration: Duration,
    listen: bool,
) -> Result<LatencyPoint> {
    let s = Scratch::new(url, base, "lat", 16).await?;
    let samples: Samples = Arc::default();
    let registry = recording_registry(samples.clone());
    let mut b = Worker::builder(s.client.clone(), registry).queue(QUEUE, 50);
    if !listen {
        b = b.listen(false).poll_interval(Some(Duration::from_secs(1)));
    }
    let worker = b.build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    let counted_from = offer_and_wait(&s.client, rate, duration, &samples).await?;
    let _ = stop.send(());
    let _ = handle.await;
    let v = counted(&samples, counted_from);
    s.drop_now().await?;
    Ok(LatencyPoint {
        offered_per_s: rate,
        listen,
        jobs: v.len(),
        p50_ms: pct(&v, 0.50),
        p95_ms: pct(&v, 0.95),
        p99_ms: pct(&v, 0.99),
    })
}

/// The floor of [`latency`]: the same paced enqueues, and instead of a worker one bare
/// connection (tokio-postgres, no pool, no library runtime) that LISTENs on the schema's
/// channel, waits on the queue all along (`jobs_wait`, so that every INSERT notifies it)
/// and, the moment a notification arrives, runs the worker's own claim
/// (`job_claim.sql`, batches of the worker's default `max_claim_batch`, prepared) until a claim comes back short, handing each
/// batch to a second connection that completes whatever it was handed in one
/// `job_complete_many.sql` (off the claim's path, as the worker's completer). Latency is the
/// claim's `now()` minus the enqueue's `now()`, as for the worker: what the queue's design
/// costs, without the library. The connections are made without TLS.
pub async fn latency_floor(
    url: &str,
    base: &str,
    rate: f64,
    duration: Duration,
) -> Result<LatencyPoint> {
    const OP: &str = "run the latency floor's LISTEN claimer";
    let s = Scratch::new(url, base, "latf", 10).await?;
    let (raw, mut connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(Error::db(
            "connect the latency floor's LISTEN connection (without TLS)",
        ))?;
    let (wake_tx, mut wake) = tokio::sync::mpsc::unbounded_channel::<()>();
    let pump = tokio::spawn(async move {
        while let Some(m) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match m {
                Ok(tokio_postgres::AsyncMessage::Notification(_)) => {
                    if wake_tx.send(()).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    raw.batch_execute(&format!("LISTEN {}", s.client.schema().channel_quoted()))
        .await
        .map_err(Error::db(OP))?;
    // It waits on the queue throughout, so that every INSERT notifies it (migration 15).
    raw.execute(
        &s.client.schema().render("SELECT {schema}.jobs_wait($1)"),
        &[&QUEUE],
    )
    .await
    .map_err(Error::db(OP))?;
    let claim = raw
        .prepare_typed(
            s.client.statement(skiplock::Statement::Claim),
            &[
                Type::TEXT,
                Type::INT8,
                Type::INT8,
                Type::INT2,
                Type::TIMESTAMPTZ,
                Type::INT8,
            ],
        )
        .await
        .map_err(Error::db(OP))?;
    // The completions go over a second connection, off the claim's path (as the worker's
    // completer does): the claimer never waits for a write before its next claim.
    let (writer, writer_conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(Error::db(OP))?;
    let writer_driver = tokio::spawn(async move {
        let _ = writer_conn.await;
    });
    let complete = writer
        .prepare_typed(
            s.client.statement(skiplock::Statement::CompleteMany),
            &[
                Type::INT8_ARRAY,
                Type::INT4_ARRAY,
                Type::TEXT_ARRAY,
                Type::BOOL,
            ],
        )
        .await
        .map_err(Error::db(OP))?;
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(Vec<i64>, Vec<i32>)>();
    let completer = tokio::spawn(async move {
        while let Some((mut ids, mut attempts)) = done_rx.recv().await {
            // Everything that arrived meanwhile, in one statement.
            while let Ok((i, a)) = done_rx.try_recv() {
                ids.extend(i);
                attempts.extend(a);
            }
            let outputs: Vec<Option<&str>> = vec![None; ids.len()];
            writer
                .query(&complete, &[&ids, &attempts, &outputs, &false])
                .await
                .map_err(Error::db(OP))?;
        }
        Ok::<(), Error>(())
    });
    let samples: Samples = Arc::default();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let claimer = {
        let samples = samples.clone();
        tokio::spawn(async move {
            let batch = i64::from(WorkerConfig::default().max_claim_batch);
            loop {
                tokio::select! {
                    w = wake.recv() => if w.is_none() { break },
                    _ = &mut stopped => break,
                }
                while wake.try_recv().is_ok() {}
                loop {
                    let rows = raw
                        .query(
                            &claim,
                            &[
                                &QUEUE,
                                &batch,
                                &LEASE_US,
                                &db::FRONT.0,
                                &db::FRONT.1,
                                &db::FRONT.2,
                            ],
                        )
                        .await
                        .map_err(Error::db(OP))?;
                    let now = Instant::now();
                    let mut ids = Vec::with_capacity(rows.len());
                    let mut attempts = Vec::with_capacity(rows.len());
                    {
                        let mut v = samples.lock().unwrap_or_else(|p| p.into_inner());
                        for r in &rows {
                            let created: std::time::SystemTime =
                                r.try_get("created_at").map_err(Error::db(OP))?;
                            let until: std::time::SystemTime =
                                r.try_get("locked_until").map_err(Error::db(OP))?;
                            let claimed = until
                                .checked_sub(Duration::from_micros(LEASE_US.unsigned_abs()))
                                .unwrap_or(until);
                            let ms = claimed
                                .duration_since(created)
                                .unwrap_or(Duration::ZERO)
                                .as_secs_f64()
                                * 1000.0;
                            v.push((now, ms));
                            ids.push(r.try_get::<_, i64>("id").map_err(Error::db(OP))?);
                            attempts.push(r.try_get::<_, i32>("attempts").map_err(Error::db(OP))?);
                        }
                    }
                    if !ids.is_empty() && done_tx.send((ids, attempts)).is_err() {
                        break;
                    }
                    if rows.len() < 100 {
                        break;
                    }
                }
            }
            Ok::<(), Error>(())
        })
    };
    let counted_from = offer_and_wait(&s.client, rate, duration, &samples).await?;
    let _ = stop.send(());
    let ended = claimer
        .await
        .map_err(Error::task("the latency floor's claimer"));
    pump.abort();
    // The claimer's end dropped the completions' sender: the completer ends once its last
    // batch is written.
    let written = completer
        .await
        .map_err(Error::task("the latency floor's completer"));
    writer_driver.abort();
    let v = counted(&samples, counted_from);
    s.drop_now().await?;
    ended??;
    written??;
    Ok(LatencyPoint {
        offered_per_s: rate,
        listen: true,
        jobs: v.len(),
        p50_ms: pct(&v, 0.50),
        p95_ms: pct(&v, 0.95),
        p99_ms: pct(&v, 0.99),
    })
}

/// After the consumer had a moment to start: enqueues at `rate` for the warm-up and
/// `duration` ([`offer`]), then waits up to 10 s for the last jobs to start. Returns the
/// instant from which samples count (the end of the warm-up).
async fn offer_and_wait(
    client: &Client,
    rate: f64,
    duration: Duration,
    samples: &Samples,
) -> Result<Instant> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counted_from = Instant::now() + WARM_UP;
    let enqueued = offer(client, rate, WARM_UP + duration).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while samples.lock().unwrap_or_else(|p| p.into_inner()).len() < enqueued
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(counted_from)
}

/// The latencies of the samples taken from `from` on, sorted.
fn counted(samples: &Samples, from: Instant) -> Vec<f64> {
    let mut v: Vec<f64> = samples
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|s| s.0 >= from)
        .map(|s| s.1)
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Enqueues at `rate` per second for `duration`, one statement per job, evenly paced: job `k`
/// is due at `k / rate` seconds, and up to 8 tasks take turns (task `i` sends jobs `i`,
/// `i + tasks`, ...), so that one slow enqueue does not hold back the ones after it. Returns
/// how many were enqueued.
async fn offer(client: &Client, rate: f64, duration: Duration) -> Result<usize> {
    let tasks: usize = if rate > 400.0 { 8 } else { 1 };
    let total = (duration.as_secs_f64() * rate) as usize;
    let started = tokio::time::Instant::now();
    let mut handles = Vec::new();
    for first in 0..tasks {
        let client = client.clone();
        handles.push(tokio::spawn(async move {
            let mut sent = 0usize;
            for k in (first..total).step_by(tasks) {
                tokio::time::sleep_until(started + Duration::from_secs_f64(k as f64 / rate)).await;
                client
                    .enqueue(&NewJob::from_json("noop", "{}").queue(QUEUE))
                    .await?;
                sent += 1;
            }
            Ok::<usize, skiplock::Error>(sent)
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.map_err(Error::task("an enqueue task"))??;
    }
    Ok(total)
}

/// One enqueue point.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EnqueuePoint {
    /// `single` (one transaction per job, one connection), `single x8` (eight connections),
    /// `batch 1000`, `batch 10000`.
    pub mode: String,
    /// Jobs enqueued per run.
    pub jobs: usize,
    /// Jobs per second of the fastest run.
    pub jobs_per_s: f64,
    /// Jobs per second of every run, in the order they ran.
    pub runs: Vec<f64>,
}

/// How one enqueue mode sends its jobs.
#[derive(Debug, Clone, Copy)]
enum EnqueueMode {
    /// One statement (and transaction) per job, on `tasks` connections taking turns.
    Single { tasks: usize },
    /// `enqueue_many` calls of this many jobs.
    Batch(usize),
}

impl EnqueueMode {
    fn label(self) -> String {
        match self {
            EnqueueMode::Single { tasks: 1 } => "single".into(),
            EnqueueMode::Single { tasks } => format!("single x{tasks}"),
            EnqueueMode::Batch(size) => format!("batch {size}"),
        }
    }

    /// The jobs one run enqueues: a tenth of `jobs` one at a time (at least 100), `jobs` in
    /// batches (whole batches, at least one).
    fn jobs(self, jobs: usize) -> usize {
        match self {
            EnqueueMode::Single { tasks } => ((jobs / 10).max(100) / tasks).max(1) * tasks,
            EnqueueMode::Batch(size) => (jobs / size).max(1) * size,
        }
    }

    /// Enqueues [`EnqueueMode::jobs`] no-op jobs.
    async fn run(self, client: &Client, job: &NewJob, jobs: usize) -> Result<()> {
        match self {
            EnqueueMode::Single { tasks } => {
                let mut handles = Vec::new();
                for _ in 0..tasks {
                    let client = client.clone();
                    let job = job.clone();
                    handles.push(tokio::spawn(async move {
                        for _ in 0..jobs / tasks {
                            client.enqueue(&job).await?;
                        }
                        Ok::<(), skiplock::Error>(())
                    }));
                }
                for h in handles {
                    h.await.map_err(Error::task("an enqueue task"))??;
                }
            }
            EnqueueMode::Batch(size) => {
                let batch: Vec<NewJob> = (0..size).map(|_| job.clone()).collect();
                for _ in 0..jobs / size {
                    client.enqueue_many(&batch).await?;
                }
            }
        }
        Ok(())
    }
}

/// Enqueue rates: single-row transactions on one and on eight connections, and the batch path
/// (calls of 1,000 and of 10,000 jobs), each `rounds` times, the modes taking turns (so that a
/// drift of the machine hits them alike), the jobs table emptied (`TRUNCATE`) and a
/// [`checkpoint`] taken before each run.
pub async fn enqueue(
    url: &str,
    base: &str,
    jobs: usize,
    rounds: usize,
) -> Result<Vec<EnqueuePoint>> {
    const OP: &str = "empty the bench tables";
    let modes = [
        EnqueueMode::Single { tasks: 1 },
        EnqueueMode::Single { tasks: 8 },
        EnqueueMode::Batch(1_000),
        EnqueueMode::Batch(10_000),
    ];
    let s = Scratch::new(url, base, "enq", 10).await?;
    let job = NewJob::from_json("noop", "{\"n\": 1}").queue(QUEUE);
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let measured = async {
        for _ in 0..rounds.max(1) {
            for (i, mode) in modes.iter().enumerate() {
                s.execute(Statement::BenchTruncate, OP).await?;
                // As before every timed run: no checkpoint begins while this one is timed.
                checkpoint(&s.client).await?;
                let n = mode.jobs(jobs);
                let started = Instant::now();
                mode.run(&s.client, &job, n).await?;
                runs[i].push(n as f64 / started.elapsed().as_secs_f64().max(1e-9));
            }
        }
        Ok::<(), Error>(())
    }
    .await;
    s.drop_now().await?;
    measured?;
    Ok(modes
        .iter()
        .zip(runs)
        .map(|(mode, runs)| EnqueuePoint {
            mode: mode.label(),
            jobs: mode.jobs(jobs),
            jobs_per_s: runs.iter().copied().fold(0.0, f64::max),
            runs,
        })
        .collect())
}

/// One history point.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HistoryPoint {
    /// Finished rows kept in the table.
    pub finished_rows: i64,
    /// Claim-and-complete round trips measured.
    pub claims: usize,
    /// Median claim latency, milliseconds.
    pub claim_p50_ms: f64,
    /// 99th percentile.
    pub claim_p99_ms: f64,
}

/// Claim latency (one job per claim, then its completion) with `rows` finished jobs kept in
/// the table, for each size in `sizes`.
pub async fn history(
    url: &str,
    base: &str,
    sizes: &[i64],
    claims: usize,
) -> Result<Vec<HistoryPoint>> {
    const OP: &str = "run the history benchmark";
    let mut out = Vec::new();
    for &rows in sizes {
        let s = Scratch::new(url, base, "hist", 4).await?;
        {
            let conn = conn(&s.client, OP).await?;
            let fill = s.sql(Statement::BenchFillHistory);
            let mut left = rows;
            while left > 0 {
                let n = left.min(1_000_000);
                conn.execute_typed(&fill, &[(&n, Type::INT8)])
                    .await
                    .map_err(Error::db(OP))?;
                left -= n;
            }
        }
        s.fill(claims).await?;
        let conn = conn(&s.client, OP).await?;
        let claim = s.client.statement(skiplock::Statement::Claim);
        let finish = s.client.statement(skiplock::Statement::FinishMany);
        let mut lat = Vec::with_capacity(claims);
        for _ in 0..claims {
            let started = Instant::now();
            let jobs = db::claim(&**conn, claim, QUEUE, 1, LEASE_US)
                .await
                .map_err(Error::db(OP))?;
            lat.push(started.elapsed().as_secs_f64() * 1000.0);
            for (id, attempt) in jobs {
                let _ = db::complete(&**conn, finish, id, attempt)
                    .await
                    .map_err(Error::db(OP))?;
            }
        }
        drop(conn);
        s.drop_now().await?;
        lat.sort_by(f64::total_cmp);
        out.push(HistoryPoint {
            finished_rows: rows,
            claims,
            claim_p50_ms: pct(&lat, 0.5),
            claim_p99_ms: pct(&lat, 0.99),
        });
    }
    Ok(out)
}

/// The dead-tuple bounds the footprint scenario checks: the steady median, and the most at
/// any time (and what must hold again within a minute after a held snapshot ends).
pub const FOOTPRINT_MEDIAN_BOUND: i64 = 2_000;
/// See [`FOOTPRINT_MEDIAN_BOUND`].
pub const FOOTPRINT_MAX_BOUND: i64 = 6_000;

/// One footprint phase.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FootprintPoint {
    /// `steady`, or with a bystander: `before`, `during`, `after`.
    pub phase: String,
    /// Offered jobs per second.
    pub rate: f64,
    /// How long the phase ran.
    pub seconds: f64,
    /// Jobs started in the phase.
    pub jobs: usize,
    /// Jobs started per second in the phase.
    pub jobs_per_s: f64,
    /// Dead tuples of the jobs table, sampled each second: median and maximum.
    pub dead_median: i64,
    /// Maximum.
    pub dead_max: i64,
    /// Seconds from the phase's start (for `after`: the bystander's end) to the first sample
    /// at or under [`FOOTPRINT_MAX_BOUND`], if one came.
    pub under_max_bound_s: Option<f64>,
    /// The same for [`FOOTPRINT_MEDIAN_BOUND`].
    pub under_median_bound_s: Option<f64>,
    /// Table size with indexes at the end of the phase, bytes.
    pub table_bytes: i64,
    /// WAL bytes per job in the phase.
    pub wal_bytes_per_job: f64,
    /// Transactions (committed or rolled back, whole database) per job in the phase.
    pub transactions_per_job: f64,
    /// Enqueue-to-start latency in the phase, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
}

/// One second of a footprint run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Tick {
    /// Seconds from the first phase's start to this sample.
    pub t_s: f64,
    /// The phase it belongs to.
    pub phase: String,
    /// Dead tuples of the jobs table (the statistics system's count).
    pub dead: i64,
    /// Table size with indexes, bytes.
    pub table_bytes: i64,
    /// Jobs started since the previous sample (or the phase's start).
    pub started: usize,
    /// Their enqueue-to-start latency, milliseconds: median (0 when none started).
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
}

/// A footprint run: each phase, and a sample each second.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Footprint {
    /// Each phase, in order.
    pub phases: Vec<FootprintPoint>,
    /// A sample each second, through every phase.
    pub timeline: Vec<Tick>,
}

/// A worker with default settings (its vacuum service included) at a steady `rate`, through
/// `phases` (name, length) one after the other, each reported on its own, sampled each second
/// (the [`Footprint::timeline`]). Through a phase named `during`, a bystander `REPEATABLE READ`
/// transaction stays open (it read once), holding back vacuum; it ends as the next phase
/// starts.
pub async fn footprint(
    url: &str,
    base: &str,
    rate: f64,
    phases: &[(&str, Duration)],
) -> Result<Footprint> {
    const OP: &str = "run the footprint benchmark";
    let s = Scratch::new(url, base, "foot", 16).await?;
    let samples: Samples = Arc::default();
    let registry = recording_registry(samples.clone());
    let worker = Worker::builder(s.client.clone(), registry)
        .queue(QUEUE, 50)
        .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    let counters_conn = conn(&s.client, OP).await?;
    let schema = s.client.schema().name().to_owned();
    let counters_sql = s.sql(Statement::BenchCounters);
    let counters = |c: &tokio_postgres::Row| -> Result<(i64, i64, i64, i64)> {
        Ok((
            c.try_get(0).map_err(Error::db(OP))?,
            c.try_get(1).map_err(Error::db(OP))?,
            c.try_get(2).map_err(Error::db(OP))?,
            c.try_get(3).map_err(Error::db(OP))?,
        ))
    };
    let read = || async {
        counters_conn
            .query_typed_one(&counters_sql, &[(&schema, Type::TEXT)])
            .await
            .map_err(Error::db(OP))
    };
    let mut out = Vec::new();
    let mut timeline = Vec::new();
    let run_started = Instant::now();
    let mut held: Option<Bystander> = None;
    for &(phase, len) in phases {
        if let Some((release, h)) = held.take() {
            let _ = release.send(());
            let _ = h.await;
        }
        if phase == "during" {
            // The bystander: a REPEATABLE READ transaction that reads once and stays open.
            let (release, released) = tokio::sync::oneshot::channel::<()>();
            let (url, statement, schema) = (url.to_owned(), counters_sql.clone(), schema.clone());
            let (opened_tx, opened) = tokio::sync::oneshot::channel::<()>();
            let h = tokio::spawn(async move {
                let (mut c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                let tx = c
                    .build_transaction()
                    .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                    .start()
                    .await?;
                tx.query_typed(&statement, &[(&schema, Type::TEXT)]).await?;
                let _ = opened_tx.send(());
                let _ = released.await;
                tx.commit().await
            });
            let _ = opened.await;
            held = Some((release, h));
        }
        let (wal0, tx0, _, _) = counters(&read().await?)?;
        let started = Instant::now();
        let from = samples.lock().unwrap_or_else(|p| p.into_inner()).len();
        let sampler = async {
            let mut dead = Vec::new();
            let mut ticks = Vec::new();
            let mut seen = from;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while started.elapsed() < len {
                tick.tick().await;
                if let Ok(row) = read().await {
                    if let Ok((_, _, d, bytes)) = counters(&row) {
                        dead.push((started.elapsed().as_secs_f64(), d));
                        let mut lat: Vec<f64> = {
                            let all = samples.lock().unwrap_or_else(|p| p.into_inner());
                            let now = all.len();
                            let window = all[seen.min(now)..].iter().map(|s| s.1).collect();
                            seen = now;
                            window
                        };
                        lat.sort_by(f64::total_cmp);
                        ticks.push(Tick {
                            t_s: run_started.elapsed().as_secs_f64(),
                            phase: phase.to_owned(),
                            dead: d,
                            table_bytes: bytes,
                            started: lat.len(),
                            p50_ms: pct(&lat, 0.5),
                            p99_ms: pct(&lat, 0.99),
                        });
                    }
                }
            }
            (dead, ticks)
        };
        let (sent, (dead_samples, ticks)) = tokio::join!(offer(&s.client, rate, len), sampler);
        let _ = sent?;
        timeline.extend(ticks);
        let (wal1, tx1, _, bytes) = counters(&read().await?)?;
        let mut lat: Vec<f64> = samples.lock().unwrap_or_else(|p| p.into_inner())[from..]
            .iter()
            .map(|s| s.1)
            .collect();
        lat.sort_by(f64::total_cmp);
        let under = |bound: i64| {
            dead_samples
                .iter()
                .find(|(_, d)| *d <= bound)
                .map(|(t, _)| *t)
        };
        let mut dead: Vec<i64> = dead_samples.iter().map(|(_, d)| *d).collect();
        dead.sort_unstable();
        let jobs = lat.len();
        let seconds = started.elapsed().as_secs_f64();
        out.push(FootprintPoint {
            phase: phase.to_owned(),
            rate,
            seconds,
            jobs,
            jobs_per_s: jobs as f64 / seconds.max(1e-9),
            dead_median: dead.get(dead.len() / 2).copied().unwrap_or(0),
            dead_max: dead.last().copied().unwrap_or(0),
            under_max_bound_s: under(FOOTPRINT_MAX_BOUND),
            under_median_bound_s: under(FOOTPRINT_MEDIAN_BOUND),
            table_bytes: bytes,
            wal_bytes_per_job: (wal1 - wal0) as f64 / jobs.max(1) as f64,
            transactions_per_job: (tx1 - tx0) as f64 / jobs.max(1) as f64,
            p50_ms: pct(&lat, 0.5),
            p99_ms: pct(&lat, 0.99),
        });
    }
    if let Some((release, h)) = held.take() {
        let _ = release.send(());
        let _ = h.await;
    }
    drop(counters_conn);
    let _ = stop.send(());
    let _ = handle.await;
    s.drop_now().await?;
    Ok(Footprint {
        phases: out,
        timeline,
    })
}

/// One point of the many-processes scenario.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProcessesPoint {
    /// Worker processes.
    pub processes: usize,
    /// Queue concurrency of each.
    pub concurrency: usize,
    /// Jobs in the queue at the start, all done at the end.
    pub jobs: usize,
    /// Jobs done by the processes (the probe's claims aside).
    pub done: u64,
    /// All jobs over the time from spawning the processes to the last one's exit.
    pub jobs_per_s: f64,
    /// Claims the probe timed.
    pub claims: usize,
    /// Claim latency beside the workers (one job per claim, every 10 ms), milliseconds.
    pub claim_p50_ms: f64,
    /// 99th percentile.
    pub claim_p99_ms: f64,
}

/// For each `(processes, concurrency)` in `splits`: a queue of `jobs` no-op jobs, drained by
/// that many worker processes (`program work --queue bench=CONCURRENCY --drain --json`, the
/// URL in `DATABASE_URL`), each with that queue concurrency and default settings. Beside
/// them, a probe on its own connection claims one job every 10 ms, timing the claim
/// statement, and completes it: claim latency under that much contention.
pub async fn processes(
    url: &str,
    base: &str,
    program: &std::path::Path,
    splits: &[(usize, usize)],
    jobs: usize,
) -> Result<Vec<ProcessesPoint>> {
    const OP: &str = "run the processes benchmark";
    let mut out = Vec::new();
    for &(n, concurrency) in splits {
        let s = Scratch::new(url, base, "procs", 2).await?;
        s.fill(jobs).await?;
        let started = Instant::now();
        let mut children = Vec::new();
        for _ in 0..n {
            let child = std::process::Command::new(program)
                .env("DATABASE_URL", url)
                .args(["--schema", s.client.schema().name(), "work", "--queue"])
                .arg(format!("{QUEUE}={concurrency}"))
                .args(["--drain", "--json"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(Error::process(format!(
                    "cannot start {}",
                    program.display()
                )))?;
            children.push(tokio::task::spawn_blocking(move || {
                child.wait_with_output()
            }));
        }
        let probe = async {
            let conn = conn(&s.client, OP).await?;
            let claim = s.client.statement(skiplock::Statement::Claim);
            let finish = s.client.statement(skiplock::Statement::FinishMany);
            let mut lat = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            loop {
                tick.tick().await;
                let t = Instant::now();
                let claimed = db::claim(&**conn, claim, QUEUE, 1, LEASE_US)
                    .await
                    .map_err(Error::db(OP))?;
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                let Some(&(id, attempt)) = claimed.first() else {
                    return Ok::<_, Error>(lat);
                };
                lat.push(ms);
                let _ = db::complete(&**conn, finish, id, attempt)
                    .await
                    .map_err(Error::db(OP))?;
            }
        };
        let (lat, outputs) = tokio::join!(probe, futures_util::future::join_all(children));
        let mut lat = lat?;
        let mut done = 0u64;
        for o in outputs {
            let o = o
                .map_err(Error::task("waiting for a worker process"))?
                .map_err(Error::process("a worker process".to_owned()))?;
            if !o.status.success() {
                return Err(Error::Process {
                    what: format!("a worker process ended with {}", o.status),
                    source: None,
                });
            }
            done += String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter_map(|v| v.get("done").and_then(serde_json::Value::as_u64))
                .sum::<u64>();
        }
        let secs = started.elapsed().as_secs_f64();
        s.drop_now().await?;
        lat.sort_by(f64::total_cmp);
        out.push(ProcessesPoint {
            processes: n,
            concurrency,
            jobs,
            done,
            jobs_per_s: jobs as f64 / secs.max(1e-9),
            claims: lat.len(),
            claim_p50_ms: pct(&lat, 0.5),
            claim_p99_ms: pct(&lat, 0.99),
        });
    }
    Ok(out)
}

/// A bystander transaction: release it, then join it.
type Bystander = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::result::Result<(), tokio_postgres::Error>>,
);

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The jobs of the workflow scenario: plain jobs, or one workflow of a given shape. Every job
/// is a no-op job of the bench queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlowShape {
    /// Independent jobs, enqueued with [`Client::enqueue_many`] (10,000 per call): no
    /// workflow.
    Plain {
        /// How many.
        jobs: usize,
    },
    /// One workflow of independent jobs (no edge), through [`Client::enqueue_workflow`].
    Unlinked {
        /// How many.
        jobs: usize,
    },
    /// One workflow: a parent, and `children` jobs each after it.
    FanOut {
        /// Jobs after the parent.
        children: usize,
    },
    /// One workflow of `chains` chains of `length` jobs, each job after the previous one of
    /// its chain (added chain after chain).
    Chains {
        /// How many chains.
        chains: usize,
        /// Jobs in each.
        length: usize,
    },
}

impl FlowShape {
    /// Jobs in all.
    pub fn jobs(self) -> usize {
        match self {
            FlowShape::Plain { jobs } | FlowShape::Unlinked { jobs } => jobs,
            FlowShape::FanOut { children } => children + 1,
            FlowShape::Chains { chains, length } => chains * length,
        }
    }

    /// The most jobs that must run one after the other (the longest path): 1 for independent
    /// jobs, 2 for a fan-out, a chain's length.
    pub fn links(self) -> usize {
        match self {
            FlowShape::Plain { .. } | FlowShape::Unlinked { .. } => 1,
            FlowShape::FanOut { children } => 1 + usize::from(children > 0),
            FlowShape::Chains { length, .. } => length,
        }
    }

    /// A short name for machine-readable output: `plain`, `no-edges`, `fan-out`, `chains`.
    pub fn name(self) -> &'static str {
        match self {
            FlowShape::Plain { .. } => "plain",
            FlowShape::Unlinked { .. } => "no-edges",
            FlowShape::FanOut { .. } => "fan-out",
            FlowShape::Chains { .. } => "chains",
        }
    }

    /// The client call that enqueues it: `enqueue_many` or `enqueue_workflow`.
    pub fn call(self) -> &'static str {
        match self {
            FlowShape::Plain { .. } => "enqueue_many",
            _ => "enqueue_workflow",
        }
    }

    /// What it is, in words (`fan-out: 1 parent, 9999 children`).
    pub fn describe(self) -> String {
        match self {
            FlowShape::Plain { jobs } => format!("{jobs} plain jobs"),
            FlowShape::Unlinked { jobs } => format!("workflow of {jobs} jobs, no edges"),
            FlowShape::FanOut { children } => format!("fan-out: 1 parent, {children} children"),
            FlowShape::Chains { chains: 1, length } => format!("chain of {length}"),
            FlowShape::Chains { chains, length } => format!("{chains} chains of {length}"),
        }
    }

    /// Its jobs, built (outside any timing); with `keys` > 0, spread evenly over that many
    /// keys, as [`WorkerSetup::keys`].
    fn build(self, keys: usize) -> Result<Built> {
        let job = |i: usize| {
            let j = NewJob::from_json("noop", "{}").queue(QUEUE);
            if keys > 0 {
                j.key(format!("k{}", i % keys))
            } else {
                j
            }
        };
        if self.jobs() == 0 {
            return Err(Error::invalid("workflow shape", "it has no job"));
        }
        if !matches!(self, FlowShape::Plain { .. }) && self.jobs() > skiplock::Workflow::MAX_JOBS {
            return Err(Error::invalid(
                "workflow shape",
                format!(
                    "{} jobs; one workflow holds at most {}",
                    self.jobs(),
                    skiplock::Workflow::MAX_JOBS
                ),
            ));
        }
        let mut flow = skiplock::Workflow::new();
        match self {
            FlowShape::Plain { jobs } => return Ok(Built::Plain((0..jobs).map(job).collect())),
            FlowShape::Unlinked { jobs } => {
                for i in 0..jobs {
                    flow.add(job(i));
                }
            }
            FlowShape::FanOut { children } => {
                let parent = flow.add(job(0));
                for i in 1..=children {
                    flow.add_after(job(i), &[parent]);
                }
            }
            FlowShape::Chains { chains, length } => {
                for c in 0..chains {
                    let mut prev: Option<skiplock::Step> = None;
                    for k in 0..length {
                        let j = job(c * length + k);
                        prev = Some(match prev {
                            None => flow.add(j),
                            Some(p) => flow.add_after(j, &[p]),
                        });
                    }
                }
            }
        }
        Ok(Built::Flow(flow))
    }
}

/// A shape's jobs, ready to enqueue.
enum Built {
    Plain(Vec<NewJob>),
    Flow(skiplock::Workflow),
}

impl Built {
    /// Enqueues them: one `enqueue_workflow` call, or `enqueue_many` calls of up to 10,000.
    async fn enqueue(&self, client: &Client) -> Result<usize> {
        Ok(match self {
            Built::Plain(jobs) => {
                let mut n = 0;
                for chunk in jobs.chunks(10_000) {
                    n += client.enqueue_many(chunk).await?.len();
                }
                n
            }
            Built::Flow(flow) => client.enqueue_workflow(flow).await?.len(),
        })
    }
}

/// One shape of the workflow scenario's enqueue part.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FlowEnqueuePoint {
    /// What was enqueued.
    pub shape: FlowShape,
    /// How long each call took, milliseconds, in the order they ran.
    pub runs_ms: Vec<f64>,
    /// The fastest of them.
    pub best_ms: f64,
    /// Jobs per second of the fastest.
    pub jobs_per_s: f64,
}

/// Each shape of `shapes` enqueued in one call (plain jobs: [`Client::enqueue_many`], the
/// others one [`Client::enqueue_workflow`]), `rounds` times, the shapes taking turns (so
/// that a drift of the machine hits them alike), the jobs and edges tables emptied
/// (`TRUNCATE`) and a [`checkpoint`] taken before each call. The jobs are built beforehand;
/// the call's time includes its own encoding (the workflow's JSON, the batch's arrays).
pub async fn workflow_enqueue(
    url: &str,
    base: &str,
    shapes: &[FlowShape],
    rounds: usize,
) -> Result<Vec<FlowEnqueuePoint>> {
    const OP: &str = "empty the bench tables";
    let built = shapes
        .iter()
        .map(|s| s.build(0))
        .collect::<Result<Vec<_>>>()?;
    let s = Scratch::new(url, base, "flowenq", 2).await?;
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
    let measured = async {
        for _ in 0..rounds.max(1) {
            for (i, b) in built.iter().enumerate() {
                s.execute(Statement::BenchTruncate, OP).await?;
                checkpoint(&s.client).await?;
                let started = Instant::now();
                let n = b.enqueue(&s.client).await?;
                runs[i].push(started.elapsed().as_secs_f64() * 1000.0);
                if n != shapes[i].jobs() {
                    return Err(Error::Incomplete {
                        what: format!(
                            "{}: {n} ids back for {} jobs",
                            shapes[i].describe(),
                            shapes[i].jobs()
                        ),
                    });
                }
            }
        }
        Ok(())
    }
    .await;
    s.drop_now().await?;
    measured?;
    Ok(shapes
        .iter()
        .zip(runs)
        .map(|(shape, runs_ms)| {
            let best_ms = runs_ms.iter().copied().fold(f64::INFINITY, f64::min);
            FlowEnqueuePoint {
                shape: *shape,
                jobs_per_s: shape.jobs() as f64 / (best_ms / 1000.0).max(1e-9),
                best_ms,
                runs_ms,
            }
        })
        .collect())
}

/// One workflow throughput run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FlowThroughputPoint {
    /// What ran.
    pub shape: FlowShape,
    /// The worker's setup.
    pub setup: WorkerSetup,
    /// From the worker's start to the last outcome written, seconds.
    pub seconds: f64,
    /// Jobs per second over that time.
    pub jobs_per_s: f64,
    /// The time over [`FlowShape::links`]: for a chain, the mean time from one job's start
    /// to the next one's (its outcome written, the next job released and woken for,
    /// claimed, run), milliseconds.
    pub ms_per_link: f64,
}

/// A worker makes no progress for this long: the run has failed.
const FLOW_STALL: Duration = Duration::from_secs(60);

/// The jobs of `shape`, enqueued (and the table vacuumed and analyzed) beforehand, through
/// one worker set up as `setup` ([`Worker::run`], serving, so that jobs released by their
/// parents' outcomes are woken for by their notifications as in production): the time from
/// the worker's start until its count of jobs done (counted as their outcomes are written)
/// reaches the shape's jobs. Any job that does not end done fails the run.
pub async fn workflow_throughput(
    url: &str,
    base: &str,
    shape: FlowShape,
    setup: &WorkerSetup,
) -> Result<FlowThroughputPoint> {
    let jobs = shape.jobs();
    let built = shape.build(setup.keys)?;
    let s = Scratch::new(url, base, "flow", 4).await?;
    let measured = async {
        if setup.frozen_statistics {
            s.freeze_statistics().await?;
        }
        let n = built.enqueue(&s.client).await?;
        if n != jobs {
            return Err(Error::Incomplete {
                what: format!("{}: {n} ids back for {jobs} jobs", shape.describe()),
            });
        }
        drop(built);
        s.vacuum().await?;
        if let Some(l) = setup.limits {
            s.client
                .set_queue_limits(QUEUE, l, Some("skiplock-bench"))
                .await?;
        }
        let worker = Worker::builder(s.worker_client(url, setup)?, noop_registry())
            .queue(QUEUE, setup.concurrency)
            .config(setup.config())
            .build()?;
        let stats = worker.stats_handle();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let started = Instant::now();
        let handle = tokio::spawn(worker.run(async {
            let _ = stopped.await;
        }));
        let waited = wait_done(&stats, jobs, &handle, &shape).await;
        let seconds = started.elapsed().as_secs_f64();
        let _ = stop.send(());
        let ran = handle.await.map_err(Error::task("the worker"));
        waited?;
        ran??;
        Ok(seconds)
    }
    .await;
    s.drop_now().await?;
    let seconds = measured?;
    Ok(FlowThroughputPoint {
        shape,
        setup: setup.clone(),
        seconds,
        jobs_per_s: jobs as f64 / seconds.max(1e-9),
        ms_per_link: seconds * 1000.0 / shape.links().max(1) as f64,
    })
}

/// Waits until the worker has written `jobs` outcomes `done` (looking every millisecond);
/// fails if any attempt ended otherwise, if the worker stopped, or if nothing ended for
/// [`FLOW_STALL`].
async fn wait_done<T>(
    stats: &skiplock::StatsHandle,
    jobs: usize,
    worker: &tokio::task::JoinHandle<T>,
    shape: &FlowShape,
) -> Result<()> {
    let mut last = (0u64, Instant::now());
    loop {
        let st = stats.snapshot();
        if st.done >= jobs as u64 {
            return Ok(());
        }
        let stuck = last.1.elapsed() >= FLOW_STALL;
        if st.retried + st.failed + st.snoozed + st.handed_back + st.lost > 0
            || worker.is_finished()
            || stuck
        {
            return Err(Error::Incomplete {
                what: format!(
                    "{}: {} of {jobs} jobs done{} ({st:?})",
                    shape.describe(),
                    st.done,
                    if stuck {
                        format!(", none for {} s", FLOW_STALL.as_secs())
                    } else if worker.is_finished() {
                        ", and the worker stopped".to_owned()
                    } else {
                        String::new()
                    }
                ),
            });
        }
        if st.done != last.0 {
            last = (st.done, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
