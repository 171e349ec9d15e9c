//! The job lifecycle statements, bound and decoded for tokio-postgres, and the [`Store`]
//! methods that run them.
//!
//! Every call uses an unnamed statement with its parameter types given (`query_typed`): one
//! round trip, and no named prepared statements, so it also works through PgBouncer in
//! transaction mode. The exceptions are the hot path's claims, outcome writes and
//! heartbeats on a pooled connection of a client with prepared statements on; and a claim in
//! turn ([`claim_in_turn`]), a transaction of three statements sent in one round trip.

use std::time::SystemTime;

use deadpool_postgres::Object;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error as PgError, GenericClient, Row};

pub(crate) use super::write::{ascii_escaped, Finish, Verdict, Written};
use super::write::{complete_many, extend_many, finish_many, written};
use super::{job_state, on_conn, rows, Cache, Sql, Store};
use crate::caller_tx::Conn;
use crate::job::{
    ClaimedJob, EncodedBatch, EncodedJob, JobFamily, JobId, JobRow, JobState, ReapedJob, Relative,
};

use crate::error::{Error, Result};

impl Store {
    /// `job_insert.sql`: enqueues one job; returns its id.
    pub(crate) async fn job_insert(&self, conn: Conn<'_>, j: &EncodedJob) -> Result<JobId> {
        on_conn!(conn, "enqueue a job",
            |c| insert(c, &self.sql, j),
            sqlx: super::sqlx::insert(c, &self.sql, j),
        )
    }

    /// `job_insert_many.sql`: enqueues many jobs in one statement; returns their ids in
    /// input order.
    pub(crate) async fn job_insert_many(
        &self,
        conn: Conn<'_>,
        b: &EncodedBatch,
    ) -> Result<Vec<JobId>> {
        on_conn!(conn, "enqueue jobs",
            |c| insert_many(c, &self.sql, b),
            sqlx: super::sqlx::insert_many(c, &self.sql, b),
        )
    }

    /// `job_enqueue_workflow.sql`: enqueues a workflow (the JSON array of
    /// `enqueue_workflow()`); returns the ids in its order.
    pub(crate) async fn job_enqueue_workflow(
        &self,
        conn: Conn<'_>,
        json: &str,
    ) -> Result<Vec<JobId>> {
        on_conn!(conn, "enqueue a workflow",
            |c| enqueue_workflow(c, &self.sql, json),
            sqlx: super::sqlx::enqueue_workflow(c, &self.sql, json),
        )
    }

    /// `job_complete_tx.sql`: completes a job in the caller's transaction; false if the guard
    /// did not hold.
    pub(crate) async fn job_complete_tx(
        &self,
        conn: Conn<'_>,
        id: JobId,
        attempt: i32,
        output: Option<&str>,
    ) -> Result<bool> {
        on_conn!(conn, "complete a job in the caller's transaction",
            |c| complete_tx(c, &self.sql, id, attempt, output),
            sqlx: super::sqlx::complete_tx(c, &self.sql, id, attempt, output),
        )
    }

    /// `job_family.sql` and `job_children_count.sql`: a job's parents and children.
    pub(crate) async fn job_family<C: GenericClient + Sync>(
        &self,
        c: &C,
        id: JobId,
        max_children: i64,
    ) -> Result<JobFamily> {
        const OP: &str = "read a job's parents and children";
        let rows = c
            .query_typed(
                &self.sql.family,
                &[(&id.0, Type::INT8), (&max_children, Type::INT8)],
            )
            .await
            .map_err(Error::db(OP))?;
        let counts = c
            .query_typed_one(&self.sql.children_count, &[(&id.0, Type::INT8)])
            .await
            .map_err(Error::db(OP))?;
        let mut f = JobFamily {
            parents: Vec::new(),
            children: Vec::new(),
            children_total: counts.try_get::<_, i64>("total").map_err(Error::db(OP))?,
            children_waiting: counts.try_get::<_, i64>("waiting").map_err(Error::db(OP))?,
        };
        for r in &rows {
            let rel: &str = r.try_get("rel").map_err(Error::db(OP))?;
            let status: Option<String> = r.try_get("status").map_err(Error::db(OP))?;
            let state = match status {
                Some(s) => Some(job_state(OP, &s)?),
                None => None,
            };
            let relative = Relative {
                id: JobId(r.try_get("id").map_err(Error::db(OP))?),
                state,
                kind: r.try_get("kind").map_err(Error::db(OP))?,
                queue: r.try_get("queue").map_err(Error::db(OP))?,
                held: r.try_get("held").map_err(Error::db(OP))?,
                satisfied: r.try_get("satisfied").map_err(Error::db(OP))?,
            };
            if rel == "parent" {
                f.parents.push(relative);
            } else {
                f.children.push(relative);
            }
        }
        Ok(f)
    }

