//! `skiplock demo`: the first thing a new user runs. Enqueues 10,000 jobs of mixed
//! durations (some failing once, a few failing for good) into a scratch schema, runs 8
//! workers on them, crashes one mid-run so that its jobs are reaped and finished by the
//! others, and prints what happened.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::ProgressBar;
use skiplock::{
    Backoff, Client, JobContext, JobError, JobOptions, NewJob, Registry, StatsHandle, Worker,
};

use crate::connect::Target;
use crate::errors::usage;
use crate::output::{outln, print_json, progress};

/// The demo's jobs and workers unless told otherwise (the article's).
pub const DEFAULT_JOBS: usize = 10_000;
pub const DEFAULT_WORKERS: usize = 8;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs to run.
    #[arg(long, default_value_t = DEFAULT_JOBS)]
    jobs: usize,
    /// Concurrent workers (each with its own connection pool; one of them is crashed).
    #[arg(long, default_value_t = DEFAULT_WORKERS)]
    workers: usize,
    /// Keep the demo's schema afterwards (to look at it with `stats` or SQL).
    #[arg(long)]
    keep: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

const KIND: &str = "demo";
const LEASE: Duration = Duration::from_secs(2);

/// What the demo's handlers saw.
#[derive(Default)]
struct Record {
    /// Enqueue-to-start latency of each first attempt, by the database's clock (ms).
    latency_ms: Vec<f64>,
    /// Successful runs per job.
    succeeded: HashMap<i64, u32>,
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    if args.jobs == 0 || args.jobs > 1_000_000 {
        return Err(usage("--jobs must be 1 to 1,000,000"));
    }
    if args.workers < 2 || args.workers > 64 {
        return Err(usage("--workers must be 2 to 64 (one of them is crashed)"));
    }
    let url = target.url().await?;
    let schema = format!("{}_demo_{}", target.schema, std::process::id());
    let admin = Client::builder(&url)
        .schema(&schema)
        .pool_size(2)
        .application_name("skiplock-demo")
        .build()
        .map_err(|_| {
            usage(format!(
                "--schema {} is too long for a demo schema name",
                target.schema
            ))
        })?;
    admin.migrate().await?;
    skiplock_bench::lab::install_completion_audit(&admin).await?;
    let result = demo(&url, &schema, &admin, &args).await;
    if args.keep {
        if !args.json {
            outln!("kept schema {schema}: skiplock --schema {schema} stats");
        }
    } else {
        admin.drop_schema().await?;
    }
    result
}

async fn demo(url: &str, schema: &str, admin: &Client, args: &Args) -> anyhow::Result<()> {
    let (started, enqueued_in) = enqueue_mix(admin, args.jobs).await?;
    let record = Arc::new(Mutex::new(Record::default()));
    let (mut workers, handles) = start_workers(url, schema, args.workers, &record)?;
    let finished_at = watch(admin, schema, args, enqueued_in, &mut workers).await?;
    let elapsed = finished_at.duration_since(started) - enqueued_in;
    stop_workers(workers).await?;
    let summary = tally(admin, &handles, &record, args.jobs, elapsed).await?;
    print_summary(&summary, args);
    anyhow::ensure!(
        summary.duplicate_completions == 0,
        "a job was completed twice"
    );
    Ok(())
}

/// A worker of the demo running in a task: stop it with the sender.
type Running = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<skiplock::Result<skiplock::RunStats>>,
);

/// Enqueues the demo's mix of `jobs` jobs in batches; returns when enqueueing started and how
/// long it took.
async fn enqueue_mix(admin: &Client, jobs: usize) -> anyhow::Result<(Instant, Duration)> {
    // Mixed durations: most jobs take a few milliseconds, some tens, a few hundreds.
    // About 5% fail once and succeed when retried; 0.5% fail every attempt.
    let mut rng = Lcg(0x5eed_5eed);
    let jobs: Vec<NewJob> = (0..jobs)
        .map(|_| {
            let roll = rng.below(1000);
            let ms = match roll {
                0..=699 => 1 + rng.below(9),
                700..=949 => 10 + rng.below(40),
                _ => 100 + rng.below(200),
            };
            let fail = match rng.below(1000) {
                0..=4 => 99,
                5..=54 => 1,
                _ => 0,
            };
            NewJob::new(KIND, &serde_json::json!({ "ms": ms, "fail": fail })).max_attempts(3)
        })
        .collect();
    let started = Instant::now();
    for chunk in jobs.chunks(5_000) {
        admin.enqueue_many(chunk).await?;
    }
    Ok((started, started.elapsed()))
}

