//! `skiplock bench`: the benchmark scenarios of `skiplock_bench::bench`, printed as tables, JSON
//! lines, or the Markdown of docs/BENCHMARKS.md.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::time::Duration;

use skiplock_bench::bench;

use crate::connect::Target;
use crate::errors::usage;
use crate::output::{errln, out, outln, print_json};
use crate::parse::parse_duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// No-op jobs through a worker, against the raw-SQL ceiling of the same statements.
    Throughput,
    /// Enqueue-to-start latency at a steady offered load, LISTEN on and off.
    Latency,
    /// Enqueue rate: single-row transactions and batches.
    Enqueue,
    /// Claim latency with many finished rows kept.
    History,
    /// Dead tuples, size, WAL and transactions per job at a steady load, with and without a
    /// transaction holding back vacuum.
    Footprint,
    /// 1, 2, 4 and 8 `skiplock work` processes draining one queue: total jobs/s and the claim
    /// latency beside them.
    Processes,
    /// Flow control: concurrency 200 with a limit that does not bind, and with a per-key
    /// limit of 2 over 1,000 keys, against the same runs without limits and the raw-SQL
    /// ceiling, in one sitting.
    Limits,
    /// Workflows: 10,000 jobs enqueued as a fan-out, without edges and as a chain against
    /// `enqueue_many`, and a worker through a fan-out and chains against plain jobs (jobs/s,
    /// and the time per link of a chain).
    Workflow,
    /// Everything (see `bench all`'s first line for how long it takes).
    All,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which scenario.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Jobs per throughput run (default 50,000), the enqueue scenario's batch total (default
    /// 100,000), and the workflow scenario's jobs per shape (default 10,000; its chains are
    /// 100 of a hundredth of that, and one of a tenth).
    #[arg(long)]
    jobs: Option<usize>,
    /// Queue concurrency for one throughput point (against the ceiling sweep); default: a
    /// sweep of points. The workflow scenario's worker: default 100.
    #[arg(long)]
    concurrency: Option<usize>,
    /// Jobs per claim for the --concurrency point (default: the worker's default).
    #[arg(long, requires = "concurrency")]
    batch: Option<u32>,
    /// Claims in flight for the --concurrency point (default: automatic).
    #[arg(long, requires = "concurrency")]
    claims_in_flight: Option<usize>,
    /// Offered jobs per second (latency: one point instead of the 50/500/5000 sweep;
    /// footprint: default 200).
    #[arg(long)]
    rate: Option<f64>,
    /// How long each latency point runs (default 10s), or the footprint's steady phase
    /// (default 2m; the held-snapshot run adds 30s before, 60s held, 90s after).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Finished rows for the history scenario, comma-separated (default 0,1000000,10000000).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<i64>,
    /// Tiny sizes, for checking that every scenario still runs (seconds, not minutes).
    #[arg(long)]
    quick: bool,
    /// One JSON object per measured point.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print the report as Markdown (scripts/bench.sh writes it to docs/BENCHMARKS.md).
    #[arg(long)]
    markdown: bool,
}

/// The targets of the report: what, the figure measured, and whether it was met (`None`: see
/// the table).
type Targets = Vec<(String, String, Option<bool>)>;

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    let url = target.url().await?;
    let base = &target.schema;
    let all = args.scenario == Scenario::All;
    let want = |s: Scenario| all || args.scenario == s;
    let q = args.quick;
    let jobs = args.jobs.unwrap_or(if q { 2_000 } else { 100_000 });
    if jobs == 0 {
        return Err(usage("--jobs must be at least 1"));
    }
    if all && !args.json {
        errln!(
            "skiplock bench all: expect about {} (throughput {}, latency {}, enqueue and history {}, footprint {}, processes {}, limits {}, workflow {})",
            if q { "1 minute" } else { "15 minutes" },
            if q { "20 s" } else { "2 min" },
            if q { "4 s" } else { "1 min" },
            if q { "seconds" } else { "2 min" },
            if q { "6 s" } else { "6 min" },
            if q { "10 s" } else { "1 min" },
            if q { "10 s" } else { "3 min" },
            if q { "5 s" } else { "30 s" },
        );
    }
    let mut md = String::new();
    if args.markdown {
        md.push_str(&header(&url, &args).await);
    }
    let mut targets: Targets = Vec::new();

    if want(Scenario::Throughput) {
        let jobs = args.jobs.unwrap_or(if q { 2_000 } else { 50_000 });
        throughput(&url, base, &args, jobs, &mut md, &mut targets).await?;
    }

    if want(Scenario::Latency) {
        latency(&url, base, &args, &mut md, &mut targets).await?;
    }

    if want(Scenario::Enqueue) {
        enqueue(&url, base, &args, jobs, &mut md, &mut targets).await?;
    }

    if want(Scenario::History) {
        history(&url, base, &args, &mut md, &mut targets).await?;
    }

    if want(Scenario::Footprint) {
        footprint(&url, base, &args, &mut md, &mut targets).await?;
    }

    if want(Scenario::Processes) {
        processes(&url, base, &args, &mut md).await?;
    }

    if want(Scenario::Limits) {
        let jobs = args.jobs.unwrap_or(if q { 2_000 } else { 50_000 });
        limits(&url, base, &args, jobs, &mut md, &mut targets).await?;
    }

    if want(Scenario::Workflow) {
        let jobs = args.jobs.unwrap_or(if q { 500 } else { 10_000 });
        workflow(&url, base, &args, jobs, &mut md).await?;
    }

    if args.markdown {
        let mut t = String::from("| target | measured | met |\n|---|---|---|\n");
        for (what, measured, met) in &targets {
            let met = match met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "see the table",
            };
            let _ = writeln!(t, "| {what} | {measured} | {met} |");
        }
        let _ = write!(md, "\n## Targets\n\n{t}");
        out!("{md}");
    }
    Ok(())
}

