//! Periodic jobs through the `skiplock` command: `skiplock schedule ...`, and a schedule
//! fired by several `skiplock work` processes, one of them killed and restarted, with every
//! fire time enqueued exactly once.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use skiplock_testdb::TestDb;

fn cmd(db: &TestDb, args: &[&str]) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin!("skiplock"));
    c.env_remove("DATABASE_URL").env_remove("SKIPLOCK_HOME");
    c.args(["--database-url", db.url(), "--schema", db.schema()]);
    c.args(args);
    c
}

fn run(db: &TestDb, args: &[&str]) -> Output {
    cmd(db, args).output().unwrap()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A failure: the expected exit status and one error line naming `needle`.
#[track_caller]
fn fails(o: &Output, code: i32, needle: &str) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "stderr: {e}");
    assert!(e.contains(needle), "{needle:?} not in {e:?}");
    assert_eq!(
        e.lines().filter(|l| l.starts_with("error")).count(),
        1,
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

async fn migrated() -> TestDb {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    db
}

async fn conn(db: &TestDb) -> tokio_postgres::Client {
    let c = db.connect().await.unwrap();
    c.batch_execute(&format!("SET search_path TO \"{}\"", db.schema()))
        .await
        .unwrap();
    c
}

/// What is wrong with the fire times `got` for the window `(from, to]` of a schedule that
/// fires every second: fire times enqueued more than once, and fire times missing.
fn check_every_second(got: &[SystemTime], from: SystemTime, to: SystemTime) -> Vec<String> {
    let mut seen: BTreeMap<SystemTime, usize> = BTreeMap::new();
    for t in got.iter().filter(|t| **t > from && **t <= to) {
        *seen.entry(*t).or_default() += 1;
    }
    let since = |t: &SystemTime| t.duration_since(from).unwrap_or_default().as_secs_f64();
    let mut problems: Vec<String> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(t, n)| format!("fire at +{:.0}s enqueued {n} times", since(t)))
        .collect();
    let mut t = from + Duration::from_secs(1);
    while t <= to {
        if !seen.contains_key(&t) {
            problems.push(format!("fire at +{:.0}s missing", since(&t)));
        }
        t += Duration::from_secs(1);
    }
    problems
}

#[test]
fn the_checker_reports_duplicates_and_gaps() {
    let from = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
    let s = |n| from + Duration::from_secs(n);
    assert!(check_every_second(&[s(1), s(2), s(3)], from, s(3)).is_empty());
    assert_eq!(
        check_every_second(&[s(1), s(2), s(2), s(4)], from, s(4)),
        ["fire at +2s enqueued 2 times", "fire at +3s missing"]
    );
}

