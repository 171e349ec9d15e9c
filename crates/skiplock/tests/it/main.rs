//! Integration tests: every test talks to a real PostgreSQL (`DATABASE_URL`, or a throwaway
//! cluster started from the local server binaries), each in a schema of its own.
#![allow(clippy::unwrap_used)]

mod ahead;
mod api;
mod bad_input;
mod claim;
mod connection;
mod delete_done;
mod enqueue;
mod fencing;
mod lifecycle;
mod limits;
mod metrics;
mod migrate;
mod netfault;
mod operations;
mod outcomes;
mod pause;
mod periodic;
mod pgbouncer;
mod plans;
mod presence;
mod privileges;
mod runtime;
mod support;
#[cfg(feature = "testing")]
mod testing;
mod tls;
mod unique;
mod vacuum;
mod wakeups;
mod worker;
mod workflows;
