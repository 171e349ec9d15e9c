//! The worker runtime's harder cases: panics outside the handler's future, two attempts of
//! one job on one worker, wake-ups with the poll off, cancel notifications, LISTEN that
//! hears nothing, handlers that hold every pool connection, a drain told to stop, and a worker
//! that shares its client's pool.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use skiplock::{
    Backoff, BoxFuture, Client, Handler, JobContext, JobError, JobId, JobOptions, JobState, NewJob,
    Registry, Worker,
};
use skiplock_testdb::{PgBouncer, TestDb};

use crate::support::{setup, Bundle};
use crate::worker::{client, eventually, listener_pid, noop, spawn_worker};

/// A hand-written handler whose `call` panics before it returns a future.
struct PanicsInCall;

impl Handler for PanicsInCall {
    fn call(&self, _payload: String, _ctx: JobContext) -> BoxFuture<Result<(), JobError>> {
        panic!("boom in call")
    }
}

async fn row(b: &Bundle, id: JobId) -> skiplock::JobRow {
    b.client.get(id).await.unwrap().unwrap()
}

/// A panic in `Handler::call` itself (or in a closure before its `async` block) is a
/// retryable failure with the panic's message, like a panic in the future: the job does not
/// stay `running` with its lease renewed by the worker's own heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_before_the_handlers_future_is_a_failed_attempt() {
    let b = setup().await;
    let registry = Registry::new()
        .register_handler("in_call", JobOptions::default(), PanicsInCall)
        .register_handler(
            "in_closure",
            JobOptions::default(),
            |p: String, _c: JobContext| {
                if p.contains("boom") {
                    panic!("boom before the async block");
                }
                async { Ok::<(), JobError>(()) }
            },
        );
    let in_call = b
        .client
        .enqueue(&NewJob::new("in_call", &1).max_attempts(2))
        .await
        .unwrap();
    let in_closure = b
        .client
        .enqueue(&NewJob::new("in_closure", &"boom").max_attempts(1))
        .await
        .unwrap();
    let worker = Worker::builder(client(&b, "panic-test"), registry)
        .queue("default", 4)
        .lease(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(200))
        .poll_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let (stop, handle) = spawn_worker(worker);
    eventually(
        Duration::from_secs(10),
        "both attempts recorded",
        || async { b.count("status <> 'running' AND attempts = 1").await == 2 },
    )
    .await;
    let r = row(&b, in_call).await;
    assert_eq!(
        r.state,
        JobState::Queued,
        "retryable: it has a second attempt"
    );
    assert!(
        r.last_error
            .as_deref()
            .unwrap_or("")
            .contains("boom in call"),
        "{:?}",
        r.last_error
    );
    let r = row(&b, in_closure).await;
    assert_eq!(r.state, JobState::Failed, "its only attempt is spent");
    assert!(
        r.last_error
            .as_deref()
            .unwrap_or("")
            .contains("boom before the async block"),
        "{:?}",
        r.last_error
    );
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!((stats.retried, stats.failed, stats.lost), (1, 1, 0));
}