/// Enqueue-to-start latency at each offered load, LISTEN on and off.
async fn latency(
    url: &str,
    base: &str,
    args: &Args,
    md: &mut String,
    targets: &mut Targets,
) -> anyhow::Result<()> {
    let q = args.quick;
    let rates = match args.rate {
        Some(r) => vec![r],
        None if q => vec![50.0],
        None => vec![50.0, 500.0, 5_000.0],
    };
    let dur = args.duration.unwrap_or(if q {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(10)
    });
    let mut t = String::from(
        "| offered jobs/s | wake-up | jobs | p50 ms | p95 ms | p99 ms |\n|---:|---|---:|---:|---:|---:|\n",
    );
    for r in rates {
        if r <= 0.0 {
            return Err(usage("--rate must be above 0"));
        }
        for listen in [true, false] {
            let p = bench::latency(url, base, r, dur, listen).await?;
            if listen && (r - 500.0).abs() < f64::EPSILON {
                targets.push((
                    "pickup p50 <= 2 ms and p99 <= 10 ms at 500 jobs/s with LISTEN".into(),
                    format!("p50 {:.2} ms, p99 {:.2} ms", p.p50_ms, p.p99_ms),
                    Some(p.p50_ms <= 2.0 && p.p99_ms <= 10.0),
                ));
            }
            if listen && (r - 50.0).abs() < f64::EPSILON {
                targets.push((
                    "pickup p50 <= 1.5 ms at 50 jobs/s with LISTEN".into(),
                    format!("p50 {:.2} ms", p.p50_ms),
                    Some(p.p50_ms <= 1.5),
                ));
            }
            if args.json {
                print_json(&serde_json::json!({
                    "scenario": "latency", "offered_per_s": p.offered_per_s,
                    "listen": p.listen, "jobs": p.jobs,
                    "p50_ms": p.p50_ms, "p95_ms": p.p95_ms, "p99_ms": p.p99_ms,
                }));
            }
            let _ = writeln!(
                t,
                "| {:.0} | {} | {} | {:.2} | {:.2} | {:.2} |",
                p.offered_per_s,
                if p.listen { "LISTEN" } else { "poll 1 s" },
                p.jobs,
                p.p50_ms,
                p.p95_ms,
                p.p99_ms
            );
        }
    }
    t.push_str(
        "\nJobs are enqueued one per statement and evenly paced (at 500 jobs/s one every 2 ms, from eight connections taking turns), after one second of the same load that is not counted (the pool's connections open, the worker settles). Latency is the claim's `now()` minus the enqueue's `now()`: the enqueue's commit, the notification's delivery and the claim's start.\n",
    );
    section(
        args,
        md,
        &format!(
            "Enqueue-to-start latency ({} s per point, database clock)",
            dur.as_secs_f64()
        ),
        &t,
    );
    Ok(())
}

/// Enqueue rates: single-row transactions and batches.
async fn enqueue(
    url: &str,
    base: &str,
    args: &Args,
    jobs: usize,
    md: &mut String,
    targets: &mut Targets,
) -> anyhow::Result<()> {
    let q = args.quick;
    let points = bench::enqueue(url, base, if q { 2_000 } else { jobs.max(20_000) }).await?;
    let best_batch = points
        .iter()
        .filter(|p| p.mode.starts_with("batch"))
        .map(|p| p.jobs_per_s)
        .fold(0.0, f64::max);
    targets.push((
        "batched enqueue >= 100,000 jobs/s".into(),
        format!("{best_batch:.0} jobs/s"),
        Some(best_batch >= 100_000.0),
    ));
    let mut t = String::from("| mode | jobs | jobs/s |\n|---|---:|---:|\n");
    for p in &points {
        if args.json {
            print_json(&serde_json::json!({
                "scenario": "enqueue", "mode": p.mode, "jobs": p.jobs, "jobs_per_s": p.jobs_per_s,
            }));
        }
        let _ = writeln!(t, "| {} | {} | {:.0} |", p.mode, p.jobs, p.jobs_per_s);
    }
    section(args, md, "Enqueue", &t);
    Ok(())
}

/// Claim latency with finished rows kept.
async fn history(
    url: &str,
    base: &str,
    args: &Args,
    md: &mut String,
    targets: &mut Targets,
) -> anyhow::Result<()> {
    let q = args.quick;
    let sizes = if !args.sizes.is_empty() {
        args.sizes.clone()
    } else if q {
        vec![0, 10_000]
    } else {
        vec![0, 1_000_000, 10_000_000]
    };
    if sizes.iter().any(|s| *s < 0) {
        return Err(usage("--sizes must not be negative"));
    }
    let points = bench::history(url, base, &sizes, if q { 200 } else { 2_000 }).await?;
    let base_p50 = points.first().map_or(0.0, |p| p.claim_p50_ms);
    if let Some(last) = points.last().filter(|p| p.finished_rows >= 10_000_000) {
        let r = last.claim_p50_ms / base_p50.max(1e-9);
        targets.push((
            "claim latency with 10 million finished rows within 1.5x of the empty table".into(),
            format!("{r:.2}x"),
            Some(r <= 1.5),
        ));
    }
    let mut t = String::from(
        "| finished rows kept | claims | claim p50 ms | claim p99 ms | p50 vs empty |\n|---:|---:|---:|---:|---:|\n",
    );
    for p in &points {
        if args.json {
            print_json(&serde_json::json!({
                "scenario": "history", "finished_rows": p.finished_rows, "claims": p.claims,
                "claim_p50_ms": p.claim_p50_ms, "claim_p99_ms": p.claim_p99_ms,
            }));
        }
        let _ = writeln!(
            t,
            "| {} | {} | {:.3} | {:.3} | {:.2}x |",
            p.finished_rows,
            p.claims,
            p.claim_p50_ms,
            p.claim_p99_ms,
            p.claim_p50_ms / base_p50.max(1e-9)
        );
    }
    section(args, md, "Claim cost with finished rows kept", &t);
    Ok(())
}

