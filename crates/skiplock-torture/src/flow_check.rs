//! The flow scenario's accounting: every job enqueued is in the table and done, records the
//! parents it was enqueued with, and has exactly one effect; no handler found a parent not
//! done; and no job's effect was written before each of its parents' effects had committed
//! (the effect's `clock_timestamp()` against the commit timestamp of the parent's first
//! effect, both the server's clock).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use skiplock::{Client, JobId};

const JOBS: &str = include_str!("../queries/flow_jobs.sql");
const EFFECTS: &str = include_str!("../queries/flow_effects.sql");
const VIOLATIONS: &str = include_str!("../queries/flow_violations.sql");

/// What was enqueued.
#[derive(Default)]
pub struct Expected {
    /// Each job's parents (sorted ids), as enqueued.
    pub parents: HashMap<i64, Vec<i64>>,
    /// Every job, in the order enqueued.
    pub ids: Vec<i64>,
    /// How many jobs of each group (chain, diamond, fan-out, after).
    pub groups: BTreeMap<&'static str, usize>,
    /// Existing jobs the steps of the workflow being built wait for, by step.
    pub existing: BTreeMap<usize, Vec<JobId>>,
    /// Enqueues the database refused with a deadlock (and were repeated).
    pub deadlocks: u32,
}

/// The faults injected and what the workers noticed.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// Worker processes (at once).
    pub workers: usize,
    pub kills: u64,
    pub stops: u64,
    pub stopped_for: Duration,
    pub restarts: u32,
    /// Completions refused with `LeaseLost` (stale attempts, their effects rolled back).
    pub lease_lost: usize,
}

#[derive(Debug, Default)]
pub struct Report {
    pub in_table: usize,
    pub done: usize,
    /// Enqueued jobs not done at the end: (id, status).
    pub not_done: Vec<(i64, String)>,
    /// Enqueued, not in the table.
    pub missing_jobs: Vec<i64>,
    /// In the table, never enqueued.
    pub unexpected_jobs: Vec<i64>,
    /// Jobs whose recorded parents (`jobs.after`) differ from those enqueued.
    pub wrong_parents: Vec<i64>,
    pub effects: usize,
    /// Jobs with more than one effect: (id, how many).
    pub duplicate_effects: Vec<(i64, usize)>,
    /// Enqueued jobs with no effect.
    pub missing_effects: Vec<i64>,
    /// Effects of jobs never enqueued.
    pub stray_effects: usize,
    /// What the handlers found: (job, attempt, detail).
    pub violations: Vec<(i64, i32, String)>,
    /// (child, parent): an effect of the child written before an effect of the parent
    /// committed.
    pub early: Vec<(i64, i64)>,
    /// Parent-child pairs whose effects were compared.
    pub pairs: usize,
    /// Effects whose commit time was not known (compared with the write time instead).
    pub no_commit_ts: usize,
    /// Jobs claimed more than once (attempts > 1), and the claims in all.
    pub reruns: usize,
    pub attempts: i64,
}

/// One effect: attempt, when written, when committed (epoch microseconds).
type Effect = (i32, i64, Option<i64>);

