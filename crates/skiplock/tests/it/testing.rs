//! `skiplock::testing`: the enqueue assertions (pooled and inside the caller's
//! transaction), `run_job` through the worker's executor, and `drain`.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, SystemTime};

use futures_util::FutureExt as _;
use serde_json::json;
use skiplock::testing::{
    assert_enqueued, assert_enqueued_tx, assert_not_enqueued, assert_not_enqueued_tx, drain,
    enqueued, enqueued_tx, run_job, Expect,
};
use skiplock::{JobContext, JobError, JobOptions, JobState, NewJob, Registry};

use crate::support::setup;

/// The panic message of `fut`, or `None` if it did not panic.
async fn panics<F: std::future::Future>(fut: F) -> Option<String> {
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(_) => None,
        Err(p) => Some(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default(),
        ),
    }
}

fn email(to: &str) -> NewJob {
    NewJob::new(
        "send_email",
        &json!({ "to": to, "subject": "hi", "tags": ["a", "b"] }),
    )
    .queue("mail")
}

#[tokio::test]
async fn assertions_match_kind_queue_state_and_a_payload_subset() {
    let b = setup().await;
    let c = &b.client;
    let id = c.enqueue(&email("a@example.com")).await.unwrap();
    c.enqueue(&NewJob::new("other", &json!({ "to": "a@example.com" })))
        .await
        .unwrap();

    let want = Expect::kind("send_email")
        .queue("mail")
        .payload_includes(json!({ "to": "a@example.com" }));
    let found = assert_enqueued(c, want.clone()).await;
    assert_eq!(found.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);
    assert_eq!(enqueued(c, &Expect::any()).await.unwrap().len(), 2);
    assert_eq!(
        enqueued(
            c,
            &Expect::kind("send_email").payload_includes(json!({ "tags": ["b"] }))
        )
        .await
        .unwrap()
        .len(),
        1,
        "an array matches an array containing its elements"
    );
    assert_not_enqueued(c, Expect::kind("send_email").queue("default")).await;
    assert_not_enqueued(
        c,
        Expect::kind("send_email").payload_includes(json!({ "to": "b@example.com" })),
    )
    .await;
    assert_not_enqueued(c, want.clone().state(JobState::Done)).await;

    // A mismatch panics, and the message lists what is there.
    let msg = panics(assert_enqueued(
        c,
        Expect::kind("send_email").payload_includes(json!({ "to": "b@example.com" })),
    ))
    .await
    .expect("a job with another payload must not match");
    assert!(msg.contains("found none"), "{msg}");
    assert!(msg.contains(&format!("job {id}")), "{msg}");
    assert!(msg.contains("a@example.com"), "{msg}");
    assert!(msg.contains("\"other\""), "{msg}");

    let msg = panics(assert_not_enqueued(c, want.clone()))
        .await
        .expect("a matching job must fail assert_not_enqueued");
    assert!(msg.contains(&format!("job {id}")), "{msg}");

    // Done: no longer enqueued by default, but found in its state.
    b.raw
        .execute(
            "UPDATE jobs SET status = 'done', finished_at = now() WHERE id = $1",
            &[&id.0],
        )
        .await
        .unwrap();
    assert_not_enqueued(c, want.clone()).await;
    assert_enqueued(c, want.state(JobState::Done)).await;
}

#[tokio::test]
async fn assertions_see_the_callers_transaction_before_commit_and_nothing_after_rollback() {
    let b = setup().await;
    let c = &b.client;
    let want = Expect::kind("send_email").payload_includes(json!({ "to": "tx@example.com" }));
    let mut conn = c.pool().get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    c.enqueue_tx(&tx, &email("tx@example.com")).await.unwrap();

    assert_enqueued_tx(c, &tx, want.clone()).await;
    assert_eq!(enqueued_tx(c, &tx, &want).await.unwrap().len(), 1);
    let msg = panics(assert_not_enqueued_tx(c, &tx, want.clone())).await;
    assert!(msg.is_some(), "the transaction's own job must be seen");
    // Not committed: another connection sees nothing.
    assert_not_enqueued(c, want.clone()).await;
    assert!(panics(assert_enqueued(c, want.clone())).await.is_some());

    tx.rollback().await.unwrap();
    assert_not_enqueued(c, want.clone()).await;
    assert!(enqueued(c, &Expect::any()).await.unwrap().is_empty());
}

