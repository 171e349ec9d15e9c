//! Workers in the `workers` table, the attempt history and the per-minute rollup
//! (migration 14), against a real server.

use std::time::{Duration, SystemTime};

use skiplock::{
    Backoff, JobError, JobOptions, JobState, NewJob, Registry, Retry, Worker, WorkerEvent,
    WorkerRow, WorkerState,
};
use tokio::sync::broadcast;

use crate::support::{setup, Bundle};
use crate::worker::{client, eventually, finished, noop, spawn_worker, wait_for};

/// Waits for the worker's registration; its row id.
async fn registered(events: &mut broadcast::Receiver<WorkerEvent>, limit: Duration) -> i64 {
    wait_for(events, limit, "the worker's registration", |e| match e {
        WorkerEvent::Registered { id } => Some(*id),
        _ => None,
    })
    .await
}

async fn row(b: &Bundle, id: i64) -> WorkerRow {
    b.client
        .workers()
        .await
        .unwrap()
        .into_iter()
        .find(|w| w.id == id)
        .unwrap_or_else(|| panic!("worker {id} is not listed"))
}

/// The row's version (xmin) and last_seen: any write to it changes the first.
async fn row_version(b: &Bundle, id: i64) -> (String, SystemTime) {
    let r = b
        .raw
        .query_one(
            "SELECT xmin::text, last_seen FROM workers WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

/// A worker appears within seconds of its start, with its host, pid, queues, concurrency and
/// settings; it is running while it writes its presence, and stopped (gone, `stopped_at`
/// set) after a clean shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_registers_at_start_and_is_marked_stopped_at_shutdown() {
    let b = setup().await;
    let worker = Worker::builder(
        client(&b, "presence"),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 3)
    .queue("emails", 2)
    .presence_interval(Duration::from_millis(200))
    .build()
    .unwrap();
    let mut events = worker.subscribe();
    let started = std::time::Instant::now();
    let (stop, handle) = spawn_worker(worker);
    let id = registered(&mut events, Duration::from_secs(5)).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let w = row(&b, id).await;
    assert_eq!(w.host, host());
    assert_eq!(w.pid, i32::try_from(std::process::id()).unwrap());
    assert_eq!(
        w.queues,
        [("default".to_owned(), 3), ("emails".to_owned(), 2)]
    );
    assert_eq!(w.concurrency, 5);
    assert!(!w.poll_off);
    assert_eq!(w.heartbeat, Duration::from_millis(200));
    assert_eq!(w.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(w.state, WorkerState::Running);
    assert_eq!(w.stopped_at, None);

    // A polling worker writes its presence on its interval, idle or not.
    let (v0, seen0) = row_version(&b, id).await;
    eventually(Duration::from_secs(5), "a presence write", || async {
        row_version(&b, id).await.0 != v0
    })
    .await;
    assert!(row_version(&b, id).await.1 > seen0);

    stop.send(()).unwrap();
    handle.await.unwrap();
    let w = row(&b, id).await;
    assert!(w.stopped_at.is_some());
    assert_eq!(w.state, WorkerState::Gone);
    assert_eq!(w.running, 0);
}

/// A polling worker that dies without shutting down (its tasks aborted, as when its process
/// is killed) is shown gone once silent past its interval plus the grace; while alive, the
/// same wait leaves it running (the negative control: its writes keep it so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_worker_that_dies_is_shown_gone_after_its_interval() {
    let b = setup().await;
    let worker = Worker::builder(
        client(&b, "presence-dies"),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 1)
    .presence_interval(Duration::from_millis(300))
    .build()
    .unwrap();
    let mut events = worker.subscribe();
    let (_stop, handle) = spawn_worker(worker);
    let id = registered(&mut events, Duration::from_secs(5)).await;
    // Longer than the interval plus the grace (0.3 s + 2 s): still running.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(row(&b, id).await.state, WorkerState::Running);

    handle.abort();
    let _ = handle.await;
    let died = std::time::Instant::now();
    eventually(
        Duration::from_secs(10),
        "the dead worker shown gone",
        || async { row(&b, id).await.state == WorkerState::Gone },
    )
    .await;
    assert!(died.elapsed() >= Duration::from_secs(1), "gone too soon");
    let w = row(&b, id).await;
    assert_eq!(w.stopped_at, None, "it did not stop cleanly");
}

/// With the poll off, an idle worker writes nothing to its row (its version stays the same
/// for many intervals) and is shown sleeping, not gone; real work makes it write again (the
/// negative control: the comparison sees a write when there is one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_off_worker_writes_nothing_while_idle_and_is_shown_sleeping() {
    let b = setup().await;
    let worker = Worker::builder(
        client(&b, "presence-idle"),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 2)
    .poll_interval(None)
    .presence_interval(Duration::from_millis(200))
    .build()
    .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    let id = registered(&mut events, Duration::from_secs(5)).await;
    assert!(row(&b, id).await.poll_off);
    let job = b.client.enqueue(&NewJob::new("k", &0)).await.unwrap();
    finished(&mut events, Duration::from_secs(10), job).await;
    // The round after the work writes once; then nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = row_version(&b, id).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        row_version(&b, id).await,
        before,
        "an idle poll-off worker wrote its presence"
    );
    assert_eq!(row(&b, id).await.state, WorkerState::Sleeping);

    let job = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    finished(&mut events, Duration::from_secs(10), job).await;
    eventually(
        Duration::from_secs(5),
        "a presence write after work",
        || async { row_version(&b, id).await.0 != before.0 },
    )
    .await;
    assert_eq!(row(&b, id).await.state, WorkerState::Running);
    stop.send(()).unwrap();
    handle.await.unwrap();
    assert_eq!(row(&b, id).await.state, WorkerState::Gone);
}

