//! The worker's outcome writes under trouble: a row another session holds locked, an error
//! text the database cannot encode, and a write that keeps failing for longer than a lease.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use skiplock::{Client, JobContext, JobError, JobOptions, JobState, NewJob, Registry, Worker};
use tokio::sync::{oneshot, Notify};

use crate::support::{setup, Bundle};

async fn eventually<F, Fut>(limit: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn spawn(
    w: Worker,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<skiplock::RunStats>,
) {
    let (tx, rx) = oneshot::channel::<()>();
    let h = tokio::spawn(async move {
        w.run(async {
            let _ = rx.await;
        })
        .await
        .unwrap()
    });
    (tx, h)
}

/// One job's row is locked by another session when its handler ends: the other outcomes of
/// the batch are written at once; the locked one is written once the lock is released; no
/// job is counted lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_row_does_not_hold_back_the_rest_of_the_batch() {
    let mut b = setup().await;
    let started = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Notify::new());
    let (s, r) = (started.clone(), release.clone());
    let registry = Registry::new().register_handler(
        "wait",
        JobOptions::default(),
        move |_p: String, _c: JobContext| {
            let (s, r) = (s.clone(), r.clone());
            async move {
                let waiting = r.notified();
                s.fetch_add(1, Ordering::SeqCst);
                waiting.await;
                Ok::<(), JobError>(())
            }
        },
    );
    let ids = b
        .client
        .enqueue_many(&(0..4).map(|i| NewJob::new("wait", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("default", 4)
        .build()
        .unwrap();
    let (stop, handle) = spawn(worker);
    eventually(Duration::from_secs(10), "all four running", || {
        let s = started.clone();
        async move { s.load(Ordering::SeqCst) == 4 }
    })
    .await;
    let schema = b.db.schema().to_owned();
    let tx = b.raw.transaction().await.unwrap();
    tx.execute(
        &format!("SELECT 1 FROM \"{schema}\".jobs WHERE id = $1 FOR UPDATE"),
        &[&ids[0].0],
    )
    .await
    .unwrap();
    release.notify_waiters();
    let checker = b.db.connect().await.unwrap();
    let t0 = std::time::Instant::now();
    while done(&checker, &schema).await < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "the batch waited for the locked row"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        done(&checker, &schema).await,
        3,
        "the locked row cannot be written yet"
    );
    tx.rollback().await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the locked job written",
        || async { b.client.get(ids[0]).await.unwrap().unwrap().state == JobState::Done },
    )
    .await;
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!((stats.done, stats.lost), (4, 0), "{stats:?}");
}

async fn done(checker: &tokio_postgres::Client, schema: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM \"{schema}\".jobs WHERE status = 'done'");
    checker.query_one(&sql, &[]).await.unwrap().get(0)
}

fn database_url(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..].find('/').map(|i| i + scheme_end);
    let host = path_start.map_or(base, |i| &base[..i]);
    format!("{host}/{name}{query}")
}

/// On a LATIN1 database, one handler's error holds characters LATIN1 cannot store: the
/// successes of its batch are written, and so is the failure, its text escaped to ASCII.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_text_the_database_cannot_encode_does_not_drop_the_batch() {
    let b = setup().await;
    let name = format!("latin1_{}", b.db.schema());
    b.raw
        .batch_execute(&format!(
            "CREATE DATABASE \"{name}\" WITH ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' \
             TEMPLATE template0"
        ))
        .await
        .unwrap();
    let url = database_url(b.db.url(), &name);
    let client = Client::builder(&url).pool_size(4).build().unwrap();
    client.migrate().await.unwrap();
    let mut jobs: Vec<NewJob> = (0..5).map(|i| NewJob::new("ok", &i)).collect();
    jobs.insert(2, NewJob::new("euro", &"bad"));
    let ids = client.enqueue_many(&jobs).await.unwrap();
    let registry = Registry::new()
        .register_handler(
            "ok",
            JobOptions::default(),
            |_p: String, _c: JobContext| async { Ok::<(), JobError>(()) },
        )
        .register_handler(
            "euro",
            JobOptions::default(),
            |_p: String, _c: JobContext| async {
                Err::<(), JobError>(JobError::discard("price 5 € 🎉 rejected"))
            },
        );
    let stats = Worker::builder(client.clone(), registry)
        .queue("default", 8)
        .listen(false)
        .build()
        .unwrap()
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!(
        (stats.done, stats.failed, stats.lost),
        (5, 1, 0),
        "{stats:?}"
    );
    for (i, id) in ids.iter().enumerate() {
        let row = client.get(*id).await.unwrap().unwrap();
        if i == 2 {
            assert_eq!(row.state, JobState::Failed);
            let e = row.last_error.unwrap();
            assert!(
                e.contains("price 5 ") && e.contains("rejected") && e.is_ascii(),
                "{e}"
            );
        } else {
            assert_eq!(row.state, JobState::Done, "job {i}");
        }
    }
    // The manual API escapes too.
    let id = client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let j = client
        .claim("default", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .remove(0);
    let out = client
        .fail(id, j.attempt, "naïve ✓", skiplock::Retry::Never)
        .await
        .unwrap();
    assert_eq!(out, skiplock::FailOutcome::Failed);
    let e = client.get(id).await.unwrap().unwrap().last_error.unwrap();
    assert!(e.starts_with("na") && e.is_ascii(), "{e}");
    drop(client);
    let _ = b
        .raw
        .batch_execute(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .await;
}

/// The outcome write keeps failing for longer than two leases: the heartbeat keeps renewing
/// the finished job's lease meanwhile, so the reaper never hands it out again, and the
/// outcome is written once the database accepts it (one attempt, nothing lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_outcome_keeps_its_lease_until_it_is_written() {
    let b: Bundle = setup().await;
    let s = b.db.schema().to_owned();
    b.raw
        .batch_execute(&format!(
            "CREATE TABLE \"{s}\".ctl (block bool NOT NULL);
             INSERT INTO \"{s}\".ctl VALUES (true);
             CREATE FUNCTION \"{s}\".refuse_done() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF NEW.status = 'done' AND (SELECT block FROM \"{s}\".ctl) THEN
                 RAISE EXCEPTION 'outcome writes fail for now' USING ERRCODE = '40001';
               END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_done BEFORE UPDATE ON \"{s}\".jobs
               FOR EACH ROW EXECUTE FUNCTION \"{s}\".refuse_done();"
        ))
        .await
        .unwrap();
    let registry = Registry::new().register_handler(
        "quick",
        JobOptions::default(),
        |_p: String, _c: JobContext| async { Ok::<(), JobError>(()) },
    );
    let id = b.client.enqueue(&NewJob::new("quick", &1)).await.unwrap();
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("default", 2)
        .lease(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(200))
        .reap_interval(Duration::from_millis(200))
        .poll_interval(Some(Duration::from_millis(200)))
        .build()
        .unwrap();
    let (stop, handle) = spawn(worker);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Running, 1), "{row:?}");
    b.raw
        .batch_execute(&format!("UPDATE \"{s}\".ctl SET block = false"))
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the outcome written", || async {
        b.client.get(id).await.unwrap().unwrap().state == JobState::Done
    })
    .await;
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!((row.attempts, row.last_error), (1, None));
    assert_eq!(
        (stats.done, stats.lost, stats.reaped),
        (1, 0, 0),
        "{stats:?}"
    );
}
