//! Writes job outcomes in batches: everything that arrived since the last write goes to the
//! database in guarded statements. The successes go through `job_complete_many.sql`, the
//! lean statement, which waits (in id order) for a row another session holds for a moment,
//! such as a claim whose scan met the row; every other outcome, and a batch of successes
//! whose lean write failed once (a row held past the statement's own 500 ms `lock_timeout`,
//! or any other error), goes through
//! `job_finish_many.sql`, which answers for each row:
//!
//! * written: counted by its [`Outcome`] and the state it led to (done, retried, failed,
//!   requeued);
//! * lost: the job was no longer this worker's; logged, never counted as done;
//! * busy: another session held the row locked (the reaper, an operator, this worker's own
//!   heartbeat). Nothing was written; the row is tried again shortly, alone or with the next
//!   batch, while the others of its batch are written at once.
//!
//! A write whose reply never came (the connection failed, or gave no answer within the
//! reply bound, [`WorkerConfig::reply_timeout`](crate::WorkerConfig)) may still have been
//! committed: when a later try finds such a row no longer this claim's, the completer reads
//! the job back (`job_get.sql`) and counts it by what the row shows (done at this attempt,
//! failed or queued again with this attempt's error), so that an outcome whose reply was lost
//! is neither counted twice nor counted lost.
//!
//! A deterministic error of the statement (a data exception such as an error text the
//! database's encoding cannot store, a constraint, a program limit) would fail every retry
//! of the same batch: the batch is then written row by row, so that only the bad row is
//! affected, and an error text the database cannot encode is written again with its
//! non-ASCII characters escaped.
//!
//! Until its outcome is written or given up, a job stays in the
//! [`Outbox`](super::outbox::Outbox)'s pending set,
//! and the heartbeat keeps renewing its lease: a slow or retried write cannot let the lease
//! expire and the job run twice.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_postgres::error::SqlState;

use super::backoff::backoff;
use super::events::JobEnd;
use super::state::Shared;
use crate::db::{
    self,
    job::{Finish, Verdict, Written},
};
use crate::error::{error_chain, Error};
use crate::job::JobState;
use crate::outcome::Outcome;

/// How many times a batch is tried after connection or server errors before giving up.
const MAX_FAILURES: u32 = 20;
/// A busy row is tried again after this, doubling up to [`BUSY_MAX_WAIT`].
const BUSY_FIRST_WAIT: Duration = Duration::from_millis(20);
const BUSY_MAX_WAIT: Duration = Duration::from_secs(1);
/// At shutdown, busy rows are tried for this long before they are given up (their leases
/// expire and the reaper hands the jobs out again).
const BUSY_AT_STOP: Duration = Duration::from_secs(5);

/// Rows the database reported busy, waiting to be tried again.
#[derive(Default)]
struct Busy {
    rows: Vec<Finish>,
    rounds: u32,
    due: Option<Instant>,
}

impl Busy {
    fn add(&mut self, rows: Vec<Finish>) {
        if rows.is_empty() {
            if self.rows.is_empty() {
                self.rounds = 0;
                self.due = None;
            }
            return;
        }
        self.rows.extend(rows);
        let wait = BUSY_FIRST_WAIT
            .saturating_mul(1u32 << self.rounds.min(8))
            .min(BUSY_MAX_WAIT);
        self.rounds = self.rounds.saturating_add(1);
        self.due = Some(Instant::now() + wait);
    }

    fn take(&mut self) -> Vec<Finish> {
        self.due = None;
        std::mem::take(&mut self.rows)
    }
}

