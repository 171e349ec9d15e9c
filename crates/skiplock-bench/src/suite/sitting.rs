//! One run of the suite: where, what was asked, who is told as it goes, and the targets
//! found so far.

use super::options::{Options, Scenario};
use super::report::{Section, Target};

/// What [`run`](super::run) reports as it goes; every method does nothing unless implemented.
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

/// An observer that ignores everything: [`run`](super::run)'s report alone.
impl Observer for () {}

/// One [`run`](super::run): where, what was asked, and the targets found so far.
pub(super) struct Sitting<'a> {
    pub(super) url: &'a str,
    pub(super) base: &'a str,
    pub(super) asked: Scenario,
    pub(super) options: &'a Options,
    pub(super) observer: &'a mut dyn Observer,
    pub(super) targets: Vec<Target>,
    /// The ceiling the throughput scenario measured, for the scenarios after it.
    pub(super) ceiling: Option<super::ceiling::Ceiling>,
}

impl Sitting<'_> {
    pub(super) fn quick(&self) -> bool {
        self.options.quick
    }

    pub(super) fn point(&mut self, point: serde_json::Value) {
        self.observer.point(point);
    }

    pub(super) fn target(&mut self, what: impl Into<String>, measured: String, met: Option<bool>) {
        self.targets.push(Target {
            what: what.into(),
            measured,
            met,
        });
    }
}
