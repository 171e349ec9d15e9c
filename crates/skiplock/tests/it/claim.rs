//! The claim: SKIP LOCKED's not waiting, and the plan. (Exactly-once hand-out under
//! concurrency, and the naive claim's double runs seen by the same harness, are the lab's
//! tests, in the skiplock-bench crate.)

use std::time::Duration;

use skiplock::{NewJob, Statement};
use tokio_postgres::types::Type;

use crate::support::{setup, FRONT};

/// SKIP LOCKED: while the first claimer's transaction still holds job 1, the second claimer
/// gets job 2 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_locked_returns_another_job_at_once() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(&[NewJob::new("k", &1), NewJob::new("k", &2)])
        .await
        .unwrap();
    let sql = b.client.statement(Statement::Claim).to_owned();
    let mut a = b.db.connect().await.unwrap();
    let tx = a.transaction().await.unwrap();
    let (queue, one, lease) = ("default", 1i64, 300_000_000i64);
    let first = tx
        .query_typed(
            &sql,
            &[
                (&queue, Type::TEXT),
                (&one, Type::INT8),
                (&lease, Type::INT8),
                (&FRONT.0, Type::INT2),
                (&FRONT.1, Type::TIMESTAMPTZ),
                (&FRONT.2, Type::INT8),
            ],
        )
        .await
        .unwrap();
    assert_eq!(first[0].get::<_, i64>("id"), ids[0].0);

    let second = tokio::time::timeout(
        Duration::from_secs(10),
        b.client.claim("default", 1, Duration::from_secs(60)),
    )
    .await
    .expect("SKIP LOCKED claim waited for the other transaction")
    .unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].id, ids[1]);
    tx.rollback().await.unwrap();
}

