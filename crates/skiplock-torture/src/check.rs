//! The accounting at the end of a run: the database's rows, the completion audit (a trigger
//! that records every transition into `done`), the lease audit (a trigger that records every
//! lease granted or renewed) and the execution logs, checked against what was enqueued.
//!
//! Times: the logs' are the workers' wall clocks (in milliseconds; a worker run with its
//! clock set ahead has its log corrected by that offset), the audits' are the server's
//! `now()`; all of them are this machine's clock. Two orderings are exact, not estimates:
//! an execution logs its end before its outcome is sent, so a completion it caused is
//! recorded at or after that end; and a job is claimed again only after its lease expired
//! (the reaper) or it was handed back, so an execution that starts while an earlier one of
//! the same job still runs must start after that earlier attempt's last lease deadline.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use skiplock::Client;

use crate::faults::{Fault, Tally};
use crate::jobs::Spec;
use crate::log;

// ---- The harness's own SQL, in `queries/` (the queue's statements are in the library's) ----

/// Ends about half of the workers' connections, LISTEN ones included.
pub const TERMINATE_SOME: &str = include_str!("../queries/terminate_some.sql");

/// What the bystander reads before it sits idle in its transaction.
pub const BYSTANDER_READ: &str = include_str!("../queries/bystander_read.sql");

const COUNT_RANGE: &str = include_str!("../queries/count_range.sql");

const ROWS: &str = include_str!("../queries/rows.sql");

/// Every completion: the job, the `attempts` of the row version that became `done` (which
/// the fence makes the attempt that wrote it), and when, in epoch milliseconds.
const COMPLETIONS: &str = include_str!("../queries/completions.sql");

/// The lease audit: every lease granted (claim) or renewed (heartbeat), per attempt, with its
/// deadline. Recorded by a trigger rather than derived from the lease length, so that the
/// check is exact whatever the heartbeats did.
pub const LEASE_AUDIT_INSTALL: &str = include_str!("../queries/lease_audit_install.sql");

/// Each attempt's last lease deadline, in epoch milliseconds (rounded down, as the logs are).
const LEASES: &str = include_str!("../queries/leases.sql");

