//! The only user of `queries/`: the lab's and the benchmarks' statements, rendered for one
//! schema, and the calls that bind and decode them (the lab's statements, and the queue's
//! own claim and finish, which are skiplock's).
//!
//! Each file in `queries/` is one statement, rendered by skiplock's own renderer
//! ([`Schema::render`]): `{schema}` in a file is replaced by the validated, quoted schema
//! name; full-line `--` comments and blank lines are dropped. Parameters are always bound,
//! never spliced.

use std::time::Duration;

use skiplock::Schema;
use tokio_postgres::types::Type;
use tokio_postgres::{Error, GenericClient};

macro_rules! statements {
    ($($variant:ident => $file:literal, $doc:literal,)*) => {
        /// A statement of the lab or the benchmarks: every file of this crate's `queries/`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Statement {
            $(#[doc = $doc] $variant,)*
        }

        impl Statement {
            /// Every statement, in the order above.
            pub const ALL: &'static [Statement] = &[$(Statement::$variant,)*];

            /// The file of `queries/` the statement comes from.
            pub fn file(self) -> &'static str {
                match self {
                    $(Statement::$variant => $file,)*
                }
            }

            fn template(self) -> &'static str {
                match self {
                    $(Statement::$variant => include_str!(concat!("../queries/", $file)),)*
                }
            }
        }
    };
}

statements! {
    LabClaimNaive => "lab_claim_naive.sql", "`queries/lab_claim_naive.sql`: the article's wrong claim.",
    LabClaimForUpdate => "lab_claim_for_update.sql", "`queries/lab_claim_for_update.sql`: `FOR UPDATE` without `SKIP LOCKED`.",
    LabClaimSkipLockedDone => "lab_claim_skip_locked_done.sql", "`queries/lab_claim_skip_locked_done.sql`: the right claim, done at once.",
    LabStatus => "lab_status.sql", "`queries/lab_status.sql`: jobs per status of one queue.",
    LabVacuum => "lab_vacuum.sql", "`queries/lab_vacuum.sql`: vacuum the jobs table before the vacuum experiment.",
    LabVacuumVerbose => "lab_vacuum_verbose.sql", "`queries/lab_vacuum_verbose.sql`: `VACUUM (VERBOSE)` of the jobs table, its report in notices.",
    LabAuditInstall => "lab_audit_install.sql", "`queries/lab_audit_install.sql`: a trigger recording every transition into `done` (the lab, the demo and the torture harness).",
    LabAuditCount => "lab_audit_count.sql", "`queries/lab_audit_count.sql`: the transitions recorded by [`Statement::LabAuditInstall`].",
    BenchFillHistory => "bench_fill_history.sql", "`queries/bench_fill_history.sql`: add finished jobs as kept history.",
    BenchCounters => "bench_counters.sql", "`queries/bench_counters.sql`: WAL position, transaction counts and dead tuples.",
    BenchVacuum => "bench_vacuum.sql", "`queries/bench_vacuum.sql`: vacuum and analyze the jobs table.",
    BenchFreezeStatistics => "bench_freeze_statistics.sql", "`queries/bench_freeze_statistics.sql`: turn autovacuum and autoanalyze off for the jobs table, so that its statistics stay as they were taken.",
    BenchCompleteLean => "bench_complete_lean.sql", "`queries/bench_complete_lean.sql`: the leanest fenced completion of a claimed batch (pgbench's ceiling).",
    BenchStatusCounts => "bench_status_counts.sql", "`queries/bench_status_counts.sql`: jobs done and jobs still running after a pgbench ceiling run.",
    BenchTruncate => "bench_truncate.sql", "`queries/bench_truncate.sql`: empty the jobs table and the workflow edges.",
    BenchCheckpoint => "bench_checkpoint.sql", "`queries/bench_checkpoint.sql`: a checkpoint before a run's table is filled, so that none begins while the run is timed.",
}

impl Statement {
    /// The statement as it is sent for `schema` ([`Schema::render`]): `{schema}` filled in
    /// with the quoted name, full-line comments and blank lines dropped.
    pub fn sql(self, schema: &Schema) -> String {
        schema.render(self.template())
    }
}

