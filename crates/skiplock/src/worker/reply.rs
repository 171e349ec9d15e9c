//! How long the worker waits for the database's reply to its hot-path statements.
//!
//! A connection whose peer vanished without a reset (a half-open connection: a partition, a
//! dropped NAT entry, a host that lost power) answers nothing and reports no error: a
//! statement sent on it waits until the kernel gives the socket up (TCP keepalives and
//! `tcp_user_timeout`, about a minute with skiplock's connection settings). The heartbeat
//! cannot wait that long, since the lease would end meanwhile, so the worker bounds its own
//! statements:
//!
//! * a heartbeat gets half the heartbeat interval ([`heartbeat`]);
//! * an outcome write, and the read-back after one, get one heartbeat interval
//!   (`WorkerConfig::reply_timeout`).
//!
//! A statement without a reply by then is abandoned and its connection closed, with every
//! idle connection of the worker's pool (opened over the same path, they are likely just as
//! dead); the next try opens new ones. What the abandoned statement did is unknown: the
//! outcome write finds out by reading the job back (see the completer).

use std::time::Duration;

use super::state::Shared;

/// How long a heartbeat waits for its reply: half the interval, so that a beat lost on a
/// half-open connection is followed by another before the next one would be due.
pub(crate) fn heartbeat(interval: Duration) -> Duration {
    (interval / 2).max(Duration::from_millis(1))
}

/// Closes `conn`, which gave no reply in time, and the pool's idle connections.
pub(crate) fn abandon(shared: &Shared, conn: deadpool_postgres::Object) {
    drop(deadpool_postgres::Object::take(conn));
    let closed = shared.client.pool().retain(|_, _| false).removed.len();
    tracing::warn!(
        idle_closed = closed,
        "no reply from the database in time: closed the connection (and the idle ones) and will use new ones"
    );
}
