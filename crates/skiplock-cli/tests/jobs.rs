//! `skiplock jobs`: the real binary against a real server. Jobs are put in each state with
//! SQL, then listed through every filter, every state and every page.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
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

fn lines(s: &str) -> Vec<serde_json::Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The ids `jobs --json` with `args` lists, in its order.
#[track_caller]
fn ids(db: &TestDb, args: &[&str]) -> Vec<i64> {
    let mut all = vec!["jobs", "--json"];
    all.extend_from_slice(args);
    lines(&ok(&run(db, &all)))
        .iter()
        .filter(|j| j.get("next_before").is_none())
        .map(|j| j["id"].as_i64().unwrap_or_else(|| panic!("no id: {j}")))
        .collect()
}

async fn sql(db: &TestDb, q: &str) {
    let c = db.connect().await.unwrap();
    let q = q.replace("{s}", &format!("\"{}\"", db.schema()));
    c.batch_execute(&q).await.unwrap();
}

/// Ten jobs, ids 1 to 10, one or two in each display state:
///   1 available, 2 scheduled, 3 waiting (after), 4 waiting (sequence), 5 retrying,
///   6 running, 7 done, 8 failed, 9 cancelled, 10 snoozed (scheduled).
/// Queues: 1-5 `mail`, 6-10 `default`; kinds: odd ids `send`, even ids `render`. Jobs 1 and
/// 2 were created two days ago.
async fn ten_jobs(db: &TestDb) {
    ok(&run(db, &["migrate"]));
    sql(
        db,
        "INSERT INTO {s}.jobs (queue, kind, payload)
         SELECT CASE WHEN n <= 5 THEN 'mail' ELSE 'default' END,
                CASE WHEN n % 2 = 1 THEN 'send' ELSE 'render' END,
                jsonb_build_object('n', n)
         FROM generate_series(1, 10) AS n ORDER BY n;
         UPDATE {s}.jobs SET created_at = now() - interval '2 days' WHERE id IN (1, 2);
         UPDATE {s}.jobs SET run_at = now() + interval '1 hour' WHERE id = 2;
         UPDATE {s}.jobs SET held = 'after' WHERE id = 3;
         UPDATE {s}.jobs SET held = 'sequence' WHERE id = 4;
         UPDATE {s}.jobs SET attempts = 1, last_error = 'boom: timeout',
                             run_at = now() + interval '10 minutes' WHERE id = 5;
         UPDATE {s}.jobs SET status = 'running', attempts = 1,
                             locked_until = now() + interval '5 minutes' WHERE id = 6;
         UPDATE {s}.jobs SET status = 'done', attempts = 1, finished_at = now() WHERE id = 7;
         UPDATE {s}.jobs SET status = 'failed', attempts = 5, last_error = 'boom',
                             finished_at = now() WHERE id = 8;
         UPDATE {s}.jobs SET status = 'failed', last_error = 'cancelled',
                             finished_at = now() WHERE id = 9;
         UPDATE {s}.jobs SET attempts = 1, max_attempts = 6,
                             run_at = now() + interval '30 minutes' WHERE id = 10;",
    )
    .await;
}

