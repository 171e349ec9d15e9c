//! The guards of the statements the worker runs (`job_finish_many.sql`,
//! `job_extend_many.sql`, `job_reap.sql`, the claim and the admin statements), delivered
//! stale, cancelled, reaped and locked rows; and the negative control that shows these
//! tests can fail.

use std::time::Duration;

use skiplock::{Client, FailOutcome, JobId, JobState, NewJob, Retry, Statement, Transition};

use crate::support::{listen, setup, Bundle};

const LEASE: Duration = Duration::from_secs(300);

/// Runs the worker's outcome statement over `rows` (id, attempt, outcome) from `c`; returns
/// the result of each row, in input order.
pub async fn finish_raw(
    b: &Bundle,
    c: &tokio_postgres::Client,
    rows: &[(JobId, i32, &str)],
) -> Vec<String> {
    let ids: Vec<i64> = rows.iter().map(|r| r.0 .0).collect();
    let attempts: Vec<i32> = rows.iter().map(|r| r.1).collect();
    let outcomes: Vec<&str> = rows.iter().map(|r| r.2).collect();
    let errors: Vec<&str> = rows.iter().map(|_| "boom").collect();
    let zeros: Vec<i64> = rows.iter().map(|_| 0).collect();
    let base: Vec<i64> = rows.iter().map(|_| 10_000_000).collect();
    let cap: Vec<i64> = rows.iter().map(|_| 3_600_000_000).collect();
    let no_outputs: Vec<Option<&str>> = rows.iter().map(|_| None).collect();
    let got = c
        .query(
            b.client.statement(Statement::FinishMany),
            &[
                &ids,
                &attempts,
                &outcomes,
                &errors,
                &zeros,
                &base,
                &cap,
                &no_outputs,
            ],
        )
        .await
        .unwrap();
    by_n(rows.len(), &got)
}

/// Runs the heartbeat's statement over `rows` (id, attempt) from `c`.
pub async fn extend_raw(
    b: &Bundle,
    c: &tokio_postgres::Client,
    rows: &[(JobId, i32)],
) -> Vec<String> {
    let ids: Vec<i64> = rows.iter().map(|r| r.0 .0).collect();
    let attempts: Vec<i32> = rows.iter().map(|r| r.1).collect();
    let got = c
        .query(
            b.client.statement(Statement::ExtendMany),
            &[&ids, &attempts, &300_000_000i64],
        )
        .await
        .unwrap();
    by_n(rows.len(), &got)
}

fn by_n(len: usize, rows: &[tokio_postgres::Row]) -> Vec<String> {
    let mut out = vec![String::from("missing"); len];
    for r in rows {
        let n: i64 = r.get("n");
        out[usize::try_from(n - 1).unwrap()] = r.get("result");
    }
    out
}

async fn state(b: &Bundle, id: JobId) -> (JobState, i32) {
    let row = b.client.get(id).await.unwrap().unwrap();
    (row.state, row.attempts)
}

async fn claim_one(b: &Bundle) -> skiplock::ClaimedJob {
    b.client.claim("default", 1, LEASE).await.unwrap().remove(0)
}

