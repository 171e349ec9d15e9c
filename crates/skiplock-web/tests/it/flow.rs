//! Flow control on the pages (the library's migration 11): a limited queue's limits, its
//! running jobs against its concurrency limit (and above a lowered one), why its jobs wait,
//! the keys at their per-key limit, the sequences with held jobs, and a held job on its page
//! and in the list. And the statements that read queued jobs still use the indexes now that
//! the ready index leaves held rows out.

use std::time::Duration;

use axum::http::StatusCode;
use skiplock::{NewJob, QueueLimits};

use crate::support::{get, ids, setup, Bundle};

/// Adds a running job of `queue` with `key`.
async fn running(b: &Bundle, queue: &str, key: &str) -> i64 {
    b.raw
        .query_one(
            "INSERT INTO jobs (queue, kind, payload, status, attempts, locked_until, key) \
             VALUES ($1, 'call', '{}', 'running', 1, now() + interval '5 minutes', $2) \
             RETURNING id",
            &[&queue, &key],
        )
        .await
        .unwrap()
        .get(0)
}

/// Enqueues one job through the library (so that the sequence trigger holds it as it does
/// in production).
async fn enqueue(b: &Bundle, job: NewJob) -> i64 {
    b.client.enqueue(&job).await.unwrap().0
}

/// The row of the table with `class` whose first cell links to `queue`, as cell texts.
fn row_cells(body: &str, class: &str, queue: &str) -> Vec<String> {
    let table = &body[body
        .find(&format!("<table class=\"grid {class}\">"))
        .unwrap_or_else(|| panic!("no {class} table: {body}"))..];
    let table = &table[..table.find("</table>").unwrap()];
    let marker = format!("\">{queue}</a></td>");
    let start = table
        .find(&marker)
        .unwrap_or_else(|| panic!("no {queue} row in {class}: {table}"));
    let start = table[..start].rfind("<tr>").unwrap();
    let row = &table[start..];
    let row = &row[..row.find("</tr>").unwrap()];
    row.split("<td>")
        .skip(1)
        .map(|c| text(&c[..c.find("</td>").unwrap()]))
        .collect()
}

/// The rows of the table with `class`, as cell texts.
fn table_rows(body: &str, class: &str) -> Vec<Vec<String>> {
    let Some(at) = body.find(&format!("<table class=\"grid {class}\">")) else {
        return Vec::new();
    };
    let table = &body[at..];
    let table = &table[..table.find("</table>").unwrap()];
    let tbody = &table[table.find("<tbody>").unwrap()..];
    tbody
        .split("<tr>")
        .skip(1)
        .map(|row| {
            row.split("<td>")
                .skip(1)
                .map(|c| text(&c[..c.find("</td>").unwrap()]))
                .collect()
        })
        .collect()
}

