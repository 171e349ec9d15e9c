//! `skiplock retry`, `cancel` and `delete` with filters: the real binary against a real
//! server, on every job the filters match (more than one batch of 1,000), after a count and
//! a confirmation.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

use skiplock_testdb::TestDb;

fn run(db: &TestDb, args: &[&str]) -> Output {
    Command::new(assert_cmd::cargo::cargo_bin!("skiplock"))
        .env_remove("DATABASE_URL")
        .env_remove("SKIPLOCK_HOME")
        .args(["--database-url", db.url(), "--schema", db.schema()])
        .args(args)
        .output()
        .unwrap()
}

#[track_caller]
fn ok(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "exit {:?}: {err}", o.status.code());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The refusal of bad input: exit 2 and one line on standard error.
#[track_caller]
fn refused(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(o.stdout.is_empty());
    err
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

async fn sql(db: &TestDb, q: &str) {
    let c = db.connect().await.unwrap();
    let q = q.replace("{s}", &format!("\"{}\"", db.schema()));
    c.batch_execute(&q).await.unwrap();
}

/// `(queue, status, last_error = 'cancelled', count)` of every job, sorted.
async fn census(db: &TestDb) -> Vec<(String, String, bool, i64)> {
    let c = db.connect().await.unwrap();
    let q = format!(
        "SELECT queue, status, coalesce(last_error = 'cancelled', false), count(*)
         FROM \"{}\".jobs GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        db.schema()
    );
    c.query(&q, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect()
}

fn row(queue: &str, status: &str, cancelled: bool, n: i64) -> (String, String, bool, i64) {
    (queue.to_owned(), status.to_owned(), cancelled, n)
}

/// 2,500 failed jobs in queue `q` (ids 1 to 2,500), then 100 failed jobs in queue `other`,
/// 10 running and 5 done jobs in `q`: made by SQL, in one statement each.
async fn jobs(db: &TestDb) {
    ok(&run(db, &["migrate"]));
    sql(
        db,
        "INSERT INTO {s}.jobs (queue, kind, payload, status, attempts, last_error, finished_at)
         SELECT 'q', 'k', jsonb_build_object('n', n), 'failed', 5, 'boom', now()
         FROM generate_series(1, 2500) AS n ORDER BY n;
         INSERT INTO {s}.jobs (queue, kind, payload, status, attempts, last_error, finished_at)
         SELECT 'other', 'k', '{}', 'failed', 5, 'boom', now()
         FROM generate_series(1, 100) AS n;
         INSERT INTO {s}.jobs (queue, kind, payload, status, attempts, locked_until)
         SELECT 'q', 'k', '{}', 'running', 1, now() + interval '5 minutes'
         FROM generate_series(1, 10) AS n;
         INSERT INTO {s}.jobs (queue, kind, payload, status, attempts, finished_at)
         SELECT 'q', 'k', '{}', 'done', 1, now() FROM generate_series(1, 5) AS n;",
    )
    .await;
}

#[tokio::test]
async fn the_whole_match_in_batches() {
    let db = TestDb::new().await;
    jobs(&db).await;

    // Retry: every failed job of `q`, three batches, none of `other`.
    let o = run(
        &db,
        &[
            "retry", "--queue", "q", "--state", "failed", "--yes", "--json",
        ],
    );
    let r = json(&ok(&o));
    assert_eq!(
        r,
        serde_json::json!({"matched": 2500, "retried": 2500, "skipped": 0, "skipped_by": {}})
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("2500 jobs match"),
        "the count first: {o:?}"
    );
    assert_eq!(
        census(&db).await,
        [
            row("other", "failed", false, 100),
            row("q", "done", false, 5),
            row("q", "queued", false, 2500),
            row("q", "running", false, 10),
        ]
    );

    // Cancel what matches and skip what it does not apply to: the running jobs are
    // cancelled, the done ones skipped; a state filter narrows it to the queued ones.
    let r = json(&ok(&run(
        &db,
        &[
            "cancel",
            "--queue",
            "q",
            "--id-from",
            "2501",
            "--yes",
            "--json",
        ],
    )));
    assert_eq!(
        r,
        serde_json::json!({
            "matched": 15, "cancelled": 10, "skipped": 5, "skipped_by": {"done": 5},
        })
    );
    let out = ok(&run(
        &db,
        &[
            "cancel", "--queue", "q", "--state", "queued", "--id-to", "1200", "--yes",
        ],
    ));
    assert_eq!(
        out.trim(),
        "cancelled 1200 of 1200 matching job(s); skipped 0"
    );
    assert_eq!(
        census(&db).await,
        [
            row("other", "failed", false, 100),
            row("q", "done", false, 5),
            row("q", "failed", true, 1210),
            row("q", "queued", false, 1300),
        ]
    );

    // Delete: every job of `q` but the running ones (none left running) — 2,515 in three
    // batches; `other` untouched.
    sql(
        &db,
        "UPDATE {s}.jobs SET status = 'running', last_error = NULL, finished_at = NULL,
                locked_until = now() + interval '5 minutes' WHERE id IN (1, 2, 3)",
    )
    .await;
    let r = json(&ok(&run(
        &db,
        &["delete", "--queue", "q", "--yes", "--json"],
    )));
    assert_eq!(
        r,
        serde_json::json!({
            "matched": 2515, "deleted": 2512, "skipped": 3, "skipped_by": {"running": 3},
        })
    );
    assert_eq!(
        census(&db).await,
        [
            row("other", "failed", false, 100),
            row("q", "running", false, 3),
        ]
    );

    // Nothing matches: said, exit 0, nothing changed.
    let out = ok(&run(&db, &["delete", "--queue", "nope", "--yes"]));
    assert_eq!(out.trim(), "no jobs match: none to delete");
}

/// Matches spread over many windows of ids, with gaps: every one counted and acted on once.
#[tokio::test]
async fn matches_spread_over_many_windows() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    sql(
        &db,
        "INSERT INTO {s}.jobs (queue, kind, payload)
         SELECT CASE WHEN n % 7 = 0 THEN 'x' ELSE 'y' END, 'k', '{}'
         FROM generate_series(1, 45000) AS n ORDER BY n;
         DELETE FROM {s}.jobs WHERE id BETWEEN 10000 AND 30000;",
    )
    .await;
    let want = (1..=45_000)
        .filter(|n| n % 7 == 0 && !(10_000..=30_000).contains(n))
        .count();
    let r = json(&ok(&run(
        &db,
        &["cancel", "--queue", "x", "--yes", "--json"],
    )));
    assert_eq!(r["matched"], want, "{r}");
    assert_eq!(r["cancelled"], want, "{r}");
    assert_eq!(
        census(&db).await,
        [
            row("x", "failed", true, want as i64),
            row("y", "queued", false, 45_000 - 20_001 - want as i64),
        ]
    );
}

#[tokio::test]
async fn a_retry_that_would_duplicate_a_unique_key_skips_that_job() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    // Job 1 done with key u1, job 2 queued with u1; job 3 done with u3 (free).
    sql(
        &db,
        "INSERT INTO {s}.jobs (kind, payload, status, unique_key, finished_at)
         VALUES ('k', '{}', 'done', 'u1', now()), ('k', '{}', 'queued', 'u1', NULL),
                ('k', '{}', 'done', 'u3', now())",
    )
    .await;
    let r = json(&ok(&run(
        &db,
        &["retry", "--state", "done", "--yes", "--json"],
    )));
    assert_eq!(
        r,
        serde_json::json!({
            "matched": 2, "retried": 1, "skipped": 1, "skipped_by": {"unique key taken": 1},
        })
    );
    assert_eq!(
        census(&db).await,
        [
            row("default", "done", false, 1),
            row("default", "queued", false, 2)
        ]
    );
}

