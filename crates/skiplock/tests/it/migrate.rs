//! Migrations: idempotent, versioned, safe from two connections at once.

use skiplock::{latest_version, migrate, Client, Schema};
use skiplock_testdb::TestDb;

#[tokio::test]
async fn migrating_twice_is_a_no_op() {
    let db = TestDb::new().await;
    let client = Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap();
    let first = client.migrate().await.unwrap();
    assert_eq!((first.from, first.to), (0, latest_version()));
    assert_eq!(first.applied.len(), skiplock::MIGRATIONS.len());
    let again = client.migrate().await.unwrap();
    assert_eq!((again.from, again.to), (latest_version(), latest_version()));
    assert!(again.applied.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrations_both_succeed_and_apply_once() {
    let db = TestDb::new().await;
    let schema = Schema::new(db.schema()).unwrap();
    let mut runs = Vec::new();
    for _ in 0..4 {
        let mut conn = db.connect().await.unwrap();
        let schema = schema.clone();
        runs.push(tokio::spawn(
            async move { migrate(&mut conn, &schema).await },
        ));
    }
    let mut applied = 0;
    for r in runs {
        let report = r.await.unwrap().unwrap();
        assert_eq!(report.to, latest_version());
        applied += report.applied.len();
    }
    assert_eq!(
        applied,
        skiplock::MIGRATIONS.len(),
        "each migration ran exactly once"
    );
    let conn = db.connect().await.unwrap();
    let rows = conn
        .query(
            &format!(
                "SELECT version, name FROM \"{}\".schema_migrations ORDER BY version",
                db.schema()
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), skiplock::MIGRATIONS.len());
    assert_eq!(rows[0].get::<_, String>(1), "create_jobs");
}

/// The table has the article's columns and CHECK, the ready index and the statement trigger.
#[tokio::test]
async fn the_schema_has_the_article_table() {
    let db = TestDb::new().await;
    let client = Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let conn = db.connect().await.unwrap();
    let cols: Vec<String> = conn
        .query(
            "SELECT column_name::text FROM information_schema.columns
             WHERE table_schema = $1 AND table_name = 'jobs' ORDER BY ordinal_position",
            &[&db.schema()],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        cols,
        [
            "id",
            "queue",
            "payload",
            "status",
            "run_at",
            "attempts",
            "max_attempts",
            "locked_until",
            "last_error",
            "created_at",
            "kind",
            "priority",
            "finished_at",
            "unique_key",
            "unique_queued_only",
            "schedule",
            "key",
            "sequence",
            "held",
            "output",
            "after",
            "waiting",
            "has_children",
            "errors",
            "attempted_at"
        ]
    );
    let idx: String = conn
        .query_one(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index i
             JOIN pg_class c ON c.oid = i.indexrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = 'jobs_ready_idx'",
            &[&db.schema()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(idx.contains("(queue, priority, run_at, id)"), "{idx}");
    assert!(
        idx.contains("WHERE ((status = 'queued'::text) AND (held IS NULL))"),
        "{idx}"
    );
    let trigger_is_statement_level: bool = conn
        .query_one(
            "SELECT (t.tgtype & 1) = 0 FROM pg_trigger t
             JOIN pg_class c ON c.oid = t.tgrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND t.tgname = 'jobs_notify_insert'",
            &[&db.schema()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(trigger_is_statement_level);
}

/// A schema migrated by a newer skiplock is refused, not downgraded.
#[tokio::test]
async fn a_newer_schema_is_refused() {
    let db = TestDb::new().await;
    let client = Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let conn = db.connect().await.unwrap();
    conn.batch_execute(&format!(
        "INSERT INTO \"{}\".schema_migrations (version, name) VALUES (9999, 'future')",
        db.schema()
    ))
    .await
    .unwrap();
    let err = client.migrate().await.unwrap_err();
    assert!(
        matches!(err, skiplock::Error::SchemaTooNew { found: 9999, .. }),
        "{err}"
    );
}

fn client_for(db: &TestDb) -> Client {
    Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap()
}

async fn schema_exists(db: &TestDb) -> bool {
    let conn = db.connect().await.unwrap();
    conn.query_one(
        "SELECT to_regclass(format('%I.jobs', $1::text)) IS NOT NULL",
        &[&db.schema()],
    )
    .await
    .unwrap()
    .get(0)
}

/// `migrate_tx` inside a caller's tokio-postgres transaction: a rollback leaves no schema,
/// a commit keeps it; through a plain connection it commits on its own.
#[tokio::test]
async fn migrate_tx_follows_the_callers_transaction() {
    let db = TestDb::new().await;
    let client = client_for(&db);
    let mut conn = db.connect().await.unwrap();

    let tx = conn.transaction().await.unwrap();
    let report = client.migrate_tx(&tx).await.unwrap();
    assert_eq!(report.applied.len(), skiplock::MIGRATIONS.len());
    tx.rollback().await.unwrap();
    assert!(
        !schema_exists(&db).await,
        "rolled back with the transaction"
    );

    let tx = conn.transaction().await.unwrap();
    client.migrate_tx(&tx).await.unwrap();
    assert!(!schema_exists(&db).await, "not visible before the commit");
    tx.commit().await.unwrap();
    assert!(schema_exists(&db).await);

    let again = client.migrate_tx(&conn).await.unwrap();
    assert!(again.applied.is_empty());
    assert_eq!(again.to, latest_version());
}

/// `migrate_tx` on a plain connection opens and commits its own transaction.
#[tokio::test]
async fn migrate_tx_on_a_plain_connection_commits() {
    let db = TestDb::new().await;
    let client = client_for(&db);
    let conn = db.connect().await.unwrap();
    let report = client.migrate_tx(&conn).await.unwrap();
    assert_eq!(report.to, latest_version());
    assert!(schema_exists(&db).await);
    // The connection is left outside any transaction: what it writes next is seen at once.
    conn.batch_execute(&format!(
        "CREATE TABLE \"{}\".after_migrate ()",
        db.schema()
    ))
    .await
    .unwrap();
    let other = db.connect().await.unwrap();
    let seen: bool = other
        .query_one(
            "SELECT to_regclass(format('%I.after_migrate', $1::text)) IS NOT NULL",
            &[&db.schema()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(seen);
}

/// `migrate_tx` inside an sqlx transaction follows it too.
#[cfg(feature = "sqlx-0_8")]
#[tokio::test]
async fn migrate_tx_follows_an_sqlx_transaction() {
    let db = TestDb::new().await;
    let client = client_for(&db);
    let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    client.migrate_tx(&mut *tx).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(!schema_exists(&db).await);
    let mut tx = pool.begin().await.unwrap();
    client.migrate_tx(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    assert!(schema_exists(&db).await);
}

/// Migration 20 on a schema at 19 keeps a key index built beforehand with CREATE INDEX
/// CONCURRENTLY under its documented name (the same index, renamed), and replaces the old
/// definition; run again, it keeps the index it made instead of building it again.
#[tokio::test]
async fn migration_20_keeps_a_key_index_built_concurrently_beforehand() {
    let db = TestDb::new().await;
    let client = client_for(&db);
    client.migrate().await.unwrap();
    let s = format!("\"{}\"", db.schema());
    let conn = db.connect().await.unwrap();
    // The index as migration 18 left it.
    conn.batch_execute(&format!(
        "DROP INDEX {s}.jobs_slots_idx;
         CREATE INDEX jobs_slots_idx ON {s}.jobs (queue, key)
           WHERE key IS NOT NULL AND status IN ('running', 'failed') AND locked_until IS NOT NULL;
         DELETE FROM {s}.schema_migrations WHERE version >= 20;"
    ))
    .await
    .unwrap();
    conn.batch_execute(&format!(
        "CREATE INDEX CONCURRENTLY jobs_slots_v20_idx ON {s}.jobs (queue, key)
           WHERE key IS NOT NULL AND status IN ('running', 'failed')
             AND (status = 'running' OR locked_until IS NOT NULL)"
    ))
    .await
    .unwrap();
    let oid = |name: &'static str| index_oid(&conn, &s, name);
    let built = oid("jobs_slots_v20_idx").await.unwrap();
    let report = client.migrate().await.unwrap();
    assert_eq!(
        report.applied,
        vec![
            (20, "key_slots_index"),
            (21, "done_deleted"),
            (22, "names_checked_when_written"),
            (23, "claim_update_by_primary_key"),
            (24, "claim_turns"),
            (25, "cheaper_key_walk"),
            (26, "lighter_key_claim")
        ]
    );
    assert_eq!(
        oid("jobs_slots_idx").await,
        Some(built),
        "the same index, renamed"
    );
    assert_eq!(oid("jobs_slots_v20_idx").await, None);
    let def: String = conn
        .query_one(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'jobs_slots_idx'",
            &[&db.schema()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        def.contains("(status = 'running'::text) OR (locked_until IS NOT NULL)"),
        "{def}"
    );
    // Run again (as every migration may be): the same index, not a new build.
    conn.batch_execute(&format!(
        "DELETE FROM {s}.schema_migrations WHERE version >= 20"
    ))
    .await
    .unwrap();
    client.migrate().await.unwrap();
    assert_eq!(oid("jobs_slots_idx").await, Some(built));
}

/// Migration 18 on a schema at 17 keeps a lease index built beforehand with CREATE INDEX
/// CONCURRENTLY under its documented name (the same index, renamed), builds the others, and
/// leaves the old definitions gone; run again, it leaves the same indexes.
#[tokio::test]
async fn migration_18_keeps_a_lease_index_built_concurrently_beforehand() {
    let db = TestDb::new().await;
    let client = client_for(&db);
    client.migrate().await.unwrap();
    let s = format!("\"{}\"", db.schema());
    let conn = db.connect().await.unwrap();
    // The schema as migration 17 left it.
    conn.batch_execute(&format!(
        "DROP INDEX {s}.jobs_lease_idx, {s}.jobs_slots_idx, {s}.jobs_leaseless_idx;
         CREATE INDEX jobs_lease_idx ON {s}.jobs (locked_until) WHERE status = 'running';
         CREATE INDEX jobs_slots_idx ON {s}.jobs (queue, key)
           WHERE status IN ('running', 'failed') AND locked_until IS NOT NULL;
         DELETE FROM {s}.schema_migrations WHERE version >= 18;"
    ))
    .await
    .unwrap();
    // On its own: CONCURRENTLY cannot run in a transaction (nor a multi-statement query).
    conn.batch_execute(&format!(
        "CREATE INDEX CONCURRENTLY jobs_lease_v18_idx ON {s}.jobs (queue, locked_until)
           WHERE status IN ('running', 'failed') AND locked_until IS NOT NULL"
    ))
    .await
    .unwrap();
    let oid = |name: &'static str| index_oid(&conn, &s, name);
    let built = oid("jobs_lease_v18_idx").await.unwrap();
    let report = client.migrate().await.unwrap();
    assert_eq!(report.applied.first(), Some(&(18, "one_lease_index")));
    assert_eq!(
        oid("jobs_lease_idx").await,
        Some(built),
        "the same index, renamed"
    );
    assert_eq!(oid("jobs_lease_v18_idx").await, None);
    let defs: Vec<String> = conn
        .query(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = $1
             AND indexname IN ('jobs_lease_idx', 'jobs_slots_idx', 'jobs_leaseless_idx')
             ORDER BY indexname",
            &[&db.schema()],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(defs.len(), 3, "{defs:#?}");
    assert!(defs[0].contains("(queue, locked_until)"), "{defs:#?}");
    assert!(defs[1].contains("locked_until IS NULL"), "{defs:#?}");
    assert!(defs[2].contains("key IS NOT NULL"), "{defs:#?}");
    // Run again (as every migration may be): the same three indexes.
    conn.batch_execute(&format!(
        "DELETE FROM {s}.schema_migrations WHERE version >= 18"
    ))
    .await
    .unwrap();
    client.migrate().await.unwrap();
    let again: i64 = conn
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = $1
             AND indexname IN ('jobs_lease_idx', 'jobs_slots_idx', 'jobs_leaseless_idx')",
            &[&db.schema()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(again, 3);
}

/// The OID of index `name` of the quoted schema `s`, if it exists.
async fn index_oid(conn: &tokio_postgres::Client, s: &str, name: &str) -> Option<i64> {
    conn.query_one(&format!("SELECT to_regclass('{s}.{name}')::oid::int8"), &[])
        .await
        .unwrap()
        .get(0)
}
