//! The `skiplock` command as a user runs it.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

use skiplock_testdb::TestDb;

fn skiplock(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_skiplock"));
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .env_remove("SKIPLOCK_HOME");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_lists_the_commands() {
    let out = skiplock(&["--help"], &[]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for word in ["migrate", "--database-url", "--schema", "DATABASE_URL"] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
}

#[tokio::test]
async fn migrate_with_a_url_then_again() {
    let db = TestDb::new().await;
    let out = skiplock(
        &[
            "--database-url",
            db.url(),
            "--schema",
            db.schema(),
            "migrate",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("migrated from version 0 to 1"));
    // DATABASE_URL is the fallback.
    let out = skiplock(
        &["--schema", db.schema(), "migrate"],
        &[("DATABASE_URL", db.url())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("up to date (version 1)"));
}

#[test]
fn errors_are_one_line_with_a_nonzero_exit() {
    for (args, needle) in [
        (
            vec![
                "--database-url",
                "postgres://x@127.0.0.1:1/db",
                "--schema",
                "evil\"; DROP",
                "migrate",
            ],
            "invalid schema name",
        ),
        (
            vec![
                "--database-url",
                "postgres://x@127.0.0.1:1/db?connect_timeout=2",
                "migrate",
            ],
            "could not get a database connection to migrate",
        ),
        (
            vec!["--database-url", "not a url", "migrate"],
            "invalid database URL",
        ),
    ] {
        let out = skiplock(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with("error: ") && err.contains(needle), "{err}");
        assert!(!err.contains("panicked"));
    }
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
    let env = [("SKIPLOCK_HOME", home.to_str().unwrap())];
    let out = skiplock(&["pg", "status"], &env);
    assert!(text(&out.stdout).contains("not created yet"));
    let out = skiplock(&["migrate"], &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("migrated from version 0 to 1"));
    let out = skiplock(&["pg", "url"], &env);
    assert!(text(&out.stdout).starts_with("postgres://postgres@127.0.0.1:"));
    let out = skiplock(&["pg", "status"], &env);
    assert!(text(&out.stdout).contains("running"));
    let out = skiplock(&["migrate"], &env);
    assert!(text(&out.stdout).contains("up to date"));
    let out = skiplock(&["pg", "stop"], &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&skiplock(&["pg", "status"], &env).stdout).contains("stopped"));
    std::fs::remove_dir_all(&home).unwrap();
}
