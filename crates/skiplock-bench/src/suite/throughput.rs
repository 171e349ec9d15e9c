//! The throughput scenario: the raw-SQL ceiling at 1 to 16 loops (its best is the physical
//! limit of the statements on this server), then worker points as ratios of that best, and
//! runs with frozen statistics for the run-to-run spread.

use std::fmt::Write as _;

use skiplock::WorkerConfig;

use super::options::{Options, Scenario};
use super::report::{thousands, Section};
use super::sitting::Sitting;
use crate::bench::{self, CeilingPoint, ThroughputPoint, WorkerSetup as W};
use crate::error::Result;

/// Refuses a worker setting of 0.
pub(super) fn check(o: &Options) -> Result<()> {
    o.check_worker()
}

/// The throughput scenario's runs: which ceiling shapes, which worker points.
struct Plan {
    jobs: usize,
    loops: Vec<usize>,
    pipelined: Vec<usize>,
    points: Vec<W>,
    frozen_runs: usize,
    frozen_concurrency: usize,
}

impl Plan {
    fn new(o: &Options) -> Plan {
        let q = o.quick;
        let points: Vec<W> = match o.concurrency {
            Some(c) => {
                let mut w = W::defaults(c);
                w.batch = o.batch;
                w.claims_in_flight = o.claims_in_flight;
                vec![w]
            }
            None if q => vec![
                W::defaults(10),
                W::defaults(10).batch(10).claims_in_flight(1),
            ],
            None => vec![
                W::defaults(10).batch(1).claims_in_flight(1),
                W::defaults(10),
                W::defaults(50),
                W::defaults(100).claims_in_flight(1),
                W::defaults(100),
                W::defaults(200).claims_in_flight(1),
                W::defaults(200).batch(50).claims_in_flight(4),
                W::defaults(200),
                W::defaults(200).prepared(),
                W::defaults(400).claims_in_flight(8),
                W::defaults(400),
            ],
        };
        Plan {
            jobs: o.jobs.unwrap_or(if q { 2_000 } else { 50_000 }),
            loops: if q { vec![1, 2] } else { vec![1, 2, 4, 8, 16] },
            // The worker's shape (claim loops feeding one finishing loop), at the parallelism
            // where it can differ from back-to-back loops.
            pipelined: if q { vec![1] } else { vec![1, 2, 4] },
            points,
            frozen_runs: if o.concurrency.is_some() {
                0
            } else if q {
                1
            } else {
                3
            },
            frozen_concurrency: if q { 10 } else { 200 },
        }
    }

    fn runs(&self) -> usize {
        self.loops.len() + self.pipelined.len() + self.points.len() + self.frozen_runs
    }
}

/// What the throughput scenario measured.
struct Runs {
    ceilings: Vec<CeilingPoint>,
    best_ceiling: f64,
    rows: Vec<ThroughputPoint>,
    frozen: Vec<f64>,
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let plan = Plan::new(s.options);
    s.observer.planned(Scenario::Throughput, plan.runs());
    let ceilings = ceiling_sweep(s, &plan).await?;
    let best_ceiling = ceilings.iter().map(|c| c.jobs_per_s).fold(0.0, f64::max);
    let (rows, frozen) = worker_sweep(s, &plan, best_ceiling).await?;
    let runs = Runs {
        ceilings,
        best_ceiling,
        rows,
        frozen,
    };
    let spread = targets(s, &plan, &runs);
    Ok(Section {
        title: format!("Throughput ({} no-op jobs per run)", plan.jobs),
        table: table(&plan, &runs, spread),
    })
}

/// The raw-SQL ceiling at each planned shape.
async fn ceiling_sweep(s: &mut Sitting<'_>, plan: &Plan) -> Result<Vec<CeilingPoint>> {
    let (url, base, jobs) = (s.url, s.base, plan.jobs);
    let ceiling_batch = WorkerConfig::default().max_claim_batch;
    let shapes = plan.loops.iter().map(|l| (*l, false));
    let shapes = shapes.chain(plan.pipelined.iter().map(|l| (*l, true)));
    let mut ceilings = Vec::new();
    for (l, pipelined) in shapes {
        let c = if pipelined {
            s.observer
                .run(&format!("ceiling, {l} claim loops + 1 finish loop"));
            bench::ceiling_pipelined(url, base, jobs, ceiling_batch, l).await?
        } else {
            s.observer.run(&format!("ceiling, {l} loops"));
            bench::ceiling(url, base, jobs, ceiling_batch, l).await?
        };
        s.observer.ran();
        s.point(serde_json::json!({
            "scenario": "throughput-ceiling", "jobs": c.jobs, "loops": c.loops,
            "pipelined": c.pipelined, "batch": c.batch, "jobs_per_s": c.jobs_per_s,
        }));
        ceilings.push(c);
    }
    Ok(ceilings)
}

