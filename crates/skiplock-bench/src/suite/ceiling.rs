//! The ceiling every worker figure is a share of: pgbench (a C client, prepared statements)
//! running the worker's own claim and a fenced completion of what it claimed, at several
//! client counts, the best of several rounds ([`crate::pgbench`]). Without pgbench, the best
//! of the Rust loops stands in, and the report says so.

use std::path::PathBuf;

use super::sitting::Sitting;
use crate::cpu::CpuSplit;
use crate::error::Result;
use crate::pgbench::{self, Completion, PgbenchPoint};

/// The best rate of the sitting and where it came from.
#[derive(Debug, Clone)]
pub(super) struct Ceiling {
    /// Jobs per second.
    pub(super) jobs_per_s: f64,
    /// How it was reached (`pgbench, 4 clients, the worker's job_complete_many.sql`).
    pub(super) from: String,
    /// Whether pgbench measured it (else the Rust loops, pgbench not being found).
    pub(super) pgbench: bool,
    /// The jobs per run it was measured with.
    pub(super) jobs: usize,
    /// The CPU of the run that set it (pgbench's share in [`CpuSplit::children_share`]);
    /// `None` for the Rust loops, or where it cannot be read.
    pub(super) cpu: Option<CpuSplit>,
}

/// One client count and completion, with its rate in each round.
#[derive(Debug, Clone)]
pub(super) struct Swept {
    pub(super) clients: usize,
    pub(super) completion: Completion,
    pub(super) rates: Vec<f64>,
    /// The CPU of each run, beside its rate.
    pub(super) cpu: Vec<Option<CpuSplit>>,
    pub(super) left_running: usize,
}

impl Swept {
    pub(super) fn best(&self) -> f64 {
        self.rates.iter().copied().fold(0.0, f64::max)
    }

    /// The CPU of the best run.
    pub(super) fn best_cpu(&self) -> Option<CpuSplit> {
        let best = self
            .rates
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))?
            .0;
        self.cpu.get(best).copied().flatten()
    }
}

/// The `pgbench` program, or why there is none (for the report).
pub(super) fn program() -> std::result::Result<PathBuf, String> {
    pgbench::find().ok_or_else(|| {
        format!(
            "pgbench was not found (set {} to it, or put the PostgreSQL client programs on PATH)",
            pgbench::PGBENCH_ENV
        )
    })
}

/// The scripts whose best is the ceiling: what the worker does with its defaults (it keeps
/// the jobs it completes), and the leanest completion beside it.
pub(super) const SHAPES: [Completion; 4] = [
    Completion::Lean,
    Completion::Worker,
    Completion::InTurn,
    Completion::InTurnDouble,
];

/// [`SHAPES`], and the completion that deletes the jobs (a worker with `delete_done`),
/// measured beside them but never the ceiling.
pub(super) const SHAPES_AND_DELETING: [Completion; 5] = [
    Completion::Lean,
    Completion::Worker,
    Completion::InTurn,
    Completion::InTurnDouble,
    Completion::Deleting,
];

/// One round of pgbench runs: every client count with each of `shapes`, each on a fresh
/// table of `jobs`; adds each rate to `swept` (in the order of `clients`, then of `shapes`).
pub(super) async fn round(
    s: &mut Sitting<'_>,
    program: &std::path::Path,
    jobs: usize,
    batch: u32,
    clients: &[usize],
    shapes: &[Completion],
    swept: &mut Vec<Swept>,
) -> Result<()> {
    let mut i = 0;
    for &c in clients {
        for &completion in shapes {
            s.observer.run(&format!(
                "ceiling, pgbench, {c} clients, {}",
                completion.label()
            ));
            let p: PgbenchPoint =
                pgbench::ceiling(program, s.url, s.base, jobs, batch, c, completion).await?;
            s.observer.ran();
            s.point(serde_json::json!({
                "scenario": "throughput-ceiling-pgbench", "jobs": p.jobs, "clients": c,
                "completion": completion.name(), "batch": p.batch,
                "left_running": p.left_running, "jobs_per_s": p.jobs_per_s,
                "cpu_client_s": p.cpu.map(|c| c.children_s),
                "cpu_machine_busy_s": p.cpu.map(|c| c.machine_busy_s),
                "machine_busy_share": p.cpu.map(|c| c.machine_busy_share),
            }));
            if swept.len() <= i {
                swept.push(Swept {
                    clients: c,
                    completion,
                    rates: Vec::new(),
                    cpu: Vec::new(),
                    left_running: 0,
                });
            }
            swept[i].rates.push(p.jobs_per_s);
            swept[i].cpu.push(p.cpu);
            swept[i].left_running = swept[i].left_running.max(p.left_running);
            i += 1;
        }
    }
    Ok(())
}

/// The best of `swept` as the sitting's ceiling (the deleting completion left out: the
/// worker's default points keep the jobs they complete).
pub(super) fn best_of(swept: &[Swept], jobs: usize) -> Option<Ceiling> {
    let best = swept
        .iter()
        .filter(|w| w.completion != Completion::Deleting)
        .max_by(|a, b| a.best().total_cmp(&b.best()))?;
    Some(Ceiling {
        jobs_per_s: best.best(),
        from: format!(
            "pgbench, {} clients, claim + {}",
            best.clients,
            best.completion.label()
        ),
        pgbench: true,
        jobs,
        cpu: best.best_cpu(),
    })
}
