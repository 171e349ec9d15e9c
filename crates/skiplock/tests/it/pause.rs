//! Pausing a queue: no claim starts after the pause commits, whatever the worker hears
//! (LISTEN on, the poll alone, through PgBouncer), running jobs finish and are written, a
//! restarted worker stays paused, and a resume starts claims within a second.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use skiplock::{Client, JobContext, JobError, JobOptions, NewJob, Registry, RunStats, Worker};
use skiplock_testdb::{PgBouncer, TestDb};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::support::setup;
use crate::worker::eventually;

/// How long each job runs: long enough that jobs are running when the pause commits.
const HOLD: Duration = Duration::from_millis(300);

/// The claim time (database clock) of every job started, in start order.
type Starts = Arc<Mutex<Vec<(i64, SystemTime)>>>;

fn registry(starts: &Starts) -> Registry {
    let starts = starts.clone();
    Registry::new().register_handler(
        "k",
        JobOptions::default(),
        move |_p: String, ctx: JobContext| {
            let starts = starts.clone();
            async move {
                starts.lock().unwrap().push((ctx.id.0, ctx.claimed_at));
                tokio::time::sleep(HOLD).await;
                Ok::<(), JobError>(())
            }
        },
    )
}

fn spawn(w: Worker) -> (oneshot::Sender<()>, tokio::task::JoinHandle<RunStats>) {
    crate::worker::spawn_worker(w)
}

async fn stop(workers: Vec<(oneshot::Sender<()>, tokio::task::JoinHandle<RunStats>)>) {
    for (tx, h) in workers {
        let _ = tx.send(());
        let stats = h.await.unwrap();
        assert_eq!(stats.lost, 0, "{stats:?}");
    }
}

async fn db_now(raw: &tokio_postgres::Client) -> SystemTime {
    raw.query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0)
}

async fn count(raw: &tokio_postgres::Client, schema: &str, status: &str) -> i64 {
    raw.query_one(
        &format!("SELECT count(*) FROM \"{schema}\".jobs WHERE status = $1"),
        &[&status],
    )
    .await
    .unwrap()
    .get(0)
}

fn jobs(n: usize) -> Vec<NewJob> {
    (0..n).map(|i| NewJob::new("k", &i)).collect()
}

