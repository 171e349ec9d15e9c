//! What an operator does with the dashboard: display states that agree with `skiplock jobs`,
//! search, ticked-row actions, Run now, a paused queue's banner, the workers page, a queue's
//! charts and a job's attempt history.

use axum::http::StatusCode;
use skiplock::Statement;
use skiplock_web::Access;

use crate::support::{get, ids, post, post_with, setup, Bundle};

/// One job in each display state; returns (id, the state `skiplock jobs` gives it).
async fn one_of_each(b: &Bundle) -> Vec<(i64, &'static str)> {
    let mut out = Vec::new();
    let add = |sql: &'static str| async move {
        b.raw.query_one(sql, &[]).await.unwrap().get::<_, i64>(0)
    };
    out.push((
        add("INSERT INTO jobs (queue, payload) VALUES ('q', '{}') RETURNING id").await,
        "available",
    ));
    out.push((
        add("INSERT INTO jobs (queue, payload, run_at) VALUES ('q', '{}', now() + interval '1 hour') \
             RETURNING id")
        .await,
        "scheduled",
    ));
    out.push((
        add(
            "INSERT INTO jobs (queue, payload, attempts, last_error, run_at) \
             VALUES ('q', '{}', 1, 'timeout', now() + interval '30 seconds') RETURNING id",
        )
        .await,
        "retrying",
    ));
    out.push((b.add("q", "k", "running").await, "running"));
    // Held: waiting for its turn in a sequence (as the sequence's insert trigger marks a
    // member behind an active one).
    let waiting = add(
        "INSERT INTO jobs (queue, payload, sequence) VALUES ('q', '{}', 'seq-1') \
                       RETURNING id",
    )
    .await;
    b.raw
        .execute(
            "UPDATE jobs SET held = 'sequence' WHERE id = $1",
            &[&waiting],
        )
        .await
        .unwrap();
    out.push((waiting, "waiting"));
    out.push((b.add("q", "k", "done").await, "done"));
    out.push((b.add("q", "k", "failed").await, "failed"));
    out.push((
        add(
            "INSERT INTO jobs (queue, payload, status, attempts, finished_at, last_error) \
             VALUES ('q', '{}', 'failed', 0, now(), 'cancelled') RETURNING id",
        )
        .await,
        "cancelled",
    ));
    out
}

/// The display state of each row of a job list page, in page order.
fn states(body: &str) -> Vec<String> {
    let table = &body[body.find("<table class=\"grid jobs\">").unwrap()..];
    table
        .split("<span class=\"state state-")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].to_owned())
        .collect()
}

#[tokio::test]
async fn display_states_agree_with_skiplock_jobs_and_filter_the_list() {
    let b = setup().await;
    let jobs = one_of_each(&b).await;
    // What `skiplock jobs` derives, by the library's own statement.
    let lib: Vec<(i64, String)> = b
        .raw
        .query(
            b.client.statement(Statement::JobsList),
            &[
                &None::<Vec<String>>,
                &None::<Vec<String>>,
                &None::<String>,
                &None::<String>,
                &None::<i64>,
                &None::<i64>,
                &None::<i64>,
                &None::<i64>,
                &None::<i64>,
                &100i64,
            ],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("id"), r.get("state")))
        .collect();
    let want: Vec<(i64, String)> = jobs
        .iter()
        .rev()
        .map(|(id, s)| (*id, (*s).to_owned()))
        .collect();
    // The fixture covers every display state, as the library names them (so the comparison
    // below cannot pass on a list of one state).
    assert_eq!(lib, want, "the library's derivation");

    let r = b.router();
    let list = get(&r, "/jobs").await;
    let shown: Vec<(i64, String)> = ids(&list.body)
        .into_iter()
        .zip(states(&list.body))
        .collect();
    assert_eq!(shown, lib, "the list shows the library's display states");

    // Each state filters to its jobs alone, and `waiting` is the list's `held`.
    for (id, state) in &jobs {
        let page = get(&r, &format!("/jobs?state={state}")).await;
        assert_eq!(page.status, StatusCode::OK, "{state}: {}", page.body);
        assert_eq!(ids(&page.body), [*id], "state={state}");
    }
    // `queued` keeps meaning every queued job.
    let queued = get(&r, "/jobs?state=queued").await;
    assert_eq!(ids(&queued.body).len(), 4);

    // A job's page shows its display state.
    for (id, state) in &jobs {
        let page = get(&r, &format!("/jobs/{id}")).await;
        assert!(
            page.body
                .contains(&format!("<span class=\"state state-{state}\"")),
            "job {id} ({state}): {}",
            page.body
        );
    }
    // The queues page counts the queued ones by display state too: 4 queued, of them 1
    // ready (available), 1 waiting, 1 scheduled and 1 retrying.
    let q = get(&r, "/").await;
    let row = &q.body[q.body.find(">q</a></td>").unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    let cells: Vec<&str> = row.split("<td>").collect();
    for (i, n) in [(1, 4), (2, 1), (3, 1), (9, 1), (10, 1)] {
        let c = cells[i];
        assert!(
            c.contains(&format!(">{n}<")) || c.starts_with(&format!("{n}<")),
            "cell {i}: {row}"
        );
    }
    assert!(cells[9].contains("state=scheduled") && cells[10].contains("state=retrying"));

    let bad = get(&r, "/jobs?state=sleeping").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("is not a job state"));
}

