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
    /// The proxy in front of a worker drops the server's reply to its next outcome
    /// statement (after the server ran it) and then resets that connection.
    ReplyLoss,
    /// The proxy black-holes every open connection of a worker (no reply, no RST); new ones
    /// pass. The held ones are reset 15 s later, as the kernel would end them.
    HalfOpen,
    /// The proxy black-holes a worker's LISTEN connection (no RST).
    ListenDrop,
    /// The proxy cuts a worker off (every connection, open and new) for longer than the
    /// lease, then heals.
    Partition,
    /// The proxy resets (RST) every connection of a worker.
    Reset,
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
            Fault::ReplyLoss,
            Fault::HalfOpen,
            Fault::ListenDrop,
            Fault::Partition,
            Fault::Reset,
        ]
    }

    /// Whether the fault is injected by the proxies in front of the workers.
    pub fn is_network(self) -> bool {
        matches!(
            self,
            Fault::ReplyLoss
                | Fault::HalfOpen
                | Fault::ListenDrop
                | Fault::Partition
                | Fault::Reset
        )
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
            Fault::ReplyLoss => "network: reply to an outcome statement lost, then RST",
            Fault::HalfOpen => "network: a worker's open connections black-holed (no RST)",
            Fault::ListenDrop => "network: a worker's LISTEN connection black-holed (no RST)",
            Fault::Partition => "network: a worker partitioned longer than the lease",
            Fault::Reset => "network: a worker's connections reset (RST)",
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
