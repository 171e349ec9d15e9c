//! What the suite is asked: a [`Scenario`] and the [`Options`].

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

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
    /// skiplock's worker against graphile_worker (the bench crate's peer binary) on the same
    /// cluster, in one run.
    Peers,
    /// Every scenario above, in that order.
    All,
    /// A worker at a steady offered rate while a transaction holds a snapshot for a long
    /// time (30 minutes by default), and the highest rate sustained without one. Not part of
    /// [`Scenario::All`]: it runs only when asked for by name.
    HeldSnapshot,
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
        Scenario::Peers,
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
            Scenario::Peers => "peers",
            Scenario::All => "all",
            Scenario::HeldSnapshot => "held-snapshot",
        }
    }

    /// The scenarios that run only when asked for by name, after [`Scenario::EACH`].
    pub const ALONE: &'static [Scenario] = &[Scenario::HeldSnapshot];

    /// Every scenario a run may take, in the order they run: [`Scenario::EACH`], then
    /// [`Scenario::ALONE`].
    pub(super) fn order() -> impl Iterator<Item = Scenario> {
        Scenario::EACH.iter().chain(Scenario::ALONE).copied()
    }

    /// Whether asking for `self` runs `scenario`.
    pub(super) fn runs(self, scenario: Scenario) -> bool {
        self == scenario || (self == Scenario::All && Scenario::EACH.contains(&scenario))
    }
}

/// How to run the suite: the flags of `skiplock bench`, each field named as its flag
/// (`claims_in_flight` is `--claims-in-flight`), every one left alone a scenario's default.
/// [`run`](super::run) checks them before anything runs; what it refuses it names as the
/// flag.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Options {
    /// Jobs per throughput and limits run (default 50,000), the enqueue scenario's batch
    /// total (default 100,000), the processes scenario's queue (default 100,000), and the
    /// workflow scenario's jobs per shape (default 10,000).
    pub jobs: Option<usize>,
    /// Queue concurrency for one throughput point instead of the sweep; the workflow
    /// scenario's worker (default 100); the processes scenario's total, split over the
    /// processes (default 200).
    pub concurrency: Option<usize>,
    /// Jobs per claim with `concurrency` (default: the worker's default).
    pub batch: Option<u32>,
    /// Claims in flight with `concurrency` (default: automatic).
    pub claims_in_flight: Option<usize>,
    /// Offered jobs per second: one latency point instead of the 50/500/5000 sweep; when
    /// the footprint scenario alone is asked for, its load (default 200); the held-snapshot
    /// scenario's held run (default 1,000).
    pub rate: Option<f64>,
    /// How long each latency point runs (default 10 s); when the footprint scenario alone is
    /// asked for, its steady phase (default 2 min); how long the held-snapshot scenario
    /// holds its snapshot (default 30 min).
    pub duration: Option<Duration>,
    /// Finished rows kept for the history scenario (empty: 0, 1,000,000 and 10,000,000).
    pub sizes: Vec<i64>,
    /// Tiny sizes, for checking that every scenario still runs (seconds, not minutes).
    pub quick: bool,
    /// The `skiplock` command the processes scenario starts its workers from (`None`: that
    /// scenario is refused).
    pub program: Option<PathBuf>,
    /// Where the held-snapshot scenario writes the SVG plot of its run (`None`: no plot;
    /// refused with any other scenario).
    pub plot: Option<PathBuf>,
}

impl Options {
    /// Refuses a `--rate` that is not above 0 and finite.
    pub(super) fn check_rate(&self) -> Result<()> {
        match self.rate {
            Some(rate) if rate.is_nan() || rate <= 0.0 => {
                Err(Error::refused("--rate must be above 0"))
            }
            Some(rate) if !rate.is_finite() => {
                Err(Error::refused("--rate must be a finite number"))
            }
            _ => Ok(()),
        }
    }

    /// Refuses a worker setting of 0 (the throughput and workflow scenarios take them).
    pub(super) fn check_worker(&self) -> Result<()> {
        if self.concurrency == Some(0) || self.batch == Some(0) || self.claims_in_flight == Some(0)
        {
            return Err(Error::refused(
                "--concurrency, --batch and --claims-in-flight must be at least 1",
            ));
        }
        Ok(())
    }
}
