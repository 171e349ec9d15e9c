//! `skiplock work` and connection errors: a permanent one ends the command with one line and
//! exit 1 after a few tries, instead of retrying for ever.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use skiplock_testdb::TestDb;

#[tokio::test]
async fn work_on_a_missing_database_exits_1_with_one_line() {
    let db = TestDb::new().await;
    let url = db.url().replace("/postgres", "/no_such_database");
    assert_ne!(url, db.url());
    let started = Instant::now();
    let mut child = Command::new(assert_cmd::cargo::cargo_bin!("skiplock"))
        .env_remove("DATABASE_URL")
        .env_remove("SKIPLOCK_HOME")
        .args(["--database-url", &url, "work"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Give it 30 s before calling it a hang (it should need about 10).
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("skiplock work is still retrying a missing database after 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(15), "took {took:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("no_such_database"), "{err}");
    assert!(lines[0].contains("does not exist"), "{err}");
}