/// The worker at each planned point, then the runs with frozen statistics.
async fn worker_sweep(
    s: &mut Sitting<'_>,
    plan: &Plan,
    best_ceiling: f64,
) -> Result<(Vec<ThroughputPoint>, Vec<f64>)> {
    let (url, base, jobs) = (s.url, s.base, plan.jobs);
    let frozen_concurrency = plan.frozen_concurrency;
    let mut rows = Vec::new();
    for w in &plan.points {
        s.observer
            .run(&format!("worker, concurrency {}", w.concurrency));
        let p = bench::throughput(url, base, jobs, w).await?;
        s.observer.ran();
        s.point(serde_json::json!({
            "scenario": "throughput", "jobs": p.jobs, "concurrency": w.concurrency,
            "batch": p.batch, "claims_in_flight": p.claims_in_flight,
            "defaults": w.is_default(), "prepared": w.prepared,
            "jobs_per_s": p.jobs_per_s, "ceiling_jobs_per_s": best_ceiling,
            "ratio": p.jobs_per_s / best_ceiling.max(1e-9),
        }));
        rows.push(p);
    }
    let mut frozen = Vec::new();
    for _ in 0..plan.frozen_runs {
        s.observer.run(&format!(
            "worker, concurrency {frozen_concurrency}, frozen statistics"
        ));
        let p = bench::throughput(
            url,
            base,
            jobs,
            &W::defaults(frozen_concurrency).frozen_statistics(),
        )
        .await?;
        s.observer.ran();
        s.point(serde_json::json!({
            "scenario": "throughput-frozen", "jobs": p.jobs,
            "concurrency": frozen_concurrency, "jobs_per_s": p.jobs_per_s,
            "ratio": p.jobs_per_s / best_ceiling.max(1e-9),
        }));
        frozen.push(p.jobs_per_s);
    }
    Ok((rows, frozen))
}

/// How a worker point was set up, for its table row.
fn describe(p: &ThroughputPoint) -> String {
    let mut d = String::new();
    if p.setup.is_default() {
        d.push_str("defaults");
    } else {
        let mut parts = Vec::new();
        if p.setup.batch.is_some() {
            parts.push(format!("batch {}", p.batch));
        }
        if p.setup.claims_in_flight.is_some() {
            parts.push(format!("{} in flight", p.claims_in_flight));
        }
        if p.setup.prepared {
            parts.push("prepared statements".to_owned());
        }
        if p.setup.frozen_statistics {
            parts.push("frozen statistics".to_owned());
        }
        d.push_str(&parts.join(", "));
    }
    d
}