/// A stale attempt, a cancelled job and a reaped job, delivered to the statements the worker
/// runs in one batch with a live job: only the live one is written; the others are lost and
/// unchanged.
#[tokio::test]
async fn the_worker_statements_refuse_stale_cancelled_and_reaped_jobs() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(&(0..4).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    let jobs = b.client.claim("default", 4, LEASE).await.unwrap();
    let (stale, cancelled, reaped, live) = (ids[0], ids[1], ids[2], ids[3]);
    assert_eq!(jobs.len(), 4);
    // stale: expired, reaped, claimed again (attempt 2).
    b.expire_lease(stale).await;
    b.expire_lease(reaped).await;
    let r = b.client.reap().await.unwrap();
    assert_eq!(r.len(), 2);
    // Claim the stale one again (lower id first); `reaped` stays queued.
    let again = claim_one(&b).await;
    assert_eq!((again.id, again.attempt), (stale, 2));
    b.client.cancel(&[cancelled]).await.unwrap();

    for outcome in ["complete", "retry", "discard", "snooze", "hand_back"] {
        let got = extend_raw(&b, &b.raw, &[(stale, 1), (cancelled, 1), (reaped, 1)]).await;
        assert_eq!(got, ["lost", "lost", "lost"], "{outcome}: heartbeat");
        let got = finish_raw(
            &b,
            &b.raw,
            &[
                (stale, 1, outcome),
                (cancelled, 1, outcome),
                (reaped, 1, outcome),
            ],
        )
        .await;
        assert_eq!(got, ["lost", "lost", "lost"], "{outcome}");
    }
    assert_eq!(state(&b, stale).await, (JobState::Running, 2));
    assert_eq!(state(&b, cancelled).await, (JobState::Failed, 1));
    assert_eq!(state(&b, reaped).await, (JobState::Queued, 1));

    let got = finish_raw(
        &b,
        &b.raw,
        &[
            (reaped, 1, "complete"),
            (live, 1, "complete"),
            (stale, 1, "complete"),
        ],
    )
    .await;
    assert_eq!(got, ["lost", "written", "lost"]);
    assert_eq!(state(&b, live).await, (JobState::Done, 1));
    // The manual API runs the same statement.
    assert_eq!(b.client.complete(stale, 1).await.unwrap(), Transition::Lost);
    assert_eq!(
        b.client.complete(stale, 2).await.unwrap(),
        Transition::Applied
    );
}

/// `status = 'running'` in the outcome statement: a queued, done or failed job presented
/// with its current attempt is refused, for every outcome.
#[tokio::test]
async fn outcomes_need_a_running_job() {
    let b = setup().await;
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let j = claim_one(&b).await;
    assert_eq!(
        b.client.complete(id, j.attempt).await.unwrap(),
        Transition::Applied
    );
    for status in ["queued", "done", "failed"] {
        b.raw
            .execute(
                "UPDATE jobs SET status = $2 WHERE id = $1",
                &[&id.0, &status],
            )
            .await
            .unwrap();
        for outcome in ["complete", "retry", "discard", "snooze", "hand_back"] {
            let got = finish_raw(&b, &b.raw, &[(id, 1, outcome)]).await;
            assert_eq!(got, ["lost"], "{status} {outcome}");
        }
        assert_eq!(
            extend_raw(&b, &b.raw, &[(id, 1)]).await,
            ["lost"],
            "{status}"
        );
        assert_eq!(
            b.client.fail(id, 1, "x", Retry::default()).await.unwrap(),
            FailOutcome::Lost
        );
        let row = b.client.get(id).await.unwrap().unwrap();
        assert_eq!((row.state.as_str(), row.attempts), (status, 1));
    }
}

/// The claim's `attempts < max_attempts`: a queued job with no attempt left is never
/// claimed (and `attempts + 1` cannot overflow).
#[tokio::test]
async fn the_claim_skips_jobs_with_no_attempt_left() {
    let b = setup().await;
    let id = b
        .client
        .enqueue(&NewJob::new("k", &1).max_attempts(3))
        .await
        .unwrap();
    let ok = b.client.enqueue(&NewJob::new("k", &2)).await.unwrap();
    b.raw
        .execute("UPDATE jobs SET attempts = 3 WHERE id = $1", &[&id.0])
        .await
        .unwrap();
    let got: Vec<JobId> = b
        .client
        .claim("default", 10, LEASE)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(got, [ok]);
    b.raw
        .execute(
            "UPDATE jobs SET attempts = 2147483647, max_attempts = 2147483647 WHERE id = $1",
            &[&id.0],
        )
        .await
        .unwrap();
    assert!(b
        .client
        .claim("default", 10, LEASE)
        .await
        .unwrap()
        .is_empty());
}

