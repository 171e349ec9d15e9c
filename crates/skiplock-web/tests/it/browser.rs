//! The dashboard in a real headless browser (Chromium through chromedriver): every page
//! loads, the buttons change the database, the page polls while visible and stops while
//! hidden, and flow control shows (a limited queue above a lowered limit, a held job); a
//! workflow's graph draws, in its states' colours, and its nodes lead to their jobs.
//! Screenshots of each page go to `target/web-screenshots/`.
//!
//! Without `chromium` and `chromedriver` on the PATH the test says so loudly and passes,
//! unless `SKIPLOCK_REQUIRE_BROWSER=1` (CI sets it).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use axum::extract::Request;
use fantoccini::{Client as Browser, ClientBuilder, Locator};

use crate::support::{setup, Bundle};

/// Set to `1` to fail, instead of skip, when no browser is installed.
const REQUIRE_ENV: &str = "SKIPLOCK_REQUIRE_BROWSER";

fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

pub fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap_or(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .join("web-screenshots")
}

/// chromedriver and chromium, or `None` (after saying so) when the test is to be skipped.
fn browser_binaries() -> Option<(PathBuf, PathBuf)> {
    let (Some(driver), Some(chromium)) = (
        which(&["chromedriver"]),
        which(&["chromium", "chromium-browser", "google-chrome"]),
    ) else {
        let msg = "the browser test needs `chromium` and `chromedriver` on the PATH \
                   (Debian: apt-get install chromium chromium-driver)";
        if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
            panic!("{msg}; {REQUIRE_ENV}=1 makes this a failure");
        }
        eprintln!("\n!!!!!!!!!! SKIPPED: {msg} !!!!!!!!!!\n");
        return None;
    };
    Some((driver, chromium))
}

/// The router served on a local port, chromedriver, and a headless Chromium session on it.
struct Session {
    browser: Browser,
    base: String,
    chromedriver: tokio::process::Child,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    profile: PathBuf,
}