/// After a lost lease the same worker claims the job again while the first handler still
/// runs: the old attempt is told to stop and its result is dropped, and the new attempt
/// keeps its own lease renewed after the old handler returns (it used to lose its entry to
/// the old one, stop being renewed, and be reaped and run a third time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_attempt_cannot_take_the_new_attempts_lease_with_it() {
    let b = setup().await;
    let runs = Arc::new(Mutex::new(Vec::<(i32, bool)>::new()));
    let registry = {
        let runs = runs.clone();
        Registry::new().register_handler("k", JobOptions::default(), move |_p, ctx: JobContext| {
            let runs = runs.clone();
            async move {
                // The first attempt ignores cancellation and outlives its lease; the second
                // runs for several leases.
                let long = if ctx.attempt == 1 { 2_000 } else { 4_000 };
                tokio::time::sleep(Duration::from_millis(long)).await;
                runs.lock().unwrap().push((ctx.attempt, ctx.is_cancelled()));
                Ok::<(), JobError>(())
            }
        })
    };
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let worker = Worker::builder(client(&b, "attempts-test"), registry)
        .queue("default", 2)
        .lease(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(250))
        .reap_interval(Duration::from_millis(100))
        .poll_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let (stop, handle) = spawn_worker(worker);
    eventually(
        Duration::from_secs(5),
        "the first attempt running",
        || async { b.count("status = 'running' AND attempts = 1").await == 1 },
    )
    .await;
    // The lease is lost (as the reaper does once it expired): back to the queue, ready now.
    b.raw
        .execute(
            "UPDATE jobs SET status = 'queued', locked_until = NULL, run_at = now() WHERE id = $1",
            &[&id.0],
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the job done", || async {
        b.count("status = 'done'").await == 1
    })
    .await;
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    let r = row(&b, id).await;
    assert_eq!(
        (r.state, r.attempts),
        (JobState::Done, 2),
        "never a third run"
    );
    let runs = runs.lock().unwrap().clone();
    assert_eq!(
        runs,
        vec![(1, true), (2, false)],
        "the old attempt was cancelled"
    );
    assert_eq!((stats.done, stats.lost, stats.reaped), (1, 1, 0));
}

