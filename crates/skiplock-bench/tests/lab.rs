//! The lab against a real PostgreSQL: exactly-once hand-out under concurrency, the naive
//! claim's double runs seen by the same harness, FOR UPDATE's waiting, and the article's wait
//! and vacuum experiments.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use skiplock::{Client, NewJob, Schema};
use skiplock_bench::lab::{
    claim_race, claim_wait, vacuum, ClaimMethod, RaceOptions, RaceReport, Stop,
};
use skiplock_bench::Statement;
use skiplock_testdb::TestDb;
use tokio_postgres::types::Type;

/// A test schema, migrated; a client on it; a plain connection whose search_path is it.
struct Bundle {
    db: TestDb,
    client: Client,
    raw: tokio_postgres::Client,
}

async fn setup() -> Bundle {
    let db = TestDb::new().await;
    let client = Client::builder(db.url())
        .schema(db.schema())
        .pool_size(16)
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let raw = db.connect().await.unwrap();
    raw.batch_execute(&format!("SET search_path TO \"{}\"", db.schema()))
        .await
        .unwrap();
    Bundle { db, client, raw }
}

async fn race(method: ClaimMethod, batch: u32, stop: Stop) -> RaceReport {
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

fn assert_exactly_once(r: &RaceReport) {
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
    let sql = Statement::LabClaimForUpdate.sql(b.client.schema());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_experiment_shows_for_update_waiting_and_skip_locked_not() {
    let b = setup().await;
    let schema = Schema::new(b.db.schema()).unwrap();
    let r = claim_wait(b.db.url(), &schema, Duration::from_millis(500))
        .await
        .unwrap();
    assert!(r.for_update_ms >= 450.0, "{r:?}");
    assert!(r.skip_locked_ms < 450.0, "{r:?}");
    assert!(r.for_update_job.is_some() && r.skip_locked_job.is_some());
}

/// The article's vacuum lesson, in a database of its own (other sessions of a shared
/// database would change the figures): 2,000 dead rows not removable while one claim
/// transaction stays open, all removable after it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vacuum_cannot_remove_rows_while_a_claim_stays_open() {
    let db = TestDb::new_database().await;
    let client = Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let schema = Schema::new(db.schema()).unwrap();
    let r = vacuum(db.url(), &schema, 2_000, 4).await.unwrap();
    eprintln!("{r:?}");
    assert_eq!(r.dead_not_removable_open, 2_000, "{r:?}");
    assert_eq!(r.dead_not_removable_after_commit, 0, "{r:?}");
    assert!(r.removed_after_commit >= 2_000, "{r:?}");
}