/// Text without tags (a cell's end is a space), entities of the pages undone, spaces
/// collapsed.
fn text(html: &str) -> String {
    let html = html.replace("</th>", " ").replace("</td>", " ");
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&#8239;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn a_limited_queue_shows_its_limits_running_against_them_and_why_jobs_wait() {
    let b = setup().await;
    b.client
        .set_queue_limits(
            "api",
            QueueLimits::none()
                .concurrency(5)
                .per_key(2)
                .rate(100, Duration::from_secs(1)),
            Some("ops <team>"),
        )
        .await
        .unwrap();
    // acct-1 runs two jobs (its per-key limit) with four ready behind it; acct-2 runs one.
    running(&b, "api", "acct-1").await;
    running(&b, "api", "acct-1").await;
    running(&b, "api", "acct-2").await;
    for _ in 0..4 {
        enqueue(
            &b,
            NewJob::from_json("call", "{}").queue("api").key("acct-1"),
        )
        .await;
    }
    enqueue(
        &b,
        NewJob::from_json("call", "{}").queue("api").key("acct-2"),
    )
    .await;
    // A queue limited by rate only, and one with no limit.
    b.client
        .set_queue_limits(
            "slow",
            QueueLimits::none().rate(10, Duration::from_secs(60)),
            None,
        )
        .await
        .unwrap();
    b.add("plain", "k", "queued").await;
    // The last claims: api left jobs behind for want of a slot, slow for want of rate.
    b.raw
        .batch_execute(
            "UPDATE queues SET limit_bound = 'slots' WHERE name = 'api'; \
             UPDATE queues SET limit_bound = 'rate' WHERE name = 'slow'",
        )
        .await
        .unwrap();
    let r = b.router();

    let q = get(&r, "/").await;
    assert_eq!(q.status, StatusCode::OK, "{}", q.body);
    // Queue, queued, ready, held, running (against the limit), done, failed, ...
    let api = row_cells(&q.body, "queues", "api");
    assert_eq!(api[..5], ["api", "5", "5", "0", "3 / 5"], "{api:?}");
    let plain = row_cells(&q.body, "queues", "plain");
    assert_eq!(plain[..5], ["plain", "1", "1", "0", "0"], "{plain:?}");
    // A limited queue with no job is listed too.
    let slow = row_cells(&q.body, "queues", "slow");
    assert_eq!(slow[..5], ["slow", "0", "0", "0", "0"], "{slow:?}");
    assert!(!q.body.contains("above limit"), "{}", q.body);

    // Flow control: queue, concurrency, per key, rate, running, held, why, by.
    let api = row_cells(&q.body, "flow", "api");
    assert_eq!(
        api,
        [
            "api",
            "5",
            "2",
            "100 / s",
            "3 / 5",
            "0",
            "waiting for a slot",
            "ops <team>"
        ],
        "{api:?}"
    );
    assert!(q.body.contains("ops &lt;team&gt;"), "escaped");
    let slow = row_cells(&q.body, "flow", "slow");
    assert_eq!(
        slow,
        [
            "slow",
            "-",
            "-",
            "10 / min",
            "0",
            "0",
            "rate window full",
            "-"
        ],
        "{slow:?}"
    );
    assert!(
        table_rows(&q.body, "flow").iter().all(|r| r[0] != "plain"),
        "an unlimited queue without held jobs is not in the flow table"
    );
    // The key at its limit, with its ready jobs; acct-2 has a free slot and is not listed.
    assert_eq!(
        table_rows(&q.body, "keys"),
        [["api", "acct-1", "2 / 2", "4", "4"]]
    );

    // The limit lowered below what runs: the page says so.
    b.client
        .set_queue_limits("api", QueueLimits::none().concurrency(2), Some("ops"))
        .await
        .unwrap();
    let q = get(&r, "/").await;
    let api = row_cells(&q.body, "queues", "api");
    assert_eq!(api[4], "3 / 2 above limit", "{api:?}");
    let api = row_cells(&q.body, "flow", "api");
    assert_eq!(
        api,
        ["api", "2", "-", "-", "3 / 2 above limit", "0", "-", "ops"],
        "setting limits clears the bound: {api:?}"
    );
    assert!(
        table_rows(&q.body, "keys").is_empty(),
        "no per-key limit now"
    );

    // Limits lifted: the queue leaves the flow table.
    b.client
        .set_queue_limits("api", QueueLimits::none(), None)
        .await
        .unwrap();
    let q = get(&r, "/").await;
    assert_eq!(row_cells(&q.body, "queues", "api")[4], "3");
    assert!(!q.body.contains("above limit"));
}