#[tokio::test]
async fn refused_without_confirmation_or_filters() {
    let db = TestDb::new().await;
    jobs(&db).await;
    let before = census(&db).await;

    // No terminal, no --yes: refused with the count, nothing changed.
    for verb in ["retry", "cancel", "delete"] {
        let err = refused(&run(&db, &[verb, "--queue", "other"]));
        assert!(err.contains("100 jobs match"), "{err}");
        assert!(err.contains(&format!("refusing to {verb} them")), "{err}");
        assert!(err.contains("--yes"), "{err}");
    }
    assert_eq!(census(&db).await, before);

    // No ids and no filters: refused, even with --yes.
    for verb in ["retry", "cancel", "delete"] {
        for args in [&[verb][..], &[verb, "--yes"], &[verb, "--json", "--yes"]] {
            let err = refused(&run(&db, args));
            assert!(
                err.contains("give job ids (<IDS>), or filters"),
                "{args:?}: {err}"
            );
        }
        // Ids and filters together, and filters that cannot match: refused too.
        let err = refused(&run(&db, &[verb, "5", "--queue", "q"]));
        assert!(err.contains("not both"), "{err}");
        let err = refused(&run(&db, &[verb, "--id-from", "9", "--id-to", "3"]));
        assert!(err.contains("--id-from 9"), "{err}");
        let err = refused(&run(&db, &[verb, "--state", "bogus", "--yes"]));
        assert!(err.contains("bogus"), "{err}");
    }
    assert_eq!(census(&db).await, before);

    // A schema without tables names `migrate`, and creates nothing.
    let other = TestDb::new().await;
    let err = refused(&run(&other, &["retry", "--state", "failed", "--yes"]));
    assert!(err.contains("migrate"), "{err}");

    // Negative control: the same command with --yes does change them.
    ok(&run(&db, &["delete", "--queue", "other", "--yes"]));
    assert_ne!(census(&db).await, before);
    assert!(!census(&db).await.iter().any(|r| r.0 == "other"));
}

