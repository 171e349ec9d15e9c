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
//! Payloads: a queue name wakes that queue; `cancel:<id>` cancels that job's running attempts
//! on this worker at once (their results are dropped); `pause:<queue>` and `resume:<queue>`
//! tell that queue's producer of a pause (it stops asking) or a resume (it claims at once);
//! `schedule:changed` wakes the scheduler; `probe:<token>` is a self-test. The scheduler is
//! woken too after every (re)connect (a change may have gone unheard) and when the listener
//! goes deaf (so that it polls meanwhile).

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
    loop {
        let deadline = match probe {
            Probe::Waiting(at) => Some(at),
            _ => None,
        };
        let check = (heard && !sending && matches!(probe, Probe::Settled)).then_some(next_check);
        tokio::select! {
            () = sleep_until(check) => {
                next_check = Instant::now() + check_every;
                if shared.worked_since(&mut worked) {
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
                }
            },
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
