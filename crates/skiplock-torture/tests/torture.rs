//! The short torture run: real worker processes (typed and `--exec`) under every fault at
//! once, then the accounting. The long run is the same command with a longer duration.
#![allow(clippy::unwrap_used)]

use std::process::Command;

/// Runs `skiplock-torture run` with these arguments; returns whether it passed, and its JSON
/// report.
fn torture(args: &[&str]) -> (bool, serde_json::Value, String) {
    let o = Command::new(assert_cmd::cargo::cargo_bin!("skiplock-torture"))
        .arg("run")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let text = format!("{out}\n{err}");
    let report: serde_json::Value = out
        .lines()
        .rfind(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no JSON report: {text}"));
    (o.status.success(), report, text)
}

fn no_server() -> bool {
    if skiplock_testdb::find_pg_bin().is_err() {
        eprintln!("no local PostgreSQL server binaries: the torture run needs its own server");
        return true;
    }
    false
}

#[test]
fn a_short_torture_run_loses_nothing() {
    if no_server() {
        return;
    }
    let (passed, report, text) = torture(&["--duration", "40s", "--jobs", "3000", "--seed", "7"]);
    assert!(passed, "{text}");
    assert_eq!(report["pass"], true, "{report}");
    assert_eq!(report["enqueued"], 3000);
    for zero in [
        "lost",
        "unexpected",
        "not_terminal",
        "wrong_state",
        "duplicate_completions",
        "stale_completions",
        "overlaps",
    ] {
        assert_eq!(report[zero], 0, "{zero}: {report}");
    }
    assert!(
        report["faults"].as_object().unwrap().len() >= 3,
        "faults were injected: {report}"
    );
}

/// The negative control: the same accounting on workers whose outcome and heartbeat
/// statements lack the attempts fence must fail. Slow jobs (a first attempt that outlives
/// its lease, then a second one the reaper starts) make stale writers; without the fence
/// their late completions land on the second attempt's row.
#[test]
fn the_torture_accounting_catches_a_worker_without_the_fence() {
    if no_server() {
        return;
    }
    let (passed, report, text) = torture(&[
        "--duration",
        "15s",
        "--jobs",
        "1500",
        "--seed",
        "7",
        "--faults",
        "slow",
        "--unfenced",
    ]);
    assert!(!passed, "{text}");
    assert_eq!(report["pass"], false, "{report}");
    let caught = report["stale_completions"].as_i64().unwrap()
        + report["duplicate_completions"].as_i64().unwrap()
        + report["overlaps"].as_i64().unwrap();
    assert!(caught > 0, "{report}");
}
