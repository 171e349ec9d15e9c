//! How long each page takes on a table that keeps a million finished jobs. Ignored by default
//! (it fills the table first); run it with
//!
//! ```text
//! cargo test --release -p skiplock-web --test it bench -- --ignored --nocapture
//! ```
//!
//! `SKIPLOCK_WEB_BENCH_JOBS` changes the number of finished jobs (default 1,000,000).

use std::time::{Duration, Instant};

use axum::http::StatusCode;

use crate::support::{get, setup};

#[tokio::test]
#[ignore = "a benchmark: fills the table with a million jobs"]
async fn bench_pages_on_a_million_finished_jobs() {
    let n: i64 = std::env::var("SKIPLOCK_WEB_BENCH_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let b = setup().await;
    let started = Instant::now();
    // Finished jobs over three queues, 1 in 100 failed, finished over the last day; then a
    // small live backlog, as a busy queue that keeps its history looks.
    b.raw
        .execute(
            "INSERT INTO jobs (queue, kind, payload, status, attempts, finished_at, last_error, \
                               created_at, run_at) \
             SELECT 'q' || (i % 3), 'kind' || (i % 7), jsonb_build_object('i', i), \
                    CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'done' END, 1, \
                    now() - (($1::int8 - i) * interval '86400 seconds') / $1::int8, \
                    CASE WHEN i % 100 = 0 THEN 'boom' END, \
                    now() - interval '1 day', now() - interval '1 day' \
             FROM generate_series(1, $1::int8) i",
            &[&n],
        )
        .await
        .unwrap();
    b.add_many(200, "q1", "kind1", "queued").await;
    for _ in 0..5 {
        b.add("q2", "kind2", "running").await;
    }
    b.raw.batch_execute("VACUUM ANALYZE jobs").await.unwrap();
    let fill = started.elapsed();
    let middle = n / 2;
    let r = b.router();
    let pages = [
        "/".to_owned(),
        "/jobs".to_owned(),
        "/jobs?state=queued".to_owned(),
        "/jobs?state=failed".to_owned(),
        "/jobs?state=done&queue=q2&kind=kind3".to_owned(),
        format!("/jobs?before={middle}"),
        "/jobs?kind=nosuchkind".to_owned(),
        format!("/jobs/{middle}"),
        "/health".to_owned(),
        "/bulk?action=retry&state=failed".to_owned(),
    ];
    println!(
        "\n{n} finished jobs (+205 live) filled and analysed in {:.1} s\n",
        fill.as_secs_f64()
    );
    println!(
        "{:<42} {:>10} {:>10} {:>10}",
        "page", "first ms", "median ms", "max ms"
    );
    for p in &pages {
        let t = Instant::now();
        let first = get(&r, p).await;
        let first_ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(first.status, StatusCode::OK, "{p}: {}", first.body);
        let mut times: Vec<Duration> = Vec::new();
        for _ in 0..7 {
            let t = Instant::now();
            let page = get(&r, p).await;
            times.push(t.elapsed());
            assert_eq!(page.status, StatusCode::OK, "{p}");
        }
        times.sort();
        println!(
            "{:<42} {:>10.1} {:>10.1} {:>10.1}",
            p,
            first_ms,
            times[times.len() / 2].as_secs_f64() * 1e3,
            times[times.len() - 1].as_secs_f64() * 1e3
        );
    }
}
