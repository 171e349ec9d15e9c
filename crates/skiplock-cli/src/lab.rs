//! `skiplock lab`: the article's experiments on the user's own PostgreSQL, each in a scratch
//! schema, printed next to the article's figures.

use std::time::Duration;

use skiplock::{Client, Schema};
use skiplock_bench::lab::{self, ClaimMethod, RaceOptions, Stop};

use crate::connect::Target;
use crate::errors::usage;
use crate::output::{outln, print_json, spinner};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Experiment {
    /// `UPDATE ... WHERE id = (SELECT ... LIMIT 1)` with no row lock: jobs run twice.
    Naive,
    /// `FOR UPDATE` without `SKIP LOCKED`: the second claimer waits for the first.
    ForUpdate,
    /// `FOR UPDATE SKIP LOCKED`: every job once, no waiting.
    SkipLocked,
    /// A claim transaction left open keeps vacuum from removing dead rows.
    Vacuum,
    /// All four.
    All,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which experiment.
    #[arg(value_enum)]
    experiment: Experiment,
    /// Concurrent claimers, each on its own connection.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Jobs per experiment (the vacuum experiment processes a fifth of them).
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    /// Keep the scratch schemas afterwards.
    #[arg(long)]
    keep: bool,
    /// Print one JSON object per experiment.
    #[arg(long)]
    json: bool,
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    if args.workers == 0 || args.workers > 64 {
        return Err(usage("--workers must be 1 to 64"));
    }
    if args.jobs == 0 || args.jobs > 1_000_000 {
        return Err(usage("--jobs must be 1 to 1,000,000"));
    }
    let url = target.url().await?;
    let list: &[Experiment] = match args.experiment {
        Experiment::All => &[
            Experiment::Naive,
            Experiment::ForUpdate,
            Experiment::SkipLocked,
            Experiment::Vacuum,
        ],
        _ => std::slice::from_ref(&args.experiment),
    };
    if !args.json {
        outln!(
            "skiplock lab: {} workers, {} jobs, on {}",
            args.workers,
            args.jobs,
            crate::connect::redact(&url)
        );
    }
    for &exp in list {
        let short = match exp {
            Experiment::Naive => "naive",
            Experiment::ForUpdate => "forupdate",
            Experiment::SkipLocked => "skiplocked",
            Experiment::Vacuum => "vacuum",
            Experiment::All => "all",
        };
        let name = format!("{}_lab_{}_{short}", target.schema, std::process::id());
        let schema = Schema::new(&name).map_err(|_| {
            usage(format!(
                "--schema {} is too long for a lab schema name",
                target.schema
            ))
        })?;
        let client = Client::builder(&url).schema(&name).pool_size(2).build()?;
        client.migrate().await?;
        let result = one(&url, &schema, exp, &args).await;
        if !args.keep {
            client.drop_schema().await?;
        } else if !args.json {
            outln!("  (kept schema {name})");
        }
        result?;
    }
    Ok(())
}

