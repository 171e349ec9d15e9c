//! Flow control (migration 11): global and per-key concurrency limits, rate limits and
//! sequences, through the worker and the claim statement that production runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use skiplock::{Client, JobContext, JobError, JobOptions, NewJob, QueueLimits, Registry, Worker};
use tokio::sync::oneshot;

use crate::support::{setup, Bundle, FRONT};
use crate::worker::client;

/// What a handler saw: per key, how many of its jobs ran at once at most; overall, likewise;
/// and each start (the database's claim time) and end, in order.
#[derive(Default)]
struct Seen {
    running: HashMap<String, i64>,
    max: HashMap<String, i64>,
    total: i64,
    max_total: i64,
    starts: Vec<(String, i64, SystemTime)>,
    ends: Vec<(String, i64, Instant)>,
    begun: Vec<(String, i64, Instant)>,
    events: Vec<(String, i64, bool)>,
}

type Shared = Arc<Mutex<Seen>>;

#[derive(serde::Deserialize)]
struct P {
    key: String,
    n: i64,
    #[serde(default)]
    fail: bool,
    #[serde(default)]
    ms: u64,
}

/// A handler that records what runs at once, per `key` of its payload, sleeping `ms`.
fn recorder(seen: Shared) -> impl skiplock::Handler {
    move |payload: String, ctx: JobContext| {
        let seen = seen.clone();
        async move {
            let p: P = serde_json::from_str(&payload).map_err(JobError::discard)?;
            {
                let mut s = seen.lock().unwrap();
                let r = s.running.entry(p.key.clone()).or_default();
                *r += 1;
                let r = *r;
                let m = s.max.entry(p.key.clone()).or_default();
                *m = (*m).max(r);
                s.total += 1;
                s.max_total = s.max_total.max(s.total);
                s.starts.push((p.key.clone(), p.n, ctx.claimed_at));
                s.begun.push((p.key.clone(), p.n, Instant::now()));
                s.events.push((p.key.clone(), p.n, true));
            }
            tokio::time::sleep(Duration::from_millis(p.ms)).await;
            {
                let mut s = seen.lock().unwrap();
                *s.running.entry(p.key.clone()).or_default() -= 1;
                s.total -= 1;
                s.ends.push((p.key.clone(), p.n, Instant::now()));
                s.events.push((p.key.clone(), p.n, false));
            }
            if p.fail {
                return Err(JobError::discard("asked to fail"));
            }
            Ok(())
        }
    }
}

fn job(key: &str, n: i64, ms: u64) -> NewJob {
    NewJob::new("rec", &serde_json::json!({ "key": key, "n": n, "ms": ms }))
}

fn workers(b: &Bundle, seen: &Shared, n: usize, concurrency: usize) -> Vec<Worker> {
    (0..n)
        .map(|i| {
            Worker::builder(
                client(b, &format!("limits-{i}")),
                Registry::new().register_handler(
                    "rec",
                    JobOptions::default(),
                    recorder(seen.clone()),
                ),
            )
            .queue("default", concurrency)
            .poll_interval(None)
            .build()
            .unwrap()
        })
        .collect()
}

/// Runs the workers until every job of the schema is finished (or `limit` passes).
pub(crate) async fn run_all(b: &Bundle, ws: Vec<Worker>, limit: Duration) {
    let mut stops = Vec::new();
    let mut handles = Vec::new();
    for w in ws {
        let (tx, rx) = oneshot::channel::<()>();
        stops.push(tx);
        handles.push(tokio::spawn(async move {
            w.run(async {
                let _ = rx.await;
            })
            .await
            .unwrap()
        }));
    }
    let deadline = Instant::now() + limit;
    loop {
        let left = b.count("status IN ('queued', 'running')").await;
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} jobs left at the deadline"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for s in stops {
        let _ = s.send(());
    }
    for h in handles {
        h.await.unwrap();
    }
}

/// A global limit of 3 holds across three workers of concurrency 10 each, and is reached;
/// the same run without the limit goes past 3, so the checker can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_global_limit_holds_across_workers_and_the_checker_can_fail() {
    for limited in [true, false] {
        let b = setup().await;
        if limited {
            b.client
                .set_queue_limits("default", QueueLimits::none().concurrency(3), Some("test"))
                .await
                .unwrap();
        }
        let jobs: Vec<NewJob> = (0..60).map(|i| job("k", i, 20)).collect();
        b.client.enqueue_many(&jobs).await.unwrap();
        let seen = Shared::default();
        run_all(&b, workers(&b, &seen, 3, 10), Duration::from_secs(60)).await;
        let s = seen.lock().unwrap();
        assert_eq!(s.starts.len(), 60);
        if limited {
            assert_eq!(s.max_total, 3, "the limit is reached and never exceeded");
        } else {
            assert!(s.max_total > 3, "without the limit: {}", s.max_total);
        }
    }
}

/// Per key: at most 2 of one key at once, across workers; other keys are not held up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_per_key_limit_holds_and_keys_do_not_block_each_other() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().per_key(2), None)
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..100)
        .map(|i| {
            let key = format!("tenant-{}", i % 5);
            job(&key, i, 15).key(key)
        })
        .collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let seen = Shared::default();
    run_all(&b, workers(&b, &seen, 2, 20), Duration::from_secs(60)).await;
    let s = seen.lock().unwrap();
    assert_eq!(s.starts.len(), 100);
    for (k, m) in &s.max {
        assert!(*m <= 2, "key {k} ran {m} at once");
    }
    // Five keys of two slots each: ten at once.
    assert_eq!(s.max_total, 10, "{:?}", s.max);
}

/// Fairness: a key with 2,000 jobs does not starve a key with 5; claims go round robin
/// across keys, so the 5 finish among the first jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_with_few_jobs_is_not_starved_by_a_key_with_thousands() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().per_key(1000), None)
        .await
        .unwrap();
    // The big key's jobs first: in plain claim order they would all go before the small
    // key's.
    let mut jobs: Vec<NewJob> = (0..2000).map(|i| job("big", i, 2).key("big")).collect();
    jobs.extend((0..5).map(|i| job("small", i, 2).key("small")));
    b.client.enqueue_many(&jobs).await.unwrap();
    let seen = Shared::default();
    run_all(&b, workers(&b, &seen, 1, 4), Duration::from_secs(120)).await;
    let s = seen.lock().unwrap();
    let last_small = s.starts.iter().rposition(|(k, _, _)| k == "small").unwrap();
    assert!(
        last_small < 40,
        "the small key's last job started {last_small}th of 2005"
    );
}