/// A failed attempt is appended to the job's history, which keeps the last 20 (the 21st
/// pushes out the first); the reaper appends an expired lease; a completion leaves the
/// history alone.
#[tokio::test]
async fn the_attempt_history_keeps_the_last_20_and_the_reaper_appends() {
    let b = setup().await;
    let id = b
        .client
        .enqueue(&NewJob::new("k", &0).max_attempts(40))
        .await
        .unwrap();
    let lease = Duration::from_secs(30);
    let backoff =
        Retry::Backoff(Backoff::new(Duration::from_millis(1), Duration::from_millis(1)).unwrap());
    for n in 1..=21 {
        b.make_ready(id).await;
        let j = b.client.claim("default", 1, lease).await.unwrap().remove(0);
        assert_eq!(j.attempt, n);
        if n == 21 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let retry = if n == 21 { Retry::Never } else { backoff };
        let _ = b
            .client
            .fail(id, j.attempt, &format!("boom {n}"), retry)
            .await
            .unwrap();
        if n == 20 {
            let errors = b.client.get(id).await.unwrap().unwrap().errors;
            assert_eq!(errors.len(), 20);
            assert_eq!(errors[0].attempt, 1);
            assert_eq!(errors[0].error.as_deref(), Some("boom 1"));
        }
    }
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Failed);
    let attempts: Vec<i32> = row.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(
        attempts,
        (2..=21).collect::<Vec<_>>(),
        "the 21st pushes out the first"
    );
    let last = row.errors.last().unwrap();
    assert_eq!(last.error.as_deref(), Some("boom 21"));
    let ran = last.ran_ms.unwrap();
    assert!((300..10_000).contains(&ran), "ran {ran} ms");
    assert!(row.errors.windows(2).all(|w| w[0].at <= w[1].at));

    // The reaper: an expired lease is an attempt that ended.
    b.raw
        .execute(
            "UPDATE jobs SET status = 'queued', finished_at = NULL WHERE id = $1",
            &[&id.0],
        )
        .await
        .unwrap();
    b.make_ready(id).await;
    let j = b.client.claim("default", 1, lease).await.unwrap().remove(0);
    b.expire_lease(id).await;
    let reaped = b.client.reap().await.unwrap();
    assert_eq!(reaped.len(), 1);
    let errors = b.client.get(id).await.unwrap().unwrap().errors;
    assert_eq!(errors.len(), 20);
    assert_eq!(errors[0].attempt, 3);
    let last = errors.last().unwrap();
    assert_eq!(
        (last.attempt, last.error.as_deref()),
        (j.attempt, Some("lease expired"))
    );

    // A completion leaves the history as it was.
    b.make_ready(id).await;
    let j = b.client.claim("default", 1, lease).await.unwrap().remove(0);
    let _ = b.client.complete(id, j.attempt).await.unwrap();
    let done = b.client.get(id).await.unwrap().unwrap();
    assert_eq!(done.state, JobState::Done);
    assert_eq!(done.errors, errors);
}

