//! `skiplock jobs`: the jobs matching some filters, newest first, a page at a time.
//!
//! One statement, `queries/jobs_list.sql` of the library (`Statement::JobsList`), every
//! filter a bound parameter (NULL for none): a backward scan of the primary key below the
//! page cursor, stopped after the page (and one more row, to know whether more remain).
//! The filters ([`Filter`]) are also those of `skiplock retry`, `cancel` and `delete`
//! (`bulk.rs`), through `queries/jobs_match.sql`, which has the same WHERE clause.

use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use skiplock::Statement;
use tokio_postgres::types::Type;

use crate::connect::{missing_schema, redact, Target};
use crate::errors::usage;
use crate::output::{errln, outln, time};
use crate::parse::parse_duration;

/// The most rows `--limit` takes.
const MAX_LIMIT: i64 = 1000;

/// How much of `last_error` the table shows.
const ERROR_WIDTH: usize = 60;

/// The filters `skiplock jobs` lists by, and `skiplock retry`, `cancel` and `delete` act
/// by: one definition, one statement's WHERE clause (`jobs_list.sql`, and `jobs_match.sql`
/// with the same clause).
#[derive(Debug, Default, clap::Args)]
pub struct Filter {
    /// Only jobs in these states (comma-separated or repeated): a stored status (queued,
    /// running, done, failed) or a display state (scheduled, available, waiting, retrying,
    /// cancelled). `queued` is scheduled, available, waiting and retrying together; `failed`
    /// includes cancelled jobs. See the states below (--help).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "STATE[,STATE…]")]
    state: Vec<StateArg>,
    /// Only jobs of this queue.
    #[arg(long, value_name = "QUEUE")]
    queue: Option<String>,
    /// Only jobs of this kind.
    #[arg(long, value_name = "KIND")]
    kind: Option<String>,
    /// Only jobs with an id at least N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..),
          allow_negative_numbers = true)]
    id_from: Option<i64>,
    /// Only jobs with an id at most N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..),
          allow_negative_numbers = true)]
    id_to: Option<i64>,
    /// Only jobs created longer ago than this (30s, 5m, 2h, 7d; by the database's clock).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          allow_hyphen_values = true)]
    older_than: Option<Duration>,
    /// Only jobs created less long ago than this (30s, 5m, 2h, 7d; by the database's clock).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          allow_hyphen_values = true)]
    newer_than: Option<Duration>,
}

#[derive(Debug, clap::Args)]
#[command(after_long_help = STATES_HELP)]
pub struct Args {
    #[command(flatten)]
    filter: Filter,
    /// At most N jobs (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 50,
          value_parser = clap::value_parser!(i64).range(1..=MAX_LIMIT),
          allow_negative_numbers = true)]
    limit: i64,
    /// The page cursor: only jobs with an id below ID. When more jobs match than --limit
    /// shows, the command ends with the next page's command on standard error
    /// (`more: skiplock jobs … --before ID`), or, with --json, a last line
    /// `{"next_before": ID}`.
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(i64).range(1..),
          allow_negative_numbers = true)]
    before: Option<i64>,
    /// One JSON object per job and line, with every column (payload and output as JSON
    /// values).
    #[arg(long)]
    json: bool,
}

const STATES_HELP: &str = "\
States (the STATE column; a job has exactly one):
  scheduled  queued, run_at in the future
  available  queued, ready now (not held)
  waiting    queued and held: for its parent jobs (held = 'after') or for its turn in a
             sequence (held = 'sequence')
  retrying   queued after a failed attempt (attempts > 0 and a last_error), whether its
             back-off has ended or not
  running    claimed by a worker
  done       finished
  failed     failed (no attempts left, or discarded)
  cancelled  failed with last_error 'cancelled' (`skiplock cancel`)
