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

/// The claim in turn (`job_claim_in_turn.sql`, migrations 16 and 19): while one session's
/// claim in turn holds the queue's lock (its transaction left open here; the worker's runs in
/// autocommit, for one statement), another claim in turn of the same queue waits, a claim
/// in turn of another queue and a plain claim (`job_claim.sql`) do not; once the first
/// commits, the waiting claim takes the next jobs, none of the first one's, and as many as
/// its `$7` (a claim that waited for its turn takes its larger batch; those that found the
/// turn free take their `$2`). Negative control (run by hand): with migration 19's
/// `want := greatest(...)` taken out, the waiting claim takes 5 and the test fails.
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
    b.client
        .enqueue(&NewJob::new("k", &0).queue("other"))
        .await
        .unwrap();
    let in_turn = b.client.statement(Statement::ClaimInTurn).to_owned();
    let plain = b.client.statement(Statement::Claim).to_owned();
    // `waited`: the claim in turn's $7 (the plain claim has six parameters).
    async fn claim(
        c: &(impl tokio_postgres::GenericClient + Sync),
        sql: &str,
        queue: &str,
        n: i64,
        waited: Option<i64>,
    ) -> Vec<i64> {
        let lease = 300_000_000i64;
        let mut params: Vec<(&(dyn tokio_postgres::types::ToSql + Sync), Type)> = vec![
            (&queue, Type::TEXT),
            (&n, Type::INT8),
            (&lease, Type::INT8),
            (&FRONT.0, Type::INT2),
            (&FRONT.1, Type::TIMESTAMPTZ),
            (&FRONT.2, Type::INT8),
        ];
        if let Some(w) = &waited {
            params.push((w, Type::INT8));
        }
        c.query_typed(sql, &params)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, i64>("id"))
            .collect()
    }
    let mut a = b.db.connect().await.unwrap();
    let tx = a.transaction().await.unwrap();
    let first = claim(&tx, &in_turn, "default", 5, Some(8)).await;
    assert_eq!(
        first,
        ids[..5],
        "the first claim in turn takes the front, its $2: it found the turn free"
    );

    let second = b.db.connect().await.unwrap();
    let waiting = tokio::spawn({
        let in_turn = in_turn.clone();
        async move { claim(&second, &in_turn, "default", 5, Some(8)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "a claim in turn waits for the one out"
    );
    // Seen by the server as waiting for the advisory lock (this test's schema only: the
    // suite's other tests claim in turn on the same server at the same time). On a loaded
    // machine the waiting claim may take a moment to reach the server: looked for 10 s.
    let mine = format!("%\"{}\".claim_in_turn(%", b.db.schema());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let waits: i64 = b
            .raw
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND wait_event = 'advisory' AND query LIKE $1",
                &[&mine],
            )
            .await
            .unwrap()
            .get(0);
        assert!(waits <= 1, "{waits} claims in turn waiting, one expected");
        if waits == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second claim in turn was never seen waiting for its turn"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !waiting.is_finished(),
        "a claim in turn waits for the one out"
    );

    // A plain claim steps past the rows the open claim holds, at once.
    let c = b.db.connect().await.unwrap();
    let plain_got = tokio::time::timeout(
        Duration::from_secs(5),
        claim(&c, &plain, "default", 2, None),
    )
    .await
    .expect("a plain claim does not wait for a claim in turn");
    assert_eq!(plain_got, ids[5..7]);
    // Another queue's claims in turn have a lock of their own.
    let other = tokio::time::timeout(
        Duration::from_secs(5),
        claim(&c, &in_turn, "other", 5, Some(8)),
    )
    .await
    .expect("another queue's claim in turn does not wait");
    assert_eq!(other.len(), 1);

    tx.commit().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting claim ran once the first committed")
        .unwrap();
    assert_eq!(
        second,
        ids[7..15],
        "the next jobs, none of the first claim's, as many as its $7: it waited for its turn"
    );
}

