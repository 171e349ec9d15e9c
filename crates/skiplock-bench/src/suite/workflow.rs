//! The workflow scenario: workflows against plain jobs. Enqueueing `jobs` jobs in one call as
//! plain jobs, as a workflow without edges, as a fan-out and as one chain (the best of 3
//! each); then a worker through `jobs` plain jobs, a fan-out of as many, 100 chains (10 with
//! `quick`) and one chain of a tenth of them, each 3 times (once with `quick`), interleaved:
//! the median jobs/s of each against the plain jobs', and the time per link of the chains.

use std::fmt::Write as _;

use super::options::Options;
use super::report::{median, Section};
use super::sitting::Sitting;
use crate::bench::{self, FlowShape as F, WorkerSetup};
use crate::error::{Error, Result};

/// Jobs per shape.
fn jobs(o: &Options) -> usize {
    o.jobs.unwrap_or(if o.quick { 500 } else { 10_000 })
}

/// How many chains the worker runs through.
fn chains(o: &Options) -> usize {
    if o.quick {
        10
    } else {
        100
    }
}

/// Refuses a worker setting of 0, and a number of jobs that makes no chain or more than one
/// workflow holds.
pub(super) fn check(o: &Options) -> Result<()> {
    o.check_worker()?;
    let (jobs, least) = (jobs(o), chains(o).max(10));
    if jobs < least {
        return Err(Error::refused(format!(
            "--jobs must be at least {least} for the workflow scenario"
        )));
    }
    if jobs > skiplock::Workflow::MAX_JOBS {
        return Err(Error::refused(format!(
            "--jobs must be at most {} for the workflow scenario (one workflow's limit)",
            skiplock::Workflow::MAX_JOBS
        )));
    }
    Ok(())
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    check(s.options)?;
    let (url, base) = (s.url, s.base);
    let (jobs, chains) = (jobs(s.options), chains(s.options));
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
        "Enqueueing {jobs} no-op jobs in one call, best of 3 (the shapes taking turns, the jobs table emptied and a `CHECKPOINT` taken before each call):\n\n| jobs | call | best ms | jobs/s | of `enqueue_many` | runs (ms) |\n|---|---|---:|---:|---:|---|\n"
    );
    for p in &enqueued {
        let ratio = p.jobs_per_s / many;
        s.point(serde_json::json!({
            "scenario": "workflow-enqueue", "shape": p.shape.name(), "call": p.shape.call(),
            "jobs": p.shape.jobs(), "runs_ms": p.runs_ms, "best_ms": p.best_ms,
            "jobs_per_s": p.jobs_per_s, "ratio": ratio,
        }));
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

    let mut setup = WorkerSetup::defaults(s.options.concurrency.unwrap_or(100));
    setup.batch = s.options.batch;
    setup.claims_in_flight = s.options.claims_in_flight;
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
    let rounds = if s.quick() { 1 } else { 3 };
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
    for _ in 0..rounds {
        for (i, shape) in shapes.iter().enumerate() {
            let p = bench::workflow_throughput(url, base, *shape, &setup).await?;
            runs[i].push(p.seconds);
        }
    }
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
        let sec = median(secs).max(1e-9);
        let rate = shape.jobs() as f64 / sec;
        let per_link = sec * 1000.0 / shape.links() as f64;
        let is_chain = matches!(shape, F::Chains { .. });
        s.point(serde_json::json!({
            "scenario": "workflow-throughput", "shape": shape.name(),
            "jobs": shape.jobs(), "links": shape.links(),
            "concurrency": setup.concurrency,
            "runs_jobs_per_s": secs.iter().map(|x| shape.jobs() as f64 / x.max(1e-9)).collect::<Vec<_>>(),
            "seconds": sec, "jobs_per_s": rate, "ratio": rate / plain_rate.max(1e-9),
            "ms_per_link": if is_chain { Some(per_link) } else { None },
        }));
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
    Ok(Section {
        title: format!("Workflows ({jobs} no-op jobs)"),
        table: t,
    })
}
