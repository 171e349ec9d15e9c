//! `skiplock work`: a worker process. With `--exec CMD [ARGS...]` every job runs `CMD` with
//! the payload on standard input; without it, the built-in kinds `noop`, `sleep` and `fail`
//! are available (for trying the queue out).

use std::time::Duration;

use anyhow::Context as _;
use skiplock::{JobContext, JobError, JobOptions, Registry, RunStats, Worker};

use crate::connect::Target;
use crate::errors::usage;
use crate::exec::{self, Exec};
use crate::output::{errln, print_json};
use crate::parse::{parse_duration, parse_optional_duration};

#[derive(Debug, Clone)]
pub struct QueueArg(String, usize);

fn parse_queue(s: &str) -> Result<QueueArg, String> {
    let (name, n) = match s.split_once('=') {
        Some((name, n)) => (
            name,
            n.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{n:?} is not a concurrency (a whole number above 0)"))?,
        ),
        None => (s, 10),
    };
    Ok(QueueArg(name.trim().to_owned(), n))
}

#[derive(Debug, Clone, Copy)]
pub struct Poll(Option<Duration>);

fn parse_poll(s: &str) -> Result<Poll, String> {
    parse_optional_duration(s).map(Poll)
}

/// A dead-tuple count, or `off`.
#[derive(Debug, Clone, Copy)]
pub struct Threshold(Option<u64>);

fn parse_threshold(s: &str) -> Result<Threshold, String> {
    if s.trim() == "off" {
        return Ok(Threshold(None));
    }
    s.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .map(|n| Threshold(Some(n)))
        .ok_or_else(|| {
            format!("{s:?} is not a number of dead tuples (a whole number above 0) or `off`")
        })
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A queue to serve, as QUEUE or QUEUE=CONCURRENCY (default concurrency 10). Repeat for
    /// several queues; default: default=10.
    #[arg(long = "queue", value_name = "QUEUE[=N]", value_parser = parse_queue)]
    queues: Vec<QueueArg>,
    /// Process what is ready, then exit 0 (for a scheduled worker).
    #[arg(long)]
    drain: bool,
    /// Fallback poll interval when no notification arrives, or `off`.
    #[arg(long, value_name = "D|off", value_parser = parse_poll, default_value = "5s")]
    poll_interval: Poll,
    /// Lease per claim; renewed by heartbeats every third of it while a job runs.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    lease: Duration,
    /// On SIGINT/SIGTERM, how long running jobs may finish before they are cancelled and put
    /// back in the queue. With --exec, the commands still running then get SIGTERM, and
    /// SIGKILL 3 s later (with everything they started).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    shutdown_timeout: Duration,
    /// Wait before the first retry of a failed job; later ones double (default 10s).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    retry_base: Duration,
    /// The longest wait between retries (default 1h).
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    retry_cap: Duration,
    /// How often expired leases are reaped (one reaper at a time across workers).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    reap_interval: Duration,
    /// Longest one job may run (then it is cancelled and retried), e.g. 10m.
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Prune done jobs older than this while working (hourly, one process at a time), or
    /// `off`.
    #[arg(long, value_name = "D|off", value_parser = parse_poll, default_value = "7d")]
    prune_older_than: Poll,
    /// Close pool connections unused for this long, or `off` (the LISTEN connection stays).
    #[arg(long, value_name = "D|off", value_parser = parse_poll, default_value = "5m")]
    idle_timeout: Poll,
    /// Vacuum the jobs table once it has more dead tuples than this (checked every 5 s while
    /// there is work, one process at a time; needs the role to own the table, or MAINTAIN on
    /// PostgreSQL 17+), or `off` to leave it to autovacuum.
    #[arg(long, value_name = "N|off", value_parser = parse_threshold, default_value = "1000")]
    vacuum_threshold: Threshold,
    /// Claims each queue may have in flight at once, each on its own connection (default:
    /// automatic, one per 100 of concurrency, between 2 and 4). All of them together never
    /// take more jobs than the queue has free slots.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    claims_in_flight: Option<u64>,
    /// Use named prepared statements for claims, outcomes and heartbeats (faster; not through
    /// PgBouncer in transaction mode unless it supports them).
    #[arg(long)]
    prepared_statements: bool,
    /// URL of the LISTEN connection, if it must differ from --database-url (PgBouncer).
    #[arg(long)]
    listen_url: Option<String>,
    /// Print the final counts as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
    /// Run every job with this command; it must come last. The payload is on its standard
    /// input; SKIPLOCK_JOB_ID, SKIPLOCK_ATTEMPT, SKIPLOCK_QUEUE and SKIPLOCK_KIND are set.
    /// Exit 0: done. Exit 75: retry. Any other exit or a signal: retry, with the end of its
    /// standard error as last_error, until max_attempts. Each command runs in a process group
    /// of its own, killed with it: nothing it started outlives its attempt.
    #[arg(long, value_name = "CMD [ARGS...]", num_args = 1.., allow_hyphen_values = true)]
    exec: Option<Vec<String>>,
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    let options = JobOptions {
        timeout: args.timeout,
        backoff: skiplock::Backoff::new(args.retry_base, args.retry_cap)
            .map_err(|e| usage(e.to_string()))?,
        ..JobOptions::default()
    };
    let registry = match &args.exec {
        Some(cmd) => {
            let (program, rest) = cmd
                .split_first()
                .ok_or_else(|| usage("--exec needs a command"))?;
            Registry::new().fallback(options, Exec::new(program.clone(), rest.to_vec()))
        }
        None => builtin(options),
    };
    let queues = if args.queues.is_empty() {
        vec![QueueArg(skiplock::DEFAULT_QUEUE.to_owned(), 10)]
    } else {
        args.queues.clone()
    };
    let concurrency: usize = queues.iter().map(|q| q.1).sum();
    let client = target
        .client_prepared(concurrency.clamp(4, 32), args.prepared_statements)
        .await?;
    crate::database::wait_reachable(&client).await?;
    args.metrics.start().await?;
    let drained = args.drain.then(|| client.clone());
    let mut builder = Worker::builder(client, registry)
        .lease(args.lease)
        .heartbeat_interval(args.lease / 3)
        .poll_interval(args.poll_interval.0)
        .reap_interval(args.reap_interval)
        .shutdown_timeout(
            args.shutdown_timeout
                + args
                    .exec
                    .as_ref()
                    .map_or(Duration::ZERO, |_| exec::TERM_GRACE),
        )
        .prune(
            args.prune_older_than
                .0
                .map(skiplock::PruneOptions::older_than),
        )
        .idle_connection_timeout(args.idle_timeout.0)
        .vacuum_threshold(args.vacuum_threshold.0)
        .metrics_gauges_interval(args.metrics.gauges_interval());
    for q in &queues {
        builder = builder.queue(&q.0, q.1);
    }
    if let Some(url) = &args.listen_url {
        builder = builder.listen_url(url);
    }
    if let Some(n) = args.claims_in_flight {
        builder = builder.claims_in_flight(usize::try_from(n).unwrap_or(1));
    }
    let worker = builder.build()?;
    // SIGINT/SIGTERM stop a draining worker as they stop a serving one: running jobs get
    // --shutdown-timeout, then go back to the queue without spending an attempt.
    // Running commands get SIGTERM at the deadline, then SIGKILL (see `exec`).
    let shutdown = exec::on_shutdown(
        shutdown_signal().context("could not install the signal handlers")?,
        args.shutdown_timeout,
    );
    let stats = if args.drain {
        worker.run_until_idle_or(shutdown).await?
    } else {
        worker.run(shutdown).await?
    };
    report(&stats, args.json);
    if let Some(client) = drained {
        let names: Vec<String> = queues.iter().map(|q| q.0.clone()).collect();
        crate::queue::say_paused(&client, &names).await;
    }
    Ok(())
}

