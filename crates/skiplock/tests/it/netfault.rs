//! Network faults between a worker and PostgreSQL, injected by a TCP proxy in front of the
//! server (`skiplock_testdb::proxy`): the reply to a committed outcome lost, half-open
//! connections (black-holed, no RST) under the heartbeat and under the LISTEN connection,
//! and a partition longer than the lease. Each test checks that its fault really happened
//! (the proxy counts what it did), so that a quiet proxy cannot make it pass.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use skiplock::{
    Client, JobContext, JobEnd, JobError, JobOptions, JobState, NewJob, Registry, Statement,
    Worker, WorkerEvent,
};
use skiplock_testdb::proxy::{Flow, Select};
use skiplock_testdb::FaultProxy;
use tokio::sync::Notify;

use crate::support::{setup, Bundle};
use crate::worker::{finished, listening, noop, spawn_worker, wait_for};

/// A proxy in front of the test server and a client of the test schema through it.
async fn through_proxy(b: &Bundle, app: &str, unfenced: bool) -> (FaultProxy, Client) {
    let proxy = FaultProxy::for_url(b.db.url()).await.unwrap();
    let url = proxy.url(b.db.url()).unwrap();
    let mut builder = Client::builder(url)
        .schema(b.db.schema())
        .pool_size(4)
        .application_name(app);
    if unfenced {
        builder = builder.unfenced_for_negative_control();
    }
    (proxy, builder.build().unwrap())
}

/// A piece of the statement the worker writes a success with (`job_complete_many.sql`), as
/// it sends it (unnamed statements carry their text in every Parse message). Not in
/// `job_finish_many.sql`, through which the completer's retry after the lost reply goes.
fn finish_marker(b: &Bundle) -> &'static [u8] {
    const MARK: &str = "WITH ORDINALITY AS o(id, attempt, output, n)";
    assert!(b.client.statement(Statement::CompleteMany).contains(MARK));
    assert!(!b.client.statement(Statement::FinishMany).contains(MARK));
    MARK.as_bytes()
}

/// The reply to a committed completion is lost (the proxy forwards the statement, drops the
/// server's answer and then resets the connection): the worker's next try finds the job no
/// longer running, reads it back and counts it done, once; not lost, not twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_to_a_committed_completion_is_read_back_and_counted_once() {
    let b = setup().await;
    let (proxy, client) = through_proxy(&b, "netfault-reply", false).await;
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let registry = {
        let runs = runs.clone();
        Registry::new().register_handler("k", JobOptions::default(), move |_p: String, _c| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Ok::<(), JobError>(()) }
        })
    };
    proxy.swallow_reply_after(finish_marker(&b), Duration::from_millis(300));
    let worker = Worker::builder(client, registry)
        .queue("default", 1)
        .poll_interval(Some(Duration::from_millis(200)))
        .build()
        .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    let end = finished(&mut events, Duration::from_secs(20), id).await;
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    // The fault happened: one outcome statement's reply was swallowed, its connection reset.
    assert_eq!(proxy.swallowed(), 1, "the reply loss never fired");
    assert!(proxy.resets() >= 1);
    assert_eq!(end, JobEnd::Done);
    assert_eq!((stats.done, stats.lost, stats.claimed), (1, 0, 1));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Done, 1));
}

/// The same lost reply with `delete_done`: the committed completion deleted the row, so the
/// read-back finds none; the job is counted done once, not lost, and its deletion once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_to_a_committed_deletion_is_counted_done_once() {
    let b = setup().await;
    let (proxy, client) = through_proxy(&b, "netfault-reply-delete", false).await;
    assert!(b
        .client
        .statement(Statement::CompleteDeleteMany)
        .contains(std::str::from_utf8(finish_marker(&b)).unwrap()));
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    proxy.swallow_reply_after(finish_marker(&b), Duration::from_millis(300));
    let worker = Worker::builder(
        client,
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 1)
    .poll_interval(Some(Duration::from_millis(200)))
    .delete_done(true)
    .build()
    .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    let end = finished(&mut events, Duration::from_secs(20), id).await;
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!(proxy.swallowed(), 1, "the reply loss never fired");
    assert_eq!(end, JobEnd::Done);
    assert_eq!((stats.done, stats.lost, stats.claimed), (1, 0, 1));
    assert!(b.client.get(id).await.unwrap().is_none());
    let counted: i64 = b
        .raw
        .query_one("SELECT coalesce(sum(n), 0)::int8 FROM done_deleted", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(counted, 1);
}