The first that applies wins, in the order waiting, retrying, scheduled, available.
A snoozed job (queued, run_at in the future, attempts > 0 without a new error) shows as
scheduled, and available once its delay is over; a job handed back by a worker that shut
down (queued at its old run_at) shows as available (or scheduled if that run_at is still
ahead). Both keep the last_error of an earlier failed attempt, if they had one: such a job
shows as retrying. --state queued lists all four queued states.

Examples:
  skiplock jobs --state failed,retrying --queue emails --newer-than 1d
  skiplock jobs --state retrying --json
  skiplock jobs --limit 100 --before 1234

`jobs` only lists. To retry, cancel or delete every job some filters match (not one page),
give the same filters to `skiplock retry`, `skiplock cancel` or `skiplock delete`.";

/// A `--state` word: a stored status or a display state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StateArg {
    /// Stored status: scheduled, available, waiting and retrying jobs.
    Queued,
    /// Claimed by a worker.
    Running,
    /// Finished.
    Done,
    /// Stored status: failed and cancelled jobs.
    Failed,
    /// Queued, run_at in the future.
    Scheduled,
    /// Queued, ready now.
    Available,
    /// Queued and held (parents, sequence).
    Waiting,
    /// Queued after a failed attempt.
    Retrying,
    /// Failed with last_error 'cancelled'.
    Cancelled,
}

impl StateArg {
    /// The display states the word stands for.
    fn display_states(self) -> &'static [&'static str] {
        match self {
            StateArg::Queued => &["scheduled", "available", "waiting", "retrying"],
            StateArg::Running => &["running"],
            StateArg::Done => &["done"],
            StateArg::Failed => &["failed", "cancelled"],
            StateArg::Scheduled => &["scheduled"],
            StateArg::Available => &["available"],
            StateArg::Waiting => &["waiting"],
            StateArg::Retrying => &["retrying"],
            StateArg::Cancelled => &["cancelled"],
        }
    }
}

/// The stored status a display state belongs to.
fn status_of(display: &str) -> &'static str {
    match display {
        "running" => "running",
        "done" => "done",
        "failed" | "cancelled" => "failed",
        _ => "queued",
    }
}

/// The statement's parameters: the display states and the stored statuses they imply
/// (NULL for no `--state`).
fn state_params(states: &[StateArg]) -> (Option<Vec<String>>, Option<Vec<String>>) {
    if states.is_empty() {
        return (None, None);
    }
    let mut display: Vec<String> = Vec::new();
    for s in states {
        for d in s.display_states() {
            if !display.iter().any(|x| x == d) {
                display.push((*d).to_owned());
            }
        }
    }
    let mut stored: Vec<String> = Vec::new();
    for d in &display {
        let s = status_of(d);
        if !stored.iter().any(|x| x == s) {
            stored.push(s.to_owned());
        }
    }
    (Some(stored), Some(display))
}

/// A duration in microseconds, for the statement (at most 100 years: it fits).
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// One row of `jobs_list.sql`.
struct Listed {
    id: i64,
    queue: String,
    kind: String,
    payload: String,
    status: String,
    state: String,
    priority: i16,
    run_at: SystemTime,
    attempts: i32,
    max_attempts: i32,
    locked_until: Option<SystemTime>,
    last_error: Option<String>,
    created_at: SystemTime,
    finished_at: Option<SystemTime>,
    schedule: Option<String>,
    key: Option<String>,
    sequence: Option<String>,
    held: Option<String>,
    output: Option<String>,
    after: Option<Vec<i64>>,
    waiting: Option<i32>,
    has_children: Option<bool>,
    unique_key: Option<String>,
    unique_queued_only: bool,
    attempted_at: Option<SystemTime>,
    errors: Option<String>,
}