#[tokio::test]
async fn search_opens_a_job_by_id_and_reads_the_newest_payloads_only() {
    let b = setup().await;
    let old = b
        .raw
        .query_one(
            "INSERT INTO jobs (queue, payload) VALUES ('q', '{\"to\": \"needle@old.example\"}') \
             RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    b.add_many(10_000, "q", "k", "done").await;
    let new = b
        .raw
        .query_one(
            "INSERT INTO jobs (queue, payload) VALUES ('q', '{\"to\": \"Needle@new.example\"}') \
             RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    let r = b.router();

    let by_id = get(&r, &format!("/search?q={old}")).await;
    assert_eq!(by_id.status, StatusCode::SEE_OTHER);
    assert_eq!(by_id.location(), format!("/jobs/{old}"));

    let found = get(&r, "/search?q=NEEDLE%40").await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.body);
    assert_eq!(ids(&found.body), [new], "{}", found.body);
    assert!(
        found.body.contains("searched the newest 10,000 jobs"),
        "{}",
        found.body
    );
    // Negative control: the old job's payload holds the text too; only the bound leaves it out.
    let everywhere: i64 = b
        .raw
        .query_one(
            "SELECT count(*) FROM jobs WHERE payload::text ILIKE '%needle@%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(everywhere, 2);

    // An id no job has is looked for as text.
    let none = get(&r, "/search?q=99999999").await;
    assert_eq!(none.status, StatusCode::OK);
    assert!(
        none.body.contains("There is no job 99,999,999"),
        "{}",
        none.body
    );
    assert!(none.body.contains("No job's payload contains this text"));
    let long = get(&r, &format!("/search?q={}", "x".repeat(201))).await;
    assert_eq!(long.status, StatusCode::BAD_REQUEST);
    // Every page's bar has the search box.
    assert!(get(&r, "/").await.body.contains("action=\"/search\""));
}

#[tokio::test]
async fn ticked_jobs_are_retried_cancelled_or_deleted_through_the_guard() {
    let b = setup().await;
    let f1 = b.add("q", "k", "failed").await;
    let f2 = b.add("q", "k", "failed").await;
    let running = b.add("q", "k", "running").await;
    let untouched = b.add("q", "k", "failed").await;
    let r = b.router();

    let list = get(&r, "/jobs?state=failed").await;
    assert!(list.body.contains("form=\"selected\""), "{}", list.body);
    assert!(list.body.contains("id=\"selected-retry\""));

    // From another site: refused, nothing changes.
    let form = format!("state=failed&id={f1}&id={f2}&id={running}&action=retry");
    let forged = post_with(&r, "/selected", &form, &[("sec-fetch-site", "cross-site")]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert_eq!(b.status(f1).await.as_deref(), Some("failed"));

    let done = post(&r, "/selected", &form).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(
        done.body.contains("Retried 2 of the 3 ticked jobs"),
        "{}",
        done.body
    );
    assert!(done.body.contains("1 left alone"), "{}", done.body);
    assert!(done.body.contains("href=\"/jobs?state=failed\""));
    assert_eq!(b.status(f1).await.as_deref(), Some("queued"));
    assert_eq!(b.status(f2).await.as_deref(), Some("queued"));
    assert_eq!(b.status(running).await.as_deref(), Some("running"));
    assert_eq!(b.status(untouched).await.as_deref(), Some("failed"));

    let del = post(&r, "/selected", &format!("id={untouched}&action=delete")).await;
    assert!(
        del.body.contains("Deleted 1 of the 1 ticked job"),
        "{}",
        del.body
    );
    assert_eq!(b.status(untouched).await, None);

    let empty = post(&r, "/selected", "action=cancel").await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);
    assert!(empty.body.contains("Tick at least one job"));

    // Read-only: no checkboxes, and the action is refused.
    let ro = b.dashboard(Access::read_only("viewer")).router();
    let list = get(&ro, "/jobs").await;
    assert!(!list.body.contains("form=\"selected\""));
    let refused = post(&ro, "/selected", &format!("id={f1}&action=cancel")).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(b.status(f1).await.as_deref(), Some("queued"));
}

#[tokio::test]
async fn run_now_moves_only_a_queued_job_that_never_ran_and_leaves_a_claim_alone() {
    let b = setup().await;
    let later = |attempts: i32| {
        let raw = &b.raw;
        async move {
            raw.query_one(
                "INSERT INTO jobs (queue, payload, attempts, run_at, last_error) \
                 VALUES ('q', '{}', $1, now() + interval '1 hour', \
                         CASE WHEN $1 > 0 THEN 'boom' END) RETURNING id",
                &[&attempts],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
        }
    };
    let due_at = |id: i64| {
        let raw = &b.raw;
        async move {
            raw.query_one(
                "SELECT extract(epoch FROM run_at - now())::float8 FROM jobs WHERE id = $1",
                &[&id],
            )
            .await
            .unwrap()
            .get::<_, f64>(0)
        }
    };
    let r = b.router();
    // A listener on the schema's channel, as an idle worker (the poll off included) waits.
    let (listener, mut conn) = tokio_postgres::connect(b.db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let (wake_tx, mut woken) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        while let Some(Ok(m)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = wake_tx.send(n.payload().to_owned());
            }
        }
    });
    listener
        .batch_execute(&format!("LISTEN \"{}\"", b.client.schema().channel()))
        .await
        .unwrap();
    let wake = |woken: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        let got = woken.try_recv().ok();
        async move { got }
    };

    let fresh = later(0).await;
    // The inserts woke it; start from none.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    while woken.try_recv().is_ok() {}
    let page = get(&r, &format!("/jobs/{fresh}")).await;
    assert!(page.body.contains("id=\"action-run\""), "{}", page.body);
    let res = post(&r, &format!("/jobs/{fresh}/run"), "").await;
    assert_eq!(res.status, StatusCode::SEE_OTHER);
    assert_eq!(res.location(), format!("/jobs/{fresh}?done=run&changed=1"));
    assert!(due_at(fresh).await <= 0.0);
    // Its queue's workers were woken (at commit), so that an idle one looks at once.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(wake(&mut woken).await.as_deref(), Some("q"));
    let page = get(&r, res.location()).await;
    assert!(page.body.contains("Due now"), "{}", page.body);
    // Due now: no Run now button any more.
    assert!(!page.body.contains("id=\"action-run\""));

    // A retry waiting for its backoff keeps it.
    let retrying = later(1).await;
    assert!(!get(&r, &format!("/jobs/{retrying}"))
        .await
        .body
        .contains("id=\"action-run\""));
    let res = post(&r, &format!("/jobs/{retrying}/run"), "").await;
    assert_eq!(
        res.location(),
        format!("/jobs/{retrying}?done=run&changed=0")
    );
    assert!(due_at(retrying).await > 3000.0);

    // A claim that takes the job while Run now waits for its row: the claim wins, untouched.
    let claimed = later(0).await;
    let claimer = b.db.connect().await.unwrap();
    claimer
        .batch_execute(&format!(
            "SET search_path TO \"{}\"; BEGIN; \
             UPDATE jobs SET status = 'running', attempts = 1, \
             locked_until = now() + interval '5 minutes' WHERE id = {claimed}",
            b.db.schema()
        ))
        .await
        .unwrap();
    let r2 = r.clone();
    let run = tokio::spawn(async move { post(&r2, &format!("/jobs/{claimed}/run"), "").await });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!run.is_finished(), "Run now waits for the claim's row lock");
    claimer.batch_execute("COMMIT").await.unwrap();
    let res = run.await.unwrap();
    assert_eq!(
        res.location(),
        format!("/jobs/{claimed}?done=run&changed=0")
    );
    let (status, attempts): (String, i32) = {
        let row = b
            .raw
            .query_one(
                "SELECT status, attempts FROM jobs WHERE id = $1",
                &[&claimed],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((status.as_str(), attempts), ("running", 1));
    assert!(
        due_at(claimed).await > 3000.0,
        "the claimed job's run_at was left alone"
    );

    // Read-only access cannot.
    let other = later(0).await;
    let ro = b.dashboard(Access::read_only("viewer")).router();
    assert_eq!(
        post(&ro, &format!("/jobs/{other}/run"), "").await.status,
        StatusCode::FORBIDDEN
    );
    assert!(due_at(other).await > 3000.0);
}

#[tokio::test]
async fn a_paused_queue_says_so_on_its_list_and_its_page() {
    let b = setup().await;
    b.add("mail", "send", "queued").await;
    b.add("reports", "build", "queued").await;
    b.client
        .pause_queue("mail", Some("ops-oncall"))
        .await
        .unwrap();
    let r = b.router();
    for path in ["/jobs?queue=mail", "/queues/mail"] {
        let page = get(&r, path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        assert!(
            page.body.contains("id=\"paused-banner\""),
            "{path}: {}",
            page.body
        );
        assert!(
            page.body.contains("is paused by <b>ops-oncall</b> since"),
            "{path}"
        );
    }
    // The queue's page has its row of the queues table, and only its own.
    let page = get(&r, "/queues/mail").await;
    assert_eq!(
        page.body.matches("<table class=\"grid queues\">").count(),
        1
    );
    assert!(
        page.body.contains("id=\"resume-queue-mail\""),
        "{}",
        page.body
    );
    assert!(!page.body.contains("reports</a></td>"), "{}", page.body);
    for path in ["/jobs?queue=reports", "/queues/reports", "/jobs"] {
        let page = get(&r, path).await;
        assert!(
            !page.body.contains("paused-banner"),
            "{path}: {}",
            page.body
        );
    }
    let bad = get(&r, "/queues/no%20such").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn workers_are_running_sleeping_or_gone_by_their_own_heartbeat() {
    let b = setup().await;
    // (host, poll_off, heartbeat, last seen this many seconds ago, stopped this many seconds
    // ago)
    let workers: [(&str, bool, f64, f64, Option<f64>); 8] = [
        ("alive", false, 10.0, 1.0, None),
        // 1.5 heartbeats of silence: within the grace, still running.
        ("late", false, 10.0, 15.0, None),
        // 2.5 heartbeats of silence with the poll on: gone.
        ("silent", false, 10.0, 25.0, None),
        // A short heartbeat gets a grace of at least 2 s: 1 s + 2 s.
        ("quick", false, 1.0, 2.5, None),
        ("quick-dead", false, 1.0, 3.5, None),
        // An hour of silence with the poll off: sleeping, not gone.
        ("idle", true, 10.0, 3_600.0, None),
        ("stopped", false, 10.0, 3_600.0, Some(3_600.0)),
        // Gone more than a day ago: not listed.
        ("ancient", false, 10.0, 90_000.0, Some(90_000.0)),
    ];
    for (host, poll_off, heartbeat, seen, stopped) in workers {
        b.raw
            .execute(
                "INSERT INTO workers (host, pid, queues, concurrency, running, poll_off, \
                 heartbeat, version, started_at, last_seen, stopped_at) \
                 VALUES ($1, 4242, '{\"mail\": 4, \"reports\": 2}', 6, 3, $2, \
                         $3 * interval '1 second', '0.9.0', now() - interval '2 days', \
                         now() - $4 * interval '1 second', \
                         now() - $5 * interval '1 second')",
                &[&host, &poll_off, &heartbeat, &seen, &stopped],
            )
            .await
            .unwrap();
    }
    let r = b.router();
    let page = get(&r, "/workers").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let state_of = |host: &str| -> Option<String> {
        let cell = format!("<tr><td>{host}</td>");
        let row = &page.body[page.body.find(&cell)?..];
        let row = &row[..row.find("</tr>").unwrap()];
        let s = &row[row.find("class=\"wstate ")? + "class=\"wstate ".len()..];
        Some(s[..s.find('"').unwrap()].to_owned())
    };
    assert_eq!(state_of("alive").as_deref(), Some("running"));
    assert_eq!(state_of("late").as_deref(), Some("running"));
    assert_eq!(state_of("silent").as_deref(), Some("gone"));
    assert_eq!(state_of("quick").as_deref(), Some("running"));
    assert_eq!(state_of("quick-dead").as_deref(), Some("gone"));
    assert_eq!(state_of("idle").as_deref(), Some("sleeping"));
    assert_eq!(state_of("stopped").as_deref(), Some("gone"));
    assert_eq!(state_of("ancient"), None, "gone for more than a day");
    assert!(
        page.body.contains("4 workers serving the queues"),
        "{}",
        page.body
    );
    // The gone ones are listed apart, after the live ones.
    let gone_at = page.body.find("Gone in the last 24 hours").unwrap();
    assert!(page.body.find("<td>silent</td>").unwrap() > gone_at);
    assert!(page.body.find("<td>idle</td>").unwrap() < gone_at);
    assert!(page.body.contains("href=\"/queues/mail\">mail</a>"));
    assert!(page.body.contains("href=\"/workers\" class=\"active\""));

    // The queues page counts the live workers of each queue.
    b.add("mail", "send", "queued").await;
    b.add("other", "send", "queued").await;
    let q = get(&r, "/").await;
    let workers_cell = |queue: &str| -> String {
        let start = q.body.find(&format!(">{queue}</a></td>")).unwrap();
        let row = &q.body[start..];
        let row = &row[..row.find("</tr>").unwrap()];
        row.split("<td>").nth(11).unwrap().to_owned()
    };
    assert!(
        workers_cell("mail").contains(">4</a>"),
        "{}",
        workers_cell("mail")
    );
    assert!(
        workers_cell("other").contains(">0<"),
        "{}",
        workers_cell("other")
    );
    assert!(get(&r, "/queues/mail")
        .await
        .body
        .contains("4 live workers serving it"));
}

#[tokio::test]
async fn a_queues_charts_draw_its_samples_and_never_a_line_without_them() {
    let b = setup().await;
    b.add("mail", "send", "queued").await;
    let r = b.router();
    let empty = get(&r, "/queues/mail").await;
    assert!(empty.body.contains("id=\"no-samples\""), "{}", empty.body);
    assert!(!empty.body.contains("<svg class=\"chart\""));

    // Samples older than the hour: still none to draw.
    b.raw
        .execute(
            "INSERT INTO queue_stats (queue, minute, done, failed, available, scheduled, running) \
             VALUES ('mail', date_trunc('minute', now()) - interval '3 hours', 5, 1, 2, 0, 1)",
            &[],
        )
        .await
        .unwrap();
    assert!(get(&r, "/queues/mail")
        .await
        .body
        .contains("id=\"no-samples\""));

    // Minutes 30 to 20 ago and 10 to 0 ago: two runs, a gap between.
    b.raw
        .execute(
            "INSERT INTO queue_stats (queue, minute, done, failed, available, scheduled, running) \
             SELECT 'mail', date_trunc('minute', now()) - m * interval '1 minute', \
                    100 + m, m % 3, 40, 5, 4 \
             FROM generate_series(0, 30) m WHERE m NOT BETWEEN 11 AND 19",
            &[],
        )
        .await
        .unwrap();
    let page = get(&r, "/queues/mail").await;
    assert!(!page.body.contains("no-samples"), "{}", page.body);
    for id in ["chart-throughput", "chart-depth"] {
        let start = page.body.find(&format!("id=\"{id}\"")).unwrap();
        let svg = &page.body[start..start + page.body[start..].find("</svg>").unwrap()];
        // One polyline per run of each series (2 series or 3), never one across the gap.
        let series = if id == "chart-depth" { 3 } else { 2 };
        assert_eq!(svg.matches("<polyline").count(), 2 * series, "{svg}");
    }
    assert!(
        page.body.contains("22 of the last 60 minutes sampled"),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn a_jobs_page_shows_its_failed_attempts_and_its_run_time() {
    let b = setup().await;
    let id = b.add("q", "k", "done").await;
    b.raw
        .execute(
            "UPDATE jobs SET attempts = 3, attempted_at = finished_at - interval '2.5 seconds', \
             errors = jsonb_build_array( \
               jsonb_build_object('attempt', 1, 'at', now() - interval '10 minutes', \
                                  'error', 'connection <refused>', 'ran_ms', 850), \
               jsonb_build_object('attempt', 2, 'at', now() - interval '5 minutes', \
                                  'error', 'timeout after 30 s', 'ran_ms', 30012)) \
             WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let r = b.router();
    let page = get(&r, &format!("/jobs/{id}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let start = page.body.find("<table class=\"grid history\">").unwrap();
    let history = &page.body[start..start + page.body[start..].find("</table>").unwrap()];
    let rows: Vec<&str> = history.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 2, "{history}");
    assert!(
        rows[0].contains(">1</td>") && rows[0].contains("850 ms"),
        "{}",
        rows[0]
    );
    assert!(
        rows[0].contains("connection &lt;refused&gt;"),
        "escaped: {}",
        rows[0]
    );
    assert!(rows[0].contains("10 min ago"), "{}", rows[0]);
    assert!(rows[1].contains("30.0 s") && rows[1].contains("timeout after 30 s"));
    assert!(
        page.body
            .contains("2.5 s <span class=\"muted\">(its last attempt)"),
        "{}",
        page.body
    );

    // A job failed before the history: its last error, and no invented attempts.
    let old = b.add("q", "k", "failed").await;
    let page = get(&r, &format!("/jobs/{old}")).await;
    assert!(!page.body.contains("grid history"));
    assert!(
        page.body.contains("No failed attempt in its history"),
        "{}",
        page.body
    );
    assert!(page.body.contains("<pre class=\"error\">boom</pre>"));

    // Malformed entries read as blanks, not as a broken page.
    b.raw
        .execute(
            "UPDATE jobs SET errors = '[{\"attempt\": \"two\", \"ran_ms\": null}, 7]' WHERE id = $1",
            &[&old],
        )
        .await
        .unwrap();
    let page = get(&r, &format!("/jobs/{old}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("grid history"));
}

/// The production path: a real worker registers, runs a job whose handler fails, and stops.
/// The workers page shows it running (in the state the library's `skiplock workers` gives
/// it), then stopped; the job's page shows the failed attempt the worker recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_workers_presence_and_failures_show_on_the_pages() {
    use skiplock::{JobContext, JobError, JobOptions, NewJob, Registry, Worker};
    let b = setup().await;
    let registry = Registry::new().register_handler(
        "send",
        JobOptions::default(),
        |_p: String, _c: JobContext| async {
            Err::<(), JobError>(JobError::retry("SMTP 421: <service not available>"))
        },
    );
    let job = b
        .client
        .enqueue(&NewJob::new("send", &0).queue("mail").max_attempts(1))
        .await
        .unwrap()
        .0;
    let worker = Worker::builder(b.client.clone(), registry)
        .queue("mail", 3)
        .presence_interval(std::time::Duration::from_millis(500))
        // Its elected gauges service writes the per-minute rollup the charts draw.
        .metrics_gauges_interval(Some(std::time::Duration::from_millis(300)))
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(async move {
        worker
            .run(async {
                let _ = stopped.await;
            })
            .await
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let failed = b.status(job).await.as_deref() == Some("failed");
        let listed = !b.client.workers().await.unwrap().is_empty();
        if failed && listed {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker did not run the job"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let r = b.router();
    loop {
        let failed: Option<i64> = b
            .raw
            .query_opt(
                "SELECT failed FROM queue_stats WHERE queue = 'mail' AND failed > 0",
                &[],
            )
            .await
            .unwrap()
            .map(|r| r.get(0));
        if failed.is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no rollup was written"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let page = get(&r, "/queues/mail").await;
    assert!(!page.body.contains("no-samples"), "{}", page.body);
    assert!(page
        .body
        .contains("<svg class=\"chart\" id=\"chart-throughput\""));
    let lib = b.client.workers().await.unwrap();
    assert_eq!(lib.len(), 1);
    let page = get(&r, "/workers").await;
    let row = &page.body[page
        .body
        .find(&format!("<tr><td>{}</td>", lib[0].host))
        .unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert_eq!(lib[0].state.as_str(), "running");
    assert!(row.contains("class=\"wstate running\""), "{row}");
    assert!(row.contains(&format!(">{}</td>", lib[0].pid)), "{row}");
    assert!(row.contains(">mail</a>"), "{row}");
    assert!(get(&r, "/").await.body.contains("href=\"/workers\">1</a>"));

    let page = get(&r, &format!("/jobs/{job}")).await;
    let start = page.body.find("<table class=\"grid history\">").unwrap();
    let history = &page.body[start..start + page.body[start..].find("</table>").unwrap()];
    assert_eq!(history.matches("<tr>").count(), 2, "{history}");
    assert!(
        history.contains("SMTP 421: &lt;service not available&gt;"),
        "{history}"
    );
    assert!(
        history.contains(" ms</td>") || history.contains(" s</td>"),
        "{history}"
    );

    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    assert_eq!(b.client.workers().await.unwrap()[0].state.as_str(), "gone");
    let page = get(&r, "/workers").await;
    let gone_at = page.body.find("Gone in the last 24 hours").unwrap();
    assert!(page.body[gone_at..].contains("class=\"wstate gone\">stopped</span>"));
    assert!(page.body.contains("0 workers serving the queues"));
}
