//! skiplock's benchmarks and the article's experiments, on skiplock's public API alone.
//!
//! - [`mod@bench`]: the scenarios of `skiplock bench` (throughput against the raw-SQL ceiling,
//!   latency, enqueue rates, claim cost with history, footprint, several worker processes);
//! - [`lab`]: the experiments of `skiplock lab` (the naive claim, `FOR UPDATE`, `SKIP LOCKED`,
//!   vacuum behind an open transaction), and the completion audit the demo and the torture
//!   harness count duplicate completions with.
//!
//! Their own statements live in this crate's `queries/` folder, one file each, listed in
//! [`Statement`]; the queue's statements are skiplock's
//! ([`Client::statement`](skiplock::Client::statement)).
#![warn(missing_docs)]

pub mod bench;
mod db;
mod error;
pub mod lab;

pub use db::Statement;
pub use error::{Error, Result};