impl Listed {
    fn from_row(r: &tokio_postgres::Row) -> Result<Listed, tokio_postgres::Error> {
        Ok(Listed {
            id: r.try_get("id")?,
            queue: r.try_get("queue")?,
            kind: r.try_get("kind")?,
            payload: r.try_get("payload")?,
            status: r.try_get("status")?,
            state: r.try_get("state")?,
            priority: r.try_get("priority")?,
            run_at: r.try_get("run_at")?,
            attempts: r.try_get("attempts")?,
            max_attempts: r.try_get("max_attempts")?,
            locked_until: r.try_get("locked_until")?,
            last_error: r.try_get("last_error")?,
            created_at: r.try_get("created_at")?,
            finished_at: r.try_get("finished_at")?,
            schedule: r.try_get("schedule")?,
            key: r.try_get("key")?,
            sequence: r.try_get("sequence")?,
            held: r.try_get("held")?,
            output: r.try_get("output")?,
            after: r.try_get("after")?,
            waiting: r.try_get("waiting")?,
            has_children: r.try_get("has_children")?,
            unique_key: r.try_get("unique_key")?,
            unique_queued_only: r.try_get("unique_queued_only")?,
            attempted_at: r.try_get("attempted_at")?,
            errors: r.try_get("errors")?,
        })
    }

    /// The job with every column, as `--json` prints it: in the table's order, then the
    /// rest; payload and output as PostgreSQL returned their text (numbers exactly as
    /// stored).
    fn json(&self) -> Result<String, serde_json::Error> {
        use serde_json::value::RawValue;
        let raw = |s: &str| {
            RawValue::from_string(s.to_owned()).or_else(|_| {
                RawValue::from_string(serde_json::Value::String(s.to_owned()).to_string())
            })
        };
        let output = self.output.as_deref().map(raw).transpose()?;
        let errors = self.errors.as_deref().map(raw).transpose()?;
        let payload = raw(&self.payload)?;
        serde_json::to_string(&ListedJson {
            id: self.id,
            state: &self.state,
            status: &self.status,
            queue: &self.queue,
            kind: &self.kind,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            run_at: time(Some(self.run_at)),
            finished_at: self.finished_at.map(|t| time(Some(t))),
            attempted_at: self.attempted_at.map(|t| time(Some(t))),
            last_error: self.last_error.as_deref(),
            priority: self.priority,
            created_at: time(Some(self.created_at)),
            locked_until: self.locked_until.map(|t| time(Some(t))),
            schedule: self.schedule.as_deref(),
            key: self.key.as_deref(),
            sequence: self.sequence.as_deref(),
            held: self.held.as_deref(),
            after: self.after.as_deref().unwrap_or_default(),
            waiting: self.waiting,
            has_children: self.has_children,
            unique_key: self.unique_key.as_deref(),
            unique_queued_only: self.unique_queued_only,
            output: output.as_deref(),
            errors: errors.as_deref(),
            payload: &payload,
        })
    }

    /// The table's time: when it finished, for a finished job; else when it runs (or ran).
    fn when(&self) -> String {
        match self.finished_at {
            Some(t) if matches!(self.status.as_str(), "done" | "failed") => time(Some(t)),
            _ => time(Some(self.run_at)),
        }
    }
}

/// One job as `--json` prints it.
#[derive(serde::Serialize)]
struct ListedJson<'a> {
    id: i64,
    state: &'a str,
    status: &'a str,
    queue: &'a str,
    kind: &'a str,
    attempts: i32,
    max_attempts: i32,
    run_at: String,
    finished_at: Option<String>,
    attempted_at: Option<String>,
    last_error: Option<&'a str>,
    priority: i16,
    created_at: String,
    locked_until: Option<String>,
    schedule: Option<&'a str>,
    key: Option<&'a str>,
    sequence: Option<&'a str>,
    held: Option<&'a str>,
    after: &'a [i64],
    waiting: Option<i32>,
    has_children: Option<bool>,
    unique_key: Option<&'a str>,
    unique_queued_only: bool,
    output: Option<&'a serde_json::value::RawValue>,
    /// The last 20 failed attempts, oldest first, as stored (null for none).
    errors: Option<&'a serde_json::value::RawValue>,
    payload: &'a serde_json::value::RawValue,
}

