//! Periodic (cron) jobs: schedules stored in the database and fired by any worker.
//!
//! A [`Schedule`] is a name, a cron expression read in a time zone, and the job each fire
//! enqueues. Register it from code on the worker ([`WorkerBuilder::periodic`](crate::WorkerBuilder::periodic), again on
//! every start: the definition is updated, the schedule's progress kept unless its timing
//! changed), with [`Client::add_schedule`], or with `skiplock schedule add` for workers in
//! any language.
//!
//! **Exactly once per fire.** Each schedule has a durable cursor, `last_fire_at`: the latest
//! fire time enqueued. A scheduler round reads the schedules and the database's clock,
//! computes each schedule's due fires from its cron expression and zone, and enqueues them
//! in one statement that also advances the cursor, guarded by the cursor's old value
//! (`queries/schedule_fire.sql`). However many workers race on a fire, one statement
//! enqueues it; a worker that dies mid-round leaves the cursor unmoved, and the next round
//! (on any worker) fires it. Nothing is kept in one process's memory, so restarts neither
//! replay nor skip fires.
//!
//! **Missed fires.** A fire is due once its time has passed by the database's clock. A due
//! fire at most [`SchedulerConfig::grace`] old is on time and always enqueued; an older one
//! was missed (no worker ran), and the schedule's [`Missed`] policy says what happens:
//! dropped, the most recent one run once (the default), or the most recent N run. A new
//! schedule starts from its registration (no backfill); a resumed one from its resumption;
//! one whose timing (cron expression or time zone) changed from the change, so that a
//! deploy that edits a schedule enqueues nothing that was never due under the new timing.
//! Changing anything else (payload, queue, kind, priority, attempts, missed-fire policy)
//! keeps the cursor.
//!
//! **Each fire's job** has `run_at` = the fire time and `schedule` = the schedule's name
//! ([`JobRow::schedule`](crate::JobRow::schedule)). [`Client::run_schedule_now`] enqueues one
//! more without touching the cursor.
//!
//! **The scheduler** is one of the worker's services: every worker runs it, one round at a
//! time across all of them (a transaction-scoped advisory lock, as the reaper's; one that
//! finds it taken tries again [`SchedulerConfig::tick`] later). Each round is followed by a
//! sleep until the next fire or a change to the schedules (heard through the worker's
//! LISTEN connection), at most the worker's fallback poll interval; with the poll off, no
//! statement is sent while no fire is due and nothing changes. `skiplock work --drain` runs
//! one round first.

mod schedule;

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;

use schedule::{plan, to_chrono, to_system, Spec};
pub use schedule::{schedule_name, Missed, Schedule, DEFAULT_TIME_ZONE, MAX_CATCH_UP};

use crate::client::Client;
use crate::db;
use crate::error::{Error, Result};
use crate::job::JobId;

/// The payload prefix of the notification sent when a schedule appears, is resumed or
/// changes its timing (see `migrations/0008_periodic_jobs.sql`).
pub(crate) const NOTIFY_PREFIX: &str = "schedule:";

/// The scheduler's settings, all with defaults; see each field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerConfig {
    /// How soon a worker's scheduler tries again when another worker's round holds the
    /// scheduler lock (default 1 s), and the shortest wait after a failed round. From 10 ms
    /// to 1 minute, and shorter than the grace period. Between rounds a scheduler sleeps
    /// until the next fire, or until a change to the schedules wakes it, and at most the
    /// worker's fallback poll interval (for a change whose notification was lost).
    pub tick: Duration,
    /// How old a due fire may be and still be on time (default 10 s, ten ticks): older ones
    /// were missed, and the schedule's [`Missed`] policy decides what happens to them.
    /// Covers a worker's restart, another taking over from one that died, and a slow round.
    /// From 1 s to 1 hour.
    pub grace: Duration,
}

impl SchedulerConfig {
    /// The default tick.
    pub const DEFAULT_TICK: Duration = Duration::from_secs(1);
    /// The default grace period.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