    /// `job_parent_outputs.sql`: the outputs of the jobs `id` waits for.
    pub(crate) async fn job_parent_outputs<C: GenericClient + Sync>(
        &self,
        c: &C,
        id: JobId,
    ) -> Result<Vec<(JobId, Option<String>)>> {
        const OP: &str = "read the outputs of a job's parents";
        let rows = c
            .query_typed(&self.sql.parent_outputs, &[(&id.0, Type::INT8)])
            .await
            .map_err(Error::db(OP))?;
        rows.iter()
            .map(|r| Ok((JobId(r.try_get("id")?), r.try_get("output")?)))
            .collect::<Result<Vec<_>, PgError>>()
            .map_err(Error::db(OP))
    }

    /// `job_claim.sql`: claims up to `limit` ready jobs of `queue` on a pooled connection
    /// (a prepared statement cached on it when prepared statements are on), in claim order.
    /// Only jobs after `after` ([`After::FRONT`]: all of them). `in_turn`: as a claim in
    /// turn ([`claim_in_turn`]: one at a time per queue's turn across sessions), taking up to
    /// the given number instead of `limit` if it had to wait for its turn.
    pub(crate) async fn job_claim(
        &self,
        conn: &Object,
        queue: &str,
        limit: i64,
        lease_us: i64,
        after: &After,
        in_turn: Option<i64>,
    ) -> Result<Vec<ClaimedJob>> {
        let cache = self.cache(conn);
        let claimed = match in_turn {
            Some(waited) => {
                let c = ClaimArgs {
                    queue,
                    limit,
                    lease_us,
                    after,
                };
                claim_in_turn(&***conn, cache, &self.sql, &c, waited).await
            }
            None => {
                claim(
                    &***conn,
                    cache,
                    &self.sql.claim,
                    queue,
                    limit,
                    lease_us,
                    after,
                )
                .await
            }
        };
        claimed.map_err(Error::db("claim jobs"))
    }

    /// `job_reap.sql`: one reaper round (at most [`REAP_BATCH`] rows of each kind); the
    /// caller repeats while a round comes back full.
    pub(crate) async fn job_reap<C: GenericClient + Sync>(&self, c: &C) -> Result<Vec<ReapedJob>> {
        const OP: &str = "reap expired leases";
        let rows = c
            .query_typed(&self.sql.reap, &[(&REAP_BATCH, Type::INT8)])
            .await
            .map_err(Error::db(OP))?;
        rows.iter()
            .map(|r| {
                let (id, status, attempts) = (|| {
                    Ok::<_, PgError>((
                        r.try_get("id")?,
                        r.try_get::<_, &str>("status")?,
                        r.try_get("attempts")?,
                    ))
                })()
                .map_err(Error::db(OP))?;
                Ok(ReapedJob {
                    id: JobId(id),
                    state: job_state(OP, status)?,
                    attempts,
                })
            })
            .collect()
    }

    /// `reaper_try_lock.sql`: tries the reaper's advisory lock for the current transaction.
    pub(crate) async fn reaper_try_lock<C: GenericClient + Sync>(
        &self,
        c: &C,
        key: i64,
    ) -> Result<bool> {
        async {
            c.query_typed_one(&self.sql.reaper_try_lock, &[(&key, Type::INT8)])
                .await?
                .try_get(0)
        }
        .await
        .map_err(Error::db("take the reaper's lock"))
    }