/// `last_error` on one line, at most `width` characters (`…` when cut), or `-`.
fn short_error(e: Option<&str>, width: usize) -> String {
    let Some(e) = e else {
        return "-".to_owned();
    };
    let one: String = e
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let one = one.trim();
    if one.chars().count() > width {
        let cut: String = one.chars().take(width.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        one.to_owned()
    }
}

impl Filter {
    /// Whether no filter is given (every job would match).
    pub fn is_empty(&self) -> bool {
        let Filter {
            state,
            queue,
            kind,
            id_from,
            id_to,
            older_than,
            newer_than,
        } = self;
        state.is_empty()
            && queue.is_none()
            && kind.is_none()
            && id_from.is_none()
            && id_to.is_none()
            && older_than.is_none()
            && newer_than.is_none()
    }

    /// The statement's parameters, or the refusal of filters that cannot match together.
    pub fn params(&self) -> anyhow::Result<Params> {
        if let (Some(from), Some(to)) = (self.id_from, self.id_to) {
            if from > to {
                return Err(usage(format!(
                    "--id-from {from} is above --id-to {to}: no id lies between them"
                )));
            }
        }
        let (stored, display) = state_params(&self.state);
        Ok(Params {
            stored,
            display,
            queue: self.queue.clone(),
            kind: self.kind.clone(),
            id_from: self.id_from,
            id_to: self.id_to,
            older: self.older_than.map(micros),
            newer: self.newer_than.map(micros),
        })
    }
}

/// A [`Filter`] as the parameters `$1` to `$6`, `$8` and `$9` of `jobs_list.sql` and
/// `jobs_match.sql` (NULL for none).
#[derive(Debug, Clone)]
pub struct Params {
    stored: Option<Vec<String>>,
    display: Option<Vec<String>>,
    queue: Option<String>,
    kind: Option<String>,
    /// The lowest and highest ids: a bulk action narrows them to a window at a time.
    pub id_from: Option<i64>,
    pub id_to: Option<i64>,
    older: Option<i64>,
    newer: Option<i64>,
}

/// Runs `statement` (`JobsList` or `JobsMatch`) with the filter `p`: at most `limit` rows
/// with an id below `before`, newest first.
pub async fn select(
    client: &skiplock::Client,
    target: &Target,
    statement: Statement,
    p: &Params,
    before: Option<i64>,
    limit: i64,
) -> anyhow::Result<Vec<tokio_postgres::Row>> {
    let conn = client
        .pool()
        .get()
        .await
        .context("could not get a database connection to find jobs")?;
    conn.query_typed(
        client.statement(statement),
        &[
            (&p.stored, Type::TEXT_ARRAY),
            (&p.display, Type::TEXT_ARRAY),
            (&p.queue, Type::TEXT),
            (&p.kind, Type::TEXT),
            (&p.id_from, Type::INT8),
            (&p.id_to, Type::INT8),
            (&before, Type::INT8),
            (&p.older, Type::INT8),
            (&p.newer, Type::INT8),
            (&limit, Type::INT8),
        ],
    )
    .await
    .map_err(|e| {
        if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) {
            missing_schema(&target.schema)
        } else {
            anyhow::Error::new(e).context("could not find the matching jobs")
        }
    })
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    let params = args.filter.params()?;
    // One row more than the page: whether another page follows.
    let fetch = args.limit + 1;

    let client = target.client(1).await?;
    let rows = select(
        &client,
        target,
        Statement::JobsList,
        &params,
        args.before,
        fetch,
    )
    .await?;
    let mut jobs = rows
        .iter()
        .map(Listed::from_row)
        .collect::<Result<Vec<_>, _>>()
        .context("could not read the listed jobs")?;
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let more = jobs.len() > limit;
    jobs.truncate(limit);
    let next_before = more.then(|| jobs.last().map(|j| j.id)).flatten();

    if args.json {
        for j in &jobs {
            let line = j
                .json()
                .with_context(|| format!("could not print job {} as JSON", j.id))?;
            outln!("{line}");
        }
        if let Some(id) = next_before {
            outln!("{}", serde_json::json!({ "next_before": id }));
        }
    } else {
        print_table(&jobs);
        if jobs.is_empty() {
            errln!("no jobs match");
        }
        if let Some(id) = next_before {
            errln!("more: {}", next_command(std::env::args(), id));
        }
    }
    Ok(())
}