/// A sliding window: at most 10 starts in any 400 ms (by the database's claim times), and
/// the limit is used (not a much lower rate).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_limit_is_a_sliding_window_across_workers() {
    let b = setup().await;
    let period = Duration::from_millis(400);
    b.client
        .set_queue_limits("default", QueueLimits::none().rate(10, period), None)
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..40).map(|i| job("k", i, 1)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let seen = Shared::default();
    let t0 = Instant::now();
    run_all(&b, workers(&b, &seen, 3, 10), Duration::from_secs(60)).await;
    let took = t0.elapsed();
    let s = seen.lock().unwrap();
    let mut at: Vec<SystemTime> = s.starts.iter().map(|x| x.2).collect();
    at.sort();
    assert_eq!(at.len(), 40);
    for (i, t) in at.iter().enumerate() {
        let within = at[i..]
            .iter()
            .take_while(|u| u.duration_since(*t).unwrap_or_default() < period)
            .count();
        assert!(
            within <= 10,
            "{within} starts within {period:?} of start {i}"
        );
    }
    // 40 starts at 10 per 400 ms: at least 3 full windows, and not much more.
    assert!(took >= Duration::from_millis(1200), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// Sequences: members of one sequence run one at a time in id order across workers; a
/// member that fails for good does not stop the rest; sequences do not wait for each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sequences_run_in_order_one_at_a_time_and_a_failure_does_not_stop_them() {
    let b = setup().await;
    let mut ids: HashMap<String, Vec<i64>> = HashMap::new();
    // Interleaved enqueues of three sequences, one call per job and some in batches.
    for i in 0..10 {
        for s in ["a", "b", "c"] {
            let fail = s == "b" && i == 3;
            let j = NewJob::new(
                "rec",
                &serde_json::json!({ "key": s, "n": i, "ms": 5, "fail": fail }),
            )
            .sequence(format!("seq-{s}"));
            let id = b.client.enqueue(&j).await.unwrap();
            ids.entry(s.to_owned()).or_default().push(id.0);
        }
    }
    // At most one member of each sequence is ready; the rest are held.
    assert_eq!(b.count("held IS NOT NULL").await, 27);
    let seen = Shared::default();
    run_all(&b, workers(&b, &seen, 3, 8), Duration::from_secs(60)).await;
    check_sequences(&seen.lock().unwrap());
    assert_eq!(b.count("status = 'failed'").await, 1);
    assert_eq!(b.count("status = 'done'").await, 29);
}

/// Each of the sequences a, b and c ran its members 0..10 in order, one at a time, and the
/// sequences ran side by side.
fn check_sequences(s: &Seen) {
    for (k, m) in &s.max {
        assert_eq!(*m, 1, "sequence {k} ran {m} at once");
    }
    for seq in ["a", "b", "c"] {
        let order: Vec<i64> = s
            .events
            .iter()
            .filter(|(k, _, start)| k == seq && *start)
            .map(|(_, n, _)| *n)
            .collect();
        assert_eq!(order, (0..10).collect::<Vec<_>>(), "sequence {seq}");
        // No overlap: starts and ends alternate.
        let evs: Vec<bool> = s
            .events
            .iter()
            .filter(|(k, _, _)| k == seq)
            .map(|e| e.2)
            .collect();
        assert!(evs.chunks(2).all(|c| c == [true, false]), "{seq}: {evs:?}");
    }
    // Sequences ran side by side.
    assert!(s.max_total > 1);
}

/// A member enqueued in a transaction that commits late: a second enqueuer into the same
/// sequence waits for it, then finds it and is held behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_committing_member_keeps_its_place_in_its_sequence() {
    let b = setup().await;
    let mut first = b.db.connect().await.unwrap();
    first
        .batch_execute(&format!("SET search_path TO \"{}\"", b.db.schema()))
        .await
        .unwrap();
    let tx = first.transaction().await.unwrap();
    let a = b
        .client
        .enqueue_tx(&tx, &NewJob::new("k", &1).sequence("s"))
        .await
        .unwrap();
    let client = b.client.clone();
    let second = tokio::spawn(async move {
        client
            .enqueue(&NewJob::new("k", &2).sequence("s"))
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "the second enqueue waits for the first transaction"
    );
    tx.commit().await.unwrap();
    let c = second.await.unwrap();
    let held = |id: skiplock::JobId| {
        let raw = &b.raw;
        async move {
            raw.query_one("SELECT held IS NOT NULL FROM jobs WHERE id = $1", &[&id.0])
                .await
                .unwrap()
                .get::<_, bool>(0)
        }
    };
    assert!(!held(a).await);
    assert!(held(c).await);
    // The first runs, then the second is released.
    let lease = Duration::from_secs(30);
    let got = b.client.claim("default", 10, lease).await.unwrap();
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), [a]);
    let _ = b.client.complete(a, got[0].attempt).await.unwrap();
    let got = b.client.claim("default", 10, lease).await.unwrap();
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), [c]);
}

/// A slot held by a worker that died comes back when the reaper moves its job after the
/// lease ends; the stale attempt's outcome is then refused, and the database never counted
/// two at once.
#[tokio::test]
async fn a_dead_workers_slot_returns_when_its_lease_is_reaped() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().concurrency(1), None)
        .await
        .unwrap();
    b.client
        .enqueue_many(&[NewJob::new("k", &1), NewJob::new("k", &2)])
        .await
        .unwrap();
    let lease = Duration::from_secs(30);
    let first = b.client.claim("default", 5, lease).await.unwrap();
    assert_eq!(first.len(), 1);
    assert!(b
        .client
        .claim("default", 5, lease)
        .await
        .unwrap()
        .is_empty());
    // The lease ends: still held until reaped.
    b.expire_lease(first[0].id).await;
    assert!(b
        .client
        .claim("default", 5, lease)
        .await
        .unwrap()
        .is_empty());
    b.client.reap().await.unwrap();
    let next = b.client.claim("default", 5, lease).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(b.count("status = 'running'").await, 1);
    // The slow attempt's result is refused.
    assert_eq!(
        b.client
            .complete(first[0].id, first[0].attempt)
            .await
            .unwrap(),
        skiplock::Transition::Lost
    );
}

