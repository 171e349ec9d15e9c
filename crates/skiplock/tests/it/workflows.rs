//! Job results, completion inside the handler's own transaction, and dependencies between
//! jobs (migration 13), through the worker, the statements and the SQL functions production
//! runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use skiplock::{
    Error, JobContext, JobError, JobId, JobOptions, JobState, NewJob, Registry, Statement, Worker,
    Workflow,
};

use crate::limits::run_all;
use crate::support::{setup, Bundle, FRONT};
use crate::worker::{client, eventually};

/// Each run: the job's name (its payload's "name"), when it started and ended.
type Runs = Arc<Mutex<Vec<(String, Instant, Instant)>>>;

#[derive(serde::Deserialize)]
struct P {
    name: String,
    #[serde(default)]
    fail: bool,
    #[serde(default)]
    ms: u64,
}

/// A handler that records its run, outputs `{"name": .., "parents": <its parents' outputs>}`
/// and fails for good when asked.
fn recorder(runs: Runs) -> impl skiplock::Handler {
    move |payload: String, ctx: JobContext| {
        let runs = runs.clone();
        async move {
            let p: P = serde_json::from_str(&payload).map_err(JobError::discard)?;
            let start = Instant::now();
            let parents = ctx.parent_outputs().await?;
            tokio::time::sleep(Duration::from_millis(p.ms)).await;
            let parents: BTreeMap<String, serde_json::Value> = parents
                .into_iter()
                .map(|(id, v)| (id.to_string(), v))
                .collect();
            ctx.set_output(&serde_json::json!({ "name": p.name, "parents": parents }))?;
            runs.lock()
                .unwrap()
                .push((p.name.clone(), start, Instant::now()));
            if p.fail {
                return Err(JobError::discard(format!("{} asked to fail", p.name)));
            }
            Ok(())
        }
    }
}

fn job(name: &str) -> NewJob {
    NewJob::new("rec", &serde_json::json!({ "name": name, "ms": 20 }))
}

fn workers(b: &Bundle, runs: &Runs, n: usize) -> Vec<Worker> {
    (0..n)
        .map(|i| {
            Worker::builder(
                client(b, &format!("flow-{i}")),
                Registry::new().register_handler(
                    "rec",
                    JobOptions::default(),
                    recorder(runs.clone()),
                ),
            )
            .queue("default", 8)
            .queue("other", 8)
            .poll_interval(None)
            .build()
            .unwrap()
        })
        .collect()
}

/// Checks that every job of `edges` (parent name, child name) started after its parent
/// ended, and that each ran exactly once.
fn assert_order(runs: &Runs, names: &[&str], edges: &[(&str, &str)]) {
    let runs = runs.lock().unwrap();
    let by: BTreeMap<&str, Vec<(Instant, Instant)>> =
        runs.iter().fold(BTreeMap::new(), |mut m, (n, s, e)| {
            m.entry(n.as_str()).or_default().push((*s, *e));
            m
        });
    for n in names {
        assert_eq!(
            by.get(n).map(Vec::len),
            Some(1),
            "{n} ran {:?} times",
            by.get(n)
        );
    }
    for (p, c) in edges {
        let (_, p_end) = by[p][0];
        let (c_start, _) = by[c][0];
        assert!(c_start >= p_end, "{c} started before its parent {p} ended");
    }
}

