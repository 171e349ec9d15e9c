//! The `skiplock` command as a user runs it: the real binary against a real server.
#![allow(clippy::unwrap_used)]

use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use skiplock_testdb::TestDb;

fn cmd(db: Option<&TestDb>, args: &[&str]) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin!("skiplock"));
    c.env_remove("DATABASE_URL").env_remove("SKIPLOCK_HOME");
    if let Some(db) = db {
        c.args(["--database-url", db.url(), "--schema", db.schema()]);
    }
    c.args(args);
    c
}

fn run(db: Option<&TestDb>, args: &[&str]) -> Output {
    cmd(db, args).output().unwrap()
}

fn run_stdin(db: &TestDb, args: &[&str], input: &[u8]) -> Output {
    let mut child = cmd(Some(db), args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(o.status.success(), "exit {:?}: {}", o.status.code(), err(o));
    out(o)
}

/// A failure: the expected exit status, one line on stderr naming `needle`, no panic.
#[track_caller]
fn fails(o: &Output, code: i32, needle: &str) {
    let e = err(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {e}");
    assert!(e.contains(needle), "{needle:?} not in {e:?}");
    let lines: Vec<&str> = e.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(lines.len(), 1, "{e}");
    assert!(
        !e.contains("panicked") && !e.contains("RUST_BACKTRACE"),
        "{e}"
    );
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

async fn migrated() -> TestDb {
    let db = TestDb::new().await;
    ok(&run(Some(&db), &["migrate"]));
    db
}

async fn sql_one(db: &TestDb, q: &str) -> i64 {
    let c = db.connect().await.unwrap();
    let q = q.replace("jobs", &format!("\"{}\".jobs", db.schema()));
    c.query_one(&q, &[]).await.unwrap().get(0)
}

#[test]
fn help_lists_every_command() {
    let help = ok(&run(None, &["--help"]));
    for word in [
        "migrate",
        "enqueue",
        "work",
        "stats",
        "reap",
        "prune",
        "retry",
        "cancel",
        "delete",
        "show",
        "lab",
        "demo",
        "pg",
        "queue",
        "schedule",
        "serve",
        "bench",
        "--database-url",
        "--schema",
        "DATABASE_URL",
    ] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
    for sub in [
        "enqueue", "work", "prune", "lab", "demo", "stats", "queue", "schedule", "serve",
    ] {
        assert!(run(None, &[sub, "--help"]).status.success(), "{sub} --help");
    }
}

#[tokio::test]
async fn migrate_with_a_url_then_again() {
    let db = TestDb::new().await;
    assert!(ok(&run(Some(&db), &["migrate"])).contains("migrated from version 0 to"));
    // DATABASE_URL is the fallback.
    let o = Command::new(assert_cmd::cargo::cargo_bin!("skiplock"))
        .args(["--schema", db.schema(), "migrate"])
        .env("DATABASE_URL", db.url())
        .output()
        .unwrap();
    assert!(ok(&o).contains("up to date"));
}

#[tokio::test]
async fn enqueue_one_and_many_then_show_and_stats() {
    let db = migrated().await;
    let id = ok(&run(
        Some(&db),
        &[
            "enqueue",
            "--queue",
            "mail",
            "--kind",
            "sleep",
            "--priority",
            "-3",
            "--max-attempts",
            "7",
            r#"{"ms":1}"#,
        ],
    ));
    let id = id.trim();
    let shown = json(&ok(&run(Some(&db), &["show", id, "--json"])));
    assert_eq!(shown["queue"], "mail");
    assert_eq!(shown["kind"], "sleep");
    assert_eq!(shown["priority"], -3);
    assert_eq!(shown["max_attempts"], 7);
    assert_eq!(shown["status"], "queued");
    assert_eq!(shown["payload"]["ms"], 1);
    assert!(ok(&run(Some(&db), &["show", id])).contains("status       queued"));

    // Many from standard input: blank lines skipped, ids printed in order.
    let lines: String = (0..12_000).map(|i| format!("{{\"n\":{i}}}\n\n")).collect();
    let o = run_stdin(
        &db,
        &["enqueue", "--queue", "bulk", "--delay", "1h"],
        lines.as_bytes(),
    );
    let ids: Vec<i64> = ok(&o).lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(ids.len(), 12_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let o = run_stdin(&db, &["enqueue", "--json"], b"{\"a\":1}\n{\"a\":2}\n");
    assert_eq!(json(&ok(&o))["ids"].as_array().unwrap().len(), 2);

    let s = json(&ok(&run(Some(&db), &["stats", "--json"])));
    let queues = s["queues"].as_array().unwrap();
    let bulk = queues.iter().find(|q| q["queue"] == "bulk").unwrap();
    assert_eq!(
        (bulk["queued"].as_i64(), bulk["ready"].as_i64()),
        (Some(12_000), Some(0))
    );
    assert!(s["table"]["n_live_tup"].is_i64());
    assert!(s["blockers"].as_array().unwrap().is_empty() || s["blockers"].is_array());
    assert!(ok(&run(Some(&db), &["stats"])).contains("bulk"));
}

#[tokio::test]
async fn bad_input_is_refused_with_one_line_and_nothing_changes() {
    let db = migrated().await;
    for (args, needle) in [
        (vec!["enqueue", "{not json"], "not valid JSON"),
        (vec!["enqueue", r#"{"a":"\u0000"}"#], "\\u0000"),
        (
            vec!["enqueue", "--queue", "bad queue", "{}"],
            "invalid queue name",
        ),
        (
            vec!["enqueue", "--queue", "q'; DROP TABLE jobs;--", "{}"],
            "invalid queue name",
        ),
        (vec!["enqueue", "--kind", "a b", "{}"], "invalid job kind"),
        (vec!["enqueue", "--max-attempts", "0", "{}"], "max_attempts"),
        (
            vec!["enqueue", "--max-attempts", "2147483648", "{}"],
            "max-attempts",
        ),
        (vec!["enqueue", "--delay", "-1s", "{}"], "delay"),
        (vec!["enqueue", "--run-at", "tomorrow", "{}"], "RFC 3339"),
        (vec!["retry", "abc"], "not a job id"),
        (vec!["cancel", "-5"], "job id"),
        (vec!["work", "--queue", "q=0"], "concurrency"),
        (vec!["work", "--poll-interval", "often"], "duration"),
        (vec!["work", "--vacuum-threshold", "0"], "dead tuples"),
        (vec!["lab", "naive", "--workers", "0"], "--workers"),
        (vec!["enqueue", "--key", "a b", "{}"], "invalid job key"),
        (
            vec!["enqueue", "--key", "", "{}"],
            "invalid job key: it is empty",
        ),
        (vec!["enqueue", "--key", "é", "{}"], "invalid job key"),
        (
            vec!["enqueue", "--sequence", "a;b", "{}"],
            "invalid sequence",
        ),
        (vec!["enqueue", "--sequence", "", "{}"], "invalid sequence"),
        (
            vec!["queue", "limit", "q", "--concurrency", "0"],
            "outside 1..=1000000",
        ),
        (
            vec!["queue", "limit", "q", "--per-key", "abc"],
            "not a whole number in 1..=1000000",
        ),
        (
            vec!["queue", "limit", "q", "--rate", "0/1s"],
            "the count \"0\" is outside 1..=1000000",
        ),
        (
            vec!["queue", "limit", "q", "--rate", "10/0s"],
            "the period \"0s\" is outside 1ms..=1d",
        ),
        (
            vec!["queue", "limit", "q", "--rate", "10/2d"],
            "the period \"2d\" is outside 1ms..=1d",
        ),
        (
            vec!["queue", "limit", "q", "--rate", "10/"],
            "has no period",
        ),
        (
            vec!["queue", "limit", "q", "--rate", "abc"],
            "is not a rate",
        ),
        (
            vec!["queue", "limit", "a b", "--concurrency", "1"],
            "invalid queue name",
        ),
    ] {
        fails(&run(Some(&db), &args), 2, needle);
    }
    let long = "k".repeat(129);
    for args in [
        vec!["enqueue", "--key", &long, "{}"],
        vec!["enqueue", "--sequence", &long, "{}"],
    ] {
        fails(
            &run(Some(&db), &args),
            2,
            "it is 129 bytes long; the limit is 128",
        );
    }
    // Bad schema names never reach SQL.
    for schema in [
        "evil\"; DROP SCHEMA public CASCADE;--",
        "a$$b",
        &"s".repeat(100),
    ] {
        let o = run(
            None,
            &["--database-url", db.url(), "--schema", schema, "stats"],
        );
        fails(&o, 2, "invalid schema name");
    }
    // Standard input: invalid UTF-8, a bad line among good ones, a payload over the cap.
    fails(
        &run_stdin(&db, &["enqueue"], b"{\"a\":1}\n\xff\xfe\n"),
        2,
        "line 2 of standard input is not valid UTF-8",
    );
    fails(
        &run_stdin(&db, &["enqueue"], b"{\"a\":1}\n{\"a\":2}\n{oops\n"),
        2,
        "line 3",
    );
    let big = format!("\"{}\"\n", "x".repeat(1024 * 1024 + 1));
    fails(&run_stdin(&db, &["enqueue"], big.as_bytes()), 2, "limit");
    fails(&run_stdin(&db, &["enqueue"], b"\n\n"), 2, "no payload");
    // A bad key or sequence refuses all of standard input, named once (not as a line).
    fails(
        &run_stdin(&db, &["enqueue", "--key", "a b"], b"{}\n{}\n"),
        2,
        "invalid job key",
    );
    let o = run_stdin(&db, &["enqueue", "--sequence", &long], b"{}\n");
    fails(&o, 2, "invalid sequence: it is 129 bytes long");
    assert!(!err(&o).contains("line 1"), "{}", err(&o));
    assert_eq!(
        sql_one(&db, "SELECT count(*) FROM jobs").await,
        0,
        "nothing was enqueued"
    );
    let c = db.connect().await.unwrap();
    let queues: i64 = c
        .query_one(
            &format!("SELECT count(*) FROM \"{}\".queues", db.schema()),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(queues, 0, "no limit was stored");

    // Unknown ids; a missing schema; an unreachable database with its password hidden.
    fails(&run(Some(&db), &["show", "424242"]), 1, "no job 424242");
    fails(
        &run(Some(&db), &["retry", "424242"]),
        1,
        "no job was retried",
    );
    let o = run(
        None,
        &[
            "--database-url",
            db.url(),
            "--schema",
            "never_migrated",
            "stats",
        ],
    );
    fails(
        &o,
        2,
        "run `skiplock --schema never_migrated migrate` first",
    );
    let o = run(
        None,
        &[
            "--database-url",
            "postgres://app:s3cretpw@127.0.0.1:1/db?connect_timeout=2",
            "stats",
        ],
    );
    fails(&o, 1, "could not get a database connection");
    assert!(
        !err(&o).contains("s3cretpw") && err(&o).contains("app:***@127.0.0.1:1"),
        "{}",
        err(&o)
    );
    fails(
        &run(None, &["--database-url", "not a url", "migrate"]),
        2,
        "invalid database URL",
    );
}

#[tokio::test]
async fn work_drain_runs_builtin_kinds_and_exits_0() {
    let db = migrated().await;
    ok(&run(Some(&db), &["enqueue", "--kind", "noop", "{}"]));
    ok(&run(
        Some(&db),
        &["enqueue", "--kind", "sleep", r#"{"ms":20}"#],
    ));
    ok(&run(
        Some(&db),
        &[
            "enqueue",
            "--kind",
            "fail",
            r#"{"times":9}"#,
            "--max-attempts",
            "1",
        ],
    ));
    ok(&run(
        Some(&db),
        &["enqueue", "--kind", "noop", "--queue", "other", "{}"],
    ));
    let stats = json(&ok(&run(Some(&db), &["work", "--drain", "--json"])));
    assert_eq!(
        (
            stats["claimed"].as_i64(),
            stats["done"].as_i64(),
            stats["failed"].as_i64()
        ),
        (Some(3), Some(2), Some(1))
    );
    assert_eq!(
        sql_one(
            &db,
            "SELECT count(*) FROM jobs WHERE queue = 'default' AND status IN ('queued', 'running')"
        )
        .await,
        0
    );
    // Nothing ready: exits 0 at once.
    let stats = json(&ok(&run(Some(&db), &["work", "--drain", "--json"])));
    assert_eq!(stats["claimed"], 0);
    let stats = json(&ok(&run(
        Some(&db),
        &["work", "--queue", "other=2", "--drain", "--json"],
    )));
    assert_eq!(stats["done"], 1);
}

#[tokio::test]
async fn exec_worker_follows_the_exit_code_contract() {
    let db = migrated().await;
    let dir = std::env::temp_dir().join(format!("skiplock-exec-{}", db.schema()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("job.sh");
    let log = dir.join("log");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\npayload=$(cat)\necho \"$SKIPLOCK_JOB_ID $SKIPLOCK_ATTEMPT $SKIPLOCK_QUEUE $SKIPLOCK_KIND $payload\" >> {log}\n\
             case \"$payload\" in\n  *retry*) echo 'try later' >&2; exit 75;;\n  *boom*) echo 'first line' >&2; echo 'it went boom' >&2; exit 3;;\n  *signal*) kill -KILL $$;;\nesac\nexit 0\n",
            log = log.display()
        ),
    )
    .unwrap();
    let mut ids = Vec::new();
    for p in [
        r#"{"ok":1}"#,
        r#"{"retry":1}"#,
        r#"{"boom":1}"#,
        r#"{"signal":1}"#,
    ] {
        ids.push(
            ok(&run(
                Some(&db),
                &["enqueue", "--kind", "shell", "--queue", "ex", p],
            ))
            .trim()
            .to_owned(),
        );
    }
    let stats = json(&ok(&run(
        Some(&db),
        &[
            "work",
            "--queue",
            "ex=4",
            "--drain",
            "--json",
            "--exec",
            "sh",
            script.to_str().unwrap(),
        ],
    )));
    assert_eq!(
        (stats["done"].as_i64(), stats["retried"].as_i64()),
        (Some(1), Some(3))
    );
    let show = |id: &str| json(&ok(&run(Some(&db), &["show", id, "--json"])));
    assert_eq!(show(&ids[0])["status"], "done");
    let r = show(&ids[1]);
    assert_eq!(
        (r["status"].as_str(), r["last_error"].as_str()),
        (Some("queued"), Some("exit 75 (retry requested): try later"))
    );
    let r = show(&ids[2]);
    assert_eq!(r["last_error"], "exit 3: first line it went boom");
    let r = show(&ids[3]);
    assert_eq!(r["last_error"], "killed by signal 9");
    // The environment and the payload reached the command.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains(&format!("{} 1 ex shell {{\"ok\": 1}}", ids[0])),
        "{logged}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn sigterm_during_work_hands_back_running_jobs() {
    let db = migrated().await;
    for i in 0..3 {
        ok(&run(Some(&db), &["enqueue", &format!("{{\"n\":{i}}}")]));
    }
    let child = cmd(
        Some(&db),
        &[
            "work",
            "--queue",
            "default=2",
            "--shutdown-timeout",
            "1s",
            "--json",
            "--exec",
            "sleep",
            "60",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let start = Instant::now();
    while sql_one(&db, "SELECT count(*) FROM jobs WHERE status = 'running'").await < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "jobs never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let stats = json(&ok(&o));
    assert_eq!(stats["handed_back"], 2, "{stats}");
    assert_eq!(
        sql_one(&db, "SELECT count(*) FROM jobs WHERE status = 'queued'").await,
        3
    );
    assert_eq!(sql_one(&db, "SELECT count(*) FROM jobs WHERE attempts = 1 AND max_attempts = 6 AND locked_until IS NULL").await, 2);
}

/// `work --drain` stops on SIGTERM as `work` does: the running jobs go back to the queue
/// without spending an attempt (they used to be killed with the process, holding their
/// leases); it exits 143, since it did not drain.
#[tokio::test]
async fn sigterm_during_drain_hands_back_running_jobs() {
    let db = migrated().await;
    for i in 0..3 {
        ok(&run(Some(&db), &["enqueue", &format!("{{\"n\":{i}}}")]));
    }
    let child = cmd(
        Some(&db),
        &[
            "work",
            "--drain",
            "--queue",
            "default=2",
            "--shutdown-timeout",
            "1s",
            "--json",
            "--exec",
            "sleep",
            "60",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let start = Instant::now();
    while sql_one(&db, "SELECT count(*) FROM jobs WHERE status = 'running'").await < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "jobs never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(143), "{}", err(&o));
    let stats = json(&out(&o));
    assert_eq!(stats["handed_back"], 2, "{stats}");
    assert_eq!(
        sql_one(&db, "SELECT count(*) FROM jobs WHERE status = 'queued'").await,
        3
    );
    assert_eq!(sql_one(&db, "SELECT count(*) FROM jobs WHERE attempts = 1 AND max_attempts = 6 AND locked_until IS NULL").await, 2);
}

#[tokio::test]
async fn reap_prune_retry_cancel_delete() {
    let db = migrated().await;
    for _ in 0..4 {
        ok(&run(Some(&db), &["enqueue", "--max-attempts", "1", "{}"]));
    }
    let c = db.connect().await.unwrap();
    let s = db.schema();
    c.batch_execute(&format!(
        "UPDATE \"{s}\".jobs SET status = 'running', attempts = 1, locked_until = now() - interval '1 minute' WHERE id = 1;
         UPDATE \"{s}\".jobs SET status = 'done', attempts = 1, finished_at = now() - interval '30 days' WHERE id = 2;"
    ))
    .await
    .unwrap();
    let r = json(&ok(&run(Some(&db), &["reap", "--json"])));
    assert_eq!(
        (r["reaped"].as_i64(), r["failed"].as_i64()),
        (Some(1), Some(1))
    );
    assert!(ok(&run(Some(&db), &["reap"])).contains("reaped 0 job(s)"));
    let p = json(&ok(&run(
        Some(&db),
        &["prune", "--older-than", "7d", "--json"],
    )));
    assert_eq!(
        (p["removed"].as_i64(), p["batches"].as_i64()),
        (Some(1), Some(1))
    );
    let p = json(&ok(&run(
        Some(&db),
        &[
            "prune",
            "--include-failed",
            "--older-than",
            "0s",
            "--archive",
            "--json",
        ],
    )));
    assert_eq!(
        (p["removed"].as_i64(), p["archived"].as_bool()),
        (Some(1), Some(true))
    );
    let r = json(&ok(&run(Some(&db), &["retry", "3", "--json"])));
    assert_eq!(r["retried"], serde_json::json!([3]));
    let r = json(&ok(&run(Some(&db), &["cancel", "3", "4", "--json"])));
    assert_eq!(r["cancelled"], serde_json::json!([3, 4]));
    assert!(ok(&run(Some(&db), &["delete", "3", "4", "99"])).contains("99: no such job"));
    assert_eq!(sql_one(&db, "SELECT count(*) FROM jobs").await, 0);
}

/// The lab's JSON contract, in a database of its own (the vacuum figures would be disturbed
/// by other tests' transactions in a shared one).
#[tokio::test]
async fn lab_reproduces_the_article() {
    let db = TestDb::new_database().await;
    let o = run(Some(&db), &["lab", "all", "--json"]);
    let lines: Vec<serde_json::Value> = ok(&o).lines().map(json).collect();
    assert_eq!(lines.len(), 4, "{}", out(&o));
    let by = |name: &str| {
        lines
            .iter()
            .find(|l| l["experiment"] == name)
            .unwrap()
            .clone()
    };
    let naive = by("naive");
    assert!(naive["duplicate_claims"].as_i64().unwrap() > 0, "{naive}");
    assert!(naive["done"].as_i64().unwrap() < 10_000, "{naive}");
    assert!(naive["max_attempts"].as_i64().unwrap() > 1);
    let sl = by("skip-locked");
    assert_eq!(
        (
            sl["done"].as_i64(),
            sl["max_attempts"].as_i64(),
            sl["duplicate_claims"].as_i64()
        ),
        (Some(10_000), Some(1), Some(0)),
        "{sl}"
    );
    let fu = by("for-update");
    assert!(fu["wait_ms"].as_f64().unwrap() >= 1000.0, "{fu}");
    assert!(fu["skip_locked_ms"].as_f64().unwrap() < 1000.0, "{fu}");
    let v = by("vacuum");
    assert_eq!(v["dead_not_removable_open"], 2000, "{v}");
    assert_eq!(v["dead_not_removable_after_commit"], 0, "{v}");
    // The scratch schemas are gone.
    let c = db.connect().await.unwrap();
    let left: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE '%\\_lab\\_%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

#[tokio::test]
async fn demo_finishes_with_no_duplicate_completion() {
    let db = TestDb::new().await;
    let o = run(
        Some(&db),
        &["demo", "--jobs", "2000", "--workers", "4", "--json"],
    );
    let d = json(&ok(&o));
    assert_eq!(d["enqueued"], 2000);
    assert_eq!(d["duplicate_completions"], 0, "{d}");
    assert_eq!(
        d["done"].as_i64().unwrap() + d["failed"].as_i64().unwrap(),
        2000,
        "{d}"
    );
    assert!(
        d["reaped"].as_i64().unwrap() >= 1,
        "the crashed worker's jobs were reaped: {d}"
    );
    assert!(d["retried"].as_i64().unwrap() > 0);
    assert!(d["latency_p99_ms"].as_f64().unwrap() >= d["latency_p50_ms"].as_f64().unwrap());
    let c = db.connect().await.unwrap();
    let left: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1",
            &[&format!("{}_demo_%", db.schema())],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the demo dropped its schema");
}

/// With no URL, the embedded default database is created, started, migrated, reported
/// and stopped.
#[test]
fn the_embedded_default_database() {
    if skiplock_testdb::find_pg_bin().is_err() {
        return; // no local server binaries (DATABASE_URL-only setups)
    }
    let home = std::env::temp_dir().join(format!("skiplock-cli-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    // Stop the server and delete the folder even if an assertion fails.
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = cmd(None, &["pg", "stop"])
                .env("SKIPLOCK_HOME", &self.0)
                .output();
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(home.clone());
    let with_home = |args: &[&str]| {
        cmd(None, args)
            .env("SKIPLOCK_HOME", &home)
            .output()
            .unwrap()
    };
    assert!(ok(&with_home(&["pg", "status"])).contains("not created yet"));
    assert!(ok(&with_home(&["migrate"])).contains("migrated from version 0 to"));
    assert!(ok(&with_home(&["pg", "url"])).starts_with("postgres://postgres@127.0.0.1:"));
    assert!(ok(&with_home(&["pg", "status"])).contains("running"));
    let id = ok(&with_home(&["enqueue", "--kind", "noop", "{}"]));
    assert_eq!(id.trim(), "1");
    assert!(with_home(&["work", "--drain"]).status.success());
    assert!(ok(&with_home(&["pg", "stop"])).contains("stopped"));
    assert!(ok(&with_home(&["pg", "status"])).contains("stopped"));
}

/// A state folder that cannot be made, or one that is read-only, is a clear error.
#[test]
fn a_bad_state_folder_for_the_embedded_default_is_a_clear_error() {
    if skiplock_testdb::find_pg_bin().is_err() {
        return;
    }
    let base = std::env::temp_dir().join(format!("skiplock-cli-ro-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    // A path under a regular file can never be created.
    let file = base.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let o = cmd(None, &["migrate"])
        .env("SKIPLOCK_HOME", file.join("state"))
        .output()
        .unwrap();
    fails(&o, 1, "could not create the embedded database");
    // A read-only folder: nothing can be created in it (by root either, for its subfolder).
    let ro = base.join("read-only");
    std::fs::create_dir_all(&ro).unwrap();
    let o = Command::new("chattr").args(["+i"]).arg(&ro).output();
    let immutable = o.is_ok_and(|o| o.status.success());
    if !immutable {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let o = cmd(None, &["enqueue", "{}"])
        .env("SKIPLOCK_HOME", ro.join("state"))
        .output()
        .unwrap();
    if immutable {
        let _ = Command::new("chattr").args(["-i"]).arg(&ro).status();
    }
    fails(&o, 1, "could not create the embedded database");
    let _ = std::fs::remove_dir_all(&base);
}

/// Every benchmark scenario still runs (tiny sizes), and prints the JSON it promises.
#[tokio::test]
async fn bench_quick_runs_every_scenario() {
    let db = TestDb::new().await;
    let o = run(Some(&db), &["bench", "all", "--quick", "--json"]);
    let points: Vec<serde_json::Value> = ok(&o).lines().map(json).collect();
    let of = |s: &str| {
        points
            .iter()
            .filter(|p| p["scenario"] == s)
            .cloned()
            .collect::<Vec<_>>()
    };
    let ceilings = of("throughput-ceiling");
    assert!(
        ceilings.iter().any(|c| c["pipelined"] == true)
            && ceilings.iter().any(|c| c["pipelined"] == false),
        "both ceiling shapes: {ceilings:?}"
    );
    let t = &of("throughput")[0];
    for k in [
        "jobs",
        "concurrency",
        "batch",
        "jobs_per_s",
        "ceiling_jobs_per_s",
        "ratio",
    ] {
        assert!(t[k].is_number(), "{k} in {t}");
    }
    let l = of("latency");
    assert_eq!(l.len(), 2, "LISTEN on and off");
    for k in ["offered_per_s", "p50_ms", "p95_ms", "p99_ms"] {
        assert!(l[0][k].is_number(), "{k} in {}", l[0]);
    }
    let e = of("enqueue");
    assert!(
        e.iter().any(|p| p["mode"] == "single") && e.iter().all(|p| p["jobs_per_s"].is_number())
    );
    assert_eq!(of("history").len(), 2);
    let procs = of("processes");
    assert_eq!(procs.len(), 2, "one and two processes: {procs:?}");
    for p in &procs {
        assert_eq!(p["runs"].as_array().map(Vec::len), Some(1), "{p}");
        assert!(p["median_vs_one"].is_number(), "{p}");
    }
    assert_eq!(of("footprint").len(), 4, "steady, then before/during/after");
    assert_eq!(
        of("throughput-run").len(),
        2,
        "two worker points, one round"
    );
    let pgbench = of("throughput-ceiling-pgbench");
    assert!(
        pgbench.is_empty() || pgbench.iter().all(|p| p["jobs_per_s"].is_number()),
        "{pgbench:?}"
    );
    let floor = of("latency-floor");
    assert_eq!(floor.len(), 1, "the floor beside the LISTEN rate");
    for k in ["offered_per_s", "p50_ms", "p99_ms"] {
        assert!(floor[0][k].is_number(), "{k} in {}", floor[0]);
    }
    assert_eq!(
        of("workflow-enqueue").len(),
        4,
        "plain, no edges, fan-out, chain"
    );
    assert_eq!(
        of("workflow-throughput").len(),
        4,
        "plain, fan-out, chains, one chain"
    );
    // The peer runs where its binary was built beside this one (`--all-features`).
    let peer = std::path::Path::new(assert_cmd::cargo::cargo_bin!("skiplock"))
        .with_file_name("skiplock-peer-graphile");
    let peers = of("peers");
    if peer.is_file() {
        assert_eq!(
            peers.len(),
            8,
            "5 of skiplock (three deleting the jobs they complete), 3 of graphile_worker: {peers:?}"
        );
        assert!(peers.iter().all(|p| p["jobs_per_s"].as_f64() > Some(0.0)));
    } else {
        assert!(peers.is_empty(), "{peers:?}");
    }
    // The held snapshot runs only when asked for by name.
    assert!(of("held-snapshot").is_empty());
    // The scratch schemas (the peer's among them) are gone.
    assert_no_scratch_schemas(&db).await;
}

/// The bench's scratch schemas are gone.
async fn assert_no_scratch_schemas(db: &TestDb) {
    let c = db.connect().await.unwrap();
    let left: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1",
            &[&format!("{}_bench_%", db.schema())],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

/// `bench held-snapshot` (quick: seconds, not 40 minutes): the probe for the highest rate,
/// then before, during and after a held snapshot, a sample each second, its targets, and the
/// plot where `--plot` says; the scratch schemas are gone afterwards.
#[tokio::test]
async fn bench_held_snapshot_reports_the_run_second_by_second_and_plots_it() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("skiplock-held-{}", db.schema()));
    std::fs::create_dir_all(&dir).unwrap();
    let plot = dir.join("held.svg");
    let plot_arg = plot.to_str().unwrap();
    let o = run(
        Some(&db),
        &[
            "bench",
            "held-snapshot",
            "--quick",
            "--json",
            "--plot",
            plot_arg,
        ],
    );
    let points: Vec<serde_json::Value> = ok(&o).lines().map(json).collect();
    assert!(points.iter().all(|p| p["scenario"] == "held-snapshot"));
    let part = |k: &'static str| points.iter().filter(move |p| p["part"] == k);
    assert_eq!(part("probe").count(), 1, "one rate in quick mode");
    let phases: Vec<&str> = part("phase")
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["before", "during", "after"]);
    for p in part("phase") {
        for k in ["jobs_per_s", "kept", "dead_max", "table_bytes", "p99_ms"] {
            assert!(p[k].is_number(), "{k} in {p}");
        }
    }
    let ticks: Vec<&serde_json::Value> = part("tick").collect();
    // 2 s before, 3 s held, 3 s after: a sample each second.
    assert!(ticks.len() >= 6, "{}", ticks.len());
    assert!(ticks.iter().any(|t| t["phase"] == "during"));
    assert!(
        ticks
            .iter()
            .map(|t| t["started"].as_u64().unwrap())
            .sum::<u64>()
            > 0,
        "jobs started"
    );
    assert!(
        ticks
            .windows(2)
            .all(|w| w[0]["t_s"].as_f64() < w[1]["t_s"].as_f64()),
        "in time order"
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("dead tuples of the jobs table"));

    // The Markdown: the tables, the targets, and the plot beside it.
    let o = run(
        Some(&db),
        &[
            "bench",
            "held-snapshot",
            "--quick",
            "--markdown",
            "--duration",
            "2s",
            "--plot",
            plot_arg,
        ],
    );
    let md = ok(&o);
    for words in [
        "## A held snapshot: 2 s at 1,000 jobs/s",
        "### The highest rate without a held snapshot",
        "### Minute by minute",
        "![The held-snapshot run, second by second](held.svg)",
        "| the highest offered rate sustained without a held snapshot (>= 95 % started) |",
        "| a snapshot held 2 s at 1,000 jobs/s offered: >= 95 % of the offered jobs start while it is held |",
    ] {
        assert!(md.contains(words), "{words}\n{md}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert_no_scratch_schemas(&db).await;
}

/// `--plot` belongs to the held-snapshot scenario: elsewhere it is refused, and nothing runs.
#[tokio::test]
async fn bench_plot_elsewhere_is_refused() {
    let db = TestDb::new().await;
    let o = run(Some(&db), &["bench", "footprint", "--plot", "x.svg"]);
    fails(&o, 2, "--plot is for the held-snapshot scenario alone");
    assert!(!std::path::Path::new("x.svg").exists());
}

/// `--points FILE` keeps every measured point beside the Markdown report (scripts/bench.sh
/// keeps a run's in target/bench/points.jsonl); a FILE that cannot be written is refused
/// before anything runs.
#[tokio::test]
async fn bench_points_writes_every_point_beside_the_report() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("skiplock-points-{}", db.schema()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("points.jsonl");
    let o = run(
        Some(&db),
        &[
            "bench",
            "enqueue",
            "--quick",
            "--markdown",
            "--points",
            file.to_str().unwrap(),
        ],
    );
    assert!(ok(&o).contains("## Enqueue"), "the report as ever");
    let points: Vec<serde_json::Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(json)
        .collect();
    let json_points = ok(&run(Some(&db), &["bench", "enqueue", "--quick", "--json"]))
        .lines()
        .count();
    assert_eq!(points.len(), json_points, "{points:?}");
    assert!(
        points
            .iter()
            .all(|p| p["scenario"] == "enqueue" && p["jobs_per_s"].is_number()),
        "{points:?}"
    );
    let missing = dir.join("no-such-dir").join("points.jsonl");
    let o = run(
        Some(&db),
        &[
            "bench",
            "enqueue",
            "--quick",
            "--points",
            missing.to_str().unwrap(),
        ],
    );
    fails(&o, 1, "cannot write");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("Enqueue"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_no_scratch_schemas(&db).await;
}

/// Without the peer's binary, `bench peers` measures nothing and says how to build it.
#[tokio::test]
async fn bench_peers_without_the_peer_says_how_to_build_it() {
    let db = TestDb::new().await;
    let o = cmd(Some(&db), &["bench", "peers", "--quick", "--markdown"])
        .env(
            "SKIPLOCK_PEER_GRAPHILE",
            "/nonexistent/skiplock-peer-graphile",
        )
        .output()
        .unwrap();
    let md = ok(&o);
    assert!(md.contains("\n## Against graphile_worker\n\nNot measured: SKIPLOCK_PEER_GRAPHILE names /nonexistent/skiplock-peer-graphile, which is not a file: build it with `cargo build --release -p skiplock-bench --features peers --bin skiplock-peer-graphile`"), "{md}");
    assert!(md.contains("| not measured: "), "{md}");
}

/// Each split of `bench processes` is a line of the report's targets, beside its section's
/// own verdict.
#[tokio::test]
async fn bench_processes_lists_each_split_among_the_targets() {
    let db = TestDb::new().await;
    let o = run(Some(&db), &["bench", "processes", "--quick", "--markdown"]);
    let md = ok(&o);
    let targets = md
        .split("\n## Targets\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no targets: {md}"));
    assert!(
        targets.contains("| 2 processes of concurrency 100: >= 0.90x one process of 200 | "),
        "{targets}"
    );
    assert_no_scratch_schemas(&db).await;
}

/// A task of a benchmark that fails is a runtime error (exit 1), not a refused input (exit
/// 2): here the worker processes of `bench processes` cannot start, because the command's
/// own file (which it starts them from) is gone once it runs.
#[tokio::test]
async fn a_benchmark_task_that_fails_is_a_runtime_error() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("skiplock-gone-{}", db.schema()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("skiplock");
    std::fs::copy(assert_cmd::cargo::cargo_bin!("skiplock"), &copy).unwrap();
    let c = cmd(Some(&db), &["bench", "processes", "--quick"]);
    // The copy may still be open for writing in a child another test's thread forked while
    // it was being written (until that child execs): the kernel then refuses to run it for
    // a moment ("Text file busy"), so try again.
    let mut tries = 0;
    let child = loop {
        match Command::new(&copy)
            .env_remove("DATABASE_URL")
            .env_remove("SKIPLOCK_HOME")
            .args(c.get_args())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.unwrap(),
        }
    };
    // Running, so the file can go.
    std::fs::remove_dir_all(&dir).unwrap();
    let o = child.wait_with_output().unwrap();
    fails(&o, 1, "cannot start");
}

// ---- `work --exec`: nothing a command starts outlives its attempt ----------------------------

/// A folder of its own for one test, and the command a job runs there: a shell that starts a
/// grandchild (`sleep 300`) and writes its pid to `pid`.
fn grandchild_job(db: &TestDb, name: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("skiplock-{name}-{}", db.schema()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid = dir.join("pid");
    let _ = std::fs::remove_file(&pid);
    (
        pid.clone(),
        format!("sleep 300 & echo $! > {}; wait", pid.display()),
    )
}

/// Whether the process is gone (a zombie waiting for its reaper counts as gone).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// The grandchild's pid, once the job has written it.
async fn grandchild(file: &std::path::Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the job never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asserts the grandchild ends within a few seconds (then kills it, so that a failing run
/// leaves nothing behind).
#[track_caller]
fn assert_gone_soon(pid: i32, when: &str) {
    let start = Instant::now();
    while !gone(pid) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let survived = !gone(pid);
    if survived {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(!survived, "the command's child {pid} survived {when}");
}

#[tokio::test]
async fn exec_timeout_kills_everything_the_command_started() {
    let db = migrated().await;
    let (file, script) = grandchild_job(&db, "exec-timeout");
    ok(&run(Some(&db), &["enqueue", "--max-attempts", "1", "{}"]));
    let started = Instant::now();
    let stats = json(&ok(&run(
        Some(&db),
        &[
            "work",
            "--drain",
            "--json",
            "--timeout",
            "1s",
            "--exec",
            "sh",
            "-c",
            &script,
        ],
    )));
    assert_eq!(stats["failed"], 1, "{stats}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_gone_soon(grandchild(&file).await, "the timeout");
    let last_error: String = db
        .connect()
        .await
        .unwrap()
        .query_one(
            &format!("SELECT last_error FROM \"{}\".jobs", db.schema()),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(last_error, "timeout");
}

#[tokio::test]
async fn exec_leftovers_end_with_the_command() {
    // The command exits at once, leaving `sleep 300` behind (holding its standard error):
    // the job is done at once, and the leftover is killed.
    let db = migrated().await;
    let (file, script) = grandchild_job(&db, "exec-leftover");
    let script = script.replace("; wait", "");
    ok(&run(Some(&db), &["enqueue", "{}"]));
    let started = Instant::now();
    let stats = json(&ok(&run(
        Some(&db),
        &["work", "--drain", "--json", "--exec", "sh", "-c", &script],
    )));
    assert_eq!(stats["done"], 1, "{stats}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_gone_soon(grandchild(&file).await, "the command's exit");
}

#[tokio::test]
async fn exec_sigterm_of_the_worker_stops_every_command_group() {
    let db = migrated().await;
    let (file, script) = grandchild_job(&db, "exec-sigterm");
    let report = file.with_file_name("stdout");
    ok(&run(Some(&db), &["enqueue", "{}"]));
    let mut child = cmd(
        Some(&db),
        &[
            "work",
            "--json",
            "--shutdown-timeout",
            "1s",
            "--exec",
            "sh",
            "-c",
            &script,
        ],
    )
    // Standard output to a file: a pipe would stay open as long as a leftover holds it.
    .stdout(std::fs::File::create(&report).unwrap())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let pid = grandchild(&file).await;
    let stopped = Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    assert_gone_soon(pid, "the worker's shutdown");
    assert!(status.success(), "{status:?}");
    assert!(stopped.elapsed() < Duration::from_secs(15));
    let stats = json(&std::fs::read_to_string(&report).unwrap());
    // Stopped by the shutdown: back in the queue, no attempt spent.
    assert_eq!(stats["handed_back"], 1, "{stats}");
    assert_eq!(
        sql_one(
            &db,
            "SELECT count(*) FROM jobs WHERE status = 'queued' AND attempts = 1 AND max_attempts = 6"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn exec_kill_9_of_the_worker_ends_every_command_group() {
    // A worker killed with SIGKILL cannot act: its commands' guards see it gone and end
    // their groups, so that the job's next attempt never overlaps this one.
    let db = migrated().await;
    let (file, script) = grandchild_job(&db, "exec-kill9");
    let command_pid = file.with_file_name("command");
    let script = format!("echo $$ > {}; {script}", command_pid.display());
    ok(&run(Some(&db), &["enqueue", "{}"]));
    let mut child = cmd(Some(&db), &["work", "--exec", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = grandchild(&file).await;
    let command = grandchild(&command_pid).await;
    assert!(!gone(command) && !gone(pid));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_gone_soon(command, "a kill -9 of the worker");
    assert_gone_soon(pid, "a kill -9 of the worker");
}

#[tokio::test]
async fn exec_a_program_that_cannot_start_and_one_that_starts_clean() {
    let db = migrated().await;
    let id = ok(&run(Some(&db), &["enqueue", "--max-attempts", "1", "{}"]))
        .trim()
        .to_owned();
    // Refused at start (exit 2, one line), before any job is claimed: no attempt is spent
    // on a program that cannot run (more cases in work.rs).
    fails(
        &run(
            Some(&db),
            &[
                "work",
                "--drain",
                "--json",
                "--exec",
                "/nonexistent/skiplock-job",
            ],
        ),
        2,
        "cannot run /nonexistent/skiplock-job: no such file",
    );
    let job = json(&ok(&run(Some(&db), &["show", &id, "--json"])));
    assert_eq!(
        (job["status"].as_str(), job["attempts"].as_i64()),
        (Some("queued"), Some(0))
    );
    ok(&run(Some(&db), &["delete", &id]));
    // The command starts with no standard signal blocked or ignored: the guard's own
    // handling of SIGTERM (blocked) and SIGPIPE (ignored) is not inherited. (The C
    // library's internal real-time signals may show as ignored after any spawn.)
    let id = ok(&run(Some(&db), &["enqueue", "--max-attempts", "1", "{}"]))
        .trim()
        .to_owned();
    ok(&run(
        Some(&db),
        &[
            "work",
            "--drain",
            "--exec",
            "sh",
            "-c",
            "grep -E '^Sig(Blk|Ign)' /proc/self/status >&2; exit 3",
        ],
    ));
    let job = json(&ok(&run(Some(&db), &["show", &id, "--json"])));
    let e = job["last_error"].as_str().unwrap();
    let mask = |name: &str| {
        let hex = e
            .split(name)
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap();
        u64::from_str_radix(hex, 16).unwrap() & 0x7fff_ffff
    };
    assert!(e.starts_with("exit 3: "), "{e}");
    assert_eq!((mask("SigBlk:"), mask("SigIgn:")), (0, 0), "{e}");
}

#[tokio::test]
async fn exec_cancel_of_the_running_job_stops_its_command_group() {
    let db = migrated().await;
    let (file, script) = grandchild_job(&db, "exec-cancel");
    let id = ok(&run(Some(&db), &["enqueue", "{}"])).trim().to_owned();
    let mut child = cmd(
        Some(&db),
        &["work", "--lease", "3s", "--exec", "sh", "-c", &script],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let pid = grandchild(&file).await;
    let r = json(&ok(&run(Some(&db), &["cancel", &id, "--json"])));
    assert_eq!(
        r["cancelled"],
        serde_json::json!([id.parse::<i64>().unwrap()])
    );
    // The next heartbeat (a third of the lease) finds the job gone and cancels it; the
    // worker goes on running.
    let start = Instant::now();
    while !gone(pid) && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let survived = !gone(pid);
    let still_working = matches!(child.try_wait(), Ok(None));
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    assert_gone_soon(pid, "the job's shutdown");
    assert!(
        !survived,
        "the command's child {pid} survived the job's cancellation"
    );
    assert!(still_working, "the worker stopped");
}

// ---- Output to a reader that went away -----------------------------------------------------

/// Runs the command with standard output and error on pipes whose read ends are closed
/// before it writes anything (as `skiplock ... | head -1` ends up); returns its exit code.
fn run_with_closed_pipes(c: &mut Command) -> Option<i32> {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    child.wait().unwrap().code()
}

#[tokio::test]
async fn a_closed_output_pipe_ends_commands_quietly() {
    let db = migrated().await;
    let id = ok(&run(Some(&db), &["enqueue", "{}"])).trim().to_owned();
    for args in [
        vec!["stats", "--json"],
        vec!["stats"],
        vec!["show", &id],
        vec!["show", &id, "--json"],
        vec!["enqueue", "{}"],
        vec!["--help"],
    ] {
        assert_eq!(
            run_with_closed_pipes(&mut cmd(Some(&db), &args)),
            Some(0),
            "skiplock {args:?}"
        );
    }
    // A usage error still says so by its exit status.
    assert_eq!(
        run_with_closed_pipes(&mut cmd(Some(&db), &["show", "nope"])),
        Some(2)
    );
}

#[tokio::test]
async fn a_worker_whose_log_reader_went_away_finishes_its_work() {
    let db = migrated().await;
    for i in 0..50 {
        ok(&run(
            Some(&db),
            &[
                "enqueue",
                "--kind",
                "sleep",
                &format!("{{\"ms\":{}}}", i % 5),
            ],
        ));
    }
    let code = run_with_closed_pipes(
        cmd(Some(&db), &["work", "--drain", "--json"]).env("RUST_LOG", "debug"),
    );
    assert_eq!(code, Some(0));
    assert_eq!(
        sql_one(&db, "SELECT count(*) FROM jobs WHERE status = 'done'").await,
        50
    );
}

#[tokio::test]
async fn enqueue_with_a_uniqueness_rule_says_inserted_or_duplicate() {
    let db = migrated().await;
    let one = |payload: &str| {
        json(&ok(&run(
            Some(&db),
            &["enqueue", "--unique-key", "k", "--json", payload],
        )))
    };
    let first = one(r#"{"v":1}"#);
    assert_eq!(first["result"], "inserted");
    let id = first["id"].as_i64().unwrap();
    let again = one(r#"{"v":2}"#);
    assert_eq!(
        (again["result"].as_str(), again["id"].as_i64()),
        (Some("duplicate"), Some(id))
    );
    // Without --json: the id, and the word duplicate after a duplicate's.
    let plain = ok(&run(Some(&db), &["enqueue", "--unique-key", "k", "{}"]));
    assert_eq!(plain.trim(), format!("{id} duplicate"));

    // Replace: the queued duplicate takes the new payload.
    let replaced = ok(&run(
        Some(&db),
        &[
            "enqueue",
            "--unique-key",
            "k",
            "--on-conflict",
            "replace",
            "--json",
            r#"{"v":3}"#,
        ],
    ));
    assert_eq!(json(&replaced)["id"].as_i64(), Some(id));
    let shown = json(&ok(&run(Some(&db), &["show", &id.to_string(), "--json"])));
    assert_eq!(shown["payload"]["v"], 3);

    // Standard input: one line per job, in order, duplicates within the input included.
    let o = run_stdin(
        &db,
        &[
            "enqueue",
            "--unique-fields",
            "a,b",
            "--unique-period",
            "1h",
            "--json",
        ],
        b"{\"a\":1,\"b\":1,\"c\":1}\n{\"a\":1,\"b\":1,\"c\":2}\n{\"a\":2,\"b\":1}\n",
    );
    let lines: Vec<serde_json::Value> = ok(&o).lines().map(json).collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["result"], "inserted");
    assert_eq!(lines[1]["result"], "duplicate");
    assert_eq!(lines[1]["id"], lines[0]["id"]);
    assert_eq!(lines[2]["result"], "inserted");
    let o = run_stdin(
        &db,
        &["enqueue", "--unique-by-args", "--unique-by-queue", "--json"],
        b"{}\n{}\n",
    );
    let lines: Vec<serde_json::Value> = ok(&o).lines().map(json).collect();
    assert_eq!(
        (lines[0]["result"].as_str(), lines[1]["result"].as_str()),
        (Some("inserted"), Some("duplicate"))
    );

    // A rule's options need a rule.
    let o = run(Some(&db), &["enqueue", "--unique-period", "1h", "{}"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));

    // An operator's retry that would duplicate the active job names it.
    ok(&run(Some(&db), &["cancel", &id.to_string()]));
    let new = one(r#"{"v":4}"#);
    assert_eq!(new["result"], "inserted");
    let o = run(Some(&db), &["retry", &id.to_string()]);
    assert!(!o.status.success());
    let e = err(&o);
    assert!(
        e.contains(&format!(
            "job {} is active with the same unique key",
            new["id"]
        )),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}

/// `--key` and `--sequence` reach the jobs table, for one job, for standard input and with a
/// uniqueness rule; `enqueue` still prints just the id, and its `--json` names them. The
/// later members of a sequence are held until their turn.
#[tokio::test]
async fn enqueue_with_a_key_and_a_sequence_stores_them() {
    let db = migrated().await;
    let row = |id: i64| {
        let db = &db;
        async move {
            let c = db.connect().await.unwrap();
            let r = c
                .query_one(
                    &format!(
                        "SELECT key, sequence, held FROM \"{}\".jobs WHERE id = $1",
                        db.schema()
                    ),
                    &[&id],
                )
                .await
                .unwrap();
            let t: (Option<String>, Option<String>, Option<String>) =
                (r.get(0), r.get(1), r.get(2));
            t
        }
    };
    let some = |s: &str| Some(s.to_owned());

    let first = ok(&run(
        Some(&db),
        &[
            "enqueue",
            "--key",
            "tenant-1",
            "--sequence",
            "order:42",
            "{}",
        ],
    ));
    let first: i64 = first.trim().parse().expect("just the id");
    assert_eq!(row(first).await, (some("tenant-1"), some("order:42"), None));
    let second = json(&ok(&run(
        Some(&db),
        &[
            "enqueue",
            "--key",
            "tenant-1",
            "--sequence",
            "order:42",
            "--json",
            "{}",
        ],
    )));
    assert_eq!(second["key"], "tenant-1");
    assert_eq!(second["sequence"], "order:42");
    let second = second["id"].as_i64().unwrap();
    assert_eq!(
        row(second).await,
        (some("tenant-1"), some("order:42"), some("sequence")),
        "the second member waits for the first"
    );
    // Without them, --json says null.
    let plain = json(&ok(&run(Some(&db), &["enqueue", "--json", "{}"])));
    assert!(
        plain["key"].is_null() && plain["sequence"].is_null(),
        "{plain}"
    );
    assert_eq!(row(plain["id"].as_i64().unwrap()).await, (None, None, None));
    // Every character a key may hold, 128 of them.
    let long = format!("{}{}", "a_.:@/-Z9", "k".repeat(119));
    let id = ok(&run(Some(&db), &["enqueue", "--key", &long, "{}"]));
    assert_eq!(row(id.trim().parse().unwrap()).await.0, Some(long));

    // Standard input: every line's job gets them, and joins the sequence in line order.
    let o = run_stdin(
        &db,
        &["enqueue", "--key", "t2", "--sequence", "batch-7", "--json"],
        b"{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n",
    );
    let out = json(&ok(&o));
    assert_eq!(
        (&out["key"], &out["sequence"]),
        (&"t2".into(), &"batch-7".into())
    );
    let ids: Vec<i64> = out["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    // Every line's job has them; the first member is ready and the later ones wait.
    assert_eq!(row(ids[0]).await, (some("t2"), some("batch-7"), None));
    for id in &ids[1..] {
        assert_eq!(
            row(*id).await,
            (some("t2"), some("batch-7"), some("sequence"))
        );
    }

    // With a uniqueness rule too.
    let u = json(&ok(&run(
        Some(&db),
        &[
            "enqueue",
            "--unique-key",
            "u",
            "--key",
            "t3",
            "--json",
            "{}",
        ],
    )));
    assert_eq!(
        (&u["result"], &u["key"]),
        (&"inserted".into(), &"t3".into())
    );
    assert_eq!(row(u["id"].as_i64().unwrap()).await.0, some("t3"), "{u}");

    // `show` prints them, and says that a member waits for its turn.
    let second = ids[1].to_string();
    let shown = json(&ok(&run(Some(&db), &["show", &second, "--json"])));
    assert_eq!(
        (&shown["key"], &shown["sequence"], &shown["held"]),
        (&"t2".into(), &"batch-7".into(), &"sequence".into()),
        "{shown}"
    );
    let text = ok(&run(Some(&db), &["show", &second]));
    assert!(text.contains("key          t2"), "{text}");
    assert!(
        text.contains("sequence     batch-7 (held: waiting for its turn)"),
        "{text}"
    );

    // The listing counts the held ones (at least the second of order:42 and two of batch-7).
    let list = json(&ok(&run(Some(&db), &["queue", "list", "--json"])));
    let held = sql_one(&db, "SELECT count(*) FROM jobs WHERE held IS NOT NULL").await;
    assert!(held >= 3, "{held}");
    assert_eq!(list["queues"][0]["held"], held, "{list}");
}

/// Output that cannot be written (a full disk) fails the command: exit 1 and one line, for
/// every command that prints; a reader that went away (a closed pipe) is not such a failure.
#[tokio::test]
async fn output_that_cannot_be_written_fails_the_command() {
    let db = migrated().await;
    let id = ok(&run(Some(&db), &["enqueue", "{}"])).trim().to_owned();
    for args in [
        vec!["stats"],
        vec!["stats", "--json"],
        vec!["show", &id],
        vec!["show", &id, "--json"],
        vec!["queue", "list"],
        vec!["queue", "list", "--json"],
        vec!["queue", "limit", "default"],
        vec!["queue", "limit", "default", "--json"],
        vec!["enqueue", "{}"],
        vec!["reap"],
        vec!["prune", "--json"],
        vec!["schedule", "list"],
        vec!["migrate"],
        vec!["--help"],
        vec!["stats", "--help"],
        vec!["--version"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = cmd(Some(&db), &args).stdout(full).output().unwrap();
        fails(&o, 1, "could not write the output");
        assert!(err(&o).contains("No space left on device"), "{}", err(&o));
    }
}

/// A usage error keeps what clap names: the missing argument, the allowed values, the
/// suggestion, on one line.
#[test]
fn usage_errors_name_the_argument_and_the_allowed_values() {
    for (args, needles) in [
        (vec!["show"], vec!["required", "<ID>"]),
        (vec!["queue", "pause"], vec!["required", "<NAME>"]),
        (vec!["queue", "limit"], vec!["required", "<NAME>"]),
        (
            vec!["queue", "limit", "q", "--rate", "10/2d"],
            vec!["--rate <N/DURATION|off>", "\"2d\" is outside 1ms..=1d"],
        ),
        (
            vec!["queue", "limit", "q", "--concurrency", "-1"],
            vec!["--concurrency <N|off>", "outside 1..=1000000"],
        ),
        (
            vec!["queue", "limit", "q", "--by", "me"],
            vec!["required", "--concurrency", "--per-key", "--rate"],
        ),
        (vec!["schedule", "add", "x"], vec!["--cron"]),
        (
            vec!["lab", "nope"],
            vec!["invalid value 'nope'", "possible values", "skip-locked"],
        ),
        (
            vec!["bench", "zzz"],
            vec!["possible values", "throughput", "footprint"],
        ),
        (
            vec!["stats", "--jsn"],
            vec!["'--jsn'", "similar", "'--json'"],
        ),
        (
            vec!["enqueue", "--max-attempts"],
            vec!["a value is required", "--max-attempts"],
        ),
        (
            vec!["frobnicate"],
            vec!["unrecognized subcommand", "frobnicate"],
        ),
    ] {
        let o = run(None, &args);
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        for n in needles {
            assert!(e.contains(n), "{args:?}: {n:?} not in {e:?}");
        }
        assert!(e.ends_with("(see --help)\n"), "{e:?}");
    }
}

/// Messages say each cause once and name no Rust item.
#[tokio::test]
async fn messages_say_each_cause_once_and_name_no_rust_item() {
    let db = migrated().await;
    let o = run(
        None,
        &[
            "--database-url",
            "postgres://app@127.0.0.1:1/db?connect_timeout=2",
            "stats",
        ],
    );
    fails(&o, 1, "could not get a database connection");
    assert_eq!(
        err(&o).matches("error connecting to server").count(),
        1,
        "{}",
        err(&o)
    );
    assert_eq!(
        err(&o).matches("Connection refused").count(),
        1,
        "{}",
        err(&o)
    );
    let big = format!("\"{}\"\n", "x".repeat(1024 * 1024 + 1));
    let o = run_stdin(&db, &["enqueue"], big.as_bytes());
    fails(&o, 2, "the limit is 1048576");
    assert!(
        !err(&o).contains("::") && !err(&o).contains("None"),
        "{}",
        err(&o)
    );
}

/// `show`, `stats` and `queue list` print any run_at that SQL `enqueue()` accepts (before
/// 1970, after 9999, BC), and `show` prints payload numbers exactly as stored.
#[tokio::test]
async fn show_and_the_printers_cope_with_any_run_at_and_keep_numbers_exact() {
    let db = migrated().await;
    let c = db.connect().await.unwrap();
    let s = db.schema();
    let mut ids = Vec::new();
    for at in [
        "1900-01-01",
        "12000-06-01",
        "4000-01-01 BC",
        "1969-12-31 23:59:59",
    ] {
        let id: i64 = c
            .query_one(
                &format!(
                    "SELECT \"{s}\".enqueue('q', '{{\"a\": 1}}'::jsonb, run_at => $1::text::timestamptz)"
                ),
                &[&at],
            )
            .await
            .unwrap()
            .get(0);
        ids.push(id);
    }
    let expect = [
        "1900-01-01T00:00:00Z",
        "+12000-06-01T00:00:00Z",
        "-3999-01-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
    ];
    for (id, want) in ids.iter().zip(expect) {
        let id = id.to_string();
        let text = ok(&run(Some(&db), &["show", &id]));
        assert!(text.contains(&format!("run_at       {want}")), "{text}");
        let j = json(&ok(&run(Some(&db), &["show", &id, "--json"])));
        assert_eq!(j["run_at"], want, "{j}");
    }
    ok(&run(Some(&db), &["stats"]));
    ok(&run(Some(&db), &["stats", "--json"]));
    ok(&run(Some(&db), &["queue", "list"]));
    ok(&run(Some(&db), &["queue", "list", "--json"]));
    ok(&run(Some(&db), &["queue", "pause", "q"]));
    ok(&run(Some(&db), &["queue", "list", "--json"]));

    let exact = r#"{"big": 123456789012345678901234567890, "f": 1.0000000000000001, "u": 12345678901234567890}"#;
    let id = ok(&run(Some(&db), &["enqueue", exact])).trim().to_owned();
    let text = ok(&run(Some(&db), &["show", &id]));
    for n in [
        "123456789012345678901234567890",
        "1.0000000000000001",
        "12345678901234567890",
    ] {
        assert!(text.contains(n), "{n} not in {text}");
    }
    let line = ok(&run(Some(&db), &["show", &id, "--json"]));
    for n in [
        ": 123456789012345678901234567890",
        ": 1.0000000000000001",
        ": 12345678901234567890",
    ] {
        assert!(line.contains(n), "{n} not in {line}");
    }
    assert_eq!(json(&line)["id"].as_i64(), id.parse().ok());
}

/// An empty database URL is a mistake, never a request for the embedded database: refused
/// with exit 2, and no embedded database is created.
#[test]
fn an_empty_database_url_is_refused() {
    let home = std::env::temp_dir().join(format!("skiplock-cli-empty-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    for (flag, env) in [
        (Some(""), None),
        (Some("  "), None),
        (None, Some("")),
        (None, Some(" ")),
    ] {
        for args in [
            vec!["stats"],
            vec!["enqueue", "{}"],
            vec!["migrate"],
            vec!["work", "--drain"],
        ] {
            let mut c = cmd(None, &[]);
            if let Some(f) = flag {
                c.args(["--database-url", f]);
            }
            if let Some(v) = env {
                c.env("DATABASE_URL", v);
            }
            let o = c.args(&args).env("SKIPLOCK_HOME", &home).output().unwrap();
            fails(&o, 2, "the database URL is empty");
        }
    }
    assert!(!home.exists(), "no embedded database was created");
}

/// The embedded database keeps its port across a stop, so that URLs handed out before it
/// (DATABASE_URL, a running worker's) still reach it; another port only when that one is
/// taken, and then said on stderr. On it, a --schema that does not exist is refused by every
/// command but `migrate` (exit 2, naming `migrate`), and nothing is created.
#[test]
fn the_embedded_database_keeps_its_port_and_refuses_an_unknown_schema() {
    if skiplock_testdb::find_pg_bin().is_err() {
        return;
    }
    let home = std::env::temp_dir().join(format!("skiplock-cli-port-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = cmd(None, &["pg", "stop"])
                .env("SKIPLOCK_HOME", &self.0)
                .output();
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(home.clone());
    let with_home = |args: &[&str]| {
        cmd(None, args)
            .env("SKIPLOCK_HOME", &home)
            .output()
            .unwrap()
    };
    let url = ok(&with_home(&["pg", "url"])).trim().to_owned();
    ok(&with_home(&["pg", "stop"]));
    let o = with_home(&["stats"]);
    ok(&o);
    assert_eq!(ok(&with_home(&["pg", "url"])).trim(), url, "the same port");
    assert!(!err(&o).contains("warning"), "{}", err(&o));

    // A typed schema that does not exist: refused, and not created.
    for args in [
        vec!["--schema", "typo", "stats"],
        vec!["--schema", "typo", "enqueue", "{}"],
        vec!["--schema", "typo", "queue", "list"],
        vec!["--schema", "typo", "show", "1"],
        vec!["--schema", "typo", "retry", "1"],
        vec!["--schema", "typo", "reap"],
        vec!["--schema", "typo", "prune"],
        vec!["--schema", "typo", "schedule", "list"],
        vec!["--schema", "typo", "work", "--drain"],
    ] {
        fails(&with_home(&args), 2, "skiplock --schema typo migrate");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let schemas = |name: &'static str| {
        let url = url.clone();
        rt.block_on(async move {
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                    &[&name],
                )
                .await
                .unwrap()
                .get(0);
            n
        })
    };
    assert_eq!(schemas("typo"), 0, "no schema was created");
    // migrate creates it; then it is used like any other.
    ok(&with_home(&["--schema", "typo", "migrate"]));
    ok(&with_home(&["--schema", "typo", "stats"]));
    assert_eq!(schemas("typo"), 1);

    // Its port taken by another program: another one, said on stderr.
    ok(&with_home(&["pg", "stop"]));
    let port: u16 = url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .unwrap()
        .parse()
        .unwrap();
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let o = with_home(&["pg", "url"]);
    let moved = ok(&o).trim().to_owned();
    assert_ne!(moved, url);
    assert!(
        err(&o).contains(&format!("port {port}")) && err(&o).contains("is taken"),
        "{}",
        err(&o)
    );
    drop(squatter);
    // And it keeps the new one from then on.
    ok(&with_home(&["pg", "stop"]));
    assert_eq!(ok(&with_home(&["pg", "url"])).trim(), moved);
}

/// The case-by-case bad-input table of docs/RELIABILITY.md, run as written: every command
/// refuses its row with the exit status shown and one `error:` line naming the text shown,
/// every `sql:` row fails with its SQLSTATE and text, nothing panics, and nothing refused is
/// written.
#[tokio::test]
async fn every_case_of_the_bad_input_table_is_refused_with_one_line() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/RELIABILITY.md"
    ))
    .unwrap();
    let section = doc
        .split("### Every command and SQL function, case by case")
        .nth(1)
        .expect("the table's heading");
    let section = section.split("\n#").next().unwrap();
    let cell = |c: &str| c.trim().trim_matches('`').to_owned();
    let rows: Vec<(u32, String, i64, String)> = section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| #"))
        .map(|l| {
            let c: Vec<&str> = l.split('|').collect();
            assert_eq!(c.len(), 6, "{l}");
            (
                c[1].trim().parse().unwrap(),
                cell(c[2]),
                c[3].trim().parse().unwrap(),
                cell(c[4]),
            )
        })
        .collect();
    // With the 32 rows of the table above it, at least 150 cases.
    assert!(rows.len() + 32 >= 150, "{} rows", rows.len());
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.0 as usize, 33 + i, "rows are numbered in order");
    }

    let db = migrated().await;
    let sql = db.connect().await.unwrap();
    sql.batch_execute(&format!("SET search_path TO \"{}\"", db.schema()))
        .await
        .unwrap();
    let mut failures = Vec::new();
    for (n, input, code, needle) in &rows {
        if let Some(statement) = input.strip_prefix("sql: ") {
            let Err(e) = sql.batch_execute(statement).await else {
                failures.push(format!("row {n}: {statement} was accepted"));
                continue;
            };
            let Some(db_err) = e.as_db_error() else {
                failures.push(format!("row {n}: {e}"));
                continue;
            };
            if db_err.code().code() != code.to_string()
                || !db_err.message().contains(needle.as_str())
                || db_err.message().contains('\n')
            {
                failures.push(format!(
                    "row {n}: {} {:?}, not {code} naming {needle:?}",
                    db_err.code().code(),
                    db_err.message()
                ));
            }
            continue;
        }
        let Some(args) = shlex::split(input) else {
            failures.push(format!("row {n}: {input} does not split into arguments"));
            continue;
        };
        let mut c = cmd(None, &[]);
        if args[0] == "--database-url" {
            // Its own URL; the default schema.
        } else if args[0] == "--schema" {
            c.args(["--database-url", db.url()]);
        } else {
            c.args(["--database-url", db.url(), "--schema", db.schema()]);
        }
        let o = c.args(&args).stdin(Stdio::null()).output().unwrap();
        let e = err(&o);
        let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
        if o.status.code() != Some(*code as i32)
            || lines.len() != 1
            || !lines[0].starts_with("error: ")
            || !lines[0].contains(needle.as_str())
            || e.contains("panicked")
        {
            failures.push(format!(
                "row {n}: {input}: exit {:?}, not {code} with one line naming {needle:?}: {e:?}",
                o.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for table in ["jobs", "schedules", "queues"] {
        let n: i64 = sql
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "nothing refused was written to {table}");
    }
}
