//! The queue's health: per-queue counts, the jobs table's dead tuples and vacuum
//! times, and the sessions that keep vacuum from removing dead rows.
//!
//! The report's types are in `report` (which the statements in `db::health` fill in);
//! this module reads them through a [`Client`].

pub(crate) mod report;

use std::time::Duration;

pub use report::{Blocker, HealthReport, QueueHealth, TableHealth, DEFAULT_BLOCKER_AGE};

use crate::client::Client;
use crate::error::Result;
use crate::input;

impl Client {
    /// The health report. Sessions `idle in transaction` are always reported; others when
    /// their transaction is older than `blocker_age` ([`DEFAULT_BLOCKER_AGE`] is a sensible
    /// value).
    pub async fn health(&self, blocker_age: Duration) -> Result<HealthReport> {
        const OP: &str = "read the queue's health";
        let older_than_us = input::micros("blocker age", blocker_age)?;
        let conn = self.conn(OP).await?;
        let store = self.store();
        let queues = store.health_queues(&**conn).await?;
        let table = store.health_table(&**conn, self.schema().name()).await?;
        let blockers = store.health_blockers(&**conn, older_than_us).await?;
        let mut warnings: Vec<String> = blockers.iter().map(Blocker::warning).collect();
        if let Some(t) = &table {
            if t.n_dead_tup > 10_000 && t.n_dead_tup > t.n_live_tup {
                warnings.push(format!(
                    "the jobs table has more dead row versions ({}) than live rows ({}): \
                     check that autovacuum runs and that no transaction stays open",
                    t.n_dead_tup, t.n_live_tup
                ));
            }
        }
        for q in queues.iter().filter(|q| q.unserved > 0) {
            warnings.push(format!(
                "queue {}: {} queued job(s) wait for a worker that handles their kind (a worker \
                 without a handler for it handed them back; their last error names the kind): \
                 run a worker that registers it",
                q.queue, q.unserved
            ));
        }
        Ok(HealthReport {
            queues,
            table,
            blockers,
            warnings,
        })
    }
}
