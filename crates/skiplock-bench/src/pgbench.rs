//! The ceiling from a C client: `pgbench -M prepared` runs the worker's own claim
//! (`job_claim.sql`, as [`Client::statement`] renders it) followed by a fenced completion of
//! what it claimed, from 1 to 16 clients, each on a fresh table of pre-enqueued jobs. The
//! best rate of those runs is the most the server does for the work: the worker's figures are
//! shares of it. Each client count runs three scripts: the claim with the leanest fenced
//! completion, with the worker's `job_complete_many.sql`, and the worker's claim through a
//! backlog (the same claim in a transaction that first locks the queue's turn:
//! `job_claim_in_turn.sql`) with `job_complete_many.sql`; the best of them all is the
//! ceiling.
//!
//! pgbench's scripts are generated here from the statements themselves: the claim's
//! parameters become pgbench variables (`:queue`, `:batch`, `:lease`), and its rows are folded
//! into two arrays (`\gset` keeps one row) that the completion binds. The claim's CTE still
//! computes every column of every claimed row; only their transfer to the client is left out.
//!
//! [`Client::statement`]: skiplock::Client::statement

use std::path::{Path, PathBuf};

use skiplock::{Client, Schema};

use crate::bench::{Scratch, LEASE_US, QUEUE};
use crate::db::Statement;
use crate::error::{Error, Result};

/// The environment variable naming the `pgbench` program to run.
pub const PGBENCH_ENV: &str = "SKIPLOCK_PGBENCH";

/// Which completion follows the claim in a pgbench ceiling run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Completion {
    /// The leanest fenced completion: one `UPDATE … FROM unnest(ids, attempts)` guarded by
    /// `status = 'running'` and the attempt (`bench_complete_lean.sql`).
    Lean,
    /// The worker's own statement for successes, `job_complete_many.sql`.
    Worker,
    /// The worker's claim through a backlog after a wait for its turn (`job_claim.sql` in a
    /// transaction that first locks the queue's turn, `job_claim_in_turn.sql`, migration
    /// 24), then `job_complete_many.sql`; each claim takes up to what the worker's takes
    /// after a wait by default (migration 19, `WorkerConfig::claim_batch_waited`: four times
    /// the batch).
    InTurn,
    /// The same, with each claim in turn taking up to twice the batch: a
    /// setting beside the worker's default, so that the ceiling is the server's best for
    /// the claims in turn whichever of the two suits it.
    InTurnDouble,
    /// The worker's claim, then `job_complete_delete_many.sql`: the completion of a worker
    /// with `delete_done`, which deletes the jobs instead of keeping them. Measured beside
    /// the others, never the ceiling of the worker's default points (which keep them).
    Deleting,
}

impl Completion {
    /// How the completion is named in the report.
    pub fn label(self) -> &'static str {
        match self {
            Completion::Lean => "leanest fenced UPDATE",
            Completion::Worker => "the worker's job_complete_many.sql",
            Completion::InTurn => "job_complete_many.sql after the claim in turn",
            Completion::InTurnDouble => {
                "job_complete_many.sql after the claim in turn (twice the batch after a wait)"
            }
            Completion::Deleting => "job_complete_delete_many.sql (completed jobs deleted)",
        }
    }

    /// The completion's short name in JSON points.
    pub fn name(self) -> &'static str {
        match self {
            Completion::Lean => "lean",
            Completion::Worker => "worker",
            Completion::InTurn => "worker-in-turn",
            Completion::InTurnDouble => "worker-in-turn-double",
            Completion::Deleting => "worker-delete",
        }
    }
}

/// One pgbench ceiling run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PgbenchPoint {
    /// pgbench clients (connections), each claiming and completing back to back.
    pub clients: usize,
    /// The completion after each claim.
    pub completion: Completion,
    /// Jobs per claim.
    pub batch: u32,
    /// Jobs done.
    pub jobs: usize,
    /// Jobs still running at the end (claimed, but their completion wrote nothing): 0 for
    /// completions that wait for a row another session holds.
    pub left_running: usize,
    /// Jobs done per second, by pgbench's own clock (connection time excluded).
    pub jobs_per_s: f64,
    /// The CPU of the run: pgbench's (a child of this process) and the machine's (`None`
    /// where it cannot be read).
    pub cpu: Option<crate::cpu::CpuSplit>,
}

