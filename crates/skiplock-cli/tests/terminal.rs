//! The command on a terminal: the confirmation of a bulk action, colours and `NO_COLOR`.
//! The terminal is a pseudo-terminal that `script` (util-linux) opens; these tests fail,
//! rather than pass without a terminal, where it is missing.
#![allow(clippy::unwrap_used)]

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use skiplock_testdb::TestDb;

/// A shell word.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs `skiplock ARGS` on a pseudo-terminal (standard input, output and error), typing
/// `input`, with the environment `env` (name, value; `None` removes it). Its output is
/// everything the terminal showed.
fn on_terminal(db: &TestDb, args: &[&str], input: &str, env: &[(&str, Option<&str>)]) -> Output {
    let mut words = vec![
        quote(env!("CARGO_BIN_EXE_skiplock")),
        "--database-url".to_owned(),
        quote(db.url()),
        "--schema".to_owned(),
        quote(db.schema()),
    ];
    words.extend(args.iter().map(|a| quote(a)));
    let mut c = Command::new("script");
    c.args(["-q", "-e", "-c", &words.join(" "), "/dev/null"])
        .env_remove("DATABASE_URL")
        .env_remove("SKIPLOCK_HOME")
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let mut child = c
        .spawn()
        .expect("`script` (util-linux) runs the command on a pseudo-terminal");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

async fn failed_jobs(db: &TestDb) -> i64 {
    let c = db.connect().await.unwrap();
    c.query_one(
        &format!(
            "SELECT count(*) FROM \"{}\".jobs WHERE status = 'failed'",
            db.schema()
        ),
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn a_bulk_action_asks_on_a_terminal() {
    let db = TestDb::new().await;
    let o = Command::new(env!("CARGO_BIN_EXE_skiplock"))
        .env_remove("DATABASE_URL")
        .args([
            "--database-url",
            db.url(),
            "--schema",
            db.schema(),
            "migrate",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let c = db.connect().await.unwrap();
    c.batch_execute(&format!(
        "INSERT INTO \"{}\".jobs (kind, payload, status, attempts, last_error, finished_at)
         SELECT 'k', '{{}}', 'failed', 5, 'boom', now() FROM generate_series(1, 1500)",
        db.schema()
    ))
    .await
    .unwrap();

    // Anything but yes: refused, exit 2, nothing changed.
    for answer in ["n\n", "\n", "maybe\n"] {
        let o = on_terminal(&db, &["retry", "--state", "failed"], answer, &[]);
        let shown = text(&o);
        assert_eq!(o.status.code(), Some(2), "{shown}");
        assert!(
            shown.contains("1500 jobs match; retry them? [y/N]"),
            "{shown}"
        );
        assert!(
            shown.contains("error: not confirmed: no job was retried"),
            "{shown}"
        );
        assert_eq!(failed_jobs(&db).await, 1500);
    }

    // Negative control: yes retries them all.
    let o = on_terminal(&db, &["retry", "--state", "failed"], "y\n", &[]);
    let shown = text(&o);
    assert_eq!(o.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("retried 1500 of 1500 matching job(s); skipped 0"),
        "{shown}"
    );
    assert_eq!(failed_jobs(&db).await, 0);
}

/// `NO_COLOR` set to anything non-empty takes the colour out of everything the command
/// writes on a terminal: clap's help and the log lines.
#[tokio::test]
async fn no_color_takes_the_colour_out() {
    let db = TestDb::new().await;
    let esc = |o: &Output| o.stdout.contains(&0x1b);
    let log = [("RUST_LOG", Some("debug"))];

    // On a terminal, colour (the control: the check can see it).
    let help = on_terminal(&db, &["--help"], "", &[]);
    assert!(help.status.success() && esc(&help), "{}", text(&help));
    let logged = on_terminal(&db, &["migrate"], "", &log);
    assert!(logged.status.success(), "{}", text(&logged));
    assert!(text(&logged).contains("DEBUG"), "{}", text(&logged));
    assert!(esc(&logged), "{}", text(&logged));
    // An empty NO_COLOR is no request.
    let empty = on_terminal(&db, &["migrate"], "", &[log[0], ("NO_COLOR", Some(""))]);
    assert!(esc(&empty), "{}", text(&empty));

    // NO_COLOR=1: none.
    let no = [("NO_COLOR", Some("1"))];
    let help = on_terminal(&db, &["--help"], "", &no);
    assert!(help.status.success(), "{}", text(&help));
    assert!(!esc(&help), "{}", text(&help));
    assert!(text(&help).contains("Usage:"), "{}", text(&help));
    let logged = on_terminal(&db, &["migrate"], "", &[log[0], no[0]]);
    assert!(text(&logged).contains("DEBUG"), "{}", text(&logged));
    assert!(!esc(&logged), "{}", text(&logged));

    // Not on a terminal: no colour either, without NO_COLOR.
    let o = Command::new(env!("CARGO_BIN_EXE_skiplock"))
        .env_remove("DATABASE_URL")
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "debug")
        .env("TERM", "xterm")
        .args([
            "--database-url",
            db.url(),
            "--schema",
            db.schema(),
            "migrate",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("DEBUG"));
    assert!(!o.stdout.contains(&0x1b) && !o.stderr.contains(&0x1b));
}