#[tokio::test]
async fn a_held_job_shows_as_held_on_its_page_in_the_list_and_on_the_queues_page() {
    let b = setup().await;
    let first = enqueue(
        &b,
        NewJob::from_json("sync", "{}")
            .queue("accounts")
            .key("acct-7")
            .sequence("acct-7"),
    )
    .await;
    let second = enqueue(
        &b,
        NewJob::from_json("sync", "{}")
            .queue("accounts")
            .sequence("acct-7"),
    )
    .await;
    let third = enqueue(
        &b,
        NewJob::from_json("sync", "{}")
            .queue("accounts")
            .sequence("acct-7"),
    )
    .await;
    let other = enqueue(&b, NewJob::from_json("sync", "{}").queue("accounts")).await;
    let r = b.router();

    // The held job's page: held, the sequence it waits in, and the member before it.
    let page = get(&r, &format!("/jobs/{second}")).await;
    assert_eq!(page.status, StatusCode::OK);
    let body = text(&page.body);
    assert!(
        body.contains("waiting held (waiting for its turn in sequence acct-7)"),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "Sequence acct-7 · runs after job {first} (queued)"
        )),
        "{body}"
    );
    assert!(body.contains("Key -"), "{body}");
    // The first member is ready, with its key and sequence, and not held.
    let page = get(&r, &format!("/jobs/{first}")).await;
    let body = text(&page.body);
    assert!(body.contains("Key acct-7"), "{body}");
    assert!(body.contains("Sequence acct-7 Priority"), "{body}");
    assert!(!body.contains("held"), "{body}");

    // The list: every queued job, the held ones tagged; and the held ones alone.
    let list = get(&r, "/jobs?state=queued&queue=accounts").await;
    assert_eq!(ids(&list.body), [other, third, second, first]);
    assert!(list.body.contains("4 matching jobs"), "{}", list.body);
    assert_eq!(list.body.matches("class=\"tag held\"").count(), 2);
    let held = get(&r, "/jobs?state=held").await;
    assert_eq!(held.status, StatusCode::OK);
    assert_eq!(ids(&held.body), [third, second]);
    assert!(held.body.contains("2 matching jobs"), "{}", held.body);
    assert!(
        held.body.contains("<option value=\"held\" selected>"),
        "{}",
        held.body
    );
    // Bulk actions take held jobs as queued ones.
    let confirm = get(&r, "/bulk?action=cancel&state=held&queue=accounts").await;
    assert_eq!(confirm.status, StatusCode::OK, "{}", confirm.body);
    assert!(text(&confirm.body).contains("2 jobs match: held jobs in queue accounts"));

    // The queues page: held jobs counted apart from ready ones, and the sequence listed.
    let q = get(&r, "/").await;
    let row = row_cells(&q.body, "queues", "accounts");
    assert_eq!(row[..5], ["accounts", "4", "2", "2", "0"], "{row:?}");
    let flow = row_cells(&q.body, "flow", "accounts");
    assert_eq!(flow, ["accounts", "-", "-", "-", "0", "2", "-", "-"]);
    assert_eq!(
        table_rows(&q.body, "sequences"),
        [[
            "accounts".to_owned(),
            "acct-7".to_owned(),
            "2".to_owned(),
            format!("job {first} queued")
        ]]
    );
    assert!(q
        .body
        .contains("href=\"/jobs?queue=accounts&amp;state=held\""));
}

