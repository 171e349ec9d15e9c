//! Bad input gets a clear one-line error before any SQL runs, and changes nothing.

use std::time::Duration;

use skiplock::{Client, Error, NewJob};

use crate::support::setup;

/// An address where nothing listens: if a call got as far as connecting, it would fail
/// with a connection error instead of the validation error asserted.
const NOWHERE: &str = "postgres://nobody@127.0.0.1:1/none?connect_timeout=1";

fn assert_invalid(err: Error, needle: &str) {
    let text = err.to_string();
    assert!(err.is_invalid_input(), "not a validation error: {text}");
    assert!(
        text.contains(needle),
        "{text:?} does not mention {needle:?}"
    );
    assert!(!text.contains('\n'), "not one line: {text:?}");
}

#[test]
fn bad_schema_names_are_refused_before_connecting() {
    for bad in [
        "",
        "evil\"; DROP SCHEMA public CASCADE;--",
        "a$$b",
        "o'brien",
        "x;y",
        "with space",
        "tab\tname",
        "pg_toast",
        &"s".repeat(59),
    ] {
        let err = Client::builder(NOWHERE).schema(bad).build().unwrap_err();
        assert_invalid(err, "schema name");
    }
    assert_invalid(
        Client::builder("not a url").build().unwrap_err(),
        "database URL",
    );
}