/// The rows a bulk action acts on are the rows `skiplock jobs` lists: `jobs_match.sql` has
/// `jobs_list.sql`'s FROM and WHERE clauses word for word.
#[tokio::test]
async fn the_match_is_the_listing() {
    let db = TestDb::new().await;
    let client = skiplock::Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap();
    let clause = |s: skiplock::Statement| {
        let text = client.statement(s);
        let from = text.find("\nFROM ").unwrap();
        text[from..].to_owned()
    };
    let list = clause(skiplock::Statement::JobsList);
    assert!(
        list.contains("WHERE") && list.contains("LIMIT $10"),
        "{list}"
    );
    assert_eq!(clause(skiplock::Statement::JobsMatch), list);
    // Negative control: the select lists differ, so the comparison is not of two copies.
    assert_ne!(
        client.statement(skiplock::Statement::JobsMatch),
        client.statement(skiplock::Statement::JobsList)
    );
}

/// Rows the scans of the jobs table in a plan read (returned or filtered out), over all
/// their loops.
fn rows_read(node: &serde_json::Value) -> f64 {
    let mut n = 0.0;
    if node["Relation Name"] == "jobs" {
        let f = |k: &str| node[k].as_f64().unwrap_or(0.0);
        n += f("Actual Loops")
            * (f("Actual Rows") + f("Rows Removed by Filter") + f("Rows Removed by Index Recheck"));
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        n += rows_read(child);
    }
    n
}

/// One statement of the walk reads at most its window of ids, with statistics taken when
/// the table held 100 jobs and 60,000 more since: the filters match 20 jobs of the oldest
/// (a plan that sorts the match, or a backward scan from the newest alone, reads the whole
/// table per batch: the negative control).
#[tokio::test]
async fn a_window_reads_only_its_rows_with_stale_statistics() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    sql(
        &db,
        "ALTER TABLE {s}.jobs SET (autovacuum_enabled = false);
         INSERT INTO {s}.jobs (queue, kind, payload)
         SELECT 'c', 'k', '{}' FROM generate_series(1, 20);
         INSERT INTO {s}.jobs (queue, kind, payload)
         SELECT 'a', 'k', '{}' FROM generate_series(1, 80);
         ANALYZE {s}.jobs;
         INSERT INTO {s}.jobs (queue, kind, payload)
         SELECT 'b', 'k', '{}' FROM generate_series(1, 60000);",
    )
    .await;
    let client = skiplock::Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap();
    let statement = client.statement(skiplock::Statement::JobsMatch).to_owned();
    let c = db.connect().await.unwrap();
    let read = |from: Option<i64>, to: Option<i64>| {
        let (c, statement) = (&c, &statement);
        async move {
            let none: Option<Vec<String>> = None;
            let (no_text, no_int): (Option<String>, Option<i64>) = (None, None);
            let queue = Some("c".to_owned());
            let rows = c
                .query(
                    &format!("EXPLAIN (ANALYZE, FORMAT JSON) {statement}"),
                    &[
                        &none, &none, &queue, &no_text, &from, &to, &no_int, &no_int, &no_int,
                        &1000i64,
                    ],
                )
                .await
                .unwrap();
            let plan: serde_json::Value = rows[0].get(0);
            (rows_read(&plan[0]["Plan"]), plan)
        }
    };
    // Every window of 10,000 ids, newest first, as the walk reads them.
    let mut high = 60_100;
    while high >= 1 {
        let from = (high - 9_999).max(1);
        let (n, plan) = read(Some(from), Some(high)).await;
        assert!(
            n <= 10_000.0,
            "{n} rows read for ids {from}..={high}: {plan}"
        );
        high = from - 1;
    }
    // Negative control: without a window, the statement reads the whole table.
    let (n, plan) = read(None, None).await;
    assert!(n >= 60_000.0, "{n} rows read: {plan}");
}
