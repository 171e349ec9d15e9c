//! The worker's vacuum service: it vacuums the jobs table past its dead-tuple threshold, warns
//! once and steps aside for a role that may not, and sends nothing while idle with the poll
//! off.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use skiplock::{Client, JobOptions, NewJob, Registry, Worker};

use crate::support::{setup, Bundle};
use crate::worker::{client, eventually, noop, spawn_worker};

/// `n_dead_tup`, `vacuum_count` and whether `last_vacuum` is set, for the test's jobs table.
async fn vacuum_stats(b: &Bundle) -> (i64, i64, bool) {
    let r = b
        .raw
        .query_one(
            "SELECT n_dead_tup, vacuum_count, last_vacuum IS NOT NULL
             FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'",
            &[&b.db.schema()],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// `n` jobs in a queue no worker serves, updated twice (2n dead row versions), with
/// autovacuum off for the table so that only the worker can remove them.
async fn dead_rows(b: &Bundle, n: i64) {
    b.raw
        .batch_execute(&format!(
            "ALTER TABLE jobs SET (autovacuum_enabled = false);
             INSERT INTO jobs (queue, kind, payload)
               SELECT 'elsewhere', 'k', '{{}}' FROM generate_series(1, {n});"
        ))
        .await
        .unwrap();
    more_dead_rows(b).await;
    // The statistics system counts them within a second or so.
    eventually(Duration::from_secs(20), "dead tuples counted", || async {
        vacuum_stats(b).await.0 >= n
    })
    .await;
}

async fn more_dead_rows(b: &Bundle) {
    b.raw
        .batch_execute(
            "UPDATE jobs SET priority = priority WHERE queue = 'elsewhere';
             UPDATE jobs SET priority = priority WHERE queue = 'elsewhere';",
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_vacuums_the_jobs_table_past_its_threshold() {
    let b = setup().await;
    dead_rows(&b, 5_000).await;
    let (dead, vacuums, vacuumed) = vacuum_stats(&b).await;
    assert!(
        dead >= 10_000 && vacuums == 0 && !vacuumed,
        "{dead} {vacuums}"
    );

    let worker = Worker::builder(
        b.client.clone(),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 2)
    .vacuum_threshold(Some(1_000))
    .build()
    .unwrap();
    let (stop, handle) = spawn_worker(worker);
    eventually(Duration::from_secs(45), "a vacuum", || async {
        let (dead, _, vacuumed) = vacuum_stats(&b).await;
        vacuumed && dead < 1_000
    })
    .await;
    stop.send(()).unwrap();
    handle.await.unwrap();
}

/// A `tracing` writer that keeps what it is given.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A role with only the grants of docs/OPERATIONS.md may not vacuum: the worker says so once (not once
/// per round), leaves the table to autovacuum, and goes on working.
// One thread: the capturing subscriber is the thread's default, and every task runs on it.
#[tokio::test(flavor = "current_thread")]
async fn a_role_that_may_not_vacuum_gets_one_warning_and_keeps_working() {
    let b = setup().await;
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let c = captured.clone();
            move || c.clone()
        })
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let schema = b.client.schema().quoted().to_owned();
    let role_name = format!("{}_vac", b.db.schema());
    let role = format!("\"{role_name}\"");
    b.raw
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA {schema} TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE
               ON {schema}.jobs, {schema}.jobs_archive, {schema}.maintenance_locks,
                  {schema}.queues TO {role};
             GRANT SELECT ON {schema}.schema_migrations TO {role};"
        ))
        .await
        .unwrap();
    dead_rows(&b, 2_000).await;
    let mut cfg: tokio_postgres::Config = b.db.url().parse().unwrap();
    cfg.user(&role_name);
    let client = Client::builder_from_config(cfg)
        .schema(b.db.schema())
        .pool_size(4)
        .build()
        .unwrap();
    let worker = Worker::builder(
        client.clone(),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 2)
    .vacuum_threshold(Some(100))
    .build()
    .unwrap();
    let (stop, handle) = spawn_worker(worker);
    // Three check intervals, with work going on.
    for i in 0..16 {
        client.enqueue(&NewJob::new("k", &i)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eventually(Duration::from_secs(10), "every job done", || async {
        b.count("status = 'done'").await == 16
    })
    .await;
    stop.send(()).unwrap();
    handle.await.unwrap();

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings = log.matches("may not VACUUM the jobs table").count();
    assert_eq!(warnings, 1, "{log}");
    assert!(!vacuum_stats(&b).await.2, "the table was vacuumed");

    drop(client);
    b.raw
        .batch_execute(&format!(
            "REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role};
             REVOKE ALL ON SCHEMA {schema} FROM {role};
             DROP OWNED BY {role}; DROP ROLE {role}"
        ))
        .await
        .ok();
}

/// Scale to zero: with the poll off, dead tuples past the threshold are left alone while the
/// worker has no work (no statement at all: the pool's connections do not move), and vacuumed
/// once real work comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_poll_off_an_idle_worker_vacuums_only_around_real_work() {
    let b = setup().await;
    let app = format!("vac-idle-{}", b.db.schema());
    dead_rows(&b, 1_000).await;
    let worker = Worker::builder(
        client(&b, &app),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 2)
    .poll_interval(None)
    .idle_connection_timeout(None)
    .vacuum_threshold(Some(100))
    .build()
    .unwrap();
    let (stop, handle) = spawn_worker(worker);
    // The start (its first claim) is work: let the rounds after it pass.
    tokio::time::sleep(Duration::from_secs(12)).await;
    more_dead_rows(&b).await;
    let snapshot = || async {
        let rows = b
            .raw
            .query(
                "SELECT pid, state_change::text FROM pg_stat_activity
                 WHERE application_name = $1 ORDER BY pid",
                &[&app],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|r| (r.get::<_, i32>(0), r.get::<_, String>(1)))
            .collect::<Vec<_>>()
    };
    let (_, vacuums, _) = vacuum_stats(&b).await;
    let before = snapshot().await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let after = snapshot().await;
    assert_eq!(before, after, "a statement was sent while idle");
    let (dead, idle_vacuums, _) = vacuum_stats(&b).await;
    assert_eq!(idle_vacuums, vacuums, "vacuumed while idle");
    assert!(dead >= 2_000, "{dead}");

    // Real work: the next round vacuums.
    b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    eventually(Duration::from_secs(15), "a vacuum after work", || async {
        vacuum_stats(&b).await.1 > vacuums
    })
    .await;
    stop.send(()).unwrap();
    handle.await.unwrap();
}

/// The worker's VACUUM gives way to DDL as autovacuum does: a `CREATE INDEX` issued while it
/// runs gets its lock within a fraction of a second, and a claim issued behind the waiting DDL
/// is not held for the VACUUM's whole length. The worker's connections run VACUUM with a cost
/// delay (a session setting in its URL) so that, on this small table, it lasts as long as it
/// would on a big one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_vacuum_gives_way_to_ddl() {
    let b = setup().await;
    dead_rows(&b, 50_000).await;
    let sep = if b.db.url().contains('?') { '&' } else { '?' };
    let slow = format!(
        "{}{sep}options=-c%20vacuum_cost_delay%3D100%20-c%20vacuum_cost_limit%3D100",
        b.db.url()
    );
    let worker = Worker::builder(
        Client::builder(&slow)
            .schema(b.db.schema())
            .pool_size(4)
            .application_name("vacuum-gives-way")
            .build()
            .unwrap(),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 2)
    .vacuum_threshold(Some(1_000))
    .build()
    .unwrap();
    let (stop, handle) = spawn_worker(worker);
    let vacuum_started = std::time::Instant::now();
    eventually(Duration::from_secs(30), "the worker's VACUUM", || async {
        b.raw
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = 'vacuum-gives-way' AND state = 'active'
                   AND query LIKE 'VACUUM%'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 1
    })
    .await;
    // The VACUUM holds its lock now; the migration's DDL queues for the table.
    let ddl_started = std::time::Instant::now();
    let ddl = {
        let conn = b.db.connect().await.unwrap();
        let schema = b.client.schema().quoted().to_owned();
        tokio::spawn(async move {
            conn.batch_execute(&format!("CREATE INDEX ON {schema}.jobs (created_at)"))
                .await
                .unwrap();
            ddl_started.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let claim_started = std::time::Instant::now();
    b.client
        .claim("elsewhere", 1, Duration::from_secs(60))
        .await
        .unwrap();
    let claim_took = claim_started.elapsed();
    let ddl_took = ddl.await.unwrap();
    assert!(
        ddl_took < Duration::from_secs(2),
        "the DDL waited {ddl_took:?} behind the VACUUM"
    );
    assert!(
        claim_took < Duration::from_secs(2),
        "a claim waited {claim_took:?} behind the DDL"
    );
    // Without giving way the VACUUM would have run this long yet: the test could fail.
    let vacuumed = b
        .raw
        .query_one(
            "SELECT vacuum_count FROM pg_stat_user_tables
             WHERE schemaname = $1 AND relname = 'jobs'",
            &[&b.db.schema()],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(vacuumed, 0, "the VACUUM ended by itself, too soon to tell");
    eprintln!(
        "VACUUM started after {:?}; DDL {ddl_took:?}, claim {claim_took:?}",
        vacuum_started.elapsed()
    );
    stop.send(()).unwrap();
    handle.await.unwrap();
}