#[tokio::test]
async fn every_state() {
    let db = TestDb::new().await;
    ten_jobs(&db).await;

    // Newest first, every job, each with its display state.
    let all = lines(&ok(&run(&db, &["jobs", "--json"])));
    let listed: Vec<(i64, &str)> = all
        .iter()
        .map(|j| (j["id"].as_i64().unwrap(), j["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        listed,
        [
            (10, "scheduled"),
            (9, "cancelled"),
            (8, "failed"),
            (7, "done"),
            (6, "running"),
            (5, "retrying"),
            (4, "waiting"),
            (3, "waiting"),
            (2, "scheduled"),
            (1, "available"),
        ]
    );
    // Full columns in --json.
    let j5 = &all[5];
    assert_eq!(j5["status"], "queued");
    assert_eq!(j5["last_error"], "boom: timeout");
    assert_eq!(j5["payload"]["n"], 5);
    assert_eq!(j5["max_attempts"], 5);
    assert!(
        j5["created_at"].is_string() && j5["locked_until"].is_null(),
        "{j5}"
    );
    assert_eq!(all[6]["held"], "sequence");
    assert!(
        all.iter().all(|j| j.get("next_before").is_none()),
        "one page only: no cursor"
    );

    for (state, want) in [
        ("scheduled", vec![10, 2]),
        ("available", vec![1]),
        ("waiting", vec![4, 3]),
        ("retrying", vec![5]),
        ("running", vec![6]),
        ("done", vec![7]),
        ("failed", vec![9, 8]),
        ("cancelled", vec![9]),
        ("queued", vec![10, 5, 4, 3, 2, 1]),
        ("queued,cancelled", vec![10, 9, 5, 4, 3, 2, 1]),
        ("done,running", vec![7, 6]),
    ] {
        assert_eq!(ids(&db, &["--state", state]), want, "--state {state}");
    }
    // Repeated --state is the union too.
    assert_eq!(
        ids(&db, &["--state", "done", "--state", "available"]),
        [7, 1]
    );

    // The state follows the data, not the id (negative control): the scheduled job 2 is
    // available once its run_at has passed, the retrying job 5 stays retrying, and the
    // snoozed job 10 becomes retrying once it carries an error.
    sql(
        &db,
        "UPDATE {s}.jobs SET run_at = now() - interval '1 second' WHERE id IN (2, 5);
         UPDATE {s}.jobs SET last_error = 'flaky' WHERE id = 10;",
    )
    .await;
    assert_eq!(ids(&db, &["--state", "available"]), [2, 1]);
    assert_eq!(ids(&db, &["--state", "retrying"]), [10, 5]);
    assert_eq!(ids(&db, &["--state", "scheduled"]), Vec::<i64>::new());

    // The table: a header, one row per job, the state and the attempts.
    let table = ok(&run(&db, &["jobs"]));
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 11, "{table}");
    for col in [
        "ID",
        "STATE",
        "QUEUE",
        "KIND",
        "ATTEMPTS",
        "RUN AT/FINISHED AT",
        "LAST ERROR",
    ] {
        assert!(rows[0].contains(col), "{table}");
    }
    let row = |id: &str| {
        rows.iter()
            .find(|r| r.split_whitespace().next() == Some(id))
            .unwrap_or_else(|| panic!("no row {id}: {table}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(row("9")[..5], ["9", "cancelled", "default", "send", "0/5"]);
    assert_eq!(row("8")[..5], ["8", "failed", "default", "render", "5/5"]);
    assert_eq!(row("8")[6..], ["boom"]);
    assert_eq!(row("1")[6..], ["-"]);
}

#[tokio::test]
async fn every_filter() {
    let db = TestDb::new().await;
    ten_jobs(&db).await;

    assert_eq!(ids(&db, &["--queue", "mail"]), [5, 4, 3, 2, 1]);
    assert_eq!(ids(&db, &["--queue", "nope"]), Vec::<i64>::new());
    assert_eq!(ids(&db, &["--kind", "render"]), [10, 8, 6, 4, 2]);
    assert_eq!(ids(&db, &["--kind", "render", "--queue", "mail"]), [4, 2]);
    assert_eq!(ids(&db, &["--id-from", "4", "--id-to", "6"]), [6, 5, 4]);
    assert_eq!(ids(&db, &["--id-from", "9"]), [10, 9]);
    assert_eq!(ids(&db, &["--id-to", "2"]), [2, 1]);
    assert_eq!(ids(&db, &["--older-than", "1d"]), [2, 1]);
    assert_eq!(ids(&db, &["--older-than", "3d"]), Vec::<i64>::new());
    assert_eq!(ids(&db, &["--newer-than", "1h"]), [10, 9, 8, 7, 6, 5, 4, 3]);
    assert_eq!(ids(&db, &["--newer-than", "3d"]).len(), 10);
    assert_eq!(ids(&db, &["--limit", "3"]), [10, 9, 8]);
    assert_eq!(ids(&db, &["--before", "4"]), [3, 2, 1]);
    // Every filter at once.
    assert_eq!(
        ids(
            &db,
            &[
                "--state",
                "scheduled,available",
                "--queue",
                "mail",
                "--kind",
                "render",
                "--id-from",
                "1",
                "--id-to",
                "9",
                "--older-than",
                "1d",
                "--newer-than",
                "3d",
                "--before",
                "5",
                "--limit",
                "10",
            ]
        ),
        [2]
    );
    // Nothing matches: the header alone, and a note on standard error.
    let o = run(&db, &["jobs", "--queue", "nope"]);
    assert_eq!(ok(&o).lines().count(), 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no jobs match"));
}

#[tokio::test]
async fn pages_cover_every_job_once() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    sql(
        &db,
        "INSERT INTO {s}.jobs (kind, payload)
         SELECT 'k', jsonb_build_object('n', n) FROM generate_series(1, 23) AS n;
         UPDATE {s}.jobs SET status = 'done', finished_at = now() WHERE id % 3 = 0;",
    )
    .await;

    // --json: follow next_before until there is none.
    let mut seen = Vec::new();
    let mut before: Option<i64> = None;
    let mut pages = 0;
    loop {
        let b = before.map(|b| b.to_string());
        let mut args = vec!["jobs", "--json", "--limit", "5"];
        if let Some(b) = &b {
            args.extend(["--before", b]);
        }
        let out = lines(&ok(&run(&db, &args)));
        pages += 1;
        let (jobs, cursor): (Vec<_>, Vec<_>) =
            out.iter().partition(|j| j.get("next_before").is_none());
        assert!(jobs.len() <= 5);
        seen.extend(jobs.iter().map(|j| j["id"].as_i64().unwrap()));
        assert!(cursor.len() <= 1);
        match cursor.first() {
            Some(c) => {
                let next = c["next_before"].as_i64().unwrap();
                assert_eq!(Some(next), seen.last().copied(), "the last id shown");
                before = Some(next);
            }
            None => break,
        }
        assert!(pages < 10, "paging never ends: {seen:?}");
    }
    assert_eq!(pages, 5);
    assert_eq!(seen, (1..=23).rev().collect::<Vec<i64>>());

    // 16 queued jobs: a page of exactly 16 ends the list (no cursor); a page of 15 does not.
    let page = lines(&ok(&run(
        &db,
        &["jobs", "--json", "--state", "queued", "--limit", "16"],
    )));
    assert_eq!(page.len(), 16);
    assert_eq!(
        page.iter()
            .map(|j| j["id"].as_i64().unwrap())
            .collect::<BTreeSet<_>>()
            .len(),
        16,
        "no duplicates"
    );
    let page = lines(&ok(&run(
        &db,
        &["jobs", "--json", "--state", "queued", "--limit", "15"],
    )));
    assert_eq!(page.len(), 16);
    assert_eq!(page[15]["next_before"], page[14]["id"]);

    // The table: the next page's command on standard error, which runs as printed.
    let mut args: Vec<String> = vec!["jobs".into(), "--state".into(), "queued".into()];
    args.extend(["--limit".into(), "4".into()]);
    let mut seen = Vec::new();
    for _ in 0..10 {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(&db, &argv);
        let out = ok(&o);
        seen.extend(
            out.lines()
                .skip(1)
                .map(|l| l.split_whitespace().next().unwrap().parse::<i64>().unwrap()),
        );
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let Some(more) = err.lines().find_map(|l| l.strip_prefix("more: ")) else {
            assert!(err.is_empty(), "{err}");
            break;
        };
        let words = shlex::split(more).unwrap();
        assert_eq!(words[0], "skiplock", "{more}");
        assert!(more.contains("--state queued"), "{more}");
        assert_eq!(more.matches("--before").count(), 1, "{more}");
        // Run it as printed, without the global options this test adds itself.
        let pos = words.iter().position(|w| w == "jobs").unwrap();
        args = words[pos..].to_vec();
    }
    let want: Vec<i64> = (1..=23).rev().filter(|n| n % 3 != 0).collect();
    assert_eq!(seen, want);

    // Negative control: without the cursor the same first page comes back.
    assert_eq!(ids(&db, &["--limit", "5"]), ids(&db, &["--limit", "5"]));
    assert_ne!(
        ids(&db, &["--limit", "5"]),
        ids(&db, &["--limit", "5", "--before", "19"])
    );
}

#[tokio::test]
async fn bad_input_is_refused() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    for (args, needle) in [
        (&["--state", "bogus"][..], "bogus"),
        (&["--state", "queued,nope"][..], "nope"),
        (&["--limit", "0"][..], "1..=1000"),
        (&["--limit", "5000"][..], "1..=1000"),
        (&["--limit", "ten"][..], "ten"),
        (&["--older-than", "soon"][..], "not a duration"),
        (&["--newer-than", "-1s"][..], "not a duration"),
        (&["--limit", "-1"][..], "1..=1000"),
        (&["--older-than", "36501d"][..], "too long"),
        (&["--before", "0"][..], "--before"),
        (&["--id-from", "-3"][..], "--id-from"),
        (&["--id-from", "9", "--id-to", "3"][..], "--id-from 9"),
    ] {
        let mut all = vec!["jobs"];
        all.extend_from_slice(args);
        let err = refused(&run(&db, &all));
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // Negative control: the same options with good values pass.
    ok(&run(
        &db,
        &[
            "jobs",
            "--state",
            "queued",
            "--limit",
            "1000",
            "--older-than",
            "1s",
        ],
    ));
    ok(&run(&db, &["jobs", "--limit", "1"]));

    // A schema without tables names `migrate`.
    let other = TestDb::new().await;
    let err = refused(&run(&other, &["jobs"]));
    assert!(err.contains("migrate"), "{err}");
}

/// `jobs` only lists: the bulk actions are `skiplock retry`, `cancel` and `delete` with the
/// same filters (tested by `crates/skiplock-cli/tests/bulk.rs`).
#[tokio::test]
async fn jobs_only_lists() {
    let db = TestDb::new().await;
    ten_jobs(&db).await;
    for action in ["--retry", "--cancel", "--delete", "--yes"] {
        let err = refused(&run(&db, &["jobs", "--state", "failed", action]));
        assert!(err.contains(action), "{err}");
    }
    assert_eq!(ids(&db, &["--state", "failed"]), [9, 8]);
    let help = ok(&run(&db, &["jobs", "--help"]));
    assert!(help.contains("`jobs` only lists"), "{help}");
}

/// The columns of the jobs table, from the catalog.
async fn columns(db: &TestDb) -> Vec<String> {
    let c = db.connect().await.unwrap();
    c.query(
        "SELECT column_name::text FROM information_schema.columns
         WHERE table_schema = $1 AND table_name = 'jobs' ORDER BY ordinal_position",
        &[&db.schema()],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The columns of the table that a JSON object lacks, or holds as null.
fn missing(columns: &[String], j: &serde_json::Value) -> Vec<String> {
    columns
        .iter()
        .filter(|c| j.get(c.as_str()).is_none_or(serde_json::Value::is_null))
        .cloned()
        .collect()
}

/// `show --json` and `jobs --json` print every column of the table, whatever migrations
/// added: the list comes from the catalog, and a job with every column set must show each
/// one with a value.
#[tokio::test]
async fn show_prints_every_column() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    sql(
        &db,
        "INSERT INTO {s}.jobs (kind, payload, status, finished_at) VALUES ('parent', '{}', 'done', now());
         INSERT INTO {s}.jobs (queue, kind, payload, status, run_at, attempts, max_attempts,
                               locked_until, last_error, created_at, priority, finished_at,
                               unique_key, unique_queued_only, schedule, key, sequence, held,
                               output, after, waiting, has_children, attempted_at, errors)
         VALUES ('mail', 'send', '{\"n\": 1}', 'failed', now(), 2, 3, now(), 'boom', now(), 4,
                 now(), 'k1', true, 'nightly', 'tenant-1', 'seq-1', 'after', '{\"ok\": 1}',
                 '{1}', 1, true, now(),
                 jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', 'boom', 'ran_ms', 5)));",
    )
    .await;
    let columns = columns(&db).await;
    assert!(columns.len() >= 23, "{columns:?}");

    let shown = lines(&ok(&run(&db, &["show", "2", "--json"])));
    assert_eq!(
        missing(&columns, &shown[0]),
        Vec::<String>::new(),
        "{}",
        shown[0]
    );
    assert_eq!(shown[0]["unique_key"], "k1");
    assert_eq!(shown[0]["unique_queued_only"], true);
    assert_eq!(shown[0]["has_children"], true);
    let listed = lines(&ok(&run(&db, &["jobs", "--json", "--id-from", "2"])));
    assert_eq!(
        missing(&columns, &listed[0]),
        Vec::<String>::new(),
        "{}",
        listed[0]
    );

    // The text: a line per column (max_attempts on the attempts line, unique_queued_only on
    // the unique_key line).
    let text = ok(&run(&db, &["show", "2"]));
    for c in &columns {
        let label = match c.as_str() {
            "max_attempts" => "attempts     2 of 3",
            "waiting" => "waiting      1 of them",
            "unique_queued_only" => "unique_key   k1 (queued only)",
            c => c,
        };
        assert!(
            text.lines().any(|l| l.starts_with(label)),
            "{c}: no line {label:?} in\n{text}"
        );
    }

    // Negative control: a column the command does not know is reported missing.
    sql(
        &db,
        "ALTER TABLE {s}.jobs ADD COLUMN zz_extra int DEFAULT 7",
    )
    .await;
    let columns = self::columns(&db).await;
    let shown = lines(&ok(&run(&db, &["show", "2", "--json"])));
    assert_eq!(missing(&columns, &shown[0]), ["zz_extra"]);
}