async fn one(url: &str, schema: &Schema, exp: Experiment, args: &Args) -> anyhow::Result<()> {
    let per_worker = u32::try_from(args.jobs.div_ceil(args.workers)).unwrap_or(u32::MAX);
    match exp {
        Experiment::Naive | Experiment::SkipLocked => {
            let (method, stop) = if exp == Experiment::Naive {
                (ClaimMethod::Naive, Stop::AfterClaims(per_worker))
            } else {
                (ClaimMethod::SkipLocked, Stop::WhenEmpty)
            };
            let bar = spinner(
                format!(
                    "{}: {} jobs, {} workers",
                    method.name(),
                    args.jobs,
                    args.workers
                ),
                args.json,
            );
            let r = lab::claim_race(
                url,
                schema,
                method,
                RaceOptions {
                    workers: args.workers,
                    jobs: args.jobs,
                    batch: 1,
                    stop,
                },
            )
            .await;
            bar.finish_and_clear();
            let r = r?;
            let count = |s: &str| r.statuses.iter().find(|x| x.0 == s).map_or(0, |x| x.1);
            let max_attempts = r.statuses.iter().map(|x| x.2).max().unwrap_or(0);
            let (done, queued) = (count("done"), count("queued"));
            if args.json {
                print_json(&serde_json::json!({
                    "experiment": method.name(), "workers": args.workers, "jobs": args.jobs,
                    "claims": r.claims, "done": done, "queued": queued,
                    "max_attempts": max_attempts, "duplicate_claims": r.duplicate_claims,
                    "max_claimers_of_one_job": r.max_claimers_of_one_job,
                    "elapsed_ms": r.elapsed.as_secs_f64() * 1000.0,
                }));
                return Ok(());
            }
            outln!(
                "\n{} ({} claims by {} workers)",
                method.name(),
                r.claims,
                args.workers
            );
            outln!("  {:<8} {:>7} {:>13}", "status", "count", "max_attempts");
            for (s, n, m) in &r.statuses {
                outln!("  {s:<8} {n:>7} {m:>13}");
            }
            outln!(
                "  duplicate claims: {} (jobs handed out again); most claimers of one job: {}",
                r.duplicate_claims,
                r.max_claimers_of_one_job
            );
            if exp == Experiment::Naive {
                outln!("  article (10,000 jobs, 8 workers x 1,250 claims): done ~2,100, queued ~7,900, max_attempts 8 (some jobs taken by all 8)");
            } else {
                outln!("  article: done 10,000, max_attempts 1 (every job exactly once)");
            }
        }
        Experiment::ForUpdate => {
            let hold = Duration::from_millis(1500);
            let bar = spinner(
                "for-update: two sessions, one claim held".to_owned(),
                args.json,
            );
            let r = lab::claim_wait(url, schema, hold).await;
            bar.finish_and_clear();
            let r = r?;
            if args.json {
                print_json(&serde_json::json!({
                    "experiment": "for-update", "workers": 2, "jobs": 4,
                    "hold_ms": hold.as_secs_f64() * 1000.0,
                    "wait_ms": r.for_update_ms, "skip_locked_ms": r.skip_locked_ms,
                    "first_job": r.first_job, "second_job": r.for_update_job,
                    "skip_locked_job": r.skip_locked_job,
                    "done": 4, "queued": 0, "max_attempts": 1, "duplicate_claims": 0,
                }));
                return Ok(());
            }
            outln!(
                "\nfor-update (session A holds its claim for {} ms)",
                hold.as_millis()
            );
            outln!(
                "  FOR UPDATE:             session B waited {:>7.1} ms, then got job {}",
                r.for_update_ms,
                r.for_update_job.map_or("none".into(), |j| j.to_string())
            );
            outln!(
                "  FOR UPDATE SKIP LOCKED: session B took   {:>7.1} ms, and got job {}",
                r.skip_locked_ms,
                r.skip_locked_job.map_or("none".into(), |j| j.to_string())
            );
            outln!("  article: B waited 1,858 ms (as long as A's transaction); with SKIP LOCKED 2.5 ms");
        }
        Experiment::Vacuum => {
            let jobs = (args.jobs / 5).max(1);
            let bar = spinner(
                format!("vacuum: {jobs} jobs, one claim transaction open"),
                args.json,
            );
            let r = lab::vacuum(url, schema, jobs, args.workers.min(8)).await;
            bar.finish_and_clear();
            let r = r?;
            if args.json {
                print_json(&serde_json::json!({
                    "experiment": "vacuum", "workers": args.workers.min(8), "jobs": jobs,
                    "dead_not_removable_open": r.dead_not_removable_open,
                    "removed_open": r.removed_open,
                    "dead_not_removable_after_commit": r.dead_not_removable_after_commit,
                    "removed_after_commit": r.removed_after_commit,
                    "done": jobs + 1, "queued": 0, "max_attempts": 1, "duplicate_claims": 0,
                }));
                return Ok(());
            }
            outln!("\nvacuum (one claim transaction left open while {jobs} jobs are processed)");
            outln!(
                "  while open:   {} removed, {} dead but not yet removable",
                r.removed_open,
                r.dead_not_removable_open
            );
            outln!(
                "  after commit: {} removed, {} dead but not yet removable",
                r.removed_after_commit,
                r.dead_not_removable_after_commit
            );
            outln!("  article (2,000 jobs): 0 removed, 2,000 not yet removable; after commit 2,001 removed, 0");
            if r.dead_not_removable_after_commit > 0 {
                outln!("  note: another session of this database holds back vacuum (see `skiplock stats`)");
            }
        }
        Experiment::All => {}
    }
    Ok(())
}