impl Session {
    /// Serves `app` and starts the browser; `name` keeps its profile apart from other tests'.
    async fn start(app: axum::Router, name: &str, driver: &Path, chromium: &Path) -> Session {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, app).await });

        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let chromedriver = tokio::process::Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile =
            std::env::temp_dir().join(format!("skiplock-web-chrome-{}-{name}", std::process::id()));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".to_owned(),
            serde_json::json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--hide-scrollbars", "--window-size=1280,800",
                         format!("--user-data-dir={}", profile.display())],
            }),
        );
        let browser = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a chromedriver session");
        Session {
            browser,
            base,
            chromedriver,
            server,
            profile,
        }
    }

    /// Closes everything, then fails the test with `outcome`'s error, if any.
    async fn finish(mut self, outcome: anyhow::Result<()>) {
        let _ = self.browser.close().await;
        let _ = self.chromedriver.kill().await;
        self.server.abort();
        let _ = std::fs::remove_dir_all(&self.profile);
        if let Err(e) = outcome {
            panic!("{e:#}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_headless_browser() {
    let Some((driver, chromium)) = browser_binaries() else {
        return;
    };

    let b = setup().await;
    let failed = b.add("mail", "send_email", "failed").await;
    let queued = b.add("mail", "send_email", "queued").await;
    let done = b.add("reports", "build:pdf", "done").await;
    b.add_many(3, "reports", "build:pdf", "failed").await;
    b.add_many(40, "mail", "send_email", "done").await;
    b.add_many(5, "mail", "send_email", "queued").await;
    b.add("mail", "send_email", "running").await;
    b.add_many(12, "webhooks", "deliver", "queued").await;
    b.add_many(120, "webhooks", "deliver", "done").await;
    b.client
        .add_schedule(
            &skiplock::Schedule::new("nightly-report", "0 3 * * *", "build:pdf").queue("reports"),
        )
        .await
        .unwrap();

    // Count the refresh script's requests.
    let polls = Arc::new(AtomicUsize::new(0));
    let counter = polls.clone();
    let app = b
        .router()
        .layer(axum::middleware::map_request(move |req: Request| {
            let counter = counter.clone();
            async move {
                if req.headers().contains_key("x-skiplock-refresh") {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                req
            }
        }));
    let s = Session::start(app, "pages", &driver, &chromium).await;
    let outcome = drive(&s.browser, &b, &s.base, &polls, failed, queued, done).await;
    s.finish(outcome).await;
}

/// A workflow's job page: the graph draws one node per job in its state's colour, the
/// current job ringed, and a node leads to its job's page. Screenshots: the whole page
/// (`job-workflow.png`) and the graph alone (`job-workflow-graph.png`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_graph_in_a_headless_browser() {
    let Some((driver, chromium)) = browser_binaries() else {
        return;
    };
    let b = setup().await;
    let ids = media_workflow(&b).await;
    let s = Session::start(b.router(), "workflow", &driver, &chromium).await;
    let outcome = drive_workflow(&s.browser, &s.base, &ids).await;
    s.finish(outcome).await;
}

/// A media pipeline in every state: fetch (done, with an output) feeds resize (done),
/// thumbnail (running), scan (failed) and audit (cancelled); publish waits for resize and
/// thumbnail, notify for publish and fetch, archive failed with scan. Returns the ids in
/// that order: fetch, resize, thumbnail, scan, audit, publish, notify, archive.
async fn media_workflow(b: &Bundle) -> Vec<i64> {
    let ids = crate::workflow::workflow(
        b,
        r#"[{"ref": "fetch", "kind": "fetch", "queue": "media",
             "payload": {"url": "https://example.com/cat.jpg"}},
            {"ref": "resize", "kind": "resize", "queue": "media", "after": ["fetch"]},
            {"ref": "thumbnail", "kind": "thumbnail", "queue": "media", "after": ["fetch"]},
            {"ref": "scan", "kind": "virus:scan", "queue": "media", "after": ["fetch"]},
            {"ref": "audit", "kind": "audit.log", "queue": "media", "after": ["fetch"]},
            {"ref": "publish", "kind": "publish", "queue": "web", "after": ["resize", "thumbnail"]},
            {"ref": "notify", "kind": "notify_subscribers", "queue": "web",
             "after": ["publish", "fetch"]},
            {"ref": "archive", "kind": "archive", "queue": "media", "after": ["scan"]}]"#,
    )
    .await;
    crate::workflow::complete(
        b,
        ids[0],
        Some(r#"{"bytes": 48213, "path": "/tmp/cat.jpg", "type": "image/jpeg"}"#),
    )
    .await;
    crate::workflow::complete(b, ids[1], Some(r#"{"width": 1024, "height": 768}"#)).await;
    crate::workflow::start(b, ids[2]).await;
    b.raw
        .execute(
            "UPDATE jobs SET status = 'failed', attempts = 5, finished_at = now(), \
             last_error = 'scanner unreachable' WHERE id = $1",
            &[&ids[3]],
        )
        .await
        .unwrap();
    b.raw
        .execute(
            "UPDATE jobs SET status = 'failed', finished_at = now(), last_error = 'cancelled' \
             WHERE id = $1",
            &[&ids[4]],
        )
        .await
        .unwrap();
    ids
}

async fn drive_workflow(browser: &Browser, base: &str, ids: &[i64]) -> anyhow::Result<()> {
    let dir = screenshot_dir();
    std::fs::create_dir_all(&dir)?;
    let publish = ids[5];
    browser.set_window_size(1280, 1800).await?;
    browser.goto(&format!("{base}/jobs/{publish}")).await?;
    let graph = browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("svg.wf"))
        .await?;
    let nodes = browser.find_all(Locator::Css("svg.wf a.node")).await?;
    if nodes.len() != ids.len() {
        bail!("{} nodes in the graph, not {}", nodes.len(), ids.len());
    }
    let edges = browser.find_all(Locator::Css("svg.wf path.edge")).await?;
    if edges.len() != 9 {
        bail!("{} edges in the graph, not 9", edges.len());
    }
    // The stylesheet colours each state, and rings the current job.
    for (class, fill) in [
        ("state-done", "rgb(223, 243, 228)"),
        ("state-running", "rgb(255, 243, 205)"),
        ("state-failed", "rgb(253, 226, 225)"),
        ("state-cancelled", "rgb(236, 238, 242)"),
        ("state-waiting", "rgb(244, 242, 254)"),
    ] {
        let got = browser
            .execute(
                "return getComputedStyle(document.querySelector(\
                 'svg.wf a.node.' + arguments[0] + ' rect.box')).fill;",
                vec![serde_json::json!(class)],
            )
            .await?;
        if got.as_str() != Some(fill) {
            bail!("a {class} node is filled {got}, not {fill}");
        }
    }
    browser
        .find(Locator::Css("svg.wf a.node.current rect.halo"))
        .await
        .context("the current job is ringed")?;
    // Every node is inside the drawing, and no two boxes overlap.
    let overlap = browser
        .execute(
            "const svg = document.querySelector('svg.wf').getBoundingClientRect();\
             const r = [...document.querySelectorAll('svg.wf rect.box')]\
                .map(e => e.getBoundingClientRect());\
             for (const a of r) {\
               if (a.left < svg.left || a.right > svg.right || a.top < svg.top \
                   || a.bottom > svg.bottom) return 'outside';\
               for (const b of r) {\
                 if (a !== b && a.left < b.right && b.left < a.right && a.top < b.bottom \
                     && b.top < a.bottom) return 'overlap';\
               }\
             }\
             return 'ok';",
            vec![],
        )
        .await?;
    if overlap.as_str() != Some("ok") {
        bail!("the graph's boxes: {overlap}");
    }
    std::fs::write(dir.join("job-workflow.png"), browser.screenshot().await?)?;
    std::fs::write(
        dir.join("job-workflow-graph.png"),
        graph.screenshot().await?,
    )?;

    // A node leads to its job.
    let fetch = ids[0];
    browser
        .find(Locator::Css(&format!("svg.wf a.node[data-id=\"{fetch}\"]")))
        .await?
        .click()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let h1 = wait_text(browser, "main h1").await?;
        if h1 == format!("Job {fetch}") {
            break;
        }
        if Instant::now() > deadline {
            bail!("after a click on job {fetch}'s node the page is {h1:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let output = wait_text(browser, "pre.output").await?;
    if !output.contains("\"type\": \"image/jpeg\"") {
        bail!("the fetch job's output: {output:?}");
    }
    std::fs::write(
        dir.join("job-workflow-root.png"),
        browser.screenshot().await?,
    )?;
    Ok(())
}

async fn drive(
    browser: &Browser,
    b: &Bundle,
    base: &str,
    polls: &AtomicUsize,
    failed: i64,
    queued: i64,
    done: i64,
) -> anyhow::Result<()> {
    let dir = screenshot_dir();
    std::fs::create_dir_all(&dir)?;
    browser.set_window_size(1280, 800).await?;

    // Every page loads, with its title and the nav bar.
    for (name, path, title) in [
        ("queues", "/".to_owned(), "Queues"),
        ("jobs", "/jobs".to_owned(), "Jobs"),
        ("jobs-failed", "/jobs?state=failed".to_owned(), "Jobs"),
        ("job", format!("/jobs/{failed}"), &*format!("Job {failed}")),
        ("health", "/health".to_owned(), "Database health"),
        (
            "bulk-confirm",
            "/bulk?action=retry&state=failed&queue=reports".to_owned(),
            "Retry jobs in bulk",
        ),
    ] {
        browser.goto(&format!("{base}{path}")).await?;
        let h1 = browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("main h1"))
            .await?;
        let text = h1.text().await?;
        if text != title {
            bail!("{path}: the title is {text:?}, not {title:?}");
        }
        browser.find(Locator::Css("header.bar nav")).await?;
        std::fs::write(dir.join(format!("{name}.png")), browser.screenshot().await?)?;
    }

    // Flow control: a limited queue whose concurrency limit was lowered below what runs, a
    // key at its per-key limit, a sequence with held jobs, and a held job's page.
    let held = flow_control(b).await?;
    browser.goto(&format!("{base}/")).await?;
    let flow = wait_text(browser, "table.flow").await?;
    for want in [
        "payments",
        "3 / 2",
        "above limit",
        "5 / s",
        "waiting for a slot",
    ] {
        if !flow.contains(want) {
            bail!("the flow control table lacks {want:?}: {flow:?}");
        }
    }
    let keys = wait_text(browser, "table.keys").await?;
    if !keys.contains("acct-1") {
        bail!("the keys table lacks acct-1: {keys:?}");
    }
    wait_text(browser, "table.sequences").await?;
    // Taller, so that the whole flow control section shows.
    browser.set_window_size(1280, 1000).await?;
    std::fs::write(dir.join("queues-limited.png"), browser.screenshot().await?)?;
    browser.set_window_size(1280, 800).await?;
    browser.goto(&format!("{base}/jobs/{held}")).await?;
    let state = wait_text(browser, "table.kv").await?;
    if !state.contains("waiting for its turn in sequence invoice-9") {
        bail!("the held job's page: {state:?}");
    }
    std::fs::write(dir.join("job-held.png"), browser.screenshot().await?)?;
    browser
        .goto(&format!("{base}/jobs?state=queued&queue=payments"))
        .await?;
    let list = wait_text(browser, "table.jobs").await?;
    if list.matches("held").count() != 2 {
        bail!("the queued list tags two held jobs: {list:?}");
    }
    std::fs::write(dir.join("jobs-held.png"), browser.screenshot().await?)?;

    // The queues page polls while visible...
    browser.goto(&format!("{base}/")).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = browser
            .find(Locator::Id("refresh-status"))
            .await?
            .text()
            .await?;
        if status.starts_with("updated") {
            break;
        }
        if Instant::now() > deadline {
            bail!("the page did not refresh itself (status {status:?})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // ...and stops while the tab is hidden.
    browser
        .execute(
            "Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});\
             document.dispatchEvent(new Event('visibilitychange'));",
            vec![],
        )
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = polls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(5_000)).await;
    let hidden = polls.load(Ordering::SeqCst) - before;
    if hidden != 0 {
        bail!("{hidden} refreshes while the tab was hidden");
    }
    browser
        .execute(
            "Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'visible'});\
             document.dispatchEvent(new Event('visibilitychange'));",
            vec![],
        )
        .await?;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    if polls.load(Ordering::SeqCst) == before {
        bail!("no refresh after the tab became visible again");
    }

    // Retry a failed job with its button.
    browser.goto(&format!("{base}/jobs/{failed}")).await?;
    click(browser, "action-retry").await?;
    let notice = wait_text(browser, ".notice").await?;
    if !notice.contains("Retried") {
        bail!("after retry: {notice:?}");
    }
    std::fs::write(dir.join("job-retried.png"), browser.screenshot().await?)?;
    expect_status(b, failed, Some("queued")).await?;

    // Cancel a queued one.
    browser.goto(&format!("{base}/jobs/{queued}")).await?;
    click(browser, "action-cancel").await?;
    wait_text(browser, ".notice").await?;
    expect_status(b, queued, Some("failed")).await?;

    // Delete a done one: the page asks first.
    browser.goto(&format!("{base}/jobs/{done}")).await?;
    click(browser, "action-delete").await?;
    let question = browser.get_alert_text().await?;
    if !question.contains("cannot be undone") {
        bail!("the delete question was {question:?}");
    }
    browser.accept_alert().await?;
    let notice = wait_text(browser, ".notice").await?;
    if !notice.contains("was deleted") {
        bail!("after delete: {notice:?}");
    }
    expect_status(b, done, None).await?;

    // Retry every failed job of a queue, through the confirm page.
    browser
        .goto(&format!("{base}/jobs?state=failed&queue=reports"))
        .await?;
    browser
        .find(Locator::Css("a.button.retry"))
        .await?
        .click()
        .await?;
    click(browser, "confirm-bulk").await?;
    let notice = wait_text(browser, ".notice").await?;
    if !notice.contains("Retried 3 of") {
        bail!("after the bulk retry: {notice:?}");
    }
    std::fs::write(dir.join("bulk-done.png"), browser.screenshot().await?)?;
    let left: i64 = b
        .raw
        .query_one(
            "SELECT count(*) FROM jobs WHERE queue = 'reports' AND status = 'failed'",
            &[],
        )
        .await?
        .get(0);
    if left != 0 {
        bail!("{left} failed jobs left in reports after the bulk retry");
    }

    // Pause a queue from the queues page.
    browser.goto(&format!("{base}/")).await?;
    click(browser, "pause-queue-webhooks").await?;
    wait_text(browser, "#resume-queue-webhooks").await?;
    std::fs::write(dir.join("queue-paused.png"), browser.screenshot().await?)?;
    let paused: Option<(bool, Option<String>)> = b
        .raw
        .query_opt(
            "SELECT paused, paused_by FROM queues WHERE name = 'webhooks'",
            &[],
        )
        .await?
        .map(|r| (r.get(0), r.get(1)));
    if paused != Some((true, Some("tester".to_owned()))) {
        bail!("after the pause click, the webhooks queue is {paused:?}");
    }
    Ok(())
}

/// A limited queue, `payments`: at most 2 at once (lowered below the 3 that run), 1 per
/// key, 5 starts a second; its last claim was bound by a slot; acct-1 is at its per-key
/// limit with ready jobs behind it, and sequence invoice-9 has two held jobs. Returns a held
/// job's id.
async fn flow_control(b: &Bundle) -> anyhow::Result<i64> {
    use skiplock::{NewJob, QueueLimits};
    b.client
        .set_queue_limits(
            "payments",
            QueueLimits::none()
                .concurrency(4)
                .per_key(1)
                .rate(5, Duration::from_secs(1)),
            Some("ops"),
        )
        .await?;
    for key in ["acct-1", "acct-2", "acct-3"] {
        b.raw
            .execute(
                "INSERT INTO jobs (queue, kind, payload, status, attempts, locked_until, key) \
                 VALUES ('payments', 'charge', '{}', 'running', 1, \
                         now() + interval '5 minutes', $1)",
                &[&key],
            )
            .await?;
    }
    for _ in 0..6 {
        let job = NewJob::from_json("charge", "{}")
            .queue("payments")
            .key("acct-1");
        b.client.enqueue(&job).await?;
    }
    let mut held = 0;
    for _ in 0..3 {
        let job = NewJob::from_json("invoice", "{}")
            .queue("payments")
            .sequence("invoice-9");
        held = b.client.enqueue(&job).await?.0;
    }
    // Lowered below what runs, as an operator would during an incident.
    b.client
        .set_queue_limits(
            "payments",
            QueueLimits::none()
                .concurrency(2)
                .per_key(1)
                .rate(5, Duration::from_secs(1)),
            Some("ops"),
        )
        .await?;
    b.raw
        .execute(
            "UPDATE queues SET limit_bound = 'slots' WHERE name = 'payments'",
            &[],
        )
        .await?;
    Ok(held)
}

/// Clicks the button with this id (found again if a refresh replaced it meanwhile).
async fn click(browser: &Browser, id: &str) -> anyhow::Result<()> {
    let mut last = None;
    for _ in 0..5 {
        match browser.find(Locator::Id(id)).await {
            Ok(e) => match e.click().await {
                Ok(()) => return Ok(()),
                Err(err) => last = Some(anyhow!(err)),
            },
            Err(err) => last = Some(anyhow!(err)),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last.unwrap_or_else(|| anyhow!("no #{id}"))).with_context(|| format!("click #{id}"))
}

async fn wait_text(browser: &Browser, css: &str) -> anyhow::Result<String> {
    let e = browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .with_context(|| format!("wait for {css}"))?;
    Ok(e.text().await?)
}

async fn expect_status(b: &Bundle, id: i64, want: Option<&str>) -> anyhow::Result<()> {
    let got = b.status(id).await;
    if got.as_deref() != want {
        bail!("job {id} is {got:?}, expected {want:?}");
    }
    Ok(())
}

/// The operator's pages in a browser: the workers page, a queue's page with its charts and
/// paused banner (and with no samples), the job list in every display state with ticked rows
/// that survive a refresh and a retry of them, a job's attempt history, Run now, and the
/// search box. Screenshots: `workers.png`, `queue-charts.png`, `queue-empty.png`,
/// `jobs-states.png`, `jobs-ticked.png`, `job-history.png`, `job-run-now.png`, `search.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_pages_in_a_headless_browser() {
    let Some((driver, chromium)) = browser_binaries() else {
        return;
    };
    let b = setup().await;
    let s = Session::start(b.router(), "operator", &driver, &chromium).await;
    let outcome = drive_operator(&s.browser, &b, &s.base).await;
    s.finish(outcome).await;
}

async fn drive_operator(browser: &Browser, b: &Bundle, base: &str) -> anyhow::Result<()> {
    let dir = screenshot_dir();
    std::fs::create_dir_all(&dir)?;
    browser.set_window_size(1280, 800).await?;
    let one =
        |sql: String| async move { b.raw.query_one(&sql, &[]).await.map(|r| r.get::<_, i64>(0)) };

    // Workers: two running, one sleeping, one gone.
    for (host, pid, poll_off, seen, stopped, queues) in [
        (
            "web-1",
            811,
            false,
            2,
            "NULL",
            r#"{"mail": 8, "webhooks": 4}"#,
        ),
        (
            "web-2",
            812,
            false,
            4,
            "NULL",
            r#"{"mail": 8, "webhooks": 4}"#,
        ),
        ("batch-1", 77, true, 1800, "NULL", r#"{"reports": 2}"#),
        (
            "web-0",
            640,
            false,
            5400,
            "now() - interval '90 minutes'",
            r#"{"mail": 8}"#,
        ),
    ] {
        b.raw
            .execute(
                &format!(
                    "INSERT INTO workers (host, pid, queues, concurrency, running, poll_off, \
                     heartbeat, version, started_at, last_seen, stopped_at) \
                     VALUES ($1, $2, $3::text::jsonb, 12, 5, $4, interval '10 seconds', '0.9.0', \
                     now() - interval '3 hours', now() - $5 * interval '1 second', {stopped})"
                ),
                &[&host, &pid, &queues, &poll_off, &f64::from(seen)],
            )
            .await?;
    }
    // Jobs in every display state, in queue mail.
    let scheduled = one(
        "INSERT INTO jobs (queue, kind, payload, run_at) VALUES ('mail', 'send_email', \
         '{\"to\": \"ada@example.com\"}', now() + interval '2 hours') RETURNING id"
            .to_owned(),
    )
    .await?;
    let failed = b.add("mail", "send_email", "failed").await;
    let failed2 = b.add("mail", "send_email", "failed").await;
    b.add("mail", "send_email", "queued").await;
    b.add("mail", "send_email", "running").await;
    b.add("mail", "send_email", "done").await;
    one(
        "INSERT INTO jobs (queue, kind, payload, attempts, last_error, run_at) VALUES ('mail', \
         'send_email', '{}', 2, 'SMTP 451: try again later', now() + interval '40 seconds') \
         RETURNING id"
            .to_owned(),
    )
    .await?;
    one(
        "INSERT INTO jobs (queue, kind, payload, status, finished_at, last_error) VALUES \
         ('mail', 'send_email', '{}', 'failed', now(), 'cancelled') RETURNING id"
            .to_owned(),
    )
    .await?;
    b.raw
        .execute(
            "UPDATE jobs SET attempts = 3, max_attempts = 3, \
             attempted_at = finished_at - interval '4.2 seconds', \
             errors = jsonb_build_array( \
               jsonb_build_object('attempt', 1, 'at', now() - interval '12 minutes', \
                 'error', 'SMTP 421: service not available, closing transmission channel', \
                 'ran_ms', 1204), \
               jsonb_build_object('attempt', 2, 'at', now() - interval '6 minutes', \
                 'error', 'connection reset by peer', 'ran_ms', 30021), \
               jsonb_build_object('attempt', 3, 'at', finished_at, \
                 'error', 'SMTP 550: mailbox unavailable', 'ran_ms', 4200)), \
             last_error = 'SMTP 550: mailbox unavailable' WHERE id = $1",
            &[&failed],
        )
        .await?;
    // The last hour of the mail queue, with a gap of missing samples.
    b.raw
        .execute(
            "INSERT INTO queue_stats (queue, minute, done, failed, available, scheduled, running) \
             SELECT 'mail', date_trunc('minute', now()) - m * interval '1 minute', \
                    (120 + 40 * sin(m / 6.0))::int8, (m % 7 = 0)::int * 3, \
                    (30 + 25 * cos(m / 9.0))::int8, 12, 8 + m % 3 \
             FROM generate_series(0, 59) m WHERE m NOT BETWEEN 24 AND 31",
            &[],
        )
        .await?;
    b.client.pause_queue("mail", Some("ops-oncall")).await?;

    browser.goto(&format!("{base}/workers")).await?;
    let live = wait_text(browser, "table.workers").await?;
    for want in ["web-1", "running", "batch-1", "sleeping", "poll off"] {
        if !live.contains(want) {
            bail!("the workers table lacks {want:?}: {live:?}");
        }
    }
    let gone = wait_text(browser, "table.workers.gone").await?;
    if !gone.contains("web-0") || !gone.contains("stopped") {
        bail!("the gone table: {gone:?}");
    }
    std::fs::write(dir.join("workers.png"), browser.screenshot().await?)?;

    browser.goto(&format!("{base}/queues/mail")).await?;
    let banner = wait_text(browser, "#paused-banner").await?;
    if !banner.contains("paused by ops-oncall") {
        bail!("the banner: {banner:?}");
    }
    let n = browser
        .find_all(Locator::Css("#chart-throughput polyline"))
        .await?
        .len();
    if n != 4 {
        bail!("{n} throughput lines, not 4 (2 series, each broken by the gap)");
    }
    browser.set_window_size(1280, 900).await?;
    std::fs::write(dir.join("queue-charts.png"), browser.screenshot().await?)?;
    browser.goto(&format!("{base}/queues/webhooks")).await?;
    wait_text(browser, "#no-samples").await?;
    std::fs::write(dir.join("queue-empty.png"), browser.screenshot().await?)?;
    browser.set_window_size(1280, 800).await?;

    // The list: every display state, ticks that survive a refresh, and a retry of them.
    browser.goto(&format!("{base}/jobs?queue=mail")).await?;
    let list = wait_text(browser, "table.jobs").await?;
    for want in [
        "available",
        "scheduled",
        "retrying",
        "running",
        "done",
        "failed",
        "cancelled",
    ] {
        if !list.contains(want) {
            bail!("the list lacks {want:?}: {list:?}");
        }
    }
    wait_text(browser, "#paused-banner").await?;
    std::fs::write(dir.join("jobs-states.png"), browser.screenshot().await?)?;
    for id in [failed, failed2] {
        browser
            .find(Locator::Css(&format!("input[name=id][value=\"{id}\"]")))
            .await?
            .click()
            .await?;
    }
    // Wait for a refresh to replace the table, then look at the ticks again.
    browser
        .execute(
            "document.getElementById('refresh-status').textContent = '';",
            vec![],
        )
        .await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !wait_text(browser, "#refresh-status")
        .await?
        .starts_with("updated")
    {
        if Instant::now() > deadline {
            bail!("no refresh");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ticked = browser
        .execute(
            "return [...document.querySelectorAll('input[name=id]:checked')].map(e => +e.value);",
            vec![],
        )
        .await?;
    if ticked != serde_json::json!([failed2, failed]) {
        bail!("after a refresh the ticked jobs are {ticked}");
    }
    std::fs::write(dir.join("jobs-ticked.png"), browser.screenshot().await?)?;
    click(browser, "selected-retry").await?;
    let notice = wait_text(browser, ".notice.ok").await?;
    if !notice.contains("Retried 2 of the 2 ticked jobs") {
        bail!("after the retry of ticked jobs: {notice:?}");
    }
    expect_status(b, failed, Some("queued")).await?;
    expect_status(b, failed2, Some("queued")).await?;

    // Its attempt history (the job is retrying now).
    browser.goto(&format!("{base}/jobs/{failed}")).await?;
    let history = wait_text(browser, "table.history").await?;
    if !history.contains("connection reset by peer") || !history.contains("30.0 s") {
        bail!("the history: {history:?}");
    }
    browser.set_window_size(1280, 1100).await?;
    std::fs::write(dir.join("job-history.png"), browser.screenshot().await?)?;
    browser.set_window_size(1280, 800).await?;

    // Run now.
    browser.goto(&format!("{base}/jobs/{scheduled}")).await?;
    click(browser, "action-run").await?;
    let notice = wait_text(browser, ".notice").await?;
    if !notice.contains("Due now") {
        bail!("after Run now: {notice:?}");
    }
    std::fs::write(dir.join("job-run-now.png"), browser.screenshot().await?)?;

    // The search box in the bar.
    let input = browser.find(Locator::Css("form.search input")).await?;
    input.send_keys("ADA@example\n").await?;
    let summary = wait_text(browser, "#search-summary").await?;
    if !summary.contains("1 match") || !summary.contains("searched every job") {
        bail!("the search: {summary:?}");
    }
    std::fs::write(dir.join("search.png"), browser.screenshot().await?)?;
    Ok(())
}