/// EXPLAIN of the claim on a table of thousands of rows, most of them done:
/// Limit -> LockRows -> Index Scan using the ready index.
#[tokio::test]
async fn claim_plan_uses_the_ready_index() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..5_000).map(|i| NewJob::new("k", &i)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    b.raw
        .batch_execute(
            "UPDATE jobs SET status = 'done', attempts = 1, finished_at = now() WHERE id % 50 <> 0;
             ANALYZE jobs;",
        )
        .await
        .unwrap();
    let sql = format!(
        "EXPLAIN (COSTS OFF) {}",
        b.client.statement(Statement::Claim)
    );
    let (queue, limit, lease) = ("default", 10i64, 300_000_000i64);
    let plan: Vec<String> = b
        .raw
        .query_typed(
            &sql,
            &[
                (&queue, Type::TEXT),
                (&limit, Type::INT8),
                (&lease, Type::INT8),
                (&FRONT.0, Type::INT2),
                (&FRONT.1, Type::TIMESTAMPTZ),
                (&FRONT.2, Type::INT8),
            ],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let text = plan.join("\n");
    eprintln!("{text}");
    let pos = |needle: &str| {
        plan.iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not in plan:\n{text}"))
    };
    let (limit_at, lock_at, scan_at) = (
        pos("->  Limit"),
        pos("->  LockRows"),
        pos("Index Scan using jobs_ready_idx"),
    );
    assert!(limit_at < lock_at && lock_at < scan_at, "{text}");
}

/// The claim's `$4, $5, $6`: a claim from a key (where the worker's last claim ended) takes
/// only the jobs after it in claim order, and scans the ready index from there; a claim from
/// the front takes a job placed before the key. Under a snapshot held open on another
/// connection, the claim from the front walks the entries of every job claimed since (the
/// negative control: what the key saves), the claim from the key does not.
#[tokio::test]
async fn a_claim_from_a_key_takes_only_later_jobs_and_skips_what_a_held_snapshot_keeps() {
    let b = setup().await;
    let sql = b.client.statement(Statement::Claim).to_owned();
    let claim = |limit: i64, key: (i16, Option<std::time::SystemTime>, i64)| {
        let sql = sql.clone();
        let raw = &b.raw;
        async move {
            raw.query_typed(
                &sql,
                &[
                    (&"default", Type::TEXT),
                    (&limit, Type::INT8),
                    (&300_000_000i64, Type::INT8),
                    (&key.0, Type::INT2),
                    (&key.1, Type::TIMESTAMPTZ),
                    (&key.2, Type::INT8),
                ],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.get::<_, i16>("priority"),
                    Some(r.get::<_, std::time::SystemTime>("run_at")),
                    r.get::<_, i64>("id"),
                )
            })
            .collect::<Vec<_>>()
        }
    };
    let jobs: Vec<NewJob> = (0..10).map(|i| NewJob::new("k", &i)).collect();
    let ids = b.client.enqueue_many(&jobs).await.unwrap();
    let mut first = claim(3, FRONT).await;
    first.sort();
    assert_eq!(
        first.iter().map(|k| k.2).collect::<Vec<_>>(),
        ids[..3].iter().map(|i| i.0).collect::<Vec<_>>()
    );
    let key = first[2];
    // Placed before the key: a higher priority.
    let urgent = b
        .client
        .enqueue(&NewJob::new("k", &"urgent").priority(-1))
        .await
        .unwrap();
    let mut rest = claim(100, key).await;
    rest.sort();
    assert_eq!(
        rest.iter().map(|k| k.2).collect::<Vec<_>>(),
        ids[3..].iter().map(|i| i.0).collect::<Vec<_>>(),
        "from the key: the later jobs, not the urgent one before it"
    );
    assert!(claim(100, rest[6]).await.is_empty());
    let front = claim(100, FRONT).await;
    assert_eq!(front.len(), 1);
    assert_eq!(
        front[0].2, urgent.0,
        "from the front: the job before the key"
    );

    // A held snapshot, then 5,000 jobs claimed and finished past it.
    let jobs: Vec<NewJob> = (0..5_030).map(|i| NewJob::new("k", &i)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let mut holder = b.db.connect().await.unwrap();
    let held = holder
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    held.query_one("SELECT 1", &[]).await.unwrap();
    let mut last = FRONT;
    for _ in 0..50 {
        let got = claim(100, FRONT).await;
        last = last.max(got.iter().copied().max().unwrap());
    }
    b.raw
        .batch_execute(
            "UPDATE jobs SET status = 'done', finished_at = now() WHERE status = 'running'",
        )
        .await
        .unwrap();
    // The ready index's entries a claim reads (dead ones too), counted by the server for
    // the transaction the claim runs in (rolled back, so each starts from the same table).
    let entries = |key: (i16, Option<std::time::SystemTime>, i64)| {
        let sql = sql.clone();
        let db = &b.db;
        async move {
            let mut c = db.connect().await.unwrap();
            let tx = c.transaction().await.unwrap();
            tx.batch_execute(&format!("SET LOCAL search_path = \"{}\"", db.schema()))
                .await
                .unwrap();
            let plan: Vec<String> = tx
                .query(
                    &format!("EXPLAIN (ANALYZE, COSTS OFF) {sql}"),
                    &[&"default", &10i64, &300_000_000i64, &key.0, &key.1, &key.2],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            let read: i64 = tx
                .query_one(
                    "SELECT pg_stat_get_xact_tuples_returned('jobs_ready_idx'::regclass)",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            tx.rollback().await.unwrap();
            (read, plan.join("\n"))
        }
    };
    let (from_front, _) = entries(FRONT).await;
    let (from_key, plan) = entries(last).await;
    assert!(
        plan.contains("ROW(priority, run_at, id) >"),
        "the key bounds the index scan: {plan}"
    );
    assert!(
        from_front >= 5_000 && from_key <= 100,
        "index entries read from the front {from_front}, from the key {from_key}"
    );
    held.rollback().await.unwrap();
}

/// A session that holds `queue`'s turn as a worker's claim in turn does (migration 24), its
/// transaction left open: `job_claim_turn_try.sql`, then `job_claim.sql` of `n` (the
/// worker's runs in one round trip and commits at once). Returns the session's transaction
/// and the ids it claimed.
async fn hold_turn<'a>(
    b: &crate::support::Bundle,
    a: &'a mut tokio_postgres::Client,
    queue: &str,
    n: i64,
) -> (tokio_postgres::Transaction<'a>, Vec<i64>) {
    let turn = b
        .client
        .statement(Statement::ClaimTurnTry)
        .replace("{turn}", &skiplock::claim_turn(queue).to_string());
    // BEGIN is the statement's first: the transaction is opened through the client's API
    // instead, and the rest (the LOCK) run in it.
    let lock = turn
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "BEGIN")
        .collect::<Vec<_>>()
        .join(";");
    let tx = a.transaction().await.unwrap();
    tx.batch_execute(&lock).await.unwrap();
    let lease = 300_000_000i64;
    let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 6] = [
        (&queue, Type::TEXT),
        (&n, Type::INT8),
        (&lease, Type::INT8),
        (&FRONT.0, Type::INT2),
        (&FRONT.1, Type::TIMESTAMPTZ),
        (&FRONT.2, Type::INT8),
    ];
    let ids = tx
        .query_typed(b.client.statement(Statement::Claim), &params)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>("id"))
        .collect();
    (tx, ids)
}

