//! Jobs that wait for other jobs, as a user drives them from the command: `enqueue --after`,
//! `enqueue --workflow FILE`, the outputs of `work --exec` commands (`SKIPLOCK_OUTPUT`,
//! `SKIPLOCK_PARENT_OUTPUTS`) and what `show` says of a job's parents and children, against
//! a real server.
#![allow(clippy::unwrap_used)]

use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

fn run_stdin(db: &TestDb, args: &[&str], input: &[u8]) -> Output {
    let mut child = cmd(db, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(o.status.success(), "exit {:?}: {}", o.status.code(), err(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A failure: the expected exit status, one line on stderr naming `needle`, no panic.
#[track_caller]
fn fails(o: &Output, code: i32, needle: &str) {
    let e = err(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {e}");
    assert!(e.contains(needle), "{needle:?} not in {e:?}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(e.starts_with("error: "), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(
        o.stdout.is_empty(),
        "printed {:?}",
        String::from_utf8_lossy(&o.stdout)
    );
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn ids(s: &str) -> Vec<i64> {
    s.lines().map(|l| l.trim().parse().unwrap()).collect()
}

async fn migrated() -> TestDb {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    db
}

/// Runs a query in the test's schema.
async fn client(db: &TestDb) -> tokio_postgres::Client {
    let c = db.connect().await.unwrap();
    c.batch_execute(&format!("SET search_path TO \"{}\"", db.schema()))
        .await
        .unwrap();
    c
}

async fn count(db: &TestDb) -> i64 {
    client(db)
        .await
        .query_one("SELECT count(*) FROM jobs", &[])
        .await
        .unwrap()
        .get(0)
}

async fn exec(db: &TestDb, q: &str) {
    client(db).await.batch_execute(q).await.unwrap();
}

/// A job's `after` (empty for NULL), `waiting` and `held`.
async fn edges(db: &TestDb, id: i64) -> (Vec<i64>, Option<i32>, Option<String>) {
    let r = client(db)
        .await
        .query_one(
            "SELECT coalesce(after, '{}'), waiting, held FROM jobs WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

async fn kind(db: &TestDb, id: i64) -> String {
    client(db)
        .await
        .query_one("SELECT kind FROM jobs WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

fn show(db: &TestDb, id: i64) -> serde_json::Value {
    json(&ok(&run(db, &["show", &id.to_string(), "--json"])))
}

fn enqueue(db: &TestDb, args: &[&str]) -> i64 {
    let mut all = vec!["enqueue"];
    all.extend_from_slice(args);
    let out = ok(&run(db, &all));
    assert_eq!(out.lines().count(), 1, "{out}");
    out.trim().parse().unwrap()
}

fn scratch(db: &TestDb, name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("skiplock-{name}-{}", db.schema()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `work --drain --exec sh -c SCRIPT` until no job is ready or waiting any more (a
/// child released by its parent's completion may become ready after a drain decided it was
/// idle).
async fn drain(db: &TestDb, script: &str, env: &[(&str, &str)]) {
    for _ in 0..20 {
        let mut c = cmd(db, &["work", "--drain", "--exec", "sh", "-c", script, "sh"]);
        for (k, v) in env {
            c.env(k, v);
        }
        ok(&c.output().unwrap());
        let left: i64 = client(db)
            .await
            .query_one(
                "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')
                   AND (held IS NOT NULL OR run_at <= now())",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("jobs were left after 20 drains");
}

// ---- enqueue --after ---------------------------------------------------------------------

#[tokio::test]
async fn enqueue_after_refuses_a_missing_or_failed_parent_and_enqueues_nothing() {
    let db = migrated().await;

    // A parent that does not exist.
    fails(
        &run(&db, &["enqueue", "--after", "999999", "{}"]),
        2,
        "invalid after: job 999999 does not exist; nothing was enqueued",
    );
    assert_eq!(count(&db).await, 0);

    // A parent that failed; and a list with one good parent and one failed: all refused.
    let failed = enqueue(&db, &["{}"]);
    let queued = enqueue(&db, &["{}"]);
    exec(
        &db,
        &format!(
            "UPDATE jobs SET status = 'failed', finished_at = now(), last_error = 'boom'
             WHERE id = {failed}"
        ),
    )
    .await;
    for after in [failed.to_string(), format!("{queued},{failed}")] {
        fails(
            &run(&db, &["enqueue", "--after", &after, "{}"]),
            2,
            &format!("invalid after: job {failed} has failed; retry it first, or leave it out"),
        );
    }
    // Standard input: no line enqueued.
    let o = run_stdin(
        &db,
        &["enqueue", "--after", &failed.to_string()],
        b"{\"a\":1}\n{\"a\":2}\n",
    );
    fails(&o, 2, &format!("job {failed} has failed"));
    assert_eq!(count(&db).await, 2, "nothing was enqueued");

    // Typos never reach the database.
    for (args, needle) in [
        (vec!["--after", "abc"], "\"abc\" is not a job id"),
        (vec!["--after", "0"], "\"0\" is not a job id"),
        (vec!["--after", "1,,2"], "\"\" is not a job id"),
        (
            vec!["--after", "1", "--sequence", "s"],
            "cannot be used with",
        ),
        (
            vec!["--after", "1", "--unique-by-args"],
            "cannot be used with",
        ),
    ] {
        let mut all = vec!["enqueue"];
        all.extend(args);
        all.push("{}");
        fails(&run(&db, &all), 2, needle);
    }
    assert_eq!(count(&db).await, 2);

    // The negative control: a queued parent is accepted, and the job waits for it.
    let child = enqueue(&db, &["--after", &queued.to_string(), "{}"]);
    assert_eq!(
        edges(&db, child).await,
        (vec![queued], Some(1), Some("after".to_owned()))
    );

    // A parent already done counts as done: the job is ready at once.
    let done = enqueue(&db, &["{}"]);
    exec(
        &db,
        &format!("UPDATE jobs SET status = 'done', finished_at = now() WHERE id = {done}"),
    )
    .await;
    let ready = enqueue(&db, &["--after", &done.to_string(), "{}"]);
    assert_eq!(edges(&db, ready).await, (vec![done], Some(0), None));

    // Standard input: every line's job waits for the parents (repeated or comma-separated).
    let o = run_stdin(
        &db,
        &[
            "enqueue",
            "--after",
            &format!("{queued},{done}"),
            "--after",
            &done.to_string(),
        ],
        b"{\"a\":1}\n\n{\"a\":2}\n",
    );
    let lines = ids(&ok(&o));
    assert_eq!(lines.len(), 2);
    for id in lines {
        assert_eq!(
            edges(&db, id).await,
            (vec![queued, done], Some(1), Some("after".to_owned()))
        );
    }
}

// ---- enqueue --workflow ------------------------------------------------------------------

#[tokio::test]
async fn a_workflow_in_any_line_order_prints_ids_in_line_order_with_the_right_edges() {
    let db = migrated().await;
    let existing = enqueue(&db, &["{}"]);
    let dir = scratch(&db, "wf-diamond");
    let file = dir.join("flow.jsonl");
    // A diamond, children first, with a blank line, and one edge to an existing job.
    std::fs::write(
        &file,
        format!(
            r#"{{"ref":"join","kind":"join","after":["left","right"]}}
{{"ref":"right","kind":"right","after":["root",{existing}],"payload":{{"w":1024}}}}

{{"ref":"left","kind":"left","after":["root"],"payload":{{"w":64}},"delay":"1h"}}
{{"ref":"root","kind":"root","queue":"wf","priority":-2,"max_attempts":3,"key":"t1"}}
"#
        ),
    )
    .unwrap();
    let out = ok(&run(
        &db,
        &["enqueue", "--workflow", file.to_str().unwrap()],
    ));
    let got = ids(&out);
    assert_eq!(got.len(), 4, "{out}");
    let (join, right, left, root) = (got[0], got[1], got[2], got[3]);
    // Ids in the file's line order: each line's id is its own job's.
    for (id, k) in [
        (join, "join"),
        (right, "right"),
        (left, "left"),
        (root, "root"),
    ] {
        assert_eq!(kind(&db, id).await, k);
    }
    // Each job after its parents, in the database (ids are given in the sorted order).
    assert!(root < left && root < right && left < join && right < join);
    let mut join_after = vec![left, right];
    join_after.sort_unstable();
    let mut right_after = vec![root, existing];
    right_after.sort_unstable();
    assert_eq!(
        edges(&db, join).await,
        (join_after, Some(2), Some("after".to_owned()))
    );
    assert_eq!(
        edges(&db, right).await,
        (right_after, Some(2), Some("after".to_owned()))
    );
    assert_eq!(
        edges(&db, left).await,
        (vec![root], Some(1), Some("after".to_owned()))
    );
    assert_eq!(edges(&db, root).await, (vec![], None, None));
    // The fields of the lines, and the defaults for those left out.
    let r = show(&db, root);
    assert_eq!(
        (&r["queue"], &r["priority"], &r["max_attempts"], &r["key"]),
        (&"wf".into(), &(-2).into(), &3.into(), &"t1".into())
    );
    let l = show(&db, left);
    assert_eq!(
        (&l["queue"], &l["payload"]),
        (&"default".into(), &serde_json::json!({"w": 64}))
    );
    let r = client(&db)
        .await
        .query_one(
            "SELECT run_at > now() + interval '50 minutes' FROM jobs WHERE id = $1",
            &[&left],
        )
        .await
        .unwrap();
    assert!(r.get::<_, bool>(0), "the delay was applied");

    // From standard input, with --json, the flags giving the defaults.
    let before = count(&db).await;
    let o = run_stdin(
        &db,
        &[
            "enqueue",
            "--workflow",
            "-",
            "--json",
            "--queue",
            "q2",
            "--kind",
            "dflt",
        ],
        b"{\"after\":[\"a\"]}\n{\"ref\":\"a\",\"kind\":\"first\"}\n",
    );
    let lines: Vec<serde_json::Value> = ok(&o).lines().map(json).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["line"], 1);
    assert_eq!(lines[0]["ref"], serde_json::Value::Null);
    assert_eq!(lines[1]["line"], 2);
    assert_eq!(lines[1]["ref"], "a");
    let (child, parent) = (
        lines[0]["id"].as_i64().unwrap(),
        lines[1]["id"].as_i64().unwrap(),
    );
    assert_eq!(kind(&db, child).await, "dflt");
    assert_eq!(kind(&db, parent).await, "first");
    assert_eq!(show(&db, child)["queue"], "q2");
    assert_eq!(edges(&db, child).await.0, vec![parent]);
    assert_eq!(count(&db).await, before + 2);
}

#[tokio::test]
async fn workflow_refusals_are_one_line_exit_2_and_enqueue_nothing() {
    let db = migrated().await;
    let failed = enqueue(&db, &["{}"]);
    exec(
        &db,
        &format!("UPDATE jobs SET status = 'failed', finished_at = now() WHERE id = {failed}"),
    )
    .await;
    let dir = scratch(&db, "wf-refusals");
    let cases: Vec<(String, String)> = vec![
        (
            "{\"ref\":\"a\",\"after\":[\"c\"]}\n{\"ref\":\"b\",\"after\":[\"a\"]}\n{\"ref\":\"c\",\"after\":[\"b\"]}\n{\"ref\":\"d\"}\n".into(),
            "workflow: a cycle: a -> c -> b -> a (each waits for the next); nothing was enqueued".into(),
        ),
        (
            "{\"ref\":\"a\"}\n{\"ref\":\"b\"}\n{\"ref\":\"c\",\"after\":[\"a\",\"x\"]}\n".into(),
            "line 3: after \"x\": no job has that ref; nothing was enqueued".into(),
        ),
        (
            "{\"ref\":\"a\"}\n{\"ref\":\"b\"}\n{\"ref\":\"a\"}\n".into(),
            "line 3: ref \"a\" is already used on line 1".into(),
        ),
        (
            "{\"ref\":\"a\"}\n{\"ref\":\"b\",\n".into(),
            "line 2: not valid JSON: EOF while parsing a value (column 11)".into(),
        ),
        (
            "{\"ref\":\"a\",\"sequence\":\"s\"}\n".into(),
            "line 1: unknown field \"sequence\"".into(),
        ),
        (
            "{\"ref\":\"a\"}\n{\"after\":[\"a\"],\"kind\":\"bad kind\"}\n".into(),
            "line 2: invalid job kind".into(),
        ),
        (
            "{\"ref\":\"a\"}\n{\"after\":[\"a\",999999]}\n".into(),
            "line 2: invalid after: job 999999 does not exist".into(),
        ),
        (
            format!("{{\"ref\":\"a\"}}\n{{\"after\":[\"a\"]}}\n{{\"after\":[{failed}]}}\n"),
            format!("line 3: invalid after: job {failed} has failed"),
        ),
        ("\n\n".into(), "the workflow holds no job lines".into()),
    ];
    // A needle "a | b": the message holds a and b (the database's own words between).
    for (i, (text, needles)) in cases.iter().enumerate() {
        let file = dir.join(format!("case-{i}.jsonl"));
        std::fs::write(&file, text).unwrap();
        for needle in needles.split(" | ") {
            fails(
                &run(&db, &["enqueue", "--workflow", file.to_str().unwrap()]),
                2,
                needle,
            );
            fails(
                &run_stdin(&db, &["enqueue", "--workflow", "-"], text.as_bytes()),
                2,
                needle,
            );
        }
        assert_eq!(count(&db).await, 1, "case {i} enqueued something");
    }
    fails(
        &run(
            &db,
            &[
                "enqueue",
                "--workflow",
                dir.join("missing").to_str().unwrap(),
            ],
        ),
        2,
        "could not read it: No such file or directory",
    );
    fails(
        &run(&db, &["enqueue", "--workflow", "-", "{}"]),
        2,
        "cannot be used with",
    );
    fails(
        &run(&db, &["enqueue", "--workflow", "-", "--after", "1"]),
        2,
        "cannot be used with",
    );
    assert_eq!(count(&db).await, 1);

    // The negative control: the cycle's file with its back edge taken out is enqueued.
    let fixed = cases[0].0.replace("\"after\":[\"c\"]", "\"after\":[]");
    let got = ids(&ok(&run_stdin(
        &db,
        &["enqueue", "--workflow", "-"],
        fixed.as_bytes(),
    )));
    assert_eq!(got.len(), 4);
    assert_eq!(count(&db).await, 5);
}

#[tokio::test]
async fn a_workflow_of_10000_lines_in_reverse_order_is_enqueued() {
    let db = migrated().await;
    let n = 10_000;
    // A chain, each line waiting for the next line's job: the worst order for the file.
    let text: String = (0..n)
        .rev()
        .map(|i| {
            if i == 0 {
                "{\"ref\":\"j0\"}\n".to_owned()
            } else {
                format!(
                    "{{\"ref\":\"j{i}\",\"after\":[\"j{}\"],\"payload\":{{\"i\":{i}}}}}\n",
                    i - 1
                )
            }
        })
        .collect();
    // The command's own part (reading, checking and sorting the lines) takes a fraction of
    // a second (see the unit test `ten_thousand_lines_in_reverse_order_sort_fast`); the
    // insert, with the database's per-row dependency triggers, takes seconds, more on a
    // busy server: the server's statement timeout is lifted so that a loaded test machine
    // does not fail the test.
    let t = Instant::now();
    let out = ok(&run_stdin(
        &db,
        &["--no-server-timeouts", "enqueue", "--workflow", "-"],
        text.as_bytes(),
    ));
    let took = t.elapsed();
    eprintln!("10,000-line workflow enqueued in {took:?}");
    let got = ids(&out);
    assert_eq!(got.len(), n);
    // Line order: the last line is the root (lowest id), the first the end of the chain.
    assert!(got.windows(2).all(|w| w[0] > w[1]));
    assert_eq!(count(&db).await, n as i64);
    let held: i64 = client(&db)
        .await
        .query_one(
            "SELECT count(*) FROM jobs j WHERE held = 'after' AND waiting = 1
               AND after = ARRAY[(SELECT p.id FROM jobs p WHERE p.id < j.id ORDER BY p.id DESC LIMIT 1)]",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, n as i64 - 1);
    assert!(took < Duration::from_secs(180), "took {took:?}");
}

// ---- work --exec: outputs ------------------------------------------------------------------

/// What each attempt's command does, by kind; every command logs its SKIPLOCK_OUTPUT path,
/// the file's mode and size at start, and SKIPLOCK_PARENT_OUTPUTS (or "unset").
const SCRIPT: &str = r#"
printf '%s %s %s %s\n' "$SKIPLOCK_OUTPUT" "$(stat -c %a "$SKIPLOCK_OUTPUT")" "$(stat -c %s "$SKIPLOCK_OUTPUT")" "${SKIPLOCK_PARENT_OUTPUTS-unset}" >> "$LOG"
case "$SKIPLOCK_KIND" in
  good) printf '{"n": 42, "exact": 1.0000000000000001}\n' > "$SKIPLOCK_OUTPUT" ;;
  bad) printf 'nope' > "$SKIPLOCK_OUTPUT" ;;
  big) { printf '"'; head -c 1048576 /dev/zero | tr '\0' a; printf '"'; } > "$SKIPLOCK_OUTPUT" ;;
  empty) ;;
  leaf) printf '{"leaf": %s}' "$SKIPLOCK_JOB_ID" > "$SKIPLOCK_OUTPUT" ;;
  join) printf '{"got": %s}' "$(cat "$SKIPLOCK_PARENT_OUTPUTS")" > "$SKIPLOCK_OUTPUT" ;;
esac
"#;

/// The paths logged, each checked: the file was new (mode 600, empty) and is gone now.
fn check_log(log: &std::path::Path, runs: usize) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), runs, "{text}");
    let mut paths = Vec::new();
    for l in lines {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!((f[1], f[2]), ("600", "0"), "{l}");
        assert!(
            !std::path::Path::new(f[0]).exists(),
            "{} was left behind",
            f[0]
        );
        if f[3] != "unset" {
            assert!(
                !std::path::Path::new(f[3]).exists(),
                "{} was left behind",
                f[3]
            );
        }
        paths.push(f[0].to_owned());
    }
    let mut unique = paths.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), paths.len(), "a path was used twice");
    text.lines()
        .map(|l| l.split(' ').nth(3).unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn exec_output_is_stored_and_output_that_is_not_json_fails_the_attempt() {
    let db = migrated().await;
    let dir = scratch(&db, "exec-output");
    let log = dir.join("log");
    let good = enqueue(&db, &["--kind", "good", "{}"]);
    let empty = enqueue(&db, &["--kind", "empty", "{}"]);
    let bad = enqueue(&db, &["--kind", "bad", "--max-attempts", "2", "{}"]);
    let big = enqueue(&db, &["--kind", "big", "--max-attempts", "1", "{}"]);
    // SKIPLOCK_PARENT_OUTPUTS in the worker's own environment does not reach a job without
    // parents.
    let mut c = cmd(
        &db,
        &["work", "--drain", "--exec", "sh", "-c", SCRIPT, "sh"],
    );
    c.env("LOG", &log).env("SKIPLOCK_PARENT_OUTPUTS", "/stale");
    ok(&c.output().unwrap());

    let g = show(&db, good);
    assert_eq!(g["status"], "done");
    assert_eq!(g["output"]["n"], 42, "{g}");
    // Numbers as written, in the text.
    let text = ok(&run(&db, &["show", &good.to_string()]));
    assert!(
        text.contains("output       {\"n\": 42, \"exact\": 1.0000000000000001}"),
        "{text}"
    );
    let e = show(&db, empty);
    assert_eq!(
        (&e["status"], &e["output"]),
        (&"done".into(), &serde_json::Value::Null)
    );
    assert!(ok(&run(&db, &["show", &empty.to_string()])).contains("output       -"));

    // The negative controls: the same runner fails the attempt for output that is not JSON
    // (retried: attempts are left) and for output over the limit.
    let b = show(&db, bad);
    assert_eq!(
        (&b["status"], &b["attempts"]),
        (&"queued".into(), &1.into()),
        "{b}"
    );
    assert_eq!(b["output"], serde_json::Value::Null);
    let why = b["last_error"].as_str().unwrap();
    assert!(
        why.starts_with("SKIPLOCK_OUTPUT: not valid JSON: expected ident at line 1 column 2"),
        "{why}"
    );
    let t = show(&db, big);
    assert_eq!(t["status"], "failed");
    let why = t["last_error"].as_str().unwrap();
    assert!(
        why.starts_with("SKIPLOCK_OUTPUT: the output is over 1048576 bytes, the limit"),
        "{why}"
    );

    let parents = check_log(&log, 4);
    assert!(parents.iter().all(|p| p == "unset"), "{parents:?}");
}

#[tokio::test]
async fn exec_a_child_reads_its_parents_outputs_and_show_lists_the_family() {
    let db = migrated().await;
    let dir = scratch(&db, "exec-parents");
    let log = dir.join("log");
    let out = ok(&run_stdin(
        &db,
        &["enqueue", "--workflow", "-"],
        b"{\"ref\":\"j\",\"kind\":\"join\",\"after\":[\"p1\",\"p2\",\"p3\"]}\n\
          {\"ref\":\"p1\",\"kind\":\"leaf\"}\n\
          {\"ref\":\"p2\",\"kind\":\"leaf\"}\n\
          {\"ref\":\"p3\",\"kind\":\"empty\"}\n",
    ));
    let got = ids(&out);
    let (join, p1, p2, p3) = (got[0], got[1], got[2], got[3]);

    // Before: the child waits, and show says so.
    let j = show(&db, join);
    assert_eq!(
        (&j["held"], &j["waiting"]),
        (&"after".into(), &3.into()),
        "{j}"
    );
    assert_eq!(j["after"], serde_json::json!([p1, p2, p3]));
    assert_eq!(
        j["parents"],
        serde_json::json!([
            {"id": p1, "state": "queued", "kind": "leaf"},
            {"id": p2, "state": "queued", "kind": "leaf"},
            {"id": p3, "state": "queued", "kind": "empty"},
        ])
    );
    let text = ok(&run(&db, &["show", &join.to_string()]));
    assert!(
        text.contains("held         after (waiting: 3 of 3 not done yet)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("after        {p1}, {p2}, {p3}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("parents      {p1} queued leaf\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("             {p3} queued empty\n")),
        "{text}"
    );

    drain(&db, SCRIPT, &[("LOG", log.to_str().unwrap())]).await;

    let j = show(&db, join);
    assert_eq!(j["status"], "done", "{j}");
    assert_eq!(
        j["output"],
        serde_json::json!({"got": {
            p1.to_string(): {"leaf": p1},
            p2.to_string(): {"leaf": p2},
            p3.to_string(): null,
        }}),
    );
    assert_eq!(show(&db, p1)["output"], serde_json::json!({"leaf": p1}));
    // The variable was set for the child alone.
    let parents = check_log(&log, 4);
    assert_eq!(
        parents.iter().filter(|p| *p == "unset").count(),
        3,
        "{parents:?}"
    );

    // show lists the children of a parent, with their states.
    let p = show(&db, p1);
    assert_eq!(
        (&p["children"], &p["children_total"]),
        (
            &serde_json::json!([{"id": join, "state": "done", "kind": "join"}]),
            &1.into()
        )
    );
    assert_eq!(
        (&p["parents"], &p["after"]),
        (&serde_json::json!([]), &serde_json::json!([]))
    );
    let text = ok(&run(&db, &["show", &p1.to_string()]));
    assert!(
        text.contains(&format!("children     {join} done join\n")),
        "{text}"
    );
    assert!(text.contains("parents      -\n"), "{text}");
}

#[tokio::test]
async fn show_lists_at_most_100_children_and_counts_the_rest() {
    let db = migrated().await;
    let mut text = String::from("{\"ref\":\"root\",\"kind\":\"root\"}\n");
    for i in 0..105 {
        text.push_str(&format!("{{\"kind\":\"c{i}\",\"after\":[\"root\"]}}\n"));
    }
    let got = ids(&ok(&run_stdin(
        &db,
        &["enqueue", "--workflow", "-"],
        text.as_bytes(),
    )));
    let root = got[0];
    let r = show(&db, root);
    assert_eq!(r["children_total"], 105);
    let children = r["children"].as_array().unwrap();
    assert_eq!(children.len(), 100);
    assert_eq!(
        children[0],
        serde_json::json!({"id": got[1], "state": "queued", "kind": "c0"})
    );
    let shown = ok(&run(&db, &["show", &root.to_string()]));
    assert!(shown.contains("             … and 5 more\n"), "{shown}");
    assert_eq!(shown.matches(" queued c").count(), 100, "{shown}");

    // A deleted parent still shows, as deleted.
    exec(
        &db,
        &format!("UPDATE jobs SET status = 'done', finished_at = now() WHERE id = {root}"),
    )
    .await;
    exec(&db, &format!("DELETE FROM jobs WHERE id = {root}")).await;
    let c = show(&db, got[1]);
    assert_eq!(
        c["parents"],
        serde_json::json!([{"id": root, "state": null, "kind": null}])
    );
    assert_eq!(
        (&c["held"], &c["waiting"]),
        (&serde_json::Value::Null, &0.into())
    );
    let shown = ok(&run(&db, &["show", &got[1].to_string()]));
    assert!(
        shown.contains(&format!("parents      {root} deleted -\n")),
        "{shown}"
    );
}

/// A worker killed with SIGKILL cannot remove its attempts' files: the job guard, which sees
/// the worker go, removes them.
#[tokio::test]
async fn exec_the_files_of_a_worker_killed_with_sigkill_are_removed() {
    let db = migrated().await;
    let dir = scratch(&db, "exec-kill9");
    let log = dir.join("log");
    let parent = enqueue(&db, &["{}"]);
    exec(
        &db,
        &format!("UPDATE jobs SET status = 'done', output = '{{\"a\": 1}}' WHERE id = {parent}"),
    )
    .await;
    enqueue(&db, &["--after", &parent.to_string(), "{}"]);
    let script = r#"printf '%s %s\n' "$SKIPLOCK_OUTPUT" "$SKIPLOCK_PARENT_OUTPUTS" > "$LOG.tmp"; mv "$LOG.tmp" "$LOG"; exec sleep 60"#;
    let mut worker = cmd(&db, &["work", "--exec", "sh", "-c", script])
        .env("LOG", &log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !log.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the job never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let files: Vec<std::path::PathBuf> = text.split_whitespace().map(Into::into).collect();
    assert_eq!(files.len(), 2, "{text}");
    // The control: while the worker lives, the files are there.
    for f in &files {
        assert!(f.exists(), "{} is missing", f.display());
    }
    assert_eq!(
        json(&std::fs::read_to_string(&files[1]).unwrap()),
        serde_json::json!({ parent.to_string(): {"a": 1} })
    );
    worker.kill().unwrap();
    worker.wait().unwrap();
    let start = Instant::now();
    while files.iter().any(|f| f.exists()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "left behind: {files:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
