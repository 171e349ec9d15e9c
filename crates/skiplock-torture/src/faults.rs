//! The faults: which exist, and a deterministic chooser.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Fault {
    /// `kill -9` of a worker process at a random moment; restarted.
    Kill9,
    /// SIGTERM (graceful shutdown) of a worker process; restarted.
    Sigterm,
    /// `pg_terminate_backend` on random worker connections, LISTEN ones included.
    Terminate,
    /// PostgreSQL stopped in immediate mode (a crash) and started again.
    Restart,
    /// A bystander session left `idle in transaction` (REPEATABLE READ) for a while.
    IdleTx,
    /// One worker process runs with its clock two hours ahead (needs `faketime`).
    Skew,
    /// Jobs whose first attempt outlives its lease with heartbeats off, so the reaper hands
    /// them to another worker while they still run.
    Slow,
}

impl Fault {
    pub fn all() -> Vec<Fault> {
        vec![
            Fault::Kill9,
            Fault::Sigterm,
            Fault::Terminate,
            Fault::Restart,
            Fault::IdleTx,
            Fault::Skew,
            Fault::Slow,
        ]
    }

    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill9 => "kill -9 of a worker",
            Fault::Sigterm => "SIGTERM of a worker",
            Fault::Terminate => "pg_terminate_backend of worker connections",
            Fault::Restart => "PostgreSQL crash (immediate stop) and restart",
            Fault::IdleTx => "bystander idle in transaction",
            Fault::Skew => "worker clock 2 h ahead",
            Fault::Slow => "handler slower than its lease (heartbeats off)",
        }
    }
}

/// A small deterministic generator (the run's seed decides every choice).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn chance(&mut self, per_thousand: u64) -> bool {
        self.below(1000) < per_thousand
    }
}

/// How often each fault was injected.
#[derive(Debug, Default, Clone)]
pub struct Tally(pub BTreeMap<Fault, u64>);

impl Tally {
    pub fn add(&mut self, f: Fault) {
        *self.0.entry(f).or_default() += 1;
    }
}
