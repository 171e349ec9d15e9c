//! Complete, fail with backoff, reap and extend, each guarded by the
//! attempt count.

use std::time::Duration;

use skiplock::{Backoff, FailOutcome, JobState, NewJob, Retry, Transition};

use crate::support::setup;

const LEASE: Duration = Duration::from_secs(300);

/// The article's slow worker: its lease expired, the reaper re-queued the job, another
/// worker claimed it (attempts 2). The slow worker's completion updates nothing and is
/// reported as lost; the job stays with its new owner.
#[tokio::test]
async fn a_stale_completion_is_refused_and_the_job_stays_with_its_new_owner() {
    let b = setup().await;
    let id = b.client.enqueue(&NewJob::new("k", &"job 3")).await.unwrap();
    let slow = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    assert_eq!((slow.id, slow.attempt), (id, 1));

    b.expire_lease(id).await;
    let reaped = b.client.reap().await.unwrap();
    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].state, JobState::Queued);

    let fresh = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    assert_eq!((fresh.id, fresh.attempt), (id, 2));

    assert_eq!(
        b.client.complete(id, slow.attempt).await.unwrap(),
        Transition::Lost
    );
    assert_eq!(
        b.client
            .fail(id, slow.attempt, "late", Retry::default())
            .await
            .unwrap(),
        FailOutcome::Lost
    );
    assert_eq!(
        b.client.extend(id, slow.attempt, LEASE).await.unwrap(),
        Transition::Lost
    );
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Running, 2));
    assert_eq!(row.last_error.as_deref(), Some("lease expired"));

    assert_eq!(
        b.client.complete(id, fresh.attempt).await.unwrap(),
        Transition::Applied
    );
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Done);
    assert!(row.finished_at.is_some() && row.locked_until.is_none());
    // A second completion of the same attempt is refused too: done is final.
    assert_eq!(
        b.client.complete(id, fresh.attempt).await.unwrap(),
        Transition::Lost
    );
}

/// 20 s, 40 s, 80 s, 160 s after attempts 1 to 4 (from the database's own run_at - now()),
/// then `failed` at max_attempts with the last error kept.
#[tokio::test]
async fn retries_follow_the_article_backoff_then_fail_at_max_attempts() {
    let b = setup().await;
    let id = b.client.enqueue(&NewJob::new("k", &{})).await.unwrap();
    let mut waits = Vec::new();
    for attempt in 1..=5 {
        let job = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
        assert_eq!(job.attempt, attempt);
        match b
            .client
            .fail(
                id,
                attempt,
                &format!("SMTP 451 #{attempt}"),
                Retry::default(),
            )
            .await
            .unwrap()
        {
            FailOutcome::Retrying { retry_in, .. } => {
                waits.push(retry_in.as_secs_f64());
                // Not ready before its time.
                assert!(b
                    .client
                    .claim("default", 1, LEASE)
                    .await
                    .unwrap()
                    .is_empty());
                b.make_ready(id).await;
            }
            FailOutcome::Failed => {
                assert_eq!(attempt, 5);
            }
            FailOutcome::Lost => panic!("lost its own job"),
        }
    }
    assert_eq!(waits, [20.0, 40.0, 80.0, 160.0]);
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Failed, 5));
    assert_eq!(row.last_error.as_deref(), Some("SMTP 451 #5"));
    assert!(row.finished_at.is_some());
    assert!(b
        .client
        .claim("default", 1, LEASE)
        .await
        .unwrap()
        .is_empty());
}

/// Large attempt counts wait the one-hour cap; absurd ones neither overflow nor break.
#[tokio::test]
async fn backoff_is_capped_and_cannot_overflow() {
    let b = setup().await;
    for start in [8, 20, 5_000, 2_000_000_000] {
        let id = b
            .client
            .enqueue(&NewJob::new("k", &start).max_attempts(10_000))
            .await
            .unwrap();
        // A hand-edited row: many attempts already spent, max raised to allow more.
        b.raw
            .execute(
                "UPDATE jobs SET attempts = $2, max_attempts = $2 + 2 WHERE id = $1",
                &[&id.0, &start],
            )
            .await
            .unwrap();
        let job = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
        match b
            .client
            .fail(id, job.attempt, "x", Retry::default())
            .await
            .unwrap()
        {
            FailOutcome::Retrying { retry_in, .. } => {
                assert_eq!(retry_in, Duration::from_secs(3600), "attempt {}", start + 1)
            }
            other => panic!("{start}: {other:?}"),
        }
        b.raw
            .execute("UPDATE jobs SET status = 'done' WHERE id = $1", &[&id.0])
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn custom_backoff_and_permanent_failure() {
    let b = setup().await;
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let job = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    let backoff = Backoff::new(Duration::from_millis(1500), Duration::from_secs(2)).unwrap();
    match b
        .client
        .fail(id, job.attempt, "e", Retry::Backoff(backoff))
        .await
        .unwrap()
    {
        FailOutcome::Retrying { retry_in, .. } => assert_eq!(retry_in, Duration::from_secs(2)),
        other => panic!("{other:?}"),
    }
    b.make_ready(id).await;
    let job = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    assert_eq!(
        b.client
            .fail(id, job.attempt, "bad payload", Retry::Never)
            .await
            .unwrap(),
        FailOutcome::Failed
    );
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.attempts, row.max_attempts),
        (JobState::Failed, 2, 5)
    );
    // NULs are removed from stored errors.
    let id = b.client.enqueue(&NewJob::new("k", &2)).await.unwrap();
    let job = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    let _ = b
        .client
        .fail(id, job.attempt, "a\0b", Retry::Never)
        .await
        .unwrap();
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!(row.last_error.as_deref(), Some("ab"));
}

