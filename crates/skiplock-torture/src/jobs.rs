//! What the torture jobs do, in both worker flavours: typed handlers in a torture worker
//! process, and a command run by `skiplock work --exec`.
//!
//! Payload: `{"n": <unique>, "ms": <sleep>, "fail": <fail the first k attempts>,
//! "permanent": <fail for good>, "slow_first": <first attempt outlives its lease>}`.

use std::io::Read as _;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use skiplock::{Job, JobContext, JobError, JobOptions};

use crate::log;

/// The lease torture workers use; `slow_first` jobs sleep longer than this.
pub const LEASE: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Spec {
    pub n: u64,
    pub ms: u64,
    #[serde(default)]
    pub fail: u32,
    #[serde(default)]
    pub permanent: bool,
    #[serde(default)]
    pub slow_first: bool,
}

pub static LOG: OnceLock<PathBuf> = OnceLock::new();

fn log_path() -> PathBuf {
    LOG.get()
        .cloned()
        .unwrap_or_else(|| PathBuf::from("torture.log"))
}

/// Runs one attempt: the shared behaviour of every flavour.
async fn attempt(spec: &Spec, attempt: i32) -> Result<(), String> {
    // A slow job's first attempt outlives its lease (heartbeats off) by half of it; its later
    // attempts take half a lease, so that the one the reaper starts is usually still running
    // when the first one ends: the moment a stale write would land (the negative control).
    let lease_ms = LEASE.as_millis() as u64;
    let ms = match (spec.slow_first, attempt) {
        (true, 1) => lease_ms * 3 / 2,
        (true, _) => lease_ms / 2,
        (false, _) => spec.ms,
    };
    tokio::time::sleep(Duration::from_millis(ms)).await;
    if spec.permanent {
        return Err("permanent".into());
    }
    if u32::try_from(attempt).unwrap_or(0) <= spec.fail {
        return Err(format!("failing attempt {attempt} on purpose"));
    }
    Ok(())
}

async fn run_logged(spec: Spec, ctx: &JobContext) -> Result<(), JobError> {
    let path = log_path();
    log::start(&path, ctx.id.0, ctx.attempt);
    let r = attempt(&spec, ctx.attempt).await;
    log::end(&path, ctx.id.0, ctx.attempt, r.is_ok());
    match r {
        Ok(()) => Ok(()),
        Err(e) if spec.permanent => Err(JobError::discard(e)),
        Err(e) => Err(JobError::retry(e)),
    }
}

fn options(heartbeat: bool) -> JobOptions {
    JobOptions {
        max_attempts: 5,
        backoff: skiplock::Backoff::new(Duration::from_millis(200), Duration::from_secs(2))
            .unwrap_or_default(),
        heartbeat,
        ..JobOptions::default()
    }
}

/// A typed job handled in torture worker processes.
#[derive(Serialize, Deserialize)]
pub struct Typed(pub Spec);

impl Job for Typed {
    const KIND: &'static str = "typed";
    const QUEUE: &'static str = "typed";
    fn options() -> JobOptions {
        options(true)
    }
    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        run_logged(self.0, &ctx).await
    }
}

/// A typed job whose first attempt outlives its lease with heartbeats off, so that the
/// reaper hands it to another worker while it still runs.
#[derive(Serialize, Deserialize)]
pub struct Slow(pub Spec);

impl Job for Slow {
    const KIND: &'static str = "slow";
    const QUEUE: &'static str = "typed";
    fn options() -> JobOptions {
        options(false)
    }
    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        run_logged(self.0, &ctx).await
    }
}

/// `skiplock-torture exec-job --log FILE`: the command `skiplock work --exec` runs.
pub fn exec_job(log_file: PathBuf) -> std::process::ExitCode {
    let mut input = String::new();
    let _ = std::io::stdin().read_to_string(&mut input);
    let env = |k: &str| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let (job, attempt) = (env("SKIPLOCK_JOB_ID"), env("SKIPLOCK_ATTEMPT") as i32);
    let Ok(spec) = serde_json::from_str::<Spec>(&input) else {
        eprintln!("bad payload: {input}");
        return std::process::ExitCode::from(2);
    };
    log::start(&log_file, job, attempt);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return std::process::ExitCode::from(75),
    };
    let r = rt.block_on(self::attempt(&spec, attempt));
    log::end(&log_file, job, attempt, r.is_ok());
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::from(75)
        }
    }
}