    /// `job_get.sql`: one job by id, or `None`.
    pub(crate) async fn job_get<C: GenericClient + Sync>(
        &self,
        c: &C,
        id: JobId,
    ) -> Result<Option<JobRow>> {
        const OP: &str = "read a job";
        let row = c
            .query_typed_opt(&self.sql.get, &[(&id.0, Type::INT8)])
            .await
            .map_err(Error::db(OP))?;
        let Some(r) = row else {
            return Ok(None);
        };
        let status: String = r.try_get("status").map_err(Error::db(OP))?;
        let state = job_state(OP, &status)?;
        job_row(&r, state).map(Some).map_err(Error::db(OP))
    }

    /// `job_finish_many.sql` on a pooled connection (a prepared statement cached on it when
    /// prepared statements are on): writes many outcomes; one verdict per element of
    /// `batch`, in its order.
    pub(crate) async fn job_finish_many(
        &self,
        conn: &Object,
        batch: &[Finish],
    ) -> Result<Vec<Verdict<Written>>> {
        const OP: &str = "write job outcomes";
        let raw = finish_many(&***conn, self.cache(conn), &self.sql, batch)
            .await
            .map_err(Error::db(OP))?;
        raw.into_iter().map(|v| written(OP, v)).collect()
    }

    /// `job_complete_many.sql` on a pooled connection (a prepared statement cached on it
    /// when prepared statements are on): completes many jobs, every element of `batch` an
    /// [`Outcome::Complete`](crate::outcome::Outcome::Complete); one verdict per element, in
    /// its order, written or lost (never busy).
    pub(crate) async fn job_complete_many(
        &self,
        conn: &Object,
        batch: &[Finish],
        delete_done: bool,
    ) -> Result<Vec<Verdict<Written>>> {
        const OP: &str = "write job outcomes";
        complete_many(&***conn, self.cache(conn), &self.sql, batch, delete_done)
            .await
            .map_err(Error::db(OP))
    }

    /// `job_finish_many.sql` with a batch of one, as an unnamed statement.
    pub(crate) async fn job_finish_one<C: GenericClient + Sync>(
        &self,
        c: &C,
        f: &Finish,
    ) -> Result<Verdict<Written>> {
        const OP: &str = "write a job's outcome";
        let raw = finish_many(c, None, &self.sql, std::slice::from_ref(f))
            .await
            .map_err(Error::db(OP))?;
        written(OP, raw.into_iter().next().unwrap_or(Verdict::Lost))
    }

    /// `job_extend_many.sql` on a pooled connection (a prepared statement cached on it
    /// when prepared statements are on): renews many leases; one verdict per element of
    /// `jobs`, in its order.
    pub(crate) async fn job_extend_many(
        &self,
        conn: &Object,
        jobs: &[(JobId, i32)],
        lease_us: i64,
    ) -> Result<Vec<Verdict<()>>> {
        extend_many(&***conn, self.cache(conn), &self.sql, jobs, lease_us)
            .await
            .map_err(Error::db("renew leases"))
    }

    /// `job_extend_many.sql` with a batch of one, as an unnamed statement.
    pub(crate) async fn job_extend_one<C: GenericClient + Sync>(
        &self,
        c: &C,
        id: JobId,
        attempt: i32,
        lease_us: i64,
    ) -> Result<Verdict<()>> {
        extend_many(c, None, &self.sql, &[(id, attempt)], lease_us)
            .await
            .map(|v| v.into_iter().next().unwrap_or(Verdict::Lost))
            .map_err(Error::db("extend a lease"))
    }

    /// `job_next_run_at.sql`: microseconds until the next queued job of `queue` is due, if
    /// any is queued and the queue is not paused; whether it is paused; and whether its last
    /// claim was held back by a limit (`"slots"` or `"rate"`).
    pub(crate) async fn job_next_run_at<C: GenericClient + Sync>(
        &self,
        c: &C,
        queue: &str,
        after: &After,
    ) -> Result<(Option<i64>, bool, Option<String>)> {
        async {
            let row = c
                .query_typed_one(
                    &self.sql.next_run_at,
                    &[
                        (&queue, Type::TEXT),
                        (&after.priority, Type::INT2),
                        (&after.run_at, Type::TIMESTAMPTZ),
                        (&after.id, Type::INT8),
                    ],
                )
                .await?;
            Ok((
                row.try_get("wait_us")?,
                row.try_get("paused")?,
                row.try_get("bound")?,
            ))
        }
        .await
        .map_err(Error::db("look up the next due job"))
    }

