//! The only user of `queries/`: every statement the dashboard sends, rendered once per schema,
//! and the transaction each page reads in (read only, with a statement timeout).
//!
//! Each file in `queries/` is one statement, rendered by the library's
//! [`skiplock::Schema::render`]: `{schema}` becomes the validated, quoted schema name, and
//! full-line `--` comments are dropped. Parameters are always bound, never spliced. Statements go out unnamed
//! (`query_typed`), so the dashboard works through PgBouncer in transaction mode.
//!
//! Pages call one typed method of [`Sql`] per statement (`sql.job_get(&tx, id, chars)`):
//! the parameters of a statement, their order and their types are written here only.

use std::fmt;
use std::time::Duration;

use skiplock::reexports::deadpool_postgres::{Object, Pool, PoolError};
use skiplock::Schema;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row, Transaction};

macro_rules! statements {
    ($($field:ident => $file:literal,)*) => {
        /// Every statement of `queries/`, rendered for one schema.
        #[derive(Debug, Clone)]
        pub(crate) struct Sql {
            $(pub(crate) $field: String,)*
        }

        impl Sql {
            pub(crate) fn new(schema: &Schema) -> Self {
                Sql {
                    $($field: schema.render(include_str!(concat!("../queries/", $file))),)*
                }
            }
        }

        /// The files of `queries/` the statements come from.
        #[cfg(test)]
        pub(crate) const FILES: &[&str] = &[$($file,)*];
    };
}

statements! {
    set_statement_timeout => "set_statement_timeout.sql",
    queue_active => "queue_active.sql",
    queue_finished => "queue_finished.sql",
    queue_finished_sample => "queue_finished_sample.sql",
    queue_paused => "queue_paused.sql",
    queue_limits => "queue_limits.sql",
    queue_keys_waiting => "queue_keys_waiting.sql",
    queue_sequences_held => "queue_sequences_held.sql",
    schedule_list => "schedule_list.sql",
    job_list_older => "job_list_older.sql",
    job_list_newer => "job_list_newer.sql",
    job_count => "job_count.sql",
    job_latest_id => "job_latest_id.sql",
    job_scan_older => "job_scan_older.sql",
    job_scan_newer => "job_scan_newer.sql",
    job_get => "job_get.sql",
    job_family => "job_family.sql",
    job_children_count => "job_children_count.sql",
    job_workflow => "job_workflow.sql",
    job_select_ids => "job_select_ids.sql",
    job_search => "job_search.sql",
    job_errors => "job_errors.sql",
    job_run_now => "job_run_now.sql",
    queue_stats_hour => "queue_stats_hour.sql",
    queue_workers => "queue_workers.sql",
    worker_list => "worker_list.sql",
    health_table => "health_table.sql",
    health_notify => "health_notify.sql",
}

/// Why a page could not be read or an action not done.
#[derive(Debug)]
pub(crate) enum DbError {
    /// No pooled connection.
    Pool(PoolError),
    /// The database refused or failed.
    Db(tokio_postgres::Error),
}

impl DbError {
    /// Whether the statement timeout (or an operator) cancelled the statement.
    pub(crate) fn is_timeout(&self) -> bool {
        match self {
            DbError::Db(e) => e.code() == Some(&SqlState::QUERY_CANCELED),
            DbError::Pool(_) => false,
        }
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbError::Pool(e) => write!(f, "no database connection: {e}"),
            DbError::Db(e) => match e.as_db_error() {
                Some(db) => write!(f, "{}: {}", db.severity(), db.message()),
                None => write!(f, "{e}"),
            },
        }
    }
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        DbError::Db(e)
    }
}

pub(crate) type DbResult<T> = Result<T, DbError>;

/// A pooled connection for one request.
pub(crate) async fn conn(pool: &Pool) -> DbResult<Object> {
    pool.get().await.map_err(DbError::Pool)
}

