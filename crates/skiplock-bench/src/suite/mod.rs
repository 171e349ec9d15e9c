//! The benchmark suite of `skiplock bench`: which runs of [`mod@crate::bench`] each scenario
//! makes, the targets it checks, and the report (docs/BENCHMARKS.md is its Markdown).
//!
//! [`run`] takes the [`Options`] (the flags of `skiplock bench`), checks them all before
//! anything runs, then runs each scenario asked for in turn: every measured point and every
//! finished section goes to an [`Observer`] as it comes, and the [`Report`] (the sections
//! and the [`Target`]s) is returned at the end. One file per scenario, each one section of
//! the report.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

mod enqueue;
mod footprint;
mod history;
mod latency;
mod limits;
mod processes;
mod report;
mod throughput;
mod workflow;

pub use report::{Header, Report, Section, Target};

/// A scenario of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scenario {
    /// No-op jobs through a worker, against the raw-SQL ceiling of the same statements.
    Throughput,
    /// Enqueue-to-start latency at a steady offered load, LISTEN on and off.
    Latency,
    /// Enqueue rate: single-row transactions and batches.
    Enqueue,
    /// Claim latency with many finished rows kept.
    History,
    /// Dead tuples, size, WAL and transactions per job at a steady load, with and without a
    /// transaction holding back vacuum.
    Footprint,
    /// Several `skiplock work` processes draining one queue.
    Processes,
    /// Flow control: limits that do and do not bind, against the same runs without limits
    /// and the raw-SQL ceiling.
    Limits,
    /// Workflows against plain jobs: enqueued in one call, and through a worker.
    Workflow,
    /// Every scenario above, in that order.
    All,
}

impl Scenario {
    /// Every scenario that [`Scenario::All`] runs, in its order.
    pub const EACH: &'static [Scenario] = &[
        Scenario::Throughput,
        Scenario::Latency,
        Scenario::Enqueue,
        Scenario::History,
        Scenario::Footprint,
        Scenario::Processes,
        Scenario::Limits,
        Scenario::Workflow,
    ];

    /// Its name, as `skiplock bench` takes it (`throughput`, ..., `all`).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Throughput => "throughput",
            Scenario::Latency => "latency",
            Scenario::Enqueue => "enqueue",
            Scenario::History => "history",
            Scenario::Footprint => "footprint",
            Scenario::Processes => "processes",
            Scenario::Limits => "limits",
            Scenario::Workflow => "workflow",
            Scenario::All => "all",
        }
    }

    /// Whether asking for `self` runs `scenario`.
    fn runs(self, scenario: Scenario) -> bool {
        self == Scenario::All || self == scenario
    }
}

/// How to run the suite: the flags of `skiplock bench`, each field named as its flag
/// (`claims_in_flight` is `--claims-in-flight`), every one left alone a scenario's default.
/// [`run`] checks them before anything runs; what it refuses it names as the flag.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Options {
    /// Jobs per throughput and limits run (default 50,000), the enqueue scenario's batch
    /// total (default 100,000), the processes scenario's queue (default 100,000), and the
    /// workflow scenario's jobs per shape (default 10,000).
    pub jobs: Option<usize>,
    /// Queue concurrency for one throughput point instead of the sweep; the workflow
    /// scenario's worker (default 100).
    pub concurrency: Option<usize>,
    /// Jobs per claim with `concurrency` (default: the worker's default).
    pub batch: Option<u32>,
    /// Claims in flight with `concurrency` (default: automatic).
    pub claims_in_flight: Option<usize>,
    /// Offered jobs per second: one latency point instead of the 50/500/5000 sweep; when
    /// the footprint scenario alone is asked for, its load (default 200).
    pub rate: Option<f64>,
    /// How long each latency point runs (default 10 s); when the footprint scenario alone is
    /// asked for, its steady phase (default 2 min).
    pub duration: Option<Duration>,
    /// Finished rows kept for the history scenario (empty: 0, 1,000,000 and 10,000,000).
    pub sizes: Vec<i64>,
    /// Tiny sizes, for checking that every scenario still runs (seconds, not minutes).
    pub quick: bool,
    /// The `skiplock` command the processes scenario starts its workers from (`None`: that
    /// scenario is refused).
    pub program: Option<PathBuf>,
}

impl Options {
    /// Checks the options for `asked`, in the order the scenarios run; [`run`] does first,
    /// this is for a caller that prints something before it. What is refused is
    /// [`Error::Refused`], its message naming the flag (`--jobs must be at least 1`).
    pub fn check(&self, asked: Scenario) -> Result<()> {
        let refused = |message: &str| Err(Error::refused(message));
        if self.jobs == Some(0) {
            return refused("--jobs must be at least 1");
        }
        let zero = self.concurrency == Some(0)
            || self.batch == Some(0)
            || self.claims_in_flight == Some(0);
        if (asked.runs(Scenario::Throughput) || asked.runs(Scenario::Workflow)) && zero {
            return refused("--concurrency, --batch and --claims-in-flight must be at least 1");
        }
        let latency_or_footprint = asked.runs(Scenario::Latency) || asked == Scenario::Footprint;
        if let Some(rate) = self.rate.filter(|_| latency_or_footprint) {
            if rate.is_nan() || rate <= 0.0 {
                return refused("--rate must be above 0");
            }
            if !rate.is_finite() {
                return refused("--rate must be a finite number");
            }
        }
        if asked.runs(Scenario::History) && self.sizes.iter().any(|s| *s < 0) {
            return refused("--sizes must not be negative");
        }
        if asked.runs(Scenario::Processes) && self.program.is_none() {
            return refused(processes::NO_PROGRAM);
        }
        if asked.runs(Scenario::Workflow) {
            workflow::check(self)?;
        }
        Ok(())
    }
}

