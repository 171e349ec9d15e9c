//! Periodic schedules: registration, the scheduler's read and its compare-and-set fire.

use std::time::SystemTime;

use tokio_postgres::types::Type;
use tokio_postgres::{Error, GenericClient};

use super::{Sql, Store};

/// Runs a schedule statement, its error naming `op`.
macro_rules! named {
    ($op:expr, $e:expr) => {
        $e.await.map_err(crate::error::Error::db($op))
    };
}

impl Store {
    /// `schedule_upsert.sql`: registers or updates a schedule, keeping its cursor unless its
    /// timing changed; `None` when unchanged, else whether it was added and whether its
    /// timing (cron expression or time zone) changed.
    pub(crate) async fn schedule_upsert<C: GenericClient + Sync>(
        &self,
        c: &C,
        d: &Definition<'_>,
    ) -> crate::error::Result<Option<Upserted>> {
        named!("register a schedule", upsert(c, &self.sql, d))
    }

    /// `schedule_list.sql`: the database's clock and the schedules (the paused ones too if
    /// `include_paused`).
    pub(crate) async fn schedule_list<C: GenericClient + Sync>(
        &self,
        c: &C,
        now: Option<SystemTime>,
        include_paused: bool,
    ) -> crate::error::Result<(SystemTime, Vec<Row>)> {
        named!(
            "list the schedules",
            list(c, &self.sql, now, include_paused)
        )
    }

    /// `schedule_fire.sql`: the compare-and-set fire; whether the cursor moved, and how
    /// many jobs it enqueued.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn schedule_fire<C: GenericClient + Sync>(
        &self,
        c: &C,
        name: &str,
        expected: SystemTime,
        cursor: SystemTime,
        fires: &[SystemTime],
        cron: &str,
        time_zone: &str,
    ) -> crate::error::Result<(bool, u64)> {
        named!(
            "fire a schedule",
            fire(c, &self.sql, name, expected, cursor, fires, cron, time_zone)
        )
    }

    /// `schedule_remove.sql`: whether the schedule existed.
    pub(crate) async fn schedule_remove<C: GenericClient + Sync>(
        &self,
        c: &C,
        name: &str,
    ) -> crate::error::Result<bool> {
        named!("remove a schedule", remove(c, &self.sql, name))
    }

    /// `schedule_pause.sql`: pauses or resumes a schedule; whether it exists.
    pub(crate) async fn schedule_set_paused<C: GenericClient + Sync>(
        &self,
        c: &C,
        name: &str,
        paused: bool,
    ) -> crate::error::Result<bool> {
        named!(
            "pause or resume a schedule",
            set_paused(c, &self.sql, name, paused)
        )
    }

    /// `schedule_run_now.sql`: enqueues one job of the schedule now, cursor untouched.
    pub(crate) async fn schedule_run_now<C: GenericClient + Sync>(
        &self,
        c: &C,
        name: &str,
    ) -> crate::error::Result<Option<(i64, String, String)>> {
        named!("run a schedule now", run_now(c, &self.sql, name))
    }

    /// `schedule_try_lock.sql`: the scheduler's transaction-scoped advisory lock.
    pub(crate) async fn schedule_try_lock<C: GenericClient + Sync>(
        &self,
        c: &C,
        key: i64,
    ) -> crate::error::Result<bool> {
        named!("take the scheduler's lock", try_lock(c, &self.sql, key))
    }
}

/// A schedule's definition, validated, as bound to `schedule_upsert.sql`.
#[derive(Debug)]
pub(crate) struct Definition<'a> {
    pub name: &'a str,
    pub cron: &'a str,
    pub time_zone: &'a str,
    pub queue: &'a str,
    pub kind: &'a str,
    pub payload: &'a str,
    pub priority: i16,
    pub max_attempts: i32,
    pub missed: String,
}

/// One row of `schedule_list.sql`.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    pub queue: String,
    pub kind: String,
    pub payload: String,
    pub priority: i16,
    pub max_attempts: i32,
    pub missed: String,
    pub paused: bool,
    pub last_fire_at: SystemTime,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
}

/// What `schedule_upsert.sql` did to a schedule it wrote.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Upserted {
    /// It was new.
    pub created: bool,
    /// Its cron expression or time zone changed (or it was new): its cursor starts now.
    pub retimed: bool,
}

