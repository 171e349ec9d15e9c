//! The guarded batch writes: outcomes (`job_finish_many.sql`) and lease renewals
//! (`job_extend_many.sql`), each element checked against its claim's attempt, with one
//! verdict per element (written, lost or busy).

use std::sync::Arc;
use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::{Error as PgError, GenericClient, Row};

use super::{job_state, Sql};
use super::{rows, Cache};
use crate::error::Result;
use crate::job::{JobId, JobState};
use crate::outcome::Outcome;

/// What a batched guarded write did to one element of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict<T> {
    /// The guard held and the row was written.
    Applied(T),
    /// The guard did not hold: the job is no longer this claim's.
    Lost,
    /// Another session held the row locked: nothing was written, nothing is known; try
    /// again shortly.
    Busy,
}

impl<T> Verdict<T> {
    pub(crate) fn is_busy(&self) -> bool {
        matches!(self, Verdict::Busy)
    }
}

/// A written outcome: the job's new status and run_at, and run_at - now() in microseconds
/// (read for a job back in the queue; a job now done has the time its completion was read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Written {
    pub state: JobState,
    pub run_at: SystemTime,
    pub retry_in_us: i64,
}

/// One job's outcome, as bound to `job_finish_many.sql`.
#[derive(Debug, Clone)]
pub(crate) struct Finish {
    pub id: JobId,
    /// The job's queue (not sent: the worker wakes that queue when the job is due again).
    pub queue: Arc<str>,
    /// The job's kind (not sent: a label of the worker's metrics).
    pub kind: Arc<str>,
    pub attempt: i32,
    pub outcome: Outcome,
    /// The output stored with a completion (JSON text, checked).
    pub output: Option<String>,
    /// The handler completed the job in its own transaction (`complete_tx`): a refusal
    /// means that transaction committed, if the row shows the job done at this attempt.
    pub in_tx: bool,
}

impl Finish {
    /// Whether `job_complete_many.sql` can write this outcome: a success, not completed in
    /// the handler's own transaction (whose row that transaction may still hold locked: the
    /// statement that skips a held row writes it).
    pub(crate) fn is_lean(&self) -> bool {
        matches!(self.outcome, Outcome::Complete) && !self.in_tx
    }

    /// A successful attempt of a job claimed outside the worker (no queue to wake).
    pub(crate) fn complete(id: JobId, attempt: i32) -> Finish {
        Finish {
            id,
            queue: Arc::from(""),
            kind: Arc::from(""),
            attempt,
            outcome: Outcome::Complete,
            output: None,
            in_tx: false,
        }
    }
}

/// Places each row's verdict at its input position (`n`, 1-based). An element the
/// statement returned nothing for (a duplicate id in one batch) counts as lost.
fn by_position<T>(
    len: usize,
    rows: &[Row],
    verdict: impl Fn(&Row, &str) -> Result<Verdict<T>, PgError>,
) -> Result<Vec<Verdict<T>>, PgError> {
    let mut out: Vec<Verdict<T>> = (0..len).map(|_| Verdict::Lost).collect();
    let at = rows
        .first()
        .and_then(|r| super::positions(r, ["n", "result"]));
    for r in rows {
        let (n, result): (i64, &str) = match at {
            Some([n, result]) => (r.try_get(n)?, r.try_get(result)?),
            None => (r.try_get("n")?, r.try_get("result")?),
        };
        let v = verdict(r, result)?;
        if let Some(slot) = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| out.get_mut(i))
        {
            *slot = v;
        }
    }
    Ok(out)
}

/// A written outcome as the statement returns it: the status still as text.
pub(super) struct RawWritten {
    status: String,
    run_at: SystemTime,
    retry_in_us: i64,
}

/// The columns a [`RawWritten`] is read from, in [`raw_written`]'s order.
const WRITTEN: [&str; 3] = ["status", "run_at", "retry_in_us"];

/// A written outcome from `r`, its columns at `at` ([`super::positions`] of [`WRITTEN`]),
/// or found by name without them.
fn raw_written(r: &Row, at: Option<[usize; 3]>) -> Result<RawWritten, PgError> {
    fn read<I: tokio_postgres::row::RowIndex + std::fmt::Display + Copy>(
        r: &Row,
        [status, run_at, retry_in_us]: [I; 3],
    ) -> Result<RawWritten, PgError> {
        Ok(RawWritten {
            status: r.try_get(status)?,
            run_at: r.try_get(run_at)?,
            retry_in_us: r.try_get(retry_in_us)?,
        })
    }
    match at {
        Some(at) => read(r, at),
        None => read(r, WRITTEN),
    }
}

/// A raw verdict with its status read as a [`JobState`]; any other status is an
/// [`Error::Decode`](crate::Error::Decode) for `op`.
pub(super) fn written(op: &'static str, v: Verdict<RawWritten>) -> Result<Verdict<Written>> {
    Ok(match v {
        Verdict::Applied(w) => Verdict::Applied(Written {
            state: job_state(op, &w.status)?,
            run_at: w.run_at,
            retry_in_us: w.retry_in_us,
        }),
        Verdict::Lost => Verdict::Lost,
        Verdict::Busy => Verdict::Busy,
    })
}

