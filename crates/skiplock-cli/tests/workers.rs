//! `skiplock workers` and the attempt history in `skiplock show`: the real binary against a
//! real server.
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

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// A worker of `work --exec` registers and is stopped when it drains; its failed commands
/// are in the jobs' history, which `show` prints (text and JSON).
#[tokio::test]
async fn a_drained_exec_worker_is_listed_and_its_failures_are_shown() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    assert!(ok(&run(&db, &["workers"])).contains("(no worker registered in the last day)"));
    let dir = std::env::temp_dir().join(format!("skiplock-workers-{}", db.schema()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("job.sh");
    std::fs::write(&script, "#!/bin/sh\necho 'it went boom' >&2\nexit 3\n").unwrap();
    let id = ok(&run(
        &db,
        &[
            "enqueue",
            "--kind",
            "shell",
            "--queue",
            "ex",
            "--max-attempts",
            "1",
            "{}",
        ],
    ))
    .trim()
    .to_owned();
    ok(&run(
        &db,
        &[
            "work",
            "--queue",
            "ex=2",
            "--drain",
            "--exec",
            "sh",
            script.to_str().unwrap(),
        ],
    ));

    let list = json(&ok(&run(&db, &["workers", "--json"])));
    let workers = list["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 1, "{list}");
    let w = &workers[0];
    assert_eq!(w["state"], "gone");
    assert_eq!(w["queues"], serde_json::json!({"ex": 2}));
    assert_eq!(w["concurrency"], 2);
    assert!(w["pid"].as_i64().unwrap() > 0);
    assert!(w["stopped_at"].is_string(), "{w}");
    let text = ok(&run(&db, &["workers"]));
    assert!(text.contains(" gone ") && text.contains("ex=2"), "{text}");

    let job = json(&ok(&run(&db, &["show", &id, "--json"])));
    assert_eq!(job["status"], "failed");
    let errors = job["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{job}");
    assert_eq!(errors[0]["attempt"], 1);
    assert_eq!(errors[0]["error"], "exit 3: it went boom");
    assert!(errors[0]["ran_ms"].is_i64());
    let text = ok(&run(&db, &["show", &id]));
    assert!(
        text.lines()
            .any(|l| l.starts_with("errors       #1 ") && l.ends_with(": exit 3: it went boom")),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A bad option is one line and exit 2.
#[tokio::test]
async fn workers_refuses_a_bad_option() {
    let db = TestDb::new().await;
    let o = run(&db, &["workers", "--jsn"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        e.lines().filter(|l| l.starts_with("error")).count(),
        1,
        "{e}"
    );
}
