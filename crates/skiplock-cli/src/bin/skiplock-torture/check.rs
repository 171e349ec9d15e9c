//! The accounting at the end of a run: the database's rows, the completion audit (a trigger
//! that records every transition into `done`) and the execution logs, checked against what
//! was enqueued.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use skiplock::Client;

use crate::faults::{Fault, Tally};
use crate::jobs::Spec;
use crate::log;

// ---- The harness's own SQL (the queue's statements are in crates/skiplock/queries) --------

/// Ends about half of the workers' connections, LISTEN ones included.
pub const TERMINATE_SOME: &str = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()
   AND (application_name LIKE 'torture-typed-%'
        OR application_name IN ('skiplock-cli', 'skiplock-listener'))
   AND random() < 0.5";

/// What the bystander reads before it sits idle in its transaction.
pub const BYSTANDER_READ: &str = "SELECT count(*) FROM torture.jobs";

const COUNT_RANGE: &str = "SELECT count(*) FROM torture.jobs
 WHERE (payload->>'n')::int8 >= $1 AND (payload->>'n')::int8 < $2";

const ROWS: &str =
    "SELECT id, (payload->>'n')::int8, status, attempts FROM torture.jobs ORDER BY id";

const COMPLETIONS: &str = "SELECT job_id, attempts FROM torture.lab_completions";

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
    pub executions: usize,
    pub extra: BTreeMap<&'static str, usize>,
}

pub async fn check(c: &Client, expected: &Expected, logs: &[PathBuf]) -> anyhow::Result<Report> {
    let conn = c.pool().get().await?;
    let rows = conn.query(ROWS, &[]).await?;
    let completions = conn.query(COMPLETIONS, &[]).await?;

    // What ran, from the logs: per (job, attempt), started and how it ended.
    let mut runs: HashMap<(i64, i32), (u32, Option<bool>)> = HashMap::new();
    let mut executions = 0;
    for path in logs {
        for e in log::read(path) {
            let r = runs.entry((e.job, e.attempt)).or_insert((0, None));
            if e.start {
                r.0 += 1;
                executions += 1;
            } else {
                r.1 = Some(r.1.unwrap_or(false) || e.ok);
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
            let reason = match runs.get(&(id, a)) {
                None => "claimed, never started (worker gone before it ran)",
                Some((_, None)) => "worker died or was stopped mid-job",
                Some((_, Some(false))) => "retried after a failure the job asked for",
                Some((_, Some(true))) => {
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

    // Every accepted completion came from an execution of that very attempt that succeeded,
    // and no job was completed twice.
    let mut per_job: HashMap<i64, u32> = HashMap::new();
    for r in &completions {
        let (id, attempt): (i64, i32) = (r.get(0), r.get(1));
        *per_job.entry(id).or_default() += 1;
        if runs.get(&(id, attempt)).and_then(|r| r.1) != Some(true) {
            report.stale_completions.push((id, attempt));
        }
    }
    report.duplicate_completions = per_job.values().map(|n| i64::from(*n) - 1).sum();
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
            && self.stale_completions.is_empty();
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
                "  lost {:?} unexpected {:?} not terminal {:?} wrong state {:?} stale {:?}",
                first(&self.lost),
                first(&self.unexpected),
                first(&self.not_terminal),
                first(&self.wrong_state),
                first(&self.stale_completions)
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
