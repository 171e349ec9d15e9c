//! The worker runtime against a real server: exactly-once processing across processes'
//! worth of workers, crashes, wake-ups, outcomes, heartbeats, limits and shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use skiplock::{
    Client, Job, JobContext, JobEnd, JobError, JobId, JobOptions, JobState, NewJob, Registry,
    RunStats, Transition, Worker, WorkerEvent,
};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::support::{setup, Bundle};

/// Waits until `cond` holds, checking every 50 ms, failing the test after `limit`.
pub(crate) async fn eventually<F, Fut>(limit: Duration, what: &str, mut cond: F)
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

/// Waits for the first of a worker's events that `pick` takes, failing the test after
/// `limit` (or if events were missed).
pub(crate) async fn wait_for<T>(
    events: &mut broadcast::Receiver<WorkerEvent>,
    limit: Duration,
    what: &str,
    mut pick: impl FnMut(&WorkerEvent) -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) => panic!("timed out after {limit:?} waiting for {what}"),
            Ok(Ok(e)) => {
                if let Some(t) = pick(&e) {
                    return t;
                }
            }
            Ok(Err(RecvError::Lagged(n))) => panic!("missed {n} events waiting for {what}"),
            Ok(Err(RecvError::Closed)) => panic!("the worker went away before {what}"),
        }
    }
}

/// Waits until job `id` finishes (its outcome written, or dropped as lost); returns how.
pub(crate) async fn finished(
    events: &mut broadcast::Receiver<WorkerEvent>,
    limit: Duration,
    id: JobId,
) -> JobEnd {
    wait_for(events, limit, &format!("job {id} to finish"), |e| match e {
        WorkerEvent::Finished { id: i, end, .. } if *i == id => Some(*end),
        _ => None,
    })
    .await
}

/// Waits until the worker's LISTEN connection listens.
pub(crate) async fn listening(events: &mut broadcast::Receiver<WorkerEvent>, limit: Duration) {
    wait_for(events, limit, "the LISTEN connection", |e| {
        matches!(e, WorkerEvent::Listening).then_some(())
    })
    .await;
}

/// Waits until the worker has claimed `n` jobs in all (from now on).
pub(crate) async fn claimed(
    events: &mut broadcast::Receiver<WorkerEvent>,
    limit: Duration,
    n: usize,
) {
    let mut seen = 0;
    wait_for(events, limit, &format!("{n} jobs claimed"), |e| {
        if let WorkerEvent::Claimed { n, .. } = e {
            seen += n;
        }
        (seen >= n).then_some(())
    })
    .await;
}

pub(crate) fn client(b: &Bundle, app: &str) -> Client {
    Client::builder(b.db.url())
        .schema(b.db.schema())
        .pool_size(4)
        .application_name(app)
        .build()
        .unwrap()
}

/// A handler that does nothing but succeed.
pub(crate) fn noop() -> impl skiplock::Handler {
    |_p: String, _c: JobContext| async { Ok::<(), JobError>(()) }
}

/// Runs a worker in the background; send on the returned channel to shut it down.
pub(crate) fn spawn_worker(w: Worker) -> (oneshot::Sender<()>, tokio::task::JoinHandle<RunStats>) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_run_20_000_jobs_exactly_once() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..20_000).map(|i| NewJob::new("count", &i)).collect();
    for chunk in jobs.chunks(5_000) {
        b.client.enqueue_many(chunk).await.unwrap();
    }
    let runs: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let mut workers = Vec::new();
    // Every worker's completions, on one channel (a missed event fails the test).
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Result<(), u64>>();
    for w in 0..4 {
        let runs = runs.clone();
        let registry = Registry::new().register_handler(
            "count",
            JobOptions::default(),
            move |_p: String, ctx: JobContext| {
                let runs = runs.clone();
                async move {
                    *runs.lock().unwrap().entry(ctx.id.0).or_default() += 1;
                    Ok::<(), JobError>(())
                }
            },
        );
        let worker = Worker::builder(client(&b, &format!("count-{w}")), registry)
            .queue("default", 8)
            .poll_interval(Some(Duration::from_millis(200)))
            .build()
            .unwrap();
        let (mut events, done_tx) = (worker.subscribe(), done_tx.clone());
        tokio::spawn(async move {
            loop {
                let sent = match events.recv().await {
                    Ok(WorkerEvent::Finished {
                        end: JobEnd::Done, ..
                    }) => done_tx.send(Ok(())),
                    Ok(_) => continue,
                    Err(RecvError::Lagged(n)) => done_tx.send(Err(n)),
                    Err(RecvError::Closed) => return,
                };
                if sent.is_err() {
                    return;
                }
            }
        });
        workers.push(spawn_worker(worker));
    }
    tokio::time::timeout(Duration::from_secs(180), async {
        for _ in 0..20_000 {
            if let Some(Err(n)) = done_rx.recv().await {
                panic!("missed {n} events");
            }
        }
    })
    .await
    .expect("20,000 jobs done within 180 s");
    assert_eq!(b.count("status = 'done'").await, 20_000);
    let mut done = 0;
    for (stop, handle) in workers {
        stop.send(()).unwrap();
        let stats = handle.await.unwrap();
        assert_eq!(stats.lost, 0);
        done += stats.done;
    }
    assert_eq!(
        done, 20_000,
        "each completion counted by exactly one worker"
    );
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 20_000, "every job ran");
    let repeated: Vec<_> = runs.iter().filter(|(_, n)| **n != 1).collect();
    assert!(repeated.is_empty(), "jobs run more than once: {repeated:?}");
    assert_eq!(
        b.count("status <> 'done'").await,
        0,
        "none lost, none left running"
    );
    assert_eq!(b.count("attempts <> 1").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_worker_job_is_reaped_and_done_elsewhere() {
    let b = setup().await;
    let id = b.client.enqueue(&NewJob::new("stuck", &1)).await.unwrap();
    let started = Arc::new(Notify::new());
    let registry = {
        let started = started.clone();
        Registry::new().register_handler("stuck", JobOptions::default(), move |_p, _c| {
            let started = started.clone();
            async move {
                started.notify_one();
                std::future::pending::<()>().await;
                Ok::<(), JobError>(())
            }
        })
    };
    let first = Worker::builder(client(&b, "first"), registry)
        .queue("default", 1)
        .lease(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(300))
        .build()
        .unwrap();
    let (_stop, handle) = spawn_worker(first);
    started.notified().await;
    // A crash: the task and everything it owns (tasks, pool, connections) are gone.
    handle.abort();
    let _ = handle.await;
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Running, 1));

    let second = Worker::builder(
        client(&b, "second"),
        Registry::new().register_handler("stuck", JobOptions::default(), noop()),
    )
    .queue("default", 1)
    .lease(Duration::from_secs(1))
    .heartbeat_interval(Duration::from_millis(300))
    .reap_interval(Duration::from_millis(200))
    .poll_interval(Some(Duration::from_millis(100)))
    .build()
    .unwrap();
    let mut events = second.subscribe();
    let (stop, handle) = spawn_worker(second);
    let reaped = wait_for(
        &mut events,
        Duration::from_secs(20),
        "the reap",
        |e| match e {
            WorkerEvent::Reaped { requeued, .. } if *requeued > 0 => Some(*requeued),
            _ => None,
        },
    )
    .await;
    assert_eq!(reaped, 1);
    let end = finished(&mut events, Duration::from_secs(20), id).await;
    assert_eq!(end, JobEnd::Done);
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!((stats.reaped, stats.done), (1, 1));
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Done, 2));
    assert_eq!(row.last_error.as_deref(), Some("lease expired"));
    // The first worker's late completion is refused.
    assert_eq!(b.client.complete(id, 1).await.unwrap(), Transition::Lost);
}

