//! The enqueue scenario: single-row transactions and batches.

use std::fmt::Write as _;

use super::report::Section;
use super::sitting::Sitting;
use crate::bench;
use crate::error::Result;

/// Runs of each mode; the best counts (on a machine whose speed drifts from minute to
/// minute, as the throughput scenario's points).
const ROUNDS: usize = 3;

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let jobs = if s.quick() {
        2_000
    } else {
        s.options.jobs.unwrap_or(100_000).max(20_000)
    };
    let rounds = if s.quick() { 1 } else { ROUNDS };
    let points = bench::enqueue(s.url, s.base, jobs, rounds).await?;
    let best_batch = points
        .iter()
        .filter(|p| p.mode.starts_with("batch"))
        .map(|p| p.jobs_per_s)
        .fold(0.0, f64::max);
    s.target(
        "batched enqueue >= 100,000 jobs/s",
        format!("{best_batch:.0} jobs/s"),
        Some(best_batch >= 100_000.0),
    );
    let mut t = String::from(
        "| mode | jobs per run | runs (jobs/s) | best jobs/s |\n|---|---:|---|---:|\n",
    );
    for p in &points {
        for (round, rate) in p.runs.iter().enumerate() {
            s.point(serde_json::json!({
                "scenario": "enqueue", "mode": p.mode, "jobs": p.jobs, "jobs_per_s": rate,
                "round": round,
            }));
        }
        let runs: Vec<String> = p.runs.iter().map(|r| format!("{r:.0}")).collect();
        let _ = writeln!(
            t,
            "| {} | {} | {} | {:.0} |",
            p.mode,
            p.jobs,
            runs.join(", "),
            p.jobs_per_s
        );
    }
    let times = if rounds == 1 {
        "once".to_owned()
    } else {
        format!("{rounds} times")
    };
    let _ = writeln!(
        t,
        "\nEach mode ran {times}, the modes taking turns, each run into an emptied jobs \
         table (`TRUNCATE`) right after a `CHECKPOINT`, as every timed run of the throughput \
         scenario starts (so that none begins while a run is timed); the best run counts. \
         `single`: one `enqueue` (one statement and transaction) per job; `single x8`: the \
         same from eight tasks at once; `batch N`: `enqueue_many` calls of N jobs (one \
         statement each). Times include the library's encoding of the batch."
    );
    Ok(Section {
        title: "Enqueue".into(),
        table: t,
    })
}