/// The whole story on workers made by `worker`: jobs running, pause, more jobs enqueued
/// (each insert notifies), no claim after the pause's commit, the running ones finish and
/// are written, then a resume starts claims within a second and everything runs.
///
/// `client` pauses, resumes and enqueues; `raw` is a direct connection for the database's
/// clock and the counts.
async fn pause_holds(
    client: &Client,
    raw: &tokio_postgres::Client,
    schema: &str,
    worker: impl Fn(Registry) -> Worker,
) {
    client.enqueue_many(&jobs(40)).await.unwrap();
    let starts: Starts = Arc::default();
    let workers: Vec<_> = (0..2).map(|_| spawn(worker(registry(&starts)))).collect();
    eventually(Duration::from_secs(20), "jobs running", || async {
        starts.lock().unwrap().len() >= 4
    })
    .await;

    let paused = client
        .pause_queue("default", Some("pause test"))
        .await
        .unwrap();
    assert!(paused.paused && paused.changed, "{paused:?}");
    // Later than the commit: a claim that started after this instant took nothing.
    let committed = db_now(raw).await;
    let started_before = starts.lock().unwrap().len();

    // New jobs notify every listening worker; they must not start.
    for chunk in jobs(10).chunks(2) {
        client.enqueue_many(chunk).await.unwrap();
    }
    // The jobs that were running finish, and their outcomes are written.
    eventually(
        Duration::from_secs(10),
        "running jobs to finish",
        || async { count(raw, schema, "running").await == 0 },
    )
    .await;
    // Several poll intervals and notifications later, still nothing new.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    {
        let starts = starts.lock().unwrap();
        let late: Vec<_> = starts.iter().filter(|(_, at)| *at >= committed).collect();
        assert!(
            late.is_empty(),
            "{} jobs claimed after the pause committed, the first: {:?} (the pause committed \
             before {committed:?})",
            late.len(),
            late.first()
        );
        assert!(
            starts.len() < 50,
            "{} jobs of 50 started despite the pause",
            starts.len()
        );
        // A claim in flight when the pause committed may have started jobs, no later one.
        assert!(starts.len() >= started_before);
    }
    let started = i64::try_from(starts.lock().unwrap().len()).unwrap();
    assert_eq!(count(raw, schema, "done").await, started);
    assert_eq!(count(raw, schema, "queued").await, 50 - started);

    // Resume: claims start within a second.
    let t = Instant::now();
    let resumed = client.resume_queue("default").await.unwrap();
    assert!(!resumed.paused && resumed.changed, "{resumed:?}");
    eventually(
        Duration::from_secs(5),
        "a claim after the resume",
        || async { starts.lock().unwrap().len() > started as usize },
    )
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "the first claim after the resume took {:?}",
        t.elapsed()
    );
    eventually(Duration::from_secs(30), "every job done", || async {
        count(raw, schema, "done").await == 50
    })
    .await;
    stop(workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_for_listening_workers_with_the_poll_off() {
    let b = setup().await;
    let schema = b.db.schema().to_owned();
    let url = b.db.url().to_owned();
    pause_holds(&b.client, &b.raw, &schema, |registry| {
        let c = Client::builder(&url)
            .schema(&schema)
            .pool_size(4)
            .build()
            .unwrap();
        Worker::builder(c, registry)
            .queue("default", 4)
            .poll_interval(None)
            .build()
            .unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_for_polling_workers_with_listen_off() {
    let b = setup().await;
    let schema = b.db.schema().to_owned();
    let url = b.db.url().to_owned();
    pause_holds(&b.client, &b.raw, &schema, |registry| {
        let c = Client::builder(&url)
            .schema(&schema)
            .pool_size(4)
            .build()
            .unwrap();
        Worker::builder(c, registry)
            .queue("default", 4)
            .listen(false)
            .poll_interval(Some(Duration::from_millis(200)))
            .build()
            .unwrap()
    })
    .await;
}

/// Workers, the pause and the resume all go through PgBouncer in transaction mode; the
/// workers' LISTEN connections go straight to the server, with the poll off, so that the
/// resume's notification is what starts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_through_pgbouncer_in_transaction_mode() {
    let db = TestDb::new().await;
    let Some(bouncer) = PgBouncer::start(db.url()).unwrap() else {
        eprintln!("pgbouncer is not installed: skipped");
        return;
    };
    let pooled = bouncer.through(db.url()).unwrap();
    let client = Client::builder(&pooled)
        .schema(db.schema())
        .pool_size(4)
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let raw = db.connect().await.unwrap();
    let direct = db.url().to_owned();
    pause_holds(&client, &raw, db.schema(), |registry| {
        let c = Client::builder(&pooled)
            .schema(db.schema())
            .pool_size(4)
            .build()
            .unwrap();
        Worker::builder(c, registry)
            .queue("default", 4)
            .listen_url(&direct)
            .poll_interval(None)
            .build()
            .unwrap()
    })
    .await;
}

/// A paused queue stays paused across worker restarts: a new worker (LISTEN on, the poll
/// on) claims nothing from it, and starts at once on the resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_stays_paused_when_workers_restart() {
    let b = setup().await;
    b.client
        .pause_queue("default", Some("deploy"))
        .await
        .unwrap();
    let committed = db_now(&b.raw).await;
    b.client.enqueue_many(&jobs(5)).await.unwrap();
    let starts: Starts = Arc::default();
    let worker = || {
        let c = crate::worker::client(&b, "pause-restart");
        Worker::builder(c, registry(&starts))
            .queue("default", 2)
            .poll_interval(Some(Duration::from_millis(200)))
            .build()
            .unwrap()
    };
    for _ in 0..2 {
        let w = spawn(worker());
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        b.client.enqueue(&NewJob::new("k", &"more")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop(vec![w]).await;
        assert_eq!(
            starts.lock().unwrap().len(),
            0,
            "a restarted worker claimed"
        );
    }
    assert_eq!(b.count("status = 'queued'").await, 7);

    let w = spawn(worker());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    b.client.resume_queue("default").await.unwrap();
    eventually(
        Duration::from_secs(5),
        "a claim after the resume",
        || async { !starts.lock().unwrap().is_empty() },
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    eventually(Duration::from_secs(20), "every job done", || async {
        b.count("status = 'done'").await == 7
    })
    .await;
    stop(vec![w]).await;
    assert!(starts.lock().unwrap().iter().all(|(_, at)| *at > committed));
}

/// The API: manual claims respect the pause; pausing twice keeps the first pause; the pause
/// through a transaction counts only once committed; queues() and health() show it;
/// other queues are not affected.
#[tokio::test]
async fn pause_and_resume_through_the_api() {
    let b = setup().await;
    let lease = Duration::from_secs(60);
    b.client.enqueue_many(&jobs(3)).await.unwrap();
    b.client
        .enqueue(&NewJob::new("k", &0).queue("other"))
        .await
        .unwrap();

    let first = b.client.pause_queue("default", Some("ops")).await.unwrap();
    assert!(first.paused && first.changed);
    assert_eq!(first.paused_by.as_deref(), Some("ops"));
    let again = b
        .client
        .pause_queue("default", Some("someone else"))
        .await
        .unwrap();
    assert!(again.paused && !again.changed);
    assert_eq!(
        (again.paused_at, again.paused_by.as_deref()),
        (first.paused_at, Some("ops"))
    );
    assert!(b
        .client
        .claim("default", 10, lease)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(b.client.claim("other", 10, lease).await.unwrap().len(), 1);

    let queues = b.client.queues().await.unwrap();
    let names: Vec<&str> = queues.iter().map(|q| q.queue.as_str()).collect();
    assert_eq!(names, ["default", "other"]);
    let d = &queues[0];
    assert!(d.paused && d.paused_at == first.paused_at && d.paused_by.as_deref() == Some("ops"));
    assert_eq!((d.queued, d.ready, d.running), (3, 3, 0));
    assert!(!queues[1].paused && queues[1].paused_at.is_none());
    assert_eq!((queues[1].queued, queues[1].running), (0, 1));
    let health = b.client.health(Duration::from_secs(60)).await.unwrap();
    let paused: Vec<(&str, bool)> = health
        .queues
        .iter()
        .map(|q| (q.queue.as_str(), q.paused))
        .collect();
    assert_eq!(paused, [("default", true), ("other", false)]);

    // A paused queue with no job is still listed.
    b.client.pause_queue("empty", None).await.unwrap();
    let health = b.client.health(Duration::from_secs(60)).await.unwrap();
    assert!(health.queues.iter().any(|q| q.queue == "empty" && q.paused));

    let resumed = b.client.resume_queue("default").await.unwrap();
    assert!(!resumed.paused && resumed.changed);
    assert!(!b.client.resume_queue("default").await.unwrap().changed);
    assert_eq!(b.client.claim("default", 10, lease).await.unwrap().len(), 3);
    let d = b.client.queues().await.unwrap().remove(0);
    assert!(!d.paused && d.paused_at.is_none() && d.updated_at.is_some());

    // Through a transaction: nothing until it commits, nothing at all after a rollback.
    b.client.enqueue_many(&jobs(4)).await.unwrap();
    let mut conn = b.client.pool().get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    b.client
        .pause_queue_tx(&tx, "default", Some("tx"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(b.client.claim("default", 1, lease).await.unwrap().len(), 1);
    let tx = conn.transaction().await.unwrap();
    b.client
        .pause_queue_tx(&tx, "default", Some("tx"))
        .await
        .unwrap();
    assert_eq!(b.client.claim("default", 1, lease).await.unwrap().len(), 1);
    tx.commit().await.unwrap();
    assert!(b
        .client
        .claim("default", 1, lease)
        .await
        .unwrap()
        .is_empty());
    let tx = conn.transaction().await.unwrap();
    b.client.resume_queue_tx(&tx, "default").await.unwrap();
    assert!(b
        .client
        .claim("default", 1, lease)
        .await
        .unwrap()
        .is_empty());
    tx.commit().await.unwrap();
    assert_eq!(b.client.claim("default", 1, lease).await.unwrap().len(), 1);
    drop(conn);

    // Bad input is refused before any SQL.
    assert!(b
        .client
        .pause_queue("no spaces", None)
        .await
        .unwrap_err()
        .is_invalid_input());
    assert!(b
        .client
        .pause_queue("default", Some(&"x".repeat(300)))
        .await
        .unwrap_err()
        .is_invalid_input());
}

/// The upgrade that adds `queues` gives every role its rights on `jobs` on `queues` too, so
/// that a least-privilege worker granted before the upgrade can still claim (every claim
/// reads `queues`), and one that could change jobs can pause.
#[tokio::test]
async fn the_upgrade_gives_roles_their_jobs_rights_on_queues() {
    let b = setup().await;
    let schema = b.client.schema().quoted().to_owned();
    let role_name = format!("{}_old", b.db.schema());
    let reader_name = format!("{}_reader", b.db.schema());
    // The schema as it was before migration 7 (and so before 8), with the grants of that time.
    b.raw
        .batch_execute(&format!(
            "DROP TABLE schedules;
             DROP FUNCTION schedules_notify();
             ALTER TABLE jobs DROP COLUMN schedule;
             ALTER TABLE jobs_archive DROP COLUMN schedule;
             DROP TABLE queues;
             DELETE FROM schema_migrations WHERE version >= 7;
             CREATE ROLE \"{role_name}\" LOGIN;
             CREATE ROLE \"{reader_name}\" LOGIN;
             GRANT USAGE ON SCHEMA {schema} TO \"{role_name}\", \"{reader_name}\";
             GRANT SELECT, INSERT, UPDATE, DELETE
               ON {schema}.jobs, {schema}.jobs_archive, {schema}.maintenance_locks
               TO \"{role_name}\";
             GRANT SELECT ON {schema}.jobs TO \"{reader_name}\";"
        ))
        .await
        .unwrap();
    let report = b.client.migrate().await.unwrap();
    // 7 and 8, and every later one again (each may run again on the schema as it is).
    assert_eq!(
        report.applied[..2],
        [(7, "queue_pause"), (8, "periodic_jobs")]
    );
    assert_eq!(
        report.applied.last().map(|m| m.0),
        Some(skiplock::latest_version())
    );

    let as_role = |name: &str| {
        let mut cfg: tokio_postgres::Config = b.db.url().parse().unwrap();
        cfg.user(name);
        Client::builder_from_config(cfg)
            .schema(b.db.schema())
            .pool_size(2)
            .build()
            .unwrap()
    };
    let worker = as_role(&role_name);
    worker.enqueue(&NewJob::new("k", &1)).await.unwrap();
    worker
        .pause_queue("default", Some("old role"))
        .await
        .unwrap();
    let lease = Duration::from_secs(60);
    assert!(worker.claim("default", 1, lease).await.unwrap().is_empty());
    worker.resume_queue("default").await.unwrap();
    assert_eq!(worker.claim("default", 1, lease).await.unwrap().len(), 1);
    // A role that could only read jobs can read the pauses, not make them.
    let reader = as_role(&reader_name);
    assert_eq!(reader.queues().await.unwrap().len(), 1);
    let e = reader.pause_queue("default", None).await.unwrap_err();
    assert!(format!("{:?}", e).contains("permission denied"), "{e:?}");
}

/// Pause and resume through an sqlx transaction: only once it commits.
#[cfg(feature = "sqlx-0_8")]
#[tokio::test]
async fn pause_and_resume_follow_an_sqlx_transaction() {
    let b = setup().await;
    let lease = Duration::from_secs(60);
    b.client.enqueue_many(&jobs(3)).await.unwrap();
    let pool = sqlx::PgPool::connect(b.db.url()).await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    let p = b
        .client
        .pause_queue_tx(&mut *tx, "default", Some("sqlx"))
        .await
        .unwrap();
    assert!(p.paused && p.changed && p.paused_at.is_some());
    assert_eq!(p.paused_by.as_deref(), Some("sqlx"));
    tx.rollback().await.unwrap();
    assert_eq!(b.client.claim("default", 1, lease).await.unwrap().len(), 1);

    let mut tx = pool.begin().await.unwrap();
    b.client
        .pause_queue_tx(&mut tx, "default", None)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(b
        .client
        .claim("default", 1, lease)
        .await
        .unwrap()
        .is_empty());

    let mut tx = pool.begin().await.unwrap();
    let r = b.client.resume_queue_tx(&mut *tx, "default").await.unwrap();
    assert!(!r.paused && r.changed);
    tx.commit().await.unwrap();
    assert_eq!(b.client.claim("default", 2, lease).await.unwrap().len(), 2);
}

/// `Client::queue_paused` reads the queue's `queues` row: false for a queue never paused
/// (known or not), true once paused, false again after the resume; a bad name is refused
/// and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_paused_follows_pause_and_resume() {
    let b = setup().await;
    b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    assert!(!b.client.queue_paused("default").await.unwrap());
    assert!(!b.client.queue_paused("never-seen").await.unwrap());
    b.client.pause_queue("default", Some("test")).await.unwrap();
    assert!(b.client.queue_paused("default").await.unwrap());
    assert!(!b.client.queue_paused("other").await.unwrap());
    b.client.resume_queue("default").await.unwrap();
    assert!(!b.client.queue_paused("default").await.unwrap());
    let err = b.client.queue_paused("no spaces").await.unwrap_err();
    assert!(err.to_string().contains("queue"), "{err}");
    let rows: i64 = b
        .raw
        .query_one("SELECT count(*) FROM queues WHERE name = 'no spaces'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
}
