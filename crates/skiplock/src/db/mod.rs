//! The only user of `queries/`: every statement skiplock sends, rendered once per schema.
//!
//! Each file in `queries/` is one statement, named table + verb. `{schema}` in a file is
//! replaced by the validated, quoted schema name; full-line `--` comments are dropped so they
//! are not sent with every call. Parameters are always bound, never spliced.

pub(crate) mod health;
pub(crate) mod job;
pub(crate) mod lab;
pub(crate) mod maintenance;
pub(crate) mod migrate;
#[cfg(feature = "sqlx-0_8")]
pub(crate) mod sqlx;

use crate::schema::Schema;

/// A statement skiplock runs, for inspection ([`Client::statement`](crate::Client::statement))
/// and for `EXPLAIN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Statement {
    /// `queries/job_insert.sql`: enqueue one job.
    Insert,
    /// `queries/job_insert_many.sql`: enqueue many jobs in one statement.
    InsertMany,
    /// `queries/job_claim.sql`: claim ready jobs with a lease (`FOR UPDATE SKIP LOCKED`).
    Claim,
    /// `queries/job_complete.sql`: mark a job done, guarded by its attempt.
    Complete,
    /// `queries/job_fail.sql`: record a failure, with backoff or for good, guarded.
    Fail,
    /// `queries/job_extend.sql`: renew a lease, guarded.
    Extend,
    /// `queries/job_reap.sql`: return expired leases to the queue.
    Reap,
    /// `queries/job_get.sql`: one job by id.
    Get,
    /// `queries/lab_claim_naive.sql`: the article's wrong claim (lab only).
    LabClaimNaive,
    /// `queries/lab_claim_for_update.sql`: `FOR UPDATE` without `SKIP LOCKED` (lab only).
    LabClaimForUpdate,
    /// `queries/lab_claim_skip_locked_done.sql`: the right claim, done at once (lab only).
    LabClaimSkipLockedDone,
}

macro_rules! templates {
    ($($field:ident => $file:literal),* $(,)?) => {
        /// Every statement, rendered for one schema.
        #[derive(Debug, Clone)]
        pub(crate) struct Sql {
            $(pub $field: String,)*
        }

        impl Sql {
            pub(crate) fn new(schema: &Schema) -> Self {
                Sql {
                    $($field: render(include_str!(concat!("../../queries/", $file)), schema),)*
                }
            }
        }
    };
}

templates! {
    insert => "job_insert.sql",
    insert_many => "job_insert_many.sql",
    claim => "job_claim.sql",
    complete => "job_complete.sql",
    fail => "job_fail.sql",
    extend => "job_extend.sql",
    reap => "job_reap.sql",
    get => "job_get.sql",
    finish_many => "job_finish_many.sql",
    extend_many => "job_extend_many.sql",
    next_run_at => "job_next_run_at.sql",
    reaper_try_lock => "reaper_try_lock.sql",
    retry => "job_retry.sql",
    cancel => "job_cancel.sql",
    delete => "job_delete.sql",
    states => "job_states.sql",
    prune => "job_prune.sql",
    archive => "job_archive.sql",
    lock_acquire => "lock_acquire.sql",
    lock_release => "lock_release.sql",
    health_queues => "health_queues.sql",
    health_table => "health_table.sql",
    health_blockers => "health_blockers.sql",
    lab_claim_naive => "lab_claim_naive.sql",
    lab_claim_for_update => "lab_claim_for_update.sql",
    lab_status => "lab_status.sql",
    lab_claim_skip_locked_done => "lab_claim_skip_locked_done.sql",
    lab_audit_install => "lab_audit_install.sql",
    lab_audit_count => "lab_audit_count.sql",
    bench_fill_history => "bench_fill_history.sql",
    bench_counters => "bench_counters.sql",
    bench_vacuum => "bench_vacuum.sql",
    server_version => "server_version.sql",
    schema_lock => "schema_lock.sql",
    schema_unlimit => "schema_unlimit.sql",
    schema_bootstrap => "schema_bootstrap.sql",
    schema_exists => "schema_exists.sql",
    schema_version => "schema_version.sql",
    schema_record => "schema_record.sql",
    schema_drop => "schema_drop.sql",
}

impl Sql {
    pub(crate) fn get(&self, s: Statement) -> &str {
        match s {
            Statement::Insert => &self.insert,
            Statement::InsertMany => &self.insert_many,
            Statement::Claim => &self.claim,
            Statement::Complete => &self.complete,
            Statement::Fail => &self.fail,
            Statement::Extend => &self.extend,
            Statement::Reap => &self.reap,
            Statement::Get => &self.get,
            Statement::LabClaimNaive => &self.lab_claim_naive,
            Statement::LabClaimForUpdate => &self.lab_claim_for_update,
            Statement::LabClaimSkipLockedDone => &self.lab_claim_skip_locked_done,
        }
    }
}

/// Fills in the schema and drops full-line comments and blank lines.
pub(crate) fn render(template: &str, schema: &Schema) -> String {
    template
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.is_empty() && !t.starts_with("--")
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace("{schema}", schema.quoted())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_quoted_schema_without_comments() {
        let sql = Sql::new(&Schema::new("My-App").unwrap());
        assert!(sql.claim.contains("FROM \"My-App\".jobs"));
        assert!(sql.claim.contains("FOR UPDATE SKIP LOCKED"));
        assert!(!sql.claim.contains("--"));
        assert!(!sql.claim.contains("{schema}"));
    }
}