/// Starts a read-only transaction on `obj` with the statement timeout set for that
/// transaction only. Dropping it rolls back (it wrote nothing); a pooled connection goes
/// back with its own settings.
pub(crate) async fn begin<'c>(
    obj: &'c mut Object,
    sql: &Sql,
    timeout: Duration,
) -> DbResult<Transaction<'c>> {
    let pg: &mut tokio_postgres::Client = obj;
    let tx = pg.build_transaction().read_only(true).start().await?;
    sql.set_statement_timeout(&tx, timeout).await?;
    Ok(tx)
}

/// Runs one statement with its parameters and their types.
async fn rows(
    c: &(impl GenericClient + Sync),
    statement: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> DbResult<Vec<Row>> {
    Ok(c.query_typed(statement, params).await?)
}

/// The filters of the job list and of bulk actions (`None`: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    /// A job state: a stored status (`queued`, `running`, `done`), a display state
    /// (`available`, `scheduled`, `retrying`, `waiting`, `failed`, `cancelled`), or `held`
    /// (the same as `waiting`: queued jobs waiting for their parents or their turn in a
    /// sequence).
    pub(crate) state: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) kind: Option<String>,
}

impl Filter {
    /// The status the statements filter on (`$1`): every display state refines one.
    pub(crate) fn status(&self) -> Option<String> {
        self.state.as_deref().map(|s| {
            match s {
                "held" | "waiting" | "available" | "scheduled" | "retrying" => "queued",
                "cancelled" => "failed",
                s => s,
            }
            .to_owned()
        })
    }

    /// Whether only held jobs match (the statements' held-only parameter).
    pub(crate) fn held_only(&self) -> bool {
        matches!(self.state.as_deref(), Some("held" | "waiting"))
    }

    /// The display state the statements filter on, when the state is one that refines its
    /// stored status (`failed` leaves the cancelled ones out, as `skiplock jobs` does).
    pub(crate) fn display(&self) -> Option<String> {
        match self.state.as_deref() {
            Some(s @ ("available" | "scheduled" | "retrying" | "failed" | "cancelled")) => {
                Some(s.to_owned())
            }
            _ => None,
        }
    }

    /// Whether an index finds the matches: queued (in any display state) and running jobs
    /// through their partial indexes, or no filter at all (the primary key). Any other filter
    /// is read within the scan budget ([`crate::Dashboard::scan_budget`]).
    pub(crate) fn indexed(&self) -> bool {
        match self.status().as_deref() {
            Some("queued" | "running") => true,
            Some(_) => false,
            None => self.queue.is_none() && self.kind.is_none(),
        }
    }
}

/// A page of the job list, as its statements read it.
pub(crate) struct Page {
    /// Fetch at most this many.
    pub(crate) fetch: i64,
    /// The far end of the scan budget (`None`: no bound).
    pub(crate) bound: Option<i64>,
}

impl Sql {
    /// `set_statement_timeout.sql`: the transaction's statement timeout (and no JIT).
    async fn set_statement_timeout(
        &self,
        c: &(impl GenericClient + Sync),
        timeout: Duration,
    ) -> DbResult<()> {
        let ms = format!("{}ms", timeout.as_millis().max(1));
        rows(c, &self.set_statement_timeout, &[(&ms, Type::TEXT)]).await?;
        Ok(())
    }

    /// `job_list_older.sql`: the jobs of `f` below id `before`, newest first.
    pub(crate) async fn job_list_older(
        &self,
        c: &(impl GenericClient + Sync),
        f: &Filter,
        before: Option<i64>,
        p: &Page,
    ) -> DbResult<Vec<Row>> {
        let (status, held, display) = (f.status(), f.held_only(), f.display());
        rows(
            c,
            &self.job_list_older,
            &[
                (&status, Type::TEXT),
                (&f.queue, Type::TEXT),
                (&f.kind, Type::TEXT),
                (&before, Type::INT8),
                (&p.fetch, Type::INT8),
                (&p.bound, Type::INT8),
                (&held, Type::BOOL),
                (&display, Type::TEXT),
            ],
        )
        .await
    }

