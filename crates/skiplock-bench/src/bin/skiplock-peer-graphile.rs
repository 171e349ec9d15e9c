//! The peer of `skiplock bench peers`: graphile_worker (the Rust crate, as published) draining
//! pre-enqueued no-op jobs on the same cluster, so that the two queues are measured in one
//! run. Built only with the bench crate's `peers` feature (`scripts/bench.sh` builds it), so
//! that neither the library nor the installed `skiplock` command carries any of it.
//!
//! ```text
//! skiplock-peer-graphile URL SCHEMA JOBS CONCURRENCY LOCAL_QUEUE BATCH_DELAY_MS POLL_MS
//! ```
//!
//! Installs graphile_worker into SCHEMA (a new schema, dropped at the end), enqueues JOBS no-op
//! jobs in one statement (its own `add_jobs`), then runs a worker of CONCURRENCY (with a local
//! queue of LOCAL_QUEUE jobs, completions batched for BATCH_DELAY_MS and a poll every POLL_MS,
//! each left at graphile_worker's default when 0) until its jobs table is empty, and prints
//! one JSON line:
//! `{"jobs": N, "seconds": S, "jobs_per_s": R}`, timed from the worker's start to the empty
//! table (wall time, start-up and drain detection included, as skiplock's worker figures).

use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `skiplock` command's allocator, so that the two queues' processes differ in the queue,
/// not in how they allocate.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use graphile_worker::{
    IntoTaskHandlerResult, LocalQueueConfig, TaskHandler, Worker, WorkerContext, WorkerOptions,
};
use serde::{Deserialize, Serialize};

#[derive(Deserialize, Serialize)]
struct Noop {}

impl TaskHandler for Noop {
    const IDENTIFIER: &'static str = "noop";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {}
}

type Failure = Box<dyn std::error::Error + Send + Sync>;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, Failure> {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("usage: skiplock-peer-graphile URL SCHEMA JOBS CONCURRENCY LOCAL_QUEUE BATCH_DELAY_MS POLL_MS ({what} missing or not valid)").into())
}

async fn run(args: &[String]) -> Result<(), Failure> {
    let url: String = arg(args, 1, "URL")?;
    let schema: String = arg(args, 2, "SCHEMA")?;
    let jobs: i64 = arg(args, 3, "JOBS")?;
    let concurrency: usize = arg(args, 4, "CONCURRENCY")?;
    let local_queue: usize = arg(args, 5, "LOCAL_QUEUE")?;
    let batch_delay_ms: u64 = arg(args, 6, "BATCH_DELAY_MS")?;
    let poll_ms: u64 = arg(args, 7, "POLL_MS")?;
    if schema.is_empty()
        || !schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err("SCHEMA: lower-case letters, digits and _ only".into());
    }
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut options = WorkerOptions::default()
        .concurrency(concurrency)
        .schema(&schema)
        .define_job::<Noop>()
        .database_url(&url)
        .max_pg_conn(u32::try_from(concurrency.clamp(10, 100)).unwrap_or(10));
    if local_queue > 0 {
        options = options.local_queue(LocalQueueConfig::default().with_size(local_queue));
    }
    if batch_delay_ms > 0 {
        options = options.complete_job_batch_delay(Duration::from_millis(batch_delay_ms));
    }
    if poll_ms > 0 {
        options = options.poll_interval(Duration::from_millis(poll_ms));
    }
    let result = match options.init().await {
        Ok(worker) => drain(&client, &schema, jobs, Arc::new(worker)).await,
        Err(e) => Err(e.into()),
    };
    drop_schema(&client, &schema).await?;
    let secs = result?;
    println!(
        "{}",
        serde_json::json!({"jobs": jobs, "seconds": secs, "jobs_per_s": jobs as f64 / secs.max(1e-9)})
    );
    Ok(())
}

/// Enqueues the jobs, runs the worker until its jobs table is empty, then stops it (gracefully
/// if it can within 2 s) and closes its connections, so that none is still running a statement
/// on the schema when it is dropped: the seconds from the worker's start to the empty table.
async fn drain(
    client: &tokio_postgres::Client,
    schema: &str,
    jobs: i64,
    worker: Arc<Worker>,
) -> Result<f64, Failure> {
    let timed = async {
        client
            .execute(
                &format!(
                    "SELECT \"{schema}\".add_jobs(ARRAY(SELECT ROW('noop', '{{}}'::json, NULL, NULL, NULL, NULL, NULL, NULL)::\"{schema}\".job_spec FROM generate_series(1, $1::int8)))"
                ),
                &[&jobs],
            )
            .await?;
        let left = format!("SELECT count(*) FROM \"{schema}\"._private_jobs");
        let started = Instant::now();
        let w = Arc::clone(&worker);
        let running = tokio::spawn(async move { w.run().await });
        let secs = loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let n: i64 = client.query_one(&left, &[]).await?.get(0);
            if n == 0 {
                break Ok(started.elapsed().as_secs_f64());
            }
            if running.is_finished() {
                break Err::<f64, Failure>("the worker stopped before its jobs were done".into());
            }
        };
        Ok::<_, Failure>((secs, Some(running)))
    }
    .await;
    worker.request_shutdown();
    let (secs, running) = match timed {
        Ok((secs, running)) => (secs, running),
        Err(e) => (Err(e), None),
    };
    // A graceful stop, bounded: at concurrency 200 without a local queue its fetchers can wait
    // on its pool for longer than the run took; then the task is aborted.
    let stopped = match running {
        Some(mut running) => {
            match tokio::time::timeout(Duration::from_secs(2), &mut running).await {
                Ok(Ok(Ok(()))) => Ok(()),
                Ok(Ok(Err(e))) => Err::<(), Failure>(e.into()),
                Ok(Err(e)) => Err(e.into()),
                Err(_) => {
                    running.abort();
                    let _ = running.await;
                    Ok(())
                }
            }
        }
        None => Ok(()),
    };
    // Closing waits for connections still in use; a fetcher stuck waiting on the pool would
    // hold it for the pool's 30 s timeout, so the wait is bounded (the drop retries instead).
    if let Some(pool) = worker.try_pg_pool() {
        let _ = tokio::time::timeout(Duration::from_secs(1), pool.close()).await;
    }
    match (secs, stopped) {
        // Every job done: the time stands, whatever the stop said.
        (Ok(secs), _) => Ok(secs),
        // The worker's own error says more than "stopped before its jobs were done".
        (Err(_), Err(e)) | (Err(e), Ok(())) => Err(e),
    }
}

/// Drops the peer's schema, again after a deadlock or a lock wait past 10 s (a backend of the
/// worker's that is still closing may hold one of its objects for a moment).
async fn drop_schema(client: &tokio_postgres::Client, schema: &str) -> Result<(), Failure> {
    let sql = format!("SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    let mut tries = 0;
    loop {
        match client.batch_execute(&sql).await {
            Ok(()) => return Ok(()),
            Err(e)
                if tries < 5
                    && (e.code()
                        == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
                        || e.code()
                            == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)) =>
            {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Every cause in the chain: a database error's own message is in its source.
            let mut line = e.to_string();
            let mut cause = e.source();
            while let Some(c) = cause {
                line.push_str(&format!(": {c}"));
                cause = c.source();
            }
            eprintln!("skiplock-peer-graphile: {line}");
            std::process::ExitCode::FAILURE
        }
    }
}
