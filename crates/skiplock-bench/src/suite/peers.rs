//! The peers scenario: skiplock's worker and graphile_worker (the Rust crate, as published,
//! run as the bench crate's separate binary `skiplock-peer-graphile`) draining the same number
//! of pre-enqueued no-op jobs on the same cluster, in interleaved rounds.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::options::Scenario;
use super::report::Section;
use super::sitting::Sitting;
use crate::bench::{self, WorkerSetup as W};
use crate::error::{Error, Result};

/// Names the peer binary, if it is not beside the running program.
pub const PEER_ENV: &str = "SKIPLOCK_PEER_GRAPHILE";
/// The peer binary's name.
const PEER: &str = "skiplock-peer-graphile";
/// How to build the peer binary.
const BUILD: &str =
    "cargo build --release -p skiplock-bench --features peers --bin skiplock-peer-graphile";
/// The share of graphile_worker's best configuration skiplock's best setting must reach.
const TARGET: f64 = 1.5;

/// The peer binary: [`PEER_ENV`], else beside the running program.
fn peer() -> std::result::Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(PEER_ENV) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "{PEER_ENV} names {}, which is not a file: build it with `{BUILD}`",
                p.display()
            ))
        };
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(PEER)))
        .filter(|p| p.is_file());
    beside.ok_or_else(|| {
        format!(
            "{PEER} was not found beside this program nor in {PEER_ENV}: build it with `{BUILD}`"
        )
    })
}

/// One configuration of either queue.
enum Setup {
    Skiplock(W, &'static str),
    Graphile {
        concurrency: usize,
        local_queue: usize,
        batch_delay_ms: u64,
        poll_ms: u64,
        what: &'static str,
    },
}

impl Setup {
    fn label(&self) -> String {
        match self {
            Setup::Skiplock(w, what) => format!("skiplock, concurrency {}, {what}", w.concurrency),
            Setup::Graphile {
                concurrency, what, ..
            } => format!("graphile_worker, concurrency {concurrency}, {what}"),
        }
    }

    fn is_peer(&self) -> bool {
        matches!(self, Setup::Graphile { .. })
    }

