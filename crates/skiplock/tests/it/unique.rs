//! Unique jobs: one active job per key under concurrent enqueues, the conflict modes, batches,
//! a job's own transitions never conflicting with its key, and an operator's retry.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use skiplock::{Enqueued, Error, JobId, JobState, NewJob, OnConflict, Retry, Statement, Unique};

use crate::support::{setup, Bundle};

const LEASE: Duration = Duration::from_secs(60);

fn job(payload: serde_json::Value, rule: Unique) -> NewJob {
    NewJob::new("sync", &payload).unique(rule)
}

async fn payload(b: &Bundle, id: JobId) -> serde_json::Value {
    serde_json::from_str(&b.client.get(id).await.unwrap().unwrap().payload).unwrap()
}

async fn state(b: &Bundle, id: JobId) -> JobState {
    b.client.get(id).await.unwrap().unwrap().state
}

async fn active_with_key(b: &Bundle) -> i64 {
    b.count("unique_key IS NOT NULL AND status IN ('queued', 'running')")
        .await
}

/// Sixteen connections enqueue the same key at once, each in its own transaction, and every
/// other one rolls back: exactly one active job remains, and every caller was told the
/// truth. The one told `Inserted` whose transaction committed owns the row; each caller told
/// `Duplicate(id)` got the id of that committed row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueues_of_one_key_leave_one_job_and_tell_the_truth() {
    for round in 0..3 {
        let b = setup().await;
        let start = Arc::new(tokio::sync::Barrier::new(16));
        let mut tasks = Vec::new();
        for i in 0..16usize {
            let client = b.client.clone();
            let start = start.clone();
            let mut conn = b.db.connect().await.unwrap();
            tasks.push(tokio::spawn(async move {
                let tx = conn.transaction().await.unwrap();
                start.wait().await;
                let job = job(
                    json!({ "caller": i }),
                    Unique::key("the-key").on_conflict(if i % 3 == 0 {
                        OnConflict::Replace
                    } else {
                        OnConflict::Skip
                    }),
                );
                let got = client.enqueue_unique_tx(&tx, &job).await.unwrap();
                // Hold the transaction open a moment, so that others wait on it.
                tokio::time::sleep(Duration::from_millis(((i * 7 + round) % 5) as u64 * 5)).await;
                let commit = i % 2 == 0;
                if commit {
                    tx.commit().await.unwrap();
                } else {
                    tx.rollback().await.unwrap();
                }
                (i, got, commit)
            }));
        }
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap());
        }
        let rows = b
            .raw
            .query("SELECT id FROM jobs WHERE unique_key IS NOT NULL", &[])
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "exactly one job with the key: {results:?}");
        let owner = JobId(rows[0].get(0));
        let committed_inserts: Vec<_> = results
            .iter()
            .filter(|(_, e, commit)| *commit && e.is_inserted())
            .collect();
        assert_eq!(committed_inserts.len(), 1, "{results:?}");
        assert_eq!(committed_inserts[0].1.id(), owner, "{results:?}");
        for (i, e, _) in &results {
            if let Enqueued::Duplicate(id) = e {
                assert_eq!(
                    *id, owner,
                    "caller {i} was told of a job that never committed"
                );
            }
        }
    }
}

