//! The benchmark suite of `skiplock bench`: which runs of [`mod@crate::bench`] each scenario
//! makes, the targets it checks, and the report (docs/BENCHMARKS.md is its Markdown).
//!
//! [`run`] takes the [`Options`] (the flags of `skiplock bench`), [`check`]s them all before
//! anything runs, then runs each scenario asked for in turn: every measured point and every
//! finished section goes to an [`Observer`] as it comes, and the [`Report`] (the sections
//! and the [`Target`]s) is returned at the end. One file per scenario, each one section of
//! the report: what it refuses of the options, and its run.
//!
//! Options refused run nothing (tested by `crates/skiplock-bench/tests/suite.rs`
//! `refused_options_run_nothing`); what the observer is told is what the report holds, and
//! the runs a scenario plans are the runs it tells of (there,
//! `the_throughput_and_enqueue_scenarios_report_as_they_go_and_at_the_end`); every scenario
//! runs and prints its points (`crates/skiplock-cli/tests/cli.rs`
//! `bench_quick_runs_every_scenario`).

use crate::error::{Error, Result};

mod ceiling;
mod enqueue;
mod footprint;
mod held;
mod history;
mod latency;
mod limits;
mod options;
pub mod peers;
mod plot;
mod processes;
mod report;
mod sitting;
mod throughput;
mod workflow;

pub use options::{Options, Scenario};
pub use report::{Header, Report, Section, Target};
pub use sitting::Observer;

use sitting::Sitting;

/// Checks the options for `asked`, in the order the scenarios run; [`run`] does first, this
/// is for a caller that prints something before it. What is refused is [`Error::Refused`],
/// its message naming the flag (`--jobs must be at least 1`).
pub fn check(asked: Scenario, options: &Options) -> Result<()> {
    if options.jobs == Some(0) {
        return Err(Error::refused("--jobs must be at least 1"));
    }
    if options.plot.is_some() && asked != Scenario::HeldSnapshot {
        return Err(Error::refused(
            "--plot is for the held-snapshot scenario alone",
        ));
    }
    for scenario in Scenario::order().filter(|sc| asked.runs(*sc)) {
        match scenario {
            Scenario::Throughput => throughput::check(options)?,
            Scenario::Latency => latency::check(options)?,
            Scenario::History => history::check(options)?,
            Scenario::Footprint => footprint::check(asked, options)?,
            Scenario::Processes => processes::check(options)?,
            Scenario::Workflow => workflow::check(options)?,
            Scenario::HeldSnapshot => held::check(options)?,
            Scenario::Enqueue | Scenario::Limits | Scenario::Peers | Scenario::All => {}
        }
    }
    Ok(())
}

/// How long [`Scenario::All`] takes, roughly, in all and per scenario (`about 15 minutes
/// (throughput 2 min, ...)`).
pub fn expected_time(quick: bool) -> String {
    let q = quick;
    format!(
        "about {} (throughput {}, latency {}, enqueue and history {}, footprint {}, processes {}, limits {}, workflow {}, peers {})",
        if q { "1 minute" } else { "40 minutes" },
        if q { "20 s" } else { "9 min" },
        if q { "8 s" } else { "9 min" },
        if q { "seconds" } else { "2 min" },
        if q { "6 s" } else { "6 min" },
        if q { "10 s" } else { "2 min" },
        if q { "10 s" } else { "3 min" },
        if q { "5 s" } else { "30 s" },
        if q { "5 s" } else { "2 min" },
    )
}

/// How long [`Scenario::HeldSnapshot`] takes with `options`, roughly (`about 39 minutes`).
pub fn held_snapshot_expected_time(options: &Options) -> String {
    held::expected_time(options)
}

