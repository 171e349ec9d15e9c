//! Unique jobs: at most one active (queued or running) job per key, enforced by the database.
//!
//! A [`Unique`] rule on a [`NewJob`] derives a key from the job's kind and its whole payload,
//! chosen top-level fields of it, or an explicit key; optionally also its queue and a time
//! bucket. The key is computed by the database (`unique_key()`, migration 6) and hashed, and
//! a partial unique index over the active states holds at most one job per key. Enqueues use
//! `INSERT … ON CONFLICT DO NOTHING` against that index, so two enqueuers racing with the
//! same key can never both insert, whatever their transactions do: the second waits for the
//! first's transaction, then inserts (it rolled back) or reports the duplicate (it committed).
//!
//! The unique enqueues return an [`Enqueued`] per job, never a silent nothing.

use std::collections::HashMap;

use crate::caller_tx::{Conn, Executor};
use crate::client::Client;
use crate::db::unique::{self as store, Link, Replacement, UniqueBatch};
use crate::db::Sql;
use crate::error::{Error, Result};
use crate::job::{EncodedBatch, EncodedJob, JobId, NewJob, MAX_BATCH_BYTES};

pub(crate) mod rule;

use rule::By;
pub use rule::{Enqueued, OnConflict, Unique};

/// How many times an enqueue tries again when the duplicate that made it skip had finished
/// before it could be looked up.
const MAX_ROUNDS: usize = 10;

/// One validated job of a unique enqueue.
struct Prepared {
    job: EncodedJob,
    rule: Option<(Unique, i64)>,
}

fn prepare(jobs: &[NewJob], max_payload_bytes: usize) -> Result<Vec<Prepared>> {
    let mut out = Vec::with_capacity(jobs.len());
    let mut bytes = 0usize;
    for (index, job) in jobs.iter().enumerate() {
        let item = |e: Error| Error::InvalidBatchItem {
            index,
            source: Box::new(e),
        };
        let encoded = job.encode_base(max_payload_bytes).map_err(item)?;
        if job.unique.is_some() && encoded.after.is_some() {
            return Err(item(Error::invalid(
                "after",
                "the job has a uniqueness rule; a unique job cannot wait for other jobs",
            )));
        }
        let rule = match &job.unique {
            Some(u) => Some((u.clone(), u.check().map_err(item)?)),
            None => None,
        };
        bytes += encoded.payload.len();
        if bytes > MAX_BATCH_BYTES {
            return Err(Error::invalid(
                "batch",
                format!("its payloads exceed {MAX_BATCH_BYTES} bytes at job {index}; split it"),
            ));
        }
        out.push(Prepared { job: encoded, rule });
    }
    Ok(out)
}

fn push_base(b: &mut EncodedBatch, j: &EncodedJob) {
    b.push(j.clone());
}

fn unique_batch(jobs: &[Prepared], pending: &[usize]) -> Result<UniqueBatch> {
    let mut b = UniqueBatch::default();
    for &i in pending {
        let Some(p) = jobs.get(i) else { continue };
        let Some((rule, period_us)) = &p.rule else {
            continue;
        };
        push_base(&mut b.base, &p.job);
        let (by, fields, key) = match &rule.by {
            By::Args => ("args", None, None),
            By::Fields(f) => (
                "fields",
                Some(
                    serde_json::to_string(f)
                        .map_err(|e| Error::invalid("unique fields", e.to_string()))?,
                ),
                None,
            ),
            By::Key(k) => ("key", None, Some(k.clone())),
        };
        b.unique_by.push(by);
        b.fields.push(fields);
        b.key.push(key);
        b.by_queue.push(rule.by_queue);
        b.period_us.push(*period_us);
        b.queued_only.push(rule.queue_behind_running);
    }
    Ok(b)
}

