//! The short torture run: real worker processes (typed and `--exec`) under every fault at
//! once, then the accounting. The long run is the same command with a longer duration.
#![allow(clippy::unwrap_used)]

use std::process::Command;

#[test]
fn a_short_torture_run_loses_nothing() {
    if skiplock_testdb::find_pg_bin().is_err() {
        eprintln!("no local PostgreSQL server binaries: the torture run needs its own server");
        return;
    }
    let o = Command::new(assert_cmd::cargo::cargo_bin!("skiplock-torture"))
        .args([
            "run",
            "--duration",
            "40s",
            "--jobs",
            "3000",
            "--seed",
            "7",
            "--json",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}\n{err}");
    let report: serde_json::Value = out
        .lines()
        .rfind(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .expect("a JSON report");
    assert_eq!(report["pass"], true, "{report}");
    assert_eq!(report["enqueued"], 3000);
    for zero in [
        "lost",
        "unexpected",
        "not_terminal",
        "wrong_state",
        "duplicate_completions",
        "stale_completions",
    ] {
        assert_eq!(report[zero], 0, "{zero}: {report}");
    }
    assert!(
        report["faults"].as_object().unwrap().len() >= 3,
        "faults were injected: {report}"
    );
}