/// Cancel's status filter: done and failed jobs stay as they are; queued and running ones
/// are cancelled.
#[tokio::test]
async fn cancel_leaves_finished_jobs_alone() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(&(0..4).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    let jobs = b.client.claim("default", 3, LEASE).await.unwrap();
    assert_eq!(jobs.len(), 3);
    assert!(b.client.complete(ids[0], 1).await.unwrap().is_applied());
    assert_eq!(
        b.client.fail(ids[1], 1, "e", Retry::Never).await.unwrap(),
        FailOutcome::Failed
    );
    // ids[2] running, ids[3] queued.
    let r = b.client.cancel(&ids).await.unwrap();
    assert_eq!(r.changed, [ids[2], ids[3]]);
    assert_eq!(
        r.unchanged,
        [
            (ids[0], Some(JobState::Done)),
            (ids[1], Some(JobState::Failed))
        ]
    );
    let row = b.client.get(ids[1]).await.unwrap().unwrap();
    assert_eq!(row.last_error.as_deref(), Some("e"));
    let row = b.client.get(ids[0]).await.unwrap().unwrap();
    assert_eq!((row.state, row.last_error), (JobState::Done, None));
}

/// Retrying through the worker's statement reaches `failed` at max_attempts.
#[tokio::test]
async fn a_retry_at_max_attempts_fails_the_job_through_the_batched_statement() {
    let b = setup().await;
    let id = b
        .client
        .enqueue(&NewJob::new("k", &1).max_attempts(2))
        .await
        .unwrap();
    let j = claim_one(&b).await;
    assert_eq!(
        finish_raw(&b, &b.raw, &[(id, j.attempt, "retry")]).await,
        ["written"]
    );
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.attempts, row.finished_at),
        (JobState::Queued, 1, None)
    );
    b.make_ready(id).await;
    let j = claim_one(&b).await;
    assert_eq!(j.attempt, 2);
    assert_eq!(
        finish_raw(&b, &b.raw, &[(id, j.attempt, "retry")]).await,
        ["written"]
    );
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Failed, 2));
    assert!(row.finished_at.is_some() && row.locked_until.is_none());
    assert_eq!(row.last_error.as_deref(), Some("boom"));
    assert!(b
        .client
        .claim("default", 1, LEASE)
        .await
        .unwrap()
        .is_empty());
}

/// A late completion holds the expired row locked (its transaction is open): the reaper
/// skips that row, reaps the others and does not fail; the completion then commits and the
/// job is done, and the reaper leaves it alone. The other way round, a completion that meets
/// a row the reaper holds is busy, and after the reaper commits it is lost.
#[tokio::test]
async fn the_reaper_and_a_concurrent_completion_never_both_win() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(&(0..3).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    b.client.claim("default", 3, LEASE).await.unwrap();
    for id in &ids {
        b.expire_lease(*id).await;
    }
    let mut late = b.db.connect().await.unwrap();
    let tx = late.transaction().await.unwrap();
    let got = tx
        .query(
            b.client.statement(Statement::FinishMany),
            &[
                &vec![ids[1].0],
                &vec![1i32],
                &vec!["complete"],
                &vec![""],
                &vec![0i64],
                &vec![0i64],
                &vec![0i64],
                &vec![None::<&str>],
            ],
        )
        .await
        .unwrap();
    assert_eq!(got[0].get::<_, &str>("result"), "written");
    let started = std::time::Instant::now();
    let mut reaped: Vec<JobId> = b
        .client
        .reap()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    reaped.sort();
    assert_eq!(reaped, [ids[0], ids[2]]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the reaper waited for the lock"
    );
    tx.commit().await.unwrap();
    assert!(b.client.reap().await.unwrap().is_empty());
    assert_eq!(state(&b, ids[1]).await, (JobState::Done, 1));
    let row = b.client.get(ids[1]).await.unwrap().unwrap();
    assert_eq!(row.last_error, None);

    // The reaper holds the row: the completion is busy, then lost.
    let j = claim_one(&b).await;
    let id = j.id;
    b.expire_lease(id).await;
    let tx = late.transaction().await.unwrap();
    let r = tx
        .query(b.client.statement(Statement::Reap), &[&1000i64])
        .await
        .unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(
        finish_raw(&b, &b.raw, &[(id, j.attempt, "complete")]).await,
        ["busy"]
    );
    assert_eq!(extend_raw(&b, &b.raw, &[(id, j.attempt)]).await, ["busy"]);
    tx.commit().await.unwrap();
    assert_eq!(
        finish_raw(&b, &b.raw, &[(id, j.attempt, "complete")]).await,
        ["lost"]
    );
    assert_eq!(state(&b, id).await, (JobState::Queued, j.attempt));
}

