//! The claim: SKIP LOCKED's not waiting, and the plan. (Exactly-once hand-out under
//! concurrency, and the naive claim's double runs seen by the same harness, are the lab's
//! tests, in the skiplock-bench crate.)

use std::time::Duration;

use skiplock::{NewJob, Statement};
use tokio_postgres::types::Type;

use crate::support::setup;

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
