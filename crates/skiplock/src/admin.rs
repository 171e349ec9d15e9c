//! Operator actions on individual jobs (B5): retry now, cancel, delete.

use crate::client::Client;
use crate::db;
use crate::error::{Error, Result};
use crate::job::{JobId, JobState};

/// What an admin call did to each id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct AdminReport {
    /// The jobs changed.
    pub changed: Vec<JobId>,
    /// The jobs left alone, with their state (`None`: no such job).
    pub unchanged: Vec<(JobId, Option<JobState>)>,
}

#[derive(Clone, Copy)]
enum Action {
    Retry,
    Cancel,
    Delete,
}

impl Client {
    /// Makes queued, done or failed jobs ready to run now. `attempts` is kept (it fences
    /// stale workers); `max_attempts` is raised if needed so that each gets another attempt.
    /// Running jobs are left alone.
    pub async fn retry(&self, ids: &[JobId]) -> Result<AdminReport> {
        self.admin(Action::Retry, ids, "retry jobs").await
    }

    /// Cancels queued or running jobs: they become `failed` with `last_error = 'cancelled'`.
    /// A running job keeps its lease until it ends, so a [`Client::retry`] cannot start a second
    /// attempt while the first may still run; its worker is told at once (a `cancel:<id>`
    /// notification, and at its next heartbeat at the latest), and its result is refused.
    pub async fn cancel(&self, ids: &[JobId]) -> Result<AdminReport> {
        self.admin(Action::Cancel, ids, "cancel jobs").await
    }

    /// Deletes jobs that are not running (cancel a running job first).
    pub async fn delete(&self, ids: &[JobId]) -> Result<AdminReport> {
        self.admin(Action::Delete, ids, "delete jobs").await
    }

    async fn admin(&self, action: Action, ids: &[JobId], op: &'static str) -> Result<AdminReport> {
        let mut raw: Vec<i64> = ids.iter().map(|id| id.0).collect();
        raw.sort_unstable();
        raw.dedup();
        if raw.is_empty() {
            return Ok(AdminReport::default());
        }
        let conn = self.conn(op).await?;
        let sql = self.sql();
        let statement = match action {
            Action::Retry => &sql.retry,
            Action::Cancel => &sql.cancel,
            Action::Delete => &sql.delete,
        };
        let mut changed = db::job::admin(&**conn, statement, &raw)
            .await
            .map_err(Error::db(op))?;
        changed.sort_unstable();
        let rest: Vec<i64> = raw
            .iter()
            .copied()
            .filter(|id| changed.binary_search(&JobId(*id)).is_err())
            .collect();
        let states = if rest.is_empty() {
            Vec::new()
        } else {
            db::job::states(&**conn, sql, &rest)
                .await
                .map_err(Error::db(op))?
        };
        let unchanged = rest
            .into_iter()
            .map(|id| {
                let state = states.iter().find(|(j, _)| j.0 == id).map(|(_, s)| *s);
                (JobId(id), state)
            })
            .collect();
        Ok(AdminReport { changed, unchanged })
    }
}
