//! The processes scenario: several `skiplock work` processes on one queue, total throughput,
//! and the claim latency beside them.

use std::fmt::Write as _;

use skiplock::WorkerConfig;

use super::options::Options;
use super::report::{median, thousands, Section};
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

/// The total concurrency split over the processes.
const TOTAL: usize = 200;
/// Runs of each split; the best counts.
const ROUNDS: usize = 3;
/// The share of one process's throughput every split must reach.
const TARGET: f64 = 0.90;

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let q = s.quick();
    let Some(program) = s.options.program.as_deref() else {
        return Err(Error::refused(NO_PROGRAM));
    };
    // The same total concurrency split over more processes, as one process per container.
    let total = s.options.concurrency.unwrap_or(TOTAL);
    let counts: &[usize] = if q { &[1, 2] } else { &[1, 2, 4, 8] };
    let splits: Vec<(usize, usize)> = counts
        .iter()
        .map(|&n| (n, total.div_ceil(n).max(1)))
        .collect();
    let jobs = if q {
        2_000
    } else {
        s.options.jobs.unwrap_or(100_000)
    };
    let rounds = if q { 1 } else { ROUNDS };
    // Best of `rounds` per split, the splits interleaved within each round; every run's
    // rate is kept too, for the median.
    let mut best: Vec<Option<bench::ProcessesPoint>> = splits.iter().map(|_| None).collect();
    let mut runs: Vec<Vec<f64>> = splits.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        let points = bench::processes(s.url, s.base, program, &splits, jobs).await?;
        for ((slot, all), p) in best.iter_mut().zip(runs.iter_mut()).zip(points) {
            all.push(p.jobs_per_s);
            if slot.as_ref().is_none_or(|b| p.jobs_per_s > b.jobs_per_s) {
                *slot = Some(p);
            }
        }
    }
    let points: Vec<(bench::ProcessesPoint, Vec<f64>)> = best
        .into_iter()
        .zip(runs)
        .filter_map(|(p, all)| p.map(|p| (p, all)))
        .collect();
    let mut t = String::from(
        "| processes × concurrency | jobs | runs (jobs/s) | best jobs/s | vs 1 process | target | median vs 1 process | claims timed | claim p50 ms | claim p99 ms |\n|---|---:|---|---:|---:|---|---:|---:|---:|---:|\n",
    );
    let one = points.first().map_or(0.0, |(p, _)| p.jobs_per_s);
    let one_median = points.first().map_or(0.0, |(_, all)| median(all));
    for (p, all) in &points {
        s.point(serde_json::json!({
            "scenario": "processes", "processes": p.processes,
            "concurrency": p.concurrency, "jobs": p.jobs, "done": p.done,
            "vs_one": p.jobs_per_s / one.max(1e-9),
            "jobs_per_s": p.jobs_per_s, "claims": p.claims,
            "claim_p50_ms": p.claim_p50_ms, "claim_p99_ms": p.claim_p99_ms,
            "runs": all, "median_vs_one": median(all) / one_median.max(1e-9),
        }));
        let ratio = p.jobs_per_s / one.max(1e-9);
        let target = if p.processes == 1 {
            "—"
        } else if ratio >= TARGET {
            "met (≥ 0.90x)"
        } else {
            "**missed** (≥ 0.90x)"
        };
        if p.processes > 1 {
            s.target(
                format!(
                    "{} processes of concurrency {}: >= {TARGET:.2}x one process of {}",
                    p.processes,
                    p.concurrency,
                    points.first().map_or(total, |(one, _)| one.concurrency)
                ),
                format!(
                    "{}x ({:.0} vs {one:.0} jobs/s; medians {:.2}x)",
                    ratio_cell(ratio),
                    p.jobs_per_s,
                    median(all) / one_median.max(1e-9)
                ),
                Some(ratio >= TARGET),
            );
        }
        let listed: Vec<String> = all.iter().map(|r| format!("{r:.0}")).collect();
        let _ = writeln!(
            t,
            "| {} × {} | {} | {} | {:.0} | {}x | {target} | {:.2}x | {} | {:.3} | {:.3} |",
            p.processes,
            p.concurrency,
            p.jobs,
            listed.join(", "),
            p.jobs_per_s,
            ratio_cell(ratio),
            median(all) / one_median.max(1e-9),
            p.claims,
            p.claim_p50_ms,
            p.claim_p99_ms
        );
    }
    let _ = writeln!(
        t,
        "\nThe same total concurrency ({total}) split over 1 to 8 processes, as with one process per container. Each process is `skiplock work --queue bench=N --drain` with default settings (claims of up to {}, and up to {} for a claim through the backlog that had to wait for its turn behind another process's), all on one pre-filled queue; jobs/s counts from spawning them to the last one's exit (process start and drain detection included), best of {rounds} runs with the splits interleaved (every run listed, and the medians' ratio beside the best's: on a small machine one process's best runs stand out). The target: any split's best does at least 0.90 of one process's best. The claim latency is a probe beside them on its own connection, claiming one job every 10 ms and completing it.",
        WorkerConfig::default().max_claim_batch,
        thousands(WorkerConfig::default().claim_batch_waited())
    );
    Ok(Section {
        title: format!("Worker processes on one queue ({jobs} no-op jobs)"),
        table: t,
    })
}

/// A split's ratio to one process, to two decimals; where two would round a miss up to the
/// target, three (rounded down if three would too): 0.8957 is not shown as a missed 0.90.
fn ratio_cell(ratio: f64) -> String {
    let two = format!("{ratio:.2}");
    let reads_as_met = |cell: &str| cell.parse::<f64>().is_ok_and(|r| r >= TARGET);
    if ratio >= TARGET || !reads_as_met(&two) {
        return two;
    }
    let three = format!("{ratio:.3}");
    if reads_as_met(&three) {
        format!("{:.3}", (ratio * 1000.0).floor() / 1000.0)
    } else {
        three
    }
}

#[cfg(test)]
mod tests {
    use super::ratio_cell;

    #[test]
    fn a_ratio_that_misses_the_target_never_reads_as_the_target() {
        assert_eq!(ratio_cell(0.8957), "0.896");
        assert_eq!(ratio_cell(0.8999), "0.899");
        assert_eq!(ratio_cell(0.9), "0.90");
        assert_eq!(ratio_cell(1.124), "1.12");
        assert_eq!(ratio_cell(0.84), "0.84");
    }
}