pub(crate) async fn run(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Finish>) {
    let max = shared.cfg.max_finish_batch;
    let mut batch = Vec::with_capacity(max);
    let mut busy = Busy::default();
    loop {
        let due = busy.due;
        tokio::select! {
            got = rx.recv() => match got {
                Some(f) => batch.push(f),
                None => break,
            },
            () = sleep_until(due), if due.is_some() => batch.extend(busy.take()),
            () = shared.stop_services.cancelled() => break,
        }
        while batch.len() < max {
            match rx.try_recv() {
                Ok(f) => batch.push(f),
                Err(_) => break,
            }
        }
        let again = flush(&shared, &mut batch).await;
        busy.add(again);
    }
    // Stopping: write whatever is left, then the busy rows for a little while.
    while let Ok(f) = rx.try_recv() {
        batch.push(f);
    }
    batch.extend(busy.take());
    let give_up = Instant::now() + BUSY_AT_STOP;
    loop {
        let again = flush(&shared, &mut batch).await;
        if again.is_empty() {
            break;
        }
        busy.add(again);
        let due = busy.due.unwrap_or_else(Instant::now);
        if due > give_up {
            for f in busy.take() {
                shared.finish_tx.done_with(&f);
                tracing::warn!(id = %f.id, attempt = f.attempt, "outcome not written: the job's row stayed locked by another session; its lease will expire and the reaper will retry it");
            }
            break;
        }
        tokio::time::sleep_until(due).await;
        batch = busy.take();
    }
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Writes `batch` in chunks of at most `max_finish_batch`, the successes first (each chunk
/// holds outcomes of one shape, so that a chunk of successes takes the lean statement);
/// returns the rows found busy. Leaves `batch` empty, its room kept for the next one.
async fn flush(shared: &Shared, batch: &mut Vec<Finish>) -> Vec<Finish> {
    let mut busy = Vec::new();
    let size = shared.cfg.max_finish_batch.max(1);
    let lean = batch.iter().filter(|f| f.is_lean()).count();
    if lean == 0 || lean == batch.len() {
        // One shape (a drain's usual batch): as it came.
        for chunk in batch.chunks(size) {
            write_chunk(shared, chunk, &mut busy).await;
        }
        batch.clear();
    } else {
        let (lean, full): (Vec<Finish>, Vec<Finish>) = batch.drain(..).partition(Finish::is_lean);
        for part in [lean, full] {
            for chunk in part.chunks(size) {
                write_chunk(shared, chunk, &mut busy).await;
            }
        }
    }
    // Outcomes written are work too: the services that run only after work (the gauges with
    // the poll off) read the table once more, after the jobs' ends, not only after their start.
    shared.note_activity();
    busy
}

async fn write_chunk(shared: &Shared, chunk: &[Finish], busy: &mut Vec<Finish>) {
    match write_retrying(shared, chunk).await {
        Ok((verdicts, failures)) => account(shared, chunk, verdicts, failures, busy),
        Err(Failure::Deterministic(e)) if chunk.len() > 1 => {
            tracing::warn!(jobs = chunk.len(), error = %error_chain(&e), "a batch of outcomes was refused; writing its rows one by one");
            for f in chunk {
                write_one(shared, f.clone(), busy).await;
            }
        }
        Err(Failure::Deterministic(e)) => {
            write_one_after(shared, chunk.to_vec(), e, busy).await;
        }
        Err(Failure::GaveUp(e)) => give_up(shared, chunk, &e),
    }
}

/// One row on its own: an error text the database cannot encode is escaped to ASCII.
async fn write_one(shared: &Shared, f: Finish, busy: &mut Vec<Finish>) {
    let one = std::slice::from_ref(&f);
    match write_retrying(shared, one).await {
        Ok((verdicts, failures)) => account(shared, one, verdicts, failures, busy),
        Err(Failure::Deterministic(e)) => write_one_after(shared, vec![f], e, busy).await,
        Err(Failure::GaveUp(e)) => give_up(shared, one, &e),
    }
}

/// A single row the database refused with `e`: written again with its error text escaped
/// if that was the cause, else given up.
async fn write_one_after(shared: &Shared, mut rows: Vec<Finish>, e: Error, busy: &mut Vec<Finish>) {
    let encoding =
        matches!(&e, Error::Database { source, .. } if crate::client::is_encoding_error(source));
    if encoding {
        for f in &mut rows {
            if let Some(error) = f.outcome.error_mut() {
                *error = db::job::ascii_escaped(error);
            }
        }
        match write_retrying(shared, &rows).await {
            Ok((verdicts, failures)) => {
                tracing::info!(
                    jobs = rows.len(),
                    "error text escaped to ASCII: the database's encoding could not store it"
                );
                return account(shared, &rows, verdicts, failures, busy);
            }
            Err(Failure::Deterministic(e) | Failure::GaveUp(e)) => {
                return give_up(shared, &rows, &e)
            }
        }
    }
    give_up(shared, &rows, &e);
}

fn give_up(shared: &Shared, rows: &[Finish], e: &Error) {
    tracing::error!(
        jobs = rows.len(),
        ids = ?rows.iter().map(|f| f.id.0).collect::<Vec<_>>(),
        error = %error_chain(e),
        "could not write job outcomes; their leases will expire and the reaper will retry them"
    );
    for f in rows {
        shared.finish_tx.done_with(f);
    }
}

enum Failure {
    /// The statement itself was refused (SQLSTATE class 22, 23 or 54): the same rows would
    /// be refused again.
    Deterministic(Error),
    /// Connection or server trouble that outlasted the retries.
    GaveUp(Error),
}

fn is_deterministic(e: &Error) -> bool {
    e.code().is_some_and(|c| {
        let code = c.code();
        code.starts_with("22") || code.starts_with("23") || code.starts_with("54")
    })
}

/// Writes `rows`, retrying connection and server errors with backoff. Returns the verdicts
/// and how many attempts failed first.
async fn write_retrying(
    shared: &Shared,
    rows: &[Finish],
) -> Result<(Vec<Verdict<Written>>, u32), Failure> {
    let mut failures = 0u32;
    // The lean statement waits for a held row, but only briefly: a row held longer (its
    // lock_timeout), or any failure, sends the rows through the statement that writes the
    // others and reports a held row busy.
    let mut lean = rows.iter().all(Finish::is_lean);
    loop {
        match write(shared, rows, lean).await {
            Ok(mut v) => {
                // A job completed in its handler's own transaction is refused here when that
                // transaction committed: read back, it counts as done.
                if failures > 0 || rows.iter().any(|f| f.in_tx) {
                    reread(shared, rows, &mut v).await;
                }
                return Ok((v, failures));
            }
            Err(e) if lean && e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                // Nothing was written (the statement failed as a whole): no re-read needed.
                tracing::debug!(
                    "a row of the batch is held by another session; writing the batch around it"
                );
                lean = false;
            }
            Err(e) if is_deterministic(&e) => return Err(Failure::Deterministic(e)),
            Err(e) => {
                lean = false;
                failures += 1;
                if failures > MAX_FAILURES {
                    return Err(Failure::GaveUp(e));
                }
                let wait = backoff(failures, Duration::from_secs(5));
                tracing::warn!(error = %error_chain(&e), retry_in = ?wait, "writing job outcomes failed");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

fn account(
    shared: &Shared,
    rows: &[Finish],
    verdicts: Vec<Verdict<Written>>,
    failures: u32,
    busy: &mut Vec<Finish>,
) {
    let c = &shared.counters;
    let mut tally = crate::metrics::FinishedTally::default();
    for (f, v) in rows.iter().zip(verdicts) {
        match v {
            Verdict::Busy => {
                tracing::debug!(id = %f.id, attempt = f.attempt, "the job's row is locked by another session; writing its outcome shortly");
                busy.push(f.clone());
                continue;
            }
            Verdict::Applied(w) => {
                if w.state == JobState::Queued {
                    // Back in the queue (a retry, a snooze, a hand-back): wake its producer
                    // when it is due (by the database's clock), even with the poll off.
                    let wait = Duration::from_micros(w.retry_in_us.max(0).unsigned_abs());
                    shared.wake_queue_at(&f.queue, Instant::now() + wait);
                }
                let end = match (&f.outcome, w.state) {
                    (Outcome::Complete, _) | (_, JobState::Done) => JobEnd::Done,
                    (_, JobState::Failed) => JobEnd::Failed,
                    (Outcome::Snooze { .. }, _) => JobEnd::Snoozed,
                    (o, _) if o.is_requeue() => JobEnd::HandedBack,
                    _ => JobEnd::Retried,
                };
                c.ended(f.id, f.attempt, end);
                let word = if w.state == JobState::Done {
                    Outcome::Complete.sql_name()
                } else {
                    f.outcome.sql_name()
                };
                tally.add(&f.queue, &f.kind, word, w.state.as_str());
            }
            Verdict::Lost => {
                c.ended(f.id, f.attempt, JobEnd::Lost);
                tally.add(&f.queue, &f.kind, "lost", "none");
                if failures > 0 {
                    tracing::warn!(id = %f.id, attempt = f.attempt, "outcome not applied; it may have been written before the connection failed");
                } else {
                    tracing::warn!(id = %f.id, attempt = f.attempt, outcome = f.outcome.sql_name(), "outcome refused: the job is no longer this worker's");
                }
            }
        }
        shared.finish_tx.done_with(f);
    }
}

/// Writes `batch` through `job_complete_many.sql` if `lean` (every row a success), else
/// `job_finish_many.sql`.
async fn write(
    shared: &Shared,
    batch: &[Finish],
    lean: bool,
) -> Result<Vec<Verdict<Written>>, Error> {
    const OP: &str = "write job outcomes";
    let conn = shared.client.conn(OP).await?;
    let limit = shared.cfg.reply_timeout();
    let store = shared.client.store();
    let written = async {
        if lean {
            store
                .job_complete_many(&conn, batch, shared.cfg.delete_done)
                .await
        } else {
            store.job_finish_many(&conn, batch).await
        }
    };
    match tokio::time::timeout(limit, written).await {
        Ok(r) => r,
        Err(_) => {
            super::reply::abandon(shared, conn);
            Err(Error::NoReply {
                op: OP,
                after: limit,
            })
        }
    }
}

/// After a failed try, a row found no longer this claim's may be one that the failed try
/// wrote (committed, its reply lost): each is read back, and counted as written when the
/// row shows this outcome at this attempt, or, for a success with
/// [`WorkerConfig::delete_done`](crate::WorkerConfig::delete_done), when the row is gone. A
/// row that cannot be read stays lost.
async fn reread(shared: &Shared, rows: &[Finish], verdicts: &mut [Verdict<Written>]) {
    const OP: &str = "read back a job whose outcome's reply was lost";
    for (f, v) in rows.iter().zip(verdicts.iter_mut()) {
        if !matches!(v, Verdict::Lost) {
            continue;
        }
        let read = async {
            let conn = shared.client.conn(OP).await?;
            let limit = shared.cfg.reply_timeout();
            match tokio::time::timeout(limit, shared.client.store().job_get(&**conn, f.id)).await {
                Ok(r) => r,
                Err(_) => {
                    super::reply::abandon(shared, conn);
                    Err(Error::NoReply {
                        op: OP,
                        after: limit,
                    })
                }
            }
        };
        match read.await {
            Ok(Some(row)) => {
                if let Some(state) = written_before(f, &row) {
                    if f.in_tx {
                        tracing::debug!(id = %f.id, attempt = f.attempt, "completed in its handler's own transaction");
                    } else {
                        tracing::info!(id = %f.id, attempt = f.attempt, state = state.as_str(), "outcome found written by an earlier try whose reply was lost");
                    }
                    let retry_in_us = row
                        .run_at
                        .duration_since(std::time::SystemTime::now())
                        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
                    *v = Verdict::Applied(Written {
                        state,
                        run_at: row.run_at,
                        retry_in_us,
                    });
                }
            }
            Ok(None) if shared.cfg.delete_done && f.is_lean() => {
                // With delete_done the completion deletes the row: a success whose row is
                // gone was written by the earlier try (a running job's row cannot be deleted
                // by `delete`, and a job taken over by another worker would still be there
                // unless that one completed it too: then it is done either way). The one
                // case counted wrongly: an operator cancelled the job and deleted it in the
                // moment between the lost reply and this read.
                tracing::info!(id = %f.id, attempt = f.attempt, "completed job found deleted by an earlier try whose reply was lost");
                *v = Verdict::Applied(Written {
                    state: JobState::Done,
                    run_at: std::time::SystemTime::now(),
                    retry_in_us: 0,
                });
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(id = %f.id, error = %error_chain(&e), "could not read back a job whose outcome's reply was lost; counting it lost");
            }
        }
    }
}

/// The state `f`'s outcome led to, if `row` shows it written at `f`'s attempt: done for a
/// completion; failed with its error for a discard; queued or failed with its error for a
/// retry; queued for a snooze or a hand-back.
fn written_before(f: &Finish, row: &crate::job::JobRow) -> Option<JobState> {
    if row.attempts != f.attempt {
        return None;
    }
    if f.in_tx && row.state == JobState::Done {
        return Some(JobState::Done);
    }
    let own_error = row.last_error.as_deref() == Some(f.outcome.error());
    let ok = match &f.outcome {
        Outcome::Complete => row.state == JobState::Done,
        Outcome::Discard { .. } => row.state == JobState::Failed && own_error,
        Outcome::Retry { .. } => {
            matches!(row.state, JobState::Queued | JobState::Failed) && own_error
        }
        Outcome::Snooze { .. } | Outcome::HandBack => row.state == JobState::Queued,
        Outcome::Unserved { .. } => row.state == JobState::Queued && own_error,
    };
    ok.then_some(row.state)
}
