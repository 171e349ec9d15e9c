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

use std::time::{Duration, Instant};

use graphile_worker::{
    IntoTaskHandlerResult, LocalQueueConfig, TaskHandler, WorkerContext, WorkerOptions,
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
    let result = async {
        let worker = options.init().await?;
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
        let running = tokio::spawn(async move { worker.run().await });
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let n: i64 = client.query_one(&left, &[]).await?.get(0);
            if n == 0 {
                break;
            }
            if running.is_finished() {
                return Err::<f64, Failure>("the worker stopped before its jobs were done".into());
            }
        }
        let secs = started.elapsed().as_secs_f64();
        running.abort();
        Ok(secs)
    }
    .await;
    client
        .execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"), &[])
        .await?;
    let secs = result?;
    println!(
        "{}",
        serde_json::json!({"jobs": jobs, "seconds": secs, "jobs_per_s": jobs as f64 / secs.max(1e-9)})
    );
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("skiplock-peer-graphile: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
