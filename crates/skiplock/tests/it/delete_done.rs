//! `WorkerConfig::delete_done`: a completed job is deleted by the statement that completes it
//! (`job_complete_delete_many.sql`), the jobs that must stay are kept, and the deletions are
//! counted per queue and minute (migration 21) for the rollup and the health report.

use std::time::{Duration, SystemTime};

use skiplock::{JobContext, JobError, JobOptions, JobState, NewJob, Registry, Worker, Workflow};

use crate::support::{setup, Bundle};
use crate::worker::client;

#[derive(serde::Deserialize)]
struct P {
    #[serde(default)]
    output: bool,
    #[serde(default)]
    fail: bool,
}

/// Sets an output when asked, fails for good when asked, else completes.
fn registry() -> Registry {
    Registry::new().register_handler(
        "k",
        JobOptions::default(),
        |payload: String, ctx: JobContext| async move {
            let p: P = serde_json::from_str(&payload).map_err(JobError::discard)?;
            if p.output {
                ctx.set_output(&serde_json::json!({ "kept": true }))?;
            }
            if p.fail {
                return Err(JobError::discard("asked to fail"));
            }
            Ok(())
        },
    )
}

fn plain() -> NewJob {
    NewJob::new("k", &serde_json::json!({}))
}

async fn deleted_counted(b: &Bundle) -> i64 {
    b.raw
        .query_one("SELECT coalesce(sum(n), 0)::int8 FROM done_deleted", &[])
        .await
        .unwrap()
        .get(0)
}