fn report(s: &RunStats, json: bool) {
    if json {
        print_json(&serde_json::json!({
            "claimed": s.claimed, "done": s.done, "retried": s.retried, "failed": s.failed,
            "requeued": s.requeued, "lost": s.lost, "reaped": s.reaped,
        }));
    } else {
        errln!(
            "worker stopped: {} claimed, {} done, {} retried, {} failed, {} put back, {} lost, {} reaped",
            s.claimed, s.done, s.retried, s.failed, s.requeued, s.lost, s.reaped
        );
    }
}

/// Resolves on the first SIGINT or SIGTERM.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}

/// The built-in kinds, for trying the queue out without writing a handler.
fn builtin(options: JobOptions) -> Registry {
    Registry::new()
        .register_handler("noop", options, |_p: String, _c: JobContext| async {
            Ok::<(), JobError>(())
        })
        .register_handler("sleep", options, |p: String, _c: JobContext| async move {
            // {"ms": N}
            let ms = field(&p, "ms")?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(())
        })
        .register_handler("fail", options, |p: String, c: JobContext| async move {
            // {"times": N}: fail the first N attempts.
            let times = field(&p, "times")?;
            if u64::try_from(c.attempt).unwrap_or(0) <= times {
                return Err(JobError::retry(format!(
                    "failing on purpose (attempt {} of the first {times})",
                    c.attempt
                )));
            }
            Ok(())
        })
}

fn field(payload: &str, name: &str) -> Result<u64, JobError> {
    let v: serde_json::Value = serde_json::from_str(payload)
        .map_err(|e| JobError::permanent(format!("payload is not JSON: {e}")))?;
    v.get(name)
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| JobError::permanent(format!("payload needs {{\"{name}\": <number>}}")))
}