    /// `job_next_lease.sql`: microseconds until the earliest lease of a running job ends
    /// (zero or less: ended already), or `None` when no job is running.
    pub(crate) async fn job_next_lease<C: GenericClient + Sync>(
        &self,
        c: &C,
    ) -> Result<Option<i64>> {
        async {
            let row = c.query_typed_one(&self.sql.next_lease, &[]).await?;
            row.try_get("wait_us")
        }
        .await
        .map_err(Error::db("look up the earliest lease"))
    }

    /// `job_cancel.sql`: cancels the jobs `ids`; returns the ids it changed.
    pub(crate) async fn job_cancel(&self, conn: Conn<'_>, ids: &[i64]) -> Result<Vec<JobId>> {
        self.admin(conn, &self.sql.cancel, "cancel jobs", ids).await
    }

    /// `job_delete.sql`: deletes the jobs `ids` that are not running; returns the ids it
    /// deleted.
    pub(crate) async fn job_delete(&self, conn: Conn<'_>, ids: &[i64]) -> Result<Vec<JobId>> {
        self.admin(conn, &self.sql.delete, "delete jobs", ids).await
    }

    async fn admin(
        &self,
        conn: Conn<'_>,
        statement: &str,
        op: &'static str,
        ids: &[i64],
    ) -> Result<Vec<JobId>> {
        on_conn!(conn, op,
            |c| admin(c, statement, ids),
            sqlx: super::sqlx::admin(c, statement, ids),
        )
    }

    /// `job_states.sql`: the state of each of `ids` that exists.
    pub(crate) async fn job_states(
        &self,
        conn: Conn<'_>,
        ids: &[i64],
    ) -> Result<Vec<(JobId, JobState)>> {
        const OP: &str = "read the jobs' states";
        let rows = on_conn!(conn, OP,
            |c| states(c, &self.sql, ids),
            sqlx: super::sqlx::states(c, &self.sql, ids),
        )?;
        rows.into_iter()
            .map(|(id, s)| Ok((id, job_state(OP, &s)?)))
            .collect()
    }
}

async fn enqueue_workflow<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    json: &str,
) -> Result<Vec<JobId>, PgError> {
    let rows = c
        .query_typed(&sql.enqueue_workflow, &[(&json, Type::TEXT)])
        .await?;
    rows.iter().map(|r| Ok(JobId(r.try_get("id")?))).collect()
}

async fn complete_tx<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    id: JobId,
    attempt: i32,
    output: Option<&str>,
) -> Result<bool, PgError> {
    let row = c
        .query_typed_opt(
            &sql.complete_tx,
            &[
                (&id.0, Type::INT8),
                (&attempt, Type::INT4),
                (&output, Type::TEXT),
            ],
        )
        .await?;
    Ok(row.is_some())
}

async fn insert<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    j: &EncodedJob,
) -> Result<JobId, PgError> {
    let row = c
        .query_typed_one(
            &sql.insert,
            &[
                (&j.queue, Type::TEXT),
                (&j.kind, Type::TEXT),
                (&j.payload, Type::TEXT),
                (&j.priority, Type::INT2),
                (&j.max_attempts, Type::INT4),
                (&j.run_at_us, Type::INT8),
                (&j.delay_us, Type::INT8),
                (&j.key, Type::TEXT),
                (&j.sequence, Type::TEXT),
                (&j.after, Type::INT8_ARRAY),
            ],
        )
        .await?;
    Ok(JobId(row.try_get(0)?))
}

pub(crate) async fn insert_many<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    b: &EncodedBatch,
) -> Result<Vec<JobId>, PgError> {
    if b.len() == 0 {
        return Ok(Vec::new());
    }
    let rows = c
        .query_typed(
            &sql.insert_many,
            &[
                (&b.queue, Type::TEXT_ARRAY),
                (&b.kind, Type::TEXT_ARRAY),
                (&b.payload, Type::TEXT_ARRAY),
                (&b.priority, Type::INT2_ARRAY),
                (&b.max_attempts, Type::INT4_ARRAY),
                (&b.run_at_us, Type::INT8_ARRAY),
                (&b.delay_us, Type::INT8_ARRAY),
                (&b.key, Type::TEXT_ARRAY),
                (&b.sequence, Type::TEXT_ARRAY),
                (&b.after, Type::TEXT_ARRAY),
            ],
        )
        .await?;
    rows.iter().map(|r| Ok(JobId(r.try_get(0)?))).collect()
}