/// A diamond (a -> b, c -> d) enqueued as one workflow runs in dependency order through
/// workers with the poll off (a parent's completion wakes them), each job once, and d reads
/// b's and c's outputs. The checker fails on the same jobs enqueued without the edges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_diamond_runs_in_order_and_the_last_job_reads_its_parents_outputs() {
    let b = setup().await;
    let runs: Runs = Arc::default();
    let mut flow = Workflow::new();
    let a = flow.add(job("a"));
    let bb = flow.add_after(job("b").queue("other"), &[a]);
    let c = flow.add_after(job("c"), &[a]);
    flow.add_after(job("d"), &[bb, c]);
    let ids = b.client.enqueue_workflow(&flow).await.unwrap();
    assert_eq!(ids.len(), 4);
    assert_eq!(b.count("held = 'after'").await, 3);
    run_all(&b, workers(&b, &runs, 2), Duration::from_secs(30)).await;
    let edges = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")];
    assert_order(&runs, &["a", "b", "c", "d"], &edges);
    let d = b.client.get(ids[3]).await.unwrap().unwrap();
    assert_eq!(d.state, JobState::Done);
    assert_eq!(d.after, vec![ids[1], ids[2]]);
    assert_eq!(d.waiting, Some(0));
    let out: serde_json::Value = d.output_as().unwrap().unwrap();
    assert_eq!(out["name"], "d");
    assert_eq!(out["parents"][ids[1].to_string()]["name"], "b");
    assert_eq!(out["parents"][ids[2].to_string()]["name"], "c");
    let fam = b.client.family(ids[0], 10).await.unwrap();
    assert_eq!(fam.children_total, 2);
    assert_eq!(fam.children_waiting, 0);
    assert!(fam.children.iter().all(|r| r.state == Some(JobState::Done)));

    // Negative control: the same jobs without the edges, with the parents slower than the
    // children, run out of order and the checker says so.
    let nb = setup().await;
    let runs2: Runs = Arc::default();
    let slow = |n: &str| NewJob::new("rec", &serde_json::json!({ "name": n, "ms": 300 }));
    nb.client
        .enqueue_many(&[slow("a"), job("b"), job("c"), job("d")])
        .await
        .unwrap();
    run_all(&nb, workers(&nb, &runs2, 1), Duration::from_secs(30)).await;
    let caught = std::panic::catch_unwind(|| assert_order(&runs2, &["a", "b", "c", "d"], &edges));
    assert!(
        caught.is_err(),
        "the order checker passed jobs without edges"
    );
}

/// A chain of 30 jobs, enqueued one by one with `NewJob::after` on the previous id, runs in
/// order with three workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chain_runs_in_order_one_after_another() {
    let b = setup().await;
    let runs: Runs = Arc::default();
    let names: Vec<String> = (0..30).map(|i| format!("j{i}")).collect();
    let mut prev: Option<JobId> = None;
    for n in &names {
        let mut j = job(n);
        if let Some(p) = prev {
            j = j.after([p]);
        }
        prev = Some(b.client.enqueue(&j).await.unwrap());
    }
    run_all(&b, workers(&b, &runs, 3), Duration::from_secs(60)).await;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let edges: Vec<(&str, &str)> = refs.windows(2).map(|w| (w[0], w[1])).collect();
    assert_order(&runs, &refs, &edges);
}

/// A parent with 10,000 children, run by four workers: every child runs exactly once, after
/// the parent, and the enqueue of the whole workflow is one statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fan_out_of_10_000_children_runs_each_once_after_the_parent() {
    let b = setup().await;
    let runs: Runs = Arc::default();
    let mut flow = Workflow::new();
    let root = flow.add(NewJob::new(
        "rec",
        &serde_json::json!({ "name": "root", "ms": 200 }),
    ));
    for i in 0..10_000 {
        flow.add_after(
            NewJob::new("rec", &serde_json::json!({ "name": format!("c{i}") })),
            &[root],
        );
    }
    let ids = b.client.enqueue_workflow(&flow).await.unwrap();
    assert_eq!(ids.len(), 10_001);
    assert_eq!(b.count("held = 'after' AND waiting = 1").await, 10_000);
    run_all(&b, workers(&b, &runs, 4), Duration::from_secs(120)).await;
    let (count, all_after_root) = {
        let runs_l = runs.lock().unwrap();
        let root_end = runs_l.iter().find(|r| r.0 == "root").unwrap().2;
        let after = runs_l
            .iter()
            .filter(|r| r.0 != "root")
            .all(|r| r.1 >= root_end);
        (runs_l.len(), after)
    };
    assert_eq!(count, 10_001, "some job ran twice or never");
    assert!(all_after_root, "a child started before the parent ended");
    assert_eq!(b.count("status = 'done'").await, 10_001);
}

