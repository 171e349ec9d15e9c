//! The latency scenario: enqueue-to-start latency at each offered load, LISTEN on and off.

use std::fmt::Write as _;
use std::time::Duration;

use super::options::Options;
use super::report::Section;
use super::sitting::Sitting;
use crate::bench;
use crate::error::Result;

/// Refuses a rate that is not above 0 and finite.
pub(super) fn check(o: &Options) -> Result<()> {
    o.check_rate()
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let q = s.quick();
    let rates = match s.options.rate {
        Some(r) => vec![r],
        None if q => vec![50.0],
        None => vec![50.0, 500.0, 5_000.0],
    };
    let dur = s.options.duration.unwrap_or(if q {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(10)
    });
    let mut t = String::from(
        "| offered jobs/s | wake-up | jobs | p50 ms | p95 ms | p99 ms |\n|---:|---|---:|---:|---:|---:|\n",
    );
    for r in rates {
        for listen in [true, false] {
            let p = bench::latency(s.url, s.base, r, dur, listen).await?;
            if listen && (r - 500.0).abs() < f64::EPSILON {
                s.target(
                    "pickup p50 <= 2 ms and p99 <= 10 ms at 500 jobs/s with LISTEN",
                    format!("p50 {:.2} ms, p99 {:.2} ms", p.p50_ms, p.p99_ms),
                    Some(p.p50_ms <= 2.0 && p.p99_ms <= 10.0),
                );
            }
            if listen && (r - 50.0).abs() < f64::EPSILON {
                s.target(
                    "pickup p50 <= 1.5 ms at 50 jobs/s with LISTEN",
                    format!("p50 {:.2} ms", p.p50_ms),
                    Some(p.p50_ms <= 1.5),
                );
            }
            s.point(serde_json::json!({
                "scenario": "latency", "offered_per_s": p.offered_per_s,
                "listen": p.listen, "jobs": p.jobs,
                "p50_ms": p.p50_ms, "p95_ms": p.p95_ms, "p99_ms": p.p99_ms,
            }));
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
    Ok(Section {
        title: format!(
            "Enqueue-to-start latency ({} s per point, database clock)",
            dur.as_secs_f64()
        ),
        table: t,
    })
}
