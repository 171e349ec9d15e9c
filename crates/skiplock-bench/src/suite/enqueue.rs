//! The enqueue scenario: single-row transactions and batches.

use std::fmt::Write as _;

use super::report::Section;
use super::sitting::Sitting;
use crate::bench;
use crate::error::Result;

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let jobs = if s.quick() {
        2_000
    } else {
        s.options.jobs.unwrap_or(100_000).max(20_000)
    };
    let points = bench::enqueue(s.url, s.base, jobs).await?;
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
    let mut t = String::from("| mode | jobs | jobs/s |\n|---|---:|---:|\n");
    for p in &points {
        s.point(serde_json::json!({
            "scenario": "enqueue", "mode": p.mode, "jobs": p.jobs, "jobs_per_s": p.jobs_per_s,
        }));
        let _ = writeln!(t, "| {} | {} | {:.0} |", p.mode, p.jobs, p.jobs_per_s);
    }
    Ok(Section {
        title: "Enqueue".into(),
        table: t,
    })
}