/// The `pgbench` to run: [`PGBENCH_ENV`], else the one beside the PostgreSQL server binaries
/// (`SKIPLOCK_PG_BIN`, `PATH`, `pg_config --bindir`, the newest Debian package), else `None`.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(PGBENCH_ENV) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("SKIPLOCK_PG_BIN") {
        dirs.push(PathBuf::from(d));
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    if let Ok(out) = std::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
    {
        if out.status.success() {
            dirs.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
        }
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((major, e.path().join("bin")))
        })
        .collect();
    debian.sort();
    dirs.extend(debian.into_iter().rev().map(|(_, d)| d));
    dirs.into_iter()
        .map(|d| d.join("pgbench"))
        .find(|p| p.is_file())
}

/// The claim in turn as the worker makes it after a wait for its turn, rendered for
/// `client`'s schema, as pgbench commands that store the claimed ids and attempts in `:ids`
/// and `:att`: `job_claim_in_turn.sql` (BEGIN, and LOCK of the bench queue's turn, waiting
/// for it), `job_claim.sql` of up to `:batch_waited`, and `job_claim_turn_end.sql` (COMMIT).
/// pgbench cannot first try the turn without waiting, as the worker does, and take `:batch`
/// when it finds it free: every claim here takes the larger batch.
fn claim_in_turn_command(client: &Client) -> Result<String> {
    let turn = client.statement(skiplock::Statement::ClaimInTurn);
    if !turn.contains("{turn}") || !turn.contains("LOCK TABLE") {
        return Err(Error::refused(
            "job_claim_in_turn.sql no longer locks claim_turn_{turn}: the pgbench script \
             cannot wrap it (see the bench's pgbench module)",
        ));
    }
    let turn = turn.replace("{turn}", &skiplock::claim_turn(QUEUE).to_string());
    let claim = claim_command(client)?.replace(":batch", ":batch_waited");
    let end = client.statement(skiplock::Statement::ClaimTurnEnd);
    Ok(format!("{turn};\n{claim}{end};\n"))
}

/// The claim, rendered for `client`'s schema, as a pgbench command that stores the claimed
/// ids and attempts in `:ids` and `:att`.
fn claim_command(client: &Client) -> Result<String> {
    const TAIL: &str = "\nSELECT * FROM claimed\nUNION ALL\n";
    let claim = client.statement(skiplock::Statement::Claim);
    if !claim.contains(TAIL) || claim.contains("$7") {
        return Err(Error::refused(
            "job_claim.sql no longer ends with `SELECT * FROM claimed UNION ALL …` over six \
             parameters: the pgbench script cannot wrap it (see the bench's pgbench module)",
        ));
    }
    // From the front of the queue, as the worker claims unless that has become slow.
    let claim = claim
        .replace("$1", ":queue")
        .replace("$2", ":batch")
        .replace("$3", ":lease")
        .replace("$4", "(-32768)")
        .replace("$5", "NULL")
        .replace("$6", "(-9223372036854775808)")
        .replacen(TAIL, "\n, got AS (SELECT * FROM claimed\nUNION ALL\n", 1);
    Ok(format!(
        "{claim}\n)\nSELECT coalesce(array_agg(id ORDER BY id), '{{}}')::text AS ids,\n       \
         coalesce(array_agg(attempts ORDER BY id), '{{}}')::text AS att\nFROM got\n\\gset\n"
    ))
}

/// `job_complete_many.sql`'s own bound on its wait for a row another session holds.
const COMPLETE_MANY_LOCK_TIMEOUT: &str = "set_config('lock_timeout', '500ms', true)";
/// The bound in pgbench's copy of it.
const PGBENCH_LOCK_TIMEOUT: &str = "set_config('lock_timeout', '10s', true)";

