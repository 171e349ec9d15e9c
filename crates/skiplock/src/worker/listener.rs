//! The LISTEN connection: one dedicated, direct connection per worker (never a pooled one),
//! which wakes the named queue's producer on each notification. Notifications are only a
//! hint: on connection loss it reconnects with capped, jittered backoff, and after every
//! (re)connect it wakes every queue, since notifications sent meanwhile are lost.
//!
//! After each LISTEN it checks that notifications really come back: it sends one
//! (`probe:<random>`) from a pooled connection and waits up to [`PROBE_WAIT`] for it.
//! Through a transaction-pooling proxy the LISTEN "succeeds" but nothing is ever heard; then,
//! as while the connection is down, the worker polls (at the default interval if the poll
//! was off) instead of waiting deaf forever.
//!
//! A connection that heard its self-test is checked again once per heartbeat interval (with
//! the poll off, only after real work or while a job runs, so that an idle worker sends
//! nothing): a new self-test that does not come back within [`PROBE_WAIT`] means the
//! connection went silent (dropped without a reset: a half-open connection), and it is
//! replaced. So a silently dropped LISTEN connection is noticed within one heartbeat interval
//! plus [`PROBE_WAIT`]; an idle poll-off worker relies on the kernel instead (TCP keepalives
//! and `tcp_user_timeout`, about a minute with skiplock's connection settings).
//!
//! Once its self-test came back, the connection waits on the queues whose producers ask it
//! to (their claims came back short): see [`Waits`]. While it waits on a queue, INSERTs into
//! it notify; while no session does, they send nothing (migration 15). A self-test that
//! could not be sent is sent again after [`PROBE_RESEND`].
//!
//! Payloads: a queue name wakes that queue; `cancel:<id>` cancels that job's running attempts
//! on this worker at once (their results are dropped); `pause:<queue>` and `resume:<queue>`
//! tell that queue's producer of a pause (it stops asking) or a resume (it claims at once);
//! `schedule:changed` wakes the scheduler; `probe:<token>` is a self-test. The scheduler is
//! woken too after every (re)connect (a change may have gone unheard) and when the listener
//! goes deaf (so that it polls meanwhile).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::AsyncMessage;

use super::backoff::backoff;
use super::events::WorkerEvent;
use super::state::Shared;
use crate::error::{error_chain, Error};
use crate::job::JobId;

/// How long the self-test notification may take to come back.
pub(crate) const PROBE_WAIT: Duration = Duration::from_secs(2);

/// How long after a failed sending of the self-test (before one was heard) to send another.
const PROBE_RESEND: Duration = Duration::from_secs(1);

/// The payload prefix of a self-test notification.
const PROBE_PREFIX: &str = "probe:";

/// The payload prefix asking workers to cancel a running job (`cancel:<id>`).
const CANCEL_PREFIX: &str = "cancel:";

/// The payload prefix telling workers that a queue was paused (`pause:<queue>`).
const PAUSE_PREFIX: &str = "pause:";

/// The payload prefix telling workers that a queue was resumed (`resume:<queue>`).
const RESUME_PREFIX: &str = "resume:";