/// A cancelled running job keeps its slot until its lease ends (its handler may still run).
#[tokio::test]
async fn a_cancelled_job_keeps_its_slot_until_its_lease_ends() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().concurrency(1), None)
        .await
        .unwrap();
    b.client
        .enqueue_many(&[NewJob::new("k", &1), NewJob::new("k", &2)])
        .await
        .unwrap();
    let lease = Duration::from_secs(30);
    let first = b.client.claim("default", 5, lease).await.unwrap();
    b.client.cancel(&[first[0].id]).await.unwrap();
    assert!(b
        .client
        .claim("default", 5, lease)
        .await
        .unwrap()
        .is_empty());
    // A reap before the lease ends leaves it alone.
    assert!(b.client.reap().await.unwrap().is_empty());
    assert_eq!(
        b.count("status = 'failed' AND locked_until IS NOT NULL")
            .await,
        1
    );
    b.expire_lease(first[0].id).await;
    // After it ends, a reap releases it (the row leaves the lease index, migration 18) and
    // reports no job: the job stays cancelled.
    assert!(b.client.reap().await.unwrap().is_empty());
    assert_eq!(
        b.count("status = 'failed' AND locked_until IS NULL AND last_error = 'cancelled'")
            .await,
        1
    );
    assert_eq!(b.client.claim("default", 5, lease).await.unwrap().len(), 1);
}

/// A worker blocked on a full limit with the poll off takes a freed slot at once (the
/// outcome's notification).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_slot_is_taken_within_100_ms_with_the_poll_off() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().concurrency(1), None)
        .await
        .unwrap();
    b.client
        .enqueue_many(&[job("k", 0, 400), job("k", 1, 0), job("k", 2, 0)])
        .await
        .unwrap();
    let seen = Shared::default();
    run_all(&b, workers(&b, &seen, 2, 4), Duration::from_secs(30)).await;
    let s = seen.lock().unwrap();
    assert_eq!(s.max_total, 1);
    // Each job starts within 100 ms of the previous one's end (its handler returning; the
    // outcome that frees the slot is written after that): no poll, only the notification.
    assert_eq!(s.begun.len(), 3);
    for (end, next) in s.ends.iter().zip(s.begun.iter().skip(1)) {
        let gap = next.2.duration_since(end.2);
        assert!(
            gap < Duration::from_millis(100),
            "job {} started {gap:?} after job {} ended",
            next.1,
            end.1
        );
    }
}

/// Bad limits, keys and sequences: a clear error and nothing stored.
#[tokio::test]
async fn bad_limits_keys_and_sequences_are_refused_and_nothing_is_stored() {
    let b = setup().await;
    for bad in [
        QueueLimits::none().concurrency(0),
        QueueLimits::none().concurrency(1_000_001),
        QueueLimits::none().per_key(0),
        QueueLimits::none().rate(0, Duration::from_secs(1)),
        QueueLimits::none().rate(5, Duration::ZERO),
        QueueLimits::none().rate(5, Duration::from_secs(86_401)),
    ] {
        let e = b
            .client
            .set_queue_limits("default", bad, None)
            .await
            .unwrap_err();
        assert!(e.is_invalid_input(), "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
    assert_eq!(
        b.raw
            .query_one("SELECT count(*) FROM queues", &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        0
    );
    let long = "k".repeat(129);
    for bad in ["", "a b", "é", long.as_str()] {
        let e = b
            .client
            .enqueue(&NewJob::new("k", &1).key(bad))
            .await
            .unwrap_err();
        assert!(e.is_invalid_input(), "{e}");
        let e = b
            .client
            .enqueue(&NewJob::new("k", &1).sequence(bad))
            .await
            .unwrap_err();
        assert!(e.is_invalid_input(), "{e}");
    }
    // SQL: the same rule, SQLSTATE 22023.
    for sql in [
        "SELECT enqueue('default', '{}', key => 'a b')",
        "SELECT enqueue('default', '{}', sequence => '')",
        "SELECT enqueue_unique('default', '{}', unique_key => 'u', key => 'a b')",
    ] {
        let e = b.raw.query(sql, &[]).await.unwrap_err();
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE),
            "{sql}: {e}"
        );
    }
    // The table refuses a bad key written by hand, too.
    assert!(b
        .raw
        .execute("INSERT INTO jobs (payload, key) VALUES ('{}', 'a b')", &[])
        .await
        .is_err());
    assert_eq!(b.count("true").await, 0);
}

/// From SQL: enqueue() takes a key and a sequence; a limit set by the library holds for a
/// job enqueued by SQL.
#[tokio::test]
async fn sql_enqueue_takes_a_key_and_a_sequence() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().per_key(1), None)
        .await
        .unwrap();
    b.raw
        .batch_execute(
            "SELECT enqueue('default', '{}', key => 'acct-1');
             SELECT enqueue('default', '{}', key => 'acct-1');
             SELECT enqueue('default', '{}', key => 'acct-2', sequence => 's');
             SELECT enqueue('default', '{}', key => 'acct-3', sequence => 's');
             SELECT enqueue_unique('default', '{\"x\":1}', unique_by_args => true, key => 'acct-4');",
        )
        .await
        .unwrap();
    assert_eq!(b.count("key IS NOT NULL").await, 5);
    assert_eq!(b.count("held IS NOT NULL").await, 1);
    let got = b
        .client
        .claim("default", 10, Duration::from_secs(30))
        .await
        .unwrap();
    // One of acct-1 (per-key limit 1), acct-2 (acct-3 waits in its sequence), acct-4.
    assert_eq!(got.len(), 3);
    let limits = b.client.queue_limits("default").await.unwrap();
    assert_eq!(limits.per_key, Some(1));
    let q = b.client.queues().await.unwrap();
    assert_eq!((q[0].held, q[0].running), (1, 3));
    assert_eq!(q[0].bound.as_deref(), Some("slots"));
}