#[tokio::test]
async fn skip_leaves_the_duplicate_alone() {
    let b = setup().await;
    let rule = || Unique::key("k");
    let first = b
        .client
        .enqueue_unique(&job(json!({ "v": 1 }), rule()))
        .await
        .unwrap();
    let Enqueued::Inserted(id) = first else {
        panic!("{first:?}")
    };
    let again = b
        .client
        .enqueue_unique(&job(json!({ "v": 2 }), rule()).delay(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(again, Enqueued::Duplicate(id));
    assert_eq!(payload(&b, id).await, json!({ "v": 1 }));
    assert_eq!(b.count("true").await, 1);
    // Another kind with the same key is not a duplicate.
    let other = b
        .client
        .enqueue_unique(&NewJob::new("other", &1).unique(rule()))
        .await
        .unwrap();
    assert!(other.is_inserted());
}

async fn run_at_in(b: &Bundle, id: JobId) -> f64 {
    b.raw
        .query_one(
            "SELECT extract(epoch FROM run_at - now())::float8 FROM jobs WHERE id = $1",
            &[&id.0],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn replace_takes_the_new_payload_and_run_at_of_a_queued_duplicate() {
    let b = setup().await;
    let rule = || Unique::by_fields(["doc"]).on_conflict(OnConflict::Replace);
    let id = b
        .client
        .enqueue_unique(&job(json!({ "doc": 1, "v": 1 }), rule()).delay(Duration::from_secs(60)))
        .await
        .unwrap()
        .id();
    let got = b
        .client
        .enqueue_unique(&job(json!({ "v": 2, "doc": 1 }), rule()).delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(got, Enqueued::Duplicate(id));
    assert_eq!(payload(&b, id).await, json!({ "doc": 1, "v": 2 }));
    assert!(run_at_in(&b, id).await > 3000.0, "run_at moved (debounce)");
    // A different value of the field is another job.
    let other = b
        .client
        .enqueue_unique(&job(json!({ "doc": 2, "v": 1 }), rule()))
        .await
        .unwrap();
    assert!(other.is_inserted());
}

#[tokio::test]
async fn keep_run_at_takes_the_new_payload_only() {
    let b = setup().await;
    let rule = || Unique::key("k").on_conflict(OnConflict::KeepRunAt);
    let id = b
        .client
        .enqueue_unique(&job(json!({ "v": 1 }), rule()).delay(Duration::from_secs(60)))
        .await
        .unwrap()
        .id();
    let got = b
        .client
        .enqueue_unique(&job(json!({ "v": 2 }), rule()).delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(got, Enqueued::Duplicate(id));
    assert_eq!(payload(&b, id).await, json!({ "v": 2 }));
    let left = run_at_in(&b, id).await;
    assert!(
        left > 30.0 && left <= 60.0,
        "run_at kept (throttle): {left}"
    );
}

#[tokio::test]
async fn a_running_duplicate_is_never_changed_and_blocks_by_default() {
    let b = setup().await;
    let rule = || Unique::key("k").on_conflict(OnConflict::Replace);
    let id = b
        .client
        .enqueue_unique(&job(json!({ "v": 1 }), rule()))
        .await
        .unwrap()
        .id();
    let claimed = b.client.claim("default", 1, LEASE).await.unwrap();
    assert_eq!(claimed[0].id, id);
    let got = b
        .client
        .enqueue_unique(&job(json!({ "v": 2 }), rule()))
        .await
        .unwrap();
    assert_eq!(got, Enqueued::Duplicate(id));
    assert_eq!(payload(&b, id).await, json!({ "v": 1 }));
    assert_eq!(state(&b, id).await, JobState::Running);
    // Once it is done the key is free again.
    b.client
        .complete(id, claimed[0].attempt)
        .await
        .unwrap()
        .is_applied()
        .then_some(())
        .unwrap();
    let next = b
        .client
        .enqueue_unique(&job(json!({ "v": 3 }), rule()))
        .await
        .unwrap();
    assert!(next.is_inserted() && next.id() != id, "{next:?}");
}

#[tokio::test]
async fn queue_behind_running_inserts_next_to_a_running_duplicate() {
    let b = setup().await;
    let rule = || Unique::by_args().queue_behind_running();
    let id = b
        .client
        .enqueue_unique(&job(json!({ "a": 1, "b": 2 }), rule()))
        .await
        .unwrap()
        .id();
    // A queued duplicate blocks (key order in the payload does not matter).
    let dup = b
        .client
        .enqueue_unique(&job(json!({ "b": 2, "a": 1 }), rule()))
        .await
        .unwrap();
    assert_eq!(dup, Enqueued::Duplicate(id));
    let claimed = b.client.claim("default", 1, LEASE).await.unwrap();
    assert_eq!(claimed[0].id, id);
    let behind = b
        .client
        .enqueue_unique(&job(json!({ "a": 1, "b": 2 }), rule()))
        .await
        .unwrap();
    assert!(behind.is_inserted(), "{behind:?}");
    // And the one queued behind blocks the next.
    let third = b
        .client
        .enqueue_unique(&job(json!({ "a": 1, "b": 2 }), rule()))
        .await
        .unwrap();
    assert_eq!(third, Enqueued::Duplicate(behind.id()));
    // The running job's retry does not conflict with the one queued behind it.
    let out = b
        .client
        .fail(id, claimed[0].attempt, "boom", Retry::default())
        .await
        .unwrap();
    assert!(
        matches!(out, skiplock::FailOutcome::Retrying { .. }),
        "{out:?}"
    );
    assert_eq!(state(&b, id).await, JobState::Queued);
    assert_eq!(state(&b, behind.id()).await, JobState::Queued);
}

#[tokio::test]
async fn by_queue_and_period_are_part_of_the_key() {
    let b = setup().await;
    let q = |queue: &str, rule: Unique| NewJob::new("sync", &1).queue(queue).unique(rule);
    let a = b
        .client
        .enqueue_unique(&q("a", Unique::by_args().by_queue()))
        .await
        .unwrap();
    let other_queue = b
        .client
        .enqueue_unique(&q("b", Unique::by_args().by_queue()))
        .await
        .unwrap();
    assert!(a.is_inserted() && other_queue.is_inserted());
    let across = b
        .client
        .enqueue_unique(&q("c", Unique::by_args()))
        .await
        .unwrap();
    let across_again = b
        .client
        .enqueue_unique(&q("d", Unique::by_args()))
        .await
        .unwrap();
    assert!(across.is_inserted());
    assert_eq!(across_again, Enqueued::Duplicate(across.id()));

    // A one-second bucket, by the database's clock: start just after a second begins.
    let frac: f64 = b
        .raw
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp())::numeric % 1)::float8",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    tokio::time::sleep(Duration::from_secs_f64(1.0 - frac + 0.05)).await;
    let per = || NewJob::new("tick", &1).unique(Unique::key("t").period(Duration::from_secs(1)));
    let first = b.client.enqueue_unique(&per()).await.unwrap();
    let same_bucket = b.client.enqueue_unique(&per()).await.unwrap();
    assert!(first.is_inserted());
    assert_eq!(same_bucket, Enqueued::Duplicate(first.id()));
    // Another period is another key, even within the bucket.
    let hourly = b
        .client
        .enqueue_unique(
            &NewJob::new("tick", &1).unique(Unique::key("t").period(Duration::from_secs(3600))),
        )
        .await
        .unwrap();
    assert!(hourly.is_inserted());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let next_bucket = b.client.enqueue_unique(&per()).await.unwrap();
    assert!(next_bucket.is_inserted(), "{next_bucket:?}");
    assert_eq!(state(&b, first.id()).await, JobState::Queued);
}

#[tokio::test]
async fn a_batch_reports_each_row() {
    let b = setup().await;
    let existing = b
        .client
        .enqueue_unique(&job(json!({ "n": 0 }), Unique::key("k0")))
        .await
        .unwrap()
        .id();
    let jobs = vec![
        job(json!({ "n": 1 }), Unique::key("k1")),
        job(json!({ "n": 2 }), Unique::key("k1")),
        NewJob::new("plain", &3),
        job(json!({ "n": 4 }), Unique::key("k0")),
        job(
            json!({ "n": 5 }),
            Unique::key("k2").on_conflict(OnConflict::Replace),
        ),
        job(
            json!({ "n": 6 }),
            Unique::key("k2").on_conflict(OnConflict::Replace),
        ),
        job(
            json!({ "n": 7 }),
            Unique::key("k2").on_conflict(OnConflict::Replace),
        ),
        NewJob::new("plain", &8),
    ];
    let got = b.client.enqueue_many_unique(&jobs).await.unwrap();
    assert_eq!(got.len(), jobs.len());
    let k1 = got[0];
    assert!(k1.is_inserted(), "{got:?}");
    assert_eq!(got[1], Enqueued::Duplicate(k1.id()));
    assert!(got[2].is_inserted());
    assert_eq!(got[3], Enqueued::Duplicate(existing));
    assert!(got[4].is_inserted());
    assert_eq!(got[5], Enqueued::Duplicate(got[4].id()));
    assert_eq!(got[6], Enqueued::Duplicate(got[4].id()));
    assert!(got[7].is_inserted());
    // The first of a key is inserted with its own payload; a replacing later one of the
    // batch wins, as if enqueued one after the other.
    assert_eq!(payload(&b, k1.id()).await, json!({ "n": 1 }));
    assert_eq!(payload(&b, got[4].id()).await, json!({ "n": 7 }));
    assert_eq!(b.count("true").await, 5);

    // Through a caller's transaction that rolls back: nothing stays.
    let mut conn = b.db.connect().await.unwrap();
    conn.batch_execute(&format!("SET search_path TO \"{}\"", b.db.schema()))
        .await
        .unwrap();
    let tx = conn.transaction().await.unwrap();
    let got = b
        .client
        .enqueue_many_unique_tx(&tx, &[job(json!({}), Unique::key("k9"))])
        .await
        .unwrap();
    assert!(got[0].is_inserted());
    tx.rollback().await.unwrap();
    assert_eq!(b.count("true").await, 5);

    // The plain calls refuse a job with a rule instead of hiding a duplicate.
    let e = b
        .client
        .enqueue(&job(json!({}), Unique::key("k1")))
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    let e = b
        .client
        .enqueue_many(&[NewJob::new("x", &1), job(json!({}), Unique::key("k1"))])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidBatchItem { index: 1, .. }), "{e}");
}

/// The statement the worker's completer sends for one outcome.
async fn finish(b: &Bundle, id: JobId, attempt: i32, outcome: &str, delay_us: i64) {
    let sql = b.client.statement(Statement::FinishMany);
    let rows = b
        .raw
        .query(
            sql,
            &[
                &vec![id.0],
                &vec![attempt],
                &vec![outcome],
                &vec!["boom"],
                &vec![delay_us],
                &vec![1_000_000i64],
                &vec![1_000_000i64],
                &vec![None::<&str>],
            ],
        )
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, &str>("result"), "written", "{outcome}");
}

/// A unique job's own retry, snooze, lease expiry and hand-back never conflict with its own
/// key, under both rules; with `queue_behind_running` a job queued behind it meanwhile stays.
#[tokio::test]
async fn a_jobs_own_transitions_never_conflict_with_its_key() {
    for behind in [false, true] {
        let b = setup().await;
        let rule = || {
            let r = Unique::key("self");
            if behind {
                r.queue_behind_running()
            } else {
                r
            }
        };
        let id = b
            .client
            .enqueue_unique(&job(json!({}), rule()).max_attempts(20))
            .await
            .unwrap()
            .id();
        let mut newcomers = 0;
        for step in ["retry", "snooze", "reap", "hand_back", "retry"] {
            b.make_ready(id).await;
            let claimed = b.client.claim("default", 10, LEASE).await.unwrap();
            let mine = claimed.iter().find(|j| j.id == id).unwrap();
            // Someone enqueues the same job while it runs.
            let got = b
                .client
                .enqueue_unique(&job(json!({}), rule()))
                .await
                .unwrap();
            if behind {
                if got.is_inserted() {
                    newcomers += 1;
                }
            } else {
                assert_eq!(got, Enqueued::Duplicate(id), "{step}");
            }
            match step {
                "reap" => {
                    b.expire_lease(id).await;
                    assert_eq!(b.client.reap().await.unwrap().len(), 1);
                }
                "snooze" => finish(&b, id, mine.attempt, "snooze", 0).await,
                other => finish(&b, id, mine.attempt, other, 0).await,
            }
            assert_eq!(state(&b, id).await, JobState::Queued, "{step}");
            // Newcomers claimed along with it go back too (hand them back).
            for j in claimed.iter().filter(|j| j.id != id) {
                finish(&b, j.id, j.attempt, "hand_back", 0).await;
            }
        }
        if behind {
            assert!(newcomers >= 1, "a job queued behind the running one");
        } else {
            assert_eq!(b.count("true").await, 1);
        }
        assert!(active_with_key(&b).await <= 1 + i64::from(behind));
    }
}

#[tokio::test]
async fn an_operators_retry_that_would_duplicate_names_the_active_job() {
    let b = setup().await;
    let rule = || Unique::key("k");
    let old = b
        .client
        .enqueue_unique(&job(json!({ "v": 1 }), rule()))
        .await
        .unwrap()
        .id();
    let c = b.client.claim("default", 1, LEASE).await.unwrap();
    let _ = b
        .client
        .fail(old, c[0].attempt, "boom", Retry::Never)
        .await
        .unwrap();
    let new = b
        .client
        .enqueue_unique(&job(json!({ "v": 2 }), rule()))
        .await
        .unwrap();
    assert!(new.is_inserted());
    let e = b.client.retry(&[old]).await.unwrap_err();
    match e {
        Error::UniqueConflict { id, duplicate } => {
            assert_eq!((id, duplicate), (old, new.id()));
        }
        other => panic!("{other:?}"),
    }
    assert!(e_text(old, new.id()).contains("is active with the same unique key"));
    assert_eq!(state(&b, old).await, JobState::Failed, "nothing retried");

    // Once the active one is gone, the retry goes through.
    b.client.cancel(&[new.id()]).await.unwrap();
    let report = b.client.retry(&[old]).await.unwrap();
    assert_eq!(report.changed, vec![old]);

    // Two finished jobs with one key, retried together: refused, naming the other.
    let c = b.client.claim("default", 1, LEASE).await.unwrap();
    let _ = b.client.complete(old, c[0].attempt).await.unwrap();
    let e = b.client.retry(&[old, new.id()]).await.unwrap_err();
    assert!(
        matches!(e, Error::UniqueConflict { id, duplicate } if id == new.id() && duplicate == old),
        "{e:?}"
    );
    // Through a caller's transaction too.
    let tx_conn = b.db.connect().await.unwrap();
    let e = b
        .client
        .retry_tx(&tx_conn, &[old, new.id()])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::UniqueConflict { .. }), "{e:?}");
}

