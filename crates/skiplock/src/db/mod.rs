//! The only user of `queries/`: every statement skiplock sends, rendered once per schema.
//!
//! Each file in `queries/` is one statement, named table + verb. `{schema}` in a file is
//! replaced by the validated, quoted schema name; full-line `--` comments are dropped so they
//! are not sent with every call. Parameters are always bound, never spliced.
//!
//! [`Store`] runs them: one method per statement the runtime sends, named after its file
//! (`job_claim` runs `job_claim.sql`). Each method takes the connection it runs on, names
//! its operation in its error ([`Error::Database`], [`Error::Sqlx`], or [`Error::Decode`]
//! for a value it cannot read) and returns typed rows. The subjects' files (`job.rs`,
//! `schema.rs`, `maintenance.rs`, `health.rs`, `server.rs`) each add their methods.

pub(crate) mod health;
pub(crate) mod job;
pub(crate) mod maintenance;
pub(crate) mod queue;
pub(crate) mod schedule;
pub(crate) mod schema;
pub(crate) mod server;
#[cfg(feature = "sqlx-0_8")]
pub(crate) mod sqlx;
#[cfg(feature = "testing")]
pub(crate) mod testing;
pub(crate) mod unique;
pub(crate) mod worker;
pub(crate) mod write;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error as PgError, GenericClient, Row};

use crate::error::Error;
use crate::schema::Schema;

/// Every statement skiplock runs for one schema, as methods (see the module docs).
///
/// Cheap to share: the client holds one, and its clones share it.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    sql: Sql,
    /// Whether the hot-path statements on a pooled connection are named prepared
    /// statements, cached on that connection.
    prepared: bool,
}

/// For the hot-path statements: a pooled connection whose statement cache to use (named
/// prepared statements, parsed and planned once per connection), or `None` for unnamed
/// statements (one round trip, PgBouncer-safe).
pub(crate) type Cache<'a> = Option<&'a deadpool_postgres::ClientWrapper>;

/// The positions of `names` among a result's columns, found once for all its rows (the
/// rows of one result share their columns): `Row::try_get` with a name searches the columns
/// again for every field of every row, a claim's row having every column of the table.
/// `None` if one is missing; the caller then reads by name, for the error that names it.
pub(crate) fn positions<const N: usize>(row: &Row, names: [&str; N]) -> Option<[usize; N]> {
    let columns = row.columns();
    let mut out = [0; N];
    for (at, name) in out.iter_mut().zip(names) {
        *at = columns.iter().position(|c| c.name() == name)?;
    }
    Some(out)
}

pub(crate) async fn rows<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    statement: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, PgError> {
    match cache {
        Some(w) => {
            let types: Vec<Type> = params.iter().map(|p| p.1.clone()).collect();
            let prepared = w.prepare_typed_cached(statement, &types).await?;
            let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.0).collect();
            w.query(&prepared, &values).await
        }
        None => c.query_typed(statement, params).await,
    }
}

impl Store {
    /// Runs `sql` ([`Sql::new`], or [`Sql::unfenced`] for a negative control), with
    /// prepared statements for the hot path on a pooled connection if `prepared`.
    pub(crate) fn new(sql: Sql, prepared: bool) -> Store {
        Store { sql, prepared }
    }

    /// The rendered statements, for the code that still binds some itself (the benchmark,
    /// the lab, the pruner).
    pub(crate) fn sql(&self) -> &Sql {
        &self.sql
    }

    /// The statement cache of `conn` when prepared statements are on.
    fn cache<'a>(&self, conn: &'a deadpool_postgres::Object) -> Cache<'a> {
        self.prepared.then_some(&**conn)
    }
}

/// Runs one statement through a caller's [`Conn`](crate::caller_tx::Conn): `$tokio` with
/// `$c` bound to the tokio-postgres client or transaction, or `$sqlx` with `$c` bound to
/// the sqlx connection; either error becomes `$op`'s.
macro_rules! on_conn {
    ($conn:expr, $op:expr, |$c:ident| $tokio:expr, sqlx: $sqlx:expr $(,)?) => {
        match $conn {
            $crate::caller_tx::Conn::TokioClient($c) => {
                $tokio.await.map_err($crate::error::Error::db($op))
            }
            $crate::caller_tx::Conn::TokioTx($c) => {
                $tokio.await.map_err($crate::error::Error::db($op))
            }
            #[cfg(feature = "sqlx-0_8")]
            $crate::caller_tx::Conn::Sqlx($c) => {
                $sqlx.await.map_err($crate::error::Error::sqlx($op))
            }
        }
    };
}
pub(crate) use on_conn;

