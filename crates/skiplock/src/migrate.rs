//! Versioned schema migrations, embedded in the binary.
//!
//! Each migration is a file in `migrations/` (`NNNN_name.sql`) with `{schema}` where the
//! schema name goes. [`migrate`] runs the missing ones in order, in one transaction that
//! first takes a transaction-scoped advisory lock keyed on the schema name, so two processes
//! migrating at once serialise (the second finds nothing left to do), and a failure leaves
//! the schema as it was. Applied versions are recorded in `<schema>.schema_migrations`.

use crate::caller_tx::Conn;
use crate::db::{self, Sql, Store};
use crate::error::{Error, Result};
use crate::schema::Schema;

/// One embedded migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its version (1, 2, ...).
    pub version: i32,
    /// Its name.
    pub name: &'static str,
    /// Its SQL, with `{schema}` for the schema name.
    pub sql: &'static str,
}

/// Every migration this build knows, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "create_jobs",
        sql: include_str!("../migrations/0001_create_jobs.sql"),
    },
    Migration {
        version: 2,
        name: "archive_and_locks",
        sql: include_str!("../migrations/0002_archive_and_locks.sql"),
    },
    Migration {
        version: 3,
        name: "enqueue_function",
        sql: include_str!("../migrations/0003_enqueue_function.sql"),
    },
    Migration {
        version: 4,
        name: "autovacuum",
        sql: include_str!("../migrations/0004_autovacuum.sql"),
    },
    Migration {
        version: 5,
        name: "exhausted_index",
        sql: include_str!("../migrations/0005_exhausted_index.sql"),
    },
    Migration {
        version: 6,
        name: "unique_jobs",
        sql: include_str!("../migrations/0006_unique_jobs.sql"),
    },
    Migration {
        version: 7,
        name: "queue_pause",
        sql: include_str!("../migrations/0007_queue_pause.sql"),
    },
    Migration {
        version: 8,
        name: "periodic_jobs",
        sql: include_str!("../migrations/0008_periodic_jobs.sql"),
    },
    Migration {
        version: 9,
        name: "retry_keeps_lease",
        sql: include_str!("../migrations/0009_retry_keeps_lease.sql"),
    },
    Migration {
        version: 10,
        name: "dashboard",
        sql: include_str!("../migrations/0010_dashboard.sql"),
    },
    Migration {
        version: 11,
        name: "flow_control",
        sql: include_str!("../migrations/0011_flow_control.sql"),
    },
    Migration {
        version: 12,
        name: "key_walk",
        sql: include_str!("../migrations/0012_key_walk.sql"),
    },
    Migration {
        version: 13,
        name: "workflows",
        sql: include_str!("../migrations/0013_workflows.sql"),
    },
    Migration {
        version: 14,
        name: "workers_and_history",
        sql: include_str!("../migrations/0014_workers_and_history.sql"),
    },
    Migration {
        version: 15,
        name: "notify_when_waiting",
        sql: include_str!("../migrations/0015_notify_when_waiting.sql"),
    },
    Migration {
        version: 16,
        name: "claims_in_turn",
        sql: include_str!("../migrations/0016_claims_in_turn.sql"),
    },
    Migration {
        version: 17,
        name: "cheaper_name_checks",
        sql: include_str!("../migrations/0017_cheaper_name_checks.sql"),
    },
    Migration {
        version: 18,
        name: "one_lease_index",
        sql: include_str!("../migrations/0018_one_lease_index.sql"),
    },
    Migration {
        version: 19,
        name: "larger_claims_after_a_wait",
        sql: include_str!("../migrations/0019_larger_claims_after_a_wait.sql"),
    },
    Migration {
        version: 20,
        name: "key_slots_index",
        sql: include_str!("../migrations/0020_key_slots_index.sql"),
    },
    Migration {
        version: 21,
        name: "done_deleted",
        sql: include_str!("../migrations/0021_done_deleted.sql"),
    },
    Migration {
        version: 22,
        name: "names_checked_when_written",
        sql: include_str!("../migrations/0022_names_checked_when_written.sql"),
    },
    Migration {
        version: 23,
        name: "claim_update_by_primary_key",
        sql: include_str!("../migrations/0023_claim_update_by_primary_key.sql"),
    },
    Migration {
        version: 24,
        name: "claim_turns",
        sql: include_str!("../migrations/0024_claim_turns.sql"),
    },
    Migration {
        version: 25,
        name: "cheaper_key_walk",
        sql: include_str!("../migrations/0025_cheaper_key_walk.sql"),
    },
    Migration {
        version: 26,
        name: "lighter_key_claim",
        sql: include_str!("../migrations/0026_lighter_key_claim.sql"),
    },
];

