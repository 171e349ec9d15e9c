//! The throughput scenario: the ceiling (pgbench running the worker's claim and a fenced
//! completion at 1 to 16 clients: the most the server does for the work), the Rust loops
//! of the same statements as a second line, worker points as shares of the ceiling (each the
//! best of several rounds, interleaved with the ceiling's), and runs with frozen statistics
//! for the run-to-run spread.

use std::fmt::Write as _;

use skiplock::WorkerConfig;

use super::ceiling::{self, Ceiling, Swept};
use super::options::{Options, Scenario};
use super::report::{thousands, Section};
use super::sitting::Sitting;
use crate::bench::{self, CeilingPoint, ThroughputPoint, WorkerSetup as W};
use crate::cpu::CpuSplit;
use crate::error::Result;

/// Refuses a worker setting of 0.
pub(super) fn check(o: &Options) -> Result<()> {
    o.check_worker()
}

/// The throughput scenario's runs: the ceiling's client counts, the Rust loops, the worker
/// points and how many rounds of them.
struct Plan {
    jobs: usize,
    clients: Vec<usize>,
    loops: Vec<usize>,
    pipelined: Vec<usize>,
    points: Vec<W>,
    rounds: usize,
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
                W::defaults(400).batch(1_000),
            ],
        };
        Plan {
            jobs: o.jobs.unwrap_or(if q { 2_000 } else { 100_000 }),
            clients: if q { vec![1, 2] } else { vec![1, 2, 4, 8, 16] },
            loops: if q { vec![1, 2] } else { vec![1, 2, 4, 8, 16] },
            // The worker's shape (claim loops feeding one finishing loop), at the parallelism
            // where it can differ from back-to-back loops.
            pipelined: if q { vec![1] } else { vec![1, 2, 4] },
            points,
            rounds: if q { 1 } else { 3 },
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

    /// The jobs of a worker point: a twentieth for claims of one job (about 1,000 jobs/s: a
    /// whole run would take minutes and say no more).
    fn jobs_for(&self, w: &W) -> usize {
        if w.batch == Some(1) {
            (self.jobs / 20).max(100)
        } else {
            self.jobs
        }
    }

    fn runs(&self, pgbench: bool) -> usize {
        let ceiling = if pgbench {
            self.clients.len() * super::ceiling::SHAPES_AND_DELETING.len()
        } else {
            0
        };
        self.rounds * (ceiling + self.points.len())
            + self.loops.len()
            + self.pipelined.len()
            + self.frozen_runs
    }
}

/// What the throughput scenario measured.
struct Runs {
    /// The pgbench runs, or why there were none.
    swept: std::result::Result<Vec<Swept>, String>,
    loops: Vec<CeilingPoint>,
    ceiling: Ceiling,
    /// Each worker point with its best rate, and every rate.
    rows: Vec<(ThroughputPoint, Vec<f64>)>,
    frozen: Vec<f64>,
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let plan = Plan::new(s.options);
    let program = ceiling::program();
    s.observer
        .planned(Scenario::Throughput, plan.runs(program.is_ok()));
    let loops = loop_sweep(s, &plan).await?;
    let batch = WorkerConfig::default().max_claim_batch;
    let mut swept = Vec::new();
    let mut slots: Vec<Option<(ThroughputPoint, Vec<f64>)>> =
        plan.points.iter().map(|_| None).collect();
    for round in 0..plan.rounds {
        if let Ok(program) = &program {
            ceiling::round(
                s,
                program,
                plan.jobs,
                batch,
                &plan.clients,
                &ceiling::SHAPES_AND_DELETING,
                &mut swept,
            )
            .await?;
        }
        worker_round(s, &plan, round, &mut slots).await?;
    }
    let rows: Vec<(ThroughputPoint, Vec<f64>)> = slots.into_iter().flatten().collect();
    let best_loops = loops.iter().map(|c| c.jobs_per_s).fold(0.0, f64::max);
    let ceiling = ceiling::best_of(&swept, plan.jobs).unwrap_or_else(|| Ceiling {
        jobs_per_s: best_loops,
        from: "the best Rust loop (pgbench not found)".to_owned(),
        pgbench: false,
        jobs: plan.jobs,
        cpu: None,
    });
    for (p, _) in &rows {
        s.point(serde_json::json!({
            "scenario": "throughput", "jobs": p.jobs, "concurrency": p.setup.concurrency,
            "batch": p.batch, "claims_in_flight": p.claims_in_flight,
            "defaults": p.setup.is_default(), "prepared": p.setup.prepared,
            "jobs_per_s": p.jobs_per_s, "ceiling_jobs_per_s": ceiling.jobs_per_s,
            "ceiling_pgbench": ceiling.pgbench,
            "ratio": p.jobs_per_s / ceiling.jobs_per_s.max(1e-9),
        }));
    }
    let frozen = frozen_runs(s, &plan, ceiling.jobs_per_s).await?;
    s.ceiling = Some(ceiling.clone());
    let runs = Runs {
        swept: if program.is_ok() {
            Ok(swept)
        } else {
            Err(program.err().unwrap_or_default())
        },
        loops,
        ceiling,
        rows,
        frozen,
    };
    let spread = targets(s, &plan, &runs);
    Ok(Section {
        title: format!("Throughput ({} no-op jobs per run)", plan.jobs),
        table: table(&plan, &runs, spread),
    })
}