/// Starts `count` workers, each with a pool of its own, recording into `record`.
fn start_workers(
    url: &str,
    schema: &str,
    count: usize,
    record: &Arc<Mutex<Record>>,
) -> anyhow::Result<(Vec<Running>, Vec<StatsHandle>)> {
    let mut workers = Vec::new();
    let mut handles: Vec<StatsHandle> = Vec::new();
    for w in 0..count {
        let client = Client::builder(url)
            .schema(schema)
            .pool_size(4)
            .application_name(format!("skiplock-demo-{w}"))
            .build()?;
        let worker = Worker::builder(client, registry(record.clone()))
            .queue(skiplock::NewJob::DEFAULT_QUEUE, 8)
            .lease(LEASE)
            .heartbeat_interval(LEASE / 3)
            .reap_interval(Duration::from_millis(500))
            .poll_interval(Some(Duration::from_millis(250)))
            .shutdown_timeout(Duration::from_secs(10))
            .build()?;
        handles.push(worker.stats_handle());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(worker.run(async {
            let _ = stopped.await;
        }));
        workers.push((stop, task));
    }
    Ok((workers, handles))
}

/// Shows the progress until every job is finished, crashing worker 0 a quarter of the way in
/// (its task is aborted with its jobs in flight); returns when the last job finished.
async fn watch(
    admin: &Client,
    schema: &str,
    args: &Args,
    enqueued_in: Duration,
    workers: &mut [Running],
) -> anyhow::Result<Instant> {
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        outln!(
            "skiplock demo: {} jobs enqueued in {:.0} ms into schema {schema}; {} workers running",
            args.jobs,
            enqueued_in.as_secs_f64() * 1000.0,
            args.workers
        );
        // Drawn on a terminal only: nothing extra in a pipe or a log.
        progress(
            args.jobs as u64,
            "{bar:40} {pos:>6}/{len} finished  {per_sec:>12}  {msg}",
            false,
        )
    };
    let crash_at = (args.jobs / 4) as i64;
    let mut crashed = false;
    let deadline = Instant::now() + Duration::from_secs(600);
    let finished_at = loop {
        let h = admin.health(Duration::from_secs(3600)).await?;
        let finished: i64 = h.queues.iter().map(|q| q.done + q.failed).sum();
        bar.set_position(u64::try_from(finished).unwrap_or(0));
        if !crashed && finished >= crash_at {
            // A crash: the first worker's task is aborted with its jobs in flight.
            workers[0].1.abort();
            crashed = true;
            bar.set_message("worker 0 crashed; its jobs wait for their leases to expire");
        }
        if finished >= args.jobs as i64 {
            break Instant::now();
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the demo did not finish in 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    bar.finish_and_clear();
    Ok(finished_at)
}

/// Stops the workers that still run, and waits for the crashed one's task.
async fn stop_workers(workers: Vec<Running>) -> anyhow::Result<()> {
    for (i, (stop, task)) in workers.into_iter().enumerate() {
        if i == 0 {
            let _ = task.await;
            continue;
        }
        let _ = stop.send(());
        task.await.context("a worker task failed")??;
    }
    Ok(())
}

/// What the demo reports.
struct Summary {
    jobs: usize,
    done: i64,
    failed: i64,
    total: skiplock::RunStats,
    duplicate_completions: i64,
    jobs_per_s: f64,
    p50: f64,
    p99: f64,
    reran: usize,
    elapsed: Duration,
}

/// The figures: the workers' counts, the table's, the completion audit's and the handlers'.
async fn tally(
    admin: &Client,
    handles: &[StatsHandle],
    record: &Mutex<Record>,
    jobs: usize,
    elapsed: Duration,
) -> anyhow::Result<Summary> {
    let mut total = skiplock::RunStats::default();
    for h in handles {
        let s = h.snapshot();
        total.done += s.done;
        total.retried += s.retried;
        total.failed += s.failed;
        total.reaped += s.reaped;
        total.lost += s.lost;
    }
    let h = admin.health(Duration::from_secs(3600)).await?;
    let done: i64 = h.queues.iter().map(|q| q.done).sum();
    let failed: i64 = h.queues.iter().map(|q| q.failed).sum();
    // Counted by a trigger on the table, not by the workers (whose counts die with a crash).
    let (completions, completed_jobs) = skiplock_bench::lab::completion_audit(admin).await?;
    let duplicate_completions = completions - completed_jobs;
    let (p50, p99, reran) = {
        let r = record.lock().unwrap_or_else(|p| p.into_inner());
        let mut l = r.latency_ms.clone();
        l.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            if l.is_empty() {
                0.0
            } else {
                l[((l.len() - 1) as f64 * p).round() as usize]
            }
        };
        let reran = r.succeeded.values().filter(|n| **n > 1).count();
        (pct(0.50), pct(0.99), reran)
    };
    let jobs_per_s = jobs as f64 / elapsed.as_secs_f64().max(1e-9);
    Ok(Summary {
        jobs,
        done,
        failed,
        total,
        duplicate_completions,
        jobs_per_s,
        p50,
        p99,
        reran,
        elapsed,
    })
}