/// When this worker claims a newer attempt of a job it still runs, the older attempt is told
/// to stop as the newer one is registered (`executor::Attempt::register`), not only at the
/// next heartbeat: here the heartbeat is 20 s away, and the old handler must see the
/// cancellation within a few seconds. The worker holds other jobs at the same time, so that
/// the lookup of the job's attempts among them is exercised. Negative control (run by hand):
/// with `state::attempts_of` returning an empty range the old handler waits out its 10 s and
/// this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_attempt_claimed_here_stops_the_older_one_at_once() {
    let b = setup().await;
    let seen = Arc::new(Mutex::new(Vec::<(i32, Duration)>::new()));
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let registry = {
        let seen = seen.clone();
        let release = release.clone();
        Registry::new()
            .register_handler("k", JobOptions::default(), move |_p, ctx: JobContext| {
                let seen = seen.clone();
                async move {
                    let t0 = std::time::Instant::now();
                    if ctx.attempt == 1 {
                        let _ =
                            tokio::time::timeout(Duration::from_secs(10), ctx.cancelled()).await;
                    }
                    seen.lock().unwrap().push((ctx.attempt, t0.elapsed()));
                    Ok::<(), JobError>(())
                }
            })
            .register_handler(
                "other",
                JobOptions::default(),
                move |_p, _ctx: JobContext| {
                    let release = release.clone();
                    async move {
                        let _ = release.acquire().await.map(|p| p.forget());
                        Ok::<(), JobError>(())
                    }
                },
            )
    };
    // Jobs on both sides of the one that runs twice, held by the worker throughout.
    b.client.enqueue(&NewJob::new("other", &0)).await.unwrap();
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    b.client.enqueue(&NewJob::new("other", &2)).await.unwrap();
    let worker = Worker::builder(client(&b, "newer-attempt-test"), registry)
        .queue("default", 4)
        .lease(Duration::from_secs(60))
        .heartbeat_interval(Duration::from_secs(20))
        .poll_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let (stop, handle) = spawn_worker(worker);
    eventually(Duration::from_secs(5), "all three running", || async {
        b.count("status = 'running' AND attempts = 1").await == 3
    })
    .await;
    // The lease is lost (as the reaper does once it expired): back to the queue, ready now.
    b.raw
        .execute(
            "UPDATE jobs SET status = 'queued', locked_until = NULL, run_at = now() WHERE id = $1",
            &[&id.0],
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "both attempts ended", || async {
        seen.lock().unwrap().len() == 2
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    let first = seen.iter().find(|(a, _)| *a == 1).map(|(_, d)| *d);
    assert!(
        first.is_some_and(|d| d < Duration::from_secs(6)),
        "the old attempt was stopped as the new one started: {seen:?}"
    );
    eventually(Duration::from_secs(5), "the job done", || async {
        b.client.get(id).await.unwrap().unwrap().state == JobState::Done
    })
    .await;
    release.add_permits(2);
    eventually(Duration::from_secs(5), "the other jobs done", || async {
        b.count("status = 'done'").await == 3
    })
    .await;
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!(
        stats.lost, 1,
        "the old attempt's result was dropped: {stats:?}"
    );
}

/// A worker with the poll off and LISTEN on, serving `default` with `registry`.
fn poll_off(b: &Bundle, app: &str, registry: Registry) -> Worker {
    Worker::builder(client(b, app), registry)
        .queue("default", 2)
        .poll_interval(None)
        .reap_interval(Duration::from_millis(200))
        .build()
        .unwrap()
}

/// Records when each attempt starts.
fn timed(starts: &Arc<Mutex<Vec<Instant>>>, fail_first: JobError) -> impl Handler {
    let starts = starts.clone();
    let fail_first = Arc::new(Mutex::new(Some(fail_first)));
    move |_p: String, _c: JobContext| {
        let starts = starts.clone();
        let fail_first = fail_first.clone();
        async move {
            starts.lock().unwrap().push(Instant::now());
            match fail_first.lock().unwrap().take() {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
    }
}

async fn second_start_after(starts: &Arc<Mutex<Vec<Instant>>>, b: &Bundle) -> Duration {
    eventually(Duration::from_secs(6), "the second run", || async {
        starts.lock().unwrap().len() == 2
    })
    .await;
    eventually(Duration::from_secs(5), "the job done", || async {
        b.count("status = 'done'").await == 1
    })
    .await;
    let s = starts.lock().unwrap();
    s[1].duration_since(s[0])
}

/// With the poll off, a worker wakes for the retry it wrote itself, when its backoff ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_poll_off_a_retry_runs_after_its_backoff() {
    let b = setup().await;
    let starts = Arc::default();
    let options = JobOptions {
        // The first retry waits least(cap, base * 2^1) = 1 s.
        backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(1)).unwrap(),
        ..JobOptions::default()
    };
    let registry =
        Registry::new().register_handler("k", options, timed(&starts, JobError::retry("once")));
    let (stop, handle) = spawn_worker(poll_off(&b, "retry-wake", registry));
    b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let gap = second_start_after(&starts, &b).await;
    assert!(
        gap >= Duration::from_millis(900) && gap < Duration::from_secs(3),
        "{gap:?}"
    );
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!((stats.retried, stats.done), (1, 1));
}

/// With the poll off, a worker wakes for the snooze it wrote itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_poll_off_a_snoozed_job_runs_again() {
    let b = setup().await;
    let starts = Arc::default();
    let registry = Registry::new().register_handler(
        "k",
        JobOptions::default(),
        timed(&starts, JobError::snooze(Duration::from_secs(1))),
    );
    let (stop, handle) = spawn_worker(poll_off(&b, "snooze-wake", registry));
    b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let gap = second_start_after(&starts, &b).await;
    assert!(
        gap >= Duration::from_millis(900) && gap < Duration::from_secs(3),
        "{gap:?}"
    );
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!((stats.snoozed, stats.handed_back, stats.done), (1, 0, 1));
}

/// With the poll off, a job the worker's reaper returns to the queue (its holder died) runs
/// at once, not at the next enqueue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_poll_off_a_reaped_job_is_picked_up() {
    let b = setup().await;
    // A dead worker's job: claimed, never finished.
    let dead = b.client.enqueue(&NewJob::new("k", &"dead")).await.unwrap();
    let claimed = b
        .client
        .claim("default", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed[0].id, dead);
    let registry = Registry::new()
        .register_handler("k", JobOptions::default(), noop())
        .register_handler("slow", JobOptions::default(), |_p, _c| async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Ok::<(), JobError>(())
        });
    let (stop, handle) = spawn_worker(poll_off(&b, "reap-wake", registry));
    // Real work, during which the dead worker's lease runs out.
    b.client.enqueue(&NewJob::new("slow", &1)).await.unwrap();
    eventually(Duration::from_secs(5), "the slow job running", || async {
        b.count("status = 'running' AND kind = 'slow'").await == 1
    })
    .await;
    b.expire_lease(dead).await;
    eventually(Duration::from_secs(5), "the reaped job done", || async {
        row(&b, dead).await.state == JobState::Done
    })
    .await;
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!((stats.reaped, stats.done), (1, 2));
    assert_eq!(row(&b, dead).await.attempts, 2);
}