/// Where a claim's scan of the ready index starts: only jobs whose claim order
/// (priority, run_at, id) comes after this key (`$4, $5, $6` of `job_claim.sql`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct After {
    pub(crate) priority: i16,
    /// `None` is `-infinity`.
    pub(crate) run_at: Option<SystemTime>,
    pub(crate) id: i64,
}

impl After {
    /// Before every job: a claim from the front of the queue.
    pub(crate) const FRONT: After = After {
        priority: i16::MIN,
        run_at: None,
        id: i64::MIN,
    };

    /// A bound `by` earlier than this key: its priority, `run_at - by`, and any id.
    pub(crate) fn lagged(self, by: std::time::Duration) -> After {
        After {
            priority: self.priority,
            run_at: self.run_at.map(|t| t.checked_sub(by).unwrap_or(t)),
            id: i64::MIN,
        }
    }

    /// The key of a claimed job.
    pub(crate) fn of(job: &ClaimedJob) -> After {
        After {
            priority: job.priority,
            run_at: Some(job.run_at),
            id: job.id.0,
        }
    }
}

/// Claims up to `limit` ready jobs of `queue` after `after` with `statement`
/// (`job_claim.sql`), in claim order.
pub(crate) async fn claim<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    statement: &str,
    queue: &str,
    limit: i64,
    lease_us: i64,
    after: &After,
) -> Result<Vec<ClaimedJob>, PgError> {
    let args = ClaimArgs {
        queue,
        limit,
        lease_us,
        after,
    };
    let rows = rows(c, cache, statement, &args.params()).await?;
    in_claim_order(&rows)
}

/// `job_claim.sql`'s parameters.
pub(crate) struct ClaimArgs<'a> {
    pub(crate) queue: &'a str,
    pub(crate) limit: i64,
    pub(crate) lease_us: i64,
    pub(crate) after: &'a After,
}

impl ClaimArgs<'_> {
    /// `job_claim.sql`'s `$1`-`$6`.
    fn params(&self) -> [(&(dyn ToSql + Sync), Type); 6] {
        [
            (&self.queue, Type::TEXT),
            (&self.limit, Type::INT8),
            (&self.lease_us, Type::INT8),
            (&self.after.priority, Type::INT2),
            (&self.after.run_at, Type::TIMESTAMPTZ),
            (&self.after.id, Type::INT8),
        ]
    }
}

/// A claim's rows as jobs, in claim order (UPDATE ... RETURNING has none).
fn in_claim_order(rows: &[Row]) -> Result<Vec<ClaimedJob>, PgError> {
    let mut jobs = claimed_jobs(rows)?;
    jobs.sort_by_key(|j| (j.priority, j.run_at, j.id));
    Ok(jobs)
}

/// How many turns the claims in turn of a schema's queues share (the views `claim_turn_0`
/// to `claim_turn_15`, migration 24).
pub const CLAIM_TURNS: u32 = 16;

/// The turn a queue's claims in turn take: the view `claim_turn_<n>` they lock (migration
/// 24), `n` being the 64-bit FNV-1a hash of the queue's name (its UTF-8 bytes) modulo
/// [`CLAIM_TURNS`]. The same in every version, so that the workers of two versions during an
/// upgrade take the same turns. Two queues share a turn one time in sixteen: their claims in
/// turn then take turns with each other.
pub fn claim_turn(queue: &str) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = queue
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    // The remainder is below 16: it fits.
    u32::try_from(hash % u64::from(CLAIM_TURNS)).unwrap_or(0)
}

/// What one attempt at a claim in turn came to.
enum Turn {
    /// The turn was had (or the connection failed): the claim's result.
    Claimed(Result<Vec<ClaimedJob>, PgError>),
    /// Another session's claim held the turn (`lock_not_available`): `NOWAIT`, or the 2 s
    /// wait of `job_claim_in_turn.sql` ran out.
    Busy,
    /// The turn statement failed otherwise (no right to lock the turn's view, say, or a
    /// schema without migration 24): the claim is made without a turn.
    Refused(PgError),
}