/// The ids of claimed jobs.
fn ids_of(jobs: &[skiplock::ClaimedJob]) -> Vec<i64> {
    jobs.iter().map(|j| j.id.0).collect()
}

const LEASE: Duration = Duration::from_secs(300);

/// Waits (10 s at most) until `n` sessions wait for `queue`'s turn: a lock on its view not
/// granted, in this test's schema only (the suite's other tests claim in turn on the same
/// server at the same time). Returns their pids.
async fn turn_waiters(b: &crate::support::Bundle, queue: &str, n: usize) -> Vec<i32> {
    let view = format!("claim_turn_{}", skiplock::claim_turn(queue));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let pids: Vec<i32> = b
            .raw
            .query(
                "SELECT pid FROM pg_locks WHERE relation = $1::text::regclass AND NOT granted",
                &[&view],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            pids.len() <= n,
            "{} claims waiting, {n} expected",
            pids.len()
        );
        if pids.len() == n {
            return pids;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the claim in turn was never seen waiting for its turn"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The claim in turn (migrations 16, 19 and 24), as the worker makes it through a backlog:
/// while one session's claim in turn holds the queue's turn (its transaction left open here;
/// the worker's commits in the same round trip), another claim in turn of the same queue
/// waits, a claim in turn of a queue with another turn and a plain claim (`job_claim.sql`)
/// do not; once the first commits, the waiting claim takes the next jobs, none of the first
/// one's, and as many as its larger batch (a claim that waited for its turn takes up to
/// `max_claim_batch_waited`; one that finds the turn free takes its `max_claim_batch`).
/// Negative control (run by hand): with `job_claim_turn_try.sql`'s `NOWAIT` taken out, the
/// claim that waited takes 5 and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_in_turn_wait_for_each_other_and_plain_claims_do_not() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..20).map(|i| NewJob::new("k", &i)).collect();
    let ids: Vec<i64> = b
        .client
        .enqueue_many(&jobs)
        .await
        .unwrap()
        .iter()
        .map(|id| id.0)
        .collect();
    // "other" takes another turn than "default" (5 and 14).
    assert_ne!(
        skiplock::claim_turn("other"),
        skiplock::claim_turn("default")
    );
    b.client
        .enqueue(&NewJob::new("k", &0).queue("other"))
        .await
        .unwrap();
    let mut a = b.db.connect().await.unwrap();
    let (tx, first) = hold_turn(&b, &mut a, "default", 5).await;
    assert_eq!(first, ids[..5]);

    let waiting = tokio::spawn({
        let client = b.client.clone();
        async move { client.claim_in_turn_for_tests("default", 5, 8, LEASE).await }
    });
    turn_waiters(&b, "default", 1).await;
    assert!(
        !waiting.is_finished(),
        "a claim in turn waits for the one out"
    );

    // A plain claim steps past the rows the open claim holds, at once.
    let plain_got =
        tokio::time::timeout(Duration::from_secs(5), b.client.claim("default", 2, LEASE))
            .await
            .expect("a plain claim does not wait for a claim in turn")
            .unwrap();
    assert_eq!(ids_of(&plain_got), ids[5..7]);
    // Another turn's claims in turn do not wait either.
    let other = tokio::time::timeout(
        Duration::from_secs(5),
        b.client.claim_in_turn_for_tests("other", 5, 8, LEASE),
    )
    .await
    .expect("another turn's claim in turn does not wait")
    .unwrap();
    assert_eq!(other.len(), 1);
    assert!(
        !waiting.is_finished(),
        "a claim in turn waits for the one out"
    );

    tx.commit().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting claim ran once the first committed")
        .unwrap()
        .unwrap();
    assert_eq!(
        ids_of(&second),
        ids[7..15],
        "the next jobs, none of the first claim's, as many as its larger batch: it waited for its turn"
    );
    // A claim in turn that finds the turn free takes its own batch.
    let free = b
        .client
        .claim_in_turn_for_tests("default", 2, 8, LEASE)
        .await
        .unwrap();
    assert_eq!(ids_of(&free), ids[15..17]);
}

/// A claim waiting for its turn holds no snapshot (migration 24): its session shows no
/// `backend_xmin` while it waits, so the index entries of the rows claimed meanwhile can be
/// marked dead as soon as their claims commit. Negative control, in the test: a claim
/// through `claim_in_turn()` (migrations 16-23, kept for older workers), waiting for the
/// queue's advisory lock, shows one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_waiting_for_its_turn_holds_no_snapshot() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..10).map(|i| NewJob::new("k", &i)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let xmin_of = |pid: i32| {
        let raw = &b.raw;
        async move {
            raw.query_one(
                "SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap()
            .get::<_, Option<String>>(0)
        }
    };

    // The worker's claim in turn.
    let mut a = b.db.connect().await.unwrap();
    let (tx, _) = hold_turn(&b, &mut a, "default", 2).await;
    let waiting = tokio::spawn({
        let client = b.client.clone();
        async move { client.claim_in_turn_for_tests("default", 2, 2, LEASE).await }
    });
    let pids = turn_waiters(&b, "default", 1).await;
    assert_eq!(
        xmin_of(pids[0]).await,
        None,
        "the claim waiting for its turn"
    );
    tx.commit().await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(got.len(), 2);

    // The older claim in turn, waiting inside its SELECT.
    let mut a = b.db.connect().await.unwrap();
    let tx = a.transaction().await.unwrap();
    let schema = b.db.schema().to_owned();
    tx.execute(
        &format!("SELECT pg_advisory_xact_lock(\"{schema}\".jobs_claim_key('default'))"),
        &[],
    )
    .await
    .unwrap();
    let c = b.db.connect().await.unwrap();
    let pid: i32 = c
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let old = tokio::spawn(async move {
        c.query(
            &format!(
                "SELECT * FROM \"{schema}\".claim_in_turn('default', 2, 300000000, \
                 (-32768)::int2, NULL, (-9223372036854775808)::int8, 2)"
            ),
            &[],
        )
        .await
        .unwrap()
        .len()
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: bool = b
            .raw
            .query_one(
                "SELECT coalesce(wait_event = 'advisory', false) FROM pg_stat_activity \
                 WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if waiting {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never seen waiting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        xmin_of(pid).await.is_some(),
        "the older claim in turn holds a snapshot while it waits: the check can fail"
    );
    tx.commit().await.unwrap();
    assert_eq!(old.await.unwrap(), 2);
}

/// The claims in turn lock one of sixteen views, `claim_turn_0` to `claim_turn_15`
/// (migration 24), which every role that may use the schema may lock; a queue's turn is
/// the same in every version (the workers of two versions during an upgrade take the same
/// turns); the statements lock the turn they are given; and `claim_in_turn()` is still
/// there for the workers of an older version during an upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turns_are_sixteen_views_and_a_queue_keeps_its_turn() {
    let b = setup().await;
    let views: Vec<String> = b
        .raw
        .query(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace \
             AND c.relkind = 'v' AND c.relname LIKE 'claim\\_turn\\_%' \
             AND has_table_privilege('public', c.oid, 'UPDATE') ORDER BY c.relname",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut expected: Vec<String> = (0..skiplock::CLAIM_TURNS)
        .map(|n| format!("claim_turn_{n}"))
        .collect();
    expected.sort();
    assert_eq!(views, expected);
    // FNV-1a of the name modulo 16: fixed values.
    for (queue, turn) in [
        ("default", 14),
        ("other", 5),
        ("emails", 12),
        ("a", 12),
        ("x", 7),
    ] {
        assert_eq!(skiplock::claim_turn(queue), turn, "{queue}");
    }
    for s in [Statement::ClaimTurnTry, Statement::ClaimInTurn] {
        let sql = b.client.statement(s);
        assert!(sql.starts_with("BEGIN;"), "{sql}");
        assert!(
            sql.contains(&format!(
                "LOCK TABLE \"{}\".claim_turn_{{turn}} IN EXCLUSIVE MODE",
                b.db.schema()
            )),
            "{sql}"
        );
    }
    assert_eq!(b.client.statement(Statement::ClaimTurnEnd), "COMMIT");
    let old: i64 = b
        .raw
        .query_one(
            "SELECT count(*) FROM pg_proc WHERE proname = 'claim_in_turn' \
             AND pronamespace = current_schema()::regnamespace",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(old, 2);
}

/// The turn is the claim's transaction's: a session that dies holding it releases it with
/// its transaction, and the claim waiting behind it runs at once and takes the jobs the dead
/// one had claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_turn_whose_session_dies_holds_nobody_up() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..4).map(|i| NewJob::new("k", &i)).collect();
    let ids: Vec<i64> = b
        .client
        .enqueue_many(&jobs)
        .await
        .unwrap()
        .iter()
        .map(|id| id.0)
        .collect();
    let mut a = b.db.connect().await.unwrap();
    let pid: i32 = a
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let (tx, first) = hold_turn(&b, &mut a, "default", 4).await;
    assert_eq!(first.len(), 4);
    let waiting = tokio::spawn({
        let client = b.client.clone();
        async move { client.claim_in_turn_for_tests("default", 4, 4, LEASE).await }
    });
    turn_waiters(&b, "default", 1).await;
    assert!(!waiting.is_finished(), "the claim waits for its turn");
    let killed: bool = b
        .raw
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(killed);
    // Well within the 2 s a claim waits at most for its turn (the next test).
    let got = tokio::time::timeout(Duration::from_secs(1), waiting)
        .await
        .expect("the waiting claim ran once the holder's session died")
        .unwrap()
        .unwrap();
    assert_eq!(
        ids_of(&got),
        ids,
        "the dead session's claim was rolled back with it"
    );
    drop(tx);
}

/// A claim in turn waits 2 s at most for its turn: behind a holder whose transaction stays
/// open (a session stuck mid-claim), it then claims without the turn, its own batch,
/// stepping past the holder's rows as a plain claim does, instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_turn_waits_two_seconds_at_most_for_its_turn() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..12).map(|i| NewJob::new("k", &i)).collect();
    let ids: Vec<i64> = b
        .client
        .enqueue_many(&jobs)
        .await
        .unwrap()
        .iter()
        .map(|id| id.0)
        .collect();
    let mut a = b.db.connect().await.unwrap();
    let (tx, first) = hold_turn(&b, &mut a, "default", 4).await;
    assert_eq!(first.len(), 4);
    let started = std::time::Instant::now();
    // A larger batch after a wait than its own: a claim whose turn never came takes its own.
    let got = b
        .client
        .claim_in_turn_for_tests("default", 4, 8, LEASE)
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1_800) && waited < Duration::from_secs(6),
        "waited {waited:?}"
    );
    assert_eq!(
        ids_of(&got),
        ids[4..8],
        "claimed past the holder's rows, its own batch (its turn never came)"
    );
    tx.rollback().await.unwrap();
}

/// A claim in turn whose turn cannot be taken at all (here its view is gone; a role
/// without the right to lock it would do the same) claims without it, its own batch,
/// instead of failing: the worker keeps working, slower through a backlog of several
/// processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_turn_whose_turn_cannot_be_taken_claims_without_it() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..6).map(|i| NewJob::new("k", &i)).collect();
    let ids: Vec<i64> = b
        .client
        .enqueue_many(&jobs)
        .await
        .unwrap()
        .iter()
        .map(|id| id.0)
        .collect();
    b.raw
        .batch_execute(&format!(
            "DROP VIEW claim_turn_{}",
            skiplock::claim_turn("default")
        ))
        .await
        .unwrap();
    let got = b
        .client
        .claim_in_turn_for_tests("default", 3, 5, LEASE)
        .await
        .unwrap();
    assert_eq!(ids_of(&got), ids[..3]);
}