/// Adds or updates a schedule (`None`: unchanged, nothing written).
async fn upsert<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    d: &Definition<'_>,
) -> Result<Option<Upserted>, Error> {
    let row = c
        .query_typed_opt(
            &sql.schedule_upsert,
            &[
                (&d.name, Type::TEXT),
                (&d.cron, Type::TEXT),
                (&d.time_zone, Type::TEXT),
                (&d.queue, Type::TEXT),
                (&d.kind, Type::TEXT),
                (&d.payload, Type::TEXT),
                (&d.priority, Type::INT2),
                (&d.max_attempts, Type::INT4),
                (&d.missed, Type::TEXT),
            ],
        )
        .await?;
    row.map(|r| {
        Ok(Upserted {
            created: r.try_get("created")?,
            retimed: r.try_get("retimed")?,
        })
    })
    .transpose()
}

/// The database's clock (or `now`, when given) and the schedules, paused ones only if asked.
async fn list<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    now: Option<SystemTime>,
    include_paused: bool,
) -> Result<(SystemTime, Vec<Row>), Error> {
    let rows = c
        .query_typed(
            &sql.schedule_list,
            &[(&now, Type::TIMESTAMPTZ), (&include_paused, Type::BOOL)],
        )
        .await?;
    let mut clock = now.unwrap_or(SystemTime::UNIX_EPOCH);
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        clock = r.try_get("now")?;
        let Some(name) = r.try_get::<_, Option<String>>("name")? else {
            continue;
        };
        out.push(Row {
            name,
            cron: r.try_get("cron")?,
            time_zone: r.try_get("time_zone")?,
            queue: r.try_get("queue")?,
            kind: r.try_get("kind")?,
            payload: r.try_get("payload")?,
            priority: r.try_get("priority")?,
            max_attempts: r.try_get("max_attempts")?,
            missed: r.try_get("missed")?,
            paused: r.try_get("paused")?,
            last_fire_at: r.try_get("last_fire_at")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
        });
    }
    Ok((clock, out))
}

/// The compare-and-set fire: returns whether the cursor moved (this round won) and how many
/// jobs were enqueued.
#[allow(clippy::too_many_arguments)]
async fn fire<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    name: &str,
    expected: SystemTime,
    cursor: SystemTime,
    fires: &[SystemTime],
    cron: &str,
    time_zone: &str,
) -> Result<(bool, u64), Error> {
    let r = c
        .query_typed_one(
            &sql.schedule_fire,
            &[
                (&name, Type::TEXT),
                (&expected, Type::TIMESTAMPTZ),
                (&cursor, Type::TIMESTAMPTZ),
                (&fires, Type::TIMESTAMPTZ_ARRAY),
                (&cron, Type::TEXT),
                (&time_zone, Type::TEXT),
            ],
        )
        .await?;
    let advanced: i64 = r.try_get("advanced")?;
    let fired: i64 = r.try_get("fired")?;
    Ok((advanced > 0, u64::try_from(fired).unwrap_or(0)))
}

/// Removes a schedule; whether it existed.
async fn remove<C: GenericClient + Sync>(c: &C, sql: &Sql, name: &str) -> Result<bool, Error> {
    Ok(
        c.execute_typed(&sql.schedule_remove, &[(&name, Type::TEXT)])
            .await?
            > 0,
    )
}

/// Pauses or resumes a schedule; whether it exists.
async fn set_paused<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    name: &str,
    paused: bool,
) -> Result<bool, Error> {
    Ok(c.execute_typed(
        &sql.schedule_pause,
        &[(&name, Type::TEXT), (&paused, Type::BOOL)],
    )
    .await?
        > 0)
}

/// Enqueues one job from a schedule now; its id, or `None` if there is no such schedule.
async fn run_now<C: GenericClient + Sync>(
    c: &C,
    sql: &Sql,
    name: &str,
) -> Result<Option<(i64, String, String)>, Error> {
    c.query_typed_opt(&sql.schedule_run_now, &[(&name, Type::TEXT)])
        .await?
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .transpose()
}

/// Whether this transaction may run a scheduler round (see `schedule_try_lock.sql`).
async fn try_lock<C: GenericClient + Sync>(c: &C, sql: &Sql, key: i64) -> Result<bool, Error> {
    c.query_typed_one(&sql.schedule_try_lock, &[(&key, Type::INT8)])
        .await?
        .try_get(0)
}
