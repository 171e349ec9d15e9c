//! The history scenario: claim latency with finished rows kept.

use std::fmt::Write as _;

use super::options::Options;
use super::report::Section;
use super::sitting::Sitting;
use crate::bench;
use crate::error::{Error, Result};

/// Refuses a negative number of finished rows.
pub(super) fn check(o: &Options) -> Result<()> {
    if o.sizes.iter().any(|s| *s < 0) {
        return Err(Error::refused("--sizes must not be negative"));
    }
    Ok(())
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let q = s.quick();
    let sizes = if !s.options.sizes.is_empty() {
        s.options.sizes.clone()
    } else if q {
        vec![0, 10_000]
    } else {
        vec![0, 1_000_000, 10_000_000]
    };
    let points = bench::history(s.url, s.base, &sizes, if q { 200 } else { 2_000 }).await?;
    let base_p50 = points.first().map_or(0.0, |p| p.claim_p50_ms);
    if let Some(last) = points.last().filter(|p| p.finished_rows >= 10_000_000) {
        let r = last.claim_p50_ms / base_p50.max(1e-9);
        s.target(
            "claim latency with 10 million finished rows within 1.5x of the empty table",
            format!("{r:.2}x"),
            Some(r <= 1.5),
        );
    }
    let mut t = String::from(
        "| finished rows kept | claims | claim p50 ms | claim p99 ms | p50 vs empty |\n|---:|---:|---:|---:|---:|\n",
    );
    for p in &points {
        s.point(serde_json::json!({
            "scenario": "history", "finished_rows": p.finished_rows, "claims": p.claims,
            "claim_p50_ms": p.claim_p50_ms, "claim_p99_ms": p.claim_p99_ms,
        }));
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
    Ok(Section {
        title: "Claim cost with finished rows kept".into(),
        table: t,
    })
}