pub async fn check(c: &Client, expected: &Expected) -> anyhow::Result<Report> {
    let conn = c.pool().get().await?;
    let jobs = conn.query(JOBS, &[]).await?;
    let effect_rows = conn.query(EFFECTS, &[]).await?;
    let violations = conn.query(VIOLATIONS, &[]).await?;
    let mut r = Report {
        in_table: jobs.len(),
        effects: effect_rows.len(),
        violations: violations
            .iter()
            .map(|v| (v.get(0), v.get(1), v.get(2)))
            .collect(),
        ..Report::default()
    };

    let mut seen = HashSet::new();
    for row in &jobs {
        let (id, status, attempts, mut after): (i64, String, i32, Vec<i64>) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let Some(want) = expected.parents.get(&id) else {
            r.unexpected_jobs.push(id);
            continue;
        };
        seen.insert(id);
        if status == "done" {
            r.done += 1;
        } else {
            r.not_done.push((id, status));
        }
        after.sort_unstable();
        if &after != want {
            r.wrong_parents.push(id);
        }
        if attempts > 1 {
            r.reruns += 1;
        }
        r.attempts += i64::from(attempts);
    }
    r.missing_jobs = expected
        .ids
        .iter()
        .copied()
        .filter(|id| !seen.contains(id))
        .collect();

    let mut effects: HashMap<i64, Vec<Effect>> = HashMap::new();
    for e in &effect_rows {
        let job: i64 = e.get(0);
        if !expected.parents.contains_key(&job) {
            r.stray_effects += 1;
            continue;
        }
        let committed: Option<i64> = e.get(3);
        if committed.is_none() {
            r.no_commit_ts += 1;
        }
        effects
            .entry(job)
            .or_default()
            .push((e.get(1), e.get(2), committed));
    }
    for id in &expected.ids {
        match effects.get(id).map_or(0, Vec::len) {
            0 => r.missing_effects.push(*id),
            1 => {}
            n => r.duplicate_effects.push((*id, n)),
        }
    }

    // Order: every effect of a child after an effect of each parent committed.
    for (child, parents) in &expected.parents {
        let Some(mine) = effects.get(child) else {
            continue;
        };
        for parent in parents {
            let Some(theirs) = effects.get(parent) else {
                continue;
            };
            r.pairs += 1;
            // The parent's first effect to commit (a parent with several effects fails the
            // duplicates check already; a late duplicate is not counted twice here).
            let Some(first) = theirs
                .iter()
                .map(|(_, p_written, p_committed)| p_committed.unwrap_or(*p_written))
                .min()
            else {
                continue;
            };
            let early = mine.iter().any(|(_, written, _)| *written <= first);
            if early {
                r.early.push((*child, *parent));
            }
        }
    }
    r.not_done.sort_unstable();
    r.duplicate_effects.sort_unstable();
    r.early.sort_unstable();
    Ok(r)
}

