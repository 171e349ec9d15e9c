//! Claiming ahead of the free slots (`WorkerConfig::claim_ahead`): short jobs are claimed in
//! larger batches than the free slots, never run beyond the concurrency, and run once; long
//! jobs are not claimed ahead; a job claimed ahead keeps its lease while it waits, goes back
//! to the queue when no slot frees in time, and goes back at shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use skiplock::{
    JobContext, JobEnd, JobError, JobId, JobOptions, JobState, NewJob, Registry, Worker,
    WorkerEvent,
};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::Notify;

use crate::support::{setup, Bundle};
use crate::worker::{finished, noop, spawn_worker, wait_for};

/// Collects the sizes of a worker's claims until its events end (a lagging receiver skips
/// what it missed; the largest claims are what the tests look at).
fn claim_sizes(
    mut events: broadcast::Receiver<WorkerEvent>,
) -> tokio::task::JoinHandle<Vec<usize>> {
    tokio::spawn(async move {
        let mut sizes = Vec::new();
        loop {
            match events.recv().await {
                Ok(WorkerEvent::Claimed { n, .. }) => sizes.push(n),
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return sizes,
            }
        }
    })
}

/// Runs `jobs` no-op jobs through a worker of concurrency `concurrency` until idle; returns
/// the largest number of handlers that ran at once, how often each job ran, and the claims'
/// sizes.
async fn run_short_jobs(
    b: &Bundle,
    jobs: usize,
    concurrency: usize,
    ahead: bool,
) -> (usize, HashMap<i64, usize>, Vec<usize>) {
    let now = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let registry = {
        let (now, max, seen) = (now.clone(), max.clone(), seen.clone());
        Registry::new().register_handler(
            "short",
            JobOptions::default(),
            move |_p: String, c: JobContext| {
                let (now, max, seen) = (now.clone(), max.clone(), seen.clone());
                async move {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(n, Ordering::SeqCst);
                    *seen.lock().unwrap().entry(c.id.0).or_default() += 1;
                    tokio::task::yield_now().await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok::<(), JobError>(())
                }
            },
        )
    };
    let batch: Vec<NewJob> = (0..jobs as u32).map(|i| NewJob::new("short", &i)).collect();
    b.client.enqueue_many(&batch).await.unwrap();
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("default", concurrency)
        // One claim at a time: it may take the concurrency and as much again ahead.
        .claims_in_flight(1)
        .claim_ahead(ahead)
        .build()
        .unwrap();
    let sizes = claim_sizes(worker.subscribe());
    let stats = worker.run_until_idle().await.unwrap();
    assert_eq!(stats.done, jobs as u64, "{stats:?}");
    let sizes = sizes.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    (max.load(Ordering::SeqCst), seen, sizes)
}

/// Short jobs: claims take more than the free slots (the default), yet no more than the
/// concurrency run at once and each job runs once. With `claim_ahead(false)` (the negative
/// control of the claim sizes) no claim takes more than the concurrency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_jobs_are_claimed_ahead_but_never_run_beyond_the_concurrency() {
    const JOBS: usize = 3_000;
    const CONCURRENCY: usize = 10;
    let b = setup().await;
    let (max, seen, sizes) = run_short_jobs(&b, JOBS, CONCURRENCY, true).await;
    assert_eq!(seen.len(), JOBS, "every job ran");
    assert!(seen.values().all(|n| *n == 1), "no job ran twice");
    assert!(max <= CONCURRENCY, "{max} ran at once, above {CONCURRENCY}");
    let largest = sizes.iter().copied().max().unwrap_or(0);
    assert!(
        largest > CONCURRENCY,
        "claims took more than the free slots (largest {largest} of {} claims)",
        sizes.len()
    );
    assert_eq!(b.count("status = 'done'").await, JOBS as i64);

    b.raw.batch_execute("DELETE FROM jobs").await.unwrap();
    let (max, seen, sizes) = run_short_jobs(&b, JOBS, CONCURRENCY, false).await;
    assert_eq!(seen.len(), JOBS);
    assert!(max <= CONCURRENCY);
    let largest = sizes.iter().copied().max().unwrap_or(0);
    assert!(
        largest <= CONCURRENCY,
        "with claim_ahead(false) a claim took {largest}"
    );
}

/// How long each job waited between its claim and its handler's start, in claim order.
type Waits = Arc<Mutex<Vec<(JobId, Duration)>>>;

