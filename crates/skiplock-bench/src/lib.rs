//! skiplock's benchmarks and the article's experiments, on skiplock's public API alone.
//!
//! - [`mod@bench`]: the measurements of `skiplock bench`, one run each (throughput against the
//!   raw-SQL ceiling, latency, enqueue rates, claim cost with history, footprint, several
//!   worker processes, workflows);
//! - [`suite`]: its scenarios: which runs each makes, the targets they check, and the report
//!   (the Markdown of docs/BENCHMARKS.md);
//! - [`lab`]: the experiments of `skiplock lab` (the naive claim, `FOR UPDATE`, `SKIP LOCKED`,
//!   vacuum behind an open transaction), and the completion audit the demo and the torture
//!   harness count duplicate completions with.
//!
//! Their own statements live in this crate's `queries/` folder, one file each, listed in
//! [`Statement`]; the queue's statements are skiplock's
//! ([`Client::statement`](skiplock::Client::statement)).
#![warn(missing_docs)]

pub mod bench;
pub mod cpu;
mod db;
mod error;
pub mod lab;
pub mod pgbench;
pub mod suite;

pub use db::Statement;
pub use error::{Error, Result};