/// One expired row that another session holds locked does not stop or fail the reap round:
/// the others are reaped at once, the locked one by a later round.
#[tokio::test]
async fn one_locked_expired_row_does_not_wedge_the_reaper() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(&(0..5).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    b.client.claim("default", 5, LEASE).await.unwrap();
    for id in &ids {
        b.expire_lease(*id).await;
    }
    let mut other = b.db.connect().await.unwrap();
    let tx = other.transaction().await.unwrap();
    tx.execute(
        &format!(
            "SELECT 1 FROM \"{}\".jobs WHERE id = $1 FOR UPDATE",
            b.db.schema()
        ),
        &[&ids[2].0],
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let reaped = b.client.reap().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the reaper waited for the lock"
    );
    let mut got: Vec<JobId> = reaped.iter().map(|r| r.id).collect();
    got.sort();
    assert_eq!(got, [ids[0], ids[1], ids[3], ids[4]]);
    tx.rollback().await.unwrap();
    let reaped = b.client.reap().await.unwrap();
    assert_eq!(reaped.iter().map(|r| r.id).collect::<Vec<_>>(), [ids[2]]);
}

/// One locked row in a batch of outcomes (or of renewals) is reported busy; the others are
/// written at once; after the lock is released the busy one is written.
#[tokio::test]
async fn one_locked_row_is_busy_and_the_rest_of_the_batch_is_written() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(&(0..4).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    b.client.claim("default", 4, LEASE).await.unwrap();
    let mut other = b.db.connect().await.unwrap();
    let tx = other.transaction().await.unwrap();
    tx.execute(
        &format!(
            "SELECT 1 FROM \"{}\".jobs WHERE id = $1 FOR UPDATE",
            b.db.schema()
        ),
        &[&ids[1].0],
    )
    .await
    .unwrap();
    let all: Vec<(JobId, i32)> = ids.iter().map(|id| (*id, 1)).collect();
    assert_eq!(
        extend_raw(&b, &b.raw, &all).await,
        ["renewed", "busy", "renewed", "renewed"]
    );
    let rows: Vec<(JobId, i32, &str)> = ids.iter().map(|id| (*id, 1, "complete")).collect();
    assert_eq!(
        finish_raw(&b, &b.raw, &rows).await,
        ["written", "busy", "written", "written"]
    );
    assert_eq!(b.count("status = 'done'").await, 3);
    tx.rollback().await.unwrap();
    assert_eq!(
        finish_raw(&b, &b.raw, &[(ids[1], 1, "complete")]).await,
        ["written"]
    );
    assert_eq!(b.count("status = 'done'").await, 4);
}

/// The negative control: with the fence left out, a stale worker's late write lands on a job
/// another claim holds; with it, the same write is refused.
#[tokio::test]
async fn the_unfenced_negative_control_applies_a_stale_write() {
    let b = setup().await;
    let unfenced = Client::builder(b.db.url())
        .schema(b.db.schema())
        .unfenced_for_negative_control()
        .build()
        .unwrap();
    for (client, fenced) in [(&b.client, true), (&unfenced, false)] {
        let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
        let slow = claim_one(&b).await;
        b.expire_lease(id).await;
        b.client.reap().await.unwrap();
        let fresh = claim_one(&b).await;
        assert_eq!((fresh.id, fresh.attempt), (id, 2));
        let extended = client.extend(id, slow.attempt, LEASE).await.unwrap();
        let completed = client.complete(id, slow.attempt).await.unwrap();
        let row = b.client.get(id).await.unwrap().unwrap();
        if fenced {
            assert_eq!((extended, completed), (Transition::Lost, Transition::Lost));
            assert_eq!(row.state, JobState::Running);
            assert!(b
                .client
                .complete(id, fresh.attempt)
                .await
                .unwrap()
                .is_applied());
        } else {
            assert_eq!(
                (extended, completed),
                (Transition::Applied, Transition::Applied)
            );
            assert_eq!(
                row.state,
                JobState::Done,
                "the stale completion was applied"
            );
        }
    }
}