/// Waits on its context up to 30 s; records whether it was cancelled.
fn waits_for_cancel(cancelled: &Arc<AtomicBool>) -> impl Handler {
    let cancelled = cancelled.clone();
    move |_p: String, ctx: JobContext| {
        let cancelled = cancelled.clone();
        async move {
            tokio::select! {
                () = ctx.cancelled() => cancelled.store(true, Ordering::SeqCst),
                () = tokio::time::sleep(Duration::from_secs(30)) => {}
            }
            Ok::<(), JobError>(())
        }
    }
}

/// A `cancel:<id>` notification stops that job's running attempt at once (the heartbeat,
/// which would notice later, beats only every 20 s here), and its result is not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_notification_stops_the_running_attempt() {
    let b = setup().await;
    let cancelled = Arc::new(AtomicBool::new(false));
    let registry =
        Registry::new().register_handler("k", JobOptions::default(), waits_for_cancel(&cancelled));
    let worker = Worker::builder(client(&b, "cancel-notify"), registry)
        .queue("default", 2)
        .poll_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let (stop, handle) = spawn_worker(worker);
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    eventually(Duration::from_secs(5), "the job running", || async {
        b.count("status = 'running'").await == 1
    })
    .await;
    eventually(Duration::from_secs(10), "the LISTEN connection", || async {
        listener_pid(&b).await.is_some()
    })
    .await;
    // Another session's payload for another worker's job changes nothing here.
    let channel = b.client.schema().channel().to_owned();
    let notify = |payload: String| {
        let channel = channel.clone();
        let raw = &b.raw;
        async move {
            raw.execute("SELECT pg_notify($1, $2)", &[&channel, &payload])
                .await
                .unwrap();
        }
    };
    notify(format!("cancel:{}", id.0 + 1000)).await;
    notify("cancel:not-a-number".to_owned()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!cancelled.load(Ordering::SeqCst));
    let sent = Instant::now();
    notify(format!("cancel:{}", id.0)).await;
    eventually(Duration::from_secs(5), "the handler cancelled", || async {
        cancelled.load(Ordering::SeqCst)
    })
    .await;
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!((stats.lost, stats.done), (1, 0));
    let r = row(&b, id).await;
    assert_eq!(
        (r.state, r.attempts),
        (JobState::Running, 1),
        "its result was not written"
    );
}

/// `Client::cancel` on a running job reaches its worker at once through the notification
/// the cancel statement sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cancel_stops_a_running_job_at_once() {
    let b = setup().await;
    let cancelled = Arc::new(AtomicBool::new(false));
    let registry =
        Registry::new().register_handler("k", JobOptions::default(), waits_for_cancel(&cancelled));
    let worker = Worker::builder(client(&b, "cancel-e2e"), registry)
        .queue("default", 2)
        .poll_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let (stop, handle) = spawn_worker(worker);
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    eventually(Duration::from_secs(5), "the job running", || async {
        b.count("status = 'running'").await == 1
    })
    .await;
    eventually(Duration::from_secs(10), "the LISTEN connection", || async {
        listener_pid(&b).await.is_some()
    })
    .await;
    assert_eq!(b.client.cancel(&[id]).await.unwrap().changed, vec![id]);
    eventually(Duration::from_secs(2), "the handler cancelled", || async {
        cancelled.load(Ordering::SeqCst)
    })
    .await;
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!((stats.lost, stats.done), (1, 0));
    let r = row(&b, id).await;
    assert_eq!(r.state, JobState::Failed);
    assert_eq!(r.last_error.as_deref(), Some("cancelled"));
}

