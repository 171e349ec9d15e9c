//! The workflows' scenario (`skiplock-torture flow`): chains, diamonds and a fan-out of
//! 10,000 children run by worker processes whose handlers write an effect and complete the
//! job in one transaction, under `kill -9` and SIGSTOP; then each job's effects are counted.
//! And its negative control (effect and completion apart), which must fail on duplicates.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Instant;

/// Runs `skiplock-torture flow` with these arguments; returns whether it passed, its JSON
/// report, and its output.
fn flow(args: &[&str]) -> (bool, serde_json::Value, String) {
    let harness = assert_cmd::cargo::cargo_bin!("skiplock-torture");
    let started = Instant::now();
    let o = Command::new(harness)
        .arg("flow")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let text = format!("{out}\n{err}");
    eprintln!(
        "skiplock-torture flow {}: {:.0} s\n{text}",
        args.join(" "),
        started.elapsed().as_secs_f64()
    );
    let report: serde_json::Value = out
        .lines()
        .rfind(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no JSON report: {text}"));
    (o.status.success(), report, text)
}

fn no_server() -> bool {
    if skiplock_embedded::find_pg_bin().is_err() {
        eprintln!("no local PostgreSQL server binaries: the flow run needs its own server");
        return true;
    }
    false
}

#[test]
fn a_short_flow_run_has_each_effect_exactly_once() {
    if no_server() {
        return;
    }
    let (passed, report, text) = flow(&["--duration", "35s", "--seed", "5"]);
    assert!(passed, "{text}");
    assert_eq!(report["pass"], true, "{report}");
    // 20 chains of 50, 200 diamonds of 4, the fan-out's parent, 10,000 children and fan-in,
    // and 30 jobs after existing ones in each of the 9 rounds after the first.
    let enqueued = 20 * 50 + 200 * 4 + 1 + 10_000 + 1 + 9 * 30;
    assert_eq!(report["enqueued"], enqueued, "{report}");
    assert_eq!(report["done"], enqueued, "{report}");
    assert_eq!(report["effects"], enqueued, "{report}");
    for zero in [
        "not_done",
        "missing_jobs",
        "unexpected_jobs",
        "wrong_parents",
        "duplicate_effects",
        "missing_effects",
        "stray_effects",
        "violations",
        "early_effects",
    ] {
        assert_eq!(report[zero], 0, "{zero}: {report}");
    }
    // The faults happened and made jobs run again; stopped workers resumed stale attempts
    // whose completions were refused (and their effects rolled back).
    assert!(report["kills"].as_u64().unwrap() > 0, "{report}");
    assert!(report["stops"].as_u64().unwrap() > 0, "{report}");
    assert!(report["reruns"].as_u64().unwrap() > 0, "{report}");
    assert!(report["lease_lost"].as_u64().unwrap() > 0, "{report}");
}

/// The negative control: the handler commits its effect on its own and the worker completes
/// the job afterwards. A worker killed or stopped between the two leaves an effect whose job
/// runs again: the accounting must fail, on duplicate effects and on nothing else.
#[test]
fn the_flow_accounting_catches_an_effect_committed_apart_from_the_completion() {
    if no_server() {
        return;
    }
    let (passed, report, text) = flow(&[
        "--duration",
        "15s",
        "--fan-out",
        "2000",
        "--seed",
        "5",
        "--no-tx",
    ]);
    assert!(!passed, "{text}");
    assert_eq!(report["pass"], false, "{report}");
    assert_eq!(
        report["failed_checks"],
        serde_json::json!(["duplicate_effects"]),
        "{report}"
    );
    assert!(
        report["duplicate_effects"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert!(
        text.contains("the flow accounting failed: duplicate_effects"),
        "{text}"
    );
}