/// The reaper honours max_attempts, keeps an earlier last_error, and leaves live leases,
/// queued and finished jobs alone. Extend fails once a job was reaped.
#[tokio::test]
async fn reap_honours_max_attempts_and_keeps_the_last_error() {
    let b = setup().await;
    // One attempt allowed: reaped to failed.
    let once = b
        .client
        .enqueue(&NewJob::new("k", &"once").max_attempts(1))
        .await
        .unwrap();
    let j = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    assert_eq!(j.id, once);
    b.expire_lease(once).await;

    // Failed once with an error, claimed again, then its worker vanished.
    let errd = b.client.enqueue(&NewJob::new("k", &"errd")).await.unwrap();
    let j = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    assert_eq!(j.id, errd);
    let _ = b
        .client
        .fail(errd, 1, "boom", Retry::default())
        .await
        .unwrap();
    b.make_ready(errd).await;
    let j = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    assert_eq!((j.id, j.attempt), (errd, 2));
    b.expire_lease(errd).await;

    // A live lease, a queued job and a done job: untouched.
    let live = b.client.enqueue(&NewJob::new("k", &"live")).await.unwrap();
    let j = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    assert_eq!(j.id, live);
    let queued = b
        .client
        .enqueue(&NewJob::new("k", &"queued"))
        .await
        .unwrap();

    let mut reaped = b.client.reap().await.unwrap();
    reaped.sort_by_key(|r| r.id);
    assert_eq!(reaped.len(), 2, "{reaped:?}");
    assert_eq!((reaped[0].id, reaped[0].state), (once, JobState::Failed));
    assert_eq!((reaped[1].id, reaped[1].state), (errd, JobState::Queued));

    let row = b.client.get(once).await.unwrap().unwrap();
    assert_eq!(row.last_error.as_deref(), Some("lease expired"));
    assert!(row.finished_at.is_some());
    let row = b.client.get(errd).await.unwrap().unwrap();
    assert_eq!(row.last_error.as_deref(), Some("boom"));
    assert_eq!(row.attempts, 2, "reaping never lowers attempts");
    assert_eq!(
        b.client.get(live).await.unwrap().unwrap().state,
        JobState::Running
    );
    assert_eq!(
        b.client.get(queued).await.unwrap().unwrap().state,
        JobState::Queued
    );

    assert_eq!(
        b.client.extend(errd, 2, LEASE).await.unwrap(),
        Transition::Lost
    );
    assert!(
        b.client.reap().await.unwrap().is_empty(),
        "reaping twice moves nothing"
    );
}

#[tokio::test]
async fn extend_renews_a_live_lease() {
    let b = setup().await;
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let j = b
        .client
        .claim("default", 1, Duration::from_secs(5))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        b.client
            .extend(id, j.attempt, Duration::from_secs(3600))
            .await
            .unwrap(),
        Transition::Applied
    );
    let left: f64 = b
        .raw
        .query_one(
            "SELECT extract(epoch FROM locked_until - now())::float8 FROM jobs WHERE id = $1",
            &[&id.0],
        )
        .await
        .unwrap()
        .get(0);
    assert!(left > 3500.0, "{left}");
    // A wrong attempt, an unknown id: refused, nothing changes.
    assert_eq!(
        b.client.extend(id, 7, LEASE).await.unwrap(),
        Transition::Lost
    );
    assert_eq!(
        b.client
            .complete(skiplock::JobId(i64::MAX), 1)
            .await
            .unwrap(),
        Transition::Lost
    );
    assert_eq!(
        b.client.complete(skiplock::JobId(-1), 1).await.unwrap(),
        Transition::Lost
    );
}

/// Claim order: priority first (lower first), then run_at, then id; scheduled jobs wait.
#[tokio::test]
async fn claims_follow_priority_then_age_and_respect_run_at() {
    let b = setup().await;
    let low = b
        .client
        .enqueue(&NewJob::new("k", &"low").priority(5))
        .await
        .unwrap();
    let later = b
        .client
        .enqueue(&NewJob::new("k", &"later").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    let first = b.client.enqueue(&NewJob::new("k", &"first")).await.unwrap();
    let urgent = b
        .client
        .enqueue(&NewJob::new("k", &"urgent").priority(-5))
        .await
        .unwrap();
    let past = b
        .client
        .enqueue(&NewJob::new("k", &"past").run_at(std::time::UNIX_EPOCH))
        .await
        .unwrap();
    let other_queue = b
        .client
        .enqueue(&NewJob::new("k", &"other").queue("other"))
        .await
        .unwrap();
    let got: Vec<_> = b
        .client
        .claim("default", 10, LEASE)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(got, [urgent, past, first, low]);
    assert!(!got.contains(&later) && !got.contains(&other_queue));
    let j = b.client.claim("other", 10, LEASE).await.unwrap();
    assert_eq!(j[0].payload_as::<String>().unwrap(), "other");
}