fn timed(waits: &Waits, run: Duration) -> impl skiplock::Handler {
    let waits = waits.clone();
    move |_p: String, c: JobContext| {
        let waits = waits.clone();
        async move {
            let waited = SystemTime::now()
                .duration_since(c.claimed_at)
                .unwrap_or_default();
            waits.lock().unwrap().push((c.id, waited));
            tokio::time::sleep(run).await;
            Ok::<(), JobError>(())
        }
    }
}

/// Long jobs (150 ms each at concurrency 4) are not claimed ahead: each starts at once after
/// its claim. The same jobs after a run of short ones (the negative control: the worker then
/// believes its jobs short) are claimed ahead and wait for a slot; the next ones, once the
/// worker has seen long jobs run, do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_jobs_are_not_claimed_ahead() {
    const LONG: Duration = Duration::from_millis(150);
    let b = setup().await;
    let waits: Waits = Arc::default();
    let registry = Registry::new()
        .register_handler("long", JobOptions::default(), timed(&waits, LONG))
        .register_handler("short", JobOptions::default(), noop());
    let long: Vec<NewJob> = (0..24).map(|i| NewJob::new("long", &i)).collect();

    // A fresh worker, long jobs only.
    b.client.enqueue_many(&long).await.unwrap();
    let worker = || {
        Worker::builder(b.client.clone(), registry.clone())
            .queue("default", 4)
            .build()
            .unwrap()
    };
    worker().run_until_idle().await.unwrap();
    let fresh: Vec<Duration> = waits.lock().unwrap().drain(..).map(|w| w.1).collect();
    assert_eq!(fresh.len(), 24);
    let longest = fresh.iter().max().copied().unwrap_or_default();
    assert!(
        longest < LONG / 2,
        "a long job waited {longest:?} for a slot: it was claimed ahead ({fresh:?})"
    );

    // Short jobs first, then the long ones, through one worker.
    let short: Vec<NewJob> = (0..200).map(|i| NewJob::new("short", &i)).collect();
    b.client.enqueue_many(&short).await.unwrap();
    let w = worker();
    let mut events = w.subscribe();
    let (stop, handle) = spawn_worker(w);
    let mut done = 0;
    wait_for(
        &mut events,
        Duration::from_secs(20),
        "the short jobs",
        |e| {
            if let WorkerEvent::Finished { .. } = e {
                done += 1;
            }
            (done >= 200).then_some(())
        },
    )
    .await;
    // The first long jobs after them are claimed ahead and wait for a slot; once they have
    // run, the worker knows its jobs are long, and the next ones are not claimed ahead.
    for (round, done) in [(1, 48), (2, 72)] {
        b.client.enqueue_many(&long).await.unwrap();
        let b2 = &b;
        crate::worker::eventually(Duration::from_secs(20), "the long jobs", || async move {
            b2.count("kind = 'long' AND status = 'done'").await == done
        })
        .await;
        let waits: Vec<Duration> = waits.lock().unwrap().drain(..).map(|w| w.1).collect();
        assert_eq!(waits.len(), 24);
        let longest = waits.iter().max().copied().unwrap_or_default();
        if round == 1 {
            assert!(
                longest >= LONG * 2 / 3,
                "after short jobs, long jobs were claimed ahead and waited (longest {longest:?})"
            );
        } else {
            assert!(
                longest < LONG / 2,
                "the worker learnt that its jobs are long: none waited ({waits:?})"
            );
        }
    }
    stop.send(()).unwrap();
    handle.await.unwrap();
}

/// A worker of concurrency 1 that has run short jobs, then claims a job that blocks and a
/// short one behind it (claimed ahead).
struct Blocked {
    b: Bundle,
    block: JobId,
    ahead: JobId,
    release: Arc<Notify>,
    runs: Arc<Mutex<HashMap<i64, usize>>>,
    events: broadcast::Receiver<WorkerEvent>,
    stop: tokio::sync::oneshot::Sender<()>,
    handle: tokio::task::JoinHandle<skiplock::RunStats>,
}

/// Short jobs the worker of [`blocked`] runs first.
const WARM: u64 = 50;