/// What [`run`] reports as it goes; every method does nothing unless implemented.
pub trait Observer: Send {
    /// A measured point, as one JSON object with its `scenario` (`skiplock bench --json`
    /// prints them, one a line).
    fn point(&mut self, point: serde_json::Value) {
        let _ = point;
    }

    /// A scenario's section of the report, finished.
    fn section(&mut self, section: &Section) {
        let _ = section;
    }

    /// A scenario that plans its runs ahead (the throughput scenario) starts `runs` runs.
    fn planned(&mut self, scenario: Scenario, runs: usize) {
        let _ = (scenario, runs);
    }

    /// One of the planned runs starts: what it is (`worker, concurrency 200`).
    fn run(&mut self, what: &str) {
        let _ = what;
    }

    /// That run ended.
    fn ran(&mut self) {}
}

/// An observer that ignores everything: [`run`]'s report alone.
impl Observer for () {}

/// How long [`Scenario::All`] takes, roughly, in all and per scenario (`about 15 minutes
/// (throughput 2 min, ...)`).
pub fn expected_time(quick: bool) -> String {
    let q = quick;
    format!(
        "about {} (throughput {}, latency {}, enqueue and history {}, footprint {}, processes {}, limits {}, workflow {})",
        if q { "1 minute" } else { "15 minutes" },
        if q { "20 s" } else { "2 min" },
        if q { "4 s" } else { "1 min" },
        if q { "seconds" } else { "2 min" },
        if q { "6 s" } else { "6 min" },
        if q { "10 s" } else { "1 min" },
        if q { "10 s" } else { "3 min" },
        if q { "5 s" } else { "30 s" },
    )
}

/// Runs `asked` (each scenario in scratch schemas named after `base`, dropped afterwards)
/// against the database at `url`, telling `observer` as it goes. The options are checked
/// first: what they refuse is [`Error::Refused`], and nothing has run.
pub async fn run(
    url: &str,
    base: &str,
    asked: Scenario,
    options: &Options,
    observer: &mut dyn Observer,
) -> Result<Report> {
    options.check(asked)?;
    let mut s = Sitting {
        url,
        base,
        asked,
        options,
        observer,
        targets: Vec::new(),
    };
    let mut sections = Vec::new();
    for &scenario in Scenario::EACH.iter().filter(|sc| asked.runs(**sc)) {
        let section = match scenario {
            Scenario::Throughput => throughput::run(&mut s).await?,
            Scenario::Latency => latency::run(&mut s).await?,
            Scenario::Enqueue => enqueue::run(&mut s).await?,
            Scenario::History => history::run(&mut s).await?,
            Scenario::Footprint => footprint::run(&mut s).await?,
            Scenario::Processes => processes::run(&mut s).await?,
            Scenario::Limits => limits::run(&mut s).await?,
            Scenario::Workflow | Scenario::All => workflow::run(&mut s).await?,
        };
        s.observer.section(&section);
        sections.push(section);
    }
    Ok(Report {
        sections,
        targets: s.targets,
    })
}

/// One [`run`]: where, what was asked, and the targets found so far.
struct Sitting<'a> {
    url: &'a str,
    base: &'a str,
    asked: Scenario,
    options: &'a Options,
    observer: &'a mut dyn Observer,
    targets: Vec<Target>,
}

impl Sitting<'_> {
    fn quick(&self) -> bool {
        self.options.quick
    }

    fn point(&mut self, point: serde_json::Value) {
        self.observer.point(point);
    }

    fn target(&mut self, what: impl Into<String>, measured: String, met: Option<bool>) {
        self.targets.push(Target {
            what: what.into(),
            measured,
            met,
        });
    }
}

/// The median of some runs (0 for none).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// A whole number with a comma between each group of three digits (`10,000`).
fn thousands(n: impl std::fmt::Display) -> String {
    let text = n.to_string();
    let (sign, digits) = match text.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", text.as_str()),
    };
    let mut out = sign.to_owned();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        for (n, s) in [
            (0, "0"),
            (100, "100"),
            (1_000, "1,000"),
            (65_432, "65,432"),
            (10_000_000, "10,000,000"),
            (-6_000, "-6,000"),
        ] {
            assert_eq!(thousands(n), s);
        }
    }

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
                processes::NO_PROGRAM,
            ),
            (
                Scenario::Workflow,
                with(|o| o.jobs = Some(99)),
                "--jobs must be at least 100 for the workflow scenario",
            ),
            (
                Scenario::Workflow,
                with(|o| o.jobs = Some(skiplock::MAX_WORKFLOW_JOBS + 1)),
                "--jobs must be at most 100000 for the workflow scenario (one workflow's limit)",
            ),
        ] {
            let e = options.check(asked).unwrap_err();
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
        ] {
            assert!(options.check(asked).is_ok(), "{asked:?} {options:?}");
        }
    }
}