/// LISTEN through PgBouncer in transaction mode hears nothing. The worker's self-test finds
/// out, says so, and polls (at the default interval, the poll being off) instead of waiting
/// deaf forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_through_a_transaction_pooler_falls_back_to_polling() {
    let db = TestDb::new().await;
    let Some(bouncer) = PgBouncer::start(db.url()).unwrap() else {
        eprintln!("pgbouncer is not installed: skipped");
        return;
    };
    let pooled = bouncer.through(db.url()).unwrap();
    let client = Client::builder(&pooled)
        .schema(db.schema())
        .pool_size(4)
        .server_timeouts(None)
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let worker = Worker::builder(
        client.clone(),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 2)
    .poll_interval(None)
    .listen_url(&pooled)
    .build()
    .unwrap();
    let stats = worker.stats_handle();
    assert!(!stats.polling_fallback());
    let (stop, handle) = spawn_worker(worker);
    let start = Instant::now();
    while !stats.polling_fallback() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the deaf LISTEN was not noticed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let start = Instant::now();
    while client.get(id).await.unwrap().unwrap().state != JobState::Done {
        assert!(
            start.elapsed() < skiplock::WorkerConfig::DEFAULT_POLL_INTERVAL * 2,
            "the job did not run"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(stats.polling_fallback());
    stop.send(()).unwrap();
    handle.await.unwrap();
}

/// A direct LISTEN connection passes its self-test: no fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_listen_connection_passes_its_self_test() {
    let b = setup().await;
    let worker = poll_off(
        &b,
        "probe-ok",
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    );
    let stats = worker.stats_handle();
    let (stop, handle) = spawn_worker(worker);
    eventually(Duration::from_secs(10), "the LISTEN connection", || async {
        listener_pid(&b).await.is_some()
    })
    .await;
    // Longer than the self-test may take.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!stats.polling_fallback());
    stop.send(()).unwrap();
    handle.await.unwrap();
}

/// Handlers that hold every connection of the application's pool, for several leases,
/// cannot starve the heartbeat: the worker renews leases on a pool of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_holding_the_whole_pool_do_not_starve_the_heartbeat() {
    let b = setup().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let registry = {
        let runs = runs.clone();
        Registry::new().register_handler(
            "hog",
            JobOptions::default(),
            move |_p, ctx: JobContext| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    let pool = ctx.client().pool();
                    let one = pool.get().await?;
                    let two = pool.get().await?;
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    drop((one, two));
                    Ok::<(), JobError>(())
                }
            },
        )
    };
    let small = Client::builder(b.db.url())
        .schema(b.db.schema())
        .pool_size(2)
        .build()
        .unwrap();
    let id = b.client.enqueue(&NewJob::new("hog", &1)).await.unwrap();
    let worker = Worker::builder(small, registry)
        .queue("default", 1)
        .lease(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(250))
        .poll_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let (stop, handle) = spawn_worker(worker);
    // Another process's reaper, every 200 ms: it must never find the lease expired.
    let start = Instant::now();
    loop {
        let reaped = b.client.reap().await.unwrap();
        assert!(
            reaped.is_empty(),
            "lease expired on a live worker: {reaped:?}"
        );
        if row(&b, id).await.state == JobState::Done {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "not done");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!((stats.done, stats.lost), (1, 0));
    assert_eq!(row(&b, id).await.attempts, 1);
}

/// A drain told to stop stops as `run` does: the running jobs are cancelled at the deadline
/// and handed back at once without spending an attempt; what was not claimed stays queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_until_idle_or_stops_and_hands_back_when_told() {
    let b = setup().await;
    let started = Arc::new(AtomicUsize::new(0));
    let go = Arc::new(tokio::sync::Notify::new());
    let registry = {
        let started = started.clone();
        let go = go.clone();
        Registry::new().register_handler("k", JobOptions::default(), move |_p, _c| {
            let started = started.clone();
            let go = go.clone();
            async move {
                if started.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                    go.notify_one();
                }
                tokio::time::sleep(Duration::from_secs(600)).await;
                Ok::<(), JobError>(())
            }
        })
    };
    let ids = b
        .client
        .enqueue_many(&(0..3).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("default", 2)
        .shutdown_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let stats = tokio::time::timeout(
        Duration::from_secs(20),
        worker.run_until_idle_or(async move { go.notified().await }),
    )
    .await
    .expect("the drain did not stop")
    .unwrap();
    assert_eq!(started.load(Ordering::SeqCst), 2);
    assert_eq!(
        (stats.claimed, stats.handed_back, stats.snoozed, stats.done),
        (2, 2, 0, 0)
    );
    for id in &ids[..2] {
        let r = row(&b, *id).await;
        assert_eq!(
            (r.state, r.attempts, r.max_attempts),
            (JobState::Queued, 1, 6),
            "handed back, the attempt not charged"
        );
        assert!(r.locked_until.is_none());
    }
    let r = row(&b, ids[2]).await;
    assert_eq!((r.state, r.attempts), (JobState::Queued, 0));
}