/// Every open connection of a worker goes half-open (black-holed both ways: no reply, no RST)
/// while its job runs past the lease: the heartbeat abandons its statement after half the
/// heartbeat interval, closes the dead connections and renews on a new one, so the lease
/// holds and the job ends done at its first attempt. Measured: the time from the black hole
/// to the first renewal that got through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_connection_under_the_heartbeat_is_abandoned_within_the_bound() {
    let b = setup().await;
    let (proxy, client) = through_proxy(&b, "netfault-halfopen", false).await;
    let id = b.client.enqueue(&NewJob::new("slow", &1)).await.unwrap();
    let started = Arc::new(Notify::new());
    let registry = {
        let started = started.clone();
        Registry::new().register_handler("slow", JobOptions::default(), move |_p: String, _c| {
            started.notify_one();
            async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<(), JobError>(())
            }
        })
    };
    const LEASE: Duration = Duration::from_secs(3);
    const BEAT: Duration = Duration::from_millis(400);
    let worker = Worker::builder(client, registry)
        .queue("default", 1)
        .lease(LEASE)
        .heartbeat_interval(BEAT)
        .poll_interval(Some(Duration::from_millis(200)))
        .build()
        .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    started.notified().await;
    // One renewal through the proxy first, so that the heartbeat's connection is open.
    wait_for(&mut events, Duration::from_secs(10), "a renewal", |e| {
        matches!(e, WorkerEvent::Heartbeat { renewed: 1, .. }).then_some(())
    })
    .await;
    let held = proxy.set(&Select::All, Flow::Hold, Flow::Hold);
    assert!(held >= 2, "only {held} connections were open");
    let at = tokio::time::Instant::now();
    // The bound: one beat abandoned after BEAT / 2, the next on a new connection one beat
    // later; under load, allow one more beat. Well inside the lease either way.
    let bound = BEAT / 2 + BEAT * 3;
    wait_for(&mut events, bound, "a renewal after the black hole", |e| {
        matches!(e, WorkerEvent::Heartbeat { renewed: 1, .. }).then_some(())
    })
    .await;
    let took = at.elapsed();
    eprintln!("half-open heartbeat: renewed again {took:?} after the black hole (bound {bound:?}, lease {LEASE:?})");
    let end = finished(&mut events, Duration::from_secs(20), id).await;
    stop.send(()).unwrap();
    let stats = handle.await.unwrap();
    assert_eq!(end, JobEnd::Done);
    assert_eq!((stats.done, stats.lost, stats.reaped), (1, 0, 0));
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Done, 1));
    drop(proxy);
}

/// What each side of a partition saw.
struct Partition {
    stale: JobEnd,
    fresh: JobEnd,
    row: skiplock::JobRow,
    accepted: u64,
}