    /// See [`SchedulerConfig::tick`].
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// See [`SchedulerConfig::grace`].
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Checks the settings.
    pub fn check(&self) -> Result<()> {
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&self.tick) {
            return Err(Error::invalid(
                "scheduler tick",
                format!("{:?} is outside 10ms..=60s", self.tick),
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.grace) {
            return Err(Error::invalid(
                "scheduler grace period",
                format!("{:?} is outside 1s..=1h", self.grace),
            ));
        }
        if self.tick >= self.grace {
            return Err(Error::invalid(
                "scheduler tick",
                format!(
                    "{:?} must be shorter than the grace period ({:?}), or fires that wait \
                     a tick would count as missed",
                    self.tick, self.grace
                ),
            ));
        }
        Ok(())
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            tick: Self::DEFAULT_TICK,
            grace: Self::DEFAULT_GRACE,
        }
    }
}

/// What one scheduler round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FireReport {
    /// The round's time: the database's clock (or the time it was given).
    pub now: SystemTime,
    /// Schedules looked at (paused ones are not).
    pub schedules: u64,
    /// Jobs enqueued, one per fire.
    pub enqueued: u64,
    /// Missed fires the schedules' policies dropped (counted up to 10,000 per schedule).
    pub missed: u64,
    /// Schedules with due fires that this round left alone because another round fired
    /// them first (or the schedule was paused, removed or redefined meanwhile).
    pub conflicts: u64,
    /// Schedules whose stored cron expression or time zone does not parse (changed by hand,
    /// or from a newer skiplock): skipped, with a warning.
    pub invalid: u64,
    /// How long from `now` until the next fire of any schedule looked at.
    pub next_fire_in: Option<Duration>,
}

/// Whether [`Client::add_schedule`] added the schedule or changed an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleChange {
    /// It was new; its cursor starts now.
    Added,
    /// Its definition changed but not its timing (its payload, queue, kind, priority,
    /// `max_attempts` or missed-fire policy did); its cursor and paused state were kept.
    Updated,
    /// Its timing (cron expression or time zone) changed, perhaps with other fields: its
    /// cursor starts now, as a new schedule's does (no fire before the change is made up,
    /// under either timing); its paused state was kept.
    Retimed,
    /// It was already registered exactly so; nothing was written.
    Unchanged,
}

/// A stored schedule, as [`Client::schedules`] reads it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// Its name.
    pub name: String,
    /// Its cron expression.
    pub cron: String,
    /// The time zone the expression is read in.
    pub time_zone: String,
    /// The queue of each fire's job.
    pub queue: String,
    /// The kind of each fire's job.
    pub kind: String,
    /// The payload of each fire's job, as JSON text.
    pub payload: String,
    /// The priority of each fire's job.
    pub priority: i16,
    /// The `max_attempts` of each fire's job.
    pub max_attempts: i32,
    /// Its missed-fire policy.
    pub missed: Missed,
    /// Whether it is paused.
    pub paused: bool,
    /// The cursor: the latest fire enqueued (or skipped as missed), or when it was added,
    /// resumed or retimed if it has not fired since.
    pub last_fire_at: SystemTime,
    /// Its next fire after the cursor (`None` if paused, or if its expression no longer
    /// parses or fires). A time already past means it is due.
    pub next_fire_at: Option<SystemTime>,
    /// When it was added.
    pub created_at: SystemTime,
    /// When its definition last changed.
    pub updated_at: SystemTime,
}

/// The schedules a worker registers at start and its scheduler's settings.
#[derive(Debug, Clone, Default)]
pub(crate) struct Periodic {
    pub schedules: Vec<Schedule>,
    pub config: SchedulerConfig,
}

impl Periodic {
    /// Checks every schedule (all but the payload's size, which the client checks when it
    /// registers them) and the settings; a name may appear once.
    pub(crate) fn check(&self) -> Result<()> {
        self.config.check()?;
        let mut names = std::collections::HashSet::new();
        for s in &self.schedules {
            s.check(usize::MAX)?;
            if !names.insert(s.name.as_str()) {
                return Err(Error::invalid(
                    "worker",
                    format!("schedule {} is registered twice", s.name),
                ));
            }
        }
        Ok(())
    }
}