/// Cancel then retry of a running job: the job is not claimable before the cancelled
/// attempt's lease ends, and the cancel notifies `cancel:<id>` on the schema's channel.
#[tokio::test]
async fn a_cancelled_running_job_is_not_claimable_before_its_lease_ends() {
    let b = setup().await;
    let schema = skiplock::Schema::new(b.db.schema()).unwrap();
    let mut l = listen(b.db.url(), &schema.channel_quoted()).await;
    l.wait_on(&schema, &["default"]).await;
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    assert_eq!(l.next().await.payload(), "default");
    let lease = Duration::from_secs(3);
    let j = b.client.claim("default", 1, lease).await.unwrap().remove(0);
    let queued = b
        .client
        .enqueue(&NewJob::new("k", &2).delay(LEASE))
        .await
        .unwrap();
    assert_eq!(l.next().await.payload(), "default");
    let r = b.client.cancel(&[id, queued]).await.unwrap();
    assert_eq!(r.changed, [id, queued]);
    let n = l.next().await;
    assert_eq!(
        n.payload(),
        format!("cancel:{id}"),
        "only running jobs are notified"
    );
    let row = b.client.get(id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Failed);
    assert_eq!(
        row.locked_until,
        Some(j.locked_until),
        "cancel keeps the lease"
    );

    assert_eq!(b.client.retry(&[id]).await.unwrap().changed, [id]);
    // The retry wakes the queue's workers (they look up when the job is due).
    assert_eq!(
        l.next().await.payload(),
        "default",
        "the retry wakes the queue"
    );
    assert!(
        b.client
            .claim("default", 1, lease)
            .await
            .unwrap()
            .is_empty(),
        "claimable while the cancelled attempt may still run"
    );
    let row = b.client.get(id).await.unwrap().unwrap();
    assert!(row.run_at >= j.locked_until);
    // The old attempt's heartbeat is refused (its handler is told at the latest then).
    assert_eq!(
        b.client.extend(id, j.attempt, lease).await.unwrap(),
        Transition::Lost
    );
    let again = claim_after(&b, j.locked_until, lease).await;
    assert_eq!((again.id, again.attempt), (id, 2));
    assert!(l.rx.try_recv().is_err(), "no other notification");
}