/// The claim of a limited queue costs the same whether a full key has 100,000 jobs waiting
/// behind it or none, with stale statistics (analyzed while the table was empty): measured
/// in buffers touched by the claim statement itself. The session first claims ten times from
/// another queue while the table is small: more than the five calls after which PostgreSQL
/// may keep a generic plan, made for a small table, for the statements of claim_limited()
/// (migration 11's read the whole table once it had grown). The warm-up's churn stays in its
/// own queue, so that the dead rows it leaves are not in the measured claims' way.
#[tokio::test]
async fn a_full_keys_backlog_does_not_make_the_claim_dearer_with_stale_statistics() {
    let b = setup().await;
    b.raw.batch_execute("ANALYZE jobs").await.unwrap();
    for queue in ["default", "warm"] {
        b.client
            .set_queue_limits(
                queue,
                QueueLimits::none().per_key(2).concurrency(1000),
                None,
            )
            .await
            .unwrap();
    }
    let claim = b.client.statement(skiplock::Statement::Claim).to_owned();
    for _ in 0..10 {
        b.raw
            .batch_execute(
                "INSERT INTO jobs (queue, payload, key) SELECT 'warm', '{}', 'w' || g
                 FROM generate_series(1, 3) g",
            )
            .await
            .unwrap();
        let _ = buffers_of(&b, &claim, "warm").await;
    }
    // A full key `big` (two running) and a key `small` with ten ready jobs.
    b.raw
        .batch_execute(
            "INSERT INTO jobs (payload, key, status, attempts, locked_until)
               SELECT '{}', 'big', 'running', 1, now() + interval '1 hour'
               FROM generate_series(1, 2);
             INSERT INTO jobs (payload, key) SELECT '{}', 'small' FROM generate_series(1, 10);",
        )
        .await
        .unwrap();
    // Each cost is the least of three identical claims (the key's jobs put back between
    // them): a claim whose session must plan again, after other sessions' schema changes
    // flushed its caches, reads the catalog too.
    let empty_cost = least_of_three(&b, &claim, "small").await;
    // 100,000 jobs behind the full key, and a key `later` with ten ready jobs: the next claim
    // finds no key after `small` (the last one served), and goes round to `big` (full, its
    // backlog behind it), `later` and `small` (now full).
    b.raw
        .batch_execute(
            "INSERT INTO jobs (payload, key) SELECT '{}', 'big' FROM generate_series(1, 100000);
             INSERT INTO jobs (payload, key) SELECT '{}', 'later' FROM generate_series(1, 10);",
        )
        .await
        .unwrap();
    let big_cost = least_of_three(&b, &claim, "later").await;
    assert_eq!(
        b.count("key = 'later' AND status = 'running'").await,
        2,
        "the ready key's jobs were claimed, two (its limit)"
    );
    assert_eq!(b.count("key = 'big' AND status = 'running'").await, 2);
    assert!(
        big_cost <= empty_cost * 2 + 50,
        "the claim touched {big_cost} buffers behind a full key of 100,000 jobs, {empty_cost} without"
    );
}

/// The per-key walk counts a key's slots in use with one descent of the key index
/// (jobs_slots_idx, queue and key), never by reading the queue's running jobs through the
/// lease index (queue, locked_until), which had the same predicate but for the key until
/// migration 20. The claim's plan is made at a session's first claim and kept: here that
/// claim comes when the statistics say nothing runs and the key index is far the larger of
/// the two (3,000 running jobs with long keys), which is when PostgreSQL took the lease index
/// for the count, and each of the 50 keys visited read all 3,000 running rows. The index
/// entries each index returned are the transaction's own statistics, read before it ends.
/// Negative control: on the schema as migration 19 left it, the lease index returned
/// 150,000 entries here.
#[tokio::test]
async fn the_key_walk_counts_slots_through_the_key_index_whatever_the_index_sizes() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().per_key(2), None)
        .await
        .unwrap();
    b.raw
        .batch_execute(
            "INSERT INTO jobs (payload, key) SELECT '{}', 'ready' || (g % 100)
               FROM generate_series(1, 1000) g",
        )
        .await
        .unwrap();
    b.raw.batch_execute("VACUUM ANALYZE jobs").await.unwrap();
    b.raw
        .batch_execute(
            "INSERT INTO jobs (queue, payload, key, status, attempts, locked_until)
               SELECT 'default', '{}', repeat('x', 100) || g, 'running', 1,
                      now() + interval '1 hour'
               FROM generate_series(1, 3000) g;
             BEGIN",
        )
        .await
        .unwrap();
    let claim = b.client.statement(skiplock::Statement::Claim).to_owned();
    let claimed = b
        .raw
        .query(
            &claim,
            &[
                &"default",
                &100i64,
                &30_000_000i64,
                &FRONT.0,
                &FRONT.1,
                &FRONT.2,
            ],
        )
        .await
        .unwrap()
        .len();
    let read = |index: &'static str| {
        let raw = &b.raw;
        async move {
            raw.query_one(
                &format!("SELECT pg_stat_get_xact_tuples_returned('{index}'::regclass)"),
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
        }
    };
    let (lease, slots) = (read("jobs_lease_idx").await, read("jobs_slots_idx").await);
    b.raw.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(claimed, 100, "two jobs of each of 50 keys");
    assert_eq!(
        lease, 0,
        "the claim read {lease} entries of the lease index ({slots} of the key index)"
    );
    assert!(slots <= 100, "the key index returned {slots} entries");
}

/// The fewest buffers of three claims of queue `default` that each take the same jobs of
/// `key` (put back before the second and third).
async fn least_of_three(b: &Bundle, claim: &str, key: &str) -> i64 {
    let mut least = i64::MAX;
    for round in 0..3 {
        if round > 0 {
            b.raw
                .batch_execute(&format!(
                    "UPDATE jobs SET status = 'queued', attempts = 0, locked_until = NULL
                     WHERE key = '{key}' AND status = 'running'"
                ))
                .await
                .unwrap();
        }
        least = least.min(buffers_of(b, claim, "default").await);
    }
    least
}