/// A worker with the poll off, LISTEN on, and no reaper of its own in sight (hour-long
/// rounds): what other sessions make ready must still reach it.
fn poll_off_no_reaper(b: &Bundle, app: &str) -> Worker {
    Worker::builder(
        client(b, app),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 2)
    .poll_interval(None)
    .reap_interval(Duration::from_secs(3600))
    .build()
    .unwrap()
}

/// An operator's retry, another process's reaper and another worker's shutdown hand-back each
/// make a job ready without an INSERT: each notifies, so an idle worker with the poll off runs
/// the job at once instead of never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_poll_off_jobs_made_ready_elsewhere_wake_the_worker() {
    let b = setup().await;
    // Three jobs taken out of the ready set by another session before the worker starts.
    let failed = b
        .client
        .enqueue(&NewJob::new("k", &"failed"))
        .await
        .unwrap();
    let reaped = b
        .client
        .enqueue(&NewJob::new("k", &"reaped"))
        .await
        .unwrap();
    let handed = b
        .client
        .enqueue(&NewJob::new("k", &"handed"))
        .await
        .unwrap();
    let claimed = b
        .client
        .claim("default", 3, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    let attempt = |id: JobId| claimed.iter().find(|j| j.id == id).unwrap().attempt;
    let _ = b
        .client
        .fail(failed, attempt(failed), "boom", skiplock::Retry::Never)
        .await
        .unwrap();

    let (stop, handle) = spawn_worker(poll_off_no_reaper(&b, "wake-elsewhere"));
    // Let the worker's first claim (at start and after LISTEN connects) come and go.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(b.count("status = 'done'").await, 0);

    // 1. An operator's retry.
    let t = Instant::now();
    b.client.retry(&[failed]).await.unwrap();
    eventually(Duration::from_secs(3), "the retried job done", || async {
        row(&b, failed).await.state == JobState::Done
    })
    .await;
    assert!(t.elapsed() < Duration::from_secs(3));

    // 2. Another process's reaper (Client::reap runs the same statement).
    b.expire_lease(reaped).await;
    let back = b.client.reap().await.unwrap();
    assert_eq!(back.len(), 1);
    eventually(Duration::from_secs(3), "the reaped job done", || async {
        row(&b, reaped).await.state == JobState::Done
    })
    .await;

    // 3. Another worker's shutdown hand-back: the statement its completer sends.
    let sql = b.client.statement(skiplock::Statement::FinishMany);
    let rows = b
        .raw
        .query(
            sql,
            &[
                &vec![handed.0],
                &vec![attempt(handed)],
                &vec!["hand_back"],
                &vec![""],
                &vec![0i64],
                &vec![0i64],
                &vec![0i64],
                &vec![None::<&str>],
            ],
        )
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, &str>("result"), "written");
    eventually(
        Duration::from_secs(3),
        "the handed-back job done",
        || async { row(&b, handed).await.state == JobState::Done },
    )
    .await;

    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!(stats.done, 3);
}