/// What was enqueued: payload `n` -> (spec, kind).
#[derive(Default)]
pub struct Expected {
    pub jobs: BTreeMap<u64, (Spec, &'static str)>,
}

pub async fn count_payload_range(c: &Client, from: u64, to: u64) -> anyhow::Result<u64> {
    let conn = c.pool().get().await?;
    let n: i64 = conn
        .query_one(COUNT_RANGE, &[&(from as i64), &(to as i64)])
        .await?
        .get(0);
    Ok(n.unsigned_abs())
}

#[derive(Default, Debug)]
pub struct Report {
    pub enqueued: usize,
    pub done: usize,
    pub failed: usize,
    pub lost: Vec<u64>,
    pub unexpected: Vec<u64>,
    pub not_terminal: Vec<i64>,
    pub wrong_state: Vec<i64>,
    pub duplicate_completions: i64,
    pub stale_completions: Vec<(i64, i32)>,
    /// (job, earlier attempt, later attempt): the later one started while the earlier one
    /// still ran and still held its lease.
    pub overlaps: Vec<(i64, i32, i32)>,
    pub executions: usize,
    pub extra: BTreeMap<&'static str, usize>,
}

/// One execution (a handler run) of one attempt, from the logs.
#[derive(Default, Clone, Copy)]
struct Run {
    starts: u32,
    start_ms: Option<i64>,
    /// The end, and whether it succeeded.
    end: Option<(i64, bool)>,
}

pub async fn check(
    c: &Client,
    expected: &Expected,
    logs: &[(PathBuf, i64)],
) -> anyhow::Result<Report> {
    let conn = c.pool().get().await?;
    let rows = conn.query(ROWS, &[]).await?;
    let completions = conn.query(COMPLETIONS, &[]).await?;
    let leases: HashMap<(i64, i32), i64> = conn
        .query(LEASES, &[])
        .await?
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect();

    // What ran, from the logs: per (job, attempt), when it started and how it ended.
    let mut runs: HashMap<(i64, i32), Run> = HashMap::new();
    let mut executions = 0;
    for (path, offset_ms) in logs {
        for e in log::read(path, *offset_ms) {
            let r = runs.entry((e.job, e.attempt)).or_default();
            if e.start {
                r.starts += 1;
                r.start_ms = Some(r.start_ms.map_or(e.ms, |s| s.min(e.ms)));
                executions += 1;
            } else {
                r.end = Some(match r.end {
                    Some((t, ok)) => (t.max(e.ms), ok || e.ok),
                    None => (e.ms, e.ok),
                });
            }
        }
    }

    let mut report = Report {
        enqueued: expected.jobs.len(),
        executions,
        ..Report::default()
    };
    let mut seen = HashSet::new();
    for r in &rows {
        let id: i64 = r.get(0);
        let n = r.get::<_, Option<i64>>(1).unwrap_or(-1);
        let status: String = r.get(2);
        let attempts: i32 = r.get(3);
        let Some((spec, _)) = u64::try_from(n).ok().and_then(|n| expected.jobs.get(&n)) else {
            report.unexpected.push(n.unsigned_abs());
            continue;
        };
        seen.insert(n.unsigned_abs());
        match status.as_str() {
            "done" => report.done += 1,
            "failed" => report.failed += 1,
            _ => {
                report.not_terminal.push(id);
                continue;
            }
        }
        let want = if spec.permanent { "failed" } else { "done" };
        if status != want {
            report.wrong_state.push(id);
        }
        // Why did it run more than once? Look at every earlier attempt.
        for a in 1..attempts {
            let reason = match runs.get(&(id, a)).map(|r| r.end) {
                None => "claimed, never started (worker gone before it ran)",
                Some(None) => "worker died or was stopped mid-job",
                Some(Some((_, false))) => "retried after a failure the job asked for",
                Some(Some((_, true))) => {
                    "finished, result not recorded (worker killed before writing it, database restart, or lease lost)"
                }
            };
            *report.extra.entry(reason).or_default() += 1;
        }
    }
    report.lost = expected
        .jobs
        .keys()
        .copied()
        .filter(|n| !seen.contains(n))
        .collect();

    // Every accepted completion came from an execution of the attempt it records that had
    // succeeded by then (a stale writer's completion lands on a later attempt's row version,
    // before that attempt's own end, or on an attempt that never succeeded), and no job was
    // completed twice.
    let mut per_job: HashMap<i64, u32> = HashMap::new();
    for r in &completions {
        let (id, attempt, at_ms): (i64, i32, i64) = (r.get(0), r.get(1), r.get(2));
        *per_job.entry(id).or_default() += 1;
        let backed = runs
            .get(&(id, attempt))
            .and_then(|r| r.end)
            .is_some_and(|(end, ok)| ok && end <= at_ms);
        if !backed {
            report.stale_completions.push((id, attempt));
        }
    }
    report.duplicate_completions = per_job.values().map(|n| i64::from(*n) - 1).sum();

    // Two executions of one job overlap only once the earlier one's lease had expired. An
    // execution with no logged end (its process was killed) is left out: when it stopped is
    // not known.
    let mut by_job: BTreeMap<i64, Vec<(i32, Run)>> = BTreeMap::new();
    for (&(job, attempt), r) in &runs {
        by_job.entry(job).or_default().push((attempt, *r));
    }
    for (job, mut attempts) in by_job {
        attempts.sort_by_key(|(a, _)| *a);
        for (i, (a, earlier)) in attempts.iter().enumerate() {
            let (Some(a_start), Some((a_end, _))) = (earlier.start_ms, earlier.end) else {
                continue;
            };
            for (b, later) in &attempts[i + 1..] {
                let Some(b_start) = later.start_ms else {
                    continue;
                };
                let b_end = later.end.map_or(i64::MAX, |(t, _)| t);
                let overlap = b_start < a_end && a_start < b_end;
                if overlap
                    && leases
                        .get(&(job, *a))
                        .is_none_or(|deadline| *deadline > b_start)
                {
                    report.overlaps.push((job, *a, *b));
                }
            }
        }
    }
    Ok(report)
}

impl Report {
    /// Prints the report; returns whether every invariant held.
    pub fn print(
        &self,
        tally: &Tally,
        restarts: &BTreeMap<String, u32>,
        elapsed: Duration,
        quiesce: Duration,
        json: bool,
    ) -> bool {
        let ok = self.lost.is_empty()
            && self.unexpected.is_empty()
            && self.not_terminal.is_empty()
            && self.wrong_state.is_empty()
            && self.duplicate_completions == 0
            && self.stale_completions.is_empty()
            && self.overlaps.is_empty();
        println!("\nfaults injected");
        for f in Fault::all() {
            if let Some(n) = tally.0.get(&f) {
                println!("  {:<52} {n:>6}", f.name());
            }
        }
        let restarted: u32 = restarts.values().sum();
        println!("  {:<52} {restarted:>6}", "worker process restarts");
        println!("\naccounting");
        let line = |label: &str, v: String| println!("  {label:<52} {v:>10}");
        line("jobs enqueued (acknowledged)", self.enqueued.to_string());
        line("done", self.done.to_string());
        line(
            "failed (where the job asked to fail)",
            self.failed.to_string(),
        );
        line(
            "lost (enqueued, not in the table)",
            self.lost.len().to_string(),
        );
        line(
            "unexpected (in the table, never acknowledged)",
            self.unexpected.len().to_string(),
        );
        line(
            "left queued or running",
            self.not_terminal.len().to_string(),
        );
        line(
            "in the wrong final state",
            self.wrong_state.len().to_string(),
        );
        line(
            "duplicate completions",
            self.duplicate_completions.to_string(),
        );
        line(
            "stale completions accepted",
            self.stale_completions.len().to_string(),
        );
        line(
            "overlaps (ran while an earlier run held the lease)",
            self.overlaps.len().to_string(),
        );
        line("executions (handler runs)", self.executions.to_string());
        println!("\nexecutions beyond one per job, by reason");
        if self.extra.is_empty() {
            println!("  none");
        }
        for (why, n) in &self.extra {
            println!("  {n:>8}  {why}");
        }
        println!(
            "\nrun {:.0} s, quiesce {:.1} s: {}",
            elapsed.as_secs_f64(),
            quiesce.as_secs_f64(),
            if ok { "PASS" } else { "FAIL" }
        );
        if !ok {
            println!(
                "  lost {:?} unexpected {:?} not terminal {:?} wrong state {:?} stale {:?} overlaps {:?}",
                first(&self.lost),
                first(&self.unexpected),
                first(&self.not_terminal),
                first(&self.wrong_state),
                first(&self.stale_completions),
                first(&self.overlaps)
            );
        }
        if json {
            let faults: BTreeMap<String, u64> = tally
                .0
                .iter()
                .map(|(f, n)| (format!("{f:?}"), *n))
                .collect();
            let extra: BTreeMap<&str, usize> = self.extra.iter().map(|(k, v)| (*k, *v)).collect();
            println!(
                "{}",
                serde_json::json!({
                    "pass": ok, "enqueued": self.enqueued, "done": self.done, "failed": self.failed,
                    "lost": self.lost.len(), "unexpected": self.unexpected.len(),
                    "not_terminal": self.not_terminal.len(), "wrong_state": self.wrong_state.len(),
                    "duplicate_completions": self.duplicate_completions,
                    "stale_completions": self.stale_completions.len(),
                    "overlaps": self.overlaps.len(),
                    "executions": self.executions, "extra_executions": extra,
                    "faults": faults, "worker_restarts": restarted,
                    "elapsed_s": elapsed.as_secs_f64(), "quiesce_s": quiesce.as_secs_f64(),
                })
            );
        }
        ok
    }
}

fn first<T: Clone>(v: &[T]) -> Vec<T> {
    v.iter().take(5).cloned().collect()
}
