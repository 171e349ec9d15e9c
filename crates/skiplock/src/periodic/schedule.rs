//! A schedule's definition, its checks, and the fire times it has between two instants.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, TimeZone as _, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::input;
use crate::job::{DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE};

/// The time zone a schedule is read in unless told otherwise.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// The most missed fires [`Missed::CatchUp`] may make up per round.
pub const MAX_CATCH_UP: u32 = 1_000;

/// Missed fires are counted up to this many per schedule and round (the count is for the
/// log; beyond it the number is "at least").
pub(crate) const MISSED_COUNT_CAP: u64 = 10_000;

/// What a schedule does with fires it missed: fires that came due while no worker ran, and
/// are older than the scheduler's grace period by the time one runs (see
/// [`SchedulerConfig::grace`](super::SchedulerConfig::grace)). Fires inside the grace
/// period are never missed: they are enqueued as usual.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missed {
    /// Drop them: only fires from now on run.
    Skip,
    /// Run the most recent missed fire once (the default), however many were missed.
    #[default]
    Latest,
    /// Run the most recent N missed fires (1 to [`MAX_CATCH_UP`]), oldest first; older ones
    /// are dropped.
    CatchUp(u32),
}

impl Missed {
    /// How many missed fires are enqueued at most.
    pub(crate) fn limit(self) -> u64 {
        match self {
            Missed::Skip => 0,
            Missed::Latest => 1,
            Missed::CatchUp(n) => u64::from(n),
        }
    }

    fn check(self) -> Result<()> {
        match self {
            Missed::CatchUp(n) if n == 0 || n > MAX_CATCH_UP => Err(Error::invalid(
                "missed-fire policy",
                format!("catch-up={n} is outside 1..={MAX_CATCH_UP}"),
            )),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Missed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missed::Skip => f.write_str("skip"),
            Missed::Latest => f.write_str("latest"),
            Missed::CatchUp(n) => write!(f, "catch-up={n}"),
        }
    }
}

impl FromStr for Missed {
    type Err = Error;

    /// `skip`, `latest` or `catch-up=N` (N from 1 to [`MAX_CATCH_UP`]).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(
                "missed-fire policy",
                format!("{s:?} is not skip, latest or catch-up=N"),
            )
        };
        let m = match s.trim() {
            "skip" => Missed::Skip,
            "latest" => Missed::Latest,
            other => {
                let n = other
                    .strip_prefix("catch-up=")
                    .ok_or_else(bad)?
                    .parse::<u32>()
                    .map_err(|_| bad())?;
                Missed::CatchUp(n)
            }
        };
        m.check()?;
        Ok(m)
    }
}

/// A periodic job: a name, a cron expression read in a time zone, and the job each fire
/// enqueues.
///
/// ```
/// use skiplock::{Missed, Schedule};
///
/// let nightly = Schedule::new("nightly-report", "0 30 2 * * *", "report")
///     .queue("reports")
///     .payload(&serde_json::json!({ "format": "pdf" }))
///     .time_zone("Europe/Berlin")
///     .missed(Missed::Latest);
/// ```
///
/// The cron expression has 5 fields (`minute hour day-of-month month day-of-week`) or 6 with
/// seconds first, as `croner` reads them: lists, ranges, steps, month and weekday names,
/// `L`, `W`, `#`, and `@hourly`-style nicknames. It is read in the time zone (an IANA name,
/// default `UTC`): a time that a daylight-saving change skips fires at the first instant
/// after the change, and a time that it repeats fires once.
///
/// Nothing is checked until the schedule is registered; then every field is validated
/// before any SQL runs ([`Schedule::check`]).
#[derive(Debug, Clone)]
pub struct Schedule {
    pub(crate) name: String,
    pub(crate) cron: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) payload: std::result::Result<String, String>,
    pub(crate) time_zone: String,
    pub(crate) missed: Missed,
    pub(crate) priority: i16,
    pub(crate) max_attempts: i32,
}