/// Enqueues `jobs` through `link`: jobs without a rule in one plain batch insert, the others
/// with `job_insert_unique.sql`, then (for those that met a duplicate) the conflict mode's
/// replacement and a look-up of the duplicate's id, each a statement of its own so that it
/// sees rows committed since the insert began. A key whose duplicate finished before it was
/// looked up is tried again, at most [`MAX_ROUNDS`] times.
async fn run<L: Link>(link: &mut L, sql: &Sql, jobs: &[Prepared]) -> Result<Vec<Enqueued>> {
    let mut out: Vec<Option<Enqueued>> = vec![None; jobs.len()];
    let plain: Vec<usize> = (0..jobs.len())
        .filter(|&i| jobs[i].rule.is_none())
        .collect();
    if !plain.is_empty() {
        let mut b = EncodedBatch::default();
        for &i in &plain {
            push_base(&mut b, &jobs[i].job);
        }
        let ids = link.insert_plain(sql, &b).await?;
        for (&i, id) in plain.iter().zip(ids) {
            out[i] = Some(Enqueued::Inserted(id));
        }
    }
    let mut pending: Vec<usize> = (0..jobs.len())
        .filter(|&i| jobs[i].rule.is_some())
        .collect();
    for _ in 0..MAX_ROUNDS {
        if pending.is_empty() {
            break;
        }
        pending = round(link, sql, jobs, &pending, &mut out).await?;
    }
    if !pending.is_empty() {
        return Err(Error::UniqueChurn);
    }
    out.into_iter()
        .map(|e| e.ok_or(Error::UniqueChurn))
        .collect()
}

/// One round over the `pending` jobs (indexes into `jobs`); returns those to try again.
async fn round<L: Link>(
    link: &mut L,
    sql: &Sql,
    jobs: &[Prepared],
    pending: &[usize],
    out: &mut [Option<Enqueued>],
) -> Result<Vec<usize>> {
    let batch = unique_batch(jobs, pending)?;
    let rows = link.insert_unique(sql, &batch).await?;
    // Per key, in input order: the jobs that share it, and the id inserted for the first.
    let mut order: Vec<String> = Vec::new();
    let mut by_key: HashMap<String, (Vec<usize>, Option<JobId>)> = HashMap::new();
    let mut rows = rows;
    rows.sort_by_key(|r| r.n);
    for r in rows {
        let Some(&i) = r.n.checked_sub(1).and_then(|n| pending.get(n)) else {
            continue;
        };
        let entry = by_key.entry(r.key.clone()).or_insert_with(|| {
            order.push(r.key.clone());
            (Vec::new(), None)
        });
        entry.0.push(i);
        if entry.1.is_none() {
            entry.1 = r.id;
        }
    }
    // The replacement each key gets: that of the last job asking for one (the first job of
    // a key it inserted itself does not replace its own payload).
    let mut repl = Replacement::default();
    let mut unresolved: Vec<String> = Vec::new();
    for key in &order {
        let Some((members, id)) = by_key.get(key) else {
            continue;
        };
        let skip = usize::from(id.is_some());
        let last = members.iter().skip(skip).rev().find(|&&i| {
            jobs[i]
                .rule
                .as_ref()
                .is_some_and(|r| r.0.on_conflict.replaces())
        });
        if let Some(&i) = last {
            let j = &jobs[i].job;
            let keep = jobs[i]
                .rule
                .as_ref()
                .is_some_and(|r| r.0.on_conflict == OnConflict::KeepRunAt);
            repl.key.push(key.clone());
            repl.payload.push(j.payload.clone());
            repl.run_at_us.push(j.run_at_us);
            repl.delay_us.push(j.delay_us);
            repl.replace_run_at.push(!keep);
        }
        match id {
            Some(id) => {
                let (first, rest) = members.split_first().unwrap_or((&usize::MAX, &[]));
                if let Some(slot) = out.get_mut(*first) {
                    *slot = Some(Enqueued::Inserted(*id));
                }
                for &i in rest {
                    out[i] = Some(Enqueued::Duplicate(*id));
                }
            }
            None => unresolved.push(key.clone()),
        }
    }
    let mut found: HashMap<String, JobId> = HashMap::new();
    if !repl.key.is_empty() {
        found.extend(link.replace(sql, &repl).await?);
    }
    let missing: Vec<String> = unresolved
        .iter()
        .filter(|k| !found.contains_key(*k))
        .cloned()
        .collect();
    if !missing.is_empty() {
        found.extend(link.lookup(sql, &missing).await?);
    }
    let mut again = Vec::new();
    for key in &unresolved {
        let Some((members, _)) = by_key.get(key) else {
            continue;
        };
        match found.get(key) {
            Some(&id) => {
                for &i in members {
                    out[i] = Some(Enqueued::Duplicate(id));
                }
            }
            None => again.extend(members.iter().copied()),
        }
    }
    again.sort_unstable();
    Ok(again)
}