/// Buffers the claim statement touches for `queue` (running it: it claims).
async fn buffers_of(b: &Bundle, claim: &str, queue: &str) -> i64 {
    let rows = b
        .raw
        .query(
            &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {claim}"),
            &[&queue, &10i64, &30_000_000i64, &FRONT.0, &FRONT.1, &FRONT.2],
        )
        .await
        .unwrap();
    let plan: serde_json::Value = rows[0].get(0);
    let p = &plan[0]["Plan"];
    p["Shared Hit Blocks"].as_i64().unwrap_or(0) + p["Shared Read Blocks"].as_i64().unwrap_or(0)
}

/// Draining (`run_until_idle`, `skiplock work --drain`) waits for a limit instead of taking a
/// queue held back by one for an empty queue: every job of a rate-limited queue runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_waits_for_the_rate_window_and_for_slots() {
    let b = setup().await;
    b.client
        .set_queue_limits(
            "default",
            QueueLimits::none()
                .concurrency(2)
                .rate(5, Duration::from_millis(300)),
            None,
        )
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..15).map(|i| job("k", i, 20)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let seen = Shared::default();
    let w = workers(&b, &seen, 1, 8).pop().unwrap();
    let stats = tokio::time::timeout(Duration::from_secs(30), w.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.count("status = 'done'").await, 15, "{stats:?}");
    assert_eq!(seen.lock().unwrap().max_total, 2);
}

/// A batch that starts a sequence keeps its first member ready and holds the rest, through
/// every enqueue path (plain, batch, unique), and each stores the key and sequence.
#[tokio::test]
async fn every_enqueue_path_stores_the_key_and_sequence_and_a_batch_keeps_its_first_ready() {
    let b = setup().await;
    let batch: Vec<NewJob> = (0..3)
        .map(|i| NewJob::new("k", &i).key("t1").sequence("s1"))
        .collect();
    let ids = b.client.enqueue_many(&batch).await.unwrap();
    let unique: Vec<NewJob> = (0..3)
        .map(|i| {
            NewJob::new("k", &i)
                .key("t2")
                .sequence("s2")
                .unique(skiplock::Unique::by_args())
        })
        .collect();
    let uids: Vec<skiplock::JobId> = b
        .client
        .enqueue_many_unique(&unique)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id())
        .collect();
    for (all, key, seq) in [(&ids, "t1", "s1"), (&uids, "t2", "s2")] {
        for (i, id) in all.iter().enumerate() {
            let row = b.client.get(*id).await.unwrap().unwrap();
            assert_eq!(
                (
                    row.key.as_deref(),
                    row.sequence.as_deref(),
                    row.held.is_some()
                ),
                (Some(key), Some(seq), i > 0),
                "job {i} of {seq}"
            );
        }
    }
}

/// The race a lock-free outcome leaves open: an outcome that frees the last slot while a
/// claim is deciding that the queue is full reads the queue's mark before the claim sets it,
/// and sends nothing. The claim that sets the mark therefore notifies by itself (once, at
/// commit; staying bound sends nothing), so a waiting worker claims again and finds the slot.
/// Played out by hand: the claim runs inside a transaction held open while the outcome
/// commits.
#[tokio::test]
async fn a_claim_that_marks_its_queue_full_wakes_it_once_so_no_freed_slot_is_missed() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().concurrency(1), None)
        .await
        .unwrap();
    b.client
        .enqueue_many(&[NewJob::new("k", &1), NewJob::new("k", &2)])
        .await
        .unwrap();
    let lease = Duration::from_secs(30);
    // A claim of one that fills the limit without leaving a job behind for want of it (it
    // asked for one): not marked.
    let a = b.client.claim("default", 1, lease).await.unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(mark(&b.raw).await, None);
    let mut listener =
        crate::support::listen(b.db.url(), &b.client.schema().channel_quoted()).await;
    // The claim, in a transaction left open: the queue is full, so it takes nothing and marks
    // the queue.
    let claim = b.client.statement(skiplock::Statement::Claim).to_owned();
    let mut conn = b.db.connect().await.unwrap();
    conn.batch_execute(&format!("SET search_path TO \"{}\"", b.db.schema()))
        .await
        .unwrap();
    let tx = conn.transaction().await.unwrap();
    let got = tx
        .query(
            &claim,
            &[
                &"default",
                &5i64,
                &30_000_000i64,
                &FRONT.0,
                &FRONT.1,
                &FRONT.2,
            ],
        )
        .await
        .unwrap();
    assert!(got.is_empty());
    // Meanwhile the running job finishes: its outcome reads the mark as it was (none) and
    // sends nothing.
    let _ = b.client.complete(a[0].id, a[0].attempt).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), listener.rx.recv())
            .await
            .is_err(),
        "the outcome notified although the queue was not marked yet"
    );
    tx.commit().await.unwrap();
    // The claim's own notification: the queue's workers claim again, and find the slot.
    let n = listener.next().await;
    assert_eq!(n.payload(), "default");
    assert_eq!(mark(&b.raw).await.as_deref(), Some("slots"));
    assert_eq!(b.client.claim("default", 5, lease).await.unwrap().len(), 1);
    // Staying marked sends nothing more.
    let again = b.client.claim("default", 5, lease).await.unwrap();
    assert!(again.is_empty());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), listener.rx.recv())
            .await
            .is_err()
    );
}

/// The queue `default`'s mark: why its last claim left jobs behind.
async fn mark(raw: &tokio_postgres::Client) -> Option<String> {
    raw.query_one("SELECT limit_bound FROM queues WHERE name = 'default'", &[])
        .await
        .unwrap()
        .get(0)
}

