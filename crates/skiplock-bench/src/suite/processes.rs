//! The processes scenario: several `skiplock work` processes on one queue, total throughput,
//! and the claim latency beside them.

use std::fmt::Write as _;

use skiplock::WorkerConfig;

use super::options::Options;
use super::report::Section;
use super::sitting::Sitting;
use crate::bench;
use crate::error::{Error, Result};

/// What the scenario says without a program to start its workers from.
const NO_PROGRAM: &str = "the processes scenario needs the program to start its workers from";

/// Refuses to run without a program to start the workers from.
pub(super) fn check(o: &Options) -> Result<()> {
    if o.program.is_none() {
        return Err(Error::refused(NO_PROGRAM));
    }
    Ok(())
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let q = s.quick();
    let Some(program) = s.options.program.as_deref() else {
        return Err(Error::refused(NO_PROGRAM));
    };
    let counts: Vec<usize> = if q { vec![1, 2] } else { vec![1, 2, 4, 8] };
    let jobs = if q {
        2_000
    } else {
        s.options.jobs.unwrap_or(100_000)
    };
    let concurrency = 50;
    let points = bench::processes(s.url, s.base, program, &counts, jobs, concurrency).await?;
    let mut t = String::from(
        "| processes | jobs | jobs/s | vs 1 process | claims timed | claim p50 ms | claim p99 ms |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let one = points.first().map_or(0.0, |p| p.jobs_per_s);
    for p in &points {
        s.point(serde_json::json!({
            "scenario": "processes", "processes": p.processes,
            "concurrency": p.concurrency, "jobs": p.jobs, "done": p.done,
            "jobs_per_s": p.jobs_per_s, "claims": p.claims,
            "claim_p50_ms": p.claim_p50_ms, "claim_p99_ms": p.claim_p99_ms,
        }));
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
        "\nEach process is `skiplock work --queue bench={concurrency} --drain` with default settings (claims of up to {}), all on one pre-filled queue; jobs/s counts from spawning them to the last one's exit (process start included). The claim latency is a probe beside them on its own connection, claiming one job every 10 ms and completing it.",
        WorkerConfig::default().max_claim_batch
    );
    Ok(Section {
        title: format!("Worker processes on one queue ({jobs} no-op jobs)"),
        table: t,
    })
}
