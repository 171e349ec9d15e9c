//! Wake-ups sent only while a worker waits (migration 15): an INSERT notifies a queue only
//! while some session waits on it, and a worker waits on its queue only when its claims come
//! back short. These tests hold a worker busy, insert behind its back, and check both that
//! no notification was sent and that the job still starts at once with the poll off.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use skiplock::{JobContext, JobError, JobOptions, NewJob, Registry, Worker};
use tokio::sync::Semaphore;

use crate::support::{listen, setup, Bundle};
use crate::worker::{client, eventually, spawn_worker};

/// How many stripes of `queue`'s waiters some session holds (out of eight).
pub(crate) async fn stripes_held(b: &Bundle, queue: &str) -> i64 {
    let sql = b.client.schema().render(
        "SELECT count(*) FROM pg_locks l
         JOIN generate_series(0, {schema}.jobs_waiting_stripes() - 1) AS s
           ON ((l.classid::int8 << 32) | l.objid::int8) = {schema}.jobs_waiting_key($1, s)
         WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
           AND l.mode = 'ShareLock'",
    );
    b.raw.query_one(&sql, &[&queue]).await.unwrap().get(0)
}

/// A worker with the poll off and LISTEN on, one slot on `default`: a job whose payload is
/// `"block"` holds its slot until `gate` gets a permit; every start is recorded.
fn one_slot(b: &Bundle, app: &str, gate: &Arc<Semaphore>, started: &Started) -> Worker {
    let (gate, started) = (gate.clone(), started.clone());
    let handler = move |p: String, _c: JobContext| {
        let (gate, started) = (gate.clone(), started.clone());
        async move {
            started.lock().unwrap().push((p.clone(), Instant::now()));
            if p == "\"block\"" {
                gate.acquire().await.unwrap().forget();
            }
            Ok::<(), JobError>(())
        }
    };
    Worker::builder(
        client(b, app),
        Registry::new().register_handler("k", JobOptions::default(), handler),
    )
    .queue("default", 1)
    .poll_interval(None)
    .build()
    .unwrap()
}

/// The next notification's payload that is not a worker's self-test.
async fn next_wake(heard: &mut crate::support::Listener) -> String {
    loop {
        let n = heard.next().await;
        if !n.payload().starts_with("probe:") {
            return n.payload().to_owned();
        }
    }
}

type Started = Arc<Mutex<Vec<(String, Instant)>>>;

fn started_at(started: &Started, payload: &str) -> Option<Instant> {
    let want = format!("\"{payload}\"");
    started
        .lock()
        .unwrap()
        .iter()
        .find(|(p, _)| *p == want)
        .map(|(_, t)| *t)
}

/// The case the waiting exists for: the worker is busy, so an INSERT into its queue takes a
/// stripe and sends no notification, and its transaction is still open when the worker goes
/// idle. The worker's LISTEN connection cannot hold that stripe until the transaction ends;
/// once it does, the worker claims once more, and the job starts at once, with the poll off.
/// (A negative control: when the listener counted a queue as waited on with a stripe
/// missing, the job never started within the limit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_inserted_while_the_worker_was_busy_starts_when_its_transaction_commits() {
    let b = setup().await;
    let gate = Arc::new(Semaphore::new(0));
    let started: Started = Arc::default();
    let (stop, handle) = spawn_worker(one_slot(&b, "wait-race", &gate, &started));
    // Idle: the worker waits on its queue (all eight stripes).
    eventually(Duration::from_secs(10), "the worker waiting", || async {
        stripes_held(&b, "default").await == 8
    })
    .await;

    // Busy: its one slot is taken, its claim was full, it stops waiting.
    b.client.enqueue(&NewJob::new("k", &"block")).await.unwrap();
    eventually(Duration::from_secs(5), "the blocking job", || async {
        started_at(&started, "block").is_some()
    })
    .await;
    eventually(Duration::from_secs(5), "the worker busy", || async {
        stripes_held(&b, "default").await == 0
    })
    .await;

    // An INSERT that stays uncommitted: it takes its stripe and notifies nobody.
    let mut conn = b.db.connect().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    b.client
        .enqueue_tx(&tx, &NewJob::new("k", &"behind"))
        .await
        .unwrap();

    // The worker goes idle: it waits on every stripe but the transaction's.
    gate.add_permits(1);
    eventually(Duration::from_secs(5), "seven stripes held", || async {
        stripes_held(&b, "default").await == 7
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stripes_held(&b, "default").await, 7, "the eighth waits");
    assert!(started_at(&started, "behind").is_none());

    let committed = Instant::now();
    tx.commit().await.unwrap();
    eventually(
        Duration::from_secs(2),
        "the job inserted behind",
        || async { started_at(&started, "behind").is_some() },
    )
    .await;
    let waited = started_at(&started, "behind").unwrap() - committed;
    assert!(
        waited < Duration::from_secs(1),
        "started {waited:?} after its commit"
    );
    eventually(
        Duration::from_secs(5),
        "the worker waiting again",
        || async { stripes_held(&b, "default").await == 8 },
    )
    .await;

    let _ = stop.send(());
    let stats = handle.await.unwrap();
    assert_eq!(stats.done, 2);
}