    /// `job_list_newer.sql`: the jobs of `f` just above id `after`, oldest first.
    pub(crate) async fn job_list_newer(
        &self,
        c: &(impl GenericClient + Sync),
        f: &Filter,
        after: i64,
        p: &Page,
    ) -> DbResult<Vec<Row>> {
        let (status, held, display) = (f.status(), f.held_only(), f.display());
        rows(
            c,
            &self.job_list_newer,
            &[
                (&status, Type::TEXT),
                (&f.queue, Type::TEXT),
                (&f.kind, Type::TEXT),
                (&after, Type::INT8),
                (&p.fetch, Type::INT8),
                (&p.bound, Type::INT8),
                (&held, Type::BOOL),
                (&display, Type::TEXT),
            ],
        )
        .await
    }

    /// `job_count.sql`: the jobs of `f` with an id of at least `lo`, counted up to `cap`.
    pub(crate) async fn job_count(
        &self,
        c: &(impl GenericClient + Sync),
        f: &Filter,
        cap: i64,
        lo: Option<i64>,
    ) -> DbResult<i64> {
        let (status, held, display) = (f.status(), f.held_only(), f.display());
        Ok(rows(
            c,
            &self.job_count,
            &[
                (&status, Type::TEXT),
                (&f.queue, Type::TEXT),
                (&f.kind, Type::TEXT),
                (&cap, Type::INT8),
                (&lo, Type::INT8),
                (&held, Type::BOOL),
                (&display, Type::TEXT),
            ],
        )
        .await?
        .first()
        .map_or(0, |r| r.get("n")))
    }

    /// `job_select_ids.sql`: the ids a bulk action of `f` works on, oldest first.
    pub(crate) async fn job_select_ids(
        &self,
        c: &(impl GenericClient + Sync),
        f: &Filter,
        max_id: i64,
        limit: i64,
        lo: Option<i64>,
    ) -> DbResult<Vec<i64>> {
        let (status, held, display) = (f.status(), f.held_only(), f.display());
        Ok(rows(
            c,
            &self.job_select_ids,
            &[
                (&status, Type::TEXT),
                (&f.queue, Type::TEXT),
                (&f.kind, Type::TEXT),
                (&max_id, Type::INT8),
                (&limit, Type::INT8),
                (&lo, Type::INT8),
                (&held, Type::BOOL),
                (&display, Type::TEXT),
            ],
        )
        .await?
        .iter()
        .map(|r| r.get("id"))
        .collect())
    }

    /// `job_latest_id.sql`: the highest job id, if any job exists.
    pub(crate) async fn job_latest_id(
        &self,
        c: &(impl GenericClient + Sync),
    ) -> DbResult<Option<i64>> {
        Ok(rows(c, &self.job_latest_id, &[])
            .await?
            .first()
            .map(|r| r.get("id")))
    }

    /// `job_scan_older.sql`: the end of the scan budget below id `before` (below no bound
    /// when `None`): the lowest id of the `budget` jobs just below it, or `None` when fewer
    /// are there (the scan reaches the oldest job).
    pub(crate) async fn job_scan_older(
        &self,
        c: &(impl GenericClient + Sync),
        before: Option<i64>,
        budget: i64,
    ) -> DbResult<Option<i64>> {
        Ok(rows(
            c,
            &self.job_scan_older,
            &[(&before, Type::INT8), (&budget, Type::INT8)],
        )
        .await?
        .first()
        .map(|r| r.get("id")))
    }

    /// `job_scan_newer.sql`: the end of the scan budget above id `after`: the highest id of
    /// the `budget` jobs just above it, or `None` when fewer are there (the scan reaches the
    /// newest job).
    pub(crate) async fn job_scan_newer(
        &self,
        c: &(impl GenericClient + Sync),
        after: i64,
        budget: i64,
    ) -> DbResult<Option<i64>> {
        Ok(rows(
            c,
            &self.job_scan_newer,
            &[(&after, Type::INT8), (&budget, Type::INT8)],
        )
        .await?
        .first()
        .map(|r| r.get("id")))
    }

    /// `job_get.sql`: job `id` for its page, payload and output cut at `chars` characters.
    pub(crate) async fn job_get(
        &self,
        c: &(impl GenericClient + Sync),
        id: i64,
        chars: i32,
    ) -> DbResult<Option<Row>> {
        Ok(
            rows(c, &self.job_get, &[(&id, Type::INT8), (&chars, Type::INT4)])
                .await?
                .into_iter()
                .next(),
        )
    }

