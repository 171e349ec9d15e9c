//! Queue pause and resume, and schedule run, pause and resume, from the queues page.

use axum::http::StatusCode;
use skiplock::Schedule;
use skiplock_web::Access;

use crate::support::{get, post, setup, Bundle};

async fn queue_pause(b: &Bundle, queue: &str) -> (bool, Option<String>) {
    match b
        .raw
        .query_opt(
            "SELECT paused, paused_by FROM queues WHERE name = $1",
            &[&queue],
        )
        .await
        .unwrap()
    {
        Some(r) => (r.get(0), r.get(1)),
        None => (false, None),
    }
}

async fn schedule_paused(b: &Bundle, name: &str) -> bool {
    b.raw
        .query_one("SELECT paused FROM schedules WHERE name = $1", &[&name])
        .await
        .unwrap()
        .get(0)
}

async fn fired(b: &Bundle, name: &str) -> i64 {
    b.raw
        .query_one("SELECT count(*) FROM jobs WHERE schedule = $1", &[&name])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn queues_are_paused_and_resumed_by_the_principal() {
    let b = setup().await;
    b.add("mail", "k", "queued").await;
    let r = b.router();

    let page = get(&r, "/").await;
    assert!(
        page.body.contains("id=\"pause-queue-mail\""),
        "{}",
        page.body
    );

    let p = post(&r, "/queues/mail/pause", "").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(
        queue_pause(&b, "mail").await,
        (true, Some("tester".to_owned()))
    );
    let page = get(&r, p.location()).await;
    assert!(page.body.contains("paused</span>"), "{}", page.body);
    assert!(page.body.contains("by tester"), "{}", page.body);
    assert!(
        page.body.contains("id=\"resume-queue-mail\""),
        "{}",
        page.body
    );

    post(&r, "/queues/mail/resume", "").await;
    assert!(!queue_pause(&b, "mail").await.0);

    // A queue with no jobs can be paused too, and then shows on the page.
    post(&r, "/queues/empty/pause", "").await;
    assert!(queue_pause(&b, "empty").await.0);
    assert!(get(&r, "/")
        .await
        .body
        .contains("id=\"resume-queue-empty\""));

    assert_eq!(
        post(&r, "/queues/mail/explode", "").await.status,
        StatusCode::NOT_FOUND
    );
    let bad = post(&r, "/queues/bad%20name/pause", "").await;
    assert_eq!(bad.status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn schedules_are_run_paused_and_resumed() {
    let b = setup().await;
    b.client
        .add_schedule(&Schedule::new("nightly", "0 3 * * *", "report").queue("reports"))
        .await
        .unwrap();
    let r = b.router();

    let page = get(&r, "/").await;
    assert!(page.body.contains("<h2>Schedules</h2>"), "{}", page.body);
    assert!(page.body.contains("0 3 * * *"), "{}", page.body);
    assert!(
        page.body.contains("id=\"run-schedule-nightly\""),
        "{}",
        page.body
    );

    // The next fire, by the library's reading of the cron: 03:00 UTC after the cursor.
    let next = b.client.schedules().await.unwrap()[0].next_fire_at.unwrap();
    let secs = next
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(secs % 86_400, 3 * 3600);
    let row = page
        .body
        .split("<tr>")
        .find(|r| r.contains("nightly"))
        .unwrap();
    assert!(row.contains("03:00:00 UTC\">in "), "the next fire: {row}");

    let p = post(&r, "/schedules/nightly/run", "").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(fired(&b, "nightly").await, 1);

    post(&r, "/schedules/nightly/pause", "").await;
    assert!(schedule_paused(&b, "nightly").await);
    let page = get(&r, "/").await;
    let row = page
        .body
        .split("<tr>")
        .find(|r| r.contains("nightly"))
        .unwrap();
    assert!(!row.contains("\">in "), "no next fire while paused: {row}");
    assert!(get(&r, "/")
        .await
        .body
        .contains("id=\"resume-schedule-nightly\""));
    post(&r, "/schedules/nightly/resume", "").await;
    assert!(!schedule_paused(&b, "nightly").await);
}

#[tokio::test]
async fn read_only_cannot_pause_or_run() {
    let b = setup().await;
    b.add("mail", "k", "queued").await;
    b.client
        .add_schedule(&Schedule::new("nightly", "0 3 * * *", "report"))
        .await
        .unwrap();
    let r = b.dashboard(Access::read_only("viewer")).router();

    let page = get(&r, "/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("nightly"), "{}", page.body);
    assert!(!page.body.contains("<button"), "{}", page.body);

    for path in [
        "/queues/mail/pause",
        "/schedules/nightly/run",
        "/schedules/nightly/pause",
    ] {
        assert_eq!(
            post(&r, path, "").await.status,
            StatusCode::FORBIDDEN,
            "{path}"
        );
    }
    assert!(!queue_pause(&b, "mail").await.0);
    assert!(!schedule_paused(&b, "nightly").await);
    assert_eq!(fired(&b, "nightly").await, 0);
}