/// Worker A (through the proxy) runs attempt 1; the proxy partitions it (every connection,
/// open and new, black-holed) for longer than the lease; worker B (direct) reaps the job
/// and runs attempt 2, which waits until A's stale completion has been tried once the
/// partition heals.
async fn partition_longer_than_the_lease(unfenced: bool) -> Partition {
    let b = setup().await;
    let (proxy, client_a) = through_proxy(&b, "netfault-stale", unfenced).await;
    let id = b.client.enqueue(&NewJob::new("p", &1)).await.unwrap();
    let (a_started, a_release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let registry_a = {
        let (started, release) = (a_started.clone(), a_release.clone());
        Registry::new().register_handler("p", JobOptions::default(), move |_p: String, _c| {
            let (started, release) = (started.clone(), release.clone());
            async move {
                started.notify_one();
                release.notified().await;
                Ok::<(), JobError>(())
            }
        })
    };
    let a = Worker::builder(client_a, registry_a)
        .queue("default", 1)
        .lease(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(300))
        .poll_interval(Some(Duration::from_millis(200)))
        .build()
        .unwrap();
    let mut a_events = a.subscribe();
    let (a_stop, a_handle) = spawn_worker(a);
    a_started.notified().await;
    proxy.partition();

    let (b_started, b_release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let registry_b = {
        let (started, release) = (b_started.clone(), b_release.clone());
        Registry::new().register_handler("p", JobOptions::default(), move |_p: String, _c| {
            let (started, release) = (started.clone(), release.clone());
            async move {
                started.notify_one();
                release.notified().await;
                Ok::<(), JobError>(())
            }
        })
    };
    let other = Worker::builder(crate::worker::client(&b, "netfault-fresh"), registry_b)
        .queue("default", 1)
        .lease(Duration::from_secs(30))
        .reap_interval(Duration::from_millis(200))
        .poll_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let mut b_events = other.subscribe();
    let (b_stop, b_handle) = spawn_worker(other);
    tokio::time::timeout(Duration::from_secs(20), b_started.notified())
        .await
        .expect("the other worker never ran the job");
    // A finishes while still cut off: its completion waits in its completer.
    a_release.notify_one();
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.heal();
    let stale = finished(&mut a_events, Duration::from_secs(30), id).await;
    b_release.notify_one();
    let fresh = finished(&mut b_events, Duration::from_secs(20), id).await;
    a_stop.send(()).unwrap();
    b_stop.send(()).unwrap();
    a_handle.await.unwrap();
    b_handle.await.unwrap();
    let row = b.client.get(id).await.unwrap().unwrap();
    Partition {
        stale,
        fresh,
        row,
        accepted: proxy.accepted(),
    }
}

/// A partition longer than the lease: the job runs again elsewhere, and the stale attempt's
/// completion, delivered once the partition heals, is refused; the second attempt's stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_longer_than_the_lease_runs_the_job_elsewhere_and_refuses_the_stale_write() {
    let p = partition_longer_than_the_lease(false).await;
    assert!(p.accepted >= 1);
    assert_eq!(p.stale, JobEnd::Lost);
    assert_eq!(p.fresh, JobEnd::Done);
    assert_eq!((p.row.state, p.row.attempts), (JobState::Done, 2));
    assert_eq!(p.row.last_error.as_deref(), Some("lease expired"));
}

/// The negative control of the test above: without the attempt fence, the stale attempt's
/// completion is applied over the running second attempt, whose own write is then lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_an_unfenced_stale_write_after_a_partition_is_applied() {
    let p = partition_longer_than_the_lease(true).await;
    assert_eq!(p.stale, JobEnd::Done);
    assert_eq!(p.fresh, JobEnd::Lost);
    assert_eq!(p.row.state, JobState::Done);
}

