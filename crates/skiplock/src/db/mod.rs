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
    /// `queries/job_finish_many.sql`: write many outcomes (done, retry, discard, requeue),
    /// each guarded by its claim's attempt; the worker's completer and
    /// [`Client::complete`](crate::Client::complete) / [`Client::fail`](crate::Client::fail)
    /// (a batch of one). One result row per input: written, lost or busy.
    FinishMany,
    /// `queries/job_extend_many.sql`: renew many leases, guarded like
    /// [`Statement::FinishMany`]; the worker's heartbeat and
    /// [`Client::extend`](crate::Client::extend). One result row per input: renewed, lost
    /// or busy.
    ExtendMany,
    /// `queries/job_reap.sql`: one reaper round: expired leases back to the queue (or
    /// failed), queued jobs with no attempt left to failed; `$1` rows of each at most.
    Reap,
    /// `queries/job_cancel.sql`: cancel jobs by id (notifies `cancel:<id>` for running ones).
    Cancel,
    /// `queries/job_retry.sql`: make jobs ready again by id.
    Retry,
    /// `queries/job_delete.sql`: delete jobs that are not running, by id.
    Delete,
    /// `queries/job_prune.sql`: delete one batch of finished jobs.
    Prune,
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
                Self::render_all(schema, Fence::On)
            }

            /// Every statement with the attempt part of its guard (lines marked `-- fence`)
            /// left out: a negative control for tests, see
            /// [`ClientBuilder::unfenced_for_negative_control`](crate::ClientBuilder::unfenced_for_negative_control).
            pub(crate) fn unfenced(schema: &Schema) -> Self {
                Self::render_all(schema, Fence::Off)
            }

            fn render_all(schema: &Schema, fence: Fence) -> Self {
                Sql {
                    $($field: render_with(include_str!(concat!("../../queries/", $file)), schema, fence),)*
                }
            }
        }
    };
}

templates! {
    insert => "job_insert.sql",
    insert_many => "job_insert_many.sql",
    claim => "job_claim.sql",
    reap => "job_reap.sql",
    get => "job_get.sql",
    finish_many => "job_finish_many.sql",
    extend_many => "job_extend_many.sql",
    next_run_at => "job_next_run_at.sql",
    listen_probe => "listen_probe.sql",
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
    bench_freeze_statistics => "bench_freeze_statistics.sql",
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
            Statement::FinishMany => &self.finish_many,
            Statement::ExtendMany => &self.extend_many,
            Statement::Reap => &self.reap,
            Statement::Cancel => &self.cancel,
            Statement::Retry => &self.retry,
            Statement::Delete => &self.delete,
            Statement::Prune => &self.prune,
            Statement::Get => &self.get,
            Statement::LabClaimNaive => &self.lab_claim_naive,
            Statement::LabClaimForUpdate => &self.lab_claim_for_update,
            Statement::LabClaimSkipLockedDone => &self.lab_claim_skip_locked_done,
        }
    }
}

/// Whether the attempt part of the guards is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fence {
    On,
    Off,
}

/// The marker that ends a line holding the attempt part of a guard.
const FENCE_MARK: &str = "-- fence";

/// Fills in the schema and drops full-line comments and blank lines.
pub(crate) fn render(template: &str, schema: &Schema) -> String {
    render_with(template, schema, Fence::On)
}

/// [`render`], and `{channel}` becomes the schema's notification channel as a string literal
/// (safe: a validated schema name holds no quote). A line ending in `-- fence` is the
/// attempt part of a guard: kept (without the marker) normally, dropped with [`Fence::Off`].
fn render_with(template: &str, schema: &Schema, fence: Fence) -> String {
    template
        .lines()
        .filter_map(|l| {
            let t = l.trim_start();
            if t.is_empty() || t.starts_with("--") {
                return None;
            }
            match l.trim_end().strip_suffix(FENCE_MARK) {
                Some(_) if fence == Fence::Off => None,
                Some(kept) => Some(kept.trim_end()),
                None => Some(l),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace("{schema}", schema.quoted())
        .replace("{channel}", &format!("'{}'", schema.channel()))
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

    #[test]
    fn the_fence_is_kept_or_left_out_as_asked() {
        let schema = Schema::new("s").unwrap();
        let fenced = Sql::new(&schema);
        let unfenced = Sql::unfenced(&schema);
        for (a, b) in [
            (&fenced.finish_many, &unfenced.finish_many),
            (&fenced.extend_many, &unfenced.extend_many),
        ] {
            assert!(a.contains("attempts = o.attempt") && !a.contains(FENCE_MARK));
            assert!(!b.contains("attempts = o.attempt") && !b.contains(FENCE_MARK));
            assert!(b.contains("status = 'running'"));
        }
        assert_eq!(fenced.claim, unfenced.claim);
        assert!(fenced.cancel.contains("pg_notify('s.jobs', "));
    }
}