/// `NewJob::after` and `enqueue()` in SQL: a parent that does not exist or has failed
/// refuses the job (and its whole batch: nothing is enqueued); a parent already done counts
/// as satisfied (the job is ready at once); duplicates are merged.
#[tokio::test]
async fn after_refuses_missing_and_failed_parents_and_counts_done_ones() {
    let b = setup().await;
    let done = b.client.enqueue(&job("done")).await.unwrap();
    let failed = b.client.enqueue(&job("failed")).await.unwrap();
    let queued = b.client.enqueue(&job("queued")).await.unwrap();
    b.raw
        .execute(
            "UPDATE jobs SET status = CASE WHEN id = $1 THEN 'done' ELSE 'failed' END WHERE id IN ($1, $2)",
            &[&done.0, &failed.0],
        )
        .await
        .unwrap();
    let before = b.count("true").await;
    let e = b
        .client
        .enqueue_many(&[job("x").after([queued]), job("y").after([JobId(999_999)])])
        .await
        .unwrap_err();
    assert!(
        anyhow_chain(&e).contains("job 999999 does not exist"),
        "{}",
        anyhow_chain(&e)
    );
    let e = b
        .client
        .enqueue(&job("z").after([failed]))
        .await
        .unwrap_err();
    assert!(
        anyhow_chain(&e).contains(&format!("job {} has failed", failed.0)),
        "{}",
        anyhow_chain(&e)
    );
    assert_eq!(b.count("true").await, before, "a refused enqueue left rows");

    let ready = b
        .client
        .enqueue(&job("r").after([done, done]))
        .await
        .unwrap();
    let r = b.client.get(ready).await.unwrap().unwrap();
    assert_eq!(
        (r.held.as_deref(), r.waiting, r.after.clone()),
        (None, Some(0), vec![done])
    );
    let waits = b
        .client
        .enqueue(&job("w").after([done, queued]))
        .await
        .unwrap();
    let w = b.client.get(waits).await.unwrap().unwrap();
    assert_eq!((w.held.as_deref(), w.waiting), (Some("after"), Some(1)));

    let sql: i64 = b
        .raw
        .query_one(
            "SELECT enqueue('default', '{}', after => ARRAY[$1::bigint])",
            &[&queued.0],
        )
        .await
        .unwrap()
        .get(0);
    let s = b.client.get(JobId(sql)).await.unwrap().unwrap();
    assert_eq!(s.held.as_deref(), Some("after"));
    let e = b
        .raw
        .query_one(
            "SELECT enqueue('default', '{}', after => ARRAY[$1::bigint])",
            &[&failed.0],
        )
        .await
        .unwrap_err();
    assert!(e.as_db_error().unwrap().message().contains("has failed"));
    // A job cannot both wait and belong to a sequence.
    let e = b
        .client
        .enqueue(&job("s").after([queued]).sequence("s1"))
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
}

