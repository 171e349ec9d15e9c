//! The worker's scheduler service: registers the worker's schedules, then runs rounds
//! ([`crate::periodic::round`]) one at a time across all processes (a transaction-scoped advisory
//! lock; a process that finds it taken tries again a tick later), sleeping in between until
//! the next fire. A change to the schedules (heard through the LISTEN connection) wakes it
//! at once; the fallback poll in force, if any, bounds the sleep, for changes whose
//! notification was lost. With the poll off, a change made while the LISTEN connection was
//! down went to nobody: the listener wakes the scheduler when it goes deaf (the fallback poll
//! is then in force, and bounds the next sleep) and again after every reconnect, so that it
//! reads the schedules again, as the producers claim again. With the poll off it sends
//! nothing while no schedule is due and nothing changes, and a long poll lets a
//! scale-to-zero database sleep between fires.
//!
//! A role without the right to read the schedules table gets one warning, and the service
//! stops (this worker fires no schedule).

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::error::{error_chain, Error, Result};
use crate::periodic::{round, FireReport, Periodic, SchedulerConfig};

/// What the scheduler needs of the worker that runs it (the worker's shared state
/// implements it): so that this service does not depend on the worker's internals.
pub(crate) trait SchedulerHost: Send + Sync {
    /// The client whose schema's schedules to fire.
    fn client(&self) -> &Client;
    /// Cancelled when the worker's services stop.
    fn stopped(&self) -> &tokio_util::sync::CancellationToken;
    /// Woken by a notification that the schedules changed.
    fn schedules_changed(&self) -> &tokio::sync::Notify;
    /// Fires enqueued jobs: real work, for the services that wait for it.
    fn note_activity(&self);
    /// The fallback poll in force, if any.
    fn poll_interval(&self) -> Option<Duration>;
}

/// Added to a sleep until a fire, so that the round after it finds the fire due although
/// the database's clock was read a moment before the sleep began.
const SLACK: Duration = Duration::from_millis(5);

/// The longest wait after failed rounds.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The wait while the schema has no schedules table (not migrated to this version).
const NO_TABLE_WAIT: Duration = Duration::from_secs(300);

pub(crate) async fn run<H: SchedulerHost>(shared: Arc<H>, periodic: Periodic) {
    let cfg = periodic.config;
    let mut failures = 0u32;
    while let Err(e) = register(shared.client(), &periodic).await {
        if denied(&e) {
            return not_allowed(&*shared);
        }
        failures += 1;
        warn(
            &e,
            failures,
            "could not register the worker's schedules; retrying",
        );
        tokio::select! {
            () = shared.stopped().cancelled() => return,
            () = tokio::time::sleep(wait_after(&e, failures, &cfg)) => {}
        }
    }
    let mut failures = 0u32;
    let mut delay = Some(Duration::ZERO);
    loop {
        tokio::select! {
            () = shared.stopped().cancelled() => return,
            () = shared.schedules_changed().notified() => {}
            () = sleep(delay) => {}
        }
        delay = match locked_round(shared.client(), &cfg).await {
            Ok(None) => Some(cfg.tick),
            Ok(Some(report)) => {
                failures = 0;
                if report.enqueued > 0 {
                    // The jobs are ready now (their run_at is their fire time).
                    shared.note_activity();
                }
                let due = report.next_fire_in.map(|d| d + SLACK);
                // With the poll off, no bare timer: the next fire, or a change.
                match (due, shared.poll_interval()) {
                    (Some(d), Some(p)) => Some(d.min(p)),
                    (d, p) => d.or(p),
                }
            }
            Err(e) if denied(&e) => return not_allowed(&*shared),
            Err(e) => {
                failures += 1;
                warn(&e, failures, "scheduler round failed");
                Some(wait_after(&e, failures, &cfg))
            }
        };
    }
}

/// For a worker that runs until idle: registers its schedules and runs one round first, so
/// that a worker started from cron (`skiplock work --drain`) also fires what is due.
pub(crate) async fn run_until_idle<H: SchedulerHost>(shared: &H, periodic: Periodic) {
    let done = match register(shared.client(), &periodic).await {
        Ok(()) => locked_round(shared.client(), &periodic.config)
            .await
            .map(drop),
        Err(e) => Err(e),
    };
    match done {
        Ok(()) => {}
        Err(e) if denied(&e) => not_allowed(shared),
        Err(e) => warn(&e, 1, "scheduler round failed"),
    }
}

async fn register(client: &Client, periodic: &Periodic) -> Result<()> {
    for s in &periodic.schedules {
        let change = client.add_schedule(s).await?;
        tracing::debug!(schedule = %s.name, ?change, "schedule registered");
    }
    Ok(())
}

/// One round in a transaction that holds the scheduler lock; `None` when another process's
/// round holds it.
pub(crate) async fn locked_round(
    client: &Client,
    cfg: &SchedulerConfig,
) -> Result<Option<FireReport>> {
    const OP: &str = "run a scheduler round";
    let mut conn = client.conn(OP).await?;
    let store = client.store();
    let tx = store.begin(&mut conn, OP).await?;
    if !store.schedule_try_lock(&*tx, lock_key(client)).await? {
        return Ok(None);
    }
    let report = round(&*tx, client, cfg, None).await?;
    store.commit(tx, OP).await?;
    Ok(Some(report))
}

/// The scheduler lock's key: FNV-1a of `skiplock scheduler <schema>`.
fn lock_key(client: &Client) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "skiplock scheduler "
        .bytes()
        .chain(client.schema().name().bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

fn denied(e: &Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
}

fn not_allowed<H: SchedulerHost>(shared: &H) {
    tracing::warn!(
        schema = %shared.client().schema(),
        "this role may not use the schedules table: this worker fires no periodic job \
         (grant SELECT, INSERT, UPDATE, DELETE on it to use them)"
    );
}

fn no_table(e: &Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE)
}

fn wait_after(e: &Error, failures: u32, cfg: &SchedulerConfig) -> Duration {
    if no_table(e) {
        NO_TABLE_WAIT
    } else {
        crate::worker::backoff::backoff(failures, MAX_BACKOFF).max(cfg.tick)
    }
}

fn warn(e: &Error, failures: u32, what: &str) {
    if no_table(e) {
        if failures == 1 {
            tracing::warn!(
                "the schema has no schedules table: run `skiplock migrate` (or \
                 Client::migrate) to use periodic jobs"
            );
        }
    } else {
        tracing::warn!(error = %error_chain(e), "{what}");
    }
}

async fn sleep(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