pub(crate) async fn run(shared: Arc<Shared>) {
    let Some((config, connector)) = shared.listen_config.clone() else {
        return;
    };
    let mut state = State {
        failures: 0,
        warned_deaf: false,
    };
    // 0 until connected, again after each disconnect, and when the listener stops.
    let _connected = Connected::new();
    loop {
        let outcome = tokio::select! {
            () = shared.stop_services.cancelled() => return,
            r = listen_once(&shared, &config, &connector, &mut state) => r,
        };
        // Nothing is heard until the next connection proves it hears: poll meanwhile.
        crate::metrics::flag(crate::metrics::LISTENER_CONNECTED, false);
        went_deaf(&shared);
        match outcome {
            Ok(End::Closed) => tracing::warn!("LISTEN connection closed; reconnecting"),
            Ok(End::Silent) => tracing::warn!(
                wait = ?PROBE_WAIT,
                "LISTEN connection went silent: its self-test did not come back; reconnecting"
            ),
            Ok(End::WaitFailed(e)) => tracing::warn!(
                error = %error_chain(&e),
                "LISTEN connection could not wait on a queue; reconnecting"
            ),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "LISTEN connection failed; reconnecting")
            }
        }
        state.failures += 1;
        let wait = backoff(state.failures, Duration::from_secs(5));
        tokio::select! {
            () = shared.stop_services.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Sets [`crate::metrics::LISTENER_CONNECTED`] to 0 when made and when dropped.
struct Connected;

impl Connected {
    fn new() -> Self {
        crate::metrics::flag(crate::metrics::LISTENER_CONNECTED, false);
        Connected
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        crate::metrics::flag(crate::metrics::LISTENER_CONNECTED, false);
    }
}

struct State {
    failures: u32,
    warned_deaf: bool,
}

/// Why a LISTEN connection ended without an error.
enum End {
    /// The server closed it.
    Closed,
    /// It heard its self-test once, then not again: nothing comes through any more.
    Silent,
    /// A statement that starts or stops waiting on a queue failed.
    WaitFailed(Error),
}

/// Where the self-test of the current connection stands.
enum Probe {
    /// Being sent.
    Sending,
    /// Sent; it must come back before the deadline.
    Waiting(Instant),
    /// Heard, given up on, or not sendable.
    Settled,
}

async fn listen_once(
    shared: &Shared,
    config: &tokio_postgres::Config,
    connector: &crate::tls::Connector,
    state: &mut State,
) -> Result<End, tokio_postgres::Error> {
    let (client, mut conn) = connector.connect(config).await?;
    let channel = shared.client.schema().channel_quoted();
    let command = format!("LISTEN {channel}");
    let listen = client.batch_execute(&command);
    tokio::pin!(listen);
    // Drive the connection while the LISTEN command runs.
    loop {
        tokio::select! {
            r = &mut listen => { r?; break; }
            m = std::future::poll_fn(|cx| conn.poll_message(cx)) => match m {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(End::Closed),
            },
        }
    }
    state.failures = 0;
    tracing::debug!(%channel, "listening");
    crate::metrics::flag(crate::metrics::LISTENER_CONNECTED, true);
    shared.counters.events.emit(|| WorkerEvent::Listening);
    // Anything enqueued before this LISTEN took effect (while we were away, or between the
    // producers' first claim and now) sent its notification to nobody: look once. A resume
    // may have been missed too: no queue is believed paused until its next lookup.
    for q in shared.queues.values() {
        q.pause.forget();
    }
    shared.wake_all();
    // So may a schedule's change: the scheduler reads the schedules again.
    shared.schedules_changed.notify_one();

    let token = format!(
        "{PROBE_PREFIX}{:016x}",
        super::backoff::jitter(Duration::MAX).as_micros()
    );
    let send = send_probe(shared, &token);
    tokio::pin!(send);
    let mut probe = Probe::Sending;
    // The send is polled to its end even when the probe is heard first (the notification
    // can overtake the reply): a send future left pending would keep its pooled connection
    // checked out for as long as this connection lives.
    let mut sending = true;
    // Set once this connection heard its self-test: from then on it is checked again once
    // per heartbeat interval (see the module's comment).
    let mut heard = false;
    let check_every = shared.cfg.heartbeat_interval;
    let mut next_check = Instant::now() + check_every;
    let mut worked = shared.activity();
    // The queues this connection waits on (see `Waits`); it waits only once it has heard
    // its self-test, so that it never takes session locks through a transaction pooler.
    let mut waits = Waits::default();
    let _unwaited = Unwaited(shared);
    let mut wait_op: Option<WaitFuture<'_>> = None;
    // The self-test could not be sent before it was heard: send it again then.
    let mut resend_at: Option<Instant> = None;
    loop {
        if heard && wait_op.is_none() {
            wait_op = waits.next_op(shared, &client);
        }
        let deadline = match probe {
            Probe::Waiting(at) => Some(at),
            _ => None,
        };
        let check = if heard {
            (!sending && matches!(probe, Probe::Settled)).then_some(next_check)
        } else {
            resend_at
        };
        tokio::select! {
            () = sleep_until(check) => {
                next_check = Instant::now() + check_every;
                // Not heard yet (its sending failed): send it again, since this connection
                // waits on no queue until it is heard.
                if !heard || shared.worked_since(&mut worked) {
                    resend_at = None;
                    send.set(send_probe(shared, &token));
                    sending = true;
                    probe = Probe::Sending;
                }
            }
            sent = &mut send, if sending => match sent {
                _ if !matches!(probe, Probe::Sending) => sending = false,
                Ok(()) => {
                    sending = false;
                    probe = Probe::Waiting(Instant::now() + PROBE_WAIT);
                }
                Err(e) => {
                    sending = false;
                    // Unknown, not deaf: the database may be briefly out of reach.
                    tracing::debug!(error = %error_chain(&e), "could not send the LISTEN self-test");
                    probe = Probe::Settled;
                    if !heard {
                        resend_at = Some(Instant::now() + PROBE_RESEND);
                    }
                }
            },
            done = async { wait_op.as_mut().expect("guarded").await }, if wait_op.is_some() => {
                wait_op = None;
                match done {
                    Ok(done) => waits.done(shared, done),
                    Err(e) => return Ok(End::WaitFailed(e)),
                }
            }
            () = shared.waits_changed.notified() => {}
            () = sleep_until(waits.next_retry(shared)), if wait_op.is_none() && heard => {}
            () = sleep_until(deadline) => {
                if heard {
                    return Ok(End::Silent);
                }
                probe = Probe::Settled;
                went_deaf(shared);
                if !state.warned_deaf {
                    state.warned_deaf = true;
                    tracing::warn!(
                        listen = %describe(config),
                        poll = ?shared.poll_interval(),
                        "LISTEN through a transaction-pooling proxy hears nothing: give the \
                         worker a direct listen_url (it polls meanwhile)"
                    );
                }
            }
            m = std::future::poll_fn(|cx| conn.poll_message(cx)) => match m {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if n.payload() == token {
                        tracing::debug!("LISTEN self-test heard");
                        heard = true;
                        next_check = Instant::now() + check_every;
                        probe = Probe::Settled;
                        shared.set_listen_deaf(false);
                    } else {
                        on_notification(shared, n.payload());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(End::Closed),
            },
        }
    }
}

/// One statement of [`Waits`] in flight on the LISTEN connection.
type WaitFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<WaitDone, Error>> + Send + 'a>>;

/// What a statement of [`Waits`] did.
enum WaitDone {
    /// `queue_wait.sql` on a queue: the stripes taken, and whether every stripe is held.
    Wait(String, Vec<i32>, bool),
    /// `queue_unwait.sql` on a queue: none held any more.
    Unwait(String),
}

/// The queues this LISTEN connection waits on (migration 15): while it holds every stripe of
/// a queue, every INSERT into it notifies; while it holds none, an INSERT that finds no
/// other session waiting sends nothing. Producers say which queues they want waited on
/// ([`QueueSlot::want_wait`](super::state::QueueSlot::want_wait)); one statement runs at a
/// time, never blocking: a stripe held by an INSERT not yet committed is tried again after
/// [`WAIT_RETRY_FIRST`], doubling up to [`WAIT_RETRY_MAX`]. When every stripe is held, the
/// queue's producer is woken for the claim that sees every job that sent no notification.
/// The locks are the session's: they end with the connection.
#[derive(Default)]
struct Waits {
    /// Stripes held, by queue.
    held: std::collections::HashMap<String, Vec<i32>>,
    /// The queues whose every stripe is held.
    complete: std::collections::HashSet<String>,
    /// Queues with a stripe that could not be taken: when to try again, and how many tries
    /// failed in a row.
    retry: std::collections::HashMap<String, (Instant, u32)>,
}

/// The first wait before trying again a stripe that an INSERT held.
const WAIT_RETRY_FIRST: Duration = Duration::from_millis(2);

/// The longest wait between tries of a stripe that an INSERT held.
const WAIT_RETRY_MAX: Duration = Duration::from_millis(100);

impl Waits {
    /// The next statement to run, if any: stop waiting on a queue no longer wanted, or try
    /// the missing stripes of one wanted (unless a retry is pending).
    fn next_op<'a>(
        &mut self,
        shared: &'a Shared,
        client: &'a tokio_postgres::Client,
    ) -> Option<WaitFuture<'a>> {
        let store = shared.client.store();
        // Wanted again before the locks were released: still held, waiting again.
        for (name, q) in &shared.queues {
            if self.complete.contains(name) {
                q.mark_waiting();
            }
        }
        for (name, q) in &shared.queues {
            let wanted = q.wait_wanted.load(Ordering::SeqCst);
            let held = self.held.get(name).cloned().unwrap_or_default();
            if !wanted && !held.is_empty() {
                self.complete.remove(name);
                let name = name.clone();
                return Some(Box::pin(async move {
                    store.queue_unwait(client, &name, &held).await?;
                    Ok(WaitDone::Unwait(name))
                }));
            }
        }
        let now = Instant::now();
        for (name, q) in &shared.queues {
            let due = self.retry.get(name).is_none_or(|(at, _)| *at <= now);
            if due && q.wait_wanted.load(Ordering::SeqCst) && !self.complete.contains(name) {
                let held = self.held.get(name).cloned().unwrap_or_default();
                let name = name.clone();
                return Some(Box::pin(async move {
                    let (taken, all) = store.queue_wait(client, &name, &held).await?;
                    Ok(WaitDone::Wait(name, taken, all))
                }));
            }
        }
        None
    }

    /// When the next try of a stripe is due, for a queue still wanted and not yet complete.
    fn next_retry(&self, shared: &Shared) -> Option<Instant> {
        self.retry
            .iter()
            .filter(|(name, _)| {
                !self.complete.contains(*name)
                    && shared
                        .queues
                        .get(*name)
                        .is_some_and(|q| q.wait_wanted.load(Ordering::SeqCst))
            })
            .map(|(_, (at, _))| *at)
            .min()
    }

    fn done(&mut self, shared: &Shared, done: WaitDone) {
        match done {
            WaitDone::Unwait(name) => {
                self.held.remove(&name);
                self.retry.remove(&name);
            }
            WaitDone::Wait(name, taken, all) => {
                self.held.entry(name.clone()).or_default().extend(taken);
                if !all {
                    let tries = self.retry.get(&name).map_or(0, |r| r.1);
                    let wait = WAIT_RETRY_FIRST
                        .saturating_mul(1 << tries.min(10))
                        .min(WAIT_RETRY_MAX);
                    self.retry.insert(name, (Instant::now() + wait, tries + 1));
                    return;
                }
                self.retry.remove(&name);
                self.complete.insert(name.clone());
                let Some(q) = shared.queues.get(&name) else {
                    return;
                };
                // Still wanted: every INSERT from now on notifies, and the claim this wakes
                // sees the jobs of every INSERT that did not.
                q.mark_waiting();
            }
        }
    }
}