fn anyhow_chain(e: &Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

/// The SQL form refuses a reference to a job listed later (the only way to write a cycle),
/// an unknown ref, a duplicate ref and a bad job, each with a one-line error naming the job,
/// and enqueues nothing; a Rust workflow refuses a step from elsewhere before any SQL runs.
#[tokio::test]
async fn a_workflow_refuses_cycles_unknown_refs_and_bad_jobs_and_enqueues_nothing() {
    let b = setup().await;
    let cases = [
        (
            r#"[{"ref":"a","kind":"k","after":["b"]},{"ref":"b","kind":"k","after":["a"]}]"#,
            "job 1 waits for ref \"b\", which is not listed above it",
        ),
        (
            r#"[{"ref":"a","kind":"k","after":["a"]}]"#,
            "job 1 waits for ref \"a\", which is not listed above it",
        ),
        (
            r#"[{"ref":"a","kind":"k"},{"kind":"k","after":["zz"]}]"#,
            "job 2 waits for ref \"zz\", which no job has",
        ),
        (
            r#"[{"ref":"a","kind":"k"},{"ref":"a","kind":"k"}]"#,
            "job 2: ref 'a' is used twice",
        ),
        (
            r#"[{"kind":"k"},{"kind":"bad kind!"}]"#,
            "job 2: invalid kind",
        ),
        (
            r#"[{"kind":"k","colour":"red"}]"#,
            "job 1: unknown field 'colour'",
        ),
        (
            r#"[{"kind":"k","after":[999999]}]"#,
            "job 999999 does not exist",
        ),
        (r#"{"kind":"k"}"#, "give a JSON array of jobs"),
    ];
    let sql = b.client.statement(Statement::EnqueueWorkflow).to_owned();
    for (json, want) in cases {
        let e = b.raw.query(&sql, &[&json]).await.unwrap_err();
        let msg = e
            .as_db_error()
            .map(|d| d.message().to_owned())
            .unwrap_or_default();
        assert!(msg.contains(want), "{json}: got {msg:?}, want {want:?}");
        assert!(!msg.contains('\n'), "{msg:?}");
        assert_eq!(e.code().map(|c| c.code()), Some("22023"), "{json}");
    }
    assert_eq!(b.count("true").await, 0, "a refused workflow left rows");

    let mut other = Workflow::new();
    other.add(job("x"));
    let far = other.add(job("y"));
    let mut flow = Workflow::new();
    flow.add_after(job("z"), &[far]);
    let e = b.client.enqueue_workflow(&flow).await.unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    assert_eq!(b.count("true").await, 0);
}

/// A parent that fails for good ends its descendants (the jobs waiting for it, and the jobs
/// waiting for those) `failed`, each with a last_error naming the job it waited for, in the
/// same transaction as the parent's failure (same xmin), through the worker's outcome
/// statement. A cancelled parent does likewise ("was cancelled"); a deleted one ("was
/// deleted"). Unrelated jobs are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_parent_fails_its_descendants_in_the_same_transaction() {
    let b = setup().await;
    let runs: Runs = Arc::default();
    let mut flow = Workflow::new();
    let a = flow.add(NewJob::new(
        "rec",
        &serde_json::json!({ "name": "a", "fail": true }),
    ));
    let c1 = flow.add_after(job("c1"), &[a]);
    let g = flow.add_after(job("g"), &[c1]);
    let free = flow.add(job("free"));
    let ids = b.client.enqueue_workflow(&flow).await.unwrap();
    let _ = (g, free);
    run_all(&b, workers(&b, &runs, 1), Duration::from_secs(30)).await;
    let rows = b
        .raw
        .query(
            "SELECT id, status, held, last_error, xmin::text FROM jobs ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    type Row = (i64, String, Option<String>, Option<String>, String);
    let st: Vec<Row> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert_eq!(st[0].1, "failed");
    assert_eq!(st[1].1, "failed");
    assert_eq!(st[2].1, "failed");
    assert_eq!(st[3].1, "done");
    assert_eq!(
        st[1].3.as_deref(),
        Some(format!("job {}, which this job waits for, failed", ids[0].0).as_str())
    );
    assert_eq!(
        st[2].3.as_deref(),
        Some(format!("job {}, which this job waits for, failed", ids[1].0).as_str())
    );
    assert_eq!(st[1].2.as_deref(), Some("after"));
    assert!(
        st[0].4 == st[1].4 && st[1].4 == st[2].4,
        "not one transaction: {st:?}"
    );
    assert_eq!(
        runs.lock().unwrap().len(),
        2,
        "a descendant of a failed job ran"
    );

    // Cancel and delete.
    let p = b.client.enqueue(&job("p")).await.unwrap();
    let k = b.client.enqueue(&job("k").after([p])).await.unwrap();
    b.client.cancel(&[p]).await.unwrap();
    let kr = b.client.get(k).await.unwrap().unwrap();
    assert_eq!(kr.state, JobState::Failed);
    assert_eq!(
        kr.last_error.as_deref(),
        Some(format!("job {}, which this job waits for, was cancelled", p.0).as_str())
    );
    let p2 = b.client.enqueue(&job("p2")).await.unwrap();
    let k2 = b.client.enqueue(&job("k2").after([p2])).await.unwrap();
    b.client.delete(&[p2]).await.unwrap();
    let kr = b.client.get(k2).await.unwrap().unwrap();
    assert_eq!(kr.state, JobState::Failed);
    assert!(kr.last_error.unwrap().contains("was deleted"));
    let left: i64 = b
        .raw
        .query_one("SELECT count(*) FROM job_deps WHERE parent = $1", &[&p2.0])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "a deleted parent's edges stayed");
    // A parent and its waiting child deleted by one statement: both go, no error.
    let p3 = b.client.enqueue(&job("p3")).await.unwrap();
    let k3 = b.client.enqueue(&job("k3").after([p3])).await.unwrap();
    let gone = b.client.delete(&[p3, k3]).await.unwrap();
    assert_eq!(gone.changed.len(), 2);
}

/// Retrying a failed parent re-queues the descendants that failed only because of it (they
/// wait again, and run once it is done); one that also waits for another failed job stays
/// failed, and retrying such a job directly is refused while that parent is failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_a_failed_parent_requeues_the_jobs_that_failed_because_of_it() {
    let b = setup().await;
    let p = b.client.enqueue(&job("p")).await.unwrap();
    let q = b.client.enqueue(&job("q")).await.unwrap();
    let c = b.client.enqueue(&job("c").after([p])).await.unwrap();
    let gc = b.client.enqueue(&job("gc").after([c])).await.unwrap();
    let both = b.client.enqueue(&job("both").after([p, q])).await.unwrap();
    b.client.cancel(&[p, q]).await.unwrap();
    assert_eq!(b.count("status = 'failed'").await, 5);
    // Retrying `both` alone: refused, its parents are failed.
    let moved = b.client.retry(&[both]).await.unwrap();
    assert!(moved.changed.is_empty(), "{moved:?}");
    b.client.retry(&[p]).await.unwrap();
    for (id, want) in [
        (c, JobState::Queued),
        (gc, JobState::Queued),
        (both, JobState::Failed),
    ] {
        let r = b.client.get(id).await.unwrap().unwrap();
        assert_eq!(r.state, want, "job {id}");
        if want == JobState::Queued {
            assert_eq!(r.held.as_deref(), Some("after"), "job {id} must wait again");
            assert_eq!(r.last_error, None);
        }
    }
    let runs: Runs = Arc::default();
    run_all(&b, workers(&b, &runs, 1), Duration::from_secs(30)).await;
    let names: Vec<String> = runs.lock().unwrap().iter().map(|r| r.0.clone()).collect();
    assert_eq!(names, ["p", "c", "gc"]);
    // Retrying a done parent runs it again, and only it.
    b.client.retry(&[p]).await.unwrap();
    run_all(&b, workers(&b, &runs, 1), Duration::from_secs(30)).await;
    let names: Vec<String> = runs.lock().unwrap().iter().map(|r| r.0.clone()).collect();
    assert_eq!(names, ["p", "c", "gc", "p"]);
    assert_eq!(b.client.get(c).await.unwrap().unwrap().waiting, Some(0));
}