async fn blocked() -> Blocked {
    let b = setup().await;
    let release = Arc::new(Notify::new());
    let runs: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let registry = {
        let (release, runs, runs2) = (release.clone(), runs.clone(), runs.clone());
        Registry::new()
            .register_handler(
                "block",
                JobOptions::default(),
                move |_p: String, c: JobContext| {
                    let (release, runs) = (release.clone(), runs.clone());
                    async move {
                        *runs.lock().unwrap().entry(c.id.0).or_default() += 1;
                        release.notified().await;
                        Ok::<(), JobError>(())
                    }
                },
            )
            .register_handler(
                "short",
                // Opted out of heartbeats while it runs: its lease is renewed while it waits.
                JobOptions {
                    heartbeat: false,
                    ..JobOptions::default()
                },
                move |_p: String, c: JobContext| {
                    let runs = runs2.clone();
                    async move {
                        *runs.lock().unwrap().entry(c.id.0).or_default() += 1;
                        Ok::<(), JobError>(())
                    }
                },
            )
    };
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("default", 1)
        .lease(Duration::from_secs(4))
        .heartbeat_interval(Duration::from_millis(200))
        .shutdown_timeout(Duration::from_secs(20))
        .presence_interval(Duration::from_millis(200))
        .reap_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    // Short jobs first: the worker learns that its jobs are short.
    let warm: Vec<NewJob> = (0..WARM).map(|i| NewJob::new("short", &i)).collect();
    b.client.enqueue_many(&warm).await.unwrap();
    let mut done = 0;
    wait_for(
        &mut events,
        Duration::from_secs(20),
        "the short jobs",
        |e| {
            if let WorkerEvent::Finished { end, .. } = e {
                assert_eq!(*end, JobEnd::Done);
                done += 1;
            }
            (done == WARM).then_some(())
        },
    )
    .await;
    // One transaction: one claim takes both, the second ahead of the one slot.
    let ids = b
        .client
        .enqueue_many(&[NewJob::new("block", &0), NewJob::new("short", &99)])
        .await
        .unwrap();
    let (block, ahead) = (ids[0], ids[1]);
    let b2 = &b;
    crate::worker::eventually(Duration::from_secs(10), "both claimed", || async move {
        b2.count(&format!(
            "status = 'running' AND id IN ({}, {})",
            block.0, ahead.0
        ))
        .await
            == 2
    })
    .await;
    let started = runs.clone();
    crate::worker::eventually(Duration::from_secs(10), "the blocking job to start", || {
        let started = started.clone();
        async move { started.lock().unwrap().contains_key(&block.0) }
    })
    .await;
    Blocked {
        b,
        block,
        ahead,
        release,
        runs,
        events,
        stop,
        handle,
    }
}

async fn locked_until(b: &Bundle, id: JobId) -> SystemTime {
    b.raw
        .query_one("SELECT locked_until FROM jobs WHERE id = $1", &[&id.0])
        .await
        .unwrap()
        .get::<_, Option<SystemTime>>(0)
        .expect("the job waiting for a slot kept its lease (it was reaped)")
}

/// A job claimed ahead keeps its lease while it waits (the heartbeat renews it past the
/// lease's length, with the reaper running, though its kind opted out of heartbeats), is not counted as running in the workers table,
/// and goes back to the queue without spending an attempt when no slot frees within 10 s;
/// it then runs once, after the blocking job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_claimed_ahead_keeps_its_lease_and_goes_back_when_no_slot_frees() {
    let mut t = blocked().await;
    let first = locked_until(&t.b, t.ahead).await;
    // Past its 4 s lease, with a reaper every 200 ms: still this worker's, at attempt 1.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = locked_until(&t.b, t.ahead).await;
    assert!(
        later.duration_since(first).unwrap_or_default() >= Duration::from_secs(4),
        "the heartbeat renewed the lease of the job waiting for a slot ({first:?} -> {later:?})"
    );
    let r = t.b.client.get(t.ahead).await.unwrap().unwrap();
    assert_eq!((r.state, r.attempts), (JobState::Running, 1), "not reaped");
    assert_eq!(
        t.runs.lock().unwrap().get(&t.ahead.0),
        None,
        "it has not run"
    );
    // The workers table counts the running job, not the one waiting for a slot.
    let running: i32 =
        t.b.raw
            .query_one("SELECT running FROM workers", &[])
            .await
            .unwrap()
            .get(0);
    assert_eq!(
        running, 1,
        "the job waiting for a slot is not counted as running"
    );
    // Handed back once it has waited 10 s.
    let end = finished(&mut t.events, Duration::from_secs(10), t.ahead).await;
    assert_eq!(end, JobEnd::HandedBack);
    let r = t.b.client.get(t.ahead).await.unwrap().unwrap();
    assert_eq!(
        (r.state, r.attempts, r.max_attempts),
        (JobState::Queued, 1, 6),
        "back in the queue, the attempt not charged"
    );
    // Not claimed ahead again while the slot stays taken.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        t.b.client.get(t.ahead).await.unwrap().unwrap().state,
        JobState::Queued
    );
    t.release.notify_one();
    assert_eq!(
        finished(&mut t.events, Duration::from_secs(10), t.block).await,
        JobEnd::Done
    );
    assert_eq!(
        finished(&mut t.events, Duration::from_secs(10), t.ahead).await,
        JobEnd::Done
    );
    t.stop.send(()).unwrap();
    let stats = t.handle.await.unwrap();
    assert_eq!(stats.handed_back, 1, "{stats:?}");
    let runs = t.runs.lock().unwrap();
    assert_eq!(
        (runs[&t.block.0], runs[&t.ahead.0]),
        (1, 1),
        "each ran once"
    );
}

