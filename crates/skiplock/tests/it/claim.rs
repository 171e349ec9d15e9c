//! The claim: exactly-once hand-out under concurrency, the naive claim's double runs
//! seen by the same harness, FOR UPDATE's waiting, SKIP LOCKED's not waiting, and the plan.

use std::time::Duration;

use skiplock::lab::{claim_race, ClaimMethod, RaceOptions, Stop};
use skiplock::{NewJob, Schema, Statement};
use tokio_postgres::types::Type;

use crate::support::setup;

async fn race(method: ClaimMethod, batch: u32, stop: Stop) -> skiplock::lab::RaceReport {
    let b = setup().await;
    let schema = Schema::new(b.db.schema()).unwrap();
    let report = claim_race(
        b.db.url(),
        &schema,
        method,
        RaceOptions {
            workers: 8,
            jobs: 10_000,
            batch,
            stop,
        },
    )
    .await
    .unwrap();
    eprintln!("{method:?} batch {batch}: {report:?}");
    report
}

fn assert_exactly_once(r: &skiplock::lab::RaceReport) {
    assert_eq!(r.claims, 10_000, "every job handed out, nothing more");
    assert_eq!(r.distinct_jobs, 10_000, "every job handed out");
    assert_eq!(r.duplicate_claims, 0, "no job handed out twice");
    assert_eq!(r.max_claimers_of_one_job, 1);
    assert_eq!(r.lost_completions, 0);
    assert_eq!(r.statuses, vec![("done".to_owned(), 10_000, 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_claimers_take_each_job_once_batch_1() {
    assert_exactly_once(&race(ClaimMethod::SkipLocked, 1, Stop::WhenEmpty).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_claimers_take_each_job_once_batch_10() {
    assert_exactly_once(&race(ClaimMethod::SkipLocked, 10, Stop::WhenEmpty).await);
}

/// The same harness, running the article's naive statement, sees double runs: proof that
/// the exactly-once tests above could fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_harness_sees_the_naive_claim_double_run_jobs() {
    let r = race(ClaimMethod::Naive, 1, Stop::AfterClaims(1_250)).await;
    assert!(
        r.duplicate_claims > 0,
        "naive claim showed no duplicates: {r:?}"
    );
    assert!(r.max_claimers_of_one_job > 1);
    let done = r.statuses.iter().find(|s| s.0 == "done").map_or(0, |s| s.1);
    assert!(
        done < 10_000,
        "10,000 claims cannot finish 10,000 jobs when some repeat"
    );
    let max_attempts = r.statuses.iter().map(|s| s.2).max().unwrap_or(0);
    assert!(max_attempts > 1, "some job was claimed more than once");
}

/// FOR UPDATE without SKIP LOCKED: the second claimer waits for the first's transaction,
/// then skips the row the first took and returns the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_update_without_skip_locked_waits_for_the_first_transaction() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(&[NewJob::new("k", &1), NewJob::new("k", &2)])
        .await
        .unwrap();
    let sql = b.client.statement(Statement::LabClaimForUpdate).to_owned();
    let queue = "default";
    let one = 1i64;

    let mut a = b.db.connect().await.unwrap();
    let tx = a.transaction().await.unwrap();
    let first = tx
        .query_typed(&sql, &[(&queue, Type::TEXT), (&one, Type::INT8)])
        .await
        .unwrap();
    assert_eq!(first[0].get::<_, i64>(0), ids[0].0);

    let c = b.db.connect().await.unwrap();
    let pid: i32 = c
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let sql2 = sql.clone();
    let second = tokio::spawn(async move {
        c.query_typed(&sql2, &[(&queue, Type::TEXT), (&one, Type::INT8)])
            .await
            .map(|rows| rows[0].get::<_, i64>(0))
    });

    // The second claimer is blocked on a row lock (seen from the server), not finished.
    let mut waited = false;
    for _ in 0..500 {
        let row = b
            .raw
            .query_one(
                "SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap();
        if row.get::<_, String>(0) == "Lock" {
            waited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(waited, "the second claimer never waited on a lock");
    assert!(!second.is_finished());

    tx.commit().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("second claimer still blocked after commit")
        .unwrap()
        .unwrap();
    assert_eq!(got, ids[1].0, "after the commit it skips the taken job");
}

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