    /// `job_errors.sql`: job `id`'s failed attempts, oldest first, at most `n`, each error
    /// cut at `chars` characters.
    pub(crate) async fn job_errors(
        &self,
        c: &(impl GenericClient + Sync),
        id: i64,
        n: i64,
        chars: i32,
    ) -> DbResult<Vec<Row>> {
        rows(
            c,
            &self.job_errors,
            &[(&id, Type::INT8), (&n, Type::INT8), (&chars, Type::INT4)],
        )
        .await
    }

    /// `job_search.sql`: the jobs whose payload contains `text`, newest first, at most
    /// `limit`, among those with an id of at least `lo`.
    pub(crate) async fn job_search(
        &self,
        c: &(impl GenericClient + Sync),
        text: &str,
        lo: Option<i64>,
        limit: i64,
    ) -> DbResult<Vec<Row>> {
        rows(
            c,
            &self.job_search,
            &[(&text, Type::TEXT), (&lo, Type::INT8), (&limit, Type::INT8)],
        )
        .await
    }

    /// `job_run_now.sql`: job `id` due now if it is queued, never ran and is due later;
    /// wakes its queue's workers on `channel`. Whether it moved.
    pub(crate) async fn job_run_now(
        &self,
        c: &(impl GenericClient + Sync),
        id: i64,
        channel: &str,
    ) -> DbResult<bool> {
        Ok(!rows(
            c,
            &self.job_run_now,
            &[(&id, Type::INT8), (&channel, Type::TEXT)],
        )
        .await?
        .is_empty())
    }

    /// `job_family.sql`: job `id`'s parents and children, at most `n` of each.
    pub(crate) async fn job_family(
        &self,
        c: &(impl GenericClient + Sync),
        id: i64,
        n: i64,
    ) -> DbResult<Vec<Row>> {
        rows(c, &self.job_family, &[(&id, Type::INT8), (&n, Type::INT8)]).await
    }

    /// `job_children_count.sql`: how many jobs wait for job `id`, and how many of them still
    /// wait, counted up to `cap` edges.
    pub(crate) async fn job_children_count(
        &self,
        c: &(impl GenericClient + Sync),
        id: i64,
        cap: i64,
    ) -> DbResult<(i64, i64)> {
        Ok(rows(
            c,
            &self.job_children_count,
            &[(&id, Type::INT8), (&cap, Type::INT8)],
        )
        .await?
        .first()
        .map_or((0, 0), |r| (r.get("total"), r.get("waiting"))))
    }

    /// `job_workflow.sql`: the jobs of job `id`'s workflow, at most `shown`, and how many the
    /// walk reaches, counted up to `cap`.
    pub(crate) async fn job_workflow(
        &self,
        c: &(impl GenericClient + Sync),
        id: i64,
        shown: i64,
        cap: i64,
    ) -> DbResult<Vec<Row>> {
        rows(
            c,
            &self.job_workflow,
            &[(&id, Type::INT8), (&shown, Type::INT8), (&cap, Type::INT8)],
        )
        .await
    }

    /// `queue_active.sql`: per queue, its queued, ready, held and running jobs.
    pub(crate) async fn queue_active(
        &self,
        c: &(impl GenericClient + Sync),
        cap: i64,
        max_queues: i64,
    ) -> DbResult<Vec<Row>> {
        rows(
            c,
            &self.queue_active,
            &[(&cap, Type::INT8), (&max_queues, Type::INT8)],
        )
        .await
    }

    /// `queue_finished.sql`: per queue, its done and failed jobs, counted up to `past`.
    pub(crate) async fn queue_finished(
        &self,
        c: &(impl GenericClient + Sync),
        past: i64,
        max_queues: i64,
    ) -> DbResult<Vec<Row>> {
        rows(
            c,
            &self.queue_finished,
            &[(&past, Type::INT8), (&max_queues, Type::INT8)],
        )
        .await
    }