async fn rows(b: &Bundle) -> i64 {
    b.raw
        .query_one("SELECT count(*) FROM jobs", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_jobs_are_deleted_kept_where_needed_and_counted() {
    let b = setup().await;
    let plain_ids = b
        .client
        .enqueue_many(&(0..200).map(|_| plain()).collect::<Vec<_>>())
        .await
        .unwrap();
    let with_output = b
        .client
        .enqueue(&NewJob::new("k", &serde_json::json!({ "output": true })))
        .await
        .unwrap();
    let failing = b
        .client
        .enqueue(&NewJob::new("k", &serde_json::json!({ "fail": true })))
        .await
        .unwrap();
    let mut flow = Workflow::new();
    let parent = flow.add(plain());
    flow.add_after(plain(), &[parent]);
    let members = b.client.enqueue_workflow(&flow).await.unwrap();

    // Until the workflow's child (ready once its parent is done) has run too.
    let (mut done, mut failed, mut lost) = (0, 0, 0);
    for i in 0..20 {
        let worker = Worker::builder(client(&b, &format!("delete-done-{i}")), registry())
            .queue("default", 20)
            .delete_done(true)
            .build()
            .unwrap();
        let stats = worker.run_until_idle().await.unwrap();
        (done, failed, lost) = (done + stats.done, failed + stats.failed, lost + stats.lost);
        if done + failed >= 204 {
            break;
        }
    }
    assert_eq!((done, failed, lost), (203, 1, 0));

    for id in &plain_ids {
        assert!(
            b.client.get(*id).await.unwrap().is_none(),
            "job {id} was kept"
        );
    }
    let kept = b.client.get(with_output).await.unwrap().unwrap();
    assert_eq!(kept.state, JobState::Done);
    let output: serde_json::Value = serde_json::from_str(kept.output.as_deref().unwrap()).unwrap();
    assert_eq!(output, serde_json::json!({ "kept": true }));
    assert_eq!(
        b.client.get(failing).await.unwrap().unwrap().state,
        JobState::Failed
    );
    for id in &members {
        let row = b.client.get(*id).await.unwrap().unwrap();
        assert_eq!(row.state, JobState::Done, "workflow member {id}");
    }
    // Every deleted job counted once, in the same transaction as its deletion.
    assert_eq!(rows(&b).await, 4);
    assert_eq!(deleted_counted(&b).await, 200);

    // The health report's last minute counts them (with the kept ones): never 0 here.
    let health = b.client.health(Duration::from_secs(60)).await.unwrap();
    let q = health.queues.iter().find(|q| q.queue == "default").unwrap();
    assert!(
        q.finished_last_minute >= 204,
        "finished in the last minute: {}",
        q.finished_last_minute
    );
    assert_eq!(q.done, 3, "done rows kept");

    // The negative control: the same jobs through a worker without delete_done are kept,
    // and counted from their rows.
    let more = b
        .client
        .enqueue_many(&(0..50).map(|_| plain()).collect::<Vec<_>>())
        .await
        .unwrap();
    let worker = Worker::builder(client(&b, "keep-done"), registry())
        .queue("default", 20)
        .build()
        .unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap().done, 50);
    for id in &more {
        assert_eq!(
            b.client.get(*id).await.unwrap().unwrap().state,
            JobState::Done
        );
    }
    assert_eq!(deleted_counted(&b).await, 200);
}

/// The per-minute rollup (queue_stats, written by the elected gauges service) counts the
/// jobs deleted as they completed among the minute's done jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollup_counts_deleted_jobs_as_done() {
    let b = setup().await;
    b.client
        .enqueue_many(&(0..30).map(|_| plain()).collect::<Vec<_>>())
        .await
        .unwrap();
    let worker = Worker::builder(client(&b, "delete-done"), registry())
        .queue("default", 10)
        .delete_done(true)
        .build()
        .unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap().done, 30);
    assert_eq!(rows(&b).await, 0);
    // Counts older than 25 hours go with the next deleting completion.
    b.raw
        .execute(
            "INSERT INTO done_deleted (session, minute, queue, n)
             VALUES (0, date_trunc('minute', now()) - interval '2 days', 'default', 7)",
            &[],
        )
        .await
        .unwrap();

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let gauges = {
        let client = b.client.clone();
        tokio::spawn(async move {
            skiplock::metrics::publish_gauges(&client, Duration::from_millis(100), async {
                let _ = stopped.await;
            })
            .await
        })
    };
    // The jobs finished this minute or, if it turned meanwhile, the one before: the rollup
    // writes both, and the two together hold all 30.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = b
            .client
            .queue_stats(SystemTime::now() - Duration::from_secs(300))
            .await
            .unwrap();
        let done: i64 = got
            .iter()
            .filter(|r| r.queue == "default")
            .map(|r| r.done)
            .sum();
        if done == 30 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rollup counted {done} done jobs, not 30"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.send(()).unwrap();
    gauges.await.unwrap().unwrap();

    b.client.enqueue(&plain()).await.unwrap();
    let worker = Worker::builder(client(&b, "delete-done-2"), registry())
        .queue("default", 10)
        .delete_done(true)
        .build()
        .unwrap();
    assert_eq!(worker.run_until_idle().await.unwrap().done, 1);
    let old: i64 = b
        .raw
        .query_one(
            "SELECT count(*) FROM done_deleted WHERE minute < now() - interval '25 hours'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(old, 0, "counts older than 25 hours are deleted");
}

/// A deleted member of a sequence hands the turn to the next one, as a completed one does
/// (the table's delete trigger): every member runs, one after another, and none is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_sequence_member_releases_the_next() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(&(0..5).map(|_| plain().sequence("s")).collect::<Vec<_>>())
        .await
        .unwrap();
    let mut done = 0;
    for i in 0..20 {
        let worker = Worker::builder(client(&b, &format!("seq-{i}")), registry())
            .queue("default", 4)
            .delete_done(true)
            .build()
            .unwrap();
        done += worker.run_until_idle().await.unwrap().done;
        if done >= 5 {
            break;
        }
    }
    assert_eq!(done, 5);
    for id in &ids {
        assert!(
            b.client.get(*id).await.unwrap().is_none(),
            "job {id} was kept"
        );
    }
    assert_eq!(deleted_counted(&b).await, 5);
}