/// The race of a child enqueued while its parent completes: the parent's completion waits
/// for (or is tried again after) the child's transaction, or the child sees the parent
/// done. Both orders end with the child ready; no child is stranded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_child_enqueued_while_its_parent_completes_is_never_stranded() {
    let b = setup().await;
    let complete_tx = b.client.statement(Statement::CompleteTx).to_owned();

    // 1. The child's transaction is open first; the parent's completion (the worker's own
    //    statement, via Client::complete) comes while it is.
    let p = b.client.enqueue(&job("p")).await.unwrap();
    let claimed = b
        .client
        .claim("default", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed[0].id, p);
    let mut conn = b.db.connect().await.unwrap();
    conn.batch_execute(&format!("SET search_path TO \"{}\"", b.db.schema()))
        .await
        .unwrap();
    let tx = conn.transaction().await.unwrap();
    let child = b
        .client
        .enqueue_tx(&tx, &job("c").after([p]))
        .await
        .unwrap();
    let client = b.client.clone();
    let completing = tokio::spawn(async move { client.complete(p, 1).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !completing.is_finished(),
        "the completion did not wait for the child's transaction"
    );
    tx.commit().await.unwrap();
    assert!(completing.await.unwrap().unwrap().is_applied());
    let c = b.client.get(child).await.unwrap().unwrap();
    assert_eq!(
        (c.held.as_deref(), c.waiting),
        (None, Some(0)),
        "child stranded"
    );

    // 2. The parent completes first, inside a transaction that stays open; the child's
    //    enqueue waits for it and then sees the parent done.
    let p = b.client.enqueue(&job("p2").queue("second")).await.unwrap();
    let claimed = b
        .client
        .claim("second", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed[0].id, p);
    let tx = conn.transaction().await.unwrap();
    let n = tx
        .execute(&complete_tx, &[&p.0, &1i32, &None::<String>])
        .await
        .unwrap();
    assert_eq!(n, 1);
    let client = b.client.clone();
    let enqueuing = tokio::spawn(async move { client.enqueue(&job("c2").after([p])).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !enqueuing.is_finished(),
        "the child's enqueue did not wait for the parent"
    );
    tx.commit().await.unwrap();
    let child = enqueuing.await.unwrap().unwrap();
    let c = b.client.get(child).await.unwrap().unwrap();
    assert_eq!(
        (c.held.as_deref(), c.waiting),
        (None, Some(0)),
        "child stranded"
    );
}

/// Two parents of one child complete in two concurrent transactions: the second waits for
/// the first's lock on the child and counts from its result, so the child becomes ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_child_whose_parents_complete_at_once_becomes_ready() {
    let b = setup().await;
    let complete_tx = b.client.statement(Statement::CompleteTx).to_owned();
    let p1 = b.client.enqueue(&job("p1")).await.unwrap();
    let p2 = b.client.enqueue(&job("p2")).await.unwrap();
    let child = b.client.enqueue(&job("c").after([p1, p2])).await.unwrap();
    let claimed = b
        .client
        .claim("default", 2, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let mut c1 = b.db.connect().await.unwrap();
    let mut c2 = b.db.connect().await.unwrap();
    let set = format!("SET search_path TO \"{}\"", b.db.schema());
    c1.batch_execute(&set).await.unwrap();
    c2.batch_execute(&set).await.unwrap();
    let t1 = c1.transaction().await.unwrap();
    assert_eq!(
        t1.execute(&complete_tx, &[&p1.0, &1i32, &None::<String>])
            .await
            .unwrap(),
        1
    );
    let second = tokio::spawn(async move {
        let t2 = c2.transaction().await.unwrap();
        let n = t2
            .execute(&complete_tx, &[&p2.0, &1i32, &None::<String>])
            .await
            .unwrap();
        t2.commit().await.unwrap();
        n
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "the second completion did not wait for the child's lock"
    );
    t1.commit().await.unwrap();
    assert_eq!(second.await.unwrap(), 1);
    let c = b.client.get(child).await.unwrap().unwrap();
    assert_eq!((c.held.as_deref(), c.waiting), (None, Some(0)));
}

/// Waiting jobs are never in the claim's way: with 50,000 of them queued in the claimed
/// queue after ANALYZE saw none (stale statistics), the claim touches as many buffers as it
/// does when those 50,000 rows are finished jobs instead (within 10%: the table and its
/// indexes are the same size), and its plan keeps the ready index.
#[tokio::test]
async fn waiting_jobs_do_not_make_the_claim_dearer_with_stale_statistics() {
    let mut touched = Vec::new();
    for waiting in [false, true] {
        let b = setup().await;
        let claim = b.client.statement(Statement::Claim).to_owned();
        b.raw
            .batch_execute(
                "INSERT INTO jobs (payload) SELECT '{}' FROM generate_series(1, 50); ANALYZE jobs;",
            )
            .await
            .unwrap();
        let parent = b
            .client
            .enqueue(&job("parent").queue("elsewhere"))
            .await
            .unwrap();
        if waiting {
            b.raw
                .execute(
                    "INSERT INTO jobs (payload, after)
                     SELECT '{}', ARRAY[$1::bigint] FROM generate_series(1, 50000)",
                    &[&parent.0],
                )
                .await
                .unwrap();
            assert_eq!(b.count("held = 'after'").await, 50_000);
        } else {
            b.raw
                .batch_execute(
                    "INSERT INTO jobs (payload, status, finished_at)
                     SELECT '{}', 'done', now() FROM generate_series(1, 50000)",
                )
                .await
                .unwrap();
        }
        touched.push(claim_buffers(&b, &claim).await);
        let rows = b
            .raw
            .query(
                &format!("EXPLAIN {claim}"),
                &[
                    &"default",
                    &10i64,
                    &30_000_000i64,
                    &FRONT.0,
                    &FRONT.1,
                    &FRONT.2,
                ],
            )
            .await
            .unwrap();
        let plan: String = rows.iter().map(|r| r.get::<_, String>(0) + "\n").collect();
        assert!(plan.contains("jobs_ready_idx"), "{plan}");
        assert!(!plan.contains("Seq Scan on jobs"), "{plan}");
    }
    let (done, waiting) = (touched[0], touched[1]);
    // A scan of the waiting jobs would touch hundreds of pages more; the few more seen here
    // are the parent's second row version and the index pages it lands on.
    assert!(
        waiting <= done + done / 10 + 5,
        "the claim touched {waiting} buffers beside 50,000 waiting jobs, {done} beside 50,000 finished ones"
    );
}

/// The least of three runs' buffers touched by the claim of 10 from `default` (each run
/// claims; the claimed jobs are put back before the next).
async fn claim_buffers(b: &Bundle, claim: &str) -> i64 {
    let mut least = i64::MAX;
    for _ in 0..3 {
        b.raw
            .batch_execute(
                "UPDATE jobs SET status = 'queued', attempts = 0, locked_until = NULL
                 WHERE status = 'running'",
            )
            .await
            .unwrap();
        let rows = b
            .raw
            .query(
                &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {claim}"),
                &[
                    &"default",
                    &10i64,
                    &30_000_000i64,
                    &FRONT.0,
                    &FRONT.1,
                    &FRONT.2,
                ],
            )
            .await
            .unwrap();
        let plan: serde_json::Value = rows[0].get(0);
        let p = &plan[0]["Plan"];
        let n = p["Shared Hit Blocks"].as_i64().unwrap_or(0)
            + p["Shared Read Blocks"].as_i64().unwrap_or(0);
        least = least.min(n);
    }
    least
}

/// Outputs: stored with the completion by the worker (and by `run_job`), refused past the
/// client's limit with a clear error that fails the attempt, and not written by a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_are_stored_with_the_completion_and_refused_past_the_limit() {
    let b = setup().await;
    let small = skiplock::Client::builder(b.db.url())
        .schema(b.db.schema())
        .max_output_bytes(64)
        .build()
        .unwrap();
    let registry = Registry::new().register_handler(
        "out",
        JobOptions::default(),
        |payload: String, ctx: JobContext| async move {
            let n: usize = serde_json::from_str(&payload).map_err(JobError::discard)?;
            ctx.set_output(&"x".repeat(n))?;
            Ok::<(), JobError>(())
        },
    );
    let ok = small.enqueue(&NewJob::new("out", &10)).await.unwrap();
    let big = small.enqueue(&NewJob::new("out", &100)).await.unwrap();
    let row = skiplock::testing::run_job(&small, &registry, ok)
        .await
        .unwrap();
    assert_eq!(row.state, JobState::Done);
    assert_eq!(row.output.as_deref(), Some("\"xxxxxxxxxx\""));
    let row = skiplock::testing::run_job(&small, &registry, big)
        .await
        .unwrap();
    assert_eq!(row.state, JobState::Queued);
    assert_eq!(row.output, None);
    let err = row.last_error.unwrap();
    assert!(
        err.contains("invalid output: it is 102 bytes; the limit is 64"),
        "{err}"
    );
}

/// `complete_tx` with tokio-postgres: the handler's write and the completion commit
/// together; a handler whose transaction rolls back leaves neither (the attempt is recorded
/// failed and retried); a stale attempt gets `LeaseLost` and its write rolls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_tx_commits_the_handlers_writes_and_the_completion_together() {
    let b = setup().await;
    b.raw
        .batch_execute("CREATE TABLE effects (job bigint, attempt int)")
        .await
        .unwrap();
    let schema = b.db.schema().to_owned();
    let registry = Registry::new().register_handler(
        "tx",
        JobOptions::default(),
        move |payload: String, ctx: JobContext| {
            let schema = schema.clone();
            async move {
                let mode: String = serde_json::from_str(&payload).map_err(JobError::discard)?;
                let mut conn = ctx.client().pool().get().await?;
                let tx = conn.transaction().await?;
                tx.execute(
                    &format!("INSERT INTO \"{schema}\".effects VALUES ($1, $2)"),
                    &[&ctx.id.0, &ctx.attempt],
                )
                .await?;
                ctx.set_output(&mode)?;
                ctx.complete_tx(&tx).await?;
                if mode == "rollback" {
                    tx.rollback().await?;
                } else {
                    tx.commit().await?;
                }
                Ok::<(), JobError>(())
            }
        },
    );
    let app = &b.client;
    let commit = app.enqueue(&NewJob::new("tx", &"commit")).await.unwrap();
    let rollback = app.enqueue(&NewJob::new("tx", &"rollback")).await.unwrap();
    let row = skiplock::testing::run_job(app, &registry, commit)
        .await
        .unwrap();
    assert_eq!(row.state, JobState::Done);
    assert_eq!(row.output.as_deref(), Some("\"commit\""));
    let row = skiplock::testing::run_job(app, &registry, rollback)
        .await
        .unwrap();
    assert_eq!(
        row.state,
        JobState::Queued,
        "a rolled-back completion must not count"
    );
    assert!(row.last_error.unwrap().contains("did not commit"));
    let effects: Vec<(i64, i32)> = b
        .raw
        .query("SELECT job, attempt FROM effects ORDER BY job", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(effects, vec![(commit.0, 1)]);

    // A stale attempt: the statement refuses it (the guard), so complete_tx returns
    // LeaseLost; the caller's writes roll back with its transaction.
    let j = app.enqueue(&NewJob::new("tx", &"commit")).await.unwrap();
    let first = app
        .claim("default", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(first[0].id, j);
    b.expire_lease(j).await;
    app.reap().await.unwrap();
    b.make_ready(j).await;
    let second = app
        .claim("default", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(second[0].attempt, 2);
    let complete_tx = b.client.statement(Statement::CompleteTx).to_owned();
    let n = b
        .raw
        .execute(&complete_tx, &[&j.0, &1i32, &None::<String>])
        .await
        .unwrap();
    assert_eq!(n, 0, "a stale attempt completed the job");
}

/// `complete_tx` through an sqlx transaction: the same guarantee with the other driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_tx_works_inside_an_sqlx_transaction() {
    let b = setup().await;
    b.raw
        .batch_execute("CREATE TABLE effects (job bigint)")
        .await
        .unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(b.db.url())
        .await
        .unwrap();
    let schema = b.db.schema().to_owned();
    let registry = Registry::new().register_handler(
        "tx",
        JobOptions::default(),
        move |payload: String, ctx: JobContext| {
            let pool = pool.clone();
            let schema = schema.clone();
            async move {
                let commit: bool = serde_json::from_str(&payload).map_err(JobError::discard)?;
                let mut tx = pool.begin().await?;
                sqlx::query(&format!("INSERT INTO \"{schema}\".effects VALUES ($1)"))
                    .bind(ctx.id.0)
                    .execute(&mut *tx)
                    .await?;
                ctx.complete_tx(&mut *tx).await?;
                if commit {
                    tx.commit().await?;
                } else {
                    tx.rollback().await?;
                }
                Ok::<(), JobError>(())
            }
        },
    );
    let yes = b.client.enqueue(&NewJob::new("tx", &true)).await.unwrap();
    let no = b.client.enqueue(&NewJob::new("tx", &false)).await.unwrap();
    let row = skiplock::testing::run_job(&b.client, &registry, yes)
        .await
        .unwrap();
    assert_eq!(row.state, JobState::Done);
    let row = skiplock::testing::run_job(&b.client, &registry, no)
        .await
        .unwrap();
    assert_eq!(row.state, JobState::Queued);
    assert_eq!(
        b.raw
            .query("SELECT 1 FROM effects", &[])
            .await
            .unwrap()
            .len(),
        1
    );
    let e = b.client.get(yes).await.unwrap().unwrap();
    assert_eq!(e.state, JobState::Done);
}

/// A child's queue is woken when its last parent completes: a worker with the poll off,
/// serving only the child's queue, runs it within a second of the parent's completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_wakes_the_childs_queue_with_the_poll_off() {
    let b = setup().await;
    let p = b.client.enqueue(&job("p").queue("parents")).await.unwrap();
    let child = b.client.enqueue(&job("c").after([p])).await.unwrap();
    let runs: Runs = Arc::default();
    let w = Worker::builder(
        client(&b, "child-only"),
        Registry::new().register_handler("rec", JobOptions::default(), recorder(runs.clone())),
    )
    .queue("default", 2)
    .poll_interval(None)
    .build()
    .unwrap();
    let (stop, h) = crate::worker::spawn_worker(w);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let claimed = b
        .client
        .claim("parents", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed[0].id, p);
    assert!(b.client.complete(p, 1).await.unwrap().is_applied());
    let started = Instant::now();
    eventually(Duration::from_secs(5), "the child to run", || async {
        b.client.get(child).await.unwrap().unwrap().state == JobState::Done
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let _ = stop.send(());
    h.await.unwrap();
}

/// A workflow keeps each job's delay and run_at, long ones included (PostgreSQL 13 cannot
/// read more than 2^31 microseconds of interval written as text, so delays go as seconds).
#[tokio::test]
async fn a_workflow_keeps_each_jobs_delay_and_run_at() {
    let b = setup().await;
    let day = Duration::from_secs(86_400);
    let at = std::time::SystemTime::now() + 3 * day;
    let mut flow = Workflow::new();
    let first = flow.add(job("first").delay(100 * day));
    flow.add_after(job("second").run_at(at), &[first]);
    let ids = b.client.enqueue_workflow(&flow).await.unwrap();
    let row = b
        .raw
        .query_one(
            "SELECT extract(epoch FROM run_at - now())::float8,
                    extract(epoch FROM (SELECT run_at FROM jobs WHERE id = $2))::float8
             FROM jobs WHERE id = $1",
            &[&ids[0].0, &ids[1].0],
        )
        .await
        .unwrap();
    let (delay, second): (f64, f64) = (row.get(0), row.get(1));
    assert!((delay - 100.0 * 86_400.0).abs() < 60.0, "{delay}");
    let want = at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((second - want).abs() < 0.01, "{second} vs {want}");
}