/// The worker's outcomes go through the same statement: a handler's error is in the history,
/// and a job that never failed has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_failed_attempt_is_in_the_history() {
    let b = setup().await;
    let registry = Registry::new()
        .register_handler("bad", JobOptions::default(), |_p, _c| async {
            Err::<(), JobError>(JobError::retry("no luck"))
        })
        .register_handler("good", JobOptions::default(), noop());
    let bad = b
        .client
        .enqueue(&NewJob::new("bad", &0).max_attempts(1))
        .await
        .unwrap();
    let good = b.client.enqueue(&NewJob::new("good", &0)).await.unwrap();
    Worker::builder(b.client.clone(), registry)
        .queue("default", 2)
        .build()
        .unwrap()
        .run_until_idle()
        .await
        .unwrap();
    let row = b.client.get(bad).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Failed);
    assert_eq!(row.errors.len(), 1);
    assert_eq!(row.errors[0].attempt, 1);
    assert!(row.errors[0].error.as_deref().unwrap().contains("no luck"));
    assert!(row.errors[0].ran_ms.is_some());
    assert!(b.client.get(good).await.unwrap().unwrap().errors.is_empty());
}

/// The gauges service writes the minute's exact done and failed counts and its depths;
/// rounds in the same minute overwrite the row (they do not add up), the minute before gets
/// its final counts, and rows older than 25 hours are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollup_counts_a_minute_exactly() {
    let b = setup().await;
    // Far enough from the end of a minute (by the database's clock) for the test to fit in it.
    loop {
        let s: f64 = b
            .raw
            .query_one("SELECT extract(second FROM now())::float8", &[])
            .await
            .unwrap()
            .get(0);
        if s < 30.0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs_f64(60.5 - s)).await;
    }
    let lease = Duration::from_secs(30);
    let ids = b
        .client
        .enqueue_many(&(0..12).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    b.client
        .enqueue(&NewJob::new("k", &0).delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    // 5 done, 2 failed, 1 running, 4 ready, 1 scheduled.
    let claimed = b.client.claim("default", 8, lease).await.unwrap();
    for j in &claimed[..5] {
        let _ = b.client.complete(j.id, j.attempt).await.unwrap();
    }
    for j in &claimed[5..7] {
        let _ = b
            .client
            .fail(j.id, j.attempt, "no", Retry::Never)
            .await
            .unwrap();
    }
    // Two more done in the minute before, and a row from two days ago.
    let early: Vec<i64> = ids[8..10].iter().map(|i| i.0).collect();
    b.raw
        .execute(
            "UPDATE jobs SET status = 'done',
                 finished_at = date_trunc('minute', now()) - interval '30 seconds'
             WHERE id = ANY($1)",
            &[&early],
        )
        .await
        .unwrap();
    b.raw
        .execute(
            "INSERT INTO queue_stats (queue, minute) VALUES ('default', now() - interval '2 days')",
            &[],
        )
        .await
        .unwrap();

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let gauges = {
        let client = b.client.clone();
        tokio::spawn(async move {
            skiplock::metrics::publish_gauges(&client, Duration::from_millis(100), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        })
    };
    let minute = |back: i32| {
        let b = &b;
        async move {
            b.raw
                .query_opt(
                    "SELECT done, failed, available, scheduled, running FROM queue_stats
                     WHERE queue = 'default'
                       AND minute = date_trunc('minute', now()) - $1::int4 * interval '1 minute'",
                    &[&back],
                )
                .await
                .unwrap()
                .map(|r| {
                    (
                        r.get::<_, i64>(0),
                        r.get::<_, i64>(1),
                        r.get::<_, i64>(2),
                        r.get::<_, i64>(3),
                        r.get::<_, i64>(4),
                    )
                })
        }
    };
    eventually(Duration::from_secs(10), "the minute's row", || async {
        minute(0).await.is_some()
    })
    .await;
    // Several rounds later, the same exact counts (each round overwrites the row).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(minute(0).await, Some((5, 2, 2, 1, 1)));
    assert_eq!(minute(1).await.map(|m| (m.0, m.1)), Some((2, 0)));
    let old: i64 = b
        .raw
        .query_one(
            "SELECT count(*) FROM queue_stats WHERE minute < now() - interval '25 hours'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(old, 0, "rows older than 25 hours are deleted");

    // One more completion: the next rounds count it once.
    let _ = b
        .client
        .complete(claimed[7].id, claimed[7].attempt)
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the new count", || async {
        minute(0).await.map(|m| m.0) == Some(6)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(minute(0).await, Some((6, 2, 2, 1, 0)));

    let rows = b
        .client
        .queue_stats(SystemTime::now() - Duration::from_secs(300))
        .await
        .unwrap();
    let last = rows.last().unwrap();
    assert_eq!(
        (last.queue.as_str(), last.done, last.failed, last.running),
        ("default", 6, 2, 0)
    );
    stop.send(()).unwrap();
    gauges.await.unwrap();
}