/// The newest schema version this build knows.
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MigrationReport {
    /// The schema version before.
    pub from: i32,
    /// The schema version after.
    pub to: i32,
    /// The migrations applied now, in order (empty when the schema was up to date).
    pub applied: Vec<(i32, &'static str)>,
}

/// Creates or upgrades `schema` on `conn`. Safe to run again, and from several processes
/// at once.
pub async fn migrate(
    conn: &mut tokio_postgres::Client,
    schema: &Schema,
) -> Result<MigrationReport> {
    let store = Store::new(Sql::new(schema), false);
    let tx = store.schema_begin(conn).await?;
    let report = run(&store, Conn::TokioTx(&tx), schema).await?;
    store.schema_commit(tx).await?;
    Ok(logged(schema, report))
}

/// [`migrate`] through a caller's connection or transaction (see
/// [`Client::migrate_tx`](crate::Client::migrate_tx)).
pub(crate) async fn migrate_in(conn: Conn<'_>, schema: &Schema) -> Result<MigrationReport> {
    let store = Store::new(Sql::new(schema), false);
    let report = match conn {
        Conn::TokioTx(t) => run(&store, Conn::TokioTx(t), schema).await?,
        Conn::TokioClient(c) => {
            // A plain connection: a transaction of our own, as `migrate` opens.
            store.schema_begin_on(c).await?;
            let done = async {
                store.schema_unlimit(c).await?;
                run(&store, Conn::TokioClient(c), schema).await
            }
            .await;
            match done {
                Ok(report) => {
                    store.schema_commit_on(c).await?;
                    report
                }
                Err(e) => {
                    store.schema_rollback_on(c).await;
                    return Err(e);
                }
            }
        }
        #[cfg(feature = "sqlx-0_8")]
        Conn::Sqlx(c) => {
            // A transaction on a plain connection, a savepoint inside the caller's.
            let mut tx = db::schema::begin_sqlx(c).await?;
            let report = run(&store, Conn::Sqlx(&mut tx), schema).await?;
            db::schema::commit_sqlx(tx).await?;
            report
        }
    };
    Ok(logged(schema, report))
}

fn logged(schema: &Schema, report: MigrationReport) -> MigrationReport {
    if !report.applied.is_empty() {
        tracing::info!(schema = %schema, from = report.from, to = report.to, "migrated");
    }
    report
}

/// The migration itself, inside a transaction the caller begins and commits.
async fn run(store: &Store, mut conn: Conn<'_>, schema: &Schema) -> Result<MigrationReport> {
    // Nothing to do is found without the lock or any DDL (CREATE ... IF NOT EXISTS checks
    // the CREATE privilege even when the object exists): a role that may only use the
    // queue can run `migrate` on a current schema.
    if store.schema_exists(conn.reborrow(), schema.name()).await? {
        let from = store.schema_version(conn.reborrow()).await?;
        if from == latest_version() {
            return Ok(MigrationReport {
                from,
                to: from,
                applied: Vec::new(),
            });
        }
    }
    store.schema_lock(conn.reborrow(), lock_key(schema)).await?;
    store.schema_bootstrap(conn.reborrow()).await?;
    let from = store.schema_version(conn.reborrow()).await?;
    let known = latest_version();
    if from > known {
        return Err(Error::SchemaTooNew {
            schema: schema.name().to_owned(),
            found: from,
            known,
        });
    }
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > from) {
        store
            .schema_apply(
                conn.reborrow(),
                (m.version, m.name),
                &db::render(m.sql, schema),
            )
            .await?;
        applied.push((m.version, m.name));
    }
    Ok(MigrationReport {
        from,
        to: from.max(applied.last().map_or(from, |a| a.0)),
        applied,
    })
}

/// The advisory-lock key of a schema's migrations: FNV-1a of `skiplock migrate <schema>`.
pub(crate) fn lock_key(schema: &Schema) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "skiplock migrate ".bytes().chain(schema.name().bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Migrations can run in a spawned task: their futures are `Send` on every driver (the
    /// check is that this compiles).
    #[allow(dead_code)]
    fn migrations_are_send(
        mut a: tokio_postgres::Client,
        b: tokio_postgres::Client,
        #[cfg(feature = "sqlx-0_8")] mut c: sqlx::PgConnection,
        schema: Schema,
    ) {
        fn spawnable<T: Send + 'static>(_: T) {}
        let s = schema.clone();
        spawnable(async move { migrate(&mut a, &s).await });
        let s = schema.clone();
        spawnable(async move { migrate_in(Conn::TokioClient(&b), &s).await });
        #[cfg(feature = "sqlx-0_8")]
        spawnable(async move { migrate_in(Conn::Sqlx(&mut c), &schema).await });
    }
}
