//! The flow scenario's job and worker process: a typed handler whose effect (a row of the
//! application's `effects` table) and the job's completion commit in one transaction of its
//! own (`JobContext::complete_tx`), after checking in that transaction that every parent of
//! the job is done.
//!
//! With `--no-tx` (the negative control) the handler commits its effect on its own and
//! returns `Ok`, and the worker completes the job afterwards, separately: a worker killed
//! between the two leaves an effect whose job runs again.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use skiplock::{Job, JobContext, JobError, JobOptions};

use crate::faults::Rng;
use crate::log;

/// The flow workers' lease: short, so that the jobs of a killed or stopped worker are
/// reaped and run again during the run.
pub const LEASE: Duration = Duration::from_secs(2);

/// How many jobs one flow worker process runs at once.
pub const CONCURRENCY: usize = 8;

/// The handler's check of the job's parents, in its transaction.
const PARENTS: &str = include_str!("../queries/flow_parents.sql");
/// One effect.
const EFFECT: &str = include_str!("../queries/flow_effect.sql");
/// A violation, written outside the handler's transaction so that a rollback keeps it.
const VIOLATION: &str = include_str!("../queries/flow_violation.sql");

/// A job of the flow scenario. `parents` is how many jobs it was enqueued to wait for (the
/// handler checks that the row records as many); `shape` and `tag` say where it belongs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowStep {
    pub shape: String,
    pub tag: u64,
    pub parents: u32,
}

/// `--no-tx`: the negative control's handler (effect first, completion separately).
static NO_TX: AtomicBool = AtomicBool::new(false);

/// The worker's log: `L <job> <attempt> <pid> <ms>` for each completion refused with
/// `LeaseLost` (a stale attempt whose effect rolled back).
static LOG: OnceLock<PathBuf> = OnceLock::new();

impl Job for FlowStep {
    const KIND: &'static str = "flow";
    const QUEUE: &'static str = "flow";
    fn options() -> JobOptions {
        JobOptions {
            // Kills and stops spend attempts; a parent failed for good would fail its
            // descendants (10,000 of them for the fan-out's), which is not what is tested.
            max_attempts: 1000,
            backoff: skiplock::Backoff::new(Duration::from_millis(100), Duration::from_secs(1))
                .unwrap_or_default(),
            ..JobOptions::default()
        }
    }
    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        if NO_TX.load(Ordering::Relaxed) {
            run_without_tx(self, ctx).await
        } else {
            run_in_tx(self, ctx).await
        }
    }
}

/// A few milliseconds, different for each attempt.
fn pause(ctx: &JobContext, from_ms: u64, to_ms: u64) -> Duration {
    let mut rng = Rng::new(
        (ctx.id.0 as u64).wrapping_mul(31)
            ^ (ctx.attempt as u64) << 40
            ^ u64::from(std::process::id()),
    );
    Duration::from_millis(from_ms + rng.below(to_ms - from_ms + 1))
}

/// Checks, on `conn` (the handler's transaction), that the job records the parents it was
/// enqueued with and that each is done; a violation is written at once, on a connection of
/// its own.
async fn check_parents(
    ctx: &JobContext,
    step: &FlowStep,
    conn: &tokio_postgres::Transaction<'_>,
) -> Result<(), JobError> {
    let row = conn.query_one(PARENTS, &[&ctx.id.0]).await?;
    let (recorded, open): (i64, i64) = (row.get(0), row.get(1));
    let mut wrong = Vec::new();
    if recorded != i64::from(step.parents) {
        wrong.push(format!(
            "it records {recorded} parents, it was enqueued with {}",
            step.parents
        ));
    }
    if open > 0 {
        wrong.push(format!("it runs while {open} of its parents are not done"));
    }
    if !wrong.is_empty() {
        let other = ctx.client().pool().get().await?;
        other
            .execute(VIOLATION, &[&ctx.id.0, &ctx.attempt, &wrong.join("; ")])
            .await?;
    }
    Ok(())
}

/// The exactly-once handler: check, effect, a pause (so that kills and stops land inside the
/// transaction), the guarded completion, commit. Each in one transaction of its own.
async fn run_in_tx(step: FlowStep, ctx: JobContext) -> Result<(), JobError> {
    let mut conn = ctx.client().pool().get().await?;
    let tx = conn.transaction().await?;
    check_parents(&ctx, &step, &tx).await?;
    tx.execute(EFFECT, &[&ctx.id.0, &ctx.attempt]).await?;
    tokio::time::sleep(pause(&ctx, 1, 15)).await;
    match ctx.complete_tx(&tx).await {
        Ok(()) => {}
        Err(e @ skiplock::Error::LeaseLost { .. }) => {
            // Dropping the transaction rolls the effect back with it.
            let path = LOG.get().cloned().unwrap_or_else(|| "flow.log".into());
            log::append(
                &path,
                &format!(
                    "L {} {} {} {}",
                    ctx.id.0,
                    ctx.attempt,
                    std::process::id(),
                    log::now_ms()
                ),
            );
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    }
    tx.commit().await?;
    Ok(())
}

/// The negative control: the effect commits on its own, then a pause (kills land between the
/// effect and the worker's completion), then `Ok` for the worker to complete the job.
async fn run_without_tx(step: FlowStep, ctx: JobContext) -> Result<(), JobError> {
    let mut conn = ctx.client().pool().get().await?;
    let tx = conn.transaction().await?;
    check_parents(&ctx, &step, &tx).await?;
    tx.execute(EFFECT, &[&ctx.id.0, &ctx.attempt]).await?;
    tx.commit().await?;
    tokio::time::sleep(pause(&ctx, 5, 30)).await;
    Ok(())
}

/// The number of `LeaseLost` refusals a worker's log records.
pub fn lease_lost_in(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().filter(|l| l.starts_with("L ")).count())
        .unwrap_or(0)
}

/// A flow worker process (`worker --flow`); SIGTERM shuts it down gracefully.
pub async fn worker(
    url: String,
    schema: String,
    name: String,
    log_path: PathBuf,
    no_tx: bool,
) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_ansi(false)
        .init();
    let _ = LOG.set(log_path);
    NO_TX.store(no_tx, Ordering::Relaxed);
    // The handlers' connections (one each, a second for a violation) and a few spare; the
    // worker's own statements use a pool of the runtime's.
    let client = skiplock::Client::builder(&url)
        .schema(&schema)
        .pool_size(2 * CONCURRENCY + 2)
        .application_name(format!("torture-{name}"))
        .build()?;
    let registry = skiplock::Registry::new().register::<FlowStep>();
    let worker = skiplock::Worker::builder(client, registry)
        .queue("flow", CONCURRENCY)
        .lease(LEASE)
        .heartbeat_interval(Duration::from_millis(500))
        .reap_interval(Duration::from_secs(1))
        .poll_interval(Some(Duration::from_secs(1)))
        .shutdown_timeout(Duration::from_secs(2))
        .prune(None)
        .build()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stats = worker
        .run(async move {
            let _ = term.recv().await;
        })
        .await?;
    eprintln!("{name} stopped: {stats:?}");
    Ok(())
}