/// The completion of `:ids` at `:att`, as a pgbench command. In `job_complete_many.sql` the
/// wait for a row another session holds (a claim whose scan met it keeps it until that claim
/// commits) is bounded by 500 ms, past which the worker writes the batch through
/// `job_finish_many.sql` instead. pgbench cannot fall back, and a failed statement aborts
/// its run: its copy waits up to 10 s, the same rows written.
fn completion_command(client: &Client, schema: &Schema, completion: Completion) -> Result<String> {
    let sql = match completion {
        Completion::Lean => Statement::BenchCompleteLean.sql(schema),
        Completion::Worker
        | Completion::InTurn
        | Completion::InTurnDouble
        | Completion::Deleting => {
            let sql = client.statement(if completion == Completion::Deleting {
                skiplock::Statement::CompleteDeleteMany
            } else {
                skiplock::Statement::CompleteMany
            });
            if !sql.contains(COMPLETE_MANY_LOCK_TIMEOUT) {
                return Err(Error::refused(
                    "job_complete_many.sql or job_complete_delete_many.sql no longer sets \
                     its lock_timeout to 500ms: the pgbench script cannot lengthen it (see \
                     the bench's pgbench module)",
                ));
            }
            sql.replace(COMPLETE_MANY_LOCK_TIMEOUT, PGBENCH_LOCK_TIMEOUT)
                .replace("$3", "NULL")
        }
    };
    Ok(format!(
        "{};\n",
        sql.replace("$1", ":ids").replace("$2", ":att")
    ))
}

/// The whole script: the claim of `batch` with the worker's lease, then the completion. A
/// claim in turn that waits for its turn takes up to what the worker's would with
/// `max_claim_batch` = `batch` (`WorkerConfig::claim_batch_waited`: four times `batch`), or
/// twice `batch` ([`Completion::InTurnDouble`]).
pub(crate) fn script(client: &Client, batch: u32, completion: Completion) -> Result<String> {
    let schema = client.schema();
    let waited = waited_batch(batch, completion);
    Ok(format!(
        "\\set batch {batch}\n\\set batch_waited {waited}\n\\set lease {LEASE_US}\n{}{}",
        if matches!(completion, Completion::InTurn | Completion::InTurnDouble) {
            claim_in_turn_command(client)?
        } else {
            claim_command(client)?
        },
        completion_command(client, schema, completion)?
    ))
}

/// The most a claim in turn of `completion`'s script takes after waiting for its turn.
pub fn waited_batch(batch: u32, completion: Completion) -> u32 {
    if completion == Completion::InTurnDouble {
        return batch.saturating_mul(2);
    }
    let mut config = skiplock::WorkerConfig::default();
    config.max_claim_batch = batch;
    config.claim_batch_waited()
}