/// Waits until `until` (a lease's end), then claims from the default queue until a job comes
/// (for up to 5 s): the one claimed.
async fn claim_after(
    b: &Bundle,
    until: std::time::SystemTime,
    lease: Duration,
) -> skiplock::ClaimedJob {
    tokio::time::sleep(
        until
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
    .await;
    for _ in 0..50 {
        if let Some(j) = b.client.claim("default", 1, lease).await.unwrap().pop() {
            return j;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("nothing claimable 5 s after the lease's end");
}

/// No writer makes a cancelled job claimable while the cancelled attempt's lease may still
/// run: not a second retry (the CLI's and the dashboard's retry run the same statement), not a
/// unique enqueue that replaces run_at (from the library or from SQL `enqueue_unique()`).
#[tokio::test]
async fn no_retry_or_replace_makes_a_cancelled_job_ready_before_its_lease_ends() {
    let b = setup().await;
    let rule = || skiplock::Unique::key("k").on_conflict(skiplock::OnConflict::Replace);
    let id = b
        .client
        .enqueue_unique(&NewJob::new("k", &1).unique(rule()))
        .await
        .unwrap()
        .id();
    let lease = Duration::from_secs(4);
    let j = b.client.claim("default", 1, lease).await.unwrap().remove(0);
    assert_eq!(b.client.cancel(&[id]).await.unwrap().changed, [id]);
    let not_claimable = |what: &'static str| {
        let b = &b;
        async move {
            let row = b.client.get(id).await.unwrap().unwrap();
            assert_eq!(row.state, JobState::Queued, "{what}");
            assert!(
                row.run_at >= j.locked_until,
                "{what}: ready at {:?}, before the lease's end {:?}",
                row.run_at,
                j.locked_until
            );
            assert!(
                b.client
                    .claim("default", 1, lease)
                    .await
                    .unwrap()
                    .is_empty(),
                "{what}: claimable while the cancelled attempt may still run"
            );
        }
    };
    assert_eq!(b.client.retry(&[id]).await.unwrap().changed, [id]);
    not_claimable("the first retry").await;
    assert_eq!(b.client.retry(&[id]).await.unwrap().changed, [id]);
    not_claimable("a second retry").await;
    let got = b
        .client
        .enqueue_unique(&NewJob::new("k", &2).unique(rule()))
        .await
        .unwrap();
    assert_eq!(got.id(), id);
    not_claimable("a library enqueue that replaces run_at").await;
    let row = b
        .raw
        .query_one(
            "SELECT id, inserted FROM enqueue_unique('default', '3', kind => 'k', \
             unique_key => 'k', on_conflict => 'replace')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, bool>(1)), (id.0, false));
    not_claimable("SQL enqueue_unique() with on_conflict => 'replace'").await;

    let again = claim_after(&b, j.locked_until, lease).await;
    assert_eq!((again.id, again.attempt), (id, 2));
}

/// A queued job with no attempt left is failed by the reaper with a clear reason, and is not
/// counted as ready meanwhile.
#[tokio::test]
async fn the_reaper_fails_queued_jobs_with_no_attempt_left() {
    let b = setup().await;
    let stuck = b
        .client
        .enqueue(&NewJob::new("k", &1).max_attempts(2))
        .await
        .unwrap();
    let errd = b
        .client
        .enqueue(&NewJob::new("k", &2).max_attempts(2))
        .await
        .unwrap();
    let fine = b.client.enqueue(&NewJob::new("k", &3)).await.unwrap();
    b.raw
        .execute(
            "UPDATE jobs SET attempts = 2 WHERE id = ANY($1)",
            &[&vec![stuck.0, errd.0]],
        )
        .await
        .unwrap();
    b.raw
        .execute(
            "UPDATE jobs SET last_error = 'SMTP 451' WHERE id = $1",
            &[&errd.0],
        )
        .await
        .unwrap();
    let h = b.client.health(Duration::from_secs(30)).await.unwrap();
    let q = &h.queues[0];
    assert_eq!((q.queued, q.ready), (3, 1), "{q:?}");

    let mut reaped = b.client.reap().await.unwrap();
    reaped.sort_by_key(|r| r.id);
    assert_eq!(reaped.len(), 2, "{reaped:?}");
    assert_eq!((reaped[0].id, reaped[0].state), (stuck, JobState::Failed));
    assert_eq!((reaped[1].id, reaped[1].state), (errd, JobState::Failed));
    let row = b.client.get(stuck).await.unwrap().unwrap();
    assert_eq!(row.last_error.as_deref(), Some("no attempts left"));
    assert!(row.finished_at.is_some());
    let row = b.client.get(errd).await.unwrap().unwrap();
    assert_eq!(row.last_error.as_deref(), Some("SMTP 451"));
    assert_eq!(state(&b, fine).await, (JobState::Queued, 0));
    assert!(b.client.reap().await.unwrap().is_empty());
}

/// Runs the worker's lean completion (`job_complete_many.sql`, as `c`'s statement) over
/// `rows` (id, attempt) from `on`; returns the result of each row, in input order
/// (`missing` for a row it did not write: lost).
async fn complete_raw(
    c: &Client,
    on: &tokio_postgres::Client,
    rows: &[(JobId, i32)],
) -> Vec<String> {
    complete_raw_with(c, on, rows, Statement::CompleteMany).await
}

/// [`complete_raw`] through `statement` (`CompleteMany` or `CompleteDeleteMany`).
async fn complete_raw_with(
    c: &Client,
    on: &tokio_postgres::Client,
    rows: &[(JobId, i32)],
    statement: Statement,
) -> Vec<String> {
    let ids: Vec<i64> = rows.iter().map(|r| r.0 .0).collect();
    let attempts: Vec<i32> = rows.iter().map(|r| r.1).collect();
    let outputs: Vec<Option<&str>> = rows.iter().map(|_| None).collect();
    let got = on
        .query_one(c.statement(statement), &[&ids, &attempts, &outputs])
        .await
        .unwrap();
    // One row whatever the batch: the 1-based positions of the elements written.
    let written: Vec<i64> = got.get("n");
    let mut out = vec![String::from("missing"); rows.len()];
    for n in written {
        out[usize::try_from(n - 1).unwrap()] = "written".into();
    }
    out
}

/// The lean completion has the outcome statement's guard: a stale, cancelled or reaped job
/// is refused, a live one written; and its negative control (the fence left out) applies
/// the stale attempt's completion over the running second attempt.
#[tokio::test]
async fn the_lean_completion_refuses_stale_cancelled_and_reaped_jobs() {
    completion_refuses_stale_cancelled_and_reaped_jobs(Statement::CompleteMany).await;
}

/// The completion that deletes (`job_complete_delete_many.sql`, the worker's with
/// `delete_done`) has the same guard: a stale, cancelled or reaped job is refused and kept as
/// it is, a live one deleted; its negative control (the fence left out) deletes the job a
/// second attempt is running.
#[tokio::test]
async fn the_deleting_completion_refuses_stale_cancelled_and_reaped_jobs() {
    completion_refuses_stale_cancelled_and_reaped_jobs(Statement::CompleteDeleteMany).await;
}

/// The guard of a completion `statement`; a job it completes ends done, or is gone with
/// `CompleteDeleteMany`.
async fn completion_refuses_stale_cancelled_and_reaped_jobs(statement: Statement) {
    let deletes = statement == Statement::CompleteDeleteMany;
    let b = setup().await;
    let unfenced = Client::builder(b.db.url())
        .schema(b.db.schema())
        .unfenced_for_negative_control()
        .build()
        .unwrap();
    let ids = b
        .client
        .enqueue_many(&(0..4).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    b.client.claim("default", 4, LEASE).await.unwrap();
    let (stale, cancelled, reaped, live) = (ids[0], ids[1], ids[2], ids[3]);
    b.expire_lease(stale).await;
    b.expire_lease(reaped).await;
    assert_eq!(b.client.reap().await.unwrap().len(), 2);
    let again = claim_one(&b).await;
    assert_eq!((again.id, again.attempt), (stale, 2));
    b.client.cancel(&[cancelled]).await.unwrap();
    let ended = |id: JobId| {
        let b = &b;
        async move {
            let row = b.client.get(id).await.unwrap();
            if deletes {
                assert!(row.is_none(), "job {id} was kept");
            } else {
                let row = row.unwrap();
                assert_eq!(row.state, JobState::Done, "job {id}");
                return row.attempts;
            }
            0
        }
    };

    let got = complete_raw_with(
        &b.client,
        &b.raw,
        &[(reaped, 1), (live, 1), (stale, 1), (cancelled, 1)],
        statement,
    )
    .await;
    assert_eq!(got, ["missing", "written", "missing", "missing"]);
    assert_eq!(state(&b, stale).await, (JobState::Running, 2));
    assert_eq!(state(&b, cancelled).await, (JobState::Failed, 1));
    assert_eq!(state(&b, reaped).await, (JobState::Queued, 1));
    assert_eq!(ended(live).await, if deletes { 0 } else { 1 });

    // The negative control: the same stale write, unfenced, lands.
    assert!(!unfenced
        .statement(statement)
        .contains("attempts = o.attempt"));
    let got = complete_raw_with(&unfenced, &b.raw, &[(stale, 1), (reaped, 1)], statement).await;
    assert_eq!(
        got,
        ["written", "missing"],
        "the stale completion was applied"
    );
    assert_eq!(ended(stale).await, if deletes { 0 } else { 2 });
}

/// The lean completion waits for a row another session holds (as a claim whose scan met the
/// row holds it until it commits) instead of reporting it busy: the whole batch is written
/// once the holder lets go. A holder that reaps the row meanwhile wins: that row is lost,
/// the others written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lean_completion_waits_for_a_held_row_instead_of_skipping_it() {
    let b = setup().await;
    let (ids, lock) = three_running(&b).await;
    let mut holder = b.db.connect().await.unwrap();
    let rows: Vec<(JobId, i32)> = ids.iter().map(|id| (*id, 1)).collect();
    for reap_meanwhile in [false, true] {
        if reap_meanwhile {
            b.expire_lease(ids[1]).await;
        }
        let tx = holder.transaction().await.unwrap();
        tx.execute(&lock, &[&ids[1].0]).await.unwrap();
        let writer = {
            let (client, conn, rows) = (
                b.client.clone(),
                b.db.connect().await.unwrap(),
                rows.clone(),
            );
            tokio::spawn(async move { complete_raw(&client, &conn, &rows).await })
        };
        // Held for less than the statement's own lock_timeout (500 ms).
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            !writer.is_finished(),
            "the completion did not wait for the held row"
        );
        assert_eq!(b.count("status = 'done'").await, 0);
        if reap_meanwhile {
            let r = tx
                .query(b.client.statement(Statement::Reap), &[&1000i64])
                .await
                .unwrap();
            assert_eq!(r.len(), 1);
        }
        tx.commit().await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), writer)
            .await
            .expect("the completion never finished")
            .unwrap();
        if reap_meanwhile {
            assert_eq!(got, ["written", "missing", "written"]);
            assert_eq!(state(&b, ids[1]).await, (JobState::Queued, 1));
        } else {
            assert_eq!(got, ["written", "written", "written"]);
            assert_eq!(b.count("status = 'done'").await, 3);
            // Again, for the round where the holder reaps: every job running at attempt 1.
            let reset = format!(
                "UPDATE \"{}\".jobs SET status = 'running', finished_at = NULL, locked_until = now() + interval '5 minutes'",
                b.db.schema()
            );
            b.raw.execute(&reset, &[]).await.unwrap();
        }
    }
}

