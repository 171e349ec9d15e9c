//! Closes pool connections that have not been used for a while, so that an idle worker
//! holds only its LISTEN connection. Local bookkeeping only: it sends no statement.

use std::sync::Arc;
use std::time::Duration;

use super::Shared;

pub(crate) async fn run(shared: Arc<Shared>) {
    let Some(timeout) = shared.cfg.idle_connection_timeout else {
        return;
    };
    let every = (timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(30));
    loop {
        tokio::select! {
            () = shared.stop_services.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        // The runtime's own pool and the application's (the same pool for a client built
        // from one: then the second pass finds nothing more).
        for client in [&shared.client, &shared.app_client] {
            let r = client
                .pool()
                .retain(|_, metrics| metrics.last_used() < timeout);
            if !r.removed.is_empty() {
                tracing::debug!(closed = r.removed.len(), "closed idle pool connections");
            }
        }
    }
}