pub(crate) async fn listener_pid(b: &Bundle) -> Option<i32> {
    let (listen, wait) = listener_queries(b);
    b.raw
        .query_opt(
            "SELECT pid FROM pg_stat_activity
             WHERE application_name = 'skiplock-listener'
               AND (query = $1 OR position($2 in query) > 0)",
            &[&listen, &wait],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

/// What a worker's LISTEN connection of `b`'s schema last ran, as `pg_stat_activity` shows it:
/// its LISTEN, or a statement that contains the second string (waiting on a queue or
/// stopping, `queue_wait.sql` and `queue_unwait.sql`).
pub(crate) fn listener_queries(b: &Bundle) -> (String, String) {
    (
        format!("LISTEN {}", b.client.schema().channel_quoted()),
        format!("'{}' || '/waiting/'", b.client.schema().channel()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_come_from_notifications_and_survive_a_killed_listener() {
    let b = setup().await;
    let worker = Worker::builder(
        client(&b, "listen-test"),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 2)
    .poll_interval(Some(Duration::from_secs(3600)))
    .build()
    .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    listening(&mut events, Duration::from_secs(10)).await;
    let first_pid = listener_pid(&b).await.unwrap();

    // With an hour between polls, only the notification can start this job promptly.
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let end = finished(&mut events, Duration::from_secs(5), id).await;
    assert_eq!(end, JobEnd::Done);

    // Kill the LISTEN connection and enqueue while it is down: the notification goes to
    // nobody, yet the job starts right after the reconnect.
    b.raw
        .execute("SELECT pg_terminate_backend($1)", &[&first_pid])
        .await
        .unwrap();
    let id = b.client.enqueue(&NewJob::new("k", &2)).await.unwrap();
    let end = finished(&mut events, Duration::from_secs(10), id).await;
    assert_eq!(end, JobEnd::Done);
    assert_eq!(b.count("status = 'done'").await, 2);
    // The job may have been picked up by the deaf listener's fallback poll before the new
    // LISTEN connection was up: wait for it.
    eventually(
        Duration::from_secs(10),
        "the LISTEN connection back",
        || async { listener_pid(&b).await.is_some_and(|p| p != first_pid) },
    )
    .await;
    stop.send(()).unwrap();
    handle.await.unwrap();
}

#[derive(Serialize, Deserialize)]
struct Typed {
    n: u32,
}

impl Job for Typed {
    const KIND: &'static str = "typed";
    const QUEUE: &'static str = "typed_queue";
    fn options() -> JobOptions {
        JobOptions {
            max_attempts: 3,
            ..JobOptions::default()
        }
    }
    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        if self.n == 0 {
            return Err(JobError::discard("zero"));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_outcome_ends_in_its_state() {
    let b = setup().await;
    let opts = JobOptions::default();
    let registry = Registry::new()
        .register::<Typed>()
        .register_handler("ok", opts, noop())
        .register_handler("panics", opts, |_p: String, _c: JobContext| async {
            if true {
                panic!("boom at {}", 42);
            }
            Ok::<(), JobError>(())
        })
        .register_handler("permanent", opts, |_p: String, _c: JobContext| async {
            Err::<(), JobError>(JobError::discard("card declined"))
        })
        .register_handler("retryable", opts, |_p: String, _c: JobContext| async {
            let e: Result<(), std::io::Error> = Err(std::io::Error::other("SMTP 451"));
            e?;
            Ok(())
        })
        .register_handler("snoozes", opts, |_p: String, _c: JobContext| async {
            Err::<(), JobError>(JobError::snooze(Duration::from_secs(3600)))
        })
        .register_handler(
            "slow",
            JobOptions {
                timeout: Some(Duration::from_millis(200)),
                ..opts
            },
            |_p: String, _c: JobContext| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok::<(), JobError>(())
            },
        );
    let enqueue = |job: NewJob| {
        let c = b.client.clone();
        async move { c.enqueue(&job).await.unwrap() }
    };
    let ok = enqueue(NewJob::new("ok", &1)).await;
    let panics = enqueue(NewJob::new("panics", &1)).await;
    let permanent = enqueue(NewJob::new("permanent", &1)).await;
    let retryable = enqueue(NewJob::new("retryable", &1)).await;
    let snoozes = enqueue(NewJob::new("snoozes", &1)).await;
    let slow = enqueue(NewJob::new("slow", &1)).await;
    let unknown = enqueue(NewJob::new("nobody_handles_this", &1)).await;
    let typed_ok = enqueue(NewJob::of(&Typed { n: 1 })).await;
    let typed_zero = enqueue(NewJob::of(&Typed { n: 0 })).await;
    let bad_payload = enqueue(NewJob::new("typed", &"not an object").queue("typed_queue")).await;

    let stats = Worker::builder(b.client.clone(), registry)
        .queue("default", 10)
        .queue("typed_queue", 2)
        .build()
        .unwrap()
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!(stats.claimed, 10);
    assert_eq!(stats.lost, 0);

    let row = |id| {
        let c = b.client.clone();
        async move { c.get(id).await.unwrap().unwrap() }
    };
    let r = row(ok).await;
    assert_eq!((r.state, r.attempts), (JobState::Done, 1));
    let r = row(panics).await;
    assert_eq!((r.state, r.attempts), (JobState::Queued, 1));
    assert_eq!(r.last_error.as_deref(), Some("panicked: boom at 42"));
    let r = row(permanent).await;
    assert_eq!((r.state, r.attempts), (JobState::Failed, 1));
    assert_eq!(r.last_error.as_deref(), Some("card declined"));
    let r = row(retryable).await;
    assert_eq!((r.state, r.attempts), (JobState::Queued, 1));
    assert_eq!(r.last_error.as_deref(), Some("SMTP 451"));
    let r = row(snoozes).await;
    assert_eq!(
        (r.state, r.attempts, r.max_attempts),
        (JobState::Queued, 1, 6)
    );
    assert!(r.last_error.is_none());
    assert!(r.run_at > std::time::SystemTime::now() + Duration::from_secs(3000));
    let r = row(slow).await;
    assert_eq!((r.state, r.attempts), (JobState::Queued, 1));
    assert_eq!(r.last_error.as_deref(), Some("timeout"));
    let r = row(unknown).await;
    assert_eq!((r.state, r.attempts), (JobState::Queued, 1));
    assert!(r.last_error.unwrap().contains("\"nobody_handles_this\""));
    let r = row(typed_ok).await;
    assert_eq!(
        (r.state, r.queue.as_str(), r.max_attempts),
        (JobState::Done, "typed_queue", 3)
    );
    let r = row(typed_zero).await;
    assert_eq!(
        (r.state, r.last_error.as_deref()),
        (JobState::Failed, Some("zero"))
    );
    let r = row(bad_payload).await;
    assert_eq!((r.state, r.attempts), (JobState::Failed, 1));
    let err = r.last_error.unwrap();
    assert!(
        err.contains("payload does not deserialize into typed: invalid type"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_long_job_and_a_lost_lease_cancels_it() {
    let b = setup().await;
    let cancelled = Arc::new(AtomicBool::new(false));
    let registry = {
        let cancelled = cancelled.clone();
        Registry::new()
            .register_handler(
                "long",
                JobOptions::default(),
                |_p: String, _c: JobContext| async {
                    tokio::time::sleep(Duration::from_millis(3000)).await;
                    Ok::<(), JobError>(())
                },
            )
            .register_handler(
                "taken",
                JobOptions::default(),
                move |_p: String, ctx: JobContext| {
                    let cancelled = cancelled.clone();
                    async move {
                        tokio::select! {
                            () = ctx.cancelled() => cancelled.store(true, Ordering::SeqCst),
                            () = tokio::time::sleep(Duration::from_secs(30)) => {}
                        }
                        Ok::<(), JobError>(())
                    }
                },
            )
    };
    let long = b.client.enqueue(&NewJob::new("long", &1)).await.unwrap();
    let worker = Worker::builder(client(&b, "heartbeat-test"), registry)
        .queue("default", 2)
        .lease(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(250))
        .reap_interval(Duration::from_millis(100))
        .poll_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    // Three times its lease, with a reaper running every 100 ms: still attempt 1.
    let end = finished(&mut events, Duration::from_secs(15), long).await;
    assert_eq!(end, JobEnd::Done);
    let r = b.client.get(long).await.unwrap().unwrap();
    assert_eq!((r.state, r.attempts), (JobState::Done, 1));

    let taken = b.client.enqueue(&NewJob::new("taken", &1)).await.unwrap();
    claimed(&mut events, Duration::from_secs(5), 1).await;
    assert_eq!(b.count("status = 'running'").await, 1);
    // Someone else takes the job away (as a reaper and another claim would).
    b.raw
        .execute(
            "UPDATE jobs SET attempts = attempts + 1, locked_until = now() + interval '1 hour'
             WHERE id = $1",
            &[&taken.0],
        )
        .await
        .unwrap();
    // The next heartbeat finds the lease lost and cancels the handler; its result is
    // dropped.
    let lost = wait_for(
        &mut events,
        Duration::from_secs(5),
        "the lost lease",
        |e| match e {
            WorkerEvent::Heartbeat { lost, .. } if *lost > 0 => Some(*lost),
            _ => None,
        },
    )
    .await;
    assert_eq!(lost, 1);
    let end = finished(&mut events, Duration::from_secs(5), taken).await;
    assert_eq!(end, JobEnd::Lost);
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the handler observed cancellation"
    );
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!(stats.lost, 1);
    assert_eq!(stats.reaped, 0);
    let r = b.client.get(taken).await.unwrap().unwrap();
    assert_eq!(
        (r.state, r.attempts),
        (JobState::Running, 2),
        "its result was not written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_never_runs_more_than_its_concurrency() {
    let b = setup().await;
    let now = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let registry = {
        let (now, max) = (now.clone(), max.clone());
        Registry::new().register_handler("k", JobOptions::default(), move |_p, _c| {
            let (now, max) = (now.clone(), max.clone());
            async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok::<(), JobError>(())
            }
        })
    };
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| NewJob::new("k", &i).queue(if i % 2 == 0 { "three" } else { "one" }))
        .collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let stats = Worker::builder(b.client.clone(), registry)
        .queue("three", 3)
        .build()
        .unwrap()
        .run_until_idle()
        .await
        .unwrap();
    assert_eq!(stats.done, 30);
    assert_eq!(
        max.load(Ordering::SeqCst),
        3,
        "the limit is reached and never exceeded"
    );
    assert_eq!(
        b.count("queue = 'one' AND status = 'queued'").await,
        30,
        "other queue untouched"
    );
}

/// Several claims in flight per queue: together they never take more jobs than the queue
/// has free slots (never more than its concurrency running at once), and each job is claimed
/// and run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_in_flight_never_exceed_the_concurrency_and_claim_each_job_once() {
    const JOBS: usize = 600;
    const CONCURRENCY: usize = 12;
    let b = setup().await;
    let now = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let registry = {
        let (now, max, seen) = (now.clone(), max.clone(), seen.clone());
        Registry::new().register_handler(
            "k",
            JobOptions::default(),
            move |_p: String, c: JobContext| {
                let (now, max, seen) = (now.clone(), max.clone(), seen.clone());
                async move {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(n, Ordering::SeqCst);
                    *seen.lock().unwrap().entry(c.id.0).or_default() += 1;
                    // Uneven run times, so that slots free up one by one while claims are out.
                    tokio::time::sleep(Duration::from_millis(c.id.0.unsigned_abs() % 7)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok::<(), JobError>(())
                }
            },
        )
    };
    let jobs: Vec<NewJob> = (0..JOBS as u32).map(|i| NewJob::new("k", &i)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let mut cfg = skiplock::WorkerConfig::default();
    // Claims of at most 5 (at most 12 / 4 = 3 each with four in flight).
    cfg.max_claim_batch = 5;
    let worker = Worker::builder(b.client.clone(), registry)
        .config(cfg)
        .claims_in_flight(4)
        .queue("default", CONCURRENCY)
        .build()
        .unwrap();
    let stats = worker.run_until_idle().await.unwrap();
    assert_eq!(stats.claimed, JOBS as u64, "{stats:?}");
    assert_eq!(stats.done, JOBS as u64, "{stats:?}");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), JOBS, "every job ran");
        assert!(seen.values().all(|n| *n == 1), "no job ran twice");
    }
    let max = max.load(Ordering::SeqCst);
    assert!(
        max <= CONCURRENCY,
        "{max} jobs ran at once, above the concurrency"
    );
    assert!(max > 3, "several claims' jobs ran at once (max {max})");
    assert_eq!(b.count("status = 'done'").await, JOBS as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_connection_is_idle_in_transaction_while_a_job_runs() {
    let b = setup().await;
    let running = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let registry = {
        let (running, release) = (running.clone(), release.clone());
        Registry::new().register_handler("k", JobOptions::default(), move |_p, _c| {
            let (running, release) = (running.clone(), release.clone());
            async move {
                running.notify_one();
                release.notified().await;
                Ok::<(), JobError>(())
            }
        })
    };
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let app = format!("idle-tx-{}", b.db.schema());
    let worker = Worker::builder(client(&b, &app), registry)
        .queue("default", 1)
        .lease(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    running.notified().await;
    // Watch the worker's connections for a while, heartbeats included. A short maintenance
    // transaction (the reaper's or the scheduler's lock and statements) is idle in
    // transaction for microseconds between its statements; a transaction held open around
    // a job would be for the job's whole run: only a state older than 100 ms counts.
    for _ in 0..20 {
        let states: Vec<String> = b
            .raw
            .query(
                "SELECT CASE WHEN clock_timestamp() - state_change > interval '100 ms'
                             THEN coalesce(state, '') ELSE 'just changed' END
                 FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(!states.is_empty());
        assert!(
            states.iter().all(|s| !s.starts_with("idle in transaction")),
            "{states:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    release.notify_one();
    let end = finished(&mut events, Duration::from_secs(5), id).await;
    assert_eq!(end, JobEnd::Done);
    stop.send(()).unwrap();
    handle.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_running_jobs_finish() {
    let b = setup().await;
    let started = Arc::new(Notify::new());
    let registry = {
        let started = started.clone();
        Registry::new().register_handler("k", JobOptions::default(), move |_p, _c| {
            let started = started.clone();
            async move {
                started.notify_one();
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok::<(), JobError>(())
            }
        })
    };
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("default", 1)
        .shutdown_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let (stop, handle) = spawn_worker(worker);
    started.notified().await;
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!(stats.done, 1);
    assert_eq!(
        b.client.get(id).await.unwrap().unwrap().state,
        JobState::Done
    );
}

/// The worker's statements on `schema` the server is running now (other than this one's).
async fn statements_running(b: &Bundle, waiting_on_a_lock: bool) -> Vec<String> {
    let c = b.db.connect().await.unwrap();
    c.query(
        "SELECT query FROM pg_stat_activity \
          WHERE state = 'active' AND pid <> pg_backend_pid() AND strpos(query, $1) > 0 \
            AND (NOT $2 OR wait_event_type = 'Lock')",
        &[&format!("\"{}\"", b.db.schema()), &waiting_on_a_lock],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_run_returns_no_statement_of_the_worker_is_left_running_in_the_server() {
    let b = setup().await;
    // A round of a maintenance service held up in the server: the gauges' first round (at
    // once) takes its lock row, whose table another transaction holds.
    let locker = b.db.connect().await.unwrap();
    locker
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE \"{}\".maintenance_locks IN ACCESS EXCLUSIVE MODE",
            b.db.schema()
        ))
        .await
        .unwrap();
    let worker = Worker::builder(b.client.clone(), Registry::new())
        .queue("default", 1)
        .metrics_gauges_interval(Some(Duration::from_secs(60)))
        .build()
        .unwrap();
    let (stop, handle) = spawn_worker(worker);
    eventually(
        Duration::from_secs(10),
        "a round held up on the lock",
        || async { !statements_running(&b, true).await.is_empty() },
    )
    .await;
    stop.send(()).unwrap();
    // The lock goes a moment after the stop: a worker that abandons the round returns
    // before that, with its statement still waiting in the server.
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        locker.batch_execute("COMMIT").await.unwrap();
        tokio::time::Instant::now()
    });
    tokio::time::timeout(Duration::from_secs(15), handle)
        .await
        .expect("the shutdown is bounded")
        .unwrap();
    let returned = tokio::time::Instant::now();
    let left = statements_running(&b, false).await;
    assert!(
        left.is_empty(),
        "still running after run returned: {left:?}"
    );
    assert!(release.await.unwrap() <= returned);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_hands_back_what_it_cancels_at_the_deadline() {
    let b = setup().await;
    let started = Arc::new(AtomicUsize::new(0));
    let registry = {
        let started = started.clone();
        Registry::new().register_handler("k", JobOptions::default(), move |_p, _c| {
            let started = started.clone();
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(600)).await;
                Ok::<(), JobError>(())
            }
        })
    };
    let ids = b
        .client
        .enqueue_many(&[NewJob::new("k", &1), NewJob::new("k", &2)])
        .await
        .unwrap();
    let mut enqueued_run_at = Vec::new();
    for id in &ids {
        enqueued_run_at.push(b.client.get(*id).await.unwrap().unwrap().run_at);
    }
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("default", 2)
        .shutdown_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    claimed(&mut events, Duration::from_secs(5), 2).await;
    stop.send(()).unwrap();
    let stats = tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .expect("shutdown took far longer than its deadline")
        .unwrap();
    assert_eq!((stats.handed_back, stats.snoozed), (2, 0));
    for (id, run_at) in ids.into_iter().zip(enqueued_run_at) {
        let r = b.client.get(id).await.unwrap().unwrap();
        // Queued at once (no lease to wait out), attempts kept, the attempt not charged, and
        // its place in line (run_at) kept: a periodic job's fire time survives a shutdown.
        assert_eq!(
            (r.state, r.attempts, r.max_attempts),
            (JobState::Queued, 1, 6)
        );
        assert!(r.locked_until.is_none());
        assert_eq!(r.run_at, run_at);
    }
    assert_eq!(
        b.client
            .claim("default", 10, Duration::from_secs(5))
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_until_idle_processes_what_is_ready_and_returns() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..250).map(|i| NewJob::new("k", &i)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let later = b
        .client
        .enqueue(&NewJob::new("k", &"later").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    let stats = Worker::builder(
        b.client.clone(),
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 16)
    .build()
    .unwrap()
    .run_until_idle()
    .await
    .unwrap();
    assert_eq!((stats.claimed, stats.done), (250, 250));
    assert_eq!(b.count("status = 'done'").await, 250);
    assert_eq!(
        b.client.get(later).await.unwrap().unwrap().state,
        JobState::Queued
    );
}

#[test]
fn bad_worker_settings_are_refused() {
    let client = Client::connect("postgres://nobody@127.0.0.1:1/none").unwrap();
    let reg = || Registry::new().register_handler("k", JobOptions::default(), noop());
    let build = |b: skiplock::WorkerBuilder| b.build().unwrap_err().to_string();
    assert!(build(Worker::builder(client.clone(), reg())).contains("no queue"));
    assert!(
        build(Worker::builder(client.clone(), reg()).queue("bad queue", 1)).contains("queue name")
    );
    assert!(build(Worker::builder(client.clone(), reg()).queue("q", 0)).contains("concurrency"));
    assert!(build(
        Worker::builder(client.clone(), reg())
            .queue("q", 1)
            .lease(Duration::from_secs(10))
            .heartbeat_interval(Duration::from_secs(10))
    )
    .contains("heartbeat"));
    assert!(build(
        Worker::builder(client.clone(), reg())
            .queue("q", 1)
            .claims_in_flight(0)
    )
    .contains("claims in flight"));
    assert!(build(
        Worker::builder(client.clone(), reg())
            .queue("q", 1)
            .vacuum_threshold(Some(0))
    )
    .contains("vacuum threshold"));
    let bad_kind = Registry::new().register_handler("bad kind", JobOptions::default(), noop());
    assert!(build(Worker::builder(client.clone(), bad_kind).queue("q", 1)).contains("job kind"));
}

/// Scale to zero: with the poll off, an idle worker sends no statement at all and keeps only
/// its LISTEN connection (seen from the server: the connections' `state_change` does not
/// move for 10 s), then starts a job within a second of an enqueue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_with_polling_off_sends_nothing() {
    let b = setup().await;
    let app = format!("idle-{}", b.db.schema());
    let started = Arc::new(Mutex::new(Vec::<std::time::Instant>::new()));
    let registry = {
        let started = started.clone();
        Registry::new().register_handler("k", JobOptions::default(), move |_p, _c| {
            let started = started.clone();
            async move {
                started.lock().unwrap().push(std::time::Instant::now());
                Ok::<(), JobError>(())
            }
        })
    };
    let worker = Worker::builder(client(&b, &app), registry)
        .queue("default", 2)
        .poll_interval(None)
        .reap_interval(Duration::from_millis(300))
        .idle_connection_timeout(Some(Duration::from_secs(1)))
        .build()
        .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    // Some real work first, so that the pool has connections and maintenance has run.
    let id = b.client.enqueue(&NewJob::new("k", &0)).await.unwrap();
    let end = finished(&mut events, Duration::from_secs(10), id).await;
    assert_eq!(end, JobEnd::Done);
    let (listen_query, wait_query) = listener_queries(&b);
    let snapshot = || async {
        let rows = b
            .raw
            .query(
                "SELECT pid, application_name, state_change::text FROM pg_stat_activity
                 WHERE application_name = $1
                    OR (application_name = 'skiplock-listener'
                        AND (query = $2 OR position($3 in query) > 0))
                 ORDER BY pid",
                &[&app, &listen_query, &wait_query],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|r| {
                (
                    r.get::<_, i32>(0),
                    r.get::<_, String>(1),
                    // NULL for a connection that has not reported its state yet.
                    r.get::<_, Option<String>>(2),
                )
            })
            .collect::<Vec<_>>()
    };
    // Idle pool connections close; only the LISTEN connection stays.
    eventually(
        Duration::from_secs(10),
        "only the LISTEN connection left",
        || async {
            let s = snapshot().await;
            s.len() == 1 && s[0].1 == "skiplock-listener"
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = snapshot().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = snapshot().await;
    assert_eq!(before, after, "a statement was sent while idle");

    let enqueued = std::time::Instant::now();
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let end = finished(&mut events, Duration::from_secs(5), id).await;
    assert_eq!(end, JobEnd::Done);
    assert_eq!(started.lock().unwrap().len(), 2);
    let took = started.lock().unwrap()[1].duration_since(enqueued);
    assert!(
        took < Duration::from_secs(1),
        "started {took:?} after the enqueue"
    );
    stop.send(()).unwrap();
    handle.await.unwrap();
}

/// The same work with named prepared statements on the hot path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_process_jobs_the_same() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..500).map(|i| NewJob::new("k", &i)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let client = Client::builder(b.db.url())
        .schema(b.db.schema())
        .prepared_statements(true)
        .build()
        .unwrap();
    let stats = Worker::builder(
        client,
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 16)
    .build()
    .unwrap()
    .run_until_idle()
    .await
    .unwrap();
    assert_eq!((stats.claimed, stats.done), (500, 500));
    assert_eq!(b.count("status = 'done' AND attempts = 1").await, 500);
}

/// A job left `running` by a dead worker, as a row: a lease that ends `lease_ms` from now.
async fn dead_workers_job(b: &Bundle, lease_ms: i64) -> JobId {
    let row = b
        .raw
        .query_one(
            "INSERT INTO jobs (kind, payload, status, attempts, locked_until)
             VALUES ('k', '1', 'running', 1, now() + $1::int8 * interval '1 millisecond')
             RETURNING id",
            &[&lease_ms],
        )
        .await
        .unwrap();
    JobId(row.get(0))
}

/// Scale to zero, and yet no job is stuck: with the poll off, a worker reaps once as it
/// starts (a lease that ended while no worker ran comes back at once, whatever the reap
/// interval), and an idle worker wakes when the earliest lease it read ends, though nothing
/// else tells it of that lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_poll_off_a_worker_reaps_at_start_and_when_a_lease_it_read_ends() {
    let b = setup().await;
    let worker = |reap_every: Duration| {
        Worker::builder(
            client(&b, "reap-idle"),
            Registry::new().register_handler("k", JobOptions::default(), noop()),
        )
        .queue("default", 2)
        .poll_interval(None)
        .reap_interval(reap_every)
        .build()
        .unwrap()
    };

    // A lease that ended before the worker started: reaped at start, not after an hour.
    let expired = dead_workers_job(&b, -1_000).await;
    let w = worker(Duration::from_secs(3600));
    let mut events = w.subscribe();
    let (stop, handle) = spawn_worker(w);
    assert_eq!(
        finished(&mut events, Duration::from_secs(10), expired).await,
        JobEnd::Done
    );
    stop.send(()).unwrap();
    handle.await.unwrap();

    // A lease that ends while the worker is idle. Its insert wakes the worker once (a round
    // on the interval then reads the lease); after that nothing is sent to the worker. The
    // insert notifies only once the worker waits on its queue (all eight stripes, migration
    // 15), which comes after its LISTEN connection is up.
    let w = worker(Duration::from_millis(500));
    let mut events = w.subscribe();
    let (stop, handle) = spawn_worker(w);
    listening(&mut events, Duration::from_secs(10)).await;
    eventually(Duration::from_secs(10), "the worker waiting", || async {
        crate::wakeups::stripes_held(&b, "default").await == 8
    })
    .await;
    let orphan = dead_workers_job(&b, 3_000).await;
    assert_eq!(
        finished(&mut events, Duration::from_secs(15), orphan).await,
        JobEnd::Done
    );
    let row = b.client.get(orphan).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Done, 2));
    stop.send(()).unwrap();
    handle.await.unwrap();
}

/// A worker whose queue loop dies (a panic) does not serve on, nor end as if all went well:
/// it shuts down and `run` returns the error (the command then exits non-zero).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_loop_that_panics_ends_the_worker_with_an_error() {
    let b = setup().await;
    let registry = Registry::new().register_handler("k", JobOptions::default(), |_p, _c| async {
        Ok::<(), JobError>(())
    });
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("default", 1)
        .panic_in_claim_loop_for_tests()
        .build()
        .unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        worker.run(std::future::pending::<()>()),
    )
    .await
    .expect("the worker served on without its claim loop");
    let e = r.expect_err("a worker whose claim loop panicked returned its counts");
    assert!(matches!(e, skiplock::Error::TaskDied(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "the worker stopped: a queue's claim loop panicked"
    );
}

/// Durations the worker could not keep (an instant past the clock's end) are refused by the
/// builder, not met with a panic later.
#[tokio::test]
async fn the_builder_refuses_unbounded_durations() {
    let b = setup().await;
    let huge = Duration::from_secs(u64::MAX);
    let builders: Vec<(&str, skiplock::WorkerBuilder)> = vec![
        (
            "poll interval",
            Worker::builder(b.client.clone(), Registry::new()).poll_interval(Some(huge)),
        ),
        (
            "reap interval",
            Worker::builder(b.client.clone(), Registry::new()).reap_interval(huge),
        ),
        (
            "shutdown timeout",
            Worker::builder(b.client.clone(), Registry::new()).shutdown_timeout(huge),
        ),
        (
            "prune interval",
            Worker::builder(b.client.clone(), Registry::new()).prune_interval(huge),
        ),
        (
            "idle connection timeout",
            Worker::builder(b.client.clone(), Registry::new()).idle_connection_timeout(Some(huge)),
        ),
        (
            "metrics gauges interval",
            Worker::builder(b.client.clone(), Registry::new()).metrics_gauges_interval(Some(huge)),
        ),
    ];
    for (what, builder) in builders {
        let e = builder.queue("default", 1).build().unwrap_err();
        assert!(e.is_invalid_input(), "{what}: {e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
}

/// A typed worker that claims a job of a kind it has no handler for spends none of its
/// attempts: the job goes back to the queue after the worker's back-off for the kind, with
/// the kind named in `last_error`; the health report (and so `stats`) counts it as waiting
/// for a worker that handles its kind; such a worker then runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_without_a_handler_costs_no_attempt_and_waits_for_a_worker_that_has_one() {
    let b = setup().await;
    let other = b
        .client
        .enqueue(&NewJob::new("b", &1).max_attempts(1))
        .await
        .unwrap();
    // A worker with a handler for `kind` only, until job `other` ends once: how it ended.
    let serve_until_it_ends = |kind: &'static str| {
        let w = Worker::builder(
            client(&b, kind),
            Registry::new().register_handler(kind, JobOptions::default(), noop()),
        )
        .queue("default", 2)
        .build()
        .unwrap();
        async move {
            let mut events = w.subscribe();
            let (stop, handle) = spawn_worker(w);
            let end = finished(&mut events, Duration::from_secs(10), other).await;
            stop.send(()).unwrap();
            handle.await.unwrap();
            end
        }
    };
    assert_eq!(serve_until_it_ends("a").await, JobEnd::HandedBack);
    let row = b.client.get(other).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Queued, "{row:?}");
    assert!(
        row.attempts < row.max_attempts,
        "an attempt was spent: {row:?}"
    );
    let error = row.last_error.clone().unwrap_or_default();
    assert!(
        error.starts_with("unserved: no handler for job kind \"b\"")
            && error.contains("it handles: a"),
        "{error}"
    );
    assert!(row.run_at > std::time::SystemTime::now() - Duration::from_millis(500));
    let health = b.client.health(Duration::from_secs(60)).await.unwrap();
    let q = health.queues.iter().find(|q| q.queue == "default").unwrap();
    assert_eq!((q.queued, q.unserved), (1, 1));
    assert!(
        health
            .warnings
            .iter()
            .any(|w| w.contains("wait for a worker that handles their kind")),
        "{:?}",
        health.warnings
    );

    assert_eq!(serve_until_it_ends("b").await, JobEnd::Done);
    let health = b.client.health(Duration::from_secs(60)).await.unwrap();
    let q = health.queues.iter().find(|q| q.queue == "default").unwrap();
    assert_eq!((q.done, q.unserved), (1, 0));
}

/// Claim positions (a held snapshot made claims from the front slow; forced here): a job
/// placed before where the claims start (a higher priority) still runs, exactly once:
/// draining takes only an empty claim from the front for an empty queue, and serving claims
/// from the front at least once a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_claim_positions_a_job_before_the_position_still_runs_once() {
    let b = setup().await;
    let runs: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let registry = || {
        let (runs, client) = (runs.clone(), b.client.clone());
        Registry::new().register_handler(
            "k",
            JobOptions::default(),
            move |p: String, ctx: JobContext| {
                let (runs, client) = (runs.clone(), client.clone());
                async move {
                    *runs.lock().unwrap().entry(ctx.id.0).or_default() += 1;
                    // The first job places an urgent one before every later job.
                    if p.contains("first") {
                        client
                            .enqueue(&NewJob::new("k", &"urgent").priority(-5))
                            .await
                            .map_err(JobError::retry)?;
                    }
                    Ok::<(), JobError>(())
                }
            },
        )
    };
    let mut jobs = vec![NewJob::new("k", &"first")];
    jobs.extend((0..40).map(|i| NewJob::new("k", &i.to_string())));
    b.client.enqueue_many(&jobs).await.unwrap();
    let drain = Worker::builder(b.client.clone(), registry())
        .queue("default", 2)
        .claim_positions_for_tests()
        .build()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), drain.run_until_idle())
        .await
        .expect("the drain ended")
        .unwrap();
    let states: Vec<(i64, String, i16, i32)> = b
        .raw
        .query(
            "SELECT id, status, priority, attempts FROM jobs ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        b.count("status = 'done'").await,
        42,
        "the urgent job ran too: {states:?}"
    );

    // Serving, with no poll: the claims start past the jobs above; a job placed before them
    // runs at the claim from the front a second after the last one (a short claim from the
    // key wakes the worker for it).
    let serve = Worker::builder(b.client.clone(), registry())
        .queue("default", 2)
        .poll_interval(None)
        .claim_positions_for_tests()
        .build()
        .unwrap();
    let (stop, running) = spawn_worker(serve);
    let later: Vec<NewJob> = (0..20).map(|i| NewJob::new("k", &i.to_string())).collect();
    b.client.enqueue_many(&later).await.unwrap();
    eventually(Duration::from_secs(30), "the later jobs", || async {
        b.count("status = 'done'").await == 62
    })
    .await;
    b.client
        .enqueue(&NewJob::new("k", &"urgent").priority(-5))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(4),
        "the job before the position",
        || async { b.count("status = 'done'").await == 63 },
    )
    .await;
    let _ = stop.send(());
    running.await.unwrap();
    assert!(
        runs.lock().unwrap().values().all(|&n| n == 1),
        "each ran once"
    );
    assert_eq!(runs.lock().unwrap().len(), 63);
}

/// While a queue's recent jobs are short, a job starts without a task of its own: its queue's
/// claim loop polls it first, and only one that does not end on that poll gets a task. Here
/// many short jobs share a task (a task each would give each its own id), a job that waits
/// on a timer after such a first poll is woken in its own task and ends, one that panics on
/// it fails its attempt as a panic does anywhere, and the drain returns once all are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_jobs_start_without_a_task_and_one_that_waits_goes_on_in_its_own() {
    let b = setup().await;
    let tasks = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let short_runs = Arc::new(AtomicUsize::new(0));
    let registry = {
        let (tasks, short_runs) = (tasks.clone(), short_runs.clone());
        Registry::new().register_handler("k", JobOptions::default(), move |p: String, _c| {
            let (tasks, short_runs) = (tasks.clone(), short_runs.clone());
            async move {
                let i: u32 = serde_json::from_str(&p).unwrap();
                if i == 950 {
                    panic!("boom at {i}");
                }
                if i % 200 == 199 {
                    // Pending on its first poll, woken by the timer later.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    return Ok::<(), JobError>(());
                }
                short_runs.fetch_add(1, Ordering::SeqCst);
                let id = tokio::task::try_id().map_or_else(|| "none".into(), |id| id.to_string());
                *tasks.lock().unwrap().entry(id).or_default() += 1;
                Ok(())
            }
        })
    };
    let jobs: Vec<NewJob> = (0..1000).map(|i| NewJob::new("k", &i)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let stats = tokio::time::timeout(
        Duration::from_secs(60),
        Worker::builder(b.client.clone(), registry)
            .queue("default", 50)
            .build()
            .unwrap()
            .run_until_idle(),
    )
    .await
    .expect("the drain returns")
    .unwrap();
    assert_eq!((stats.claimed, stats.done, stats.lost), (1000, 999, 0));
    assert_eq!(b.count("status = 'done'").await, 999);
    assert_eq!(
        b.count("status = 'queued' AND attempts = 1 AND last_error = 'panicked: boom at 950'")
            .await,
        1
    );
    let short = short_runs.load(Ordering::SeqCst);
    let distinct = tasks.lock().unwrap().len();
    assert_eq!(short, 1000 - 5 - 1);
    // Each was timed with the overhead of a debug build on a machine busy with other tests:
    // not all of them count as short, but many do.
    eprintln!("{short} short jobs ran in {distinct} tasks");
    assert!(
        short - distinct >= 200,
        "{short} short jobs ran in {distinct} tasks: many should share their claim loop's"
    );
}
