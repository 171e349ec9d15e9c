//! Every page renders, with the figures of the database, under any mount point.

use std::time::Duration;

use axum::http::StatusCode;
use axum::Router;
use skiplock_web::Access;

use crate::support::{get, setup};

#[tokio::test]
async fn every_page_renders_with_the_databases_figures() {
    let b = setup().await;
    b.add_many(3, "mail", "send", "queued").await;
    let running = b.add("mail", "send", "running").await;
    b.add_many(4, "mail", "send", "done").await;
    let failed = b.add("reports", "build:pdf", "failed").await;
    b.add_many(2, "reports", "build:pdf", "done").await;
    let r = b.router();

    let q = get(&r, "/").await;
    assert_eq!(q.status, StatusCode::OK, "{}", q.body);
    assert!(q.body.contains("<nav>"), "the nav bar");
    // One row per queue, with its counts: mail has 3 queued (ready, none held), 1 running,
    // 4 done.
    let mail = row(&q.body, "mail");
    assert_eq!(
        cells(&mail),
        ["mail", "3", "3", "0", "1", "4", "0", "4", "0 s", "0", "0", "0", "-", "Pause"],
        "{mail}"
    );
    let reports = row(&q.body, "reports");
    assert_eq!(
        cells(&reports),
        ["reports", "0", "0", "0", "0", "2", "1", "3", "-", "0", "0", "0", "-", "Pause"]
    );
    // No limited queue and no held job: no flow control section.
    assert!(!q.body.contains("Flow control"), "{}", q.body);

    let list = get(&r, "/jobs").await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.body.contains("11 matching jobs"), "{}", list.body);
    let failed_list = get(&r, "/jobs?state=failed&queue=reports&kind=build:pdf").await;
    assert_eq!(failed_list.status, StatusCode::OK);
    assert_eq!(crate::support::ids(&failed_list.body), [failed]);
    assert!(failed_list.body.contains("boom"));

    let job = get(&r, &format!("/jobs/{running}")).await;
    assert_eq!(job.status, StatusCode::OK);
    for text in [
        "Job ",
        "running",
        "Lease (locked until)",
        " min)</span>",
        "Attempts",
        "1 of 5",
        "&quot;n&quot;: 1",
    ] {
        assert!(job.body.contains(text), "{text}: {}", job.body);
    }

    let health = get(&r, "/health").await;
    assert_eq!(health.status, StatusCode::OK);
    for text in [
        "Jobs table",
        "Dead row versions",
        "Last autovacuum",
        "Sessions holding back vacuum",
        "Notification queue",
    ] {
        assert!(health.body.contains(text), "{text}");
    }

    let confirm = get(&r, "/bulk?action=retry&state=failed").await;
    assert_eq!(confirm.status, StatusCode::OK);
    assert!(confirm.body.contains("name=\"max_id\""));

    for (path, kind) in [
        ("/assets/dashboard.css", "text/css"),
        ("/assets/dashboard.js", "text/javascript"),
    ] {
        let a = get(&r, path).await;
        assert_eq!(a.status, StatusCode::OK);
        assert!(a.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with(kind));
    }
    let js = get(&r, "/assets/dashboard.js").await.body;
    assert!(
        js.contains("visibilityState"),
        "polling stops when the tab is hidden"
    );

    let missing = get(&r, "/nowhere").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    // Every answer forbids framing.
    assert!(q.headers["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("frame-ancestors 'none'"));
}

/// The cells of a queues-table row, as text.
fn cells(row: &str) -> Vec<String> {
    row.split("<td>")
        .skip(1)
        .map(|c| strip_tags(&c[..c.find("</td>").unwrap()]))
        .collect()
}

fn row(body: &str, queue: &str) -> String {
    let start = body.find(&format!(">{queue}</a></td>")).unwrap();
    let start = body[..start].rfind("<tr>").unwrap();
    let end = start + body[start..].find("</tr>").unwrap();
    body[start..end].to_owned()
}

fn strip_tags(s: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.trim().to_owned()
}

#[tokio::test]
async fn links_follow_the_mount_point() {
    let b = setup().await;
    let id = b.add("q", "k", "failed").await;
    let app = Router::new().nest("/admin/jobs", b.router());
    // axum's nest answers the mount point itself (not with a trailing slash).
    for path in ["/admin/jobs", "/admin/jobs?x=1"] {
        let page = get(&app, path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert!(
            page.body.contains("href=\"/admin/jobs/queues/q\""),
            "{}",
            page.body
        );
        assert!(page
            .body
            .contains("src=\"/admin/jobs/assets/dashboard.js\""));
    }
    let job = get(&app, &format!("/admin/jobs/jobs/{id}")).await;
    assert!(
        job.body
            .contains(&format!("action=\"/admin/jobs/jobs/{id}/retry\"")),
        "{}",
        job.body
    );
    // The operator's pages and forms too.
    let list = get(&app, "/admin/jobs/jobs").await;
    for want in [
        "href=\"/admin/jobs/workers\"",
        "action=\"/admin/jobs/search\"",
        "action=\"/admin/jobs/selected\"",
    ] {
        assert!(list.body.contains(want), "{want}: {}", list.body);
    }
    let search = get(&app, &format!("/admin/jobs/search?q={id}")).await;
    assert_eq!(search.location(), format!("/admin/jobs/jobs/{id}"));
    let queue = get(&app, "/admin/jobs/queues/q").await;
    assert!(queue
        .body
        .contains("href=\"/admin/jobs/jobs?queue=q&amp;state=failed\""));
    // At the root, links start at /.
    let root = get(&b.router(), "/").await;
    assert!(root.body.contains("href=\"/queues/q\""));
}

#[tokio::test]
async fn user_text_is_escaped() {
    let b = setup().await;
    let id = b.add("q", "k", "failed").await;
    b.raw
        .execute(
            "UPDATE jobs SET payload = '{\"x\": \"</pre><script>alert(1)</script>\"}', \
             last_error = '<img src=x onerror=alert(2)>' WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let r = b.router();
    for path in [format!("/jobs/{id}"), "/jobs".to_owned()] {
        let page = get(&r, &path).await.body;
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(!page.contains("<img src=x"), "{page}");
        assert!(page.contains("&lt;img src=x onerror=alert(2)&gt;"));
    }
}

#[tokio::test]
async fn bad_input_gets_a_clear_page() {
    let b = setup().await;
    let r = b.router();
    for (path, status, text) in [
        (
            "/jobs?state=bogus",
            StatusCode::BAD_REQUEST,
            "is not a job state",
        ),
        (
            "/jobs?queue=a%20b",
            StatusCode::BAD_REQUEST,
            "is not a queue name",
        ),
        (
            "/jobs?before=-3",
            StatusCode::BAD_REQUEST,
            "is not a job id",
        ),
        ("/jobs/abc", StatusCode::BAD_REQUEST, "is not a job id"),
        (
            "/jobs/99999",
            StatusCode::NOT_FOUND,
            "There is no job 99999",
        ),
        (
            "/bulk?action=retry&state=running",
            StatusCode::BAD_REQUEST,
            "cannot be retried in bulk",
        ),
        (
            "/bulk?action=delete",
            StatusCode::BAD_REQUEST,
            "needs a state filter",
        ),
    ] {
        let page = get(&r, path).await;
        assert_eq!(page.status, status, "{path}");
        assert!(page.body.contains(text), "{path}: {}", page.body);
    }
}

/// The cells of the queues table's row for `queue`, as HTML.
fn queue_cells(body: &str, queue: &str) -> Vec<String> {
    let marker = format!("<tr><td><a href=\"/queues/{queue}\">{queue}</a></td>");
    let Some(start) = body.find(&marker) else {
        panic!("no row for {queue}: {body}");
    };
    let row = &body[start..];
    let row = &row[..row.find("</tr>").unwrap()];
    row.split("<td>")
        .skip(1)
        .map(|c| c.trim_end_matches("</td>").to_owned())
        .collect()
}

/// The text of a cell, tags dropped.
fn text(cell: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in cell.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn counts_beyond_the_limit_are_shown_as_bounds_and_estimates() {
    let b = setup().await;
    // Statistics taken on the empty table, then the table filled: the plans must still
    // read the finished jobs' index, and the figures come from the rows, not the statistics.
    b.raw.batch_execute("ANALYZE jobs").await.unwrap();
    b.add_many(300, "big", "k", "done").await;
    b.add_many(50, "small", "k", "done").await;
    b.add_many(5, "small", "k", "failed").await;
    b.add_many(150, "big", "k", "queued").await;
    let r = b
        .dashboard(Access::full("tester"))
        .count_limit(100)
        .router();
    for round in ["stale statistics", "fresh statistics"] {
        let q = get(&r, "/").await;
        assert_eq!(q.status, StatusCode::OK);
        // Columns: queue, queued, ready, held, running, done, failed, finished / min, ...
        let small = queue_cells(&q.body, "small");
        assert_eq!(
            (text(&small[5]), text(&small[6]), text(&small[7])),
            ("50".to_owned(), "5".to_owned(), "55".to_owned()),
            "{round}: {small:?}"
        );
        assert!(
            !small[5].contains("approx") && !small[6].contains("approx"),
            "{round}: exact counts are shown plainly: {small:?}"
        );
        let big = queue_cells(&q.body, "big");
        // Queued rows stop at the limit; past it the done count is an estimate (here the
        // table is smaller than the sample, so the sample reads all of it: 300).
        assert_eq!(text(&big[1]), "100+", "{round}: {big:?}");
        assert_eq!(text(&big[3]), "0", "{round}: none held: {big:?}");
        assert_eq!(text(&big[5]), "≈&#8239;300", "{round}: {big:?}");
        assert_eq!(text(&big[6]), "0", "{round}: {big:?}");
        // 300 finished in the last minute: past the limit, a lower bound.
        assert_eq!(text(&big[7]), "100+", "{round}: {big:?}");
        assert!(q.body.contains("is an estimate"), "{}", q.body);
        b.raw.batch_execute("ANALYZE jobs").await.unwrap();
    }
    let list = get(&r, "/jobs").await;
    assert!(
        list.body.contains("100+</span> matching jobs"),
        "{}",
        list.body
    );
    let few = get(&r, "/jobs?state=failed").await;
    assert!(
        few.body.contains("5</span> matching") || few.body.contains("5 matching"),
        "{}",
        few.body
    );
}

#[tokio::test]
async fn an_estimate_past_the_limit_is_never_below_it() {
    let b = setup().await;
    b.add_many(150, "big", "k", "failed").await;
    let r = b
        .dashboard(Access::full("tester"))
        .count_limit(100)
        .router();
    // Delete behind the dashboard's back after its estimate is cached: the cached estimate
    // may be stale, but a count past the limit never shows less than the limit, nor 0.
    let q = get(&r, "/").await;
    assert_eq!(text(&queue_cells(&q.body, "big")[6]), "≈&#8239;150");
    b.raw
        .batch_execute("DELETE FROM jobs WHERE id IN (SELECT id FROM jobs ORDER BY id LIMIT 30)")
        .await
        .unwrap();
    let q = get(&r, "/").await;
    let failed = text(&queue_cells(&q.body, "big")[6]);
    assert!(failed == "≈&#8239;150" || failed == "100+", "{failed}");
    b.raw
        .batch_execute("DELETE FROM jobs WHERE id IN (SELECT id FROM jobs ORDER BY id LIMIT 30)")
        .await
        .unwrap();
    let q = get(&r, "/").await;
    assert_eq!(text(&queue_cells(&q.body, "big")[6]), "90");
}

#[tokio::test]
async fn a_read_past_the_statement_timeout_is_cancelled_and_said_so() {
    let b = setup().await;
    b.add("q", "k", "done").await;
    // Another session holds the table: the dashboard's read waits for its lock until the
    // statement timeout cancels it, instead of piling up behind it.
    let mut locker = b.db.connect().await.unwrap();
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute(&format!(
        "LOCK TABLE \"{}\".jobs IN ACCESS EXCLUSIVE MODE",
        b.db.schema()
    ))
    .await
    .unwrap();
    let r = b
        .dashboard(Access::full("tester"))
        .statement_timeout(Duration::from_millis(200))
        .router();
    let started = std::time::Instant::now();
    for path in ["/", "/jobs", "/health"] {
        let page = get(&r, path).await;
        assert_eq!(
            page.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{path}: {}",
            page.body
        );
        assert!(
            page.body.contains("statement timeout (200 ms)"),
            "{}",
            page.body
        );
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    tx.rollback().await.unwrap();
    assert_eq!(get(&r, "/").await.status, StatusCode::OK);
}