/// At shutdown a job claimed ahead goes back to the queue at once, while the running job
/// is still given its grace to finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_hands_back_jobs_claimed_ahead_at_once() {
    let mut t = blocked().await;
    t.stop.send(()).unwrap();
    let end = finished(&mut t.events, Duration::from_millis(900), t.ahead).await;
    assert_eq!(
        end,
        JobEnd::HandedBack,
        "handed back at once, not after its 10 s of waiting"
    );
    assert_eq!(
        t.b.client.get(t.ahead).await.unwrap().unwrap().state,
        JobState::Queued
    );
    t.release.notify_one();
    assert_eq!(
        finished(&mut t.events, Duration::from_secs(10), t.block).await,
        JobEnd::Done
    );
    let stats = t.handle.await.unwrap();
    assert_eq!((stats.done, stats.handed_back), (WARM + 1, 1), "{stats:?}");
    assert_eq!(t.runs.lock().unwrap().get(&t.ahead.0), None);
}

/// What [`overlapping_claims`] saw while `counting` was set.
#[derive(Debug, Default, Clone, Copy)]
struct ClaimsSeen {
    /// The most claims on the queue's front at once: `job_claim.sql`'s running, whether in
    /// turn or not (a claim in turn waiting for its turn is still in its `LOCK`).
    most: i64,
    samples: usize,
    /// Samples with a claim in turn holding or waiting for the queue's turn (a lock on its
    /// view `claim_turn_<n>`, migration 24).
    in_turn: usize,
    /// Samples with a claim in turn waiting for its turn.
    waiting: usize,
    /// Samples with two claims or more holding rows at once: running, not waiting, and with
    /// a transaction id (a claim gets one as it locks its first row and gives it up as it
    /// commits, which ends a claim in turn's turn). A session's state alone would not do:
    /// between its commit and its return to idle a session still reads `active`, and on a
    /// loaded machine the next claim often runs in that gap.
    in_turn_at_once: usize,
}

/// Samples `pg_stat_activity` and `pg_locks` for the claims of the test's schema on the
/// queue `default` (other statements use SKIP LOCKED too: the reaper, heartbeats and
/// outcome writes) until `stop`.
fn overlapping_claims(
    b: &Bundle,
    counting: Arc<AtomicBool>,
    stop: Arc<Notify>,
) -> tokio::task::JoinHandle<ClaimsSeen> {
    let url = b.db.url().to_owned();
    let like = format!(
        "%WITH next AS MATERIALIZED%FROM \"{}\".jobs%claim_limited%",
        b.db.schema()
    );
    let turn = format!(
        "\"{}\".claim_turn_{}",
        b.db.schema(),
        skiplock::claim_turn("default")
    );
    tokio::spawn(async move {
        let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let q = c
            .prepare(
                "SELECT (SELECT count(*) FROM pg_stat_activity \
                         WHERE state = 'active' AND query LIKE $1 \
                           AND wait_event_type IS DISTINCT FROM 'Lock' \
                           AND pid <> pg_backend_pid()), \
                        (SELECT count(*) FROM pg_locks WHERE relation = $2::text::regclass), \
                        (SELECT count(*) FROM pg_locks \
                         WHERE relation = $2::text::regclass AND NOT granted), \
                        (SELECT count(*) FROM pg_stat_activity \
                         WHERE state = 'active' AND query LIKE $1 \
                           AND backend_xid IS NOT NULL \
                           AND wait_event_type IS DISTINCT FROM 'Lock' \
                           AND pid <> pg_backend_pid())",
            )
            .await
            .unwrap();
        let mut seen = ClaimsSeen::default();
        let stopped = stop.notified();
        tokio::pin!(stopped);
        loop {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&like, &turn];
            let sample = c.query_one(&q, &params);
            tokio::select! {
                () = &mut stopped => return seen,
                row = sample => if counting.load(Ordering::SeqCst) {
                    let row = row.unwrap();
                    seen.most = seen.most.max(row.get(0));
                    seen.samples += 1;
                    seen.in_turn += usize::from(row.get::<_, i64>(1) > 0);
                    seen.waiting += usize::from(row.get::<_, i64>(2) > 0);
                    seen.in_turn_at_once += usize::from(row.get::<_, i64>(3) > 1);
                },
            }
        }
    })
}

