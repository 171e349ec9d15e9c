//! The API an application writes against: handler state through the worker, typed enqueue,
//! any future as a shutdown signal, the registry taken the same way by `run_job` and
//! `drain`, the worker's event subscription, and the outcome words counted apart.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use skiplock::testing::{drain, run_job};
use skiplock::{
    Error, Job, JobContext, JobEnd, JobError, JobState, NewJob, Registry, Worker, WorkerEvent,
};

use crate::support::setup;

/// Application state a handler needs: counts the mails it "sent".
#[derive(Default)]
struct Mailer {
    sent: AtomicUsize,
}

/// A second piece of state, of another type.
struct Sender(&'static str);

#[derive(Serialize, Deserialize)]
struct WelcomeEmail {
    user_id: i64,
}

impl Job for WelcomeEmail {
    const KIND: &'static str = "welcome_email";
    const QUEUE: &'static str = "emails";

    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        let mailer = ctx.data::<Arc<Mailer>>()?;
        let from = ctx.data::<Sender>()?;
        assert_eq!(from.0, "hello@example.com");
        mailer.sent.fetch_add(1, Ordering::SeqCst);
        ctx.set_output(&serde_json::json!({ "user": self.user_id }))?;
        Ok(())
    }
}

/// A handler asking for state nobody gave.
#[derive(Serialize, Deserialize)]
struct NeedsMissing;

impl Job for NeedsMissing {
    const KIND: &'static str = "needs_missing";

    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        let _: &Mailer = ctx.data::<Mailer>()?;
        Ok(())
    }
}

#[tokio::test]
async fn handlers_reach_typed_state_given_to_the_worker_and_typed_jobs_enqueue_directly() {
    let b = setup().await;
    let mailer = Arc::new(Mailer::default());
    // Typed enqueue: the value itself, its kind and queue from the type; and with options
    // through NewJob::of, in the application's transaction.
    let a = b
        .client
        .enqueue(&WelcomeEmail { user_id: 1 })
        .await
        .unwrap();
    let mut raw = b.db.connect().await.unwrap();
    let tx = raw.transaction().await.unwrap();
    let c = b
        .client
        .enqueue_tx(&tx, &NewJob::of(&WelcomeEmail { user_id: 2 }).priority(-1))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    for id in [a, c] {
        let row = b.client.get(id).await.unwrap().unwrap();
        assert_eq!(
            (row.kind.as_str(), row.queue.as_str()),
            ("welcome_email", "emails")
        );
    }
    assert_eq!(b.client.get(c).await.unwrap().unwrap().priority, -1);

    let worker = Worker::builder(b.client.clone(), Registry::new().register::<WelcomeEmail>())
        .data(mailer.clone())
        .data(Sender("hello@example.com"))
        .queue("emails", 2)
        .build()
        .unwrap();
    let stats = worker.run_until_idle().await.unwrap();
    assert_eq!((stats.done, stats.retried), (2, 0));
    assert_eq!(mailer.sent.load(Ordering::SeqCst), 2);
    let out = b.client.get(a).await.unwrap().unwrap().output.unwrap();
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out, serde_json::json!({ "user": 1 }));
}

#[tokio::test]
async fn state_nobody_gave_fails_the_attempt_naming_the_type() {
    let b = setup().await;
    let id = b.client.enqueue(&NeedsMissing).await.unwrap();
    let registry = Registry::new().register::<NeedsMissing>();
    let row = run_job(&b.client, &registry, id).await.unwrap();
    assert_eq!(row.state, JobState::Queued, "retried, not done");
    let err = row.last_error.unwrap_or_default();
    assert!(
        err.contains("Mailer") && err.contains("WorkerBuilder::data"),
        "{err}"
    );
    // The same error, as the library names it.
    let e = Error::MissingData {
        type_name: "x::Mailer",
    };
    assert!(e.to_string().contains("x::Mailer"));
}

#[tokio::test]
async fn run_job_and_drain_take_the_registry_the_same_way_and_see_its_state() {
    let b = setup().await;
    let mailer = Arc::new(Mailer::default());
    let registry = Registry::new()
        .register::<WelcomeEmail>()
        .data(mailer.clone())
        .data(Sender("hello@example.com"));
    let one = b
        .client
        .enqueue(&WelcomeEmail { user_id: 1 })
        .await
        .unwrap();
    // By reference, and by value, for both.
    assert_eq!(
        run_job(&b.client, &registry, one).await.unwrap().state,
        JobState::Done
    );
    let two = b
        .client
        .enqueue(&WelcomeEmail { user_id: 2 })
        .await
        .unwrap();
    assert_eq!(
        run_job(&b.client, registry.clone(), two)
            .await
            .unwrap()
            .state,
        JobState::Done
    );
    b.client
        .enqueue(&WelcomeEmail { user_id: 3 })
        .await
        .unwrap();
    assert_eq!(drain(&b.client, &registry, "emails").await.unwrap().done, 1);
    b.client
        .enqueue(&WelcomeEmail { user_id: 4 })
        .await
        .unwrap();
    assert_eq!(drain(&b.client, registry, "emails").await.unwrap().done, 1);
    assert_eq!(mailer.sent.load(Ordering::SeqCst), 4);
}

