//! The statements of the `workers` table and of the per-minute rollup (migration 14):
//! `worker_register.sql`, `worker_seen.sql`, `worker_stop.sql`, `worker_list.sql`,
//! `queue_stats_write.sql`, `queue_stats_list.sql`, and the rollup's counts from
//! `health_queues.sql`.

use std::time::{Duration, SystemTime};

use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Row};

use super::Store;
use crate::error::{Error, Result};
use crate::health::QueueHealth;
use crate::maintenance::gauges::QueueMinute;
use crate::worker::presence::NewWorker;
use crate::worker::{WorkerRow, WorkerState};

/// One queue's counts for the rollup, from the gauges round's pass (`health_queues.sql`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MinuteCounts {
    pub queue: String,
    /// The minute of the pass, by the database's clock.
    pub minute: SystemTime,
    pub done: i64,
    pub failed: i64,
    pub available: i64,
    pub scheduled: i64,
    pub running: i64,
    pub done_prev: i64,
    pub failed_prev: i64,
}

impl Store {
    /// `worker_register.sql`: registers a worker (and deletes the rows silent for a day);
    /// its id.
    pub(crate) async fn worker_register<C: GenericClient + Sync>(
        &self,
        c: &C,
        w: &NewWorker,
    ) -> Result<i64> {
        c.query_typed_one(
            &self.sql.worker_register,
            &[
                (&w.host, Type::TEXT),
                (&w.pid, Type::INT4),
                (&w.queues, Type::TEXT),
                (&w.concurrency, Type::INT4),
                (&w.poll_off, Type::BOOL),
                (&w.heartbeat_us, Type::INT8),
                (&w.version, Type::TEXT),
            ],
        )
        .await
        .and_then(|r| r.try_get(0))
        .map_err(Error::db("register the worker"))
    }

    /// `worker_seen.sql`: a presence write; false if the worker's row is gone.
    pub(crate) async fn worker_seen<C: GenericClient + Sync>(
        &self,
        c: &C,
        id: i64,
        running: i32,
    ) -> Result<bool> {
        c.query_typed_opt(
            &self.sql.worker_seen,
            &[(&id, Type::INT8), (&running, Type::INT4)],
        )
        .await
        .map(|r| r.is_some())
        .map_err(Error::db("write the worker's presence"))
    }

    /// `worker_stop.sql`: marks the worker stopped.
    pub(crate) async fn worker_stop<C: GenericClient + Sync>(&self, c: &C, id: i64) -> Result<()> {
        c.execute_typed(&self.sql.worker_stop, &[(&id, Type::INT8)])
            .await
            .map(|_| ())
            .map_err(Error::db("mark the worker stopped"))
    }

    /// `worker_list.sql`: the registered workers, newest first.
    pub(crate) async fn worker_list<C: GenericClient + Sync>(
        &self,
        c: &C,
    ) -> Result<Vec<WorkerRow>> {
        const OP: &str = "list the workers";
        let rows = c
            .query_typed(&self.sql.worker_list, &[])
            .await
            .map_err(Error::db(OP))?;
        rows.iter()
            .map(|r| worker_row(r).map_err(Error::db(OP))?)
            .collect()
    }

    /// `health_queues.sql`, read for the gauges round: each queue's health and its counts
    /// for the rollup, from the one pass.
    pub(crate) async fn health_queues_rollup<C: GenericClient + Sync>(
        &self,
        c: &C,
    ) -> Result<Vec<(QueueHealth, MinuteCounts)>> {
        const OP: &str = "read the queues' health";
        let rows = c
            .query_typed(&self.sql.health_queues, &[])
            .await
            .map_err(Error::db(OP))?;
        rows.iter()
            .map(|r| {
                let counts = (|| {
                    Ok::<_, tokio_postgres::Error>(MinuteCounts {
                        queue: r.try_get("queue")?,
                        minute: r.try_get("minute")?,
                        done: r.try_get("done_minute")?,
                        failed: r.try_get("failed_minute")?,
                        available: r.try_get("ready")?,
                        scheduled: r.try_get("scheduled")?,
                        running: r.try_get("running")?,
                        done_prev: r.try_get("done_prev_minute")?,
                        failed_prev: r.try_get("failed_prev_minute")?,
                    })
                })()
                .map_err(Error::db(OP))?;
                let health = super::health::queue_health(r).map_err(Error::db(OP))?;
                Ok((health, counts))
            })
            .collect()
    }