/// The throughput targets; returns the frozen runs' spread, if there were two or more.
fn targets(s: &mut Sitting<'_>, plan: &Plan, runs: &Runs) -> Option<f64> {
    let (rows, frozen, best_ceiling) = (&runs.rows, &runs.frozen, runs.best_ceiling);
    let frozen_concurrency = plan.frozen_concurrency;
    let best = rows
        .iter()
        .max_by(|a, b| a.jobs_per_s.total_cmp(&b.jobs_per_s));
    if let Some(best) = best {
        let r = best.jobs_per_s / best_ceiling.max(1e-9);
        s.target(
            "best worker point >= 85% of the best raw-SQL ceiling",
            format!(
                "{:.0}% (concurrency {}, {})",
                r * 100.0,
                best.setup.concurrency,
                describe(best)
            ),
            Some(r >= 0.85),
        );
    }
    // Defaults against the best tuned point at the same concurrency.
    let mut worst_default: Option<(f64, usize)> = None;
    for d in rows.iter().filter(|p| p.setup.is_default()) {
        let c = d.setup.concurrency;
        let tuned = rows
            .iter()
            .filter(|p| p.setup.concurrency == c)
            .map(|p| p.jobs_per_s)
            .fold(0.0, f64::max);
        let r = d.jobs_per_s / tuned.max(1e-9);
        s.point(serde_json::json!({
            "scenario": "throughput-defaults", "concurrency": c, "jobs_per_s": d.jobs_per_s,
            "best_tuned_jobs_per_s": tuned, "ratio_to_best": r,
        }));
        if worst_default.is_none_or(|(w, _)| r < w) {
            worst_default = Some((r, c));
        }
    }
    if let Some((r, c)) = worst_default {
        s.target(
            "defaults (but concurrency) within 20% of the best tuned point at the same concurrency",
            format!("lowest {:.0}% (concurrency {c})", r * 100.0),
            Some(r >= 0.8),
        );
    }
    let spread = if frozen.len() >= 2 {
        let mut v = frozen.clone();
        v.sort_by(f64::total_cmp);
        let (lo, hi, mid) = (v[0], v[v.len() - 1], v[v.len() / 2]);
        Some((hi - lo) / mid.max(1e-9))
    } else {
        None
    };
    if let Some(sp) = spread {
        s.target(
            format!("concurrency {frozen_concurrency}, frozen statistics: run-to-run spread < 15%"),
            format!(
                "{:.1}% ({})",
                sp * 100.0,
                frozen
                    .iter()
                    .map(|r| format!("{r:.0}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(sp < 0.15),
        );
    }
    spread
}

/// The throughput section's tables.
fn table(plan: &Plan, runs: &Runs, spread: Option<f64>) -> String {
    let config = WorkerConfig::default();
    let ceiling_batch = config.max_claim_batch;
    let max_finish = thousands(config.max_finish_batch);
    let (ceilings, rows, frozen, best_ceiling) =
        (&runs.ceilings, &runs.rows, &runs.frozen, runs.best_ceiling);
    let frozen_concurrency = plan.frozen_concurrency;
    let best_loops = ceilings
        .iter()
        .find(|c| c.jobs_per_s >= best_ceiling)
        .map_or_else(String::new, ceiling_shape);
    let mut t = format!(
        "Raw-SQL ceiling: the worker's own `job_claim.sql` (batches of {ceiling_batch}) and `job_finish_many.sql`, each loop on its own connection; either loops that claim and then finish their own batch, or claim loops feeding one loop that finishes everything that has arrived (up to {max_finish} per statement, the worker's shape).\n\n| loops | jobs/s | of the best |\n|---|---:|---:|\n"
    );
    for c in ceilings {
        let _ = writeln!(
            t,
            "| {} | {:.0} | {:.0}% |",
            ceiling_shape(c),
            c.jobs_per_s,
            c.jobs_per_s / best_ceiling.max(1e-9) * 100.0
        );
    }
    let _ = write!(
        t,
        "\nBest ceiling: {best_ceiling:.0} jobs/s ({best_loops}). Worker points, as a share of it:\n\n| concurrency | settings | batch | claims in flight | jobs/s | of the ceiling |\n|---:|---|---:|---:|---:|---:|\n"
    );
    for p in rows {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {:.0} | {:.0}% |",
            p.setup.concurrency,
            describe(p),
            p.batch,
            p.claims_in_flight,
            p.jobs_per_s,
            p.jobs_per_s / best_ceiling.max(1e-9) * 100.0
        );
    }
    if !frozen.is_empty() {
        let _ = write!(
            t,
            "\nConcurrency {frozen_concurrency}, defaults, statistics frozen from the all-queued table (ANALYZE with every job queued, autovacuum and autoanalyze off for the table during the run):\n\n| run | jobs/s | of the ceiling |\n|---:|---:|---:|\n"
        );
        for (i, r) in frozen.iter().enumerate() {
            let _ = writeln!(
                t,
                "| {} | {r:.0} | {:.0}% |",
                i + 1,
                r / best_ceiling.max(1e-9) * 100.0
            );
        }
        if let Some(sp) = spread {
            let _ = writeln!(t, "\nSpread (max - min) / median: {:.1}%.", sp * 100.0);
        }
    }
    t
}

/// How a ceiling point ran, for its table row.
fn ceiling_shape(c: &CeilingPoint) -> String {
    if c.pipelined {
        format!("{} claim + 1 finish", c.loops)
    } else {
        format!("{} claim-and-finish", c.loops)
    }
}