/// The LISTEN connection is silently dropped (black-holed, no RST) with the fallback poll on:
/// work is still found by the poll meanwhile, and the worker notices the silence at its next
/// check (one heartbeat interval, then the self-test's 2 s) and listens again on a new
/// connection, whose notifications start jobs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dropped_listen_connection_is_replaced_and_work_is_found_meanwhile() {
    let b = setup().await;
    let (proxy, client) = through_proxy(&b, "netfault-listen", false).await;
    const BEAT: Duration = Duration::from_millis(500);
    const POLL: Duration = Duration::from_secs(1);
    let worker = Worker::builder(
        client,
        Registry::new().register_handler("k", JobOptions::default(), noop()),
    )
    .queue("default", 2)
    .heartbeat_interval(BEAT)
    .poll_interval(Some(POLL))
    .build()
    .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    listening(&mut events, Duration::from_secs(10)).await;
    // Let the first self-test come back, so that the connection is one that hears.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = proxy.set(
        &Select::Startup("skiplock-listener".into()),
        Flow::Hold,
        Flow::Hold,
    );
    assert_eq!(
        held, 1,
        "the LISTEN connection is not open through the proxy"
    );
    let at = tokio::time::Instant::now();
    // Meanwhile the poll finds work (its notification goes into the black hole).
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let end = finished(&mut events, POLL * 3, id).await;
    assert_eq!(end, JobEnd::Done);
    // The bound: the next check (one beat), the self-test's wait, the first reconnect's
    // backoff (at most 1 s) and the connect; plus one beat of slack for the load.
    let bound = BEAT * 2 + Duration::from_secs(2) + Duration::from_secs(2);
    let left = bound.saturating_sub(at.elapsed());
    listening(&mut events, left).await;
    let took = at.elapsed();
    eprintln!("silent LISTEN connection replaced after {took:?} (bound {bound:?})");
    // The new connection hears: a job starts on its notification, before any poll could.
    let id = b.client.enqueue(&NewJob::new("k", &2)).await.unwrap();
    let t = tokio::time::Instant::now();
    let end = finished(&mut events, Duration::from_secs(5), id).await;
    assert_eq!(end, JobEnd::Done);
    eprintln!("job after the reconnect done in {:?}", t.elapsed());
    stop.send(()).unwrap();
    handle.await.unwrap();
}

/// With the poll off, the LISTEN connection is silently dropped: a snooze the worker knows of
/// is real work, after which the listener's check finds the silence and listens again, and
/// the wake-up after the reconnect finds the job whose notification was lost in another
/// queue (which nothing else would claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_off_a_silently_dropped_listen_connection_is_found_by_its_own_check() {
    let b = setup().await;
    let (proxy, client) = through_proxy(&b, "netfault-listen-off", false).await;
    const BEAT: Duration = Duration::from_millis(500);
    let fails = Arc::new(AtomicUsize::new(0));
    let registry = {
        let fails = fails.clone();
        Registry::new()
            .register_handler("k", JobOptions::default(), noop())
            .register_handler(
                "flaky",
                JobOptions::default(),
                move |_p: String, _c: JobContext| {
                    let first = fails.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        if first {
                            Err(JobError::snooze(Duration::from_secs(1)))
                        } else {
                            Ok(())
                        }
                    }
                },
            )
    };
    let worker = Worker::builder(client, registry)
        .queue("default", 1)
        .queue("other", 1)
        .heartbeat_interval(BEAT)
        .poll_interval(None)
        .build()
        .unwrap();
    let mut events = worker.subscribe();
    let (stop, handle) = spawn_worker(worker);
    listening(&mut events, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let flaky = b.client.enqueue(&NewJob::new("flaky", &1)).await.unwrap();
    assert_eq!(
        finished(&mut events, Duration::from_secs(5), flaky).await,
        JobEnd::Snoozed
    );
    let held = proxy.set(
        &Select::Startup("skiplock-listener".into()),
        Flow::Hold,
        Flow::Hold,
    );
    assert_eq!(held, 1);
    let at = tokio::time::Instant::now();
    let lost = b
        .client
        .enqueue(&NewJob::new("k", &1).queue("other"))
        .await
        .unwrap();
    // The snoozed job comes due after 1 s (the worker wakes for it by itself) ...
    assert_eq!(
        finished(&mut events, Duration::from_secs(5), flaky).await,
        JobEnd::Done
    );
    // ... and the job whose notification was lost runs after the reconnect.
    assert_eq!(
        finished(&mut events, Duration::from_secs(10), lost).await,
        JobEnd::Done
    );
    eprintln!(
        "poll off: job with a lost notification done {:?} after the black hole",
        at.elapsed()
    );
    stop.send(()).unwrap();
    handle.await.unwrap();
}