/// Runs one of the lab's claim statements; returns `(id, attempts)` of each job taken.
pub(crate) async fn claim_with<C: GenericClient + Sync>(
    c: &C,
    statement: &str,
    queue: &str,
    limit: i64,
) -> Result<Vec<(i64, i32)>, Error> {
    let rows = c
        .query_typed(statement, &[(&queue, Type::TEXT), (&limit, Type::INT8)])
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// `(status, count, max attempts)` for one queue.
pub(crate) async fn status<C: GenericClient + Sync>(
    c: &C,
    schema: &Schema,
    queue: &str,
) -> Result<Vec<(String, i64, i32)>, Error> {
    let rows = c
        .query_typed(&Statement::LabStatus.sql(schema), &[(&queue, Type::TEXT)])
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect()
}

/// Where a claim from the front of the queue starts (`$4, $5, $6` of `job_claim.sql`: the
/// least priority, `-infinity` as NULL, the least id): before every job.
pub(crate) const FRONT: (i16, Option<std::time::SystemTime>, i64) = (i16::MIN, None, i64::MIN);

/// The queue's own claim (`claim`: skiplock's [`Statement::Claim`](skiplock::Statement::Claim)
/// text), unnamed with its parameter types as the worker sends it, from the front of the
/// queue ([`FRONT`]); returns `(id, attempts)` of each job taken.
pub(crate) async fn claim<C: GenericClient + Sync>(
    c: &C,
    claim: &str,
    queue: &str,
    limit: i64,
    lease_us: i64,
) -> Result<Vec<(i64, i32)>, Error> {
    let rows = c
        .query_typed(
            claim,
            &[
                (&queue, Type::TEXT),
                (&limit, Type::INT8),
                (&lease_us, Type::INT8),
                (&FRONT.0, Type::INT2),
                (&FRONT.1, Type::TIMESTAMPTZ),
                (&FRONT.2, Type::INT8),
            ],
        )
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("id")?, r.try_get("attempts")?)))
        .collect()
}

/// Writes `complete` for each job of `jobs` (`(id, attempt)`) in one statement (`finish`:
/// skiplock's [`Statement::FinishMany`](skiplock::Statement::FinishMany) text); returns the
/// `result` of each (`written`, `lost` or `busy`), in no particular order.
pub(crate) async fn finish_complete<C: GenericClient + Sync>(
    c: &C,
    finish: &str,
    jobs: &[(i64, i32)],
) -> Result<Vec<String>, Error> {
    let ids: Vec<i64> = jobs.iter().map(|j| j.0).collect();
    let attempts: Vec<i32> = jobs.iter().map(|j| j.1).collect();
    let outcomes = vec!["complete"; jobs.len()];
    let errors = vec![""; jobs.len()];
    let zeros = vec![0i64; jobs.len()];
    let outputs: Vec<Option<&str>> = vec![None; jobs.len()];
    let rows = c
        .query_typed(
            finish,
            &[
                (&ids, Type::INT8_ARRAY),
                (&attempts, Type::INT4_ARRAY),
                (&outcomes, Type::TEXT_ARRAY),
                (&errors, Type::TEXT_ARRAY),
                (&zeros, Type::INT8_ARRAY),
                (&zeros, Type::INT8_ARRAY),
                (&zeros, Type::INT8_ARRAY),
                (&outputs, Type::TEXT_ARRAY),
            ],
        )
        .await?;
    rows.iter().map(|r| r.try_get("result")).collect()
}

/// Marks one job done with [`finish_complete`] (a batch of one). A busy row (a concurrent
/// claim's `FOR UPDATE` may hold it for a moment while it re-checks the row and skips it) is
/// tried again for up to about 5 s, then counts as not applied. Returns whether it was.
pub(crate) async fn complete<C: GenericClient + Sync>(
    c: &C,
    finish: &str,
    id: i64,
    attempt: i32,
) -> Result<bool, Error> {
    let mut wait = Duration::from_millis(1);
    for _ in 0..20 {
        match finish_complete(c, finish, &[(id, attempt)]).await?.first() {
            Some(r) if r == "written" => return Ok(true),
            Some(r) if r == "busy" => {}
            _ => return Ok(false),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_millis(500));
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_quoted_schema_without_comments() {
        let sql = Statement::LabClaimNaive.sql(&Schema::new("My-App").unwrap());
        assert!(sql.contains("FROM \"My-App\".jobs"));
        assert!(!sql.contains("--"));
        assert!(!sql.contains("{schema}"));
    }

    #[test]
    fn every_query_file_is_a_statement() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/queries");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".sql"))
            .collect();
        files.sort();
        let mut known: Vec<String> = Statement::ALL.iter().map(|s| s.file().to_owned()).collect();
        known.sort();
        assert_eq!(files, known);
    }
}