/// A backlog of short jobs at a concurrency of at most two claim batches, with the
/// automatic claims in flight: one claim at a time works through it (whole batches, the
/// jobs claimed ahead covering the round trip), where several claims would step past each
/// other's rows at the front of the queue. Negative control (run by hand): with
/// `.claims_in_flight(2)` the sampler sees two claims at once and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_short_jobs_is_claimed_one_whole_claim_at_a_time() {
    const JOBS: usize = 20_000;
    const CONCURRENCY: usize = 50;
    let b = setup().await;
    let cfg = skiplock::WorkerConfig::default();
    assert_eq!(cfg.backlog_claims_in_flight_for(CONCURRENCY), 1);
    assert_eq!(cfg.claims_in_flight_for(CONCURRENCY), 2);
    // One per two batches of concurrency; a set value is kept.
    assert_eq!(cfg.backlog_claims_in_flight_for(1_000), 1);
    assert_eq!(cfg.backlog_claims_in_flight_for(1_001), 2);
    assert_eq!(cfg.backlog_claims_in_flight_for(4_000), 4);
    let mut set = cfg.clone();
    set.claims_in_flight = Some(3);
    assert_eq!(set.backlog_claims_in_flight_for(CONCURRENCY), 3);
    let batch: Vec<NewJob> = (0..JOBS as u32).map(|i| NewJob::new("noop", &i)).collect();
    b.client.enqueue_many(&batch).await.unwrap();
    b.raw.batch_execute("VACUUM ANALYZE jobs").await.unwrap();
    let registry = Registry::new().register_handler("noop", JobOptions::default(), noop());
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("default", CONCURRENCY)
        .build()
        .unwrap();
    let sizes = claim_sizes(worker.subscribe());
    // Counted from the first whole claim (before it no backlog is known: the first claim,
    // of the free slots, and a notification, such as the LISTEN connection's own probe,
    // may each start one) until the last few batches (a short claim ends the backlog).
    // Serving, as in production.
    let counting = Arc::new(AtomicBool::new(false));
    let mut events = worker.subscribe();
    let whole = {
        let counting = counting.clone();
        let batch = cfg.max_claim_batch as usize;
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(WorkerEvent::Claimed { n, .. }) if n == batch => {
                        counting.store(true, Ordering::SeqCst);
                        return;
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                }
            }
        })
    };
    let stop = Arc::new(Notify::new());
    let sampler = overlapping_claims(&b, counting.clone(), stop.clone());
    let (shutdown, handle) = spawn_worker(worker);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let tail = JOBS as i64 - 4 * i64::from(cfg.max_claim_batch);
    while b.count("status = 'done'").await < tail {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backlog drained"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    counting.store(false, Ordering::SeqCst);
    stop.notify_one();
    let seen = sampler.await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while b.count("status = 'done'").await < JOBS as i64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backlog drained"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = shutdown.send(());
    let stats = handle.await.unwrap();
    whole.await.unwrap();
    assert_eq!(stats.done, JOBS as u64, "{stats:?}");
    let sizes = sizes.await.unwrap();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    assert_eq!(
        largest,
        cfg.max_claim_batch as usize,
        "claims were whole batches ({} claims)",
        sizes.len()
    );
    assert!(seen.most >= 1, "the sampler saw the claims: {seen:?}");
    assert_eq!(seen.most, 1, "claims ran at once: {seen:?}");
    // Through the backlog the worker claims in turn (migration 16), the production path.
    assert!(
        seen.in_turn > 0,
        "the backlog's claims went in turn: {seen:?}"
    );
}