/// Scale to zero: a worker blocked on a full limit with the poll off sends nothing while it
/// waits (seen from the server: its connections' `state_change` does not move for 5 s), and
/// takes the job within a second of the slot freeing. The slot is held by a claim made
/// elsewhere (another process), with a long lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_blocked_on_a_limit_with_the_poll_off_sends_nothing_until_a_slot_frees() {
    let b = setup().await;
    let app = format!("blocked-{}", b.db.schema());
    b.client
        .set_queue_limits("default", QueueLimits::none().concurrency(1), None)
        .await
        .unwrap();
    b.client
        .enqueue_many(&[job("k", 0, 0), job("k", 1, 0)])
        .await
        .unwrap();
    let elsewhere = b
        .client
        .claim("default", 1, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(elsewhere.len(), 1);
    let seen = Shared::default();
    let worker = Worker::builder(
        client(&b, &app),
        Registry::new().register_handler("rec", JobOptions::default(), recorder(seen.clone())),
    )
    .queue("default", 4)
    .poll_interval(None)
    .idle_connection_timeout(Some(Duration::from_secs(1)))
    .build()
    .unwrap();
    let (stop, handle) = crate::worker::spawn_worker(worker);
    // This worker's connections: its pool's, and its LISTEN connection (other tests' workers
    // listen too, on their own schemas' channels).
    let (listen_query, wait_query) = crate::worker::listener_queries(&b);
    let snapshot = || async {
        b.raw
            .query(
                "SELECT pid, state_change::text FROM pg_stat_activity
                 WHERE application_name = $1
                    OR (application_name = 'skiplock-listener'
                        AND (query = $2 OR position($3 in query) > 0))
                 ORDER BY pid",
                &[&app, &listen_query, &wait_query],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get::<_, i32>(0), r.get::<_, Option<String>>(1)))
            .collect::<Vec<_>>()
    };
    // Settle: the worker claims, finds the queue full, marks it, claims once more (its own
    // notification), runs its start-up rounds, and its idle pool connections close; then
    // nothing moves for a second.
    crate::worker::eventually(Duration::from_secs(10), "the queue marked full", || async {
        mark(&b.raw).await.as_deref() == Some("slots")
    })
    .await;
    let settle = Instant::now() + Duration::from_secs(30);
    let mut before = snapshot().await;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = snapshot().await;
        if now == before {
            break;
        }
        assert!(Instant::now() < settle, "the worker never settled");
        before = now;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = snapshot().await;
    // Idle pool connections may close meanwhile; none may open, or move.
    assert!(
        after.iter().all(|c| before.contains(c)),
        "a statement was sent while blocked on the limit: {before:?} then {after:?}"
    );
    assert!(seen.lock().unwrap().starts.is_empty());
    let freed = Instant::now();
    let _ = b
        .client
        .complete(elsewhere[0].id, elsewhere[0].attempt)
        .await
        .unwrap();
    crate::worker::eventually(Duration::from_secs(5), "the waiting job ran", || async {
        b.count("status = 'done'").await == 2
    })
    .await;
    assert!(
        freed.elapsed() < Duration::from_secs(2),
        "{:?}",
        freed.elapsed()
    );
    stop.send(()).unwrap();
    handle.await.unwrap();
}

/// Through a stock PgBouncer in transaction mode (no LISTEN, the poll on): the limited claim,
/// the sequence trigger's lock and the outcomes' marks work as they do on a direct connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_sequences_hold_through_pgbouncer_in_transaction_mode() {
    let b = setup().await;
    let Some(bouncer) = skiplock_testdb::PgBouncer::start(b.db.url()).unwrap() else {
        eprintln!("pgbouncer is not installed: skipped");
        return;
    };
    let pooled = bouncer.through(b.db.url()).unwrap();
    let client = Client::builder(&pooled)
        .schema(b.db.schema())
        .pool_size(8)
        .build()
        .unwrap();
    client
        .set_queue_limits(
            "default",
            QueueLimits::none().concurrency(3).per_key(1),
            None,
        )
        .await
        .unwrap();
    let mut jobs: Vec<NewJob> = (0..30)
        .map(|i| {
            let key = format!("k{}", i % 4);
            job(&key, i, 10).key(key)
        })
        .collect();
    jobs.extend((0..5).map(|i| job("seq", i, 10).sequence("s")));
    client.enqueue_many(&jobs).await.unwrap();
    let seen = Shared::default();
    let ws: Vec<Worker> = (0..2)
        .map(|_| {
            Worker::builder(
                client.clone(),
                Registry::new().register_handler(
                    "rec",
                    JobOptions::default(),
                    recorder(seen.clone()),
                ),
            )
            .queue("default", 8)
            .listen(false)
            .poll_interval(Some(Duration::from_millis(50)))
            .build()
            .unwrap()
        })
        .collect();
    run_all(&b, ws, Duration::from_secs(60)).await;
    let s = seen.lock().unwrap();
    assert_eq!(s.starts.len(), 35);
    assert!(s.max_total <= 3, "{} at once", s.max_total);
    for (k, m) in &s.max {
        assert_eq!(*m, 1, "key or sequence {k}: {m} at once");
    }
    let order: Vec<i64> = s
        .events
        .iter()
        .filter(|(k, _, start)| k == "seq" && *start)
        .map(|e| e.1)
        .collect();
    assert_eq!(order, [0, 1, 2, 3, 4]);
}

/// Migration 12: a per-key claim that passes over a full key but still gets every job it
/// asked for leaves the queue unmarked, so the outcomes of its jobs send no notification (its
/// worker claims again at once anyway); a claim that comes back short because keys are full
/// marks it, and the next outcome wakes the queue.
#[tokio::test]
async fn a_full_per_key_claim_sends_no_wake_ups_and_a_short_one_does() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().per_key(1), None)
        .await
        .unwrap();
    let jobs: Vec<NewJob> = [("a", 1), ("a", 2), ("a", 3), ("b", 1)]
        .iter()
        .map(|(k, n)| NewJob::new("k", n).key(*k))
        .collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let lease = Duration::from_secs(30);
    let mut listener =
        crate::support::listen(b.db.url(), &b.client.schema().channel_quoted()).await;
    // Both keys' first jobs, a and b: a has jobs waiting behind its limit, but the claim got
    // all it asked for.
    let first = b.client.claim("default", 2, lease).await.unwrap();
    assert_eq!(first.len(), 2);
    assert_eq!(mark(&b.raw).await, None);
    for j in &first {
        let _ = b.client.complete(j.id, j.attempt).await.unwrap();
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), listener.rx.recv())
            .await
            .is_err(),
        "an outcome of a queue that is not marked notified"
    );
    // Asking for 5 gets only a's second job (a is then full, b has no more): short, marked,
    // and the claim that set the mark notifies once.
    let second = b.client.claim("default", 5, lease).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(mark(&b.raw).await.as_deref(), Some("slots"));
    assert_eq!(listener.next().await.payload(), "default");
    // Its outcome frees a's slot: the queue is woken.
    let _ = b
        .client
        .complete(second[0].id, second[0].attempt)
        .await
        .unwrap();
    assert_eq!(listener.next().await.payload(), "default");
}

