//! The limits scenario: the flow-control overhead. Each setup four times, interleaved (so
//! that a drift of the machine hits them alike), each limited setup right beside the same
//! jobs without limits and first of the two in every other round; the median of each against
//! the median of the same jobs without limits, and against the best raw-SQL ceiling of the
//! same sitting.

use std::fmt::Write as _;

use skiplock::{QueueLimits as L, WorkerConfig};

use super::ceiling::{self, Ceiling};
use super::options::Scenario;
use super::report::{median, thousands, Section};
use super::sitting::Sitting;
use crate::bench::{self, WorkerSetup as W};
use crate::error::Result;

/// The setups each round runs.
const SETUPS: usize = 4;

/// The order of the setups in round `round`: each limited setup (1 and 3) beside the same
/// jobs without limits (0 and 2), after them in even rounds and before them in odd ones, so
/// that whatever a run leaves behind (and the machine's drift within a pair) falls on each of
/// the pair alike over an even number of rounds.
fn order(round: usize) -> [usize; SETUPS] {
    if round % 2 == 0 {
        [0, 1, 2, 3]
    } else {
        [1, 0, 3, 2]
    }
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let (url, base) = (s.url, s.base);
    let jobs = s
        .options
        .jobs
        .unwrap_or(if s.quick() { 2_000 } else { 50_000 });
    let concurrency = 200;
    let keys = 1_000;
    let batch = WorkerConfig::default().max_claim_batch;
    let rounds = if s.quick() { 1 } else { 4 };
    let measured = s.ceiling.as_ref().filter(|c| c.jobs == jobs).cloned();
    let ceiling_runs = match (&measured, ceiling::program()) {
        (Some(_), _) => 0,
        // Two client counts, each script.
        (None, Ok(_)) => 2 * ceiling::SHAPES.len(),
        (None, Err(_)) => 0,
    };
    s.observer
        .planned(Scenario::Limits, ceiling_runs + rounds * SETUPS);
    let ceiling = match measured {
        Some(c) => c,
        _ => measure_ceiling(s, jobs, batch).await?,
    };
    let (ceiling, ceiling_from) = (ceiling.jobs_per_s, ceiling.from);
    let k = thousands(keys);
    let setups: [(String, W); SETUPS] = [
        ("no limits".into(), W::defaults(concurrency)),
        (
            "concurrency limit 10,000 (does not bind)".into(),
            W::defaults(concurrency).limits(L::none().concurrency(10_000)),
        ),
        (
            format!("{k} keys, no limits"),
            W::defaults(concurrency).keys(keys),
        ),
        (
            format!("{k} keys, per-key limit 2"),
            W::defaults(concurrency)
                .keys(keys)
                .limits(L::none().per_key(2)),
        ),
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
    for round in 0..rounds {
        for i in order(round) {
            let (name, w) = &setups[i];
            s.observer.run(&format!("worker, {name}"));
            let p = bench::throughput(url, base, jobs, w).await?;
            s.observer.ran();
            s.point(serde_json::json!({
                "scenario": "limits", "round": round + 1, "setup": name, "jobs": p.jobs,
                "concurrency": concurrency, "jobs_per_s": p.jobs_per_s,
                "ceiling_jobs_per_s": ceiling,
            }));
            rates[i].push(p.jobs_per_s);
        }
    }
    let medians: Vec<f64> = rates.iter().map(|r| median(r)).collect();
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
Concurrency {concurrency}, default settings, {jobs} no-op jobs per run; the keyed runs spread the jobs evenly over {keys} keys. Each setup ran {rounds} times, interleaved: each limited setup right beside the same jobs without limits, after them in one round and before them in the next, so that whatever a run leaves behind falls on both alike. Ceiling: the best rate of the same sitting for the worker's claim and a fenced completion of the same number of jobs, {ceiling:.0} jobs/s ({ceiling_from}; see the throughput section)."
    );
    // Each limited run against the same jobs without limits: the plain jobs for the limit
    // that does not bind, the keyed jobs for the per-key limit.
    let nonbinding = medians[1] / plain;
    let per_key = medians[3] / medians[2].max(1e-9);
    s.target(
        "a limit that does not bind: >= 90% of no limits",
        format!("{:.0}%", 100.0 * nonbinding),
        Some(nonbinding >= 0.9),
    );
    s.target(
        format!("a per-key limit of 2 over {k} keys: >= 80% of the same keyed jobs without limits"),
        format!("{:.0}%", 100.0 * per_key),
        Some(per_key >= 0.8),
    );
    Ok(Section {
        title: format!("Flow control ({jobs} no-op jobs per run)"),
        table: t,
    })
}

/// The ceiling for `jobs` when the throughput scenario did not measure it in this sitting:
/// pgbench at 2 and 4 clients, else the Rust loops at 2 and 4.
async fn measure_ceiling(s: &mut Sitting<'_>, jobs: usize, batch: u32) -> Result<Ceiling> {
    if let Ok(program) = ceiling::program() {
        let mut swept = Vec::new();
        ceiling::round(
            s,
            &program,
            jobs,
            batch,
            &[2, 4],
            &ceiling::SHAPES,
            &mut swept,
        )
        .await?;
        if let Some(c) = ceiling::best_of(&swept, jobs) {
            return Ok(c);
        }
    }
    let (url, base) = (s.url, s.base);
    let mut best = 0.0f64;
    for loops in [2, 4] {
        best = best.max(
            bench::ceiling(url, base, jobs, batch, loops)
                .await?
                .jobs_per_s,
        );
        best = best.max(
            bench::ceiling_pipelined(url, base, jobs, batch, loops)
                .await?
                .jobs_per_s,
        );
    }
    Ok(Ceiling {
        jobs_per_s: best,
        from: "the best Rust loop (pgbench not found)".to_owned(),
        pgbench: false,
        jobs,
        cpu: None,
    })
}

#[cfg(test)]
mod tests {
    use super::order;

    #[test]
    fn each_limited_setup_runs_beside_its_unlimited_one_first_in_every_other_round() {
        for round in 0..4 {
            let o = order(round);
            let mut sorted = o;
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2, 3], "every setup once in round {round}");
            for (plain, limited) in [(0, 1), (2, 3)] {
                let at = |x| o.iter().position(|&i| i == x).unwrap_or(usize::MAX);
                assert_eq!(at(plain).abs_diff(at(limited)), 1, "a pair apart in {o:?}");
                assert_eq!(
                    at(limited) < at(plain),
                    round % 2 == 1,
                    "round {round}: {o:?}"
                );
            }
        }
    }
}