/// pgbench's rate without connection time (`tps = N (without initial connection time)`,
/// or `(excluding connections establishing)` before PostgreSQL 14).
fn parse_tps(out: &str) -> Option<f64> {
    out.lines()
        .filter(|l| l.starts_with("tps = "))
        .find(|l| l.contains("without initial") || l.contains("excluding"))
        .and_then(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// One pgbench ceiling run: `jobs` no-op jobs on a fresh scratch table, `clients` pgbench
/// clients claiming `batch` and completing them with `completion` until each has run its
/// share of claims (one more than the queue needs, so that it drains).
pub async fn ceiling(
    pgbench: &Path,
    url: &str,
    base: &str,
    jobs: usize,
    batch: u32,
    clients: usize,
    completion: Completion,
) -> Result<PgbenchPoint> {
    let clients = clients.max(1);
    let s = Scratch::new(url, base, "pgb", 2).await?;
    s.fill(jobs).await?;
    let script = script(&s.client, batch, completion)?;
    let file = std::env::temp_dir().join(format!(
        "skiplock-bench-{}-{}.pgbench",
        std::process::id(),
        s.client.schema().name()
    ));
    std::fs::write(&file, script).map_err(Error::process(format!(
        "cannot write the pgbench script {}",
        file.display()
    )))?;
    let per_client = jobs.div_ceil(usize::try_from(batch.max(1)).unwrap_or(1) * clients) + 1;
    let threads = clients.min(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut cmd = std::process::Command::new(pgbench);
    cmd.args(["-n", "-M", "prepared"])
        .arg(format!("-c{clients}"))
        .arg(format!("-j{threads}"))
        .arg(format!("-t{per_client}"))
        .arg(format!("-Dqueue={QUEUE}"))
        .arg("-f")
        .arg(&file)
        .arg(url);
    let what = format!("pgbench ({})", pgbench.display());
    let cpu_before = crate::cpu::Sample::now();
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .map_err(Error::task("pgbench"))?
        .map_err(Error::process(format!("cannot start {what}")));
    let cpu = cpu_before.and_then(|b| crate::cpu::Sample::now()?.since(&b));
    let _ = std::fs::remove_file(&file);
    let out = out?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        s.drop_now().await?;
        return Err(Error::Process {
            what: format!(
                "pgbench ended with {}: {}",
                out.status,
                // The statement's error, where pgbench printed one, else its last line.
                stderr
                    .lines()
                    .find(|l| l.contains("ERROR:"))
                    .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
                    .unwrap_or("")
            ),
            source: None,
        });
    }
    let tps = parse_tps(&stdout).ok_or_else(|| Error::Incomplete {
        what: format!("pgbench printed no rate: {}", stdout.trim()),
    })?;
    let (kept_done, running, rows) = s.status_counts().await?;
    // A deleting completion leaves no row for what it completed.
    let done = if completion == Completion::Deleting {
        jobs.saturating_sub(rows)
    } else {
        kept_done
    };
    s.drop_now().await?;
    let transactions = (clients * per_client) as f64;
    Ok(PgbenchPoint {
        clients,
        completion,
        batch,
        jobs: done,
        left_running: running,
        jobs_per_s: tps * done as f64 / transactions,
        cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worker's completion in the scripts is `job_complete_many.sql` with only its lock
    /// bound lengthened; the lean script keeps its own statement.
    #[test]
    fn the_scripts_complete_with_the_worker_statement_and_a_longer_lock_bound() {
        let client = Client::builder("postgres://nobody@127.0.0.1:1/none")
            .schema("bench_script_test")
            .build()
            .expect("a client is built without connecting");
        let worker = client.statement(skiplock::Statement::CompleteMany);
        assert!(worker.contains(COMPLETE_MANY_LOCK_TIMEOUT), "{worker}");
        for completion in [
            Completion::Worker,
            Completion::InTurn,
            Completion::InTurnDouble,
        ] {
            let s = script(&client, 500, completion).expect("the script");
            assert!(!s.contains(COMPLETE_MANY_LOCK_TIMEOUT), "{s}");
            assert!(s.contains(PGBENCH_LOCK_TIMEOUT), "{s}");
            let expected = worker
                .replace(COMPLETE_MANY_LOCK_TIMEOUT, PGBENCH_LOCK_TIMEOUT)
                .replace("$3", "NULL")
                .replace("$1", ":ids")
                .replace("$2", ":att");
            assert!(s.ends_with(&format!("{expected};\n")), "{s}");
        }
        let deleting = client.statement(skiplock::Statement::CompleteDeleteMany);
        let s = script(&client, 500, Completion::Deleting).expect("the deleting script");
        let expected = deleting
            .replace(COMPLETE_MANY_LOCK_TIMEOUT, PGBENCH_LOCK_TIMEOUT)
            .replace("$3", "NULL")
            .replace("$1", ":ids")
            .replace("$2", ":att");
        assert!(s.ends_with(&format!("{expected};\n")), "{s}");
        let lean = script(&client, 500, Completion::Lean).expect("the lean script");
        assert!(!lean.contains(PGBENCH_LOCK_TIMEOUT), "{lean}");
    }

    #[test]
    fn the_rate_without_connection_time_is_read() {
        let new = "latency average = 1.2 ms\ninitial connection time = 3.1 ms\ntps = 812.5 (without initial connection time)\n";
        assert_eq!(parse_tps(new), Some(812.5));
        let old = "tps = 700.0 (including connections establishing)\ntps = 750.25 (excluding connections establishing)\n";
        assert_eq!(parse_tps(old), Some(750.25));
        assert_eq!(parse_tps("nothing"), None);
    }
}