/// Prints the summary, as a table or as one JSON object.
fn print_summary(s: &Summary, args: &Args) {
    let Summary {
        done,
        failed,
        total,
        duplicate_completions,
        jobs_per_s,
        p50,
        p99,
        reran,
        elapsed,
        ..
    } = *s;
    if args.json {
        print_json(&serde_json::json!({
            "enqueued": s.jobs, "done": done, "failed": failed, "retried": total.retried,
            "reaped": total.reaped, "duplicate_completions": duplicate_completions,
            "lost": total.lost, "jobs_per_s": jobs_per_s,
            "latency_p50_ms": p50, "latency_p99_ms": p99,
            "workers": args.workers, "crashed_workers": 1, "rerun_after_success": reran,
            "elapsed_s": elapsed.as_secs_f64(),
        }));
    } else {
        outln!(
            "\nskiplock demo: {} jobs, {} workers, worker 0 crashed a quarter of the way in\n",
            s.jobs,
            args.workers
        );
        let row = |label: &str, value: String, note: &str| {
            outln!("  {label:<24} {value:>12}   {note}");
        };
        row("done", done.to_string(), "");
        row(
            "failed",
            failed.to_string(),
            "jobs that failed every attempt (3)",
        );
        row(
            "retried",
            total.retried.to_string(),
            "failed attempts retried with backoff",
        );
        row(
            "reaped",
            total.reaped.to_string(),
            "the crashed worker's jobs, finished by the others",
        );
        row(
            "duplicate completions",
            duplicate_completions.to_string(),
            "must be 0",
        );
        row(
            "lost results",
            total.lost.to_string(),
            "results refused because a lease was lost",
        );
        row(
            "throughput",
            format!("{jobs_per_s:.0}/s"),
            "jobs finished per second, enqueue excluded",
        );
        row(
            "latency p50",
            format!("{p50:.1} ms"),
            "enqueue to start, by the database's clock",
        );
        row(
            "latency p99",
            format!("{p99:.1} ms"),
            "(all jobs were enqueued at once: mostly waiting behind the backlog)",
        );
        if reran > 0 {
            outln!("\n  {reran} job(s) ran to success twice: the crash hit them between finishing and recording it (at-least-once execution; handlers must be idempotent)");
        }
    }
}

fn registry(record: Arc<Mutex<Record>>) -> Registry {
    let options = JobOptions {
        max_attempts: 3,
        backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(1))
            .unwrap_or_default(),
        ..JobOptions::default()
    };
    Registry::new().register_handler(KIND, options, move |payload: String, ctx: JobContext| {
        let record = record.clone();
        async move {
            if ctx.attempt == 1 {
                let ms = ctx.pickup_latency().as_secs_f64() * 1000.0;
                record
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .latency_ms
                    .push(ms);
            }
            let p: serde_json::Value = serde_json::from_str(&payload)?;
            let ms = p.get("ms").and_then(serde_json::Value::as_u64).unwrap_or(1);
            let fail = p
                .get("fail")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            if u64::try_from(ctx.attempt).unwrap_or(0) <= fail {
                return Err(JobError::retry(format!(
                    "demo failure on attempt {}",
                    ctx.attempt
                )));
            }
            *record
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .succeeded
                .entry(ctx.id.0)
                .or_default() += 1;
            Ok(())
        }
    })
}

/// A tiny deterministic generator, so that every demo run gets the same mix.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}