/// Dead tuples, size, WAL and transactions per job at a steady load, with and without a
/// held snapshot.
async fn footprint(
    url: &str,
    base: &str,
    args: &Args,
    md: &mut String,
    targets: &mut Targets,
) -> anyhow::Result<()> {
    let q = args.quick;
    let rate = args
        .rate
        .filter(|_| args.scenario == Scenario::Footprint)
        .unwrap_or(200.0);
    let steady = args
        .duration
        .filter(|_| args.scenario == Scenario::Footprint)
        .unwrap_or(if q {
            Duration::from_secs(3)
        } else {
            Duration::from_secs(120)
        });
    let s = |secs: u64| Duration::from_secs(if q { 2 } else { secs });
    let held = [("before", s(30)), ("during", s(60)), ("after", s(90))];
    let mut t = String::from(
        "| run | phase | s | jobs/s | dead tuples median | dead tuples max | under 6,000 after | under 2,000 after | table+indexes | WAL bytes/job | transactions/job | p50 ms | p99 ms |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for bystander in [false, true] {
        let points = if bystander {
            bench::footprint(url, base, rate, &held).await?
        } else {
            bench::footprint(url, base, rate, &[("steady", steady)]).await?
        };
        if !bystander {
            if let Some(p) = points.first() {
                targets.push((
                    format!(
                        "footprint at {rate:.0} jobs/s: dead tuples median <= 2,000, max <= 6,000"
                    ),
                    format!("median {}, max {}", p.dead_median, p.dead_max),
                    Some(
                        p.dead_median <= bench::FOOTPRINT_MEDIAN_BOUND
                            && p.dead_max <= bench::FOOTPRINT_MAX_BOUND,
                    ),
                ));
            }
        } else if let (Some(d), Some(a)) = (
            points.iter().find(|p| p.phase == "during"),
            points.iter().find(|p| p.phase == "after"),
        ) {
            targets.push((
                "dead tuples under 6,000 within 60 s after a held snapshot ends".into(),
                format!(
                    "max {} while held; under 6,000 {} and under 2,000 {} after it ended",
                    d.dead_max,
                    secs(a.under_max_bound_s),
                    secs(a.under_median_bound_s)
                ),
                Some(a.under_max_bound_s.is_some_and(|s| s <= 60.0)),
            ));
        }
        for p in &points {
            if args.json {
                print_json(&serde_json::json!({
                    "scenario": "footprint", "bystander": bystander, "phase": p.phase,
                    "rate": p.rate, "seconds": p.seconds, "jobs": p.jobs,
                    "jobs_per_s": p.jobs_per_s,
                    "dead_median": p.dead_median, "dead_max": p.dead_max,
                    "under_max_bound_s": p.under_max_bound_s,
                    "under_median_bound_s": p.under_median_bound_s,
                    "table_bytes": p.table_bytes, "wal_bytes_per_job": p.wal_bytes_per_job,
                    "transactions_per_job": p.transactions_per_job,
                    "p50_ms": p.p50_ms, "p99_ms": p.p99_ms,
                }));
            }
            let _ = writeln!(
                t,
                "| {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {:.1} MiB | {:.0} | {:.2} | {:.2} | {:.2} |",
                if bystander {
                    "REPEATABLE READ held through `during`"
                } else {
                    "steady"
                },
                p.phase,
                p.seconds,
                p.jobs_per_s,
                p.dead_median,
                p.dead_max,
                after(p, p.under_max_bound_s),
                after(p, p.under_median_bound_s),
                p.table_bytes as f64 / (1024.0 * 1024.0),
                p.wal_bytes_per_job,
                p.transactions_per_job,
                p.p50_ms,
                p.p99_ms
            );
        }
    }
    let _ = writeln!(
        t,
        "\nDead tuples of the jobs table are sampled each second from the statistics system. A worker with default settings vacuums the table itself past 1,000 dead tuples (`WorkerConfig::vacuum_threshold`), checked every 5 s. \"Under … after\" is the time from the held transaction's end to the first sample at or under that bound."
    );
    section(args, md, &format!("Footprint at {rate:.0} jobs/s"), &t);
    Ok(())
}

