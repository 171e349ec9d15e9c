//! `skiplock work`: a worker process. With `--exec CMD [ARGS...]` every job runs `CMD` with
//! the payload on standard input; without it, the built-in kinds `noop`, `sleep` and `fail`
//! are available (for trying the queue out).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use skiplock::{JobContext, JobError, JobOptions, Registry, RunStats, Worker};

use crate::connect::Target;
use crate::errors::{usage, Interrupted};
use crate::exec::{self, Exec};
use crate::output::{errln, print_json};
use crate::parse::{optional_within, period_text, text, within};
use skiplock::WorkerConfig;

#[derive(Debug, Clone)]
pub struct QueueArg(String, usize);

/// A queue's concurrency when `--queue` does not give one.
const DEFAULT_CONCURRENCY: usize = 10;

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
        None => (s, DEFAULT_CONCURRENCY),
    };
    Ok(QueueArg(name.trim().to_owned(), n))
}

#[derive(Debug, Clone, Copy)]
pub struct Poll(Option<Duration>);

/// Seconds in a day, for the bounds of the options' durations.
const DAY: u64 = 86_400;

/// The fallback poll: 10 ms to 7 days, or `off`.
fn parse_poll(s: &str) -> Result<Poll, String> {
    optional_within::<10, { 7 * DAY }>(s).map(Poll)
}

/// The pruning retention: 1 s to 36,500 days, or `off`.
fn parse_retention(s: &str) -> Result<Poll, String> {
    optional_within::<1000, { 100 * 365 * DAY }>(s).map(Poll)
}

