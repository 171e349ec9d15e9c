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

/// One SQL value of the test's schema (`{s}` stands for the quoted schema).
async fn sql<T>(db: &TestDb, q: &str) -> T
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    let c = db.connect().await.unwrap();
    let q = q.replace("{s}", &format!("\"{}\"", db.schema()));
    c.query_one(&q, &[]).await.unwrap().get(0)
}

/// The `queue list --json` entry of `name`.
fn listed(db: &TestDb, name: &str) -> serde_json::Value {
    let list = json(&ok(&run(db, &["queue", "list", "--json"])));
    list["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == name)
        .unwrap_or_else(|| panic!("{name} not listed: {list}"))
        .clone()
}

/// `queue limit` sets the three limits, keeps the ones an option does not name, lifts one
/// with `off`, prints them without an option, and `queue list` and `stats` show them.
#[tokio::test]
async fn queue_limit_sets_merges_lifts_and_lists_the_limits() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));

    // A queue with no job yet is accepted: no --create.
    let out = ok(&run(
        &db,
        &[
            "queue",
            "limit",
            "mail",
            "--concurrency",
            "5",
            "--per-key",
            "2",
            "--rate",
            "100/1s",
            "--by",
            "ops ticket 7",
        ],
    ));
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains("queue mail now has concurrency 5, per key 2, rate 100/1s")
            && out.contains(&format!("schema {}", db.schema())),
        "{out}"
    );
    let q = listed(&db, "mail");
    assert_eq!(
        (&q["concurrency"], &q["per_key"], &q["rate"]),
        (&5.into(), &2.into(), &"100/1s".into()),
        "{q}"
    );
    assert_eq!(q["rate_limit"], 100);
    assert_eq!(q["rate_period_s"], 1.0);
    assert_eq!(q["limits_by"], "ops ticket 7");
    assert_eq!(q["held"], 0);
    assert_eq!(q["over_limit"], false);
    assert!(q["bound"].is_null(), "{q}");
    let row: (i32, i32, i32, i64) = {
        let c = db.connect().await.unwrap();
        let r = c
            .query_one(
                &format!(
                    "SELECT concurrency, per_key, rate_limit, rate_period_us FROM \"{}\".queues \
                     WHERE name = 'mail'",
                    db.schema()
                ),
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    assert_eq!(row, (5, 2, 100, 1_000_000));

    // A partial update keeps the others.
    let out = ok(&run(&db, &["queue", "limit", "mail", "--rate", "5/250ms"]));
    assert!(
        out.contains("concurrency 5, per key 2, rate 5/250ms"),
        "{out}"
    );
    let q = listed(&db, "mail");
    assert_eq!(
        (&q["concurrency"], &q["per_key"], &q["rate"]),
        (&5.into(), &2.into(), &"5/250ms".into())
    );
    assert_eq!(q["rate_period_s"], 0.25);
    // The default `by` names the command.
    assert!(
        q["limits_by"]
            .as_str()
            .unwrap()
            .ends_with("(skiplock queue limit)"),
        "{q}"
    );

    // `off` lifts one.
    ok(&run(&db, &["queue", "limit", "mail", "--per-key", "off"]));
    let q = listed(&db, "mail");
    assert!(q["per_key"].is_null(), "{q}");
    assert_eq!(
        (&q["concurrency"], &q["rate"]),
        (&5.into(), &"5/250ms".into())
    );

    // Without an option: the limits in force; with --json, the listing's fields.
    let out = ok(&run(&db, &["queue", "limit", "mail"]));
    assert!(
        out.starts_with("queue mail: concurrency 5, per key off, rate 5/250ms (set by "),
        "{out}"
    );
    let j = json(&ok(&run(&db, &["queue", "limit", "mail", "--json"])));
    assert_eq!(j["changed"], false);
    assert_eq!(j["schema"], db.schema());
    assert_eq!(
        (&j["concurrency"], &j["rate"]),
        (&5.into(), &"5/250ms".into())
    );
    let j = json(&ok(&run(
        &db,
        &["queue", "limit", "mail", "--concurrency", "7", "--json"],
    )));
    assert_eq!(
        (&j["changed"], &j["concurrency"]),
        (&true.into(), &7.into())
    );
    // The same limits again change nothing.
    let out = ok(&run(&db, &["queue", "limit", "mail", "--concurrency", "7"]));
    assert!(
        out.contains("already has") && out.contains("nothing changed"),
        "{out}"
    );

    // The listing's text and stats show them.
    ok(&run(&db, &["enqueue", "--queue", "mail", "{}"]));
    let list = ok(&run(&db, &["queue", "list"]));
    assert!(list.lines().next().is_some_and(|l| l.contains("schema")));
    let header = list.lines().nth(1).unwrap();
    for col in ["HELD", "RUNNING", "LIMITS", "BOUND"] {
        assert!(header.contains(col), "{list}");
    }
    let line = list.lines().find(|l| l.starts_with("mail")).unwrap();
    assert!(
        line.contains("0/7") && line.contains("max 7, 5/250ms"),
        "{list}"
    );
    let stats = ok(&run(&db, &["stats"]));
    let line = stats.lines().find(|l| l.starts_with("mail")).unwrap();
    assert!(
        line.contains("max 7, 5/250ms") && line.ends_with("active"),
        "{stats}"
    );
    let stats = json(&ok(&run(&db, &["stats", "--json"])));
    let q = &stats["queues"][0];
    assert_eq!(
        (&q["queue"], &q["concurrency"]),
        (&"mail".into(), &7.into())
    );
    assert_eq!((&q["rate"], &q["held"]), (&"5/250ms".into(), &0.into()));
    assert!(q["per_key"].is_null(), "{q}");

    // Every limit off: none left, and the rate window's starts are forgotten.
    let out = ok(&run(
        &db,
        &[
            "queue",
            "limit",
            "mail",
            "--concurrency",
            "off",
            "--rate",
            "off",
        ],
    ));
    assert!(out.contains("queue mail now has no limits"), "{out}");
    let q = listed(&db, "mail");
    assert!(q["concurrency"].is_null() && q["rate"].is_null(), "{q}");
    let limited: bool = sql(&db, "SELECT limited FROM {s}.queues WHERE name = 'mail'").await;
    assert!(!limited);
    assert_eq!(
        ok(&run(&db, &["queue", "limit", "mail"])).trim(),
        "queue mail: no limits"
    );
}

/// Every bad value is a usage error (exit 2) on one line naming the option and its range,
/// and stores nothing: no `queues` row on a fresh schema, the limits unchanged on a limited
/// queue.
#[tokio::test]
async fn queue_limit_refuses_bad_values_with_one_line_and_stores_nothing() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    let long_by = "x".repeat(257);
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--concurrency", "0"],
            vec!["--concurrency", "1..=1000000"],
        ),
        (
            vec!["--concurrency", "-1"],
            vec!["--concurrency", "1..=1000000"],
        ),
        (
            vec!["--concurrency", "abc"],
            vec!["--concurrency", "1..=1000000"],
        ),
        (
            vec!["--concurrency", "1000001"],
            vec!["--concurrency", "1..=1000000"],
        ),
        (
            vec!["--concurrency", "1.5"],
            vec!["--concurrency", "1..=1000000"],
        ),
        (
            vec!["--concurrency", ""],
            vec!["--concurrency", "1..=1000000"],
        ),
        (vec!["--per-key", "0"], vec!["--per-key", "1..=1000000"]),
        (vec!["--per-key", "-3"], vec!["--per-key", "1..=1000000"]),
        (vec!["--rate", "0/1s"], vec!["--rate", "1..=1000000"]),
        (vec!["--rate", "-1/1s"], vec!["--rate", "1..=1000000"]),
        (vec!["--rate", "10/0s"], vec!["--rate", "1ms..=1d"]),
        (vec!["--rate", "10/999us"], vec!["--rate", "1ms..=1d"]),
        (vec!["--rate", "10/2d"], vec!["--rate", "1ms..=1d"]),
        (vec!["--rate", "10/soon"], vec!["--rate", "1ms..=1d"]),
        (vec!["--rate", "abc"], vec!["--rate", "N/DURATION"]),
        (vec!["--rate", "10/"], vec!["--rate", "has no period"]),
        (vec!["--rate", "10"], vec!["--rate", "N/DURATION"]),
        (vec!["--rate", "1000001/1s"], vec!["--rate", "1..=1000000"]),
        // A good value beside a bad one: nothing of it is stored either.
        (
            vec!["--concurrency", "5", "--rate", "10/2d"],
            vec!["--rate", "1ms..=1d"],
        ),
        (vec!["--by", "ops"], vec!["--concurrency", "--rate"]),
        (
            vec!["--concurrency", "5", "--by", &long_by],
            vec!["limits set by", "256"],
        ),
    ];
    let check = |name: &str, extra: &[&str], needles: &[&str]| {
        let mut args = vec!["queue", "limit", name];
        args.extend_from_slice(extra);
        let o = run(&db, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: {n:?} not in {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    };
    for (extra, needles) in &cases {
        check("fresh", extra, needles);
    }
    for name in ["", "a b", "q'; DROP TABLE jobs;--"] {
        check(name, &["--concurrency", "5"], &["invalid queue name"]);
        check(name, &[], &["invalid queue name"]);
    }
    let rows: i64 = sql(&db, "SELECT count(*) FROM {s}.queues").await;
    assert_eq!(rows, 0, "nothing was stored");

    // On a limited queue, a refused change leaves every limit as it was.
    ok(&run(
        &db,
        &[
            "queue",
            "limit",
            "mail",
            "--concurrency",
            "3",
            "--per-key",
            "1",
            "--rate",
            "10/1m",
            "--by",
            "ops",
        ],
    ));
    let before = listed(&db, "mail");
    for (extra, needles) in &cases {
        check("mail", extra, needles);
    }
    assert_eq!(listed(&db, "mail"), before);
    let rows: i64 = sql(&db, "SELECT count(*) FROM {s}.queues").await;
    assert_eq!(rows, 1);
}

/// The listing shows held jobs, the jobs that run above a lowered concurrency limit, and
/// why the last claim left ready jobs behind.
#[tokio::test]
async fn queue_list_shows_held_jobs_a_lowered_limit_and_the_bound() {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    for _ in 0..3 {
        ok(&run(&db, &["enqueue", "--queue", "mail", "{}"]));
    }
    // Three jobs of one sequence: the first runs when its turn comes, the others are held.
    for _ in 0..3 {
        ok(&run(
            &db,
            &["enqueue", "--queue", "mail", "--sequence", "order-1", "{}"],
        ));
    }
    // The three plain jobs run (as a claim leaves them), then the limit is lowered below.
    let c = db.connect().await.unwrap();
    c.batch_execute(&format!(
        "UPDATE \"{0}\".jobs SET status = 'running', attempts = 1, \
         locked_until = now() + interval '1 hour' WHERE sequence IS NULL",
        db.schema()
    ))
    .await
    .unwrap();
    let out = ok(&run(&db, &["queue", "limit", "mail", "--concurrency", "2"]));
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains("3 jobs run, above its concurrency limit of 2"),
        "{out}"
    );
    c.batch_execute(&format!(
        "UPDATE \"{}\".queues SET limit_bound = 'slots' WHERE name = 'mail'",
        db.schema()
    ))
    .await
    .unwrap();

    let q = listed(&db, "mail");
    assert_eq!((&q["held"], &q["running"]), (&2.into(), &3.into()), "{q}");
    assert_eq!((&q["ready"], &q["queued"]), (&1.into(), &3.into()), "{q}");
    assert_eq!(q["over_limit"], true);
    assert_eq!(q["bound"], "slots");
    let list = ok(&run(&db, &["queue", "list"]));
    let line = list.lines().find(|l| l.starts_with("mail")).unwrap();
    assert!(line.contains("3/2!") && line.contains("slots"), "{list}");
    assert!(
        list.contains("note: queue mail: 3 jobs run, above its concurrency limit of 2"),
        "{list}"
    );
    let stats = ok(&run(&db, &["stats"]));
    let line = stats.lines().find(|l| l.starts_with("mail")).unwrap();
    assert!(
        line.contains("max 2; bound: slots; OVER") && line.ends_with("active"),
        "{stats}"
    );
    let stats = json(&ok(&run(&db, &["stats", "--json"])));
    let q = &stats["queues"][0];
    assert_eq!((&q["held"], &q["over_limit"]), (&2.into(), &true.into()));
    assert_eq!(q["bound"], "slots");

    // Raised again: no longer above.
    ok(&run(
        &db,
        &["queue", "limit", "mail", "--concurrency", "10"],
    ));
    assert_eq!(listed(&db, "mail")["over_limit"], false);
}

#[test]
fn queue_limit_has_help() {
    let o = Command::new(assert_cmd::cargo::cargo_bin!("skiplock"))
        .args(["queue", "limit", "--help"])
        .output()
        .unwrap();
    let help = ok(&o);
    for word in [
        "--concurrency",
        "--per-key",
        "--rate",
        "N/DURATION",
        "off",
        "--by",
    ] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
}