    /// `queue_stats_write.sql`: one round of the rollup (and its pruning).
    pub(crate) async fn queue_stats_write<C: GenericClient + Sync>(
        &self,
        c: &C,
        counts: &[MinuteCounts],
    ) -> Result<()> {
        let Some(first) = counts.first() else {
            return Ok(());
        };
        let col = |f: fn(&MinuteCounts) -> i64| counts.iter().map(f).collect::<Vec<i64>>();
        let queues: Vec<&str> = counts.iter().map(|m| m.queue.as_str()).collect();
        let (done, failed, available) = (col(|m| m.done), col(|m| m.failed), col(|m| m.available));
        let (scheduled, running) = (col(|m| m.scheduled), col(|m| m.running));
        let (done_prev, failed_prev) = (col(|m| m.done_prev), col(|m| m.failed_prev));
        c.query_typed_one(
            &self.sql.queue_stats_write,
            &[
                (&first.minute, Type::TIMESTAMPTZ),
                (&queues, Type::TEXT_ARRAY),
                (&done, Type::INT8_ARRAY),
                (&failed, Type::INT8_ARRAY),
                (&available, Type::INT8_ARRAY),
                (&scheduled, Type::INT8_ARRAY),
                (&running, Type::INT8_ARRAY),
                (&done_prev, Type::INT8_ARRAY),
                (&failed_prev, Type::INT8_ARRAY),
            ],
        )
        .await
        .map(|_| ())
        .map_err(Error::db("write the queues' per-minute counts"))
    }

    /// `queue_stats_list.sql`: the rollup's rows since `since`, oldest first.
    pub(crate) async fn queue_stats_list<C: GenericClient + Sync>(
        &self,
        c: &C,
        since: SystemTime,
    ) -> Result<Vec<QueueMinute>> {
        const OP: &str = "read the queues' per-minute counts";
        let rows = c
            .query_typed(&self.sql.queue_stats_list, &[(&since, Type::TIMESTAMPTZ)])
            .await
            .map_err(Error::db(OP))?;
        rows.iter()
            .map(|r| {
                Ok(QueueMinute {
                    queue: r.try_get("queue")?,
                    minute: r.try_get("minute")?,
                    done: r.try_get("done")?,
                    failed: r.try_get("failed")?,
                    available: r.try_get("available")?,
                    scheduled: r.try_get("scheduled")?,
                    running: r.try_get("running")?,
                })
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(Error::db(OP))
    }
}

/// A row of `worker_list.sql`; an unknown state or a queues column that is not an object of
/// numbers is a decode error.
fn worker_row(r: &Row) -> Result<Result<WorkerRow>, tokio_postgres::Error> {
    const OP: &str = "list the workers";
    let state: String = r.try_get("state")?;
    let queues_text: String = r.try_get("queues")?;
    let heartbeat_us: i64 = r.try_get("heartbeat_us")?;
    let id: i64 = r.try_get("id")?;
    let Some(state) = WorkerState::parse(&state) else {
        return Ok(Err(Error::Decode {
            op: OP,
            detail: format!("worker {id}: unknown state {state:?}"),
        }));
    };
    let queues =
        match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&queues_text) {
            Ok(map) => {
                let mut queues = Vec::with_capacity(map.len());
                for (name, n) in map {
                    match n.as_i64() {
                        Some(n) => queues.push((name, n)),
                        None => {
                            return Ok(Err(Error::Decode {
                                op: OP,
                                detail: format!("worker {id}: queue {name}: concurrency {n}"),
                            }))
                        }
                    }
                }
                queues.sort();
                queues
            }
            Err(e) => {
                return Ok(Err(Error::Decode {
                    op: OP,
                    detail: format!("worker {id}: queues {queues_text:?}: {e}"),
                }))
            }
        };
    Ok(Ok(WorkerRow {
        id,
        host: r.try_get("host")?,
        pid: r.try_get("pid")?,
        queues,
        concurrency: r.try_get("concurrency")?,
        running: r.try_get("running")?,
        poll_off: r.try_get("poll_off")?,
        heartbeat: Duration::from_micros(u64::try_from(heartbeat_us).unwrap_or(0)),
        version: r.try_get("version")?,
        started_at: r.try_get("started_at")?,
        last_seen: r.try_get("last_seen")?,
        stopped_at: r.try_get("stopped_at")?,
        state,
    }))
}