/// The first fire of `cron`, read in `time_zone`, strictly after `after` (`None` if the
/// expression has none). A bad expression or zone is an invalid-input error. With a
/// schedule's cursor as `after`, this is its next fire ([`ScheduleInfo::next_fire_at`]); the
/// dashboard shows it so.
pub fn next_fire(cron: &str, time_zone: &str, after: SystemTime) -> Result<Option<SystemTime>> {
    let spec = Spec::parse(cron, time_zone)?;
    Ok(spec.next_after(to_chrono(after)).map(to_system))
}

/// One scheduler round at `now` (`None`: the database's clock, as workers always use):
/// every due fire of every schedule that is not paused is enqueued, missed ones per their
/// policy, each schedule's cursor advanced in the statement that enqueues its fires.
///
/// Safe to run from any number of processes at once: the cursor's compare-and-set lets one
/// of them enqueue each fire (the others count a conflict). Workers run it for you; this is
/// for a process that fires schedules without serving queues (from cron, say), and for
/// tests, which move time with `now`.
pub async fn run_once(
    client: &Client,
    config: &SchedulerConfig,
    now: Option<SystemTime>,
) -> Result<FireReport> {
    config.check()?;
    let conn = client.conn(ROUND).await?;
    round(&**conn, client, config, now).await
}

const ROUND: &str = "run a scheduler round";

/// A round through `c` (a connection, or the locked transaction of a worker's round).
pub(crate) async fn round<C: GenericClient + Sync>(
    c: &C,
    client: &Client,
    config: &SchedulerConfig,
    now: Option<SystemTime>,
) -> Result<FireReport> {
    let store = client.store();
    let (clock, rows) = store.schedule_list(c, now, false).await?;
    let now = to_chrono(clock);
    let mut report = FireReport {
        now: clock,
        schedules: 0,
        enqueued: 0,
        missed: 0,
        conflicts: 0,
        invalid: 0,
        next_fire_in: None,
    };
    let mut next: Option<DateTime<Utc>> = None;
    for row in rows {
        report.schedules += 1;
        let spec = match Spec::parse(&row.cron, &row.time_zone) {
            Ok(spec) => spec,
            Err(e) => {
                report.invalid += 1;
                tracing::warn!(schedule = %row.name, error = %e, "schedule skipped: it does not parse");
                continue;
            }
        };
        let policy = row.missed.parse::<Missed>().unwrap_or_default();
        let plan = plan(
            &spec,
            to_chrono(row.last_fire_at),
            now,
            config.grace,
            policy,
        );
        if let Some(n) = plan.next {
            next = Some(next.map_or(n, |m| m.min(n)));
        }
        let Some(cursor) = plan.cursor else {
            continue;
        };
        let fires: Vec<SystemTime> = plan.fires.iter().copied().map(to_system).collect();
        let (won, enqueued) = store
            .schedule_fire(
                c,
                &row.name,
                row.last_fire_at,
                to_system(cursor),
                &fires,
                &row.cron,
                &row.time_zone,
            )
            .await?;
        if !won {
            report.conflicts += 1;
            tracing::debug!(schedule = %row.name, "another round fired it first");
            continue;
        }
        report.enqueued += enqueued;
        report.missed += plan.missed;
        crate::metrics::enqueued_n(&row.queue, &row.kind, enqueued);
        if enqueued > 0 {
            tracing::info!(schedule = %row.name, jobs = enqueued, "fired");
        }
        if plan.missed > 0 {
            tracing::warn!(
                schedule = %row.name,
                missed = plan.missed,
                policy = %policy,
                "fires missed while no worker ran were dropped"
            );
        }
    }
    report.next_fire_in = next.map(|n| (n - now).to_std().unwrap_or(Duration::ZERO));
    Ok(report)
}

