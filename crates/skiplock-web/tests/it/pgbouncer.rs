//! The dashboard through a stock PgBouncer in transaction pooling mode (the way many
//! deployments reach their database): every page renders and the actions change the
//! database, with no session state and no named prepared statements on pooled connections.

use axum::http::StatusCode;
use skiplock_testdb::{PgBouncer, TestDb};
use skiplock_web::{Access, Dashboard};

use crate::support::{get, on, post};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_action_through_pgbouncer_in_transaction_mode() {
    let db = TestDb::new().await;
    let Some(bouncer) = PgBouncer::start(db.url()).unwrap() else {
        eprintln!("pgbouncer is not installed: skipped");
        return;
    };
    let pooled = bouncer.through(db.url()).unwrap();
    let b = on(db, &pooled).await;
    b.add_many(3, "mail", "send", "queued").await;
    let running = b.add("mail", "send", "running").await;
    let failed = b.add("reports", "build", "failed").await;
    b.add_many(2, "reports", "build", "done").await;
    let r = Dashboard::new(b.client.clone(), |_: &axum::http::request::Parts| {
        Access::full("tester")
    })
    .router();

    // Twice over, so that pooled server connections are reused by other pages' statements.
    for _ in 0..2 {
        for path in [
            "/".to_owned(),
            "/jobs".to_owned(),
            "/jobs?state=failed&queue=reports&kind=build".to_owned(),
            "/jobs?state=done".to_owned(),
            format!("/jobs/{running}"),
            "/health".to_owned(),
            "/bulk?action=retry&state=failed".to_owned(),
        ] {
            let p = get(&r, &path).await;
            assert_eq!(p.status, StatusCode::OK, "{path}: {}", p.body);
        }
    }
    let list = get(&r, "/jobs").await;
    assert!(list.body.contains("7 matching jobs"), "{}", list.body);

    let p = post(&r, &format!("/jobs/{failed}/retry"), "").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(b.status(failed).await.as_deref(), Some("queued"));

    let p = post(&r, "/queues/mail/pause", "").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let paused: bool = b
        .raw
        .query_one("SELECT paused FROM queues WHERE name = 'mail'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(paused);
}