/// The key walk of migration 12 reads each key with one short scan: a key with more free
/// slots than that scan reads gets the rest of its share, a key with one free slot gets one
/// job, a key whose jobs are all scheduled later gives none, a key headed by a job scheduled
/// later gives the due ones behind it, a key that can fill the claim
/// ends the walk, keys take turns within a claim (every key's first job, then every key's
/// second, ...; keys in key order), and the next claim goes on from the key after the last
/// one served, wrapping round to the first.
#[tokio::test]
async fn the_key_walk_gives_each_key_its_free_slots_in_turns() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().per_key(5), None)
        .await
        .unwrap();
    let mut jobs = Vec::new();
    for (key, count) in [("a", 8), ("b", 2), ("d", 6), ("e", 5)] {
        for n in 1..=count {
            jobs.push(NewJob::new("k", &format!("{key}{n}")).key(key));
        }
    }
    for n in 1..=3 {
        jobs.push(
            NewJob::new("k", &format!("c{n}"))
                .key("c")
                .delay(Duration::from_secs(3600)),
        );
    }
    // f: an urgent job scheduled for later heads the key in claim order; the due job behind
    // it still runs.
    jobs.push(
        NewJob::new("k", &"f1")
            .key("f")
            .priority(-5)
            .delay(Duration::from_secs(3600)),
    );
    jobs.push(NewJob::new("k", &"f2").key("f"));
    b.client.enqueue_many(&jobs).await.unwrap();
    // d already runs 4 of its 5.
    b.raw
        .batch_execute(
            "UPDATE jobs SET status = 'running', attempts = 1,
                 locked_until = now() + interval '1 minute'
             WHERE id IN (SELECT id FROM jobs WHERE key = 'd' ORDER BY id LIMIT 4)",
        )
        .await
        .unwrap();
    let lease = Duration::from_secs(30);
    let claim = |want: u32| {
        let client = b.client.clone();
        async move {
            let mut v: Vec<String> = client
                .claim("default", want, lease)
                .await
                .unwrap()
                .iter()
                .map(|j| j.payload_as::<String>().unwrap())
                .collect();
            v.sort();
            v
        }
    };
    // Four: key a alone can give them (5 free slots, read in two steps), so the walk ends
    // there.
    assert_eq!(claim(4).await, ["a1", "a2", "a3", "a4"]);
    assert_eq!(
        mark(&b.raw).await,
        None,
        "a full claim does not mark the queue"
    );
    // Four more, from after a: b gives its two, c none (not due), d its one free slot, e its
    // five; in turns (b1 d5 e1, then b2 e2 ...), so the first four are b1 d5 e1 b2.
    assert_eq!(claim(4).await, ["b1", "b2", "d5", "e1"]);
    // The rest: after e, f (f2: f1 is not due), then round to a (one slot left: a5), b
    // (nothing ready), d (full), e (four slots: e2 to e5). Short, with jobs behind full
    // keys: marked.
    assert_eq!(claim(100).await, ["a5", "e2", "e3", "e4", "e5", "f2"]);
    assert_eq!(mark(&b.raw).await.as_deref(), Some("slots"));
}

/// A limited claim skips a ready job that another session holds locked (an operator's
/// cancel in a transaction still open, say) and takes the others at once, both when every
/// candidate is keyed and when jobs without a key are among them: the two ways the per-key
/// claim locks its candidates since migration 26 (all at once beside its update, or one by
/// one in turn order). The held job is claimed once it is free. Negative control: without
/// `SKIP LOCKED` in the claim's lock beside its update, the keyed-only claim waited for the
/// other session and ran out of the 5 s given here. (The other session ends itself after
/// 10 s idle in its transaction, so that a claim that waits fails the test instead of
/// hanging it.)
#[tokio::test]
async fn a_limited_claim_skips_a_job_another_session_holds() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().per_key(2), None)
        .await
        .unwrap();
    let lease = Duration::from_secs(30);
    let names = |jobs: Vec<skiplock::ClaimedJob>| {
        let mut v: Vec<String> = jobs
            .iter()
            .map(|j| j.payload_as::<String>().unwrap())
            .collect();
        v.sort();
        v
    };
    for keyless in [false, true] {
        b.raw.batch_execute("DELETE FROM jobs").await.unwrap();
        let mut jobs = vec![
            NewJob::new("k", &"a1").key("a"),
            NewJob::new("k", &"a2").key("a"),
            NewJob::new("k", &"b1").key("b"),
        ];
        if keyless {
            jobs.push(NewJob::new("k", &"n1"));
        }
        b.client.enqueue_many(&jobs).await.unwrap();
        let holder = b.db.connect().await.unwrap();
        holder
            .batch_execute(&format!(
                "SET search_path TO \"{}\";
                 SET idle_in_transaction_session_timeout = '10s'; BEGIN;
                 SELECT 1 FROM jobs WHERE payload = '\"a1\"' FOR UPDATE",
                b.db.schema()
            ))
            .await
            .unwrap();
        let got =
            tokio::time::timeout(Duration::from_secs(5), b.client.claim("default", 10, lease))
                .await
                .unwrap_or_else(|_| {
                    panic!("the claim waited for the held job (keyless: {keyless})")
                })
                .unwrap();
        let want: &[&str] = if keyless {
            &["a2", "b1", "n1"]
        } else {
            &["a2", "b1"]
        };
        assert_eq!(names(got), want, "keyless: {keyless}");
        holder.batch_execute("ROLLBACK").await.unwrap();
        let got = b.client.claim("default", 10, lease).await.unwrap();
        assert_eq!(names(got), ["a1"], "keyless: {keyless}");
    }
}

