//! Everything but LISTEN through a real PgBouncer in transaction pooling mode: no
//! session state and no named prepared statements on pooled connections.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use skiplock::{
    Client, JobContext, JobError, JobOptions, JobState, NewJob, PruneOptions, Registry, Retry,
    Transition, Worker,
};
use skiplock_testdb::{PgBouncer, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_lifecycle_through_pgbouncer_in_transaction_mode() {
    let db = TestDb::new().await;
    let Some(bouncer) = PgBouncer::start(db.url()).unwrap() else {
        eprintln!("pgbouncer is not installed: skipped");
        return;
    };
    let pooled = bouncer.through(db.url()).unwrap();
    let client = Client::builder(&pooled)
        .schema(db.schema())
        .pool_size(8)
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    client.migrate().await.unwrap();

    // Enqueue: single, batch, and inside a transaction (pooled, so the transaction pins one
    // server connection until it ends).
    let one = client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let many = client
        .enqueue_many(&(0..10).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    let mut conn = client.pool().get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    let in_tx = client
        .enqueue_tx(&tx, &NewJob::new("k", &"tx"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    drop(conn);

    // Claim, complete, fail, reap, retry, cancel, prune, stats.
    let lease = Duration::from_secs(60);
    let jobs = client.claim("default", 3, lease).await.unwrap();
    assert_eq!(jobs.len(), 3);
    assert_eq!(jobs[0].id, one);
    assert_eq!(
        client.complete(jobs[0].id, jobs[0].attempt).await.unwrap(),
        Transition::Applied
    );
    let _ = client
        .fail(jobs[1].id, jobs[1].attempt, "boom", Retry::Never)
        .await
        .unwrap();
    assert_eq!(
        client
            .extend(jobs[2].id, jobs[2].attempt, lease)
            .await
            .unwrap(),
        Transition::Applied
    );
    let raw = db.connect().await.unwrap();
    raw.batch_execute(&format!(
        "UPDATE \"{}\".jobs SET locked_until = now() - interval '1 second' WHERE id = {}",
        db.schema(),
        jobs[2].id
    ))
    .await
    .unwrap();
    assert_eq!(client.reap().await.unwrap().len(), 1);
    assert_eq!(
        client.retry(&[jobs[1].id]).await.unwrap().changed,
        vec![jobs[1].id]
    );
    assert_eq!(
        client.cancel(&[many[9]]).await.unwrap().changed,
        vec![many[9]]
    );
    raw.batch_execute(&format!(
        "UPDATE \"{}\".jobs SET finished_at = now() - interval '8 days' WHERE status = 'done'",
        db.schema()
    ))
    .await
    .unwrap();
    let pruned = client.prune(PruneOptions::default()).await.unwrap();
    assert_eq!(pruned.removed, 1);
    let h = client.health(Duration::from_secs(60)).await.unwrap();
    assert_eq!(h.queues[0].queued, 10, "{h:?}");
    assert!(client.get(in_tx).await.unwrap().is_some());

    // 5,000 jobs by three workers whose pools go through PgBouncer; their LISTEN
    // connections go straight to the server.
    raw.batch_execute(&format!("DELETE FROM \"{}\".jobs", db.schema()))
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..5_000).map(|i| NewJob::new("count", &i)).collect();
    client.enqueue_many(&jobs).await.unwrap();
    let runs: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let runs = runs.clone();
        let registry = Registry::new().register_handler(
            "count",
            JobOptions::default(),
            move |_p: String, ctx: JobContext| {
                let runs = runs.clone();
                async move {
                    *runs.lock().unwrap().entry(ctx.id.0).or_default() += 1;
                    Ok::<(), JobError>(())
                }
            },
        );
        let c = Client::builder(&pooled)
            .schema(db.schema())
            .pool_size(4)
            .build()
            .unwrap();
        let w = Worker::builder(c, registry)
            .queue("default", 8)
            .listen_url(db.url())
            .poll_interval(Some(Duration::from_millis(200)))
            .build()
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        workers.push((
            stop,
            tokio::spawn(w.run(async {
                let _ = stopped.await;
            })),
        ));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let done: i64 = raw
            .query_one(
                &format!(
                    "SELECT count(*) FROM \"{}\".jobs WHERE status = 'done'",
                    db.schema()
                ),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if done == 5_000 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "only {done} done");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (stop, h) in workers {
        stop.send(()).unwrap();
        let stats = h.await.unwrap().unwrap();
        assert_eq!(stats.lost, 0);
    }
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 5_000);
    assert!(runs.values().all(|n| *n == 1), "a job ran twice");
    let left = client.health(Duration::from_secs(60)).await.unwrap();
    assert_eq!(left.queues[0].done, 5_000);
    assert_eq!(left.queues[0].running + left.queues[0].queued, 0);
    let last = client
        .get(skiplock::JobId(in_tx.0 + 5_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((last.state, last.attempts), (JobState::Done, 1));
}