/// Writes many outcomes; returns one verdict per element of `batch`, in its order.
pub(super) async fn finish_many<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    batch: &[Finish],
) -> Result<Vec<Verdict<RawWritten>>, PgError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = batch.iter().map(|f| f.id.0).collect();
    let attempts: Vec<i32> = batch.iter().map(|f| f.attempt).collect();
    let outcomes: Vec<&str> = batch.iter().map(|f| f.outcome.sql_name()).collect();
    let errors: Vec<&str> = batch.iter().map(|f| f.outcome.error()).collect();
    let delays: Vec<i64> = batch.iter().map(|f| f.outcome.delay_us()).collect();
    let (bases, caps): (Vec<i64>, Vec<i64>) = batch.iter().map(|f| f.outcome.backoff_us()).unzip();
    let outputs: Vec<Option<&str>> = batch.iter().map(|f| f.output.as_deref()).collect();
    let rows = rows(
        c,
        cache,
        &sql.finish_many,
        &[
            (&ids, Type::INT8_ARRAY),
            (&attempts, Type::INT4_ARRAY),
            (&outcomes, Type::TEXT_ARRAY),
            (&errors, Type::TEXT_ARRAY),
            (&delays, Type::INT8_ARRAY),
            (&bases, Type::INT8_ARRAY),
            (&caps, Type::INT8_ARRAY),
            (&outputs, Type::TEXT_ARRAY),
        ],
    )
    .await?;
    let at = rows.first().and_then(|r| super::positions(r, WRITTEN));
    by_position(batch.len(), &rows, |r, result| {
        Ok(match result {
            "written" => Verdict::Applied(raw_written(r, at)?),
            "busy" => Verdict::Busy,
            _ => Verdict::Lost,
        })
    })
}

/// Completes many jobs (`job_complete_many.sql`, or `job_complete_delete_many.sql` with
/// `delete_done`: every element's outcome is [`Outcome::Complete`]); returns one verdict per
/// element of `batch`, in its order, never busy (the statement waits for a row another
/// session holds).
pub(super) async fn complete_many<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    batch: &[Finish],
    delete_done: bool,
) -> Result<Vec<Verdict<Written>>, PgError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = batch.iter().map(|f| f.id.0).collect();
    let attempts: Vec<i32> = batch.iter().map(|f| f.attempt).collect();
    let outputs: Vec<Option<&str>> = batch.iter().map(|f| f.output.as_deref()).collect();
    let statement = if delete_done {
        &sql.complete_delete_many
    } else {
        &sql.complete_many
    };
    let rows = rows(
        c,
        cache,
        statement,
        &[
            (&ids, Type::INT8_ARRAY),
            (&attempts, Type::INT4_ARRAY),
            (&outputs, Type::TEXT_ARRAY),
        ],
    )
    .await?;
    let written: Vec<i64> = match rows.first() {
        Some(r) => r.try_get("n")?,
        None => Vec::new(),
    };
    Ok(completed_at(batch.len(), &written, SystemTime::now()))
}

/// The verdicts of a batch of `len` completions whose elements at the 1-based positions
/// `written` were written (now done, or deleted); every other element was lost, as is one
/// the statement did not name (a duplicate id in one batch). `now` stands for the run_at
/// of a job now done, which nothing reads.
fn completed_at(len: usize, written: &[i64], now: SystemTime) -> Vec<Verdict<Written>> {
    let mut out: Vec<Verdict<Written>> = (0..len).map(|_| Verdict::Lost).collect();
    for &n in written {
        if let Some(slot) = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| out.get_mut(i))
        {
            *slot = Verdict::Applied(Written {
                state: JobState::Done,
                run_at: now,
                retry_in_us: 0,
            });
        }
    }
    out
}

/// Renews many leases; returns one verdict per element of `jobs`, in its order.
pub(super) async fn extend_many<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    jobs: &[(JobId, i32)],
    lease_us: i64,
) -> Result<Vec<Verdict<()>>, PgError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = jobs.iter().map(|j| j.0 .0).collect();
    let attempts: Vec<i32> = jobs.iter().map(|j| j.1).collect();
    let rows = rows(
        c,
        cache,
        &sql.extend_many,
        &[
            (&ids, Type::INT8_ARRAY),
            (&attempts, Type::INT4_ARRAY),
            (&lease_us, Type::INT8),
        ],
    )
    .await?;
    by_position(jobs.len(), &rows, |_, result| {
        Ok(match result {
            "renewed" => Verdict::Applied(()),
            "busy" => Verdict::Busy,
            _ => Verdict::Lost,
        })
    })
}

/// `s` with every character outside printable ASCII written as `\u{..}`: text that any
/// server encoding can store (for error messages a database refused to encode).
pub(crate) fn ascii_escaped(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if ch.is_ascii() && (!ch.is_ascii_control() || ch == '\n' || ch == '\t') {
            out.push(ch);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(ch));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_names_the_positions_written_and_every_other_element_is_lost() {
        let now = SystemTime::now();
        let done = Verdict::Applied(Written {
            state: JobState::Done,
            run_at: now,
            retry_in_us: 0,
        });
        // In no particular order; a position outside the batch (0, 5, negative) names none.
        let v = completed_at(4, &[3, 1, 0, 5, -1], now);
        assert_eq!(v, vec![done, Verdict::Lost, done, Verdict::Lost]);
        assert_eq!(completed_at(2, &[], now), vec![Verdict::Lost; 2]);
    }
}