/// While the worker is busy, INSERTs into its queue notify nobody (a session that LISTENs
/// without waiting hears nothing); once it is idle, they notify again, and a job enqueued
/// then starts at once with the poll off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_notify_only_while_a_worker_waits() {
    let b = setup().await;
    let mut heard = listen(b.db.url(), &b.client.schema().channel_quoted()).await;
    let gate = Arc::new(Semaphore::new(0));
    let started: Started = Arc::default();
    let (stop, handle) = spawn_worker(one_slot(&b, "wait-quiet", &gate, &started));
    eventually(Duration::from_secs(10), "the worker waiting", || async {
        stripes_held(&b, "default").await == 8
    })
    .await;

    b.client.enqueue(&NewJob::new("k", &"block")).await.unwrap();
    assert_eq!(next_wake(&mut heard).await, "default", "idle: notified");
    eventually(Duration::from_secs(5), "the worker busy", || async {
        stripes_held(&b, "default").await == 0
    })
    .await;
    // Other sessions' notifications (the worker's self-tests) may come; none for the queue.
    let quiet = |heard: &mut crate::support::Listener| {
        let mut n = 0;
        while let Ok(m) = heard.rx.try_recv() {
            n += usize::from(m.payload() == "default");
        }
        n
    };
    let _ = quiet(&mut heard);
    for i in 0..20 {
        b.client
            .enqueue(&NewJob::new("k", &format!("busy {i}")))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(quiet(&mut heard), 0, "busy: no INSERT notified");

    // Idle again: the 20 run, the worker waits again, and the next INSERT notifies.
    gate.add_permits(1);
    eventually(Duration::from_secs(5), "the 20 jobs", || async {
        started.lock().unwrap().len() == 21
    })
    .await;
    eventually(Duration::from_secs(5), "the worker waiting", || async {
        stripes_held(&b, "default").await == 8
    })
    .await;
    let _ = quiet(&mut heard);
    let t = Instant::now();
    b.client.enqueue(&NewJob::new("k", &"idle")).await.unwrap();
    assert_eq!(
        next_wake(&mut heard).await,
        "default",
        "idle again: notified"
    );
    eventually(
        Duration::from_secs(2),
        "the job enqueued while idle",
        || async { started_at(&started, "idle").is_some() },
    )
    .await;
    assert!(started_at(&started, "idle").unwrap() - t < Duration::from_secs(1));

    let _ = stop.send(());
    assert_eq!(handle.await.unwrap().done, 22);
}

/// Jobs arriving steadily: a worker whose claims come back short but still find jobs claims
/// again shortly instead of waiting, so most INSERTs notify nobody (a worker that waited
/// after every short claim made nearly every one notify, and notifying commits are
/// serialised by PostgreSQL). Every job still runs, with the poll off. (A negative control:
/// with the worker waiting after every short claim, all 2,000 INSERTs notified; without it,
/// 24 to 57 in three runs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_keeps_finding_jobs_claims_again_without_being_told() {
    let b = setup().await;
    let mut heard = listen(b.db.url(), &b.client.schema().channel_quoted()).await;
    let w = Worker::builder(
        client(&b, "wait-steady"),
        Registry::new().register_handler("k", JobOptions::default(), crate::worker::noop()),
    )
    .queue("default", 50)
    .poll_interval(None)
    .build()
    .unwrap();
    let (stop, handle) = spawn_worker(w);
    eventually(Duration::from_secs(10), "the worker waiting", || async {
        stripes_held(&b, "default").await == 8
    })
    .await;

    const TASKS: usize = 8;
    const EACH: usize = 250;
    let enqueuer = client(&b, "wait-steady-enqueue");
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let enqueuer = enqueuer.clone();
        tasks.spawn(async move {
            for i in 0..EACH {
                enqueuer
                    .enqueue(&NewJob::new("k", &format!("{t}/{i}")))
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let done = || async {
        let sql = b
            .client
            .schema()
            .render("SELECT count(*) FROM {schema}.jobs WHERE status = 'done'");
        b.raw.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0)
    };
    eventually(Duration::from_secs(30), "every job done", || async {
        done().await == (TASKS * EACH) as i64
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut notified = 0usize;
    while let Ok(m) = heard.rx.try_recv() {
        notified += usize::from(m.payload() == "default");
    }
    assert!(
        notified < TASKS * EACH / 2,
        "{notified} of {} INSERTs notified",
        TASKS * EACH
    );

    let _ = stop.send(());
    assert_eq!(handle.await.unwrap().done, (TASKS * EACH) as u64);
}