    /// The jobs of a run: a twentieth for graphile_worker's defaults (without a local queue
    /// it starts about one job per worker and poll, a few hundred a second: a whole run
    /// would take minutes and say no more).
    fn jobs(&self, jobs: usize) -> usize {
        match self {
            Setup::Graphile { local_queue: 0, .. } => (jobs / 20).max(100),
            _ => jobs,
        }
    }
}

/// Runs graphile_worker once: jobs/s.
async fn graphile(
    program: &std::path::Path,
    url: &str,
    schema: &str,
    jobs: usize,
    setup: &Setup,
) -> Result<f64> {
    let Setup::Graphile {
        concurrency,
        local_queue,
        batch_delay_ms,
        poll_ms,
        ..
    } = setup
    else {
        return Ok(0.0);
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args([
        url,
        schema,
        &jobs.to_string(),
        &concurrency.to_string(),
        &local_queue.to_string(),
        &batch_delay_ms.to_string(),
        &poll_ms.to_string(),
    ])
    .stdin(std::process::Stdio::null());
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .map_err(Error::task("waiting for the peer"))?
        .map_err(Error::process(format!(
            "cannot start {}",
            program.display()
        )))?;
    let fail = |what: String| Error::Process { what, source: None };
    if !out.status.success() {
        return Err(fail(format!(
            "{PEER} ended with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str::<serde_json::Value>(line.trim())
        .ok()
        .and_then(|v| v["jobs_per_s"].as_f64())
        .ok_or_else(|| fail(format!("{PEER} printed no rate: {}", line.trim())))
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let q = s.quick();
    let jobs = s.options.jobs.unwrap_or(if q { 2_000 } else { 100_000 });
    let rounds = if q { 1 } else { 3 };
    let title = "Against graphile_worker".to_owned();
    let program = match peer() {
        Ok(p) => p,
        Err(why) => {
            s.target(
                format!(
                    "skiplock's best setting >= {TARGET}x graphile_worker's best configuration"
                ),
                format!("not measured: {why}"),
                Some(false),
            );
            return Ok(Section {
                title,
                table: format!("Not measured: {why} (scripts/bench.sh builds it).\n"),
            });
        }
    };
    let setups = [
        Setup::Skiplock(W::defaults(200), "defaults"),
        Setup::Skiplock(W::defaults(400).batch(1_000), "batch 1,000"),
        // graphile_worker deletes a job as it completes: the same work.
        Setup::Skiplock(
            W::defaults(200).delete_done(),
            "defaults, completed jobs deleted",
        ),
        // The throughput scenario's fastest settings together, as graphile_worker's best
        // configuration is its own tuning (its driver prepares its statements, too).
        Setup::Skiplock(
            W::defaults(400).batch(1_000).prepared().delete_done(),
            "batch 1,000, prepared statements, completed jobs deleted",
        ),
        // Larger claims still, as graphile_worker's best configuration fetches 5,000 at a
        // time into its local queue.
        Setup::Skiplock(
            W::defaults(800).batch(2_000).prepared().delete_done(),
            "batch 2,000, prepared statements, completed jobs deleted",
        ),
        Setup::Graphile {
            concurrency: 200,
            local_queue: 0,
            batch_delay_ms: 0,
            poll_ms: 0,
            what: "defaults",
        },
        Setup::Graphile {
            concurrency: 200,
            local_queue: 500,
            batch_delay_ms: 5,
            poll_ms: 0,
            what: "local queue of 500, completions batched for 5 ms",
        },
        // The configuration of graphile_worker's own throughput benchmark (perf_test).
        Setup::Graphile {
            concurrency: 500,
            local_queue: 5_000,
            batch_delay_ms: 5,
            poll_ms: 5,
            what: "local queue of 5,000, completions batched for 5 ms, poll 5 ms",
        },
    ];
    s.observer.planned(Scenario::Peers, rounds * setups.len());
    let schema: String = format!("{}_graphile", s.base)
        .to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    // For the checkpoint before each of the peer's runs; it sends nothing else.
    let admin = skiplock::Client::builder(s.url)
        .pool_size(1)
        .application_name("skiplock-bench")
        .build()?;
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
    for _ in 0..rounds {
        for (i, setup) in setups.iter().enumerate() {
            s.observer.run(&setup.label());
            let n = setup.jobs(jobs);
            let rate = match setup {
                Setup::Skiplock(w, _) => bench::throughput(s.url, s.base, n, w).await?.jobs_per_s,
                Setup::Graphile { .. } => {
                    // As every skiplock run's table fill begins with one (`bench::checkpoint`).
                    bench::checkpoint(&admin).await?;
                    graphile(&program, s.url, &schema, n, setup).await?
                }
            };
            s.observer.ran();
            s.point(serde_json::json!({
                "scenario": "peers", "queue": if setup.is_peer() { "graphile_worker" } else { "skiplock" },
                "setup": setup.label(), "jobs": n, "jobs_per_s": rate,
            }));
            rates[i].push(rate);
        }
    }
    let best = |i: usize| rates[i].iter().copied().fold(0.0, f64::max);
    let peer_best = (0..setups.len())
        .filter(|&i| setups[i].is_peer())
        .map(best)
        .fold(0.0, f64::max);
    let mut t = String::from("| queue and setting | jobs per run | runs (jobs/s) | best jobs/s | vs graphile_worker's best |\n|---|---:|---|---:|---:|\n");
    for (i, setup) in setups.iter().enumerate() {
        let each: Vec<String> = rates[i].iter().map(|r| format!("{r:.0}")).collect();
        let _ = writeln!(
            t,
            "| {} | {} | {} | {:.0} | {:.2}x |",
            setup.label(),
            setup.jobs(jobs),
            each.join(", "),
            best(i),
            best(i) / peer_best.max(1e-9)
        );
    }
    let _ = writeln!(
        t,
        "\nBoth queues drain the same number of pre-enqueued no-op jobs on the same cluster, the runs interleaved in {rounds} rounds (best of each). skiplock's runs are the throughput scenario's (wall time from the worker's start to its drain; prepared statements off but in the last two of its settings: the throughput scenario's fastest settings together, and the same with claims of 2,000 at concurrency 800); graphile_worker (0.14, as published) runs as the bench crate's own binary `{PEER}` (`{BUILD}`), with its jobs enqueued by its own `add_jobs` in one statement before its worker starts, timed from the worker's start until its jobs table is empty (polled every 10 ms). Its local queue takes up to that many jobs in one claim and holds them locked beyond its concurrency; skiplock claims at most `max_claim_batch` per claim, and beyond a queue's free slots only while its jobs are short (`claim_ahead`, on by default: at most `max_claim_batch` times its claims in flight, as many as its slots start within 5 ms). graphile_worker deletes each job as it completes; skiplock keeps it as `done` until pruning unless `delete_done` is on (\"completed jobs deleted\"), which does the same work.",
    );
    // skiplock's best setting against graphile_worker's best, the defaults' ratio beside it.
    let (ours, ours_best) = (0..setups.len())
        .filter(|&i| !setups[i].is_peer())
        .map(|i| (i, best(i)))
        .fold((0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
    let ratio = ours_best / peer_best.max(1e-9);
    s.target(
        format!("skiplock's best setting >= {TARGET}x graphile_worker's best configuration"),
        format!(
            "{ratio:.2}x ({}: {ours_best:.0} vs {peer_best:.0} jobs/s); the defaults {:.2}x",
            setups[ours].label(),
            best(0) / peer_best.max(1e-9)
        ),
        Some(ratio >= TARGET),
    );
    Ok(Section { title, table: t })
}
