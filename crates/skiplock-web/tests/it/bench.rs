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
    // Flow control: q1 limited, with a sequence of held jobs.
    b.client
        .set_queue_limits(
            "q1",
            skiplock::QueueLimits::none().concurrency(4).per_key(1),
            None,
        )
        .await
        .unwrap();
    for _ in 0..5 {
        b.client
            .enqueue(
                &skiplock::NewJob::from_json("kind1", "{}")
                    .queue("q1")
                    .sequence("s"),
            )
            .await
            .unwrap();
    }
    b.raw.batch_execute("VACUUM ANALYZE jobs").await.unwrap();
    let fill = started.elapsed();
    let middle = n / 2;
    let r = b.router();
    let pages = [
        "/".to_owned(),
        "/jobs".to_owned(),
        "/jobs?state=queued".to_owned(),
        "/jobs?state=held".to_owned(),
        "/jobs?state=failed".to_owned(),
        "/jobs?state=done&queue=q2&kind=kind3".to_owned(),
        format!("/jobs?before={middle}"),
        "/jobs?kind=nosuchkind".to_owned(),
        format!("/jobs/{middle}"),
        "/health".to_owned(),
        "/bulk?action=retry&state=failed".to_owned(),
    ];
    println!(
        "\n{n} finished jobs (+210 live) filled and analysed in {:.1} s\n",
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

/// The queues page on a table of ten million finished jobs (three large queues, and one of
/// 50 done and 5 failed), with the statistics taken while the table was empty, then after
/// `VACUUM ANALYZE`. Ignored by default; run it with
///
/// ```text
/// cargo test --release -p skiplock-web --test it bench_queues -- --ignored --nocapture
/// ```
///
/// `SKIPLOCK_WEB_BENCH_JOBS` changes the number of finished jobs (default 10,000,000). With
/// `SKIPLOCK_WEB_BENCH_URL` and `SKIPLOCK_WEB_BENCH_SCHEMA` it reads a schema filled
/// beforehand (by this same statement) instead of filling a fresh one, which takes minutes.
#[tokio::test]
#[ignore = "a benchmark: fills the table with ten million jobs"]
async fn bench_queues_page_on_ten_million_finished_jobs() {
    let n: i64 = std::env::var("SKIPLOCK_WEB_BENCH_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let existing = std::env::var("SKIPLOCK_WEB_BENCH_URL")
        .ok()
        .zip(std::env::var("SKIPLOCK_WEB_BENCH_SCHEMA").ok());
    let _db;
    let (client, raw) = match existing {
        Some((url, schema)) => {
            let client = skiplock::Client::builder(&url)
                .schema(&schema)
                .pool_size(4)
                .build()
                .unwrap();
            client.migrate().await.unwrap();
            let (raw, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            raw.batch_execute(&format!("SET search_path TO \"{schema}\""))
                .await
                .unwrap();
            (client, raw)
        }
        None => {
            let b = setup().await;
            let started = Instant::now();
            // Statistics of the empty table, then the fill: the plans must not depend on
            // an ANALYZE after it.
            b.raw
                .batch_execute("ALTER TABLE jobs SET (autovacuum_enabled = false); ANALYZE jobs")
                .await
                .unwrap();
            b.raw
                .execute(
                    "INSERT INTO jobs (queue, kind, payload, status, attempts, finished_at, \
                                       last_error, created_at, run_at) \
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
            b.raw
                .batch_execute(
                    "INSERT INTO jobs (queue, kind, payload, status, attempts, finished_at) \
                     SELECT 'small', 'k', '{}', \
                            CASE WHEN i <= 5 THEN 'failed' ELSE 'done' END, 1, now() \
                     FROM generate_series(1, 55) i",
                )
                .await
                .unwrap();
            println!("\nfilled in {:.1} s", started.elapsed().as_secs_f64());
            let out = (b.client.clone(), b.raw);
            _db = b.db;
            out
        }
    };
    let r = skiplock_web::Dashboard::new(client, |_: &axum::http::request::Parts| {
        skiplock_web::Access::full("bench")
    })
    .router();
    for state in ["statistics of the empty table", "after VACUUM ANALYZE"] {
        if state.starts_with("after") {
            raw.batch_execute("VACUUM ANALYZE jobs").await.unwrap();
        }
        let t = Instant::now();
        let first = get(&r, "/").await;
        let first_ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);
        assert!(first.body.contains(">50<") && first.body.contains(">5<"));
        let mut times: Vec<Duration> = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let page = get(&r, "/").await;
            times.push(t.elapsed());
            assert_eq!(page.status, StatusCode::OK);
        }
        times.sort();
        println!(
            "queues page, {state}: first {first_ms:.1} ms, median {:.1} ms, max {:.1} ms",
            times[times.len() / 2].as_secs_f64() * 1e3,
            times[times.len() - 1].as_secs_f64() * 1e3
        );
    }
}
