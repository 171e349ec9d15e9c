//! `--metrics-addr`: the real binary serves Prometheus metrics while it works, and its
//! counters agree with the database.
#![allow(clippy::unwrap_used)]

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use skiplock::NewJob;
use skiplock_testdb::TestDb;

fn cmd(db: &TestDb, args: &[&str]) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin!("skiplock"));
    c.env_remove("DATABASE_URL").env_remove("SKIPLOCK_HOME");
    c.args(["--database-url", db.url(), "--schema", db.schema()]);
    c.args(args);
    c
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// One scrape: the body of `GET /metrics`, or `None` while nothing listens yet.
fn scrape(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{head}"
    );
    Some(body.to_owned())
}

/// The sum of the samples of `name` whose labels include every pair of `labels`; `None` if
/// there is none.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, v)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
        if metric != name {
            continue;
        }
        if labels
            .iter()
            .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        {
            *found.get_or_insert(0.0) += v.parse::<f64>().unwrap();
        }
    }
    found
}

async fn count(db: &TestDb, filter: &str) -> i64 {
    let c = db.connect().await.unwrap();
    let q = format!(
        "SELECT count(*) FROM \"{}\".jobs WHERE {filter}",
        db.schema()
    );
    c.query_one(&q, &[]).await.unwrap().get(0)
}

