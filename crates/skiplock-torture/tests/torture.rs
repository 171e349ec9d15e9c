//! The short torture run: real worker processes (typed and `--exec`) under every fault at
//! once, then the accounting. The long run is the same command with a longer duration.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

/// Builds the `skiplock` command beside the harness, which runs it for its `--exec` workers:
/// a test of this crate alone builds no other crate's binaries.
fn build_the_skiplock_command(harness: &Path) {
    let release = harness
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|d| d == "release");
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "-q", "-p", "skiplock-cli", "--bin", "skiplock"]);
    if release {
        cargo.arg("--release");
    }
    let status = cargo.status().unwrap();
    assert!(status.success(), "could not build the skiplock command");
}

/// Runs `skiplock-torture run` with these arguments; returns whether it passed, and its JSON
/// report.
fn torture(args: &[&str]) -> (bool, serde_json::Value, String) {
    let harness = assert_cmd::cargo::cargo_bin!("skiplock-torture");
    build_the_skiplock_command(harness);
    let o = Command::new(harness)
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
    if skiplock_embedded::find_pg_bin().is_err() {
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