fn print_table(jobs: &[Listed]) {
    let header = [
        "ID",
        "STATE",
        "QUEUE",
        "KIND",
        "ATTEMPTS",
        "RUN AT/FINISHED AT",
        "LAST ERROR",
    ];
    let rows: Vec<[String; 7]> = jobs
        .iter()
        .map(|j| {
            [
                j.id.to_string(),
                j.state.clone(),
                j.queue.clone(),
                j.kind.clone(),
                format!("{}/{}", j.attempts, j.max_attempts),
                j.when(),
                short_error(j.last_error.as_deref(), ERROR_WIDTH),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 7]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i == 6 {
                s.push_str(cell);
            } else if i == 0 {
                s.push_str(&format!("{cell:>w$}  "));
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_owned()
    };
    outln!("{}", line(header));
    for r in &rows {
        outln!("{}", line(r.each_ref().map(String::as_str)));
    }
}

/// The command that shows the next page: this one with `--before ID` (the URL's password
/// hidden).
fn next_command(args: impl IntoIterator<Item = String>, before: i64) -> String {
    let mut out = vec!["skiplock".to_owned()];
    let mut args = args.into_iter().skip(1);
    while let Some(a) = args.next() {
        if a == "--before" {
            args.next();
            continue;
        }
        if a.starts_with("--before=") {
            continue;
        }
        if a == "--database-url" {
            out.push(a);
            if let Some(url) = args.next() {
                out.push(quote(&redact(&url)));
            }
            continue;
        }
        if let Some(url) = a.strip_prefix("--database-url=") {
            out.push(quote(&format!("--database-url={}", redact(url))));
            continue;
        }
        out.push(quote(&a));
    }
    out.push("--before".to_owned());
    out.push(before.to_string());
    out.join(" ")
}

/// A word as a POSIX shell reads it back.
fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_expand() {
        assert_eq!(state_params(&[]), (None, None));
        let (stored, display) = state_params(&[StateArg::Queued, StateArg::Cancelled]);
        assert_eq!(stored.unwrap(), ["queued", "failed"]);
        assert_eq!(
            display.unwrap(),
            ["scheduled", "available", "waiting", "retrying", "cancelled"]
        );
        let (stored, display) = state_params(&[StateArg::Retrying, StateArg::Retrying]);
        assert_eq!(stored.unwrap(), ["queued"]);
        assert_eq!(display.unwrap(), ["retrying"]);
    }

    #[test]
    fn errors_shorten() {
        assert_eq!(short_error(None, 10), "-");
        assert_eq!(short_error(Some("a\nb"), 10), "a b");
        assert_eq!(short_error(Some("0123456789abc"), 10), "012345678…");
    }

    #[test]
    fn next_page_command() {
        let argv = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            next_command(argv("/bin/x jobs --before 90 --state failed --limit 5"), 42),
            "skiplock jobs --state failed --limit 5 --before 42"
        );
        assert_eq!(
            next_command(
                argv("x --database-url postgres://u:pw@h/db jobs --before=7 --queue q"),
                6
            ),
            "skiplock --database-url 'postgres://u:***@h/db' jobs --queue q --before 6"
        );
        assert_eq!(
            next_command(argv("x --database-url=postgres://u:pw@h/db jobs"), 6),
            "skiplock '--database-url=postgres://u:***@h/db' jobs --before 6"
        );
    }

    #[test]
    fn words_quote() {
        assert_eq!(quote("failed,done"), "failed,done");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }
}