fn e_text(id: JobId, duplicate: JobId) -> String {
    Error::UniqueConflict { id, duplicate }.to_string()
}

#[tokio::test]
async fn enqueue_unique_in_sql_reports_inserted_or_duplicate() {
    let b = setup().await;
    let call = "SELECT id, inserted FROM enqueue_unique('default', $1::text::jsonb, \
                kind => 'sync', unique_key => 'k', on_conflict => $2)";
    let first = b
        .raw
        .query_one(call, &[&r#"{"v":1}"#, &"skip"])
        .await
        .unwrap();
    let id: i64 = first.get(0);
    assert!(first.get::<_, bool>(1));
    let again = b
        .raw
        .query_one(call, &[&r#"{"v":2}"#, &"skip"])
        .await
        .unwrap();
    assert_eq!(
        (again.get::<_, i64>(0), again.get::<_, bool>(1)),
        (id, false)
    );
    let replaced = b
        .raw
        .query_one(call, &[&r#"{"v":3}"#, &"replace"])
        .await
        .unwrap();
    assert_eq!(replaced.get::<_, i64>(0), id);
    assert_eq!(payload(&b, JobId(id)).await, json!({ "v": 3 }));
    // The same key from Rust is the same job.
    let rust = b
        .client
        .enqueue_unique(&job(json!({ "v": 4 }), Unique::key("k")))
        .await
        .unwrap();
    assert_eq!(rust, Enqueued::Duplicate(JobId(id)));
    // Bad rules are refused with the usual SQLSTATE.
    let e = b
        .raw
        .query_one(
            "SELECT * FROM enqueue_unique('default', '{}', unique_key => 'k', unique_by_args => true)",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "22023");
    // The plain enqueue() is unchanged.
    let plain: i64 = b
        .raw
        .query_one("SELECT enqueue('default', '{}', 'sync')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(plain > id);
}

/// The unique statements, and the operator's retry over jobs with keys, cost time linear in
/// their batch, with the statistics of `plans.rs` (taken while every job was queued).
#[tokio::test]
async fn unique_statements_stay_linear_with_stale_statistics() {
    use crate::plans::{assert_linear, stale_statistics, N};
    let (mut b, ids, _) = stale_statistics().await;
    let texts = |p: &str| (0..N).map(|i| format!("{p}{i}")).collect::<Vec<String>>();
    let queue = vec!["default".to_owned(); N];
    let kind = vec!["k".to_owned(); N];
    let payload = (0..N).map(|i| format!("{{\"n\":{i}}}")).collect::<Vec<_>>();
    let priority = vec![0i16; N];
    let max_attempts = vec![5i32; N];
    let run_at: Vec<Option<i64>> = vec![None; N];
    let delay = vec![0i64; N];
    let by = vec!["key".to_owned(); N];
    let fields: Vec<Option<String>> = vec![None; N];
    let keys: Vec<Option<String>> = texts("key-").into_iter().map(Some).collect();
    let flags = vec![false; N];
    let periods = vec![0i64; N];
    let insert = b.client.statement(Statement::InsertUnique).to_owned();
    for batch in [1_000, N] {
        let c = |v: &Vec<_>| v[..batch].to_vec();
        let (q, k, p, pr, ma, ra, d) = (
            c(&queue),
            c(&kind),
            c(&payload),
            priority[..batch].to_vec(),
            max_attempts[..batch].to_vec(),
            run_at[..batch].to_vec(),
            delay[..batch].to_vec(),
        );
        // Job keys and sequences (migration 11): none here.
        let (jk, seq) = (fields[..batch].to_vec(), fields[..batch].to_vec());
        let (by, f, ks, bq, per, qo) = (
            by[..batch].to_vec(),
            fields[..batch].to_vec(),
            keys[..batch].to_vec(),
            flags[..batch].to_vec(),
            periods[..batch].to_vec(),
            flags[..batch].to_vec(),
        );
        assert_linear(
            &mut b,
            "job_insert_unique.sql",
            &insert,
            &[
                &q, &k, &p, &pr, &ma, &ra, &d, &by, &f, &ks, &bq, &per, &qo, &jk, &seq,
            ],
            batch,
        )
        .await;
    }
    // Queued jobs holding N keys, for the replacement and the look-up.
    let jobs: Vec<NewJob> = (0..N)
        .map(|i| NewJob::new("k", &i).unique(Unique::key(format!("key-{i}"))))
        .collect();
    b.client.enqueue_many_unique(&jobs).await.unwrap();
    let stored: Vec<String> = b
        .raw
        .query(
            "SELECT unique_key FROM jobs WHERE unique_key IS NOT NULL ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(stored.len(), N);
    let replace = b.client.statement(Statement::UniqueReplace).to_owned();
    let lookup = b.client.statement(Statement::UniqueLookup).to_owned();
    for batch in [1_000, N] {
        let ks = stored[..batch].to_vec();
        let p = payload[..batch].to_vec();
        let ra = run_at[..batch].to_vec();
        let d = delay[..batch].to_vec();
        let rr = vec![true; batch];
        assert_linear(
            &mut b,
            "job_unique_replace.sql",
            &replace,
            &[&ks, &p, &ra, &d, &rr],
            batch,
        )
        .await;
        assert_linear(&mut b, "job_unique_lookup.sql", &lookup, &[&ks], batch).await;
    }
    // The operator's retry over finished jobs with keys (each probes the unique index).
    b.raw
        .batch_execute(
            "UPDATE jobs SET status = 'failed', finished_at = now(), locked_until = NULL, \
             unique_key = coalesce(unique_key, 'old-' || id)",
        )
        .await
        .unwrap();
    let retry = b.client.statement(Statement::Retry).to_owned();
    for batch in [1_000, N] {
        let ids = ids[..batch].to_vec();
        assert_linear(&mut b, "job_retry.sql with keys", &retry, &[&ids], batch).await;
    }
}

/// The unique enqueue and the keyed retry through an sqlx transaction.
#[cfg(feature = "sqlx-0_8")]
#[tokio::test]
async fn through_an_sqlx_transaction() {
    let b = setup().await;
    let pool = sqlx::PgPool::connect(b.db.url()).await.unwrap();
    let rule = || Unique::key("k").on_conflict(OnConflict::Replace);
    let mut tx = pool.begin().await.unwrap();
    let first = b
        .client
        .enqueue_unique_tx(&mut *tx, &job(json!({ "v": 1 }), rule()))
        .await
        .unwrap();
    let batch = b
        .client
        .enqueue_many_unique_tx(
            &mut *tx,
            &[job(json!({ "v": 2 }), rule()), NewJob::new("plain", &1)],
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(first.is_inserted());
    assert_eq!(batch[0], Enqueued::Duplicate(first.id()));
    assert!(batch[1].is_inserted());
    assert_eq!(payload(&b, first.id()).await, json!({ "v": 2 }));

    b.client.cancel(&[first.id()]).await.unwrap();
    let second = b
        .client
        .enqueue_unique(&job(json!({ "v": 3 }), rule()))
        .await
        .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let e = b
        .client
        .retry_tx(&mut *conn, &[first.id()])
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::UniqueConflict { id, duplicate } if id == first.id() && duplicate == second.id()),
        "{e:?}"
    );
}