/// The idle-connection timeout: 1 s to 7 days, or `off`.
fn parse_idle(s: &str) -> Result<Poll, String> {
    optional_within::<1000, { 7 * DAY }>(s).map(Poll)
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
    #[arg(long = "queue", value_name = "QUEUE[=N]", value_parser = parse_queue,
          help = text!(format!(
              "A queue to serve, as QUEUE or QUEUE=CONCURRENCY (default concurrency \
               {DEFAULT_CONCURRENCY}). Repeat for several queues; default: \
               {}={DEFAULT_CONCURRENCY}",
              skiplock::NewJob::DEFAULT_QUEUE
          )))]
    queues: Vec<QueueArg>,
    /// Process what is ready, then exit 0 (for a scheduled worker). Stopped by SIGINT or
    /// SIGTERM first, it exits 130 or 143 (128 + the signal) once its running jobs are
    /// handed back.
    #[arg(long)]
    drain: bool,
    /// Fallback poll interval when no notification arrives (10ms to 7d), or `off`.
    #[arg(long, value_name = "D|off", value_parser = parse_poll, default_value = text!(period_text(WorkerConfig::DEFAULT_POLL_INTERVAL)))]
    poll_interval: Poll,
    /// Lease per claim (1s to 1d); renewed by heartbeats every third of it while a job runs.
    #[arg(long, value_parser = within::<1000, DAY>,
          default_value = text!(period_text(WorkerConfig::DEFAULT_LEASE)))]
    lease: Duration,
    /// On SIGINT/SIGTERM, how long running jobs may finish before they are cancelled and put
    /// back in the queue. With --exec, the commands still running then get SIGTERM, and
    /// SIGKILL 3 s later (with everything they started). A second SIGINT/SIGTERM stops at
    /// once (running jobs, and commands with SIGKILL, are stopped and handed back). The
    /// worker exits within this (plus 3 s with --exec) plus 15 s even when the database
    /// does not answer; outcomes it could not write are logged and left to the reaper. At
    /// most 1d.
    #[arg(long, value_parser = within::<0, DAY>,
          default_value = text!(period_text(WorkerConfig::DEFAULT_SHUTDOWN_TIMEOUT)))]
    shutdown_timeout: Duration,
    /// Wait before the first retry of a failed job; later ones double (1ms to 365d).
    #[arg(long, value_parser = within::<1, { 365 * DAY }>,
          default_value = text!(period_text(skiplock::Backoff::DEFAULT_BASE)))]
    retry_base: Duration,
    /// The longest wait between retries (1ms to 365d).
    #[arg(long, value_parser = within::<1, { 365 * DAY }>,
          default_value = text!(period_text(skiplock::Backoff::DEFAULT_CAP)))]
    retry_cap: Duration,
    /// How often expired leases are reaped (one reaper at a time across workers; 100ms to
    /// 1d).
    #[arg(long, value_parser = within::<100, DAY>,
          default_value = text!(period_text(WorkerConfig::DEFAULT_REAP_INTERVAL)))]
    reap_interval: Duration,
    /// Longest one job may run (then it is cancelled and retried), e.g. 10m (1ms to 365d).
    #[arg(long, value_parser = within::<1, { 365 * DAY }>)]
    timeout: Option<Duration>,
    /// Prune done jobs older than this while working (hourly, one process at a time), or
    /// `off` (1s to 36500d).
    #[arg(long, value_name = "D|off", value_parser = parse_retention,
          default_value = text!(period_text(skiplock::PruneOptions::DEFAULT_OLDER_THAN)))]
    prune_older_than: Poll,
    /// Close pool connections unused for this long (1s to 7d), or `off` (the LISTEN
    /// connection stays).
    #[arg(long, value_name = "D|off", value_parser = parse_idle,
          default_value = text!(period_text(WorkerConfig::DEFAULT_IDLE_CONNECTION_TIMEOUT)))]
    idle_timeout: Poll,
    #[arg(long, value_name = "N|off", value_parser = parse_threshold,
          default_value = text!(WorkerConfig::DEFAULT_VACUUM_THRESHOLD.to_string()),
          help = text!(format!(
              "Vacuum the jobs table once it has more dead tuples than this (checked every {} \
               while there is work, one process at a time; needs the role to own the table, \
               or MAINTAIN on PostgreSQL 17+), or `off` to leave it to autovacuum",
              period_text(WorkerConfig::DEFAULT_VACUUM_CHECK_INTERVAL)
          )))]
    vacuum_threshold: Threshold,
    /// Claims each queue may have in flight at once, each on its own connection (default:
    /// automatic, one per --max-claim-batch of concurrency, between 2 and 4, and while a
    /// queue works through a backlog of short jobs one per twice that). All of them together
    /// never take more jobs than the queue has free slots plus what it may claim ahead.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    claims_in_flight: Option<u64>,
    /// The most jobs one claim takes (default 500), and a quarter of what a claim through a
    /// backlog takes after waiting for its turn unless --max-claim-batch-waited is given.
    /// Lower it (or both) for jobs with large payloads: a claim of short jobs takes a whole
    /// batch, even beyond the queue's free slots.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_claim_batch: Option<u32>,
    /// The most jobs a claim through a backlog takes when it had to wait for its turn behind
    /// another worker's claim of the queue (default: four times --max-claim-batch, 2,000;
    /// at least --max-claim-batch): with several processes on one backlog, the turn's fixed
    /// cost is paid less often.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_claim_batch_waited: Option<u32>,
    /// Keep every claim within the queue's free slots. By default a queue whose slots start
    /// jobs often (its recent jobs' mean run time under its concurrency times 5 ms) claims up
    /// to its batch even with fewer slots free, and holds the jobs without a slot for about
    /// 5 ms (their leases renewed; one that waits 10 s goes back to the queue).
    #[arg(long)]
    no_claim_ahead: bool,
    /// Let this worker's claims through a backlog run at once with other workers' claims of
    /// the queue. By default, while its last claim came back full, a claim waits its turn
    /// behind the queue's other such claims on this database (a lock of the queue's turn,
    /// held for the claim's short transaction), which costs the server less than claims
    /// stepping past each other's rows at the queue's front.
    #[arg(long)]
    no_claim_in_turn: bool,
    /// Delete each job that completes instead of keeping it as done until pruning (a job with
    /// an output, or in a workflow, is kept; failed jobs are kept). The completion costs the
    /// database less (no new row version, no index entry); the per-minute done counts still
    /// count these jobs.
    #[arg(long)]
    delete_done: bool,
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
    /// of its own, killed with it: nothing it started outlives its attempt. SKIPLOCK_OUTPUT
    /// names an empty file: JSON the command writes there (at most 1 MiB) is stored as the
    /// job's output when it exits 0 (left empty: no output; not JSON, or too big: the attempt
    /// fails and is retried). A job that waits for other jobs also gets
    /// SKIPLOCK_PARENT_OUTPUTS, the path of a JSON object from each parent's id to its output
    /// (null for none); for other jobs it is not set. Both files are removed after the
    /// attempt.
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
            exec::check_program(program).map_err(usage)?;
            Registry::new().fallback(options, Exec::new(program.clone(), rest.to_vec()))
        }
        None => builtin(options),
    };
    let queues = if args.queues.is_empty() {
        vec![QueueArg(
            skiplock::NewJob::DEFAULT_QUEUE.to_owned(),
            DEFAULT_CONCURRENCY,
        )]
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
    // The handlers (commands, or the built-in kinds) hold no connection while they run (a
    // command's parents' outputs are read before it starts): the worker shares the pool
    // whose connection the check above opened.
    let mut builder = Worker::builder(client, registry)
        .share_client_pool(true)
        .lease(args.lease)
        .heartbeat_interval(args.lease / 3)
        .poll_interval(args.poll_interval.0)
        .reap_interval(args.reap_interval)
        .shutdown_timeout(
            args.shutdown_timeout.saturating_add(
                args.exec
                    .as_ref()
                    .map_or(Duration::ZERO, |_| exec::TERM_GRACE),
            ),
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
    if let Some(n) = args.max_claim_batch {
        builder = builder.max_claim_batch(n);
    }
    if let Some(n) = args.max_claim_batch_waited {
        builder = builder.max_claim_batch_waited(n);
    }
    if let Some(n) = args.claims_in_flight {
        builder = builder.claims_in_flight(usize::try_from(n).unwrap_or(1));
    }
    if args.no_claim_ahead {
        builder = builder.claim_ahead(false);
    }
    if args.no_claim_in_turn {
        builder = builder.claim_in_turn(false);
    }
    if args.delete_done {
        builder = builder.delete_done(true);
    }
    let worker = builder.build()?;
    // SIGINT/SIGTERM stop a draining worker as they stop a serving one: running jobs get
    // --shutdown-timeout, then go back to the queue without spending an attempt; a second
    // signal stops at once. Running commands get SIGTERM at the deadline, then SIGKILL (see
    // `exec`).
    let (signals, first) = shutdown_signals(worker.stop_now_handle())
        .context("could not install the signal handlers")?;
    let shutdown = exec::on_shutdown(signals, args.shutdown_timeout);
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
    match first.load(Ordering::SeqCst) {
        // A drain that a signal cut short did not drain: say so by the exit status.
        signal if args.drain && signal != 0 => Err(Interrupted { signal }.into()),
        _ => Ok(()),
    }
}

fn report(s: &RunStats, json: bool) {
    if json {
        print_json(&serde_json::json!({
            "claimed": s.claimed, "done": s.done, "retried": s.retried, "failed": s.failed,
            "snoozed": s.snoozed, "handed_back": s.handed_back,
            // The sum of the two, under its old name (deprecated; kept for scripts).
            "requeued": s.snoozed + s.handed_back,
            "lost": s.lost, "reaped": s.reaped,
        }));
    } else {
        errln!(
            "worker stopped: {} claimed, {} done, {} retried, {} failed, {} snoozed, {} handed back, {} lost, {} reaped",
            s.claimed, s.done, s.retried, s.failed, s.snoozed, s.handed_back, s.lost, s.reaped
        );
    }
}

/// A future that resolves on the first SIGINT or SIGTERM (recording which in the returned
/// number), after which the next one stops the worker at once through `stop_now`.
fn shutdown_signals(
    stop_now: skiplock::StopNow,
) -> std::io::Result<(impl std::future::Future<Output = ()> + Send, Arc<AtomicI32>)> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let first = Arc::new(AtomicI32::new(0));
    let seen = first.clone();
    let future = async move {
        let n = tokio::select! {
            _ = term.recv() => {
                tracing::info!("SIGTERM: shutting down (a second signal stops at once)");
                15
            }
            _ = int.recv() => {
                tracing::info!("SIGINT: shutting down (a second signal stops at once)");
                2
            }
        };
        seen.store(n, Ordering::SeqCst);
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::warn!("second signal: stopping now, handing the running jobs back");
            stop_now.stop_now();
        });
    };
    Ok((future, first))
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
        .map_err(|e| JobError::discard(format!("payload is not JSON: {e}")))?;
    v.get(name)
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| JobError::discard(format!("payload needs {{\"{name}\": <number>}}")))
}
