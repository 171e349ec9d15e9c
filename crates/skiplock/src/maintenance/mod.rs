//! The maintenance services that keep a queue healthy besides running jobs, one file each:
//! [`reaper`] (expired leases back to the queue), [`pruner`] (finished jobs deleted or
//! archived), [`vacuum`] (the jobs table's dead row versions), [`idle`] (closing idle pool
//! connections), [`scheduler`] (periodic jobs' fires) and [`gauges`] (the database-derived
//! metrics, when turned on).
//!
//! Every service has the same shape: a config struct whose fields document their defaults, a
//! `run_once` that does one round and returns its counts in a small report, and a [`Service`]
//! value that [`drive`] runs on its interval until told to stop. A worker drives all four;
//! [`Client::reap`](crate::Client::reap) and [`Client::prune`](crate::Client::prune) call the
//! reaper's and the pruner's `run_once` themselves, under the same exclusion. The scheduler
//! has its round ([`crate::periodic::run_once`]) and its config
//! ([`crate::periodic::SchedulerConfig`]) in the same shape, but a loop of its own: it sleeps
//! until the next fire and wakes on a schedule change, which an interval cannot express.
//!
//! Each service is excluded as its work requires. The reaper's round is one short transaction,
//! so it is elected by a transaction-scoped advisory lock (`reaper_try_lock.sql`, keyed by
//! the schema): at most one reaper moves rows at a time across all processes, the others skip
//! the round, and the lock ends with the transaction, so that no session state is left behind
//! (it works through a transaction-pooling proxy too). The pruner and the vacuum service work
//! across several statements, and VACUUM cannot run inside a transaction block at all, so a
//! transaction-scoped lock cannot cover them and a session lock would not survive such a
//! proxy: they are elected by a maintenance lock, a row in `maintenance_locks` with a holder
//! and an expiry ([`LeaseLock`]: `lock_acquire.sql`, `lock_release.sql`), which a process
//! that dies mid-round gives up when it expires. The scheduler's round is one transaction, so
//! it is elected like the reaper (`schedule_try_lock.sql`); its correctness does not rest on
//! the lock (each fire is a compare-and-set on the schedule's cursor), the lock only saves
//! racing rounds. The idle-connection closer is not excluded
//! at all: it only closes this process's own pool connections and sends no statement, so
//! every process runs its own.

pub(crate) mod gauges;
pub(crate) mod idle;
pub(crate) mod pruner;
pub(crate) mod reaper;
pub(crate) mod scheduler;
pub(crate) mod vacuum;

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_postgres::GenericClient;
use tokio_util::sync::CancellationToken;

pub use pruner::{PruneOptions, PruneReport};

use crate::client::Client;
use crate::db::Store;
use crate::error::{error_chain, Result};

/// One maintenance service: a round of work ([`Service::run_once`]) and the wait before the
/// next ([`Service::next`]). [`drive`] runs it.
pub(crate) trait Service: Send {
    /// What one round did: counts, for the log and the worker's events.
    type Report: Send;

    /// What the service does, for the log (`"reaping"`, `"pruning"`, ...).
    const NAME: &'static str;

    /// Whether a round waits for real work since the last one when the worker's fallback
    /// poll is off (so that an idle worker sends nothing). True for every service that sends
    /// a statement.
    const AFTER_WORK_ONLY: bool = true;

    /// The wait before the first round.
    fn first_wait(&self) -> Duration;

    /// How long until a round is due whatever the worker did since the last one (zero: due
    /// now), or `None`: with the poll off, [`Service::AFTER_WORK_ONLY`] skips a round only
    /// while it is not due. The reaper's is due at start and at a lease's end (it cannot learn
    /// of a dead worker's lease otherwise).
    fn due_in(&self) -> Option<Duration> {
        None
    }

    /// One round, under the service's exclusion.
    fn run_once(&mut self) -> impl Future<Output = Result<Self::Report>> + Send;

    /// The wait before the next round, given how the last one went; `None` stops the
    /// service.
    fn next(&mut self, last: &Result<Self::Report>) -> Option<Duration>;
}

/// Runs `service` until `stop` is cancelled: waits, asks `worked` whether to run (see
/// [`Service::AFTER_WORK_ONLY`] and [`Service::due`]), runs a round, logs its error if it failed, and hands the
/// result to `after`.
pub(crate) async fn drive<S: Service>(
    mut service: S,
    stop: &CancellationToken,
    mut worked: impl FnMut() -> bool + Send,
    mut after: impl FnMut(&Result<S::Report>) + Send,
) {
    let mut wait = service.first_wait();
    let mut every = wait;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        // `worked` is asked every time: it also moves the mark of what was seen.
        if !worked() && S::AFTER_WORK_ONLY && service.due_in() != Some(Duration::ZERO) {
            // Skipped: look again on the interval, or when the round is due, if sooner.
            wait = service.due_in().map_or(every, |d| d.min(every));
            continue;
        }
        let result = service.run_once().await;
        if let Err(e) = &result {
            tracing::warn!(error = %error_chain(e), "{} failed", S::NAME);
        }
        after(&result);
        match service.next(&result) {
            Some(w) => {
                every = w;
                wait = service.due_in().map_or(w, |d| d.min(w));
            }
            None => return,
        }
    }
}

/// A maintenance lock: the row `name` in `maintenance_locks`, held by one holder until it
/// expires or is released. The exclusion of the services that span several statements.
pub(crate) struct LeaseLock {
    name: &'static str,
    holder: String,
    ttl_us: i64,
}

impl LeaseLock {
    /// The lock `name` for this process, taken for `ttl` at a time.
    pub(crate) fn new(name: &'static str, ttl: Duration) -> Self {
        LeaseLock {
            name,
            holder: holder_id(),
            ttl_us: i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX),
        }
    }

    /// Takes the lock, or renews it if this holder has it; false if another holder does.
    pub(crate) async fn acquire<C: GenericClient + Sync>(
        &self,
        c: &C,
        store: &Store,
    ) -> Result<bool> {
        store
            .lock_acquire(c, self.name, &self.holder, self.ttl_us)
            .await
    }

    /// Gives the lock up, if this holder has it.
    pub(crate) async fn release<C: GenericClient + Sync>(
        &self,
        c: &C,
        store: &Store,
    ) -> Result<()> {
        store.lock_release(c, self.name, &self.holder).await
    }
}

impl Client {
    /// Takes the maintenance lock `name` for `ttl` (renewing it if this holder has it).
    #[doc(hidden)]
    #[cfg(feature = "__test-hooks")]
    pub async fn try_maintenance_lock(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool> {
        const OP: &str = "take a maintenance lock";
        let ttl_us = crate::input::micros("lock", ttl)?;
        let conn = self.conn(OP).await?;
        self.store()
            .lock_acquire(&**conn, name, holder, ttl_us)
            .await
    }
}

/// This process's name as a lock holder: its pid and a per-call nonce.
fn holder_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("pid {} {nanos}", std::process::id())
}