    /// `queue_finished_sample.sql`: estimates of the finished jobs of `queues`.
    pub(crate) async fn queue_finished_sample(
        &self,
        c: &(impl GenericClient + Sync),
        pages: f64,
        queues: &[String],
        limit: i64,
        schema: &str,
    ) -> DbResult<Vec<Row>> {
        rows(
            c,
            &self.queue_finished_sample,
            &[
                (&pages, Type::FLOAT8),
                (&queues, Type::TEXT_ARRAY),
                (&limit, Type::INT8),
                (&schema, Type::TEXT),
            ],
        )
        .await
    }

    /// `queue_paused.sql`: the paused queues, with when and by whom.
    pub(crate) async fn queue_paused(
        &self,
        c: &(impl GenericClient + Sync),
        max_queues: i64,
    ) -> DbResult<Vec<Row>> {
        rows(c, &self.queue_paused, &[(&max_queues, Type::INT8)]).await
    }

    /// `queue_limits.sql`: the limited queues and their limits.
    pub(crate) async fn queue_limits(
        &self,
        c: &(impl GenericClient + Sync),
        max_queues: i64,
    ) -> DbResult<Vec<Row>> {
        rows(c, &self.queue_limits, &[(&max_queues, Type::INT8)]).await
    }

    /// `queue_keys_waiting.sql`: the keys at their per-key limit with ready jobs.
    pub(crate) async fn queue_keys_waiting(
        &self,
        c: &(impl GenericClient + Sync),
        cap: i64,
        looked: i64,
        key_rows: i64,
        shown: i64,
        max_queues: i64,
    ) -> DbResult<Vec<Row>> {
        rows(
            c,
            &self.queue_keys_waiting,
            &[
                (&cap, Type::INT8),
                (&looked, Type::INT8),
                (&key_rows, Type::INT8),
                (&shown, Type::INT8),
                (&max_queues, Type::INT8),
            ],
        )
        .await
    }

    /// `queue_sequences_held.sql`: the sequences with held jobs.
    pub(crate) async fn queue_sequences_held(
        &self,
        c: &(impl GenericClient + Sync),
        cap: i64,
        shown: i64,
        max_queues: i64,
    ) -> DbResult<Vec<Row>> {
        rows(
            c,
            &self.queue_sequences_held,
            &[
                (&cap, Type::INT8),
                (&shown, Type::INT8),
                (&max_queues, Type::INT8),
            ],
        )
        .await
    }

    /// `queue_stats_hour.sql`: the last hour of `queue`'s per-minute rollup.
    pub(crate) async fn queue_stats_hour(
        &self,
        c: &(impl GenericClient + Sync),
        queue: &str,
    ) -> DbResult<Vec<Row>> {
        rows(c, &self.queue_stats_hour, &[(&queue, Type::TEXT)]).await
    }

    /// `queue_workers.sql`: per queue, the live workers serving it.
    pub(crate) async fn queue_workers(
        &self,
        c: &(impl GenericClient + Sync),
        max_queues: i64,
    ) -> DbResult<Vec<Row>> {
        rows(c, &self.queue_workers, &[(&max_queues, Type::INT8)]).await
    }

    /// `worker_list.sql`: the workers, those gone within the last day included.
    pub(crate) async fn worker_list(
        &self,
        c: &(impl GenericClient + Sync),
        limit: i64,
    ) -> DbResult<Vec<Row>> {
        rows(c, &self.worker_list, &[(&limit, Type::INT8)]).await
    }

    /// `schedule_list.sql`: the schedules.
    pub(crate) async fn schedule_list(
        &self,
        c: &(impl GenericClient + Sync),
        max: i64,
    ) -> DbResult<Vec<Row>> {
        rows(c, &self.schedule_list, &[(&max, Type::INT8)]).await
    }

    /// `health_table.sql`: the jobs table of `schema` from the statistics views.
    pub(crate) async fn health_table(
        &self,
        c: &(impl GenericClient + Sync),
        schema: &str,
    ) -> DbResult<Option<Row>> {
        Ok(rows(c, &self.health_table, &[(&schema, Type::TEXT)])
            .await?
            .into_iter()
            .next())
    }

