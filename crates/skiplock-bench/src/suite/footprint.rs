//! The footprint scenario: dead tuples, size, WAL and transactions per job at a steady load,
//! with and without a held snapshot.

use std::fmt::Write as _;
use std::time::Duration;

use skiplock::WorkerConfig;

use super::options::{Options, Scenario};
use super::report::{thousands, Section};
use super::sitting::Sitting;
use crate::bench::{self, FootprintPoint, FOOTPRINT_MAX_BOUND, FOOTPRINT_MEDIAN_BOUND};
use crate::error::Result;

/// Refuses a rate that is not above 0 and finite, when the scenario is asked for alone (when
/// everything runs, the rate is the latency scenario's).
pub(super) fn check(asked: Scenario, o: &Options) -> Result<()> {
    if asked == Scenario::Footprint {
        o.check_rate()?;
    }
    Ok(())
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let q = s.quick();
    // The rate and the duration are the latency scenario's when everything runs.
    let alone = s.asked == Scenario::Footprint;
    let rate = s.options.rate.filter(|_| alone).unwrap_or(200.0);
    let steady = s.options.duration.filter(|_| alone).unwrap_or(if q {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(120)
    });
    let secs_or_quick = |secs: u64| Duration::from_secs(if q { 2 } else { secs });
    let held = [
        ("before", secs_or_quick(30)),
        ("during", secs_or_quick(60)),
        ("after", secs_or_quick(90)),
    ];
    let (median_bound, max_bound) = (
        thousands(FOOTPRINT_MEDIAN_BOUND),
        thousands(FOOTPRINT_MAX_BOUND),
    );
    let mut t = format!(
        "| run | phase | s | jobs/s | dead tuples median | dead tuples max | under {max_bound} after | under {median_bound} after | table+indexes | WAL bytes/job | transactions/job | p50 ms | p99 ms |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for bystander in [false, true] {
        let points = if bystander {
            bench::footprint(s.url, s.base, rate, &held).await?.phases
        } else {
            bench::footprint(s.url, s.base, rate, &[("steady", steady)])
                .await?
                .phases
        };
        if !bystander {
            if let Some(p) = points.first() {
                s.target(
                    format!(
                        "footprint at {rate:.0} jobs/s: dead tuples median <= {median_bound}, max <= {max_bound}"
                    ),
                    format!("median {}, max {}", p.dead_median, p.dead_max),
                    Some(
                        p.dead_median <= FOOTPRINT_MEDIAN_BOUND && p.dead_max <= FOOTPRINT_MAX_BOUND,
                    ),
                );
            }
        } else if let (Some(d), Some(a)) = (
            points.iter().find(|p| p.phase == "during"),
            points.iter().find(|p| p.phase == "after"),
        ) {
            s.target(
                format!("dead tuples under {max_bound} within 60 s after a held snapshot ends"),
                format!(
                    "max {} while held; under {max_bound} {} and under {median_bound} {} after it ended",
                    d.dead_max,
                    secs(a.under_max_bound_s),
                    secs(a.under_median_bound_s)
                ),
                Some(a.under_max_bound_s.is_some_and(|s| s <= 60.0)),
            );
        }
        for p in &points {
            let mut point = phase_json(p);
            point["scenario"] = "footprint".into();
            point["bystander"] = bystander.into();
            s.point(point);
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
        "\nDead tuples of the jobs table are sampled each second from the statistics system. A worker with default settings vacuums the table itself past {} dead tuples (`WorkerConfig::vacuum_threshold`), checked every 5 s. \"Under … after\" is the time from the held transaction's end to the first sample at or under that bound.",
        thousands(WorkerConfig::DEFAULT_VACUUM_THRESHOLD)
    );
    Ok(Section {
        title: format!("Footprint at {rate:.0} jobs/s"),
        table: t,
    })
}

/// A phase as a JSON point (without its `scenario`).
pub(super) fn phase_json(p: &FootprintPoint) -> serde_json::Value {
    serde_json::json!({
        "phase": p.phase,
        "rate": p.rate, "seconds": p.seconds, "jobs": p.jobs,
        "jobs_per_s": p.jobs_per_s,
        "dead_median": p.dead_median, "dead_max": p.dead_max,
        "under_max_bound_s": p.under_max_bound_s,
        "under_median_bound_s": p.under_median_bound_s,
        "table_bytes": p.table_bytes, "wal_bytes_per_job": p.wal_bytes_per_job,
        "transactions_per_job": p.transactions_per_job,
        "p50_ms": p.p50_ms, "p99_ms": p.p99_ms,
    })
}

fn secs(s: Option<f64>) -> String {
    s.map_or_else(|| "never".into(), |s| format!("{s:.0} s"))
}

/// The time back under a bound, shown for the phase after a held snapshot only.
fn after(p: &FootprintPoint, s: Option<f64>) -> String {
    if p.phase == "after" {
        secs(s)
    } else {
        "–".into()
    }
}