#[tokio::test]
async fn bad_jobs_are_refused_and_nothing_changes() {
    let b = setup().await;
    let cases: Vec<(NewJob, &str)> = vec![
        (NewJob::new("k", &1).queue(""), "queue name"),
        (
            NewJob::new("k", &1).queue("q'; DROP TABLE jobs;--"),
            "queue name",
        ),
        (
            NewJob::new("k", &1).queue("\"; SELECT pg_sleep(10);--"),
            "queue name",
        ),
        (NewJob::new("k", &1).queue("q".repeat(10_000)), "queue name"),
        (NewJob::new("", &1), "job kind"),
        (NewJob::new("k k", &1), "job kind"),
        (NewJob::new("k", &1).max_attempts(0), "max_attempts"),
        (NewJob::new("k", &1).max_attempts(-1), "max_attempts"),
        (NewJob::new("k", &1).max_attempts(i32::MAX), "max_attempts"),
        (NewJob::new("k", &"nul \u{0}"), "\\u0000"),
        (NewJob::from_json("k", r#"{"a":"\u0000"}"#), "\\u0000"),
        (NewJob::from_json("k", r#"{"a":"\ud800"}"#), "surrogate"),
        (NewJob::from_json("k", "{not json"), "not valid JSON"),
        (NewJob::from_json("k", "{} {}"), "not valid JSON"),
        (NewJob::from_json("k", "NaN"), "not valid JSON"),
        (
            NewJob::from_json("k", format!("{}{}", "[".repeat(10_000), "]".repeat(10_000))),
            "nested",
        ),
        (NewJob::new("k", &"x".repeat(2 * 1024 * 1024)), "limit"),
        (NewJob::new("k", &1).delay(Duration::MAX), "delay"),
        (
            NewJob::new("k", &1).run_at(std::time::UNIX_EPOCH - Duration::from_secs(1)),
            "run_at",
        ),
        (
            NewJob::new("k", &1)
                .run_at(std::time::UNIX_EPOCH + Duration::from_secs(300_000_000_000)),
            "run_at",
        ),
    ];
    for (job, needle) in &cases {
        let err = b.client.enqueue(job).await.unwrap_err();
        assert_invalid(err, needle);
        let mut conn = b.db.connect().await.unwrap();
        let tx = conn.transaction().await.unwrap();
        assert_invalid(b.client.enqueue_tx(&tx, job).await.unwrap_err(), needle);
    }
    // A batch with one bad job among valid ones is refused whole, naming the bad one.
    let mut batch: Vec<NewJob> = (0..999).map(|i| NewJob::new("k", &i)).collect();
    batch.insert(500, NewJob::new("k", &1).queue("bad queue"));
    match b.client.enqueue_many(&batch).await.unwrap_err() {
        Error::InvalidBatchItem { index, source } => {
            assert_eq!(index, 500);
            assert!(source.to_string().contains("queue name"));
        }
        other => panic!("{other}"),
    }
    assert_eq!(b.count("true").await, 0, "nothing was enqueued");
    // The schema is intact.
    let tables: i64 = b
        .raw
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&b.db.schema()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        tables, 11,
        "jobs, schema_migrations, jobs_archive, maintenance_locks, queues, schedules, queue_starts, job_deps, workers, queue_stats, done_deleted"
    );
}

#[tokio::test]
async fn the_payload_cap_is_configurable_and_exact() {
    let b = setup().await;
    let client = Client::builder(b.db.url())
        .schema(b.db.schema())
        .max_payload_bytes(100)
        .build()
        .unwrap();
    let at_cap = format!("\"{}\"", "é".repeat(49)); // 2 + 98 bytes
    assert_eq!(at_cap.len(), 100);
    let id = client
        .enqueue(&NewJob::from_json("k", at_cap.clone()))
        .await
        .unwrap();
    assert_eq!(client.get(id).await.unwrap().unwrap().payload, at_cap);
    let over = format!("\"{}x\"", "é".repeat(49));
    assert_invalid(
        client
            .enqueue(&NewJob::from_json("k", over))
            .await
            .unwrap_err(),
        "limit",
    );
}

#[tokio::test]
async fn bad_claim_arguments_are_refused() {
    let b = setup().await;
    b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    assert_invalid(
        b.client
            .claim("bad queue", 1, Duration::from_secs(60))
            .await
            .unwrap_err(),
        "queue name",
    );
    for lease in [
        Duration::ZERO,
        Duration::from_millis(999),
        Duration::from_secs(100 * 86400),
    ] {
        assert_invalid(
            b.client.claim("default", 1, lease).await.unwrap_err(),
            "lease",
        );
    }
    assert!(b
        .client
        .claim("default", 0, Duration::from_secs(60))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(b.count("status = 'queued'").await, 1, "nothing was claimed");
}

/// An unreachable database is an error, never a panic.
#[tokio::test]
async fn an_unreachable_database_is_a_clear_error() {
    let client = Client::connect(NOWHERE).unwrap();
    let err = client.enqueue(&NewJob::new("k", &1)).await.unwrap_err();
    assert!(matches!(err, Error::Pool { .. }), "{err}");
    assert!(err.to_string().contains("enqueue a job"));
}

/// `Client::queue_known` (what `skiplock queue pause` asks before pausing): a queue is known
/// when a `queues` row or a job in any state names it, read by index probes only, so
/// that the answer costs the same on a table of finished history; a bad name is refused
/// before any SQL.
#[tokio::test]
async fn a_queue_is_known_by_its_queues_row_or_a_job_through_index_probes() {
    let b = setup().await;
    assert!(!b.client.queue_known("mail").await.unwrap());
    assert_invalid(
        b.client.queue_known("bad queue").await.unwrap_err(),
        "queue name",
    );
    b.client
        .enqueue(&NewJob::new("k", &1).queue("mail"))
        .await
        .unwrap();
    assert!(b.client.queue_known("mail").await.unwrap());
    let claimed = b
        .client
        .claim("mail", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(b.client.queue_known("mail").await.unwrap(), "running");
    b.client.pause_queue("paused-only", None).await.unwrap();
    assert!(b.client.queue_known("paused-only").await.unwrap());
    assert!(!b.client.queue_known("typo").await.unwrap());

    // 20,000 finished rows of another queue, analyzed: the probe scans no table, and a queue
    // known from its history alone is known.
    b.raw
        .batch_execute(
            "INSERT INTO jobs (queue, kind, payload, status, attempts, finished_at) \
             SELECT 'history', 'k', '{}'::jsonb, 'done', 1, now() \
             FROM generate_series(1, 20000); ANALYZE jobs",
        )
        .await
        .unwrap();
    let sql = b
        .client
        .statement(skiplock::Statement::QueueKnown)
        .to_owned();
    let rows = b
        .raw
        .query(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), &[&"typo"])
        .await
        .unwrap();
    let plan: serde_json::Value = rows[0].get(0);
    let text = plan.to_string();
    assert!(!text.contains("Seq Scan"), "{plan:#}");
    assert!(
        (text.contains("jobs_ready_idx") || text.contains("jobs_key_ready_idx"))
            && text.contains("jobs_held_queue_idx")
            && text.contains("jobs_lease_idx")
            && text.contains("jobs_leaseless_idx")
            && text.contains("jobs_finished_idx"),
        "{plan:#}"
    );
    assert!(b.client.queue_known("history").await.unwrap());
    // A running row without a lease (only a hand-written UPDATE makes one) is a job too.
    b.raw
        .batch_execute(
            "INSERT INTO jobs (queue, kind, payload, status, attempts) \
             VALUES ('bare', 'k', '{}'::jsonb, 'running', 1)",
        )
        .await
        .unwrap();
    assert!(b.client.queue_known("bare").await.unwrap());
}

/// A refused worker setting or payload says what to do in plain words, naming no Rust item
/// (`None`, `ClientBuilder::…`), so that it reads right from the command too.
#[tokio::test]
async fn refusals_name_no_rust_item() {
    let client = Client::connect(NOWHERE).unwrap();
    let registry = skiplock::Registry::new;
    let worker = |b: skiplock::WorkerBuilder| b.queue("default", 1).build().err().unwrap();
    for err in [
        worker(skiplock::Worker::builder(client.clone(), registry()).vacuum_threshold(Some(0))),
        worker(
            skiplock::Worker::builder(client.clone(), registry())
                .poll_interval(Some(Duration::ZERO)),
        ),
        worker(skiplock::Worker::builder(client.clone(), registry()).claims_in_flight(0)),
        client
            .enqueue(&NewJob::new("k", &"x".repeat(2 * 1024 * 1024)))
            .await
            .unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(err.is_invalid_input(), "{text}");
        assert!(
            !text.contains("None") && !text.contains("::") && !text.contains("Some("),
            "{text}"
        );
        assert!(
            text.contains("unset") || text.contains("reference"),
            "{text}"
        );
    }
}

/// Every checked name column of every table accepts exactly the names its documented rule
/// allows (1 to 128 bytes from `[A-Za-z0-9]` and the column's few extra characters), and the
/// same names as the `ltrim` form the checks had before migration 17: each candidate is
/// inserted into the real table (and rolled back), and a refusal must be the column's
/// check, nothing else.
#[tokio::test]
async fn name_checks_accept_exactly_the_documented_names() {
    let b = setup().await;
    const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut candidates: Vec<String> = Vec::new();
    for c in (1u8..=127).map(char::from) {
        candidates.push(c.to_string());
        candidates.push(format!("a{c}z"));
        candidates.push(format!("{c}{c}"));
    }
    for s in [
        "",
        "é",
        "aé",
        "日本",
        "a\u{a0}b",
        "ａ",
        "a-",
        "-a",
        ":a",
        "q.v2:x@y/z",
    ] {
        candidates.push(s.to_string());
    }
    candidates.push("a".repeat(128));
    candidates.push("a".repeat(129));
    candidates.push("é".repeat(64));
    // (table, column, extra characters, the insert, the constraint)
    let columns: [(&str, &str, &str, &str); 8] = [
        (
            "_.-",
            "INSERT INTO jobs (queue, payload) VALUES ($1, '{}')",
            "jobs_queue_check",
            "jobs.queue",
        ),
        (
            "_.:-",
            "INSERT INTO jobs (kind, payload) VALUES ($1, '{}')",
            "jobs_kind_check",
            "jobs.kind",
        ),
        (
            "_.:@/-",
            "INSERT INTO jobs (key, payload) VALUES ($1, '{}')",
            "jobs_key_check",
            "jobs.key",
        ),
        (
            "_.:@/-",
            "INSERT INTO jobs (sequence, payload) VALUES ($1, '{}')",
            "jobs_sequence_check",
            "jobs.sequence",
        ),
        (
            "_.-",
            "INSERT INTO queues (name) VALUES ($1)",
            "queues_name_check",
            "queues.name",
        ),
        (
            "_.-",
            "INSERT INTO schedules (name, cron, queue, kind) VALUES ($1, '* * * * *', 'q', 'k')",
            "schedules_name_check",
            "schedules.name",
        ),
        (
            "_.-",
            "INSERT INTO schedules (name, cron, queue, kind) VALUES ('s', '* * * * *', $1, 'k')",
            "schedules_queue_check",
            "schedules.queue",
        ),
        (
            "_.:-",
            "INSERT INTO schedules (name, cron, queue, kind) VALUES ('s', '* * * * *', 'q', $1)",
            "schedules_kind_check",
            "schedules.kind",
        ),
    ];
    for (extra, insert, constraint, column) in columns {
        let set = format!("{ALNUM}{extra}");
        for name in &candidates {
            let rule =
                !name.is_empty() && name.len() <= 128 && name.chars().all(|c| set.contains(c));
            let old: bool = b
                .raw
                .query_one(
                    "SELECT octet_length($1) BETWEEN 1 AND 128 AND ltrim($1, $2) = ''",
                    &[name, &set],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(
                old, rule,
                "{column}: the ltrim form and the rule differ on {name:?}"
            );
            b.raw.batch_execute("BEGIN").await.unwrap();
            let accepted = match b.raw.execute(insert, &[name]).await {
                Ok(_) => true,
                Err(e) => {
                    let db = e.as_db_error().expect("a database error");
                    assert_eq!(
                        (db.code(), db.constraint()),
                        (
                            &tokio_postgres::error::SqlState::CHECK_VIOLATION,
                            Some(constraint)
                        ),
                        "{column}: {name:?} refused by something else: {db}"
                    );
                    false
                }
            };
            b.raw.batch_execute("ROLLBACK").await.unwrap();
            assert_eq!(
                accepted, rule,
                "{column}: the table and the rule differ on {name:?}"
            );
        }
    }
    // An UPDATE that sets a job's name is checked too, whichever name it sets.
    b.raw
        .execute("INSERT INTO jobs (queue, payload) VALUES ('q', '{}')", &[])
        .await
        .unwrap();
    for (set, constraint) in [
        ("queue = 'q q'", "jobs_queue_check"),
        ("kind = 'k k'", "jobs_kind_check"),
        ("key = 'a b'", "jobs_key_check"),
        ("sequence = 'a b'", "jobs_sequence_check"),
        ("status = 'running', queue = ''", "jobs_queue_check"),
    ] {
        let err = b
            .raw
            .execute(&format!("UPDATE jobs SET {set}"), &[])
            .await
            .unwrap_err();
        let db = err.as_db_error().expect("a database error");
        assert_eq!(
            (db.code(), db.constraint()),
            (
                &tokio_postgres::error::SqlState::CHECK_VIOLATION,
                Some(constraint)
            ),
            "{set}: {db}"
        );
        assert_eq!(
            db.message(),
            format!("new row for relation \"jobs\" violates check constraint \"{constraint}\"")
        );
    }
}

/// A job's names are checked where they are written, not by every UPDATE of its row
/// (migration 22): a claim and a completion, which set no name, do not run the name checks
/// (PostgreSQL runs every CHECK constraint of a table on every UPDATE, which is why they are
/// a trigger's condition now). Shown with a row whose key the checks would refuse, written
/// with the check switched off: the worker claims and completes it, and an UPDATE that sets
/// the key, even to the same value, is still refused. With the checks on every UPDATE, the
/// claim fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_completions_do_not_check_names_they_do_not_write() {
    let b = setup().await;
    b.raw
        .batch_execute(
            "ALTER TABLE jobs DISABLE TRIGGER jobs_names_check;
             INSERT INTO jobs (kind, key, payload) VALUES ('k', 'a b', '{}');
             ALTER TABLE jobs ENABLE TRIGGER jobs_names_check;",
        )
        .await
        .unwrap();
    let registry = skiplock::Registry::new().register_handler(
        "k",
        skiplock::JobOptions::default(),
        |_: String, _: skiplock::JobContext| async { Ok::<(), skiplock::JobError>(()) },
    );
    let worker = skiplock::Worker::builder(crate::worker::client(&b, "names"), registry)
        .queue("default", 1)
        .build()
        .unwrap();
    // A claim refused by a check fails again at every poll: bounded, so that it fails the test.
    let stats = tokio::time::timeout(Duration::from_secs(30), worker.run_until_idle())
        .await
        .expect("the worker did not finish its one job in 30 s: its claim was refused")
        .unwrap();
    assert_eq!((stats.done, stats.failed, stats.lost), (1, 0, 0));
    let state: String = b
        .raw
        .query_one("SELECT status FROM jobs WHERE key = 'a b'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "done");
    let err = b
        .raw
        .execute("UPDATE jobs SET key = key", &[])
        .await
        .unwrap_err();
    assert_eq!(
        err.as_db_error().and_then(|d| d.constraint()),
        Some("jobs_key_check")
    );
}