impl Client {
    /// Enqueues one job, honouring its uniqueness rule ([`NewJob::unique`]), in its own
    /// transaction. Returns [`Enqueued::Inserted`] with the new job's id, or
    /// [`Enqueued::Duplicate`] with the id of the active job that has the same key. A job
    /// without a rule is always inserted.
    pub async fn enqueue_unique(&self, job: &NewJob) -> Result<Enqueued> {
        let mut all = self.enqueue_many_unique(std::slice::from_ref(job)).await?;
        all.pop().ok_or(Error::UniqueChurn)
    }

    /// [`Client::enqueue_unique`] through the caller's connection or transaction (see
    /// [`Executor`]). Inside a transaction, an inserted job exists only once it commits; a
    /// concurrent enqueue of the same key waits for this transaction to end, then inserts
    /// (it rolled back) or reports this job as its duplicate (it committed).
    pub async fn enqueue_unique_tx<'c>(
        &self,
        conn: impl Executor<'c>,
        job: &NewJob,
    ) -> Result<Enqueued> {
        let mut all = self
            .enqueue_many_unique_tx(conn, std::slice::from_ref(job))
            .await?;
        all.pop().ok_or(Error::UniqueChurn)
    }

    /// Enqueues many jobs, honouring each one's uniqueness rule, in one transaction of its
    /// own (all or nothing). Returns one [`Enqueued`] per job, in input order. Jobs of the
    /// batch with the same key are inserted once: the first in input order, and the others
    /// are reported as its duplicates (with a replacing conflict mode, the last of them
    /// gives the job its payload). Jobs without a rule are inserted as by
    /// [`Client::enqueue_many`]. Every job is validated before any SQL runs
    /// ([`Error::InvalidBatchItem`] names a refused one).
    pub async fn enqueue_many_unique(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        const OP: &str = "enqueue jobs";
        let prepared = prepare(jobs, self.max_payload_bytes())?;
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn(OP).await?;
        let store = self.store();
        let tx = store.begin(&mut conn, OP).await?;
        let t: &tokio_postgres::Transaction<'_> = &tx;
        let out = run(&mut store::Tokio(t), store.sql(), &prepared).await?;
        store.commit(tx, OP).await?;
        count_inserted(&prepared, &out);
        Ok(out)
    }

    /// [`Client::enqueue_many_unique`] through the caller's connection or transaction. On a
    /// plain connection (autocommit) each of its statements commits on its own.
    pub async fn enqueue_many_unique_tx<'c>(
        &self,
        conn: impl Executor<'c>,
        jobs: &[NewJob],
    ) -> Result<Vec<Enqueued>> {
        let prepared = prepare(jobs, self.max_payload_bytes())?;
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        let sql = self.store().sql();
        let out = match conn.into_conn() {
            Conn::TokioClient(c) => run(&mut store::Tokio(c), sql, &prepared).await,
            Conn::TokioTx(t) => run(&mut store::Tokio(t), sql, &prepared).await,
            #[cfg(feature = "sqlx-0_8")]
            Conn::Sqlx(c) => run(&mut store::Sqlx(c), sql, &prepared).await,
        }?;
        count_inserted(&prepared, &out);
        Ok(out)
    }
}

/// Counts the inserted jobs (not the duplicates) as enqueued.
fn count_inserted(prepared: &[Prepared], out: &[Enqueued]) {
    crate::metrics::enqueued(
        prepared
            .iter()
            .zip(out)
            .filter(|(_, e)| e.is_inserted())
            .map(|(p, _)| (p.job.queue.as_str(), p.job.kind.as_str())),
    );
}