/// Several `skiplock work` processes on one queue: total throughput, and the claim latency
/// beside them.
async fn processes(url: &str, base: &str, args: &Args, md: &mut String) -> anyhow::Result<()> {
    let q = args.quick;
    let exe = std::env::current_exe()?;
    let counts: Vec<usize> = if q { vec![1, 2] } else { vec![1, 2, 4, 8] };
    let pjobs = if q {
        2_000
    } else {
        args.jobs.unwrap_or(100_000)
    };
    let concurrency = 50;
    let points = bench::processes(url, base, &exe, &counts, pjobs, concurrency).await?;
    let mut t = String::from(
        "| processes | jobs | jobs/s | vs 1 process | claims timed | claim p50 ms | claim p99 ms |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let one = points.first().map_or(0.0, |p| p.jobs_per_s);
    for p in &points {
        if args.json {
            print_json(&serde_json::json!({
                "scenario": "processes", "processes": p.processes,
                "concurrency": p.concurrency, "jobs": p.jobs, "done": p.done,
                "jobs_per_s": p.jobs_per_s, "claims": p.claims,
                "claim_p50_ms": p.claim_p50_ms, "claim_p99_ms": p.claim_p99_ms,
            }));
        }
        let _ = writeln!(
            t,
            "| {} | {} | {:.0} | {:.2}x | {} | {:.3} | {:.3} |",
            p.processes,
            p.jobs,
            p.jobs_per_s,
            p.jobs_per_s / one.max(1e-9),
            p.claims,
            p.claim_p50_ms,
            p.claim_p99_ms
        );
    }
    let _ = writeln!(
        t,
        "\nEach process is `skiplock work --queue bench={concurrency} --drain` with default settings (claims of up to 100), all on one pre-filled queue; jobs/s counts from spawning them to the last one's exit (process start included). The claim latency is a probe beside them on its own connection, claiming one job every 10 ms and completing it."
    );
    section(
        args,
        md,
        &format!("Worker processes on one queue ({pjobs} no-op jobs)"),
        &t,
    );
    Ok(())
}

/// The flow-control overhead: each setup three times, interleaved (so that a drift of the
/// machine hits them alike), the median of each against the median of the same jobs without
/// limits, and against the best raw-SQL ceiling of the same sitting.
async fn limits(
    url: &str,
    base: &str,
    args: &Args,
    jobs: usize,
    md: &mut String,
    targets: &mut Targets,
) -> anyhow::Result<()> {
    use bench::WorkerSetup as W;
    use skiplock::QueueLimits as L;
    let concurrency = 200;
    let keys = 1_000;
    let batch = skiplock::WorkerConfig::default().max_claim_batch;
    let mut ceiling = 0.0f64;
    for loops in [2, 4] {
        ceiling = ceiling.max(
            bench::ceiling(url, base, jobs, batch, loops)
                .await?
                .jobs_per_s,
        );
        ceiling = ceiling.max(
            bench::ceiling_pipelined(url, base, jobs, batch, loops)
                .await?
                .jobs_per_s,
        );
    }
    let setups: [(&str, W); 4] = [
        ("no limits", W::defaults(concurrency)),
        (
            "concurrency limit 10,000 (does not bind)",
            W::defaults(concurrency).limits(L::none().concurrency(10_000)),
        ),
        ("1,000 keys, no limits", W::defaults(concurrency).keys(keys)),
        (
            "1,000 keys, per-key limit 2",
            W::defaults(concurrency)
                .keys(keys)
                .limits(L::none().per_key(2)),
        ),
    ];
    let rounds = if args.quick { 1 } else { 3 };
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
    for _ in 0..rounds {
        for (i, (name, w)) in setups.iter().enumerate() {
            let p = bench::throughput(url, base, jobs, w).await?;
            if args.json {
                print_json(&serde_json::json!({
                    "scenario": "limits", "setup": name, "jobs": p.jobs,
                    "concurrency": concurrency, "jobs_per_s": p.jobs_per_s,
                    "ceiling_jobs_per_s": ceiling,
                }));
            }
            rates[i].push(p.jobs_per_s);
        }
    }
    let median = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let medians: Vec<f64> = rates.iter().map(median).collect();
    let plain = medians[0].max(1e-9);
    let mut t = String::from(
        "| setup | runs (jobs/s) | median jobs/s | of the same jobs without limits | of the ceiling |
|---|---|---:|---:|---:|
",
    );
    for (i, (name, _)) in setups.iter().enumerate() {
        let runs: Vec<String> = rates[i].iter().map(|r| format!("{r:.0}")).collect();
        let _ = writeln!(
            t,
            "| {name} | {} | {:.0} | {:.0}% | {:.0}% |",
            runs.join(", "),
            medians[i],
            100.0 * medians[i] / if i < 2 { plain } else { medians[2].max(1e-9) },
            100.0 * medians[i] / ceiling.max(1e-9),
        );
    }
    let _ = writeln!(
        t,
        "
Concurrency {concurrency}, default settings, {jobs} no-op jobs per run; the keyed runs spread the jobs evenly over {keys} keys. Each setup ran {rounds} times, interleaved. Ceiling: the best of the raw-SQL loops (2 and 4 claim-and-finish loops, 2 and 4 claim loops + 1 finish loop) in the same sitting, {ceiling:.0} jobs/s."
    );
    // Each limited run against the same jobs without limits: the plain jobs for the limit
    // that does not bind, the keyed jobs for the per-key limit.
    let nonbinding = medians[1] / plain;
    let per_key = medians[3] / medians[2].max(1e-9);
    targets.push((
        "a limit that does not bind: >= 90% of no limits".into(),
        format!("{:.0}%", 100.0 * nonbinding),
        Some(nonbinding >= 0.9),
    ));
    targets.push((
        "a per-key limit of 2 over 1,000 keys: >= 80% of the same keyed jobs without limits".into(),
        format!("{:.0}%", 100.0 * per_key),
        Some(per_key >= 0.8),
    ));
    section(
        args,
        md,
        &format!("Flow control ({jobs} no-op jobs per run)"),
        &t,
    );
    Ok(())
}

/// Workflows against plain jobs: enqueueing `jobs` jobs in one call as plain jobs, as a
/// workflow without edges, as a fan-out and as one chain (the best of 3 each); then a
/// worker through `jobs` plain jobs, a fan-out of as many, 100 chains (10 with --quick) and
/// one chain of a tenth of them, each 3 times (once with --quick), interleaved: the median
/// jobs/s of each against the plain jobs', and the time per link of the chains.
async fn workflow(
    url: &str,
    base: &str,
    args: &Args,
    jobs: usize,
    md: &mut String,
) -> anyhow::Result<()> {
    use bench::FlowShape as F;
    let q = args.quick;
    let chains = if q { 10 } else { 100 };
    if jobs < chains.max(10) {
        return Err(usage(format!(
            "--jobs must be at least {} for the workflow scenario",
            chains.max(10)
        )));
    }
    if jobs > skiplock::MAX_WORKFLOW_JOBS {
        return Err(usage(format!(
            "--jobs must be at most {} for the workflow scenario (one workflow's limit)",
            skiplock::MAX_WORKFLOW_JOBS
        )));
    }
    let plain = F::Plain { jobs };
    let fan_out = F::FanOut { children: jobs - 1 };
    let enqueued = bench::workflow_enqueue(
        url,
        base,
        &[
            plain,
            F::Unlinked { jobs },
            fan_out,
            F::Chains {
                chains: 1,
                length: jobs,
            },
        ],
        3,
    )
    .await?;
    let many = enqueued.first().map_or(0.0, |p| p.jobs_per_s).max(1e-9);
    let mut t = format!(
        "Enqueueing {jobs} no-op jobs in one call, best of 3 (the shapes taking turns, the jobs table emptied before each call):\n\n| jobs | call | best ms | jobs/s | of `enqueue_many` | runs (ms) |\n|---|---|---:|---:|---:|---|\n"
    );
    for p in &enqueued {
        let ratio = p.jobs_per_s / many;
        if args.json {
            print_json(&serde_json::json!({
                "scenario": "workflow-enqueue", "shape": p.shape.name(), "call": p.shape.call(),
                "jobs": p.shape.jobs(), "runs_ms": p.runs_ms, "best_ms": p.best_ms,
                "jobs_per_s": p.jobs_per_s, "ratio": ratio,
            }));
        }
        let runs: Vec<String> = p.runs_ms.iter().map(|r| format!("{r:.1}")).collect();
        let _ = writeln!(
            t,
            "| {} | `{}` | {:.1} | {:.0} | {:.2}x | {} |",
            p.shape.describe(),
            p.shape.call(),
            p.best_ms,
            p.jobs_per_s,
            ratio,
            runs.join(", ")
        );
    }

    let mut setup = bench::WorkerSetup::defaults(args.concurrency.unwrap_or(100));
    setup.batch = args.batch;
    setup.claims_in_flight = args.claims_in_flight;
    if setup.concurrency == 0 || setup.batch == Some(0) || setup.claims_in_flight == Some(0) {
        return Err(usage(
            "--concurrency, --batch and --claims-in-flight must be at least 1",
        ));
    }
    let shapes = [
        plain,
        fan_out,
        F::Chains {
            chains,
            length: jobs / chains,
        },
        F::Chains {
            chains: 1,
            length: jobs / 10,
        },
    ];
    let rounds = if q { 1 } else { 3 };
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
    for _ in 0..rounds {
        for (i, shape) in shapes.iter().enumerate() {
            let p = bench::workflow_throughput(url, base, *shape, &setup).await?;
            runs[i].push(p.seconds);
        }
    }
    let median = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let plain_rate = plain.jobs() as f64 / median(&runs[0]).max(1e-9);
    let _ = write!(
        t,
        "\nThrough one worker (concurrency {}, {}), {}; from the worker's start to the last outcome written:\n\n| jobs | in a row | runs (jobs/s) | median jobs/s | of plain jobs | ms per link |\n|---|---:|---|---:|---:|---:|\n",
        setup.concurrency,
        if setup.is_default() {
            "default settings".to_owned()
        } else {
            format!(
                "default settings but batch {} and {} claims in flight",
                setup.batch.map_or_else(|| "default".to_owned(), |b| b.to_string()),
                setup
                    .claims_in_flight
                    .map_or_else(|| "automatic".to_owned(), |c| c.to_string())
            )
        },
        if rounds == 1 {
            "one run each".to_owned()
        } else {
            format!("{rounds} runs each, interleaved")
        },
    );
    for (shape, secs) in shapes.iter().zip(&runs) {
        let s = median(secs).max(1e-9);
        let rate = shape.jobs() as f64 / s;
        let per_link = s * 1000.0 / shape.links() as f64;
        let is_chain = matches!(shape, F::Chains { .. });
        if args.json {
            print_json(&serde_json::json!({
                "scenario": "workflow-throughput", "shape": shape.name(),
                "jobs": shape.jobs(), "links": shape.links(),
                "concurrency": setup.concurrency,
                "runs_jobs_per_s": secs.iter().map(|x| shape.jobs() as f64 / x.max(1e-9)).collect::<Vec<_>>(),
                "seconds": s, "jobs_per_s": rate, "ratio": rate / plain_rate.max(1e-9),
                "ms_per_link": if is_chain { Some(per_link) } else { None },
            }));
        }
        let runs: Vec<String> = secs
            .iter()
            .map(|x| format!("{:.0}", shape.jobs() as f64 / x.max(1e-9)))
            .collect();
        let _ = writeln!(
            t,
            "| {} | {} | {} | {:.0} | {:.2}x | {} |",
            shape.describe(),
            shape.links(),
            runs.join(", "),
            rate,
            rate / plain_rate.max(1e-9),
            if is_chain {
                format!("{per_link:.2}")
            } else {
                "–".to_owned()
            }
        );
    }
    let _ = writeln!(
        t,
        "\nNo-op jobs, enqueued and the table vacuumed and analyzed before the worker starts; the worker serves (`Worker::run`, LISTEN on, the fallback poll at its default), so that a child released by its parent's outcome is woken for by the notification its release sends. \"In a row\": the most jobs that must run one after another. A chain runs one job at a time: its time per link (the wall time over its length) is a job's outcome written (releasing the next job and notifying), the notification heard, the next job claimed and run."
    );
    section(args, md, &format!("Workflows ({jobs} no-op jobs)"), &t);
    Ok(())
}

fn secs(s: Option<f64>) -> String {
    s.map_or_else(|| "never".into(), |s| format!("{s:.0} s"))
}

/// The time back under a bound, shown for the phase after a held snapshot only.
fn after(p: &bench::FootprintPoint, s: Option<f64>) -> String {
    if p.phase == "after" {
        secs(s)
    } else {
        "–".into()
    }
}

fn section(args: &Args, md: &mut String, title: &str, table: &str) {
    if args.json {
        return;
    }
    if args.markdown {
        let _ = write!(md, "\n## {title}\n\n{table}");
    } else {
        outln!("\n{title}\n{table}");
    }
}

/// The report's head: the command, the versions and the machine.
async fn header(url: &str, args: &Args) -> String {
    let server = server_version(url)
        .await
        .unwrap_or_else(|| "unknown".into());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or_else(
            || "unknown".into(),
            |kb| format!("{:.0} GiB", kb / 1024.0 / 1024.0),
        );
    // The command, without the (machine-specific) database URL.
    let mut cmd: Vec<String> = Vec::new();
    let mut skip = false;
    for a in std::env::args().skip(1) {
        if skip {
            skip = false;
            continue;
        }
        if a == "--database-url" {
            skip = true;
            continue;
        }
        if a.starts_with("--database-url=") {
            continue;
        }
        cmd.push(a);
    }
    let _ = args;
    format!(
        "# Benchmarks\n\nProduced by `scripts/bench.sh` (which runs `skiplock {}` against a throwaway \
         cluster). Every figure below comes from that one run on one machine; compare ratios, not \
         absolute numbers, across machines.\n\n- skiplock {} (release build)\n- PostgreSQL {server} \
         (local, default settings)\n- {cores} cores ({cpu}), {mem} of memory; the database, the workers \
         and the load generator share them\n",
        cmd.join(" "),
        env!("CARGO_PKG_VERSION"),
    )
}

async fn server_version(url: &str) -> Option<String> {
    let client = skiplock::Client::builder(url).pool_size(1).build().ok()?;
    client.server_version().await.ok()
}

/// The throughput scenario: the raw-SQL ceiling at 1 to 16 loops (its best is the physical
/// limit of the statements on this server), then worker points as ratios of that best.
/// The throughput scenario's runs: which ceiling shapes, which worker points.
struct ThroughputPlan {
    loops: Vec<usize>,
    pipelined: Vec<usize>,
    points: Vec<bench::WorkerSetup>,
    frozen_runs: usize,
    frozen_concurrency: usize,
}

impl ThroughputPlan {
    fn new(args: &Args) -> anyhow::Result<ThroughputPlan> {
        use bench::WorkerSetup as W;
        let q = args.quick;
        if args.concurrency == Some(0) || args.batch == Some(0) || args.claims_in_flight == Some(0)
        {
            return Err(usage(
                "--concurrency, --batch and --claims-in-flight must be at least 1",
            ));
        }
        let points: Vec<W> = match args.concurrency {
            Some(c) => {
                let mut w = W::defaults(c);
                w.batch = args.batch;
                w.claims_in_flight = args.claims_in_flight;
                vec![w]
            }
            None if q => vec![
                W::defaults(10),
                W::defaults(10).batch(10).claims_in_flight(1),
            ],
            None => vec![
                W::defaults(10).batch(1).claims_in_flight(1),
                W::defaults(10),
                W::defaults(50),
                W::defaults(100).claims_in_flight(1),
                W::defaults(100),
                W::defaults(200).claims_in_flight(1),
                W::defaults(200).batch(50).claims_in_flight(4),
                W::defaults(200),
                W::defaults(200).prepared(),
                W::defaults(400).claims_in_flight(8),
                W::defaults(400),
            ],
        };
        Ok(ThroughputPlan {
            loops: if q { vec![1, 2] } else { vec![1, 2, 4, 8, 16] },
            // The worker's shape (claim loops feeding one finishing loop), at the parallelism
            // where it can differ from back-to-back loops.
            pipelined: if q { vec![1] } else { vec![1, 2, 4] },
            points,
            frozen_runs: if args.concurrency.is_some() {
                0
            } else if q {
                1
            } else {
                3
            },
            frozen_concurrency: if q { 10 } else { 200 },
        })
    }

    fn runs(&self) -> usize {
        self.loops.len() + self.pipelined.len() + self.points.len() + self.frozen_runs
    }
}

/// What the throughput scenario measured.
struct ThroughputRuns {
    ceilings: Vec<bench::CeilingPoint>,
    best_ceiling: f64,
    rows: Vec<bench::ThroughputPoint>,
    frozen: Vec<f64>,
}

async fn throughput(
    url: &str,
    base: &str,
    args: &Args,
    jobs: usize,
    md: &mut String,
    targets: &mut Targets,
) -> anyhow::Result<()> {
    let plan = ThroughputPlan::new(args)?;
    let bar = if args.json || args.markdown || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(plan.runs() as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "throughput {bar:30} {pos}/{len} runs  {elapsed_precise}  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let ceilings = ceiling_sweep(url, base, args, jobs, &plan, &bar).await?;
    let best_ceiling = ceilings.iter().map(|c| c.jobs_per_s).fold(0.0, f64::max);
    let (rows, frozen) = worker_sweep(url, base, args, jobs, &plan, best_ceiling, &bar).await?;
    bar.finish_and_clear();
    let runs = ThroughputRuns {
        ceilings,
        best_ceiling,
        rows,
        frozen,
    };
    let spread = throughput_targets(args, &plan, &runs, targets);
    section(
        args,
        md,
        &format!("Throughput ({jobs} no-op jobs per run)"),
        &throughput_table(&plan, &runs, spread),
    );
    Ok(())
}

/// The raw-SQL ceiling at each planned shape.
async fn ceiling_sweep(
    url: &str,
    base: &str,
    args: &Args,
    jobs: usize,
    plan: &ThroughputPlan,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<bench::CeilingPoint>> {
    let ceiling_batch = skiplock::WorkerConfig::default().max_claim_batch;
    let shapes = plan.loops.iter().map(|l| (*l, false));
    let shapes = shapes.chain(plan.pipelined.iter().map(|l| (*l, true)));
    let mut ceilings = Vec::new();
    for (l, pipelined) in shapes {
        let c = if pipelined {
            bar.set_message(format!("ceiling, {l} claim loops + 1 finish loop"));
            bench::ceiling_pipelined(url, base, jobs, ceiling_batch, l).await?
        } else {
            bar.set_message(format!("ceiling, {l} loops"));
            bench::ceiling(url, base, jobs, ceiling_batch, l).await?
        };
        bar.inc(1);
        if args.json {
            print_json(&serde_json::json!({
                "scenario": "throughput-ceiling", "jobs": c.jobs, "loops": c.loops,
                "pipelined": c.pipelined, "batch": c.batch, "jobs_per_s": c.jobs_per_s,
            }));
        }
        ceilings.push(c);
    }
    Ok(ceilings)
}

/// The worker at each planned point, then the runs with frozen statistics.
async fn worker_sweep(
    url: &str,
    base: &str,
    args: &Args,
    jobs: usize,
    plan: &ThroughputPlan,
    best_ceiling: f64,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<(Vec<bench::ThroughputPoint>, Vec<f64>)> {
    use bench::WorkerSetup as W;
    let (points, frozen_runs, frozen_concurrency) =
        (&plan.points, plan.frozen_runs, plan.frozen_concurrency);
    let mut rows = Vec::new();
    for w in points {
        bar.set_message(format!("worker, concurrency {}", w.concurrency));
        let p = bench::throughput(url, base, jobs, w).await?;
        bar.inc(1);
        if args.json {
            print_json(&serde_json::json!({
                "scenario": "throughput", "jobs": p.jobs, "concurrency": w.concurrency,
                "batch": p.batch, "claims_in_flight": p.claims_in_flight,
                "defaults": w.is_default(), "prepared": w.prepared,
                "jobs_per_s": p.jobs_per_s, "ceiling_jobs_per_s": best_ceiling,
                "ratio": p.jobs_per_s / best_ceiling.max(1e-9),
            }));
        }
        rows.push(p);
    }
    let mut frozen = Vec::new();
    for _ in 0..frozen_runs {
        bar.set_message(format!(
            "worker, concurrency {frozen_concurrency}, frozen statistics"
        ));
        let p = bench::throughput(
            url,
            base,
            jobs,
            &W::defaults(frozen_concurrency).frozen_statistics(),
        )
        .await?;
        bar.inc(1);
        if args.json {
            print_json(&serde_json::json!({
                "scenario": "throughput-frozen", "jobs": p.jobs,
                "concurrency": frozen_concurrency, "jobs_per_s": p.jobs_per_s,
                "ratio": p.jobs_per_s / best_ceiling.max(1e-9),
            }));
        }
        frozen.push(p.jobs_per_s);
    }
    Ok((rows, frozen))
}

/// How a worker point was set up, for its table row.
fn describe(p: &bench::ThroughputPoint) -> String {
    let mut d = String::new();
    if p.setup.is_default() {
        d.push_str("defaults");
    } else {
        let mut parts = Vec::new();
        if p.setup.batch.is_some() {
            parts.push(format!("batch {}", p.batch));
        }
        if p.setup.claims_in_flight.is_some() {
            parts.push(format!("{} in flight", p.claims_in_flight));
        }
        if p.setup.prepared {
            parts.push("prepared statements".to_owned());
        }
        if p.setup.frozen_statistics {
            parts.push("frozen statistics".to_owned());
        }
        d.push_str(&parts.join(", "));
    }
    d
}

/// The throughput targets; returns the frozen runs' spread, if there were two or more.
fn throughput_targets(
    args: &Args,
    plan: &ThroughputPlan,
    runs: &ThroughputRuns,
    targets: &mut Targets,
) -> Option<f64> {
    let (rows, frozen, best_ceiling) = (&runs.rows, &runs.frozen, runs.best_ceiling);
    let frozen_concurrency = plan.frozen_concurrency;
    let best = rows
        .iter()
        .max_by(|a, b| a.jobs_per_s.total_cmp(&b.jobs_per_s));
    if let Some(best) = best {
        let r = best.jobs_per_s / best_ceiling.max(1e-9);
        targets.push((
            "best worker point >= 85% of the best raw-SQL ceiling".into(),
            format!(
                "{:.0}% (concurrency {}, {})",
                r * 100.0,
                best.setup.concurrency,
                describe(best)
            ),
            Some(r >= 0.85),
        ));
    }
    // Defaults against the best tuned point at the same concurrency.
    let mut worst_default: Option<(f64, usize)> = None;
    for d in rows.iter().filter(|p| p.setup.is_default()) {
        let c = d.setup.concurrency;
        let tuned = rows
            .iter()
            .filter(|p| p.setup.concurrency == c)
            .map(|p| p.jobs_per_s)
            .fold(0.0, f64::max);
        let r = d.jobs_per_s / tuned.max(1e-9);
        if args.json {
            print_json(&serde_json::json!({
                "scenario": "throughput-defaults", "concurrency": c, "jobs_per_s": d.jobs_per_s,
                "best_tuned_jobs_per_s": tuned, "ratio_to_best": r,
            }));
        }
        if worst_default.is_none_or(|(w, _)| r < w) {
            worst_default = Some((r, c));
        }
    }
    if let Some((r, c)) = worst_default {
        targets.push((
            "defaults (but concurrency) within 20% of the best tuned point at the same concurrency"
                .into(),
            format!("lowest {:.0}% (concurrency {c})", r * 100.0),
            Some(r >= 0.8),
        ));
    }
    let spread = if frozen.len() >= 2 {
        let mut v = frozen.clone();
        v.sort_by(f64::total_cmp);
        let (lo, hi, mid) = (v[0], v[v.len() - 1], v[v.len() / 2]);
        Some((hi - lo) / mid.max(1e-9))
    } else {
        None
    };
    if let Some(sp) = spread {
        targets.push((
            format!("concurrency {frozen_concurrency}, frozen statistics: run-to-run spread < 15%"),
            format!(
                "{:.1}% ({})",
                sp * 100.0,
                frozen
                    .iter()
                    .map(|r| format!("{r:.0}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(sp < 0.15),
        ));
    }

    spread
}

/// The throughput section's tables.
fn throughput_table(plan: &ThroughputPlan, runs: &ThroughputRuns, spread: Option<f64>) -> String {
    let ceiling_batch = skiplock::WorkerConfig::default().max_claim_batch;
    let (ceilings, rows, frozen, best_ceiling) =
        (&runs.ceilings, &runs.rows, &runs.frozen, runs.best_ceiling);
    let frozen_concurrency = plan.frozen_concurrency;
    let best_loops = ceilings
        .iter()
        .find(|c| c.jobs_per_s >= best_ceiling)
        .map_or_else(String::new, ceiling_shape);
    let mut t = format!(
        "Raw-SQL ceiling: the worker's own `job_claim.sql` (batches of {ceiling_batch}) and `job_finish_many.sql`, each loop on its own connection; either loops that claim and then finish their own batch, or claim loops feeding one loop that finishes everything that has arrived (up to 1,000 per statement, the worker's shape).\n\n| loops | jobs/s | of the best |\n|---|---:|---:|\n"
    );
    for c in ceilings {
        let _ = writeln!(
            t,
            "| {} | {:.0} | {:.0}% |",
            ceiling_shape(c),
            c.jobs_per_s,
            c.jobs_per_s / best_ceiling.max(1e-9) * 100.0
        );
    }
    let _ = write!(
        t,
        "\nBest ceiling: {best_ceiling:.0} jobs/s ({best_loops}). Worker points, as a share of it:\n\n| concurrency | settings | batch | claims in flight | jobs/s | of the ceiling |\n|---:|---|---:|---:|---:|---:|\n"
    );
    for p in rows {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {:.0} | {:.0}% |",
            p.setup.concurrency,
            describe(p),
            p.batch,
            p.claims_in_flight,
            p.jobs_per_s,
            p.jobs_per_s / best_ceiling.max(1e-9) * 100.0
        );
    }
    if !frozen.is_empty() {
        let _ = write!(
            t,
            "\nConcurrency {frozen_concurrency}, defaults, statistics frozen from the all-queued table (ANALYZE with every job queued, autovacuum and autoanalyze off for the table during the run):\n\n| run | jobs/s | of the ceiling |\n|---:|---:|---:|\n"
        );
        for (i, r) in frozen.iter().enumerate() {
            let _ = writeln!(
                t,
                "| {} | {r:.0} | {:.0}% |",
                i + 1,
                r / best_ceiling.max(1e-9) * 100.0
            );
        }
        if let Some(sp) = spread {
            let _ = writeln!(t, "\nSpread (max - min) / median: {:.1}%.", sp * 100.0);
        }
    }
    t
}

/// How a ceiling point ran, for its table row.
fn ceiling_shape(c: &bench::CeilingPoint) -> String {
    if c.pipelined {
        format!("{} claim + 1 finish", c.loops)
    } else {
        format!("{} claim-and-finish", c.loops)
    }
}