/// The Rust loops of the same statements (the second line), once each.
async fn loop_sweep(s: &mut Sitting<'_>, plan: &Plan) -> Result<Vec<CeilingPoint>> {
    let (url, base, jobs) = (s.url, s.base, plan.jobs);
    let ceiling_batch = WorkerConfig::default().max_claim_batch;
    let shapes = plan.loops.iter().map(|l| (*l, false));
    let shapes = shapes.chain(plan.pipelined.iter().map(|l| (*l, true)));
    let mut ceilings = Vec::new();
    for (l, pipelined) in shapes {
        let c = if pipelined {
            s.observer
                .run(&format!("Rust loops, {l} claim loops + 1 finish loop"));
            bench::ceiling_pipelined(url, base, jobs, ceiling_batch, l).await?
        } else {
            s.observer.run(&format!("Rust loops, {l} loops"));
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

/// The order in which round `round` of `rounds` runs the points, `grouped[i]` saying whether
/// point `i` belongs to the group that runs back to back (the default points, which the
/// no-slower-than-a-smaller-concurrency target compares with each other: run together, they
/// run under the same state of the machine, whose speed drifts from minute to minute).
///
/// The group is one unit in the list, where its first point is. Each round starts further
/// along the units than the one before (by their number over the number of rounds, wrapping
/// around), and the group's own order moves the same way, so that no point always runs in
/// the same place in its round (always last, right before the next round's pgbench runs,
/// say), where whatever the round leaves behind would land on it alone.
fn round_order(grouped: &[bool], round: usize, rounds: usize) -> Vec<usize> {
    let rotate = |v: &mut Vec<usize>| {
        if !v.is_empty() {
            let by = round * v.len() / rounds.max(1) % v.len();
            v.rotate_left(by);
        }
    };
    let mut group: Vec<usize> = (0..grouped.len()).filter(|&i| grouped[i]).collect();
    rotate(&mut group);
    // The units: `None` is the group, `Some(i)` a point of its own.
    let mut units: Vec<Option<usize>> = Vec::new();
    for (i, &g) in grouped.iter().enumerate() {
        if !g {
            units.push(Some(i));
        } else if !units.contains(&None) {
            units.push(None);
        }
    }
    let mut order: Vec<usize> = (0..units.len()).collect();
    rotate(&mut order);
    order
        .into_iter()
        .flat_map(|u| match units[u] {
            Some(i) => vec![i],
            None => group.clone(),
        })
        .collect()
}

/// One round of the worker points: each point's rate is added to its row (the row keeps the
/// best). `rows` has one entry per point, `None` until the point's first run.
async fn worker_round(
    s: &mut Sitting<'_>,
    plan: &Plan,
    round: usize,
    rows: &mut [Option<(ThroughputPoint, Vec<f64>)>],
) -> Result<()> {
    let grouped: Vec<bool> = plan.points.iter().map(W::is_default).collect();
    for i in round_order(&grouped, round, plan.rounds) {
        let w = &plan.points[i];
        s.observer
            .run(&format!("worker, concurrency {}", w.concurrency));
        let p = bench::throughput(s.url, s.base, plan.jobs_for(w), w).await?;
        s.observer.ran();
        s.point(serde_json::json!({
            "scenario": "throughput-run", "round": round + 1, "jobs": p.jobs,
            "concurrency": w.concurrency,
            "batch": p.batch, "claims_in_flight": p.claims_in_flight,
            "defaults": w.is_default(), "prepared": w.prepared, "jobs_per_s": p.jobs_per_s,
            "cpu_own_s": p.cpu.map(|c| c.own_s),
            "cpu_machine_busy_s": p.cpu.map(|c| c.machine_busy_s),
            "machine_busy_share": p.cpu.map(|c| c.machine_busy_share),
        }));
        match rows.get_mut(i) {
            Some(Some((best, rates))) => {
                rates.push(p.jobs_per_s);
                if p.jobs_per_s > best.jobs_per_s {
                    *best = p;
                }
            }
            Some(slot) => {
                let rate = p.jobs_per_s;
                *slot = Some((p, vec![rate]));
            }
            None => {}
        }
    }
    Ok(())
}

/// The runs with frozen statistics.
async fn frozen_runs(s: &mut Sitting<'_>, plan: &Plan, ceiling: f64) -> Result<Vec<f64>> {
    let frozen_concurrency = plan.frozen_concurrency;
    let mut frozen = Vec::new();
    for _ in 0..plan.frozen_runs {
        s.observer.run(&format!(
            "worker, concurrency {frozen_concurrency}, frozen statistics"
        ));
        let p = bench::throughput(
            s.url,
            s.base,
            plan.jobs,
            &W::defaults(frozen_concurrency).frozen_statistics(),
        )
        .await?;
        s.observer.ran();
        s.point(serde_json::json!({
            "scenario": "throughput-frozen", "jobs": p.jobs,
            "concurrency": frozen_concurrency, "jobs_per_s": p.jobs_per_s,
            "ratio": p.jobs_per_s / ceiling.max(1e-9),
        }));
        frozen.push(p.jobs_per_s);
    }
    Ok(frozen)
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

/// How much slower than a smaller concurrency's default point a default point may be before
/// it counts as slower (the run-to-run noise of a best of three on this kind of machine).
const NOISE: f64 = 0.03;

/// The default points whose every run was slower than every run of a default point of
/// smaller concurrency ("none" if there are none): a slowdown the runs agree on, as opposed
/// to one best run against another. With three runs each, runs of one rate would fall that
/// way by chance once in twenty (a one-sided rank test at zero).
fn consistently_slower(rows: &[(ThroughputPoint, Vec<f64>)]) -> String {
    let defaults: Vec<&(ThroughputPoint, Vec<f64>)> = rows
        .iter()
        .filter(|(p, runs)| p.setup.is_default() && !runs.is_empty())
        .collect();
    let mut found = Vec::new();
    for (d, d_runs) in &defaults {
        for (e, e_runs) in defaults
            .iter()
            .filter(|(e, _)| e.setup.concurrency < d.setup.concurrency)
        {
            let d_max = d_runs.iter().copied().fold(f64::MIN, f64::max);
            let e_min = e_runs.iter().copied().fold(f64::MAX, f64::min);
            if d_max < e_min {
                found.push(format!(
                    "{} under {}",
                    d.setup.concurrency, e.setup.concurrency
                ));
            }
        }
    }
    if found.is_empty() {
        "none".to_owned()
    } else {
        found.join(", ")
    }
}

/// The throughput targets; returns the frozen runs' spread, if there were two or more.
fn targets(s: &mut Sitting<'_>, plan: &Plan, runs: &Runs) -> Option<f64> {
    let (frozen, ceiling) = (&runs.frozen, runs.ceiling.jobs_per_s.max(1e-9));
    let rows: Vec<&ThroughputPoint> = runs.rows.iter().map(|(p, _)| p).collect();
    let frozen_concurrency = plan.frozen_concurrency;
    let of = if runs.ceiling.pgbench {
        "the pgbench ceiling"
    } else {
        "the ceiling (Rust loops: pgbench not found)"
    };
    if let Some(best) = rows
        .iter()
        .max_by(|a, b| a.jobs_per_s.total_cmp(&b.jobs_per_s))
    {
        let r = best.jobs_per_s / ceiling;
        s.target(
            format!("best worker point >= 90% of {of}"),
            format!(
                "{:.0}% (concurrency {}, {})",
                r * 100.0,
                best.setup.concurrency,
                describe(best)
            ),
            Some(r >= 0.9),
        );
    }
    let defaults: Vec<&&ThroughputPoint> = rows.iter().filter(|p| p.setup.is_default()).collect();
    let big: Vec<&&&ThroughputPoint> = defaults
        .iter()
        .filter(|p| p.setup.concurrency >= 100)
        .collect();
    if let Some(worst) = big
        .iter()
        .min_by(|a, b| a.jobs_per_s.total_cmp(&b.jobs_per_s))
    {
        let r = worst.jobs_per_s / ceiling;
        s.target(
            format!("defaults at concurrency >= 100: each >= 85% of {of}"),
            format!(
                "lowest {:.0}% (concurrency {})",
                r * 100.0,
                worst.setup.concurrency
            ),
            Some(r >= 0.85),
        );
    }
    // No default point slower than a default point of smaller concurrency.
    let mut slower: Vec<String> = Vec::new();
    for d in &defaults {
        for e in defaults
            .iter()
            .filter(|e| e.setup.concurrency < d.setup.concurrency)
        {
            if d.jobs_per_s < e.jobs_per_s * (1.0 - NOISE) {
                slower.push(format!(
                    "{} at {} < {} at {}",
                    d.jobs_per_s.round(),
                    d.setup.concurrency,
                    e.jobs_per_s.round(),
                    e.setup.concurrency
                ));
            }
        }
    }
    if defaults.len() >= 2 {
        let mut measured = if slower.is_empty() {
            "none slower".to_owned()
        } else {
            slower.join("; ")
        };
        let _ = write!(
            measured,
            "; every run under every run of a smaller one (a rank test, p = 0.05 for three runs each): {}",
            consistently_slower(&runs.rows)
        );
        s.target(
            format!(
                "defaults: no concurrency slower than a smaller one (by more than {:.0}%)",
                NOISE * 100.0
            ),
            measured,
            Some(slower.is_empty()),
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
        let best = frozen.iter().copied().fold(0.0, f64::max) / ceiling;
        s.target(
            format!("concurrency {frozen_concurrency}, frozen statistics: run-to-run spread < 15%"),
            format!(
                "{:.1}% ({}; best {:.0}% of the ceiling)",
                sp * 100.0,
                frozen
                    .iter()
                    .map(|r| format!("{r:.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                best * 100.0
            ),
            Some(sp < 0.15),
        );
    }
    spread
}

/// The throughput section's tables.
fn table(plan: &Plan, runs: &Runs, spread: Option<f64>) -> String {
    let config = WorkerConfig::default();
    let batch = config.max_claim_batch;
    let max_finish = thousands(config.max_finish_batch);
    let ceiling = runs.ceiling.jobs_per_s.max(1e-9);
    let rounds = plan.rounds;
    let mut t = String::new();
    match &runs.swept {
        Ok(swept) => {
            let _ = write!(
                t,
                "Ceiling: pgbench (`-M prepared`, a C client) running the worker's own `job_claim.sql` (batches of {batch}, every column computed; the rows are folded into two arrays instead of being sent) followed by a fenced completion of what it claimed, on a fresh table of {} pre-enqueued jobs per run, filled right after a `CHECKPOINT` as every worker run's table is (so that no checkpoint begins while a run is timed: at the server's default `max_wal_size` this work brings one every 10 to 15 s, and a run it falls into writes every page it touches again in full to the WAL); the best of {rounds} rounds, interleaved with the worker's. The leanest completion is one `UPDATE … FROM unnest(ids, attempts)` guarded by `status = 'running'` and the attempt (`bench_complete_lean.sql`); the worker's is `job_complete_many.sql`, which locks the rows in id order first and answers row by row (in pgbench with its wait for a row a claim holds bounded by 10 s instead of 500 ms: the worker writes such a batch through `job_finish_many.sql` instead, pgbench cannot). The claims in turn claim as the worker does through a backlog after a wait for its turn: the same claim in a transaction that first locks the queue's turn (`job_claim_in_turn.sql`, then `job_claim.sql`, then COMMIT), so that the clients' claims take turns, each taking up to {waited} as the worker's does after a wait by default (up to {double} in the next column), then complete with `job_complete_many.sql`. The last column is not part of the ceiling: the claim, then `job_complete_delete_many.sql`, the completion of a worker with `delete_done` (the jobs deleted instead of kept as done; the jobs a run completed are those no longer in the table). pgbench's rates leave connection time out.\n\n| clients | leanest fenced UPDATE jobs/s | the worker's job_complete_many.sql jobs/s | claim in turn + job_complete_many.sql jobs/s | the same, up to {double} after a wait, jobs/s | rows left running | completed jobs deleted (job_complete_delete_many.sql) jobs/s |\n|---:|---:|---:|---:|---:|---:|---:|\n",
                thousands(plan.jobs),
                waited = thousands(crate::pgbench::waited_batch(batch, crate::pgbench::Completion::InTurn)),
                double = thousands(crate::pgbench::waited_batch(batch, crate::pgbench::Completion::InTurnDouble)),
            );
            for c in &plan.clients {
                let at = |k| swept.iter().find(|w| w.clients == *c && w.completion == k);
                let (lean, worker, in_turn, double, deleting) = (
                    at(crate::pgbench::Completion::Lean),
                    at(crate::pgbench::Completion::Worker),
                    at(crate::pgbench::Completion::InTurn),
                    at(crate::pgbench::Completion::InTurnDouble),
                    at(crate::pgbench::Completion::Deleting),
                );
                let rate = |w: Option<&Swept>| {
                    w.map_or_else(|| "–".to_owned(), |w| format!("{:.0}", w.best()))
                };
                let left: usize = [lean, worker, in_turn, double, deleting]
                    .iter()
                    .map(|w| w.map_or(0, |w| w.left_running))
                    .sum();
                let _ = writeln!(
                    t,
                    "| {c} | {} | {} | {} | {} | {left} | {} |",
                    rate(lean),
                    rate(worker),
                    rate(in_turn),
                    rate(double),
                    rate(deleting)
                );
            }
            let _ = writeln!(
                t,
                "\nCeiling: **{ceiling:.0} jobs/s** ({}).",
                runs.ceiling.from
            );
            if let Some(c) = runs.ceiling.cpu {
                let _ = writeln!(
                    t,
                    "\nIn that run, CPU per job: pgbench's client {}.",
                    cpu_cell(Some((c.children_s, c)), runs.ceiling.jobs)
                );
            }
        }
        Err(why) => {
            let _ = writeln!(
                t,
                "{why}: the ceiling below is the best of the Rust loops, which is lower than what the server does for a C client.\n"
            );
        }
    }
    let _ = write!(
        t,
        "\nThe same statements from Rust loops (`job_claim.sql` and `job_finish_many.sql` through the library's driver, one run each), each loop on its own connection; either loops that claim and then finish their own batch, or claim loops feeding one loop that finishes everything that has arrived (up to {max_finish} per statement, the worker's shape):\n\n| loops | jobs/s | of the ceiling |\n|---|---:|---:|\n"
    );
    for c in &runs.loops {
        let _ = writeln!(
            t,
            "| {} | {:.0} | {:.0}% |",
            ceiling_shape(c),
            c.jobs_per_s,
            c.jobs_per_s / ceiling * 100.0
        );
    }
    let _ = write!(
        t,
        "\nWorker points, the best of {rounds} runs each, as a share of the ceiling; the default points run back to back in each round (the points the no-slower-than-a-smaller-concurrency target compares run under the same state of the machine, whose speed drifts from minute to minute), and each round (after that round's ceiling runs) starts further along the list below than the one before, the defaults' own order too, so that no point always runs in the same place in its round. A worker's rate is the wall time of its whole run: the worker's start, its connections, and the detection that the queue is drained are included. The CPU column is the best run's: the worker's own CPU per job (this process: the worker runs in it) of the machine's busy CPU per job (all cores, the server's included), its share, and how busy the machine's cores were.\n\n| concurrency | settings | batch | claims in flight | runs (jobs/s) | best jobs/s | of the ceiling | CPU per job: worker of machine |\n|---:|---|---:|---:|---|---:|---:|---|\n"
    );
    for (p, rates) in &runs.rows {
        let all: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {:.0} | {:.0}% | {} |",
            p.setup.concurrency,
            describe(p),
            p.batch,
            p.claims_in_flight,
            all.join(", "),
            p.jobs_per_s,
            p.jobs_per_s / ceiling * 100.0,
            cpu_cell(p.cpu.map(|c| (c.own_s, c)), p.jobs)
        );
    }
    if let Some(b) = cpu_split(runs) {
        t.push_str(&b);
    }
    let frozen_concurrency = plan.frozen_concurrency;
    if !runs.frozen.is_empty() {
        let _ = write!(
            t,
            "\nConcurrency {frozen_concurrency}, defaults, statistics frozen from the all-queued table (ANALYZE with every job queued, autovacuum and autoanalyze off for the table during the run):\n\n| run | jobs/s | of the ceiling |\n|---:|---:|---:|\n"
        );
        for (i, r) in runs.frozen.iter().enumerate() {
            let _ = writeln!(t, "| {} | {r:.0} | {:.0}% |", i + 1, r / ceiling * 100.0);
        }
        if let Some(sp) = spread {
            let _ = writeln!(t, "\nSpread (max - min) / median: {:.1}%.", sp * 100.0);
        }
    }
    t
}

/// `part` (a client's CPU seconds) of the machine's busy CPU in a run of `jobs`, per job:
/// `6.5 of 45.1 µs (14%), cores 91% busy`; a dash where the CPU could not be read.
fn cpu_cell(cpu: Option<(f64, CpuSplit)>, jobs: usize) -> String {
    let Some((part, c)) = cpu else {
        return "–".to_owned();
    };
    let per_job = |s: f64| s * 1e6 / jobs.max(1) as f64;
    format!(
        "{:.1} of {:.1} µs ({:.0}%), cores {:.0}% busy",
        per_job(part),
        per_job(c.machine_busy_s),
        part / c.machine_busy_s.max(1e-9) * 100.0,
        c.machine_busy_share * 100.0
    )
}

/// Where the worker's share of the ceiling comes from, for the fastest default point at
/// concurrency 100 or more: a rate is the cores' busy time over the CPU each job takes, so
/// the share is how busy each run kept the cores times the CPU per job of the ceiling's run
/// over the worker's (the server's included), and of the worker's CPU per job, some is its
/// own. `None` without the CPU of both runs.
fn cpu_split(runs: &Runs) -> Option<String> {
    let c = runs.ceiling.cpu?;
    let (p, _) = runs
        .rows
        .iter()
        .filter(|(p, _)| p.setup.is_default() && p.setup.concurrency >= 100)
        .max_by(|a, b| a.0.jobs_per_s.total_cmp(&b.0.jobs_per_s))?;
    let w = p.cpu?;
    let per_job = |s: f64, jobs: usize| s * 1e6 / jobs.max(1) as f64;
    let (w_job, c_job) = (
        per_job(w.machine_busy_s, p.jobs),
        per_job(c.machine_busy_s, runs.ceiling.jobs),
    );
    Some(format!(
        "\nWhere the worker's share of the ceiling comes from, at concurrency {} (defaults, the fastest default point at 100 or more, its best run): a rate is the cores' busy time over the CPU each job takes, so the share is the product of how busy the cores were ({:.0}% against the ceiling's run's {:.0}%: ×{:.2}) and of the CPU per job, the server's included ({:.1} µs against {:.1}: ×{:.2}). Of the worker's CPU per job, {:.1} µs ({:.0}%) was the worker's own; pgbench's client took {:.1} µs ({:.0}%).\n",
        p.setup.concurrency,
        w.machine_busy_share * 100.0,
        c.machine_busy_share * 100.0,
        w.machine_busy_share / c.machine_busy_share.max(1e-9),
        w_job,
        c_job,
        c_job / w_job.max(1e-9),
        per_job(w.own_s, p.jobs),
        w.own_share() * 100.0,
        per_job(c.children_s, runs.ceiling.jobs),
        c.children_share() * 100.0,
    ))
}

/// How a Rust-loop ceiling point ran, for its table row.
fn ceiling_shape(c: &CeilingPoint) -> String {
    if c.pipelined {
        format!("{} claim + 1 finish", c.loops)
    } else {
        format!("{} claim-and-finish", c.loops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(concurrency: usize, batch: Option<u32>, runs: &[f64]) -> (ThroughputPoint, Vec<f64>) {
        let mut setup = W::defaults(concurrency);
        if let Some(b) = batch {
            setup = setup.batch(b);
        }
        let best = runs.iter().copied().fold(f64::MIN, f64::max);
        let point = ThroughputPoint {
            jobs: 100,
            setup,
            batch: batch.unwrap_or(500),
            claims_in_flight: 1,
            jobs_per_s: best,
            cpu: None,
        };
        (point, runs.to_vec())
    }

    #[test]
    fn each_round_starts_further_along_so_that_no_point_always_runs_last() {
        // No group: the plain rotation.
        let order = |round| round_order(&[false; 12], round, 3);
        assert_eq!(order(0), (0..12).collect::<Vec<_>>());
        assert_eq!(order(1)[0], 4);
        assert_eq!(order(2)[0], 8);
        for round in 0..3 {
            let mut o = order(round);
            o.sort_unstable();
            assert_eq!(
                o,
                (0..12).collect::<Vec<_>>(),
                "round {round} runs every point once"
            );
        }
        let last: Vec<usize> = (0..3).map(|r| order(r)[11]).collect();
        assert_eq!(last, vec![11, 3, 7]);
        assert!(round_order(&[], 1, 3).is_empty());
        assert_eq!(round_order(&[false; 5], 0, 1), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn the_default_points_run_back_to_back_each_round_in_a_rotated_order() {
        // The full plan's shape: defaults at 1, 2, 4, 7 and 10 of 12 points.
        let defaults = [1, 2, 4, 7, 10];
        let grouped: Vec<bool> = (0..12).map(|i| defaults.contains(&i)).collect();
        let mut firsts = Vec::new();
        let mut lasts = Vec::new();
        for round in 0..3 {
            let o = round_order(&grouped, round, 3);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..12).collect::<Vec<_>>(), "round {round}");
            // The defaults are contiguous.
            let at: Vec<usize> = o
                .iter()
                .enumerate()
                .filter(|(_, i)| defaults.contains(i))
                .map(|(k, _)| k)
                .collect();
            assert_eq!(at.len(), 5);
            assert_eq!(at[4] - at[0], 4, "round {round}: {o:?}");
            firsts.push(o[at[0]]);
            lasts.push(*o.last().unwrap_or(&usize::MAX));
        }
        // The group's own order moves from round to round.
        assert_eq!(firsts, vec![1, 2, 7]);
        // Round 0 keeps the list's order, the group where its first point is.
        assert_eq!(
            round_order(&grouped, 0, 3),
            vec![0, 1, 2, 4, 7, 10, 3, 5, 6, 8, 9, 11]
        );
        // Not always the same point last.
        lasts.dedup();
        assert_eq!(lasts.len(), 3, "{lasts:?}");
    }

    #[test]
    fn a_point_is_consistently_slower_only_when_every_run_is_under_every_run_of_a_smaller_one() {
        // Overlapping runs: no slowdown the runs agree on, though 400's best is 4% under.
        let rows = vec![
            row(100, None, &[62_000.0, 65_600.0, 62_900.0]),
            row(400, None, &[62_500.0, 63_000.0, 63_000.0]),
        ];
        assert_eq!(consistently_slower(&rows), "none");
        // Every run of 400 under every run of 100 (and of 10): reported, largest first.
        let rows = vec![
            row(10, None, &[64_000.0, 64_500.0, 65_000.0]),
            row(100, None, &[63_000.0, 64_000.0, 65_000.0]),
            row(400, None, &[60_000.0, 61_000.0, 62_900.0]),
        ];
        assert_eq!(consistently_slower(&rows), "400 under 10, 400 under 100");
        // A point with settings other than the defaults is not compared.
        let rows = vec![
            row(100, None, &[63_000.0, 64_000.0, 65_000.0]),
            row(400, Some(1000), &[60_000.0, 61_000.0, 62_900.0]),
        ];
        assert_eq!(consistently_slower(&rows), "none");
    }

    fn split(own_s: f64, children_s: f64, machine_busy_s: f64) -> CpuSplit {
        CpuSplit {
            machine_busy_s,
            machine_busy_share: 0.9,
            own_s,
            children_s,
        }
    }

    #[test]
    fn the_cpu_split_of_the_fastest_default_point_at_100_or_more_is_set_beside_pgbench() {
        let with_cpu = |concurrency, batch, rate: f64, own_s, busy_s| {
            let (mut p, rates) = row(concurrency, batch, &[rate]);
            p.cpu = Some(split(own_s, 0.0, busy_s));
            (p, rates)
        };
        let mut runs = Runs {
            swept: Ok(Vec::new()),
            loops: Vec::new(),
            ceiling: Ceiling {
                jobs_per_s: 50_000.0,
                from: "pgbench".to_owned(),
                pgbench: true,
                jobs: 100,
                // 40 µs a job, pgbench's client 2 of them.
                cpu: Some(split(0.0, 0.0002, 0.004)),
            },
            rows: vec![
                // Faster, but below 100 or not the defaults: never the one compared.
                with_cpu(10, None, 48_000.0, 0.0001, 0.001),
                with_cpu(400, Some(1000), 49_000.0, 0.0001, 0.001),
                // The fastest default point at 100 or more: 50 µs a job, 6 its own.
                with_cpu(200, None, 40_000.0, 0.0006, 0.005),
                with_cpu(100, None, 39_000.0, 0.0001, 0.001),
            ],
            frozen: Vec::new(),
        };
        let text = cpu_split(&runs).expect("both runs' CPU is known");
        assert!(text.contains("at concurrency 200"), "{text}");
        assert!(
            text.contains("(90% against the ceiling's run's 90%: ×1.00)"),
            "{text}"
        );
        assert!(text.contains("(50.0 µs against 40.0: ×0.80)"), "{text}");
        assert!(text.contains("6.0 µs (12%) was the worker's own"), "{text}");
        assert!(text.contains("pgbench's client took 2.0 µs (5%)"), "{text}");
        // Without the ceiling's CPU (the Rust loops, or no /proc), nothing is said.
        runs.ceiling.cpu = None;
        assert_eq!(cpu_split(&runs), None);
    }

    #[test]
    fn a_cpu_cell_gives_the_clients_and_the_machines_cpu_per_job() {
        let c = split(0.65, 0.0, 4.51);
        assert_eq!(
            cpu_cell(Some((c.own_s, c)), 100_000),
            "6.5 of 45.1 µs (14%), cores 90% busy"
        );
        assert_eq!(cpu_cell(None, 100_000), "–");
    }
}