/// Whether the worker already said that its claims in turn fell back to plain claims.
static TURN_REFUSED_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A claim in turn (migration 24): `job_claim_turn_try.sql` (`BEGIN`, and `LOCK` of the
/// queue's turn without waiting), then `job_claim.sql` of `limit`, then COMMIT, sent in one
/// round trip. If another session's claim holds the turn: `job_claim_in_turn.sql` (`BEGIN`,
/// and `LOCK` of the turn, waiting up to 2 s), then `job_claim.sql` of `waited` (at least
/// `limit`), then COMMIT, again in one round trip. LOCK takes no snapshot: a claim waiting
/// for its turn holds back no one's view of which rows are dead, and the claim's snapshot
/// is taken once its turn has come. A turn that does not come within 2 s, or that cannot
/// be taken at all, gives way to `job_claim.sql` alone, of `limit`, without a turn.
pub(crate) async fn claim_in_turn<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    args: &ClaimArgs<'_>,
    waited: i64,
) -> Result<Vec<ClaimedJob>, PgError> {
    let turn = claim_turn(args.queue).to_string();
    let tried = sql.claim_turn_try.replace("{turn}", &turn);
    let refused = match in_turn(c, cache, sql, &tried, args).await {
        Turn::Claimed(r) => return r,
        Turn::Refused(e) => Some(e),
        Turn::Busy => {
            let waiting = sql.claim_in_turn.replace("{turn}", &turn);
            let larger = ClaimArgs {
                limit: waited.max(args.limit),
                ..*args
            };
            match in_turn(c, cache, sql, &waiting, &larger).await {
                Turn::Claimed(r) => return r,
                // The turn did not come within 2 s: claimed without it.
                Turn::Busy => None,
                Turn::Refused(e) => Some(e),
            }
        }
    };
    if let Some(e) = refused {
        if !TURN_REFUSED_SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                error = %e,
                "claims in turn cannot take their turn; claiming without it (migration 24 gives every role that may use the schema the right to)"
            );
        }
    }
    claim(
        c,
        cache,
        &sql.claim,
        args.queue,
        args.limit,
        args.lease_us,
        args.after,
    )
    .await
}

/// One attempt at a claim in turn: `turn_sql` (which opens the transaction and locks the
/// turn), `job_claim.sql` and COMMIT, pipelined. A prepared claim is prepared (or found in
/// the connection's cache) first, so that the three go out together, in order.
async fn in_turn<C: GenericClient + Sync>(
    c: &C,
    cache: Cache<'_>,
    sql: &Sql,
    turn_sql: &str,
    args: &ClaimArgs<'_>,
) -> Turn {
    let params = args.params();
    let prepared = match cache {
        Some(w) => {
            let types: Vec<Type> = params.iter().map(|p| p.1.clone()).collect();
            match w.prepare_typed_cached(&sql.claim, &types).await {
                Ok(p) => Some(p),
                Err(e) => return Turn::Claimed(Err(e)),
            }
        }
        None => None,
    };
    let claim = async {
        match &prepared {
            Some(p) => {
                let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.0).collect();
                c.query(p, &values).await
            }
            None => c.query_typed(&sql.claim, &params).await,
        }
    };
    // `join3` polls the three in order, and each sends its messages when first polled: the
    // server receives BEGIN and LOCK, the claim, then COMMIT.
    let (turn, rows, end) = futures_util::future::join3(
        c.batch_execute(turn_sql),
        claim,
        c.batch_execute(&sql.claim_turn_end),
    )
    .await;
    match turn {
        Ok(()) => Turn::Claimed(rows.and_then(|rows| {
            end?;
            in_claim_order(&rows)
        })),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            Turn::Busy
        }
        Err(e) if e.code().is_some() => Turn::Refused(e),
        Err(e) => Turn::Claimed(Err(e)),
    }
}

pub(super) fn claimed_job(r: &Row) -> Result<ClaimedJob, PgError> {
    claimed_job_at(r, CLAIMED)
}

