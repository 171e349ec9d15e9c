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
pub(crate) mod schedule;
#[cfg(feature = "sqlx-0_8")]
pub(crate) mod sqlx;

use crate::schema::Schema;

macro_rules! templates {
    ($($variant:ident => $field:ident => $file:literal, $doc:literal,)*) => {
        /// A statement skiplock runs: every file of `queries/`, for inspection
        /// ([`Client::statement`](crate::Client::statement)) and for `EXPLAIN`.
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
        }

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

            pub(crate) fn get(&self, s: Statement) -> &str {
                match s {
                    $(Statement::$variant => &self.$field,)*
                }
            }
        }
    };
}

templates! {
    Insert => insert => "job_insert.sql", "`queries/job_insert.sql`: enqueue one job.",
    InsertMany => insert_many => "job_insert_many.sql", "`queries/job_insert_many.sql`: enqueue many jobs in one statement.",
    Claim => claim => "job_claim.sql", "`queries/job_claim.sql`: claim ready jobs with a lease (`FOR UPDATE SKIP LOCKED`).",
    Reap => reap => "job_reap.sql", "`queries/job_reap.sql`: one reaper round: expired leases back to the queue (or failed), queued jobs with no attempt left to failed; `$1` rows of each at most. The worker's reaper and [`Client::reap`](crate::Client::reap).",
    Get => get => "job_get.sql", "`queries/job_get.sql`: one job by id.",
    FinishMany => finish_many => "job_finish_many.sql", "`queries/job_finish_many.sql`: write many outcomes (complete, retry, discard, snooze, hand back), each guarded by its claim's attempt; the worker's completer and [`Client::complete`](crate::Client::complete) / [`Client::fail`](crate::Client::fail) (a batch of one). One result row per input: written, lost or busy.",
    ExtendMany => extend_many => "job_extend_many.sql", "`queries/job_extend_many.sql`: renew many leases, guarded like [`Statement::FinishMany`]; the worker's heartbeat and [`Client::extend`](crate::Client::extend). One result row per input: renewed, lost or busy.",
    NextRunAt => next_run_at => "job_next_run_at.sql", "`queries/job_next_run_at.sql`: how long until a queue's next queued job is due, by the database's clock; a worker asks after a short claim.",
    ListenProbe => listen_probe => "listen_probe.sql", "`queries/listen_probe.sql`: the LISTEN connection's self-test notification, sent from a pooled connection.",
    ReaperTryLock => reaper_try_lock => "reaper_try_lock.sql", "`queries/reaper_try_lock.sql`: the reaper's transaction-scoped advisory lock: one reaper at a time across processes.",
    Retry => retry => "job_retry.sql", "`queries/job_retry.sql`: make jobs ready again by id.",
    Cancel => cancel => "job_cancel.sql", "`queries/job_cancel.sql`: cancel jobs by id (notifies `cancel:<id>` for running ones).",
    Delete => delete => "job_delete.sql", "`queries/job_delete.sql`: delete jobs that are not running, by id.",
    States => states => "job_states.sql", "`queries/job_states.sql`: the state of each of some jobs, to explain what an admin call left alone.",
    Prune => prune => "job_prune.sql", "`queries/job_prune.sql`: delete one batch of finished jobs.",
    Archive => archive => "job_archive.sql", "`queries/job_archive.sql`: move one batch of finished jobs to `jobs_archive`.",
    DeadTuples => dead_tuples => "job_dead_tuples.sql", "`queries/job_dead_tuples.sql`: the jobs table's dead tuples from the statistics system, and whether this role may vacuum it (the worker's vacuum service).",
    Vacuum => vacuum => "job_vacuum.sql", "`queries/job_vacuum.sql`: `VACUUM (SKIP_LOCKED)` of the jobs table (the worker's vacuum service).",
    ScheduleUpsert => schedule_upsert => "schedule_upsert.sql", "`queries/schedule_upsert.sql`: add a schedule, or update its definition keeping its cursor ([`Client::add_schedule`](crate::Client::add_schedule)).",
    ScheduleList => schedule_list => "schedule_list.sql", "`queries/schedule_list.sql`: the schedules and the database's clock (the scheduler's read, [`Client::schedules`](crate::Client::schedules)).",
    ScheduleFire => schedule_fire => "schedule_fire.sql", "`queries/schedule_fire.sql`: advance a schedule's cursor and enqueue its due fires in one statement, guarded by the cursor's old value.",
    ScheduleRemove => schedule_remove => "schedule_remove.sql", "`queries/schedule_remove.sql`: remove a schedule.",
    SchedulePause => schedule_pause => "schedule_pause.sql", "`queries/schedule_pause.sql`: pause or resume a schedule (resuming moves its cursor to the present).",
    ScheduleRunNow => schedule_run_now => "schedule_run_now.sql", "`queries/schedule_run_now.sql`: enqueue one job from a schedule now, without touching its cursor.",
    ScheduleTryLock => schedule_try_lock => "schedule_try_lock.sql", "`queries/schedule_try_lock.sql`: the scheduler's transaction-scoped advisory lock: one round at a time across processes.",
    LockAcquire => lock_acquire => "lock_acquire.sql", "`queries/lock_acquire.sql`: take or renew a maintenance lock (a row, so that it works through PgBouncer).",
    LockRelease => lock_release => "lock_release.sql", "`queries/lock_release.sql`: release a maintenance lock.",
    HealthQueues => health_queues => "health_queues.sql", "`queries/health_queues.sql`: per queue and state: counts and the oldest ready job's age.",
    HealthTable => health_table => "health_table.sql", "`queries/health_table.sql`: the jobs table's live and dead tuples, last vacuums and size.",
    HealthBlockers => health_blockers => "health_blockers.sql", "`queries/health_blockers.sql`: sessions that hold back vacuum's horizon.",
    ServerVersion => server_version => "server_version.sql", "`queries/server_version.sql`: the server's version.",
    SchemaLock => schema_lock => "schema_lock.sql", "`queries/schema_lock.sql`: the migration's advisory lock (transaction-scoped).",
    SchemaUnlimit => schema_unlimit => "schema_unlimit.sql", "`queries/schema_unlimit.sql`: lift the statement and lock timeouts for the migration transaction.",
    SchemaBootstrap => schema_bootstrap => "schema_bootstrap.sql", "`queries/schema_bootstrap.sql`: create the schema and its migrations table.",
    SchemaExists => schema_exists => "schema_exists.sql", "`queries/schema_exists.sql`: whether the migrations table exists (from the catalog).",
    SchemaVersion => schema_version => "schema_version.sql", "`queries/schema_version.sql`: the highest applied migration.",
    SchemaRecord => schema_record => "schema_record.sql", "`queries/schema_record.sql`: record one applied migration.",
    SchemaDrop => schema_drop => "schema_drop.sql", "`queries/schema_drop.sql`: drop the schema and everything in it (scratch schemas).",
    LabClaimNaive => lab_claim_naive => "lab_claim_naive.sql", "`queries/lab_claim_naive.sql`: the article's wrong claim (lab only).",
    LabClaimForUpdate => lab_claim_for_update => "lab_claim_for_update.sql", "`queries/lab_claim_for_update.sql`: `FOR UPDATE` without `SKIP LOCKED` (lab only).",
    LabClaimSkipLockedDone => lab_claim_skip_locked_done => "lab_claim_skip_locked_done.sql", "`queries/lab_claim_skip_locked_done.sql`: the right claim, done at once (lab only).",
    LabStatus => lab_status => "lab_status.sql", "`queries/lab_status.sql`: jobs per status of one queue (lab only).",
    LabAuditInstall => lab_audit_install => "lab_audit_install.sql", "`queries/lab_audit_install.sql`: a trigger recording every transition into `done` (lab and demo only).",
    LabAuditCount => lab_audit_count => "lab_audit_count.sql", "`queries/lab_audit_count.sql`: the transitions recorded by [`Statement::LabAuditInstall`] (lab and demo only).",
    BenchFillHistory => bench_fill_history => "bench_fill_history.sql", "`queries/bench_fill_history.sql`: add finished jobs as kept history (benchmarks only).",
    BenchCounters => bench_counters => "bench_counters.sql", "`queries/bench_counters.sql`: WAL position, transaction counts and dead tuples (benchmarks only).",
    BenchVacuum => bench_vacuum => "bench_vacuum.sql", "`queries/bench_vacuum.sql`: vacuum and analyze the jobs table (benchmarks only).",
    BenchFreezeStatistics => bench_freeze_statistics => "bench_freeze_statistics.sql", "`queries/bench_freeze_statistics.sql`: turn autovacuum and autoanalyze off for the jobs table, so that its statistics stay as they were taken (benchmarks only).",
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