/// Clears every queue's `waiting` when the LISTEN connection ends (its locks end with it).
struct Unwaited<'a>(&'a Shared);

impl Drop for Unwaited<'_> {
    fn drop(&mut self) {
        for q in self.0.queues.values() {
            q.waiting.store(false, Ordering::SeqCst);
        }
    }
}

/// Nothing can be heard (the connection is down, or its self-test went unanswered): every
/// producer, and the scheduler, which may be sleeping with no timer, takes up the fallback
/// poll now in force.
fn went_deaf(shared: &Shared) {
    let was = shared
        .counters
        .listen_deaf
        .load(std::sync::atomic::Ordering::Relaxed);
    shared.set_listen_deaf(true);
    if !was {
        shared.schedules_changed.notify_one();
    }
}

/// Acts on one notification's payload.
fn on_notification(shared: &Shared, payload: &str) {
    if payload.starts_with(PROBE_PREFIX) {
        // Another worker's self-test.
        return;
    }
    if let Some(id) = payload.strip_prefix(CANCEL_PREFIX) {
        let Ok(id) = id.trim().parse::<i64>() else {
            return;
        };
        shared.note_activity();
        let n = shared.cancel_job(JobId(id));
        if n > 0 {
            tracing::info!(
                id,
                "job cancelled: telling its handler to stop; its result will be dropped"
            );
        }
        return;
    }
    if payload.starts_with(crate::periodic::NOTIFY_PREFIX) {
        shared.schedules_changed.notify_one();
        return;
    }
    for (prefix, paused) in [(PAUSE_PREFIX, true), (RESUME_PREFIX, false)] {
        if let Some(name) = payload.strip_prefix(prefix) {
            shared.note_activity();
            if let Some(q) = shared.queues.get(name) {
                q.pause.told(name, paused);
                if !paused {
                    q.wake.notify_one();
                }
            }
            return;
        }
    }
    shared.note_activity();
    if let Some(q) = shared.queues.get(payload) {
        q.wake.notify_one();
    }
}

/// Sends the self-test notification from a pooled connection (see `listen_probe.sql` for
/// why not from the listening one).
async fn send_probe(shared: &Shared, token: &str) -> Result<(), Error> {
    const OP: &str = "send the LISTEN self-test";
    let conn = shared.client.conn(OP).await?;
    let channel = shared.client.schema().channel();
    let send = shared.client.store().listen_probe(&conn, channel, token);
    match tokio::time::timeout(PROBE_WAIT, send).await {
        Ok(r) => r,
        Err(_) => {
            super::reply::abandon(shared, conn);
            Err(Error::NoReply {
                op: OP,
                after: PROBE_WAIT,
            })
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Where the LISTEN connection goes, for the log (no password).
fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}
