//! Retry, cancel and delete change the database, one job at a time or in bulk after a
//! confirm page, with the library's guards.

use axum::http::StatusCode;
use skiplock_web::Access;

use crate::support::{get, post, setup};

#[tokio::test]
async fn single_actions_change_the_job() {
    let b = setup().await;
    let r = b.router();

    let failed = b.add("q", "k", "failed").await;
    let p = post(&r, &format!("/jobs/{failed}/retry"), "").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let j = b.job(failed).await;
    assert_eq!(j.state.as_str(), "queued");
    assert_eq!(j.attempts, 1, "attempts is never lowered");
    let page = get(&r, p.location()).await;
    assert!(page.body.contains("Retried"), "{}", page.body);

    let queued = b.add("q", "k", "queued").await;
    post(&r, &format!("/jobs/{queued}/cancel"), "").await;
    let j = b.job(queued).await;
    assert_eq!(j.state.as_str(), "failed");
    assert_eq!(j.last_error.as_deref(), Some("cancelled"));

    let done = b.add("q", "k", "done").await;
    let p = post(&r, &format!("/jobs/{done}/delete"), "").await;
    assert_eq!(p.location(), format!("/jobs?deleted={done}"));
    assert_eq!(b.status(done).await, None);
    assert!(get(&r, p.location())
        .await
        .body
        .contains(&format!("Job {done} was deleted")));

    // The library's guards hold: a running job is neither retried nor deleted.
    let running = b.add("q", "k", "running").await;
    for action in ["retry", "delete"] {
        let p = post(&r, &format!("/jobs/{running}/{action}"), "").await;
        assert_eq!(
            p.location(),
            format!("/jobs/{running}?done={action}&changed=0")
        );
        assert_eq!(b.status(running).await.as_deref(), Some("running"));
        let page = get(&r, p.location()).await;
        assert!(page.body.contains("(running)"), "{}", page.body);
    }
    // ...but it can be cancelled.
    post(&r, &format!("/jobs/{running}/cancel"), "").await;
    assert_eq!(b.status(running).await.as_deref(), Some("failed"));

    let bad = post(&r, &format!("/jobs/{done}/explode"), "").await;
    assert_eq!(bad.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bulk_actions_need_confirmation_and_touch_only_what_was_confirmed() {
    let b = setup().await;
    let q1 = b.add_many(30, "q1", "k", "failed").await;
    let q2 = b.add_many(5, "q2", "k", "failed").await;
    let r = b.dashboard(Access::full("t")).bulk_limit(20).router();

    let confirm = get(&r, "/bulk?action=retry&state=failed&queue=q1").await;
    assert_eq!(confirm.status, StatusCode::OK);
    assert!(confirm.body.contains("30 jobs match"), "{}", confirm.body);
    assert!(
        confirm.body.contains("Retry the first 20"),
        "{}",
        confirm.body
    );
    let max_id = q2.last().unwrap();
    assert!(confirm
        .body
        .contains(&format!("name=\"max_id\" value=\"{max_id}\"")));

    // Without the confirm field, nothing happens.
    let form = format!("action=retry&state=failed&queue=q1&max_id={max_id}");
    let p = post(&r, "/bulk", &form).await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert_eq!(count(&b, "status = 'queued'").await, 0);

    // A job failed after the confirm page was shown is not part of it.
    let late = b.add("q1", "k", "failed").await;
    let form = format!("{form}&confirm=yes");
    let p = post(&r, "/bulk", &form).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(p.body.contains("Retried 20 of"), "{}", p.body);
    assert!(p.body.contains("More may match"));
    assert_eq!(count(&b, "status = 'queued'").await, 20);
    for id in &q1[..20] {
        assert_eq!(b.status(*id).await.as_deref(), Some("queued"));
    }
    let p = post(&r, "/bulk", &form).await;
    assert!(p.body.contains("Retried 10 of"), "{}", p.body);
    assert_eq!(count(&b, "status = 'queued'").await, 30);
    assert_eq!(b.status(late).await.as_deref(), Some("failed"));
    for id in &q2 {
        assert_eq!(
            b.status(*id).await.as_deref(),
            Some("failed"),
            "another queue"
        );
    }

    // Bulk delete of the other queue's failed jobs.
    let p = post(
        &r,
        "/bulk",
        &format!("action=delete&state=failed&queue=q2&max_id={max_id}&confirm=yes"),
    )
    .await;
    assert!(p.body.contains("Deleted 5 of"), "{}", p.body);
    assert_eq!(count(&b, "queue = 'q2'").await, 0);

    // A combination that would not move jobs out of their state is refused.
    let p = post(
        &r,
        "/bulk",
        &format!("action=retry&state=queued&max_id={max_id}&confirm=yes"),
    )
    .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
}

async fn count(b: &crate::support::Bundle, where_clause: &str) -> i64 {
    b.raw
        .query_one(
            &format!("SELECT count(*) FROM jobs WHERE {where_clause}"),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_bulk_action_on_an_unindexed_filter_acts_within_the_scan_budget() {
    let b = setup().await;
    let old = b.add_many(3, "q", "k", "failed").await;
    b.add_many(100, "q", "k", "done").await;
    let recent = b.add_many(4, "q", "k", "failed").await;
    let r = b.dashboard(Access::full("t")).scan_budget(50).router();

    let confirm = get(&r, "/bulk?action=retry&state=failed").await;
    assert_eq!(confirm.status, StatusCode::OK);
    assert!(
        confirm.body.contains("4</span> jobs match"),
        "{}",
        confirm.body
    );
    assert!(
        confirm.body.contains("Among the newest 50 jobs only"),
        "{}",
        confirm.body
    );
    let max_id = recent.last().unwrap();
    let late = b.add("q", "k", "failed").await;
    let p = post(
        &r,
        "/bulk",
        &format!("action=retry&state=failed&max_id={max_id}&confirm=yes"),
    )
    .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(p.body.contains("Retried 4 of"), "{}", p.body);
    assert!(p.body.contains("Among the 50 jobs with ids"), "{}", p.body);
    for id in &recent {
        assert_eq!(b.status(*id).await.as_deref(), Some("queued"));
    }
    // Beyond the budget, and newer than confirmed: left alone.
    for id in old.iter().chain([&late]) {
        assert_eq!(b.status(*id).await.as_deref(), Some("failed"));
    }
}
