//! Versioned schema migrations, embedded in the binary.
//!
//! Each migration is a file in `migrations/` (`NNNN_name.sql`) with `{schema}` where the
//! schema name goes. [`migrate`] runs the missing ones in order, in one transaction that
//! first takes a transaction-scoped advisory lock keyed on the schema name, so two processes
//! migrating at once serialise (the second finds nothing left to do), and a failure leaves
//! the schema as it was. Applied versions are recorded in `<schema>.schema_migrations`.

use tokio_postgres::GenericClient;

use crate::db::{self, Sql};
use crate::error::{Error, Result};
use crate::executor::Conn;
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
        version: 8,
        name: "periodic_jobs",
        sql: include_str!("../migrations/0008_periodic_jobs.sql"),
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
    let sql = Sql::new(schema);
    let tx = conn
        .transaction()
        .await
        .map_err(Error::db("begin the migration transaction"))?;
    db::migrate::unlimit(&tx, &sql)
        .await
        .map_err(Error::db("begin the migration transaction"))?;
    let report = run(&mut Tokio(&tx), schema, &sql).await?;
    tx.commit()
        .await
        .map_err(Error::db("commit the migration"))?;
    Ok(logged(schema, report))
}

/// [`migrate`] through a caller's connection or transaction (see
/// [`Client::migrate_tx`](crate::Client::migrate_tx)).
pub(crate) async fn migrate_in(conn: Conn<'_>, schema: &Schema) -> Result<MigrationReport> {
    let sql = Sql::new(schema);
    let report = match conn {
        Conn::TokioTx(t) => run(&mut Tokio(t), schema, &sql).await?,
        Conn::TokioClient(c) => {
            // A plain connection: a transaction of our own, as `migrate` opens.
            const OP: &str = "begin the migration transaction";
            c.batch_execute("BEGIN").await.map_err(Error::db(OP))?;
            let done = async {
                db::migrate::unlimit(c, &sql).await.map_err(Error::db(OP))?;
                run(&mut Tokio(c), schema, &sql).await
            }
            .await;
            match done {
                Ok(report) => {
                    c.batch_execute("COMMIT")
                        .await
                        .map_err(Error::db("commit the migration"))?;
                    report
                }
                Err(e) => {
                    // The error that matters is the migration's; a failed ROLLBACK leaves
                    // a broken connection the caller will see on its next use.
                    let _ = c.batch_execute("ROLLBACK").await;
                    return Err(e);
                }
            }
        }
        #[cfg(feature = "sqlx-0_8")]
        Conn::Sqlx(c) => {
            use sqlx::Connection as _;
            // A transaction on a plain connection, a savepoint inside the caller's.
            let mut tx = c.begin().await.map_err(|source| Error::Sqlx {
                op: "begin the migration transaction",
                source,
            })?;
            let report = run(&mut Sqlx(&mut tx), schema, &sql).await?;
            tx.commit().await.map_err(|source| Error::Sqlx {
                op: "commit the migration",
                source,
            })?;
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

/// The statements of a migration, on either driver, inside a transaction the caller of
/// [`run`] owns.
trait Link {
    async fn batch(&mut self, sql: &str, op: &'static str) -> Result<()>;
    async fn exists(&mut self, sql: &Sql, schema: &str) -> Result<bool>;
    async fn version(&mut self, sql: &Sql) -> Result<i32>;
    async fn lock(&mut self, sql: &Sql, key: i64) -> Result<()>;
    /// Applies one migration and records it.
    async fn apply(&mut self, sql: &Sql, m: &Migration, text: &str) -> Result<()>;
}

struct Tokio<'a, C>(&'a C);

impl<C: GenericClient + Sync> Link for Tokio<'_, C> {
    async fn batch(&mut self, sql: &str, op: &'static str) -> Result<()> {
        self.0.batch_execute(sql).await.map_err(Error::db(op))
    }
    async fn exists(&mut self, sql: &Sql, schema: &str) -> Result<bool> {
        db::migrate::exists(self.0, sql, schema)
            .await
            .map_err(Error::db("read the schema version"))
    }
    async fn version(&mut self, sql: &Sql) -> Result<i32> {
        db::migrate::version(self.0, sql)
            .await
            .map_err(Error::db("read the schema version"))
    }
    async fn lock(&mut self, sql: &Sql, key: i64) -> Result<()> {
        db::migrate::lock(self.0, sql, key)
            .await
            .map_err(Error::db("take the migration lock"))
    }
    async fn apply(&mut self, sql: &Sql, m: &Migration, text: &str) -> Result<()> {
        let wrap = |source| Error::Migration {
            version: m.version,
            name: m.name,
            source,
        };
        self.0.batch_execute(text).await.map_err(wrap)?;
        db::migrate::record(self.0, sql, m.version, m.name)
            .await
            .map_err(wrap)
    }
}

#[cfg(feature = "sqlx-0_8")]
struct Sqlx<'a>(&'a mut sqlx::PgConnection);

#[cfg(feature = "sqlx-0_8")]
impl Link for Sqlx<'_> {
    async fn batch(&mut self, sql: &str, op: &'static str) -> Result<()> {
        sqlx::raw_sql(sql)
            .execute(&mut *self.0)
            .await
            .map(drop)
            .map_err(|source| Error::Sqlx { op, source })
    }
    async fn exists(&mut self, sql: &Sql, schema: &str) -> Result<bool> {
        sqlx::query_scalar(&sql.schema_exists)
            .bind(schema)
            .fetch_one(&mut *self.0)
            .await
            .map_err(|source| Error::Sqlx {
                op: "read the schema version",
                source,
            })
    }
    async fn version(&mut self, sql: &Sql) -> Result<i32> {
        sqlx::query_scalar(&sql.schema_version)
            .fetch_one(&mut *self.0)
            .await
            .map_err(|source| Error::Sqlx {
                op: "read the schema version",
                source,
            })
    }
    async fn lock(&mut self, sql: &Sql, key: i64) -> Result<()> {
        sqlx::query(&sql.schema_lock)
            .bind(key)
            .execute(&mut *self.0)
            .await
            .map(drop)
            .map_err(|source| Error::Sqlx {
                op: "take the migration lock",
                source,
            })
    }
    async fn apply(&mut self, sql: &Sql, m: &Migration, text: &str) -> Result<()> {
        const OP: &str = "apply a migration";
        self.batch(text, OP).await?;
        sqlx::query(&sql.schema_record)
            .bind(m.version)
            .bind(m.name)
            .execute(&mut *self.0)
            .await
            .map(drop)
            .map_err(|source| Error::Sqlx { op: OP, source })
    }
}

/// The migration itself, inside a transaction the caller begins and commits.
async fn run(l: &mut impl Link, schema: &Schema, sql: &Sql) -> Result<MigrationReport> {
    // Nothing to do is found without the lock or any DDL (CREATE ... IF NOT EXISTS checks
    // the CREATE privilege even when the object exists): a role that may only use the
    // queue can run `migrate` on a current schema.
    if l.exists(sql, schema.name()).await? {
        let from = l.version(sql).await?;
        if from == latest_version() {
            return Ok(MigrationReport {
                from,
                to: from,
                applied: Vec::new(),
            });
        }
    }
    l.lock(sql, lock_key(schema)).await?;
    l.batch(
        &sql.schema_bootstrap,
        "create the schema and its migrations table",
    )
    .await?;
    let from = l.version(sql).await?;
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
        l.apply(sql, m, &db::render(m.sql, schema)).await?;
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