/// Three jobs claimed (running at attempt 1), and the statement that locks one's row.
async fn three_running(b: &Bundle) -> (Vec<JobId>, String) {
    let ids = b
        .client
        .enqueue_many(&(0..3).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    b.client.claim("default", 3, LEASE).await.unwrap();
    let lock = format!(
        "SELECT 1 FROM \"{}\".jobs WHERE id = $1 FOR UPDATE",
        b.db.schema()
    );
    (ids, lock)
}

/// The lean completion's wait is bounded: a row held past its lock_timeout (500 ms) fails
/// the whole statement with lock_not_available and writes nothing (the worker then writes
/// the batch through job_finish_many.sql: `outcomes::a_locked_row_does_not_hold_back_the_rest_of_the_batch`),
/// and the setting does not outlive the statement.
#[tokio::test]
async fn the_lean_completion_gives_up_on_a_row_held_past_its_lock_timeout() {
    let b = setup().await;
    let (ids, lock) = three_running(&b).await;
    let mut holder = b.db.connect().await.unwrap();
    let tx = holder.transaction().await.unwrap();
    tx.execute(&lock, &[&ids[1].0]).await.unwrap();
    let conn = b.db.connect().await.unwrap();
    let ids64: Vec<i64> = ids.iter().map(|id| id.0).collect();
    let attempts = vec![1i32; 3];
    let outputs: Vec<Option<&str>> = vec![None; 3];
    let t0 = std::time::Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        conn.query(
            b.client.statement(Statement::CompleteMany),
            &[&ids64, &attempts, &outputs],
        ),
    )
    .await
    .expect("the statement kept waiting for the held row")
    .expect_err("the statement waited past its lock_timeout");
    let waited = t0.elapsed();
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE),
        "{err}"
    );
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(5),
        "gave up after {waited:?}"
    );
    assert_eq!(b.count("status = 'done'").await, 0);
    let timeout: String = conn
        .query_one("SHOW lock_timeout", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(timeout, "0", "the statement's lock_timeout outlived it");
    tx.rollback().await.unwrap();
    assert_eq!(
        complete_raw(&b.client, &conn, &[(ids[1], 1)]).await,
        ["written"]
    );
}
