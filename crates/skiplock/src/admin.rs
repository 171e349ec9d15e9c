//! Operator actions on individual jobs: retry now, cancel, delete; on a pooled connection or
//! through the caller's own connection or transaction.

use crate::caller_tx::{Conn, Executor};
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

impl Action {
    fn op(self) -> &'static str {
        match self {
            Action::Retry => "retry jobs",
            Action::Cancel => "cancel jobs",
            Action::Delete => "delete jobs",
        }
    }
}

impl Client {
    /// Makes queued, done or failed jobs ready to run now. `attempts` is kept (it fences
    /// stale workers); `max_attempts` is raised if needed so that each gets another attempt.
    /// Running jobs are left alone.
    ///
    /// A done or failed job with a unique key ([`Unique`](crate::Unique)) whose key another
    /// active job holds (or another job of `ids` with the same key) is not made a second
    /// active job with it: the call fails with [`Error::UniqueConflict`], naming both, and
    /// retries nothing.
    pub async fn retry(&self, ids: &[JobId]) -> Result<AdminReport> {
        let conn = self.conn(Action::Retry.op()).await?;
        let mut tries = 0;
        loop {
            match self.retry_tx(&**conn, ids).await {
                // A duplicate committed between the statement's snapshot and its update:
                // the next run sees it and names it.
                Err(Error::Database { source, .. })
                    if tries < 3 && db::unique::is_unique_clash(&source) =>
                {
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    /// [`Client::retry`] through the caller's connection or transaction: through a
    /// transaction, the jobs become ready (and their wake-up is sent) only if and when it
    /// commits. A duplicate of a unique key is refused as by [`Client::retry`]; if one is
    /// enqueued concurrently and commits while this runs, the database refuses the update
    /// ([`Error::Database`] with SQLSTATE 23505) and the caller's transaction is aborted.
    pub async fn retry_tx<'c>(
        &self,
        conn: impl Executor<'c>,
        ids: &[JobId],
    ) -> Result<AdminReport> {
        self.admin(Action::Retry, conn.into_conn(), ids).await
    }

    /// Cancels queued or running jobs: they become `failed` with `last_error = 'cancelled'`.
    /// A running job keeps its lease until it ends, so a [`Client::retry`] cannot start a second
    /// attempt while the first may still run; its worker is told at once (a `cancel:<id>`
    /// notification, and at its next heartbeat at the latest), and its result is refused.
    pub async fn cancel(&self, ids: &[JobId]) -> Result<AdminReport> {
        let conn = self.conn(Action::Cancel.op()).await?;
        self.cancel_tx(&**conn, ids).await
    }

    /// [`Client::cancel`] through the caller's connection or transaction: through a
    /// transaction, the jobs are cancelled (and a running job's worker is told) only if and
    /// when it commits.
    pub async fn cancel_tx<'c>(
        &self,
        conn: impl Executor<'c>,
        ids: &[JobId],
    ) -> Result<AdminReport> {
        self.admin(Action::Cancel, conn.into_conn(), ids).await
    }

    /// Deletes jobs that are not running (cancel a running job first).
    pub async fn delete(&self, ids: &[JobId]) -> Result<AdminReport> {
        let conn = self.conn(Action::Delete.op()).await?;
        self.delete_tx(&**conn, ids).await
    }

    /// [`Client::delete`] through the caller's connection or transaction: through a
    /// transaction, the jobs are gone only if and when it commits.
    pub async fn delete_tx<'c>(
        &self,
        conn: impl Executor<'c>,
        ids: &[JobId],
    ) -> Result<AdminReport> {
        self.admin(Action::Delete, conn.into_conn(), ids).await
    }

    async fn admin(
        &self,
        action: Action,
        mut conn: Conn<'_>,
        ids: &[JobId],
    ) -> Result<AdminReport> {
        let mut raw: Vec<i64> = ids.iter().map(|id| id.0).collect();
        raw.sort_unstable();
        raw.dedup();
        if raw.is_empty() {
            return Ok(AdminReport::default());
        }
        let store = self.store();
        let (mut changed, clashes) = match action {
            Action::Retry => store.job_retry(conn.reborrow(), &raw).await?,
            Action::Cancel => (store.job_cancel(conn.reborrow(), &raw).await?, Vec::new()),
            Action::Delete => (store.job_delete(conn.reborrow(), &raw).await?, Vec::new()),
        };
        if let Some(&(id, duplicate)) = clashes.first() {
            return Err(Error::UniqueConflict { id, duplicate });
        }
        changed.sort_unstable();
        let rest: Vec<i64> = raw
            .iter()
            .copied()
            .filter(|id| changed.binary_search(&JobId(*id)).is_err())
            .collect();
        // The states of the others, read in the same connection, so that a transaction sees
        // its own changes.
        let states = if rest.is_empty() {
            Vec::new()
        } else {
            store.job_states(conn, &rest).await?
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
