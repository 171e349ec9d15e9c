//! The only user of `queries/`: every statement the dashboard sends, rendered once per schema,
//! and the transaction each page reads in (read only, with a statement timeout).
//!
//! Each file in `queries/` is one statement. `{schema}` in a file is replaced by the
//! validated, quoted schema name ([`skiplock::Schema::quoted`]); full-line `--` comments are
//! dropped. Parameters are always bound, never spliced. Statements go out unnamed
//! (`query_typed`), so the dashboard works through PgBouncer in transaction mode.

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
                    $($field: render(include_str!(concat!("../queries/", $file)), schema),)*
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
    health_table => "health_table.sql",
    health_notify => "health_notify.sql",
}

/// Fills in the schema and drops full-line comments and blank lines.
fn render(template: &str, schema: &Schema) -> String {
    template
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.is_empty() || t.starts_with("--"))
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace("{schema}", schema.quoted())
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
    set_timeout(&tx, sql, timeout).await?;
    Ok(tx)
}

async fn set_timeout(tx: &Transaction<'_>, sql: &Sql, timeout: Duration) -> DbResult<()> {
    let ms = format!("{}ms", timeout.as_millis().max(1));
    tx.query_typed(&sql.set_statement_timeout, &[(&ms, Type::TEXT)])
        .await?;
    Ok(())
}

/// Runs one statement with its parameters and their types.
pub(crate) async fn rows(
    c: &(impl GenericClient + Sync),
    statement: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> DbResult<Vec<Row>> {
    Ok(c.query_typed(statement, params).await?)
}

/// The filters of the job list and of bulk actions (`None`: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    /// A job state, or `held`: queued jobs waiting for their turn in a sequence.
    pub(crate) state: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) kind: Option<String>,
}

impl Filter {
    /// The status the statements filter on (`$1`): a held job is queued.
    pub(crate) fn status(&self) -> Option<String> {
        match self.state.as_deref() {
            Some("held") => Some("queued".to_owned()),
            s => s.map(str::to_owned),
        }
    }

    /// Whether only held jobs match (the statements' held-only parameter).
    pub(crate) fn held_only(&self) -> bool {
        self.state.as_deref() == Some("held")
    }

    /// Whether an index finds the matches: queued (held or not) and running jobs through
    /// their partial indexes, or no filter at all (the primary key). Any other filter is read
    /// within the scan budget ([`crate::Dashboard::scan_budget`]).
    pub(crate) fn indexed(&self) -> bool {
        match self.state.as_deref() {
            Some("queued" | "held" | "running") => true,
            Some(_) => false,
            None => self.queue.is_none() && self.kind.is_none(),
        }
    }
}

/// The end of the scan budget below id `before` (below no bound when `None`): the lowest id
/// of the `budget` jobs just below it, or `None` when fewer are there (the scan reaches the
/// oldest job).
pub(crate) async fn scan_older(
    c: &(impl GenericClient + Sync),
    sql: &Sql,
    before: Option<i64>,
    budget: i64,
) -> DbResult<Option<i64>> {
    Ok(rows(
        c,
        &sql.job_scan_older,
        &[(&before, Type::INT8), (&budget, Type::INT8)],
    )
    .await?
    .first()
    .map(|r| r.get::<_, i64>("id")))
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
    scan_older(c, sql, Some(newest.saturating_add(1)), budget).await
}

/// The end of the scan budget above id `after`: the highest id of the `budget` jobs just
/// above it, or `None` when fewer are there (the scan reaches the newest job).
pub(crate) async fn scan_newer(
    c: &(impl GenericClient + Sync),
    sql: &Sql,
    after: i64,
    budget: i64,
) -> DbResult<Option<i64>> {
    Ok(rows(
        c,
        &sql.job_scan_newer,
        &[(&after, Type::INT8), (&budget, Type::INT8)],
    )
    .await?
    .first()
    .map(|r| r.get::<_, i64>("id")))
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
}