    /// `health_notify.sql`: how full the notification queue is (0 to 1).
    pub(crate) async fn health_notify(&self, c: &(impl GenericClient + Sync)) -> DbResult<f64> {
        Ok(rows(c, &self.health_notify, &[])
            .await?
            .first()
            .map_or(0.0, |r| r.get("usage")))
    }
}

/// The library's `health_blockers.sql` (`statement`, as the library renders it): the
/// sessions that hold back vacuum (idle in a transaction, or in one older than `age_us`
/// microseconds), at most `max`, oldest first.
pub(crate) async fn health_blockers(
    c: &(impl GenericClient + Sync),
    statement: &str,
    age_us: i64,
    max: i64,
) -> DbResult<Vec<Row>> {
    rows(c, statement, &[(&age_us, Type::INT8), (&max, Type::INT8)]).await
}

/// The lowest id a bulk selection of `filter` up to id `newest` reaches: `None` for a filter
/// an index serves (no bound), else the end of the scan budget below `newest`. The confirm
/// page's count and the action's selection both take their range from here, so that the
/// action selects what the page counted.
pub(crate) async fn bulk_floor(
    c: &(impl GenericClient + Sync),
    sql: &Sql,
    filter: &Filter,
    newest: i64,
    budget: i64,
) -> DbResult<Option<i64>> {
    if filter.indexed() {
        return Ok(None);
    }
    sql.job_scan_older(c, Some(newest.saturating_add(1)), budget)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_file_is_registered() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/queries");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".sql"))
            .collect();
        files.sort();
        let mut known: Vec<String> = FILES.iter().map(|f| (*f).to_owned()).collect();
        known.sort();
        assert_eq!(files, known, "queries/ and the statements! list differ");
    }

    #[test]
    fn every_statement_is_rendered_with_a_limit_and_the_quoted_schema() {
        let sql = Sql::new(&Schema::new("My-App").unwrap());
        let all = [
            &sql.queue_active,
            &sql.queue_finished,
            &sql.queue_finished_sample,
            &sql.queue_paused,
            &sql.queue_limits,
            &sql.queue_keys_waiting,
            &sql.queue_sequences_held,
            &sql.schedule_list,
            &sql.job_list_older,
            &sql.job_list_newer,
            &sql.job_count,
            &sql.job_latest_id,
            &sql.job_scan_older,
            &sql.job_scan_newer,
            &sql.job_get,
            &sql.job_family,
            &sql.job_children_count,
            &sql.job_workflow,
            &sql.job_select_ids,
            &sql.job_search,
            &sql.job_errors,
            &sql.job_run_now,
            &sql.queue_stats_hour,
            &sql.queue_workers,
            &sql.worker_list,
            &sql.health_table,
            &sql.health_notify,
        ];
        for s in all {
            assert!(!s.contains("--") && !s.contains("{schema}"), "{s}");
            assert!(s.contains("LIMIT"), "every read is bounded: {s}");
        }
        assert!(sql.job_get.contains("FROM \"My-App\".jobs"));
        // The health page's list of sessions runs the library's statement.
        let client = skiplock::Client::builder("postgres://localhost/x")
            .schema("My-App")
            .build()
            .unwrap();
        let blockers = client.statement(skiplock::Statement::HealthBlockers);
        assert!(blockers.contains("LIMIT $2"), "{blockers}");
    }

    #[test]
    fn display_states_are_derived_by_the_librarys_expression() {
        let client = skiplock::Client::builder("postgres://localhost/x")
            .schema("My-App")
            .build()
            .unwrap();
        let case = |s: &str| -> String {
            let start = s.find("CASE").expect("a CASE");
            let end = start + s[start..].find("END AS state").expect("END AS state");
            s[start..end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        let lib = case(client.statement(skiplock::Statement::JobsList));
        assert!(
            lib.contains("'cancelled'") && lib.contains("'retrying'"),
            "{lib}"
        );
        let sql = Sql::new(&Schema::new("My-App").unwrap());
        for s in [
            &sql.job_list_older,
            &sql.job_list_newer,
            &sql.job_count,
            &sql.job_select_ids,
            &sql.job_get,
            &sql.job_search,
        ] {
            assert_eq!(case(s), lib, "{s}");
        }
    }
}