/// Two workers (as two processes would) working through one queue's backlog of short jobs
/// claim in turn (migrations 16 and 24): their claims through the backlog run one at a
/// time, the other waiting for the queue's turn, never two on the queue's front at once;
/// every job runs once. Negative control (run by hand): with `.claim_in_turn(false)` on
/// both workers the sampler sees two claims holding rows at once and this test fails; with
/// the turn, the only claims at once are the few plain ones (a worker's first claim, and
/// those after a short one), well under the one sample in fifty allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_through_one_backlog_claim_in_turn() {
    const JOBS: usize = 20_000;
    let b = setup().await;
    let batch: Vec<NewJob> = (0..JOBS as u32).map(|i| NewJob::new("noop", &i)).collect();
    b.client.enqueue_many(&batch).await.unwrap();
    b.raw.batch_execute("VACUUM ANALYZE jobs").await.unwrap();
    let counting = Arc::new(AtomicBool::new(true));
    let stop = Arc::new(Notify::new());
    let sampler = overlapping_claims(&b, counting.clone(), stop.clone());
    let mut running = Vec::new();
    for _ in 0..2 {
        let registry = Registry::new().register_handler("noop", JobOptions::default(), noop());
        let worker = Worker::builder(b.client.clone(), registry)
            .queue("default", 25)
            .build()
            .unwrap();
        running.push(spawn_worker(worker));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while b.count("status = 'done'").await < JOBS as i64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backlog drained"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    counting.store(false, Ordering::SeqCst);
    stop.notify_one();
    let seen = sampler.await.unwrap();
    let mut done = 0;
    for (shutdown, handle) in running {
        let _ = shutdown.send(());
        let stats = handle.await.unwrap();
        assert!(stats.done > 0, "both workers ran jobs: {stats:?}");
        done += stats.done;
    }
    assert_eq!(done, JOBS as u64, "every job ran once");
    assert_eq!(b.count("attempts <> 1").await, 0, "no job ran twice");
    assert!(
        seen.in_turn > 0,
        "the backlog's claims went in turn: {seen:?}"
    );
    // How often a sample catches one claim waiting for the other depends on how often the
    // two workers want to claim at the same moment: on a loaded machine (the suite runs
    // tests side by side on two cores) the workers are starved and rarely collide, so a
    // wait is not required to be seen. What must hold is that claims in turn do not hold
    // rows at once. A sample reads each session's entry and transaction id one after the
    // other, microseconds apart, so a sampler paused between two entries could in theory
    // see the turn pass: one such sample in fifty is allowed (none was seen with the lock,
    // 7-65 % without it).
    assert!(
        seen.in_turn_at_once * 50 <= seen.in_turn.max(50),
        "claims in turn ran at once: {seen:?}"
    );
}

/// Three workers working through one queue's backlog: a claim in turn that had to wait for
/// its turn takes up to `max_claim_batch_waited` jobs (migration 19), one that found it free
/// up to `max_claim_batch`; no claim takes more, and every job runs once. Each worker
/// always has a claim out through the backlog of no-op jobs, so claims wait for each other's
/// turns. Negative control (run by hand): with migration 19's `want := greatest(...)` taken
/// out, no claim takes more than 20 and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_waited_for_its_turn_takes_the_larger_batch() {
    const JOBS: usize = 9_000;
    let b = setup().await;
    let batch: Vec<NewJob> = (0..JOBS as u32).map(|i| NewJob::new("noop", &i)).collect();
    b.client.enqueue_many(&batch).await.unwrap();
    b.raw.batch_execute("VACUUM ANALYZE jobs").await.unwrap();
    let mut running = Vec::new();
    let mut sizes = Vec::new();
    for _ in 0..3 {
        let registry = Registry::new().register_handler("noop", JobOptions::default(), noop());
        let worker = Worker::builder(b.client.clone(), registry)
            .queue("default", 10)
            .max_claim_batch(20)
            .max_claim_batch_waited(60)
            .build()
            .unwrap();
        sizes.push(claim_sizes(worker.subscribe()));
        running.push(spawn_worker(worker));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while b.count("status = 'done'").await < JOBS as i64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backlog drained"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut done = 0;
    for (shutdown, handle) in running {
        let _ = shutdown.send(());
        done += handle.await.unwrap().done;
    }
    assert_eq!(done, JOBS as u64, "every job ran once");
    assert_eq!(b.count("attempts <> 1").await, 0, "no job ran twice");
    let mut all = Vec::new();
    for s in sizes {
        all.extend(s.await.unwrap());
    }
    let largest = all.iter().copied().max().unwrap_or(0);
    assert!(largest <= 60, "no claim takes more than 60: {largest}");
    let larger = all.iter().filter(|&&n| n > 20).count();
    assert!(
        larger > 0,
        "some claims waited for their turn and took more than 20: none of {} claims did \
         (largest {largest})",
        all.len()
    );
}