/// `claim_in_turn()` runs exactly `job_claim.sql`'s statement (its text, rendered for the
/// schema, comment lines aside): the two cannot drift apart unnoticed. Negative control (run
/// by hand): a changed condition in either file fails this test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_in_turn_runs_job_claim_sql() {
    let b = setup().await;
    let strip = |s: &str| -> String {
        s.lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .map(str::trim_end)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let claim = strip(b.client.statement(Statement::Claim));
    // Both versions: migration 16's (six arguments, for workers of the previous version
    // during an upgrade) and migration 19's (seven).
    let srcs = b
        .raw
        .query(
            "SELECT pronargs, prosrc FROM pg_proc WHERE proname = 'claim_in_turn' \
             AND pronamespace = current_schema()::regnamespace ORDER BY pronargs",
            &[],
        )
        .await
        .unwrap();
    let nargs: Vec<i16> = srcs.iter().map(|r| r.get(0)).collect();
    assert_eq!(nargs, [6, 7]);
    for r in &srcs {
        let src: String = r.get(1);
        let body = src
            .split("$claim$")
            .nth(1)
            .expect("claim_in_turn() runs a statement quoted $claim$");
        assert_eq!(strip(body), claim);
    }
    // And the seven-argument one is what the worker's claim in turn calls.
    assert!(b
        .client
        .statement(Statement::ClaimInTurn)
        .contains(".claim_in_turn($1, $2, $3, $4, $5, $6, $7)"));
}

/// The queue's lock of a claim in turn is the transaction's: a session that dies holding it
/// (terminated here while its claim's transaction stays open, where the worker's claim runs
/// in autocommit and holds it for one statement) releases it with its transaction, and the
/// claim waiting behind it runs at once and takes the jobs the dead one had claimed.
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
    let in_turn = b.client.statement(Statement::ClaimInTurn).to_owned();
    let params =
        |n: &'static i64| -> [(&'static (dyn tokio_postgres::types::ToSql + Sync), Type); 7] {
            [
                (&"default", Type::TEXT),
                (n, Type::INT8),
                (&300_000_000i64, Type::INT8),
                (&FRONT.0, Type::INT2),
                (&FRONT.1, Type::TIMESTAMPTZ),
                (&FRONT.2, Type::INT8),
                (n, Type::INT8),
            ]
        };
    let mut a = b.db.connect().await.unwrap();
    let pid: i32 = a
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let tx = a.transaction().await.unwrap();
    let first = tx.query_typed(&in_turn, &params(&4)).await.unwrap();
    assert_eq!(first.len(), 4);
    let second = b.db.connect().await.unwrap();
    let waiting = tokio::spawn({
        let in_turn = in_turn.clone();
        async move {
            second
                .query_typed(&in_turn, &params(&4))
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, i64>("id"))
                .collect::<Vec<_>>()
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
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
        .unwrap();
    assert_eq!(got, ids, "the dead session's claim was rolled back with it");
    drop(tx);
}

/// A claim in turn waits 2 s at most for its turn: behind a holder whose transaction stays
/// open (a session stuck mid-claim), it then claims without the turn, stepping past the
/// holder's rows as a plain claim does, instead of failing on the session's `lock_timeout`.
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
    let in_turn = b.client.statement(Statement::ClaimInTurn).to_owned();
    let four = 4i64;
    let lease = 300_000_000i64;
    // $7 larger than $2: a claim whose turn never came takes its own batch, not the larger.
    let eight = 8i64;
    let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 7] = [
        (&"default", Type::TEXT),
        (&four, Type::INT8),
        (&lease, Type::INT8),
        (&FRONT.0, Type::INT2),
        (&FRONT.1, Type::TIMESTAMPTZ),
        (&FRONT.2, Type::INT8),
        (&eight, Type::INT8),
    ];
    let mut a = b.db.connect().await.unwrap();
    let tx = a.transaction().await.unwrap();
    assert_eq!(tx.query_typed(&in_turn, &params).await.unwrap().len(), 4);
    let c = b.db.connect().await.unwrap();
    // The session's own lock_timeout (skiplock's default is 10 s) is restored after the wait.
    c.batch_execute("SET lock_timeout = '10s'").await.unwrap();
    let started = std::time::Instant::now();
    let got: Vec<i64> = c
        .query_typed(&in_turn, &params)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>("id"))
        .collect();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1_800) && waited < Duration::from_secs(6),
        "waited {waited:?}"
    );
    assert_eq!(
        got,
        ids[4..8],
        "claimed past the holder's rows, its own batch (its turn never came)"
    );
    let timeout: String = c.query_one("SHOW lock_timeout", &[]).await.unwrap().get(0);
    assert_eq!(timeout, "10s");
    tx.rollback().await.unwrap();
}