impl Schedule {
    /// A schedule called `name` (1 to 128 characters from `[A-Za-z0-9_.-]`) that enqueues a
    /// job of `kind` on every fire of `cron`, with an empty object (`{}`) as payload, on the
    /// default queue.
    pub fn new(name: impl Into<String>, cron: impl Into<String>, kind: impl Into<String>) -> Self {
        Schedule {
            name: name.into(),
            cron: cron.into(),
            kind: kind.into(),
            queue: DEFAULT_QUEUE.to_owned(),
            payload: Ok("{}".to_owned()),
            time_zone: DEFAULT_TIME_ZONE.to_owned(),
            missed: Missed::default(),
            priority: 0,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// The queue each fire's job goes to (default `"default"`).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// Each fire's payload: `payload` serialized as JSON (default `{}`).
    pub fn payload<T: Serialize + ?Sized>(mut self, payload: &T) -> Self {
        self.payload = serde_json::to_string(payload).map_err(|e| e.to_string());
        self
    }

    /// Each fire's payload as JSON text (checked when registered).
    pub fn payload_json(mut self, json: impl Into<String>) -> Self {
        self.payload = Ok(json.into());
        self
    }

    /// The IANA time zone the cron expression is read in (default `UTC`), such as
    /// `Europe/Berlin` or `America/New_York`.
    pub fn time_zone(mut self, zone: impl Into<String>) -> Self {
        self.time_zone = zone.into();
        self
    }

    /// What to do with fires missed while no worker ran (default [`Missed::Latest`]).
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// Each fire's job priority (default 0; lower runs first).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Each fire's job `max_attempts` (default 5; 1 to 10,000).
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = n;
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks every field as registering it would, without any SQL: the name, the cron
    /// expression (which must fire at least once), the time zone, the queue, the kind, the
    /// payload (at most `max_payload_bytes`), `max_attempts` and the missed-fire policy.
    pub fn check(&self, max_payload_bytes: usize) -> Result<()> {
        schedule_name(&self.name)?;
        Spec::parse(&self.cron, &self.time_zone)?;
        input::queue_name(&self.queue)?;
        input::kind_name(&self.kind)?;
        input::max_attempts(self.max_attempts)?;
        self.missed.check()?;
        let payload = self
            .payload
            .as_ref()
            .map_err(|e| Error::invalid("payload", format!("it could not be serialized: {e}")))?;
        input::payload(payload, max_payload_bytes)
    }
}

/// A schedule name: 1 to 128 characters from `[A-Za-z0-9_.-]`.
pub fn schedule_name(name: &str) -> Result<()> {
    // The same rule as queue names, under its own name in the message.
    input::queue_name(name).map_err(|e| match e {
        Error::Invalid { reason, .. } => Error::invalid("schedule name", reason),
        other => other,
    })
}

/// A parsed cron expression and time zone: the fire times.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    cron: Cron,
    tz: Tz,
}

impl Spec {
    /// Parses and checks `cron` and `zone`; the expression must fire at least once.
    pub(crate) fn parse(cron: &str, zone: &str) -> Result<Spec> {
        let tz: Tz = zone.trim().parse().map_err(|_| {
            Error::invalid(
                "time zone",
                format!("{zone:?} is not an IANA time zone name (such as UTC or Europe/Berlin)"),
            )
        })?;
        if cron.len() > 256 {
            return Err(Error::invalid(
                "cron expression",
                format!("it is {} bytes long; the limit is 256", cron.len()),
            ));
        }
        let parsed = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(cron)
            .map_err(|e| {
                Error::invalid(
                    "cron expression",
                    format!(
                        "{cron:?}: {} (use 5 fields, minute hour day-of-month month \
                         day-of-week, or 6 with seconds first)",
                        one_line(&e.to_string())
                    ),
                )
            })?;
        let spec = Spec { cron: parsed, tz };
        // An expression that can never match (February 30th) would make every round search
        // in vain: refuse it now.
        let from = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).single();
        if from.and_then(|t| spec.next_after(t)).is_none() {
            return Err(Error::invalid(
                "cron expression",
                format!("{cron:?} never fires"),
            ));
        }
        Ok(spec)
    }

    /// The first fire strictly after `t`, or `None` if there is none.
    pub(crate) fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&t.with_timezone(&self.tz), false)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    /// The last fire strictly before `t`, or `None` if there is none.
    pub(crate) fn prev_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_previous_occurrence(&t.with_timezone(&self.tz), false)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What one schedule should do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The fire times to enqueue, oldest first.
    pub fires: Vec<DateTime<Utc>>,
    /// The new cursor: the latest fire now due, enqueued or skipped. `None`: nothing is due.
    pub cursor: Option<DateTime<Utc>>,
    /// Missed fires not enqueued (counted up to [`MISSED_COUNT_CAP`]).
    pub missed: u64,
    /// The first fire after `now`.
    pub next: Option<DateTime<Utc>>,
}

/// The fires of `spec` due at `now` for a schedule whose cursor is `cursor`: every fire
/// after the cursor and at or before `now`. Those at most `grace` old are on time and all
/// enqueued; older ones are missed, and `missed` says how many of the most recent of them
/// are enqueued too. Works in whole seconds (cron's resolution): `now` is rounded down and
/// `grace` up.
pub(crate) fn plan(
    spec: &Spec,
    cursor: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: Duration,
    missed: Missed,
) -> Plan {
    let now = whole_second(now);
    let cursor = whole_second(cursor);
    let nothing = |next| Plan {
        fires: Vec::new(),
        cursor: None,
        missed: 0,
        next,
    };
    let Some(first) = spec.next_after(cursor) else {
        return nothing(None);
    };
    if first > now {
        return nothing(Some(first));
    }
    let grace_s =
        i64::try_from(grace.as_secs() + u64::from(grace.subsec_nanos() > 0)).unwrap_or(i64::MAX);
    let one = chrono::TimeDelta::seconds(1);
    // Fires at or after `boundary` are on time.
    let boundary = now
        .checked_sub_signed(chrono::TimeDelta::seconds(grace_s))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);

    let mut on_time = Vec::new();
    let mut t = cursor.max(boundary.checked_sub_signed(one).unwrap_or(boundary));
    while let Some(f) = spec.next_after(t).filter(|f| *f <= now) {
        on_time.push(f);
        t = f;
    }

    // Missed fires, newest first, as many as the policy takes.
    let mut late = Vec::new();
    let mut count = 0u64;
    let mut latest_missed = None;
    if first < boundary {
        let mut t = boundary;
        while count < MISSED_COUNT_CAP {
            let Some(f) = spec.prev_before(t).filter(|f| *f > cursor) else {
                break;
            };
            latest_missed.get_or_insert(f);
            if count < missed.limit() {
                late.push(f);
            }
            count += 1;
            t = f;
        }
    }
    let enqueued_late = late.len() as u64;
    late.reverse();
    let new_cursor = on_time.last().copied().or(latest_missed);
    let mut fires = late;
    fires.extend(on_time);
    Plan {
        next: new_cursor.and_then(|c| spec.next_after(c)),
        cursor: new_cursor,
        missed: count - enqueued_late,
        fires,
    }
}

fn whole_second(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

pub(crate) fn to_chrono(t: SystemTime) -> DateTime<Utc> {
    DateTime::<Utc>::from(t)
}

pub(crate) fn to_system(t: DateTime<Utc>) -> SystemTime {
    SystemTime::from(t)
}