/// With the poll off, a job scheduled during a burst of short claims starts on time: the
/// next-due lookups are rate-limited, and one wanted inside the gap runs at its end instead
/// of being dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_poll_off_a_job_scheduled_amid_a_burst_starts_on_time() {
    let b = setup().await;
    let starts = Arc::new(Mutex::new(Vec::<(String, Instant)>::new()));
    let recorded = starts.clone();
    let registry = Registry::new().register_handler(
        "k",
        JobOptions::default(),
        move |p: String, _c: JobContext| {
            recorded.lock().unwrap().push((p, Instant::now()));
            async { Ok::<(), JobError>(()) }
        },
    );
    let (stop, handle) = spawn_worker(poll_off(&b, "lookup-gap", registry));
    for round in 0..3 {
        // Ready jobs a few milliseconds apart: each is a short claim and wants a lookup.
        for i in 0..10 {
            b.client
                .enqueue(&NewJob::new("k", &format!("ready-{round}-{i}")))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        // Then one for later, whose own wake-up finds nothing ready, inside the gap.
        let at = Instant::now();
        let name = format!("later-{round}");
        b.client
            .enqueue(&NewJob::new("k", &name).delay(Duration::from_millis(300)))
            .await
            .unwrap();
        eventually(
            Duration::from_secs(5),
            "the scheduled job started",
            || async {
                starts
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|(p, _)| p.contains(&name))
            },
        )
        .await;
        let started = starts
            .lock()
            .unwrap()
            .iter()
            .find(|(p, _)| p.contains(&name))
            .map(|(_, t)| *t)
            .unwrap();
        let late = started.duration_since(at);
        assert!(
            late >= Duration::from_millis(250) && late < Duration::from_millis(1500),
            "round {round}: started {late:?} after it was enqueued for 300 ms"
        );
    }
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!(stats.done, 33);
}

/// A worker told to share its client's pool (`skiplock work` is) opens no pool of its own:
/// while its jobs run, every connection with the client's application name is one of the
/// client's pool (the one the client opened before the worker started among them), and the
/// pool has grown by what the runtime needs. Without the setting, the worker's own pool
/// holds connections the client's does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sharing_its_clients_pool_opens_no_connection_of_its_own() {
    let b = setup().await;
    let observer = Arc::new(b.db.connect().await.unwrap());
    for share in [true, false] {
        let app = format!("share-{share}-{}", b.db.schema());
        let c = client(&b, &app);
        // As `skiplock work` does first: one connection of the client's pool open.
        c.server_version().await.unwrap();
        let jobs: Vec<NewJob> = (0..200).map(|i| NewJob::new("look", &i)).collect();
        c.enqueue_many(&jobs).await.unwrap();
        let seen = Arc::new(Mutex::new(None::<(i64, usize, usize)>));
        let registry = {
            let (seen, observer, c, app) = (seen.clone(), observer.clone(), c.clone(), app.clone());
            Registry::new().register_handler("look", JobOptions::default(), move |_p, _ctx| {
                let (seen, observer, c, app) =
                    (seen.clone(), observer.clone(), c.clone(), app.clone());
                async move {
                    if seen.lock().unwrap().is_some() {
                        return Ok::<(), JobError>(());
                    }
                    let n: i64 = observer
                        .query_one(
                            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                            &[&app],
                        )
                        .await?
                        .get(0);
                    let status = c.pool().status();
                    seen.lock()
                        .unwrap()
                        .get_or_insert((n, status.size, status.max_size));
                    Ok(())
                }
            })
        };
        let stats = Worker::builder(c.clone(), registry)
            .queue("default", 10)
            .share_client_pool(share)
            .build()
            .unwrap()
            .run_until_idle()
            .await
            .unwrap();
        assert_eq!(stats.done, 200);
        let (backends, size, max_size) = seen.lock().unwrap().expect("a job ran");
        let runtime = skiplock::WorkerConfig::default().claims_in_flight_for(10) + 1 + 2;
        if share {
            assert!(
                usize::try_from(backends).unwrap() <= size,
                "{backends} connections of the client's application, {size} in its pool"
            );
            assert_eq!(
                max_size,
                4 + runtime,
                "the pool grew by the runtime's needs"
            );
        } else {
            assert!(
                usize::try_from(backends).unwrap() > size,
                "{backends} connections of the client's application, {size} in its pool"
            );
            assert_eq!(max_size, 4);
        }
    }
}