/// A key headed (in claim order) by a job that is not due yet still gives the due job behind
/// it, even when the key has one slot: the walk reads that key's due jobs again rather than
/// offering the job that is not due.
#[tokio::test]
async fn a_key_headed_by_a_job_not_due_yet_gives_the_due_job_behind_it() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().per_key(1), None)
        .await
        .unwrap();
    b.client
        .enqueue_many(&[
            NewJob::new("k", &"later")
                .key("f")
                .priority(-5)
                .delay(Duration::from_secs(3600)),
            NewJob::new("k", &"now").key("f"),
        ])
        .await
        .unwrap();
    let got = b
        .client
        .claim("default", 10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload_as::<String>().unwrap(), "now");
}

/// The limited claim's statements keep one plan each, made for index walks and primary-key
/// probes whatever the table's size when it was made, and are never JIT-compiled (the walk's
/// estimated cost grows with the table, and compiling cost some 30 ms a claim): the settings
/// migration 12 gives claim_limited(). The backlog test above shows the plans hold.
#[tokio::test]
async fn the_limited_claim_keeps_index_plans_and_compiles_nothing() {
    let b = setup().await;
    let config: Vec<String> = b
        .raw
        .query_one(
            "SELECT proconfig FROM pg_proc WHERE oid = 'claim_limited'::regproc",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for setting in [
        "jit=off",
        "plan_cache_mode=force_generic_plan",
        "enable_seqscan=off",
        "enable_bitmapscan=off",
        "enable_sort=off",
        "enable_hashjoin=off",
        "enable_mergejoin=off",
    ] {
        assert!(
            config.iter().any(|c| c == setting),
            "claim_limited() lacks {setting}: {config:?}"
        );
    }
}

/// Migration 12: enqueueing many members of a sequence in one statement costs in proportion
/// to them, with statistics taken on an empty table. 100,000 members of one sequence and
/// 10,000 members of 2,000 sequences, in one statement each, under a statement timeout that
/// migration 11's trigger (whose plan for a small table compared every new member with every
/// other) did not meet: the first member of each sequence is ready, the rest held, in id
/// order.
#[tokio::test]
async fn a_batch_of_many_members_of_one_sequence_is_enqueued_in_proportion_to_it() {
    let b = setup().await;
    b.raw
        .batch_execute(
            "ANALYZE jobs;
             INSERT INTO jobs (payload, sequence)
               SELECT '{}', 's' || (g % 10) FROM generate_series(1, 30) g;
             SET statement_timeout = '60s';
             INSERT INTO jobs (payload, sequence) SELECT '{}', 'one' FROM generate_series(1, 100000);
             INSERT INTO jobs (payload, sequence)
               SELECT '{}', 's' || (g % 2000) FROM generate_series(1, 10000) g;
             RESET statement_timeout;",
        )
        .await
        .unwrap();
    assert_eq!(b.count("sequence = 'one' AND held IS NULL").await, 1);
    assert_eq!(
        b.count(
            "sequence = 'one' AND held IS NULL
             AND id = (SELECT min(id) FROM jobs WHERE sequence = 'one')"
        )
        .await,
        1
    );
    assert_eq!(b.count("sequence LIKE 's%' AND held IS NULL").await, 2000);
    assert_eq!(
        b.count("sequence LIKE 's%' AND held IS NOT NULL").await,
        8030
    );
    // A member enqueued later waits behind the active one.
    b.raw
        .batch_execute("INSERT INTO jobs (payload, sequence) VALUES ('{}', 'one')")
        .await
        .unwrap();
    assert_eq!(b.count("sequence = 'one' AND held IS NULL").await, 1);
}

/// The SQL functions that read the jobs table from PL/pgSQL, whose plans PostgreSQL keeps for
/// the session, read no table whole after the table has grown: ten calls of each on a small
/// table with statistics taken while it was empty, then 100,000 more rows, then one more call
/// of each inside a transaction whose sequential reads of `jobs` are counted
/// (`pg_stat_xact_user_tables`): claim_limited() through the claim, sequence_release()
/// through a member's outcome, enqueue_unique().
#[tokio::test]
async fn the_sql_functions_keep_index_plans_after_the_table_grows() {
    let b = setup().await;
    b.client
        .set_queue_limits("default", QueueLimits::none().per_key(2), None)
        .await
        .unwrap();
    let claim = b.client.statement(skiplock::Statement::Claim).to_owned();
    b.raw.batch_execute("ANALYZE jobs").await.unwrap();
    let round = |i: i64| {
        let raw = &b.raw;
        let claim = claim.clone();
        async move {
            raw.batch_execute(&format!(
                "INSERT INTO jobs (payload, key, sequence) VALUES ('{{}}', 'k{i}', 's{i}'), ('{{}}', 'k{i}', 's{i}');
                 SELECT enqueue_unique('default', '{{\"i\": {i}}}', unique_by_args => true);
                 UPDATE jobs SET status = 'done', finished_at = now()
                 WHERE sequence = 's{i}' AND held IS NULL AND status = 'queued';"
            ))
            .await
            .unwrap();
            raw.query(
                &claim,
                &[
                    &"default",
                    &5i64,
                    &30_000_000i64,
                    &FRONT.0,
                    &FRONT.1,
                    &FRONT.2,
                ],
            )
            .await
            .unwrap();
        }
    };
    for i in 0..10 {
        round(i).await;
    }
    b.raw
        .batch_execute(
            "INSERT INTO jobs (payload, key, sequence, unique_key)
             SELECT '{}', 'big' || (g % 100), 'big' || (g % 100), 'u' || g
             FROM generate_series(1, 100000) g",
        )
        .await
        .unwrap();
    b.raw.batch_execute("BEGIN").await.unwrap();
    round(10).await;
    let row = b
        .raw
        .query_one(
            "SELECT coalesce(seq_scan, 0), coalesce(seq_tup_read, 0)
             FROM pg_stat_xact_user_tables WHERE relid = 'jobs'::regclass",
            &[],
        )
        .await
        .unwrap();
    let (scans, read): (i64, i64) = (row.get(0), row.get(1));
    b.raw.batch_execute("COMMIT").await.unwrap();
    // A whole read of the table is 100,000 rows or more; a scan that stops at its first row
    // (an EXISTS planned again after another session's schema changes flushed this one's
    // caches) reads a few.
    assert!(
        read < 50_000,
        "sequential scans of jobs read {read} rows ({scans} scans): a statement read the whole table"
    );
}