/// A job status read from the database as a [`JobState`](crate::job::JobState); any other
/// text is an [`Error::Decode`] for `op`.
pub(crate) fn job_state(op: &'static str, status: &str) -> Result<crate::job::JobState, Error> {
    crate::job::JobState::parse(status).ok_or_else(|| Error::Decode {
        op,
        detail: format!("unknown job status {status:?}"),
    })
}

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
    InsertUnique => insert_unique => "job_insert_unique.sql", "`queries/job_insert_unique.sql`: enqueue jobs that carry a uniqueness rule (`INSERT … ON CONFLICT DO NOTHING` on the unique key); one row per job: its key and the id inserted, if any.",
    UniqueReplace => unique_replace => "job_unique_replace.sql", "`queries/job_unique_replace.sql`: give the queued job of each unique key a new payload (and run_at): the debounce and throttle conflict modes.",
    UniqueLookup => unique_lookup => "job_unique_lookup.sql", "`queries/job_unique_lookup.sql`: the active job holding each unique key (the duplicate a unique enqueue skipped).",
    Claim => claim => "job_claim.sql", "`queries/job_claim.sql`: claim ready jobs with a lease (`FOR UPDATE SKIP LOCKED`).",
    ClaimInTurn => claim_in_turn => "job_claim_in_turn.sql", "`queries/job_claim_in_turn.sql`: the turn of a claim in turn, waited for up to 2 s: `BEGIN` and `LOCK` of the queue's turn (`claim_turn_{turn}`, `{turn}` being [`claim_turn`](crate::claim_turn) of the queue; migration 24), which takes no snapshot. The worker's claim while its last one came back full ([`WorkerConfig::claim_in_turn`](crate::WorkerConfig::claim_in_turn)) sends it (after [`Statement::ClaimTurnTry`] found the turn taken), then [`Statement::Claim`], then [`Statement::ClaimTurnEnd`], in one round trip, so that claims working through one queue's backlog take turns on its front.",
    ClaimTurnTry => claim_turn_try => "job_claim_turn_try.sql", "`queries/job_claim_turn_try.sql`: the turn of a claim in turn, tried without waiting (`LOCK … NOWAIT`): [`Statement::ClaimInTurn`]'s first attempt.",
    ClaimTurnEnd => claim_turn_end => "job_claim_turn_end.sql", "`queries/job_claim_turn_end.sql`: `COMMIT` of a claim in turn, which releases the turn.",
    Reap => reap => "job_reap.sql", "`queries/job_reap.sql`: one reaper round: expired leases back to the queue (or failed), queued jobs with no attempt left to failed, the ended leases of cancelled jobs released; `$1` rows of each at most. The worker's reaper and [`Client::reap`](crate::Client::reap).",
    Get => get => "job_get.sql", "`queries/job_get.sql`: one job by id.",
    ClaimById => claim_by_id => "job_claim_by_id.sql", "`queries/job_claim_by_id.sql`: claim one given job with a lease, whatever its run_at (`testing::run_job`, with the `testing` feature).",
    CompleteTx => complete_tx => "job_complete_tx.sql", "`queries/job_complete_tx.sql`: complete one job inside the caller's own transaction, guarded by its claim's attempt ([`JobContext::complete_tx`](crate::JobContext::complete_tx)).",
    EnqueueWorkflow => enqueue_workflow => "job_enqueue_workflow.sql", "`queries/job_enqueue_workflow.sql`: enqueue a workflow (jobs with refs and dependencies among them) through the SQL function `enqueue_workflow()` ([`Client::enqueue_workflow`](crate::Client::enqueue_workflow)).",
    Family => family => "job_family.sql", "`queries/job_family.sql`: the jobs a job waits for and the jobs that wait for it, with their states ([`Client::family`](crate::Client::family)).",
    ChildrenCount => children_count => "job_children_count.sql", "`queries/job_children_count.sql`: how many jobs wait for a job, and how many still wait.",
    ParentOutputs => parent_outputs => "job_parent_outputs.sql", "`queries/job_parent_outputs.sql`: the outputs of the jobs a job waits for ([`JobContext::parent_outputs`](crate::JobContext::parent_outputs)).",
    JobsList => jobs_list => "jobs_list.sql", "`queries/jobs_list.sql`: the jobs matching some filters (stored statuses, display states, queue, kind, id range, age), newest first, a page of at most `$10` below the cursor `$7` (`skiplock jobs`).",
    JobsMatch => jobs_match => "jobs_match.sql", "`queries/jobs_match.sql`: the ids of the jobs matching [`Statement::JobsList`]'s filters (the same parameters, FROM and WHERE), newest first, at most `$10` below the cursor `$7` (`skiplock retry`, `cancel` and `delete` with a filter).",
    JobsIdBounds => jobs_id_bounds => "jobs_id_bounds.sql", "`queries/jobs_id_bounds.sql`: the lowest and highest job ids, where the walk of [`Statement::JobsMatch`] by windows of ids starts and ends.",
    Find => find => "job_find.sql", "`queries/job_find.sql`: the jobs in some states matching a kind, a queue and a JSON subset of the payload (`@>`), oldest first (`testing::enqueued`, with the `testing` feature).",
    FinishMany => finish_many => "job_finish_many.sql", "`queries/job_finish_many.sql`: write many outcomes (complete, retry, discard, snooze, hand back), each guarded by its claim's attempt; the worker's completer and [`Client::complete`](crate::Client::complete) / [`Client::fail`](crate::Client::fail) (a batch of one). One result row per input: written, lost or busy.",
    CompleteMany => complete_many => "job_complete_many.sql", "`queries/job_complete_many.sql`: complete many jobs, each guarded by its claim's attempt, waiting for a row another session holds (in id order) instead of skipping it; the worker's completer for the outcomes that are successes. One result row whatever the batch: `n`, the 1-based positions of the elements written.",
    CompleteDeleteMany => complete_delete_many => "job_complete_delete_many.sql", "`queries/job_complete_delete_many.sql`: [`Statement::CompleteMany`], deleting each completed job that has no output and is in no workflow instead of keeping it as done, and counting the deletions per queue and minute (the worker's completer with [`WorkerConfig::delete_done`](crate::WorkerConfig::delete_done)). One result row whatever the batch: `n`, the 1-based positions of the elements written.",
    ExtendMany => extend_many => "job_extend_many.sql", "`queries/job_extend_many.sql`: renew many leases, guarded like [`Statement::FinishMany`]; the worker's heartbeat and [`Client::extend`](crate::Client::extend). One result row per input: renewed, lost or busy.",
    NextRunAt => next_run_at => "job_next_run_at.sql", "`queries/job_next_run_at.sql`: how long until a queue's next queued job is due, by the database's clock; a worker asks after a short claim.",
    QueuePause => queue_pause => "queue_pause.sql", "`queries/queue_pause.sql`: pause a queue for every worker (see [`Client::pause_queue`](crate::Client::pause_queue)).",
    QueueResume => queue_resume => "queue_resume.sql", "`queries/queue_resume.sql`: resume a paused queue (see [`Client::resume_queue`](crate::Client::resume_queue)).",
    QueueList => queue_list => "queue_list.sql", "`queries/queue_list.sql`: every queue's pause and its queued, ready and running jobs (see [`Client::queues`](crate::Client::queues)).",
    QueueLimit => queue_limit => "queue_limit.sql", "`queries/queue_limit.sql`: set a queue's limits: concurrency, per key, rate (see [`Client::set_queue_limits`](crate::Client::set_queue_limits)).",
    QueueFlags => queue_flags => "queue_flags.sql", "`queries/queue_flags.sql`: whether a queue is paused and why its last limited claim left jobs behind, from its `queues` row alone (see [`Client::queue_paused`](crate::Client::queue_paused)).",
    QueueKnown => queue_known => "queue_known.sql", "`queries/queue_known.sql`: whether a `queues` row or a queued or running job names a queue, by index probes (see [`Client::queue_known`](crate::Client::queue_known)).",
    ListenProbe => listen_probe => "listen_probe.sql", "`queries/listen_probe.sql`: the LISTEN connection's self-test notification, sent from a pooled connection.",
    QueueWait => queue_wait => "queue_wait.sql", "`queries/queue_wait.sql`: from the LISTEN connection, start waiting on a queue (migration 15): try the shared locks of its stripes not held yet, without blocking; while every stripe is held, every INSERT into the queue notifies.",
    QueueUnwait => queue_unwait => "queue_unwait.sql", "`queries/queue_unwait.sql`: from the LISTEN connection, stop waiting on a queue: release the stripes held (while no session waits on a queue, an INSERT into it sends no notification).",
    NextLease => next_lease => "job_next_lease.sql", "`queries/job_next_lease.sql`: how long until the earliest lease of a running job ends, by the database's clock; the reaper asks after each round, so that an idle worker with the poll off wakes to reap it.",
    ReaperTryLock => reaper_try_lock => "reaper_try_lock.sql", "`queries/reaper_try_lock.sql`: the reaper's transaction-scoped advisory lock: one reaper at a time across processes.",
    Retry => retry => "job_retry.sql", "`queries/job_retry.sql`: make jobs ready again by id.",
    Cancel => cancel => "job_cancel.sql", "`queries/job_cancel.sql`: cancel jobs by id (notifies `cancel:<id>` for running ones).",
    Delete => delete => "job_delete.sql", "`queries/job_delete.sql`: delete jobs that are not running, by id.",
    States => states => "job_states.sql", "`queries/job_states.sql`: the state of each of some jobs, to explain what an admin call left alone.",
    Prune => prune => "job_prune.sql", "`queries/job_prune.sql`: delete one batch of finished jobs.",
    Archive => archive => "job_archive.sql", "`queries/job_archive.sql`: move one batch of finished jobs to `jobs_archive`.",
    DeadTuples => dead_tuples => "job_dead_tuples.sql", "`queries/job_dead_tuples.sql`: the jobs table's dead tuples from the statistics system, and whether this role may vacuum it (the worker's vacuum service).",
    Vacuum => vacuum => "job_vacuum.sql", "`queries/job_vacuum.sql`: `VACUUM (SKIP_LOCKED)` of the jobs table (the worker's vacuum service).",
    VacuumGiveWay => vacuum_give_way => "job_vacuum_give_way.sql", "`queries/job_vacuum_give_way.sql`: cancel the vacuum service's VACUUM (`$1`: its text) while a session waits for a lock on the jobs table that it holds, as autovacuum gives way.",
    ScheduleUpsert => schedule_upsert => "schedule_upsert.sql", "`queries/schedule_upsert.sql`: add a schedule, or update its definition, keeping its cursor unless its timing changed ([`Client::add_schedule`](crate::Client::add_schedule)).",
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
    HealthBlockers => health_blockers => "health_blockers.sql", "`queries/health_blockers.sql`: sessions that hold back vacuum's horizon (`$1`: idle in a transaction, or in one older than this many microseconds; `$2`: at most this many, oldest first).",
    ServerVersion => server_version => "server_version.sql", "`queries/server_version.sql`: the server's version.",
    SchemaLock => schema_lock => "schema_lock.sql", "`queries/schema_lock.sql`: the migration's advisory lock (transaction-scoped).",
    SchemaUnlimit => schema_unlimit => "schema_unlimit.sql", "`queries/schema_unlimit.sql`: lift the statement and lock timeouts for the migration transaction.",
    SchemaBootstrap => schema_bootstrap => "schema_bootstrap.sql", "`queries/schema_bootstrap.sql`: create the schema and its migrations table.",
    SchemaExists => schema_exists => "schema_exists.sql", "`queries/schema_exists.sql`: whether the migrations table exists (from the catalog).",
    SchemaVersion => schema_version => "schema_version.sql", "`queries/schema_version.sql`: the highest applied migration.",
    SchemaRecord => schema_record => "schema_record.sql", "`queries/schema_record.sql`: record one applied migration.",
    SchemaDrop => schema_drop => "schema_drop.sql", "`queries/schema_drop.sql`: drop the schema and everything in it (scratch schemas).",
    WorkerRegister => worker_register => "worker_register.sql", "`queries/worker_register.sql`: register a worker in `workers` (and delete the rows stopped or silent for a day); its id.",
    WorkerSeen => worker_seen => "worker_seen.sql", "`queries/worker_seen.sql`: a worker's presence write: last seen now, with its running jobs.",
    WorkerStop => worker_stop => "worker_stop.sql", "`queries/worker_stop.sql`: mark a worker stopped (a clean shutdown).",
    WorkerList => worker_list => "worker_list.sql", "`queries/worker_list.sql`: the registered workers with their states ([`Client::workers`](crate::Client::workers)).",
    QueueStatsWrite => queue_stats_write => "queue_stats_write.sql", "`queries/queue_stats_write.sql`: one round of the per-queue, per-minute rollup `queue_stats` (the gauges service), and its pruning after 25 hours.",
    QueueStatsList => queue_stats_list => "queue_stats_list.sql", "`queries/queue_stats_list.sql`: the per-minute rollup since a time ([`Client::queue_stats`](crate::Client::queue_stats)).",
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

/// [`Schema::render`], and `{channel}` becomes the schema's notification channel as a string
/// literal (safe: a validated schema name holds no quote). A line ending in `-- fence` is the
/// attempt part of a guard: kept (without the marker) normally, dropped with [`Fence::Off`].
fn render_with(template: &str, schema: &Schema, fence: Fence) -> String {
    let fenced = template
        .lines()
        .filter_map(|l| match l.trim_end().strip_suffix(FENCE_MARK) {
            Some(_) if fence == Fence::Off => None,
            Some(kept) => Some(kept.trim_end()),
            None => Some(l),
        })
        .collect::<Vec<_>>()
        .join("\n");
    schema
        .render(&fenced)
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
            (&fenced.complete_many, &unfenced.complete_many),
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