/// `worker.run(tokio::signal::ctrl_c())` type-checks as written: any future, whatever it
/// returns, is a shutdown signal. Here a future returning `io::Result<()>` like `ctrl_c()`
/// stops a running worker.
#[tokio::test]
async fn any_future_is_a_shutdown_signal() {
    let b = setup().await;
    let worker = Worker::builder(b.client.clone(), Registry::new().register::<WelcomeEmail>())
        .queue("emails", 1)
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        let _ = stopped.await;
        std::io::Result::Ok(())
    };
    let run = tokio::spawn(worker.run(signal));
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the worker did not stop")
        .unwrap()
        .unwrap();
    // And the signal the docs name compiles (never polled here).
    fn _compiles(
        w: Worker,
    ) -> impl std::future::Future<Output = skiplock::Result<skiplock::RunStats>> {
        w.run(tokio::signal::ctrl_c())
    }
}

/// The subscription sees each attempt end with the outcome statement's words, and
/// `RunStats` counts snoozed and handed-back jobs apart.
#[tokio::test]
async fn subscribers_see_each_outcome_and_stats_count_snoozes_apart_from_hand_backs() {
    let b = setup().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let registry = Registry::new()
        .register_handler(
            "snoozer",
            Default::default(),
            move |_p: String, _ctx: JobContext| {
                let r = r.clone();
                async move {
                    if r.fetch_add(1, Ordering::SeqCst) == 0 {
                        Err(JobError::snooze(Duration::from_millis(1)))
                    } else {
                        Ok(())
                    }
                }
            },
        )
        .register_handler(
            "discarder",
            Default::default(),
            |_p: String, _ctx: JobContext| async { Err(JobError::discard("not wanted")) },
        );
    let snoozed = b.client.enqueue(&NewJob::new("snoozer", &1)).await.unwrap();
    let discarded = b
        .client
        .enqueue(&NewJob::new("discarder", &1))
        .await
        .unwrap();
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("default", 2)
        .build()
        .unwrap();
    let mut events = worker.subscribe();
    let stats_handle = worker.stats_handle();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(worker.run(stopped));
    let mut ends = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while ends.len() < 3 {
        let ev = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("the events did not come")
            .unwrap();
        if let WorkerEvent::Finished { id, end, .. } = ev {
            ends.push((id, end));
        }
    }
    stop.send(()).unwrap();
    let stats = run.await.unwrap().unwrap();
    ends.sort_by_key(|(id, end)| (*id, *end == JobEnd::Done));
    assert_eq!(
        ends,
        vec![
            (snoozed, JobEnd::Snoozed),
            (snoozed, JobEnd::Done),
            (discarded, JobEnd::Failed)
        ]
    );
    assert_eq!(
        (
            stats.done,
            stats.snoozed,
            stats.handed_back,
            stats.failed,
            stats.retried
        ),
        (1, 1, 0, 1, 0)
    );
    assert_eq!(stats_handle.snapshot(), stats);
    let row = b.client.get(discarded).await.unwrap().unwrap();
    assert_eq!((row.state, row.attempts), (JobState::Failed, 1));
}

/// The names renamed before 1.0 still compile, as deprecated aliases of the new ones
/// (CHANGELOG.md).
#[test]
#[allow(deprecated)]
fn the_old_names_are_deprecated_aliases_of_the_new() {
    use skiplock::{Client, QueueLimits, Schema, Unique, Workflow};
    assert_eq!(skiplock::DEFAULT_SCHEMA, Schema::DEFAULT);
    assert_eq!(skiplock::MAX_SCHEMA_LEN, Schema::MAX_LEN);
    assert_eq!(skiplock::DEFAULT_QUEUE, NewJob::DEFAULT_QUEUE);
    assert_eq!(skiplock::DEFAULT_MAX_ATTEMPTS, NewJob::DEFAULT_MAX_ATTEMPTS);
    assert_eq!(skiplock::DEFAULT_POOL_SIZE, Client::DEFAULT_POOL_SIZE);
    assert_eq!(skiplock::MAX_LIMIT, QueueLimits::MAX_LIMIT);
    assert_eq!(skiplock::MAX_UNIQUE_KEY_LEN, Unique::MAX_KEY_LEN);
    assert_eq!(skiplock::MAX_WORKFLOW_JOBS, Workflow::MAX_JOBS);
    assert!(matches!(
        JobError::permanent("x"),
        JobError::Discard(e) if e.to_string() == "x"
    ));
    let stats = skiplock::RunStats::default();
    assert_eq!(stats.requeued, stats.snoozed + stats.handed_back);
}