fn stop(mut child: Child) -> String {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Scrapes until `ready` holds for the text, for up to 30 s.
#[track_caller]
fn scrape_until(addr: SocketAddr, what: &str, ready: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(t) = scrape(addr) {
            if ready(&t) {
                return t;
            }
            last = t;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: never seen in\n{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_serves_metrics_that_match_the_database() {
    let db = TestDb::new().await;
    let client = skiplock::Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let mut jobs = Vec::new();
    for _ in 0..20 {
        jobs.push(NewJob::from_json("noop", "{}"));
    }
    for _ in 0..4 {
        // Long enough to be seen running and to get a heartbeat (lease 3 s: a beat a second).
        jobs.push(NewJob::from_json("sleep", r#"{"ms":1500}"#));
    }
    for _ in 0..3 {
        jobs.push(NewJob::from_json("fail", r#"{"times":9}"#).max_attempts(1));
    }
    for _ in 0..5 {
        jobs.push(NewJob::from_json("noop", "{}").queue("other"));
    }
    client.enqueue_many(&jobs).await.unwrap();

    let addr = free_addr();
    let child = cmd(
        &db,
        &[
            "work",
            "--queue",
            "default=4",
            "--queue",
            "other=2",
            "--lease",
            "3s",
            "--metrics-addr",
            &addr.to_string(),
            "--metrics-gauges-interval",
            "200ms",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();

    // While the sleep jobs run: claims counted, the gauges show running jobs, LISTEN up.
    let during = scrape_until(addr, "running jobs in the gauges", |t| {
        value(
            t,
            "skiplock_jobs",
            &[("queue", "default"), ("state", "running")],
        )
        .is_some_and(|n| n > 0.0)
    });
    assert!(
        value(
            &during,
            "skiplock_jobs_claimed_total",
            &[("queue", "default")]
        )
        .unwrap()
            > 0.0
    );
    let t = scrape_until(addr, "the LISTEN connection", |t| {
        value(t, "skiplock_listener_connected", &[]) == Some(1.0)
    });
    assert!(
        t.contains("# TYPE skiplock_jobs_finished_total counter"),
        "{t}"
    );

    // Everything finished: wait until the database says so, then until a gauge round after.
    let start = Instant::now();
    while count(&db, "status IN ('queued', 'running')").await > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "jobs never finished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (done, failed) = (
        count(&db, "status = 'done'").await,
        count(&db, "status = 'failed'").await,
    );
    assert_eq!((done, failed), (29, 3));
    let after = scrape_until(addr, "the gauges after the work", |t| {
        value(t, "skiplock_jobs", &[("state", "done")]) == Some(done as f64)
            && value(t, "skiplock_jobs", &[("state", "running")]) == Some(0.0)
    });
    let fin = |labels: &[(&str, &str)]| value(&after, "skiplock_jobs_finished_total", labels);
    assert_eq!(
        fin(&[("outcome", "complete"), ("state", "done")]),
        Some(done as f64),
        "{after}"
    );
    assert_eq!(fin(&[("state", "failed")]), Some(failed as f64), "{after}");
    assert_eq!(
        fin(&[
            ("queue", "default"),
            ("kind", "fail"),
            ("outcome", "retry"),
            ("state", "failed")
        ]),
        Some(3.0)
    );
    assert_eq!(
        fin(&[
            ("queue", "other"),
            ("kind", "noop"),
            ("outcome", "complete")
        ]),
        Some(5.0)
    );
    assert_eq!(fin(&[("kind", "sleep")]), Some(4.0));
    assert_eq!(fin(&[("outcome", "lost")]), None);
    assert_eq!(
        value(&after, "skiplock_jobs_claimed_total", &[]),
        Some(32.0)
    );
    // Histograms, with their series.
    assert_eq!(
        value(&after, "skiplock_job_run_seconds_count", &[]),
        Some(32.0)
    );
    assert_eq!(
        value(
            &after,
            "skiplock_job_run_seconds_bucket",
            &[("kind", "sleep"), ("le", "1")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(&after, "skiplock_job_queue_wait_seconds_count", &[]),
        Some(32.0)
    );
    assert_eq!(
        value(&after, "skiplock_claim_batch_size_sum", &[]),
        Some(32.0)
    );
    assert!(
        value(
            &after,
            "skiplock_claim_duration_seconds_count",
            &[("queue", "other")]
        )
        .unwrap()
            >= 1.0
    );
    assert!(value(&after, "skiplock_heartbeat_rounds_total", &[]).unwrap() >= 1.0);
    assert!(value(&after, "skiplock_heartbeat_renewed_total", &[]).unwrap() >= 1.0);
    // The database gauges.
    assert_eq!(value(&after, "skiplock_jobs_ready", &[]), Some(0.0));
    assert_eq!(
        value(
            &after,
            "skiplock_jobs",
            &[("queue", "other"), ("state", "done")]
        ),
        Some(5.0)
    );
    assert_eq!(
        value(
            &after,
            "skiplock_queue_oldest_ready_age_seconds",
            &[("queue", "default")]
        ),
        Some(0.0)
    );
    assert!(value(&after, "skiplock_jobs_table_dead_tuples", &[]).is_some());
    assert!(value(&after, "skiplock_oldest_xmin_transaction_age_seconds", &[]).is_some());
    assert!(value(&after, "skiplock_gauges_updated_timestamp_seconds", &[]).unwrap() > 1.0e9);

    let stderr = stop(child);
    assert!(
        stderr.contains(&format!("metrics on http://{addr}/metrics")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_publishes_the_database_gauges() {
    let db = TestDb::new().await;
    let client = skiplock::Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    client
        .enqueue_many(&[
            NewJob::from_json("noop", "{}").queue("mail"),
            NewJob::from_json("noop", "{}").queue("mail"),
        ])
        .await
        .unwrap();
    let (web, metrics) = (free_addr(), free_addr());
    let child = cmd(
        &db,
        &[
            "serve",
            "--addr",
            &web.to_string(),
            "--metrics-addr",
            &metrics.to_string(),
            "--metrics-gauges-interval",
            "200ms",
        ],
    )
    .env_remove("SKIPLOCK_WEB_USER")
    .env_remove("SKIPLOCK_WEB_PASSWORD")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let t = scrape_until(metrics, "the queue's gauges", |t| {
        value(t, "skiplock_jobs_ready", &[("queue", "mail")]) == Some(2.0)
    });
    assert_eq!(
        value(
            &t,
            "skiplock_jobs",
            &[("queue", "mail"), ("state", "queued")]
        ),
        Some(2.0)
    );
    assert!(
        value(
            &t,
            "skiplock_queue_oldest_ready_age_seconds",
            &[("queue", "mail")]
        )
        .unwrap()
            >= 0.0
    );
    stop(child);
}

/// `work --max-claim-batch 7 --max-claim-batch-waited 7`: no claim takes more than 7 jobs,
/// though the queue has 50 slots (every claim falls in the batch-size histogram's bucket of
/// 10 and under). The queue's four claims in flight go through the backlog in turn, so some
/// wait for their turn: `--max-claim-batch-waited` bounds those (by default they may take
/// four times the batch). Negative control (run by hand): without the options the first
/// claim takes 25, in the bucket of 25, and the test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_max_claim_batch_bounds_every_claim() {
    let db = TestDb::new().await;
    let client = skiplock::Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let jobs: Vec<NewJob> = (0..60).map(|_| NewJob::from_json("noop", "{}")).collect();
    client.enqueue_many(&jobs).await.unwrap();
    let addr = free_addr();
    let child = cmd(
        &db,
        &[
            "work",
            "--queue",
            "default=50",
            "--max-claim-batch",
            "7",
            "--max-claim-batch-waited",
            "7",
            "--metrics-addr",
            &addr.to_string(),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let t = scrape_until(addr, "60 jobs claimed, in the histogram", |t| {
        value(t, "skiplock_jobs_claimed_total", &[]) == Some(60.0)
            && value(t, "skiplock_claim_batch_size_sum", &[]) == Some(60.0)
    });
    let _ = stop(child);
    let claims = value(&t, "skiplock_claim_batch_size_count", &[]).unwrap();
    let small = value(&t, "skiplock_claim_batch_size_bucket", &[("le", "10")]).unwrap();
    assert!(
        claims >= 9.0,
        "60 jobs in claims of at most 7: {claims} claims"
    );
    assert_eq!(small, claims, "every claim took 10 jobs or fewer");
    assert_eq!(count(&db, "status = 'done'").await, 60);
}