#[tokio::test]
async fn schedule_commands_add_list_pause_resume_run_now_remove() {
    let db = migrated().await;
    let added = ok(&run(
        &db,
        &[
            "schedule",
            "add",
            "nightly",
            "--cron",
            "0 30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "--queue",
            "reports",
            "--kind",
            "report",
            "--missed",
            "catch-up=3",
            r#"{"format":"pdf"}"#,
        ],
    ));
    assert!(added.contains("nightly: added"), "{added}");
    let again = ok(&run(
        &db,
        &[
            "schedule",
            "add",
            "nightly",
            "--cron",
            "0 30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "--queue",
            "reports",
            "--kind",
            "report",
            "--missed",
            "catch-up=3",
            r#"{"format":"pdf"}"#,
            "--json",
        ],
    ));
    assert_eq!(json(&again)["result"], "unchanged");

    let list = json(&ok(&run(&db, &["schedule", "list", "--json"])));
    let s = &list[0];
    assert_eq!(s["name"], "nightly");
    assert_eq!(s["time_zone"], "Europe/Berlin");
    assert_eq!(s["missed"], "catch-up=3");
    assert_eq!(s["payload"]["format"], "pdf");
    assert_eq!(s["paused"], false);
    assert!(
        s["next_fire_at"].as_str().unwrap().ends_with(":30:00Z"),
        "{s}"
    );
    let table = ok(&run(&db, &["schedule", "list"]));
    assert!(
        table.contains("NEXT FIRE") && table.contains("nightly"),
        "{table}"
    );

    assert!(ok(&run(&db, &["schedule", "pause", "nightly"])).contains("paused"));
    let list = json(&ok(&run(&db, &["schedule", "list", "--json"])));
    assert_eq!(list[0]["paused"], true);
    assert!(list[0]["next_fire_at"].is_null());
    let id = json(&ok(&run(
        &db,
        &["schedule", "run-now", "nightly", "--json"],
    )))["id"]
        .as_i64()
        .unwrap();
    let c = conn(&db).await;
    let row = c
        .query_one(
            "SELECT queue, kind, payload::text, schedule FROM jobs WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "reports");
    assert_eq!(row.get::<_, String>(1), "report");
    assert_eq!(row.get::<_, String>(2), r#"{"format": "pdf"}"#);
    assert_eq!(row.get::<_, Option<String>>(3).as_deref(), Some("nightly"));
    let show = ok(&run(&db, &["show", &id.to_string()]));
    assert!(show.contains("report"), "{show}");
    assert!(ok(&run(&db, &["schedule", "resume", "nightly"])).contains("resumed"));
    assert!(ok(&run(&db, &["schedule", "remove", "nightly"])).contains("removed"));
    assert!(ok(&run(&db, &["schedule", "list"])).contains("no schedules"));

    // Bad input: one line, exit 2, nothing stored; an unknown name: one line, exit 1.
    for (args, needle) in [
        (
            vec!["schedule", "add", "x", "--cron", "* * *"],
            "invalid cron expression",
        ),
        (
            vec!["schedule", "add", "x", "--cron", "0 0 31 2 *"],
            "never fires",
        ),
        (
            vec![
                "schedule",
                "add",
                "x",
                "--cron",
                "* * * * *",
                "--tz",
                "Mars/Base",
            ],
            "invalid time zone",
        ),
        (
            vec!["schedule", "add", "bad name", "--cron", "* * * * *"],
            "invalid schedule name",
        ),
        (
            vec![
                "schedule",
                "add",
                "x",
                "--cron",
                "* * * * *",
                "--missed",
                "all",
            ],
            "missed",
        ),
        (
            vec!["schedule", "add", "x", "--cron", "* * * * *", "{oops"],
            "invalid payload",
        ),
    ] {
        fails(&run(&db, &args), 2, needle);
    }
    assert!(ok(&run(&db, &["schedule", "list"])).contains("no schedules"));
    for verb in ["remove", "pause", "resume", "run-now"] {
        fails(
            &run(&db, &["schedule", verb, "ghost"]),
            1,
            "no schedule named",
        );
    }
}

/// `skiplock schedule add` over an existing schedule: a new cron expression (or time zone)
/// starts its cursor at the change, so the next `skiplock work --drain` enqueues nothing from
/// before it; a new payload keeps the cursor, so the fire missed while no worker ran still
/// runs once under `latest`.
#[tokio::test]
async fn schedule_add_with_a_new_timing_starts_over_and_with_a_new_payload_keeps_the_cursor() {
    let db = migrated().await;
    let add = |name: &str, cron: &str, tz: &str, payload: &str| {
        let args = [
            "schedule", "add", name, "--cron", cron, "--tz", tz, "--queue", "periodic", "--kind",
            "noop", "--json", payload,
        ];
        json(&ok(&run(&db, &args)))["result"].clone()
    };
    for name in ["cron", "zone", "kept"] {
        assert_eq!(add(name, "0 * * * *", "UTC", "{}"), "added");
    }
    // As if the hourly schedules last fired two whole hours ago: the last hour's fire was
    // missed (no worker ran, a deploy say).
    let c = conn(&db).await;
    let moved = c
        .query(
            "UPDATE schedules SET last_fire_at = date_trunc('hour', now()) - interval '1 hour' \
             RETURNING last_fire_at + interval '1 hour'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(moved.len(), 3);
    let missed: SystemTime = moved[0].get(0);
    assert_eq!(add("cron", "* * * * * *", "UTC", "{}"), "retimed");
    assert_eq!(add("zone", "0 * * * *", "Asia/Kathmandu", "{}"), "retimed");
    assert_eq!(add("kept", "0 * * * *", "UTC", r#"{"v":2}"#), "updated");
    let text = ok(&run(
        &db,
        &[
            "schedule",
            "add",
            "zone",
            "--cron",
            "0 * * * *",
            "--tz",
            "Asia/Tokyo",
            "--queue",
            "periodic",
            "--kind",
            "noop",
        ],
    ));
    assert!(text.contains("zone: updated with a new timing"), "{text}");
    ok(&run(&db, &["work", "--queue", "periodic=2", "--drain"]));

    let rows = c
        .query(
            "SELECT s.name, j.run_at, s.updated_at, s.last_fire_at, j.payload::text \
             FROM schedules AS s LEFT JOIN jobs AS j ON j.schedule = s.name \
             ORDER BY s.name, j.run_at",
            &[],
        )
        .await
        .unwrap();
    let mut problems = Vec::new();
    let mut kept = Vec::new();
    for r in &rows {
        let name: String = r.get(0);
        let run_at: Option<SystemTime> = r.get(1);
        let changed: SystemTime = r.get(2);
        let cursor: SystemTime = r.get(3);
        if name == "kept" {
            kept.push((run_at, cursor, r.get::<_, Option<String>>(4)));
            continue;
        }
        if run_at.is_some_and(|t| t <= changed) {
            problems.push(format!("{name}: a fire from before the change: {run_at:?}"));
        }
        if cursor + Duration::from_secs(2) <= changed {
            problems.push(format!("{name}: the cursor is not at the change"));
        }
    }
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        kept,
        vec![(Some(missed), missed, Some(r#"{"v": 2}"#.to_owned()))],
        "the missed fire, once, with the new payload"
    );
}

fn spawn_worker(db: &TestDb, log: &std::path::Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    cmd(db, &["work", "--queue", "periodic=4"])
        .env("RUST_LOG", "warn,skiplock=debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Four `skiplock work` processes and a schedule that fires every second for a minute, added
/// with `skiplock schedule add`; halfway one worker is killed (SIGKILL) and started again.
/// Every fire time of the minute is enqueued exactly once, none missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_fire_every_second_once_through_a_kill_and_restart() {
    const WINDOW: u64 = 60;
    let db = migrated().await;
    let dir = std::env::temp_dir().join(format!("skiplock-periodic-{}", db.schema()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = |i: usize| dir.join(format!("worker-{i}.log"));
    let mut workers: Vec<Child> = (0..4).map(|i| spawn_worker(&db, &log(i))).collect();
    // The workers are up (each LISTENs) before the schedule appears.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ok(&run(
        &db,
        &[
            "schedule",
            "add",
            "tick",
            "--cron",
            "* * * * * *",
            "--queue",
            "periodic",
            "--kind",
            "noop",
        ],
    ));
    let c = conn(&db).await;
    let from: SystemTime = c
        .query_one(
            "SELECT last_fire_at FROM schedules WHERE name = 'tick'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let to = from + Duration::from_secs(WINDOW);
    let start = Instant::now();

    tokio::time::sleep(Duration::from_secs(WINDOW / 2)).await;
    workers[1].kill().unwrap();
    workers[1].wait().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    workers[1] = spawn_worker(&db, &log(4));

    // Until the window's last fire is in, and a little longer to catch any late duplicate.
    let deadline = Instant::now() + Duration::from_secs(WINDOW + 30);
    loop {
        let cursor: SystemTime = c
            .query_one(
                "SELECT last_fire_at FROM schedules WHERE name = 'tick'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if cursor >= to || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    ok(&run(&db, &["schedule", "pause", "tick"]));
    for w in &mut workers {
        let _ = Command::new("kill")
            .args(["-TERM", &w.id().to_string()])
            .status();
    }
    for w in &mut workers {
        w.wait().unwrap();
    }

    let got: Vec<SystemTime> = c
        .query(
            "SELECT run_at FROM jobs WHERE schedule = 'tick' ORDER BY run_at",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let problems = check_every_second(&got, from, to);
    assert!(
        problems.is_empty(),
        "after {:?}: {problems:?} (worker logs in {})",
        start.elapsed(),
        dir.display()
    );
    assert!(got.len() >= WINDOW as usize);
    // The jobs were worked too (the kind is the built-in no-op).
    let done: i64 = c
        .query_one(
            "SELECT count(*) FROM jobs WHERE schedule = 'tick' AND status = 'done'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(done >= WINDOW as i64 - 5, "{done} done");
    let _ = std::fs::remove_dir_all(&dir);
}