impl Client {
    /// Adds `schedule`, or updates the definition of the schedule of that name, keeping its
    /// paused state and, unless its timing changed, its cursor (so registering the same
    /// schedules on every start, or editing a payload, neither replays nor skips fires). A
    /// new schedule fires from now on: nothing before its registration is backfilled. So
    /// does one whose cron expression or time zone changed ([`ScheduleChange::Retimed`]):
    /// its cursor starts at the change, and no fire before it, under the old timing or the
    /// new, is enqueued. Every field is checked first; a refused schedule changes nothing.
    pub async fn add_schedule(&self, schedule: &Schedule) -> Result<ScheduleChange> {
        const OP: &str = "add a schedule";
        schedule.check(self.max_payload_bytes())?;
        let payload = schedule.payload.as_deref().unwrap_or("{}");
        let d = db::schedule::Definition {
            name: &schedule.name,
            cron: schedule.cron.trim(),
            time_zone: schedule.time_zone.trim(),
            queue: &schedule.queue,
            kind: &schedule.kind,
            payload,
            priority: schedule.priority,
            max_attempts: schedule.max_attempts,
            missed: schedule.missed.to_string(),
        };
        let conn = self.conn(OP).await?;
        Ok(match self.store().schedule_upsert(&**conn, &d).await? {
            Some(u) if u.created => ScheduleChange::Added,
            Some(u) if u.retimed => ScheduleChange::Retimed,
            Some(_) => ScheduleChange::Updated,
            None => ScheduleChange::Unchanged,
        })
    }

    /// Every schedule, paused ones included, by name, with its next fire by the database's
    /// clock.
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        const OP: &str = "list the schedules";
        let conn = self.conn(OP).await?;
        let (_, rows) = self.store().schedule_list(&**conn, None, true).await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let next_fire_at = if r.paused {
                    None
                } else {
                    Spec::parse(&r.cron, &r.time_zone)
                        .ok()
                        .and_then(|s| s.next_after(to_chrono(r.last_fire_at)))
                        .map(to_system)
                };
                ScheduleInfo {
                    missed: r.missed.parse().unwrap_or_default(),
                    name: r.name,
                    cron: r.cron,
                    time_zone: r.time_zone,
                    queue: r.queue,
                    kind: r.kind,
                    payload: r.payload,
                    priority: r.priority,
                    max_attempts: r.max_attempts,
                    paused: r.paused,
                    last_fire_at: r.last_fire_at,
                    next_fire_at,
                    created_at: r.created_at,
                    updated_at: r.updated_at,
                }
            })
            .collect())
    }

    /// Removes the schedule `name`; whether there was one. Jobs it enqueued stay.
    pub async fn remove_schedule(&self, name: &str) -> Result<bool> {
        const OP: &str = "remove a schedule";
        schedule_name(name)?;
        let conn = self.conn(OP).await?;
        self.store().schedule_remove(&**conn, name).await
    }

    /// Pauses the schedule `name`: it does not fire until resumed. Whether there is one.
    pub async fn pause_schedule(&self, name: &str) -> Result<bool> {
        self.set_paused(name, true).await
    }

    /// Resumes the schedule `name`. Fires it would have had while paused are not made up:
    /// a paused schedule's cursor moves to the present when it resumes. Whether there is one.
    pub async fn resume_schedule(&self, name: &str) -> Result<bool> {
        self.set_paused(name, false).await
    }

    async fn set_paused(&self, name: &str, paused: bool) -> Result<bool> {
        const OP: &str = "pause or resume a schedule";
        schedule_name(name)?;
        let conn = self.conn(OP).await?;
        self.store()
            .schedule_set_paused(&**conn, name, paused)
            .await
    }

    /// Enqueues one job from the schedule `name` now (paused or not), without touching its
    /// cursor: its own fires go on as before. The job's id, or `None` if there is no such
    /// schedule.
    pub async fn run_schedule_now(&self, name: &str) -> Result<Option<JobId>> {
        const OP: &str = "run a schedule now";
        schedule_name(name)?;
        let conn = self.conn(OP).await?;
        let job = self.store().schedule_run_now(&**conn, name).await?;
        Ok(job.map(|(id, queue, kind)| {
            crate::metrics::enqueued([(queue.as_str(), kind.as_str())]);
            JobId(id)
        }))
    }
}

#[cfg(test)]
mod tests;
