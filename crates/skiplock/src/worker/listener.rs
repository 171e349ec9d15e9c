//! The LISTEN connection: one dedicated, direct connection per worker (never a pooled one),
//! which wakes the named queue's producer on each notification. Notifications are only a
//! hint: on connection loss it reconnects with capped, jittered backoff, and after every
//! (re)connect it wakes every queue, since notifications sent meanwhile are lost.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::AsyncMessage;

use super::{backoff, Shared};

pub(crate) async fn run(shared: Arc<Shared>) {
    let Some(config) = shared.listen_config.clone() else {
        return;
    };
    let mut failures = 0u32;
    loop {
        let outcome = tokio::select! {
            () = shared.stop_services.cancelled() => return,
            r = listen_once(&shared, &config, &mut failures) => r,
        };
        match outcome {
            Ok(()) => tracing::warn!("LISTEN connection closed; reconnecting"),
            Err(e) => {
                tracing::warn!(error = %super::producer::error_chain(&e), "LISTEN connection failed; reconnecting")
            }
        }
        failures += 1;
        let wait = backoff(failures, Duration::from_secs(5));
        tokio::select! {
            () = shared.stop_services.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

async fn listen_once(
    shared: &Shared,
    config: &tokio_postgres::Config,
    failures: &mut u32,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut conn) = shared.client.connector().connect(config).await?;
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
                None => return Ok(()),
            },
        }
    }
    *failures = 0;
    tracing::debug!(%channel, "listening");
    // Anything enqueued before this LISTEN took effect (while we were away, or between the
    // producers' first claim and now) sent its notification to nobody: look once.
    for q in shared.queues.values() {
        q.wake.notify_one();
    }
    loop {
        match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(n))) => {
                shared.note_activity();
                if let Some(q) = shared.queues.get(n.payload()) {
                    q.wake.notify_one();
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e),
            None => return Ok(()),
        }
    }
}
