//! Versioned schema migrations, embedded in the binary.
//!
//! Each migration is a file in `migrations/` (`NNNN_name.sql`) with `{schema}` where the
//! schema name goes. [`migrate`] runs the missing ones in order, in one transaction that
//! first takes a transaction-scoped advisory lock keyed on the schema name, so two processes
//! migrating at once serialise (the second finds nothing left to do), and a failure leaves
//! the schema as it was. Applied versions are recorded in `<schema>.schema_migrations`.

use crate::db::{self, Sql};
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
    db::migrate::lock(&tx, &sql, lock_key(schema))
        .await
        .map_err(Error::db("take the migration lock"))?;
    db::migrate::bootstrap(&tx, &sql)
        .await
        .map_err(Error::db("create the schema and its migrations table"))?;
    let from = db::migrate::version(&tx, &sql)
        .await
        .map_err(Error::db("read the schema version"))?;
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
        let wrap = |source| Error::Migration {
            version: m.version,
            name: m.name,
            source,
        };
        tx.batch_execute(&db::render(m.sql, schema))
            .await
            .map_err(wrap)?;
        db::migrate::record(&tx, &sql, m.version, m.name)
            .await
            .map_err(wrap)?;
        applied.push((m.version, m.name));
    }
    tx.commit()
        .await
        .map_err(Error::db("commit the migration"))?;
    if !applied.is_empty() {
        tracing::info!(schema = %schema, from, to = known, "migrated");
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
