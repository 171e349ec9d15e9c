//! `skiplock queue list|pause|resume` and the pause in `skiplock stats`: the real binary
//! against a real server.
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

#[tokio::test]
async fn pause_list_stats_and_resume() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    for _ in 0..3 {
        ok(&run(&db, &["enqueue", "--kind", "noop", "{}"]));
    }

    let out = ok(&run(
        &db,
        &["queue", "pause", "default", "--by", "deploy 42"],
    ));
    assert!(out.contains("now PAUSED (by deploy 42)"), "{out}");
    // It says that the pause is not this process's alone.
    assert!(out.contains("EVERY worker of queue default"), "{out}");
    assert!(out.contains("not only one"), "{out}");
    assert!(out.contains(&format!("schema {}", db.schema())), "{out}");
    assert!(out.contains("skiplock queue resume default"), "{out}");
    assert!(out.contains("3 queued jobs wait"), "{out}");
    let again = ok(&run(&db, &["queue", "pause", "default"]));
    assert!(again.contains("already paused"), "{again}");
    assert!(again.contains("by deploy 42"), "{again}");

    // A worker on the paused queue claims nothing.
    let stats = json(&ok(&run(&db, &["work", "--drain", "--json"])));
    assert_eq!(stats["claimed"].as_i64(), Some(0), "{stats}");

    let list = ok(&run(&db, &["queue", "list"]));
    let line = list.lines().find(|l| l.starts_with("default")).unwrap();
    assert!(
        line.contains("paused") && line.contains("deploy 42"),
        "{list}"
    );
    let list = json(&ok(&run(&db, &["queue", "list", "--json"])));
    assert_eq!(list["queues"][0]["queue"], "default");
    assert_eq!(list["queues"][0]["paused"], true);
    assert_eq!(list["queues"][0]["paused_by"], "deploy 42");
    assert_eq!(list["queues"][0]["ready"], 3);

    let stats = ok(&run(&db, &["stats"]));
    let line = stats.lines().find(|l| l.starts_with("default")).unwrap();
    assert!(line.ends_with("PAUSED"), "{stats}");
    let stats = json(&ok(&run(&db, &["stats", "--json"])));
    assert_eq!(stats["queues"][0]["paused"], true);

    let out = ok(&run(&db, &["queue", "resume", "default"]));
    assert!(out.contains("queue default resumed"), "{out}");
    let out = ok(&run(&db, &["queue", "resume", "default"]));
    assert!(out.contains("was not paused"), "{out}");
    let stats = json(&ok(&run(&db, &["work", "--drain", "--json"])));
    assert_eq!(stats["claimed"].as_i64(), Some(3), "{stats}");
    let stats = ok(&run(&db, &["stats"]));
    let line = stats.lines().find(|l| l.starts_with("default")).unwrap();
    assert!(line.ends_with("active"), "{stats}");

    // A bad name is a usage error.
    let o = run(&db, &["queue", "pause", "no spaces"]);
    assert_eq!(o.status.code(), Some(2));
}

/// A typo never creates state: pausing a queue that no job names and that was never paused
/// is refused (exit 2, one line, no `queues` row) unless --create says so; a draining worker
/// on a paused queue says it is paused.
#[tokio::test]
async fn an_unknown_queue_is_refused_unless_created_and_a_drain_says_it_is_paused() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    let rows = || async {
        let c = db.connect().await.unwrap();
        let n: i64 = c
            .query_one(
                &format!("SELECT count(*) FROM \"{}\".queues", db.schema()),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        n
    };

    let o = run(&db, &["queue", "pause", "typo"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("queue typo is unknown"), "{err}");
    assert!(err.contains("--create"), "{err}");
    assert_eq!(rows().await, 0, "nothing was paused");
    let o = run(&db, &["queue", "pause", "typo", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(rows().await, 0, "nothing was paused");

    // Asked for, it is paused before its first job.
    let out = ok(&run(&db, &["queue", "pause", "later", "--create"]));
    assert!(out.contains("queue later is now PAUSED"), "{out}");
    assert_eq!(rows().await, 1);
    // Once a queues row names it, it is known: pausing again needs no flag.
    let again = ok(&run(&db, &["queue", "pause", "later"]));
    assert!(again.contains("already paused"), "{again}");

    // A queue that a queued job names is known.
    ok(&run(
        &db,
        &["enqueue", "--queue", "mail", "--kind", "noop", "{}"],
    ));
    ok(&run(&db, &["queue", "pause", "mail", "--by", "ops"]));
    let o = run(&db, &["work", "--queue", "mail", "--drain", "--json"]);
    let stats = json(&ok(&o));
    assert_eq!(stats["claimed"].as_i64(), Some(0), "{stats}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("queue mail is PAUSED")
            && err.contains("by ops")
            && err.contains("1 queued job(s)")
            && err.contains("skiplock queue resume mail"),
        "{err}"
    );
    // A queue that is not paused is not mentioned.
    let o = run(&db, &["work", "--queue", "default", "--drain"]);
    ok(&o);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("PAUSED"));
}
