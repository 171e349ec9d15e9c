//! Closes pool connections that have not been used for a while, so that an idle worker
//! holds only its LISTEN connection. Local bookkeeping only: it sends no statement, and
//! every process runs its own.

use std::time::Duration;

use super::Service;
use crate::client::Client;
use crate::error::Result;

/// The idle-connection closer's settings in a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdleConfig {
    /// Pool connections unused for this long are closed (default
    /// [`IdleConfig::DEFAULT_TIMEOUT`], 5 minutes). They are looked at every half of it,
    /// between every 100 ms and every 30 s.
    pub timeout: Duration,
}

impl IdleConfig {
    /// The default timeout.
    pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
}

impl Default for IdleConfig {
    fn default() -> Self {
        IdleConfig {
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct IdleReport {
    /// Connections closed.
    pub closed: usize,
}

/// The closer over a worker's pools.
pub(crate) struct IdleCloser {
    /// The runtime's own pool and the application's (the same pool for a client built
    /// from one: then the second pass finds nothing more).
    clients: [Client; 2],
    cfg: IdleConfig,
}

impl IdleCloser {
    pub(crate) fn new(clients: [Client; 2], cfg: IdleConfig) -> Self {
        IdleCloser { clients, cfg }
    }

    fn every(&self) -> Duration {
        (self.cfg.timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(30))
    }
}

impl Service for IdleCloser {
    type Report = IdleReport;
    const NAME: &'static str = "closing idle connections";
    const AFTER_WORK_ONLY: bool = false;

    fn first_wait(&self) -> Duration {
        self.every()
    }

    async fn run_once(&mut self) -> Result<IdleReport> {
        Ok(run_once(&self.clients, self.cfg))
    }

    fn next(&mut self, _: &Result<IdleReport>) -> Option<Duration> {
        Some(self.every())
    }
}

/// Closes the connections of `clients`' pools unused for longer than the timeout.
pub(crate) fn run_once(clients: &[Client], cfg: IdleConfig) -> IdleReport {
    let mut report = IdleReport::default();
    for client in clients {
        let r = client
            .pool()
            .retain(|_, metrics| metrics.last_used() < cfg.timeout);
        if !r.removed.is_empty() {
            tracing::debug!(closed = r.removed.len(), "closed idle pool connections");
        }
        report.closed += r.removed.len();
    }
    report
}