impl Report {
    /// The names of the checks that failed (none: the run passed).
    pub fn failed_checks(&self) -> Vec<&'static str> {
        let mut failed = Vec::new();
        let mut check = |bad: bool, name| {
            if bad {
                failed.push(name);
            }
        };
        check(!self.not_done.is_empty(), "jobs_not_done");
        check(!self.missing_jobs.is_empty(), "jobs_missing");
        check(!self.unexpected_jobs.is_empty(), "unexpected_jobs");
        check(!self.wrong_parents.is_empty(), "wrong_parents");
        check(!self.duplicate_effects.is_empty(), "duplicate_effects");
        check(!self.missing_effects.is_empty(), "missing_effects");
        check(self.stray_effects > 0, "stray_effects");
        check(!self.violations.is_empty(), "violations");
        check(!self.early.is_empty(), "early_effects");
        failed
    }

    /// Prints the report; returns whether every check passed.
    pub fn print(
        &self,
        expected: &Expected,
        faults: &Faults,
        settled: bool,
        elapsed: Duration,
        settle: Duration,
        json: bool,
    ) -> bool {
        let failed = self.failed_checks();
        let ok = failed.is_empty() && settled;
        let enqueued = expected.ids.len();
        let line = |label: &str, v: String| println!("  {label:<56} {v:>10}");
        println!("\nfaults injected");
        line("kill -9 of a worker", faults.kills.to_string());
        line(
            "SIGSTOP of a worker (then SIGCONT)",
            format!(
                "{} ({:.1} s)",
                faults.stops,
                faults.stopped_for.as_secs_f64() / faults.stops.max(1) as f64
            ),
        );
        line("worker process restarts", faults.restarts.to_string());
        println!("\naccounting");
        let groups: Vec<String> = expected
            .groups
            .iter()
            .map(|(g, n)| format!("{n} {g}"))
            .collect();
        line("jobs enqueued", enqueued.to_string());
        println!("    ({})", groups.join(", "));
        line(
            "enqueues repeated after a deadlock (40P01)",
            expected.deadlocks.to_string(),
        );
        line("jobs in the table", self.in_table.to_string());
        line("done", self.done.to_string());
        line("not done", self.not_done.len().to_string());
        line(
            "enqueued, missing from the table",
            self.missing_jobs.len().to_string(),
        );
        line(
            "in the table, never enqueued",
            self.unexpected_jobs.len().to_string(),
        );
        line(
            "parents recorded differ from those enqueued",
            self.wrong_parents.len().to_string(),
        );
        line("effects", self.effects.to_string());
        line(
            "jobs with duplicate effects",
            format!(
                "{} (+{})",
                self.duplicate_effects.len(),
                self.duplicate_effects
                    .iter()
                    .map(|(_, n)| n - 1)
                    .sum::<usize>()
            ),
        );
        line(
            "jobs with no effect",
            self.missing_effects.len().to_string(),
        );
        line("effects of unknown jobs", self.stray_effects.to_string());
        line(
            "violations (ran while a parent was not done)",
            self.violations.len().to_string(),
        );
        line(
            "effects before a parent's effect committed",
            format!("{} of {} pairs", self.early.len(), self.pairs),
        );
        line(
            "jobs claimed more than once (attempts > 1)",
            self.reruns.to_string(),
        );
        line("claims in all", self.attempts.to_string());
        line(
            "stale completions refused (LeaseLost, rolled back)",
            faults.lease_lost.to_string(),
        );
        if self.no_commit_ts > 0 {
            line(
                "effects without a commit timestamp",
                self.no_commit_ts.to_string(),
            );
        }
        println!(
            "\nrun {:.0} s, settle {:.1} s: {}",
            elapsed.as_secs_f64(),
            settle.as_secs_f64(),
            if ok { "PASS" } else { "FAIL" }
        );
        if ok {
            println!(
                "\n{enqueued} jobs ({}) all done by {} worker processes ({} restarts) under {} kill -9 \
                 and {} SIGSTOP longer than the lease; {} jobs ran more than once ({} claims for \
                 {enqueued} jobs) and {} stale completions were refused and rolled back; \
                 {} effects, exactly one per job (duplicates 0, missing 0); no violation, and no \
                 effect before its parents' committed ({} parent-child pairs).",
                groups.join(", "),
                faults.workers,
                faults.restarts,
                faults.kills,
                faults.stops,
                self.reruns,
                self.attempts,
                faults.lease_lost,
                self.effects,
                self.pairs,
            );
        } else {
            if !settled && failed.is_empty() {
                println!("  failed: not every job was done in time");
            } else {
                println!("  failed: {}", failed.join(", "));
            }
            let first = |v: &[(i64, usize)]| v.iter().take(5).copied().collect::<Vec<_>>();
            if !self.duplicate_effects.is_empty() {
                println!(
                    "  duplicate effects (job, effects): {:?}",
                    first(&self.duplicate_effects)
                );
            }
            if !self.missing_effects.is_empty() {
                println!(
                    "  no effect: {:?}",
                    &self.missing_effects[..self.missing_effects.len().min(5)]
                );
            }
            if !self.not_done.is_empty() {
                println!(
                    "  not done: {:?}",
                    &self.not_done[..self.not_done.len().min(5)]
                );
            }
            if !self.violations.is_empty() {
                println!(
                    "  violations: {:?}",
                    &self.violations[..self.violations.len().min(5)]
                );
            }
            if !self.early.is_empty() {
                println!(
                    "  early (child, parent): {:?}",
                    &self.early[..self.early.len().min(5)]
                );
            }
            if !self.wrong_parents.is_empty() {
                println!(
                    "  wrong parents: {:?}",
                    &self.wrong_parents[..self.wrong_parents.len().min(5)]
                );
            }
        }
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "pass": ok, "settled": settled, "failed_checks": failed,
                    "enqueued": enqueued, "groups": expected.groups,
                    "enqueue_deadlocks": expected.deadlocks,
                    "in_table": self.in_table, "done": self.done,
                    "not_done": self.not_done.len(), "missing_jobs": self.missing_jobs.len(),
                    "unexpected_jobs": self.unexpected_jobs.len(),
                    "wrong_parents": self.wrong_parents.len(),
                    "effects": self.effects,
                    "duplicate_effects": self.duplicate_effects.len(),
                    "missing_effects": self.missing_effects.len(),
                    "stray_effects": self.stray_effects,
                    "violations": self.violations.len(),
                    "early_effects": self.early.len(), "pairs": self.pairs,
                    "reruns": self.reruns, "attempts": self.attempts,
                    "kills": faults.kills, "stops": faults.stops,
                    "restarts": faults.restarts, "lease_lost": faults.lease_lost,
                    "elapsed_s": elapsed.as_secs_f64(), "settle_s": settle.as_secs_f64(),
                })
            );
        }
        ok
    }
}