/// The columns a claimed job is read from, in [`claimed_job_at`]'s order.
const CLAIMED: [&str; 10] = [
    "id",
    "queue",
    "kind",
    "payload",
    "attempts",
    "max_attempts",
    "priority",
    "run_at",
    "created_at",
    "locked_until",
];

/// A claim's rows, each column found once for all of them ([`super::positions`]).
fn claimed_jobs(rows: &[Row]) -> Result<Vec<ClaimedJob>, PgError> {
    let mut jobs = Vec::with_capacity(rows.len());
    match rows.first().and_then(|r| super::positions(r, CLAIMED)) {
        Some(at) => {
            for r in rows {
                jobs.push(claimed_job_at(r, at)?);
            }
        }
        // None, or a column missing: by name, for the error that names it.
        None => {
            for r in rows {
                jobs.push(claimed_job(r)?);
            }
        }
    }
    Ok(jobs)
}

/// A claimed job from `r`, its columns at `at` (positions or names, in [`CLAIMED`]'s order).
fn claimed_job_at<I: tokio_postgres::row::RowIndex + std::fmt::Display + Copy>(
    r: &Row,
    at: [I; 10],
) -> Result<ClaimedJob, PgError> {
    let [id, queue, kind, payload, attempts, max_attempts, priority, run_at, created_at, locked_until] =
        at;
    Ok(ClaimedJob {
        id: JobId(r.try_get(id)?),
        queue: r.try_get(queue)?,
        kind: r.try_get(kind)?,
        payload: r.try_get(payload)?,
        attempt: r.try_get(attempts)?,
        max_attempts: r.try_get(max_attempts)?,
        priority: r.try_get(priority)?,
        run_at: r.try_get(run_at)?,
        created_at: r.try_get(created_at)?,
        locked_until: r.try_get(locked_until)?,
    })
}

/// The most jobs one reaper round moves per kind (expired leases, exhausted queued jobs).
pub(crate) const REAP_BATCH: i64 = 1_000;

/// A job's row from `job_get.sql`, its status already read as `state`.
fn job_row(r: &Row, state: JobState) -> Result<JobRow, PgError> {
    Ok(JobRow {
        id: JobId(r.try_get("id")?),
        queue: r.try_get("queue")?,
        kind: r.try_get("kind")?,
        payload: r.try_get("payload")?,
        state,
        priority: r.try_get("priority")?,
        run_at: r.try_get::<_, SystemTime>("run_at")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        locked_until: r.try_get("locked_until")?,
        last_error: r.try_get("last_error")?,
        created_at: r.try_get("created_at")?,
        finished_at: r.try_get("finished_at")?,
        attempted_at: r.try_get("attempted_at")?,
        schedule: r.try_get("schedule")?,
        key: r.try_get("key")?,
        sequence: r.try_get("sequence")?,
        held: r.try_get("held")?,
        output: r.try_get("output")?,
        after: r
            .try_get::<_, Option<Vec<i64>>>("after")?
            .unwrap_or_default()
            .into_iter()
            .map(JobId)
            .collect(),
        waiting: r.try_get("waiting")?,
        unique_key: r.try_get("unique_key")?,
        unique_queued_only: r.try_get("unique_queued_only")?,
        has_children: r.try_get("has_children")?,
        errors: crate::job::AttemptError::parse_history(r.try_get::<_, Option<&str>>("errors")?),
    })
}

/// Runs one of the admin statements (retry, cancel, delete) over `ids`; returns the ids it
/// changed.
async fn admin<C: GenericClient + Sync>(
    c: &C,
    statement: &str,
    ids: &[i64],
) -> Result<Vec<JobId>, PgError> {
    let rows = c
        .query_typed(statement, &[(&ids, Type::INT8_ARRAY)])
        .await?;
    rows.iter().map(|r| Ok(JobId(r.try_get(0)?))).collect()
}

/// The status of each of `ids` that exists, as text.
async fn states<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    ids: &[i64],
) -> Result<Vec<(JobId, String)>, PgError> {
    let rows = c
        .query_typed(&sql.states, &[(&ids, Type::INT8_ARRAY)])
        .await?;
    rows.iter()
        .map(|r| Ok((JobId(r.try_get(0)?), r.try_get(1)?)))
        .collect()
}
