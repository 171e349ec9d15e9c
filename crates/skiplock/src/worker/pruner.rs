//! Deletes (or archives) finished jobs past their retention, on an interval, one process at
//! a time (the prune's maintenance lock). With the poll off, only after real work.

use std::sync::Arc;

use super::Shared;

pub(crate) async fn run(shared: Arc<Shared>) {
    let Some(opts) = shared.cfg.prune else {
        return;
    };
    super::maintain(&shared, shared.cfg.prune_interval, || async {
        match shared.client.prune(opts).await {
            Ok(r) if r.skipped => tracing::debug!("another process is pruning"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %super::producer::error_chain(&e), "pruning failed"),
        }
    })
    .await;
}