/// Runs `asked` (each scenario in scratch schemas named after `base`, dropped afterwards)
/// against the database at `url`, telling `observer` as it goes. The options are checked
/// first ([`check`]): what they refuse is [`Error::Refused`], and nothing has run.
pub async fn run(
    url: &str,
    base: &str,
    asked: Scenario,
    options: &Options,
    observer: &mut dyn Observer,
) -> Result<Report> {
    check(asked, options)?;
    let mut s = Sitting {
        url,
        base,
        asked,
        options,
        observer,
        targets: Vec::new(),
        ceiling: None,
    };
    let mut sections = Vec::new();
    let started = std::time::Instant::now();
    for scenario in Scenario::order().filter(|sc| asked.runs(*sc)) {
        let section = match scenario {
            Scenario::Throughput => throughput::run(&mut s).await?,
            Scenario::Latency => latency::run(&mut s).await?,
            Scenario::Enqueue => enqueue::run(&mut s).await?,
            Scenario::History => history::run(&mut s).await?,
            Scenario::Footprint => footprint::run(&mut s).await?,
            Scenario::Processes => processes::run(&mut s).await?,
            Scenario::Limits => limits::run(&mut s).await?,
            Scenario::Peers => peers::run(&mut s).await?,
            Scenario::HeldSnapshot => held::run(&mut s).await?,
            Scenario::Workflow | Scenario::All => workflow::run(&mut s).await?,
        };
        s.observer.section(&section);
        sections.push(section);
    }
    Ok(Report {
        sections,
        targets: s.targets,
        took: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn bad_options_are_refused_before_anything_runs() {
        let with = |f: fn(&mut Options)| {
            let mut o = Options {
                program: Some(PathBuf::from("skiplock")),
                ..Options::default()
            };
            f(&mut o);
            o
        };
        for (asked, options, message) in [
            (
                Scenario::Throughput,
                with(|o| o.jobs = Some(0)),
                "--jobs must be at least 1",
            ),
            (
                Scenario::Throughput,
                with(|o| o.concurrency = Some(0)),
                "--concurrency, --batch and --claims-in-flight must be at least 1",
            ),
            (
                Scenario::All,
                with(|o| o.rate = Some(0.0)),
                "--rate must be above 0",
            ),
            (
                Scenario::Latency,
                with(|o| o.rate = Some(f64::NAN)),
                "--rate must be above 0",
            ),
            (
                Scenario::Footprint,
                with(|o| o.rate = Some(f64::INFINITY)),
                "--rate must be a finite number",
            ),
            (
                Scenario::History,
                with(|o| o.sizes = vec![10, -1]),
                "--sizes must not be negative",
            ),
            (
                Scenario::Processes,
                with(|o| o.program = None),
                "the processes scenario needs the program to start its workers from",
            ),
            (
                Scenario::HeldSnapshot,
                with(|o| o.duration = Some(std::time::Duration::ZERO)),
                "--duration must be above 0",
            ),
            (
                Scenario::HeldSnapshot,
                with(|o| o.rate = Some(-1.0)),
                "--rate must be above 0",
            ),
            (
                Scenario::Footprint,
                with(|o| o.plot = Some(PathBuf::from("plot.svg"))),
                "--plot is for the held-snapshot scenario alone",
            ),
            (
                Scenario::All,
                with(|o| o.plot = Some(PathBuf::from("plot.svg"))),
                "--plot is for the held-snapshot scenario alone",
            ),
            (
                Scenario::Workflow,
                with(|o| o.jobs = Some(99)),
                "--jobs must be at least 100 for the workflow scenario",
            ),
            (
                Scenario::Workflow,
                with(|o| o.jobs = Some(skiplock::Workflow::MAX_JOBS + 1)),
                "--jobs must be at most 100000 for the workflow scenario (one workflow's limit)",
            ),
        ] {
            let e = check(asked, &options).unwrap_err();
            assert!(e.is_invalid_input(), "{e}");
            assert_eq!(e.to_string(), message);
        }
        // Options a scenario does not use are not its business: the footprint's rate is
        // the latency's when everything runs, the workflow's jobs bounds are its own.
        for (asked, options) in [
            (Scenario::Throughput, with(|o| o.jobs = Some(99))),
            (Scenario::Enqueue, with(|o| o.concurrency = Some(0))),
            (Scenario::Throughput, with(|o| o.program = None)),
            (Scenario::History, with(|o| o.rate = Some(0.0))),
            (Scenario::All, with(|o| o.jobs = Some(100))),
            (
                Scenario::HeldSnapshot,
                with(|o| o.plot = Some(PathBuf::from("plot.svg"))),
            ),
        ] {
            assert!(check(asked, &options).is_ok(), "{asked:?} {options:?}");
        }
    }

    #[test]
    fn every_scenario_has_its_place_and_all_leaves_out_the_held_snapshot() {
        // The order is EACH, then the scenarios that run only when asked for by name.
        let order: Vec<Scenario> = Scenario::order().collect();
        assert_eq!(&order[..Scenario::EACH.len()], Scenario::EACH);
        assert_eq!(&order[Scenario::EACH.len()..], &[Scenario::HeldSnapshot]);
        for sc in order {
            assert!(sc.runs(sc), "{sc:?} runs when asked for");
            assert_eq!(
                Scenario::All.runs(sc),
                sc != Scenario::HeldSnapshot,
                "{sc:?} under all"
            );
        }
        assert!(!Scenario::HeldSnapshot.runs(Scenario::Footprint));
        assert_eq!(Scenario::HeldSnapshot.name(), "held-snapshot");
    }
}