/// The same assertions inside an sqlx transaction: every column of the found row is read
/// back through sqlx as through tokio-postgres.
#[cfg(feature = "sqlx-0_8")]
#[tokio::test]
async fn assertions_see_an_sqlx_transaction() {
    let b = setup().await;
    let c = &b.client;
    let want = Expect::kind("send_email").payload_includes(json!({ "to": "sqlx@example.com" }));
    let pool = sqlx::PgPool::connect(b.db.url()).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let id = c
        .enqueue_tx(&mut *tx, &email("sqlx@example.com"))
        .await
        .unwrap();
    let found = assert_enqueued_tx(c, &mut *tx, want.clone()).await;
    assert_eq!(found.len(), 1);
    let via_sqlx = &found[0];
    assert_not_enqueued(c, want.clone()).await;
    tx.commit().await.unwrap();
    let via_pg = assert_enqueued(c, want).await;
    assert_eq!(via_pg.len(), 1);
    assert_eq!(via_sqlx.id, id);
    assert_eq!(format!("{via_sqlx:?}"), format!("{:?}", via_pg[0]));
}

fn registry() -> Registry {
    let quick = JobOptions {
        timeout: Some(Duration::from_millis(200)),
        ..JobOptions::default()
    };
    Registry::new()
        .register_handler(
            "ok",
            JobOptions::default(),
            |_p: String, _c: JobContext| async { Ok::<(), JobError>(()) },
        )
        .register_handler(
            "retry",
            JobOptions::default(),
            |_p: String, _c: JobContext| async {
                Err::<(), JobError>(JobError::retry("the mail server said no"))
            },
        )
        .register_handler(
            "panic",
            JobOptions::default(),
            |_p: String, _c: JobContext| async {
                if true {
                    panic!("kaboom");
                }
                Ok::<(), JobError>(())
            },
        )
        .register_handler("slow", quick, |_p: String, _c: JobContext| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<(), JobError>(())
        })
}

#[tokio::test]
async fn run_job_runs_one_job_through_the_executor_and_returns_its_row() {
    let b = setup().await;
    let c = &b.client;
    let reg = registry();
    let enqueue = |kind: &'static str| async move {
        c.enqueue(&NewJob::new(kind, &json!({}))).await.unwrap()
    };
    let other = enqueue("ok").await;

    // Success, even though the job was scheduled for later.
    let later = SystemTime::now() + Duration::from_secs(3600);
    let id = c
        .enqueue(&NewJob::new("ok", &json!({})).run_at(later))
        .await
        .unwrap();
    let row = run_job(c, &reg, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Done, 1));
    assert!(row.finished_at.is_some() && row.locked_until.is_none());
    // Only that job ran.
    assert_eq!(c.get(other).await.unwrap().unwrap().state, JobState::Queued);

    // A retryable error: back in the queue after the backoff, with the error.
    let id = enqueue("retry").await;
    let row = run_job(c, &reg, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Queued, 1));
    assert_eq!(row.last_error.as_deref(), Some("the mail server said no"));
    assert!(row.run_at > SystemTime::now());

    // A panic is caught and counts as a failed attempt.
    let id = enqueue("panic").await;
    let row = run_job(c, &reg, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Queued, 1));
    assert_eq!(row.last_error.as_deref(), Some("panicked: kaboom"));

    // The handler's timeout.
    let id = enqueue("slow").await;
    let started = std::time::Instant::now();
    let row = run_job(c, &reg, id).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!((row.state, row.attempts), (JobState::Queued, 1));
    assert_eq!(row.last_error.as_deref(), Some("timeout"));

    // The last attempt of a failing job: failed.
    let id = c
        .enqueue(&NewJob::new("retry", &json!({})).max_attempts(1))
        .await
        .unwrap();
    let row = run_job(c, &reg, id).await.unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Failed, 1));

    // Nothing to run: an error, not a panic.
    let err = run_job(c, &reg, id).await.unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("failed"), "{err}");
    let err = run_job(c, &reg, skiplock::JobId(i64::MAX))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test]
async fn drain_runs_a_queue_until_nothing_is_ready() {
    let b = setup().await;
    let c = &b.client;
    for _ in 0..5 {
        c.enqueue(&NewJob::new("ok", &json!({})).queue("q"))
            .await
            .unwrap();
    }
    c.enqueue(&NewJob::new("retry", &json!({})).queue("q"))
        .await
        .unwrap();
    let elsewhere = c.enqueue(&NewJob::new("ok", &json!({}))).await.unwrap();
    let stats = drain(c, registry(), "q").await.unwrap();
    assert_eq!((stats.claimed, stats.done, stats.retried), (6, 5, 1));
    assert_enqueued(c, Expect::kind("retry").queue("q")).await;
    assert_not_enqueued(c, Expect::kind("ok").queue("q")).await;
    assert_eq!(
        c.get(elsewhere).await.unwrap().unwrap().state,
        JobState::Queued
    );
}