/// The statements that read queued jobs, planned on a table of finished jobs: each reads the
/// partial indexes (the ready index for queued jobs that are not held, the held rows' own),
/// never the whole table nor the primary key, with statistics taken before any job was queued
/// or held, then with fresh ones.
///
/// The statistics must know the `held` column: until the first ANALYZE after migration 11
/// they do not, and the planner then takes `held IS NOT NULL` for nearly every row (as it
/// does for the library's own statements).
#[tokio::test]
async fn queued_and_held_jobs_are_read_through_their_indexes() {
    let b = setup().await;
    b.raw
        .batch_execute(
            "ALTER TABLE jobs SET (autovacuum_enabled = false); \
             INSERT INTO jobs (queue, kind, payload, status, attempts, finished_at) \
             SELECT 'q' || (i % 3), 'k', '{}', CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'done' END, \
                    1, now() FROM generate_series(1, 100000) i; \
             ANALYZE jobs",
        )
        .await
        .unwrap();
    b.client
        .set_queue_limits("q1", QueueLimits::none().per_key(1), None)
        .await
        .unwrap();
    running(&b, "q1", "a").await;
    for i in 0..3 {
        enqueue(
            &b,
            NewJob::from_json("k", "{}")
                .queue("q1")
                .key("a")
                .sequence(format!("s{i}")),
        )
        .await;
        enqueue(
            &b,
            NewJob::from_json("k", "{}")
                .queue("q1")
                .sequence(format!("s{i}")),
        )
        .await;
    }
    let top: i64 = b
        .raw
        .query_one("SELECT max(id) FROM jobs", &[])
        .await
        .unwrap()
        .get(0);
    let schema = format!("\"{}\"", b.db.schema());
    // The statement with its comments dropped and its parameters given, highest first so
    // that $1 does not match the start of $10.
    let render = |sql: &str, params: &[&str]| -> String {
        let mut s = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
            .replace("{schema}", &schema);
        for (i, p) in params.iter().enumerate().rev() {
            s = s.replace(&format!("${}", i + 1), p);
        }
        s
    };
    let top = top.to_string();
    let mut cases: Vec<(String, String)> = Vec::new();
    for held in ["false", "true"] {
        let queued = "'queued'";
        cases.extend([
            (
                format!("job_list_older held={held}"),
                render(
                    include_str!("../../queries/job_list_older.sql"),
                    &[queued, "NULL", "NULL", "NULL", "51", "NULL", held, "NULL"],
                ),
            ),
            (
                format!("job_list_older, a queue, below an id, held={held}"),
                render(
                    include_str!("../../queries/job_list_older.sql"),
                    &[queued, "'q1'", "NULL", &top, "51", "NULL", held, "NULL"],
                ),
            ),
            (
                format!("job_list_newer held={held}"),
                render(
                    include_str!("../../queries/job_list_newer.sql"),
                    &[queued, "NULL", "NULL", "1", "51", "NULL", held, "NULL"],
                ),
            ),
            (
                format!("job_count held={held}"),
                render(
                    include_str!("../../queries/job_count.sql"),
                    &[queued, "NULL", "NULL", "10000", "NULL", held, "NULL"],
                ),
            ),
            (
                format!("job_select_ids held={held}"),
                render(
                    include_str!("../../queries/job_select_ids.sql"),
                    &[queued, "'q1'", "NULL", &top, "1000", "NULL", held, "NULL"],
                ),
            ),
        ]);
    }
    // A display state of queued jobs reads the same indexes.
    for state in ["'available'", "'scheduled'", "'retrying'"] {
        cases.push((
            format!("job_list_older display state {state}"),
            render(
                include_str!("../../queries/job_list_older.sql"),
                &[
                    "'queued'", "NULL", "NULL", "NULL", "51", "NULL", "false", state,
                ],
            ),
        ));
    }
    cases.extend([
        (
            "queue_active".to_owned(),
            render(
                include_str!("../../queries/queue_active.sql"),
                &["10001", "500"],
            ),
        ),
        (
            "queue_keys_waiting".to_owned(),
            render(
                include_str!("../../queries/queue_keys_waiting.sql"),
                &["10001", "50", "1000", "10", "500"],
            ),
        ),
        (
            "queue_sequences_held".to_owned(),
            render(
                include_str!("../../queries/queue_sequences_held.sql"),
                &["10001", "10", "500"],
            ),
        ),
        (
            "job_get".to_owned(),
            render(include_str!("../../queries/job_get.sql"), &[&top, "1000"]),
        ),
    ]);
    for round in ["stale statistics", "fresh statistics"] {
        for (name, sql) in &cases {
            let plan: Vec<String> = b
                .raw
                .query(&format!("EXPLAIN {sql}"), &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            let plan = plan.join("\n");
            assert!(
                !plan.contains("Seq Scan"),
                "{round}: {name} scans the table:\n{plan}"
            );
            if name != "job_get" {
                // A primary key scan with the status as a filter reads the finished rows.
                assert!(
                    !plan.contains("jobs_pkey"),
                    "{round}: {name} reads the primary key:\n{plan}"
                );
            }
        }
        b.raw.batch_execute("ANALYZE jobs").await.unwrap();
    }
}
