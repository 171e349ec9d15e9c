//! `skiplock enqueue`: one job from the argument, or one job per JSON line of standard
//! input, enqueued in batches inside one transaction (all or nothing). With a uniqueness
//! rule (`--unique-key`, `--unique-by-args` or `--unique-fields`), each job is reported as
//! inserted or as the duplicate of an active job. `--after` makes the jobs wait for existing
//! ones; `--workflow FILE` enqueues jobs that wait for each other (see [`crate::workflow`]).

use std::io::Read as _;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use skiplock::{Enqueued, Error, JobId, NewJob, OnConflict, Unique};

use crate::connect::Target;
use crate::errors::{schema_hint, usage};
use crate::output::{out, outln, print_json};
use crate::parse::parse_duration;
use crate::workflow::{Defaults, Plan};

/// Jobs per INSERT when reading standard input.
const BATCH: usize = 5_000;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Queue.
    #[arg(long, default_value = skiplock::NewJob::DEFAULT_QUEUE)]
    queue: String,
    /// Job kind (which handler runs it).
    #[arg(long, default_value = skiplock::NewJob::DEFAULT_KIND)]
    kind: String,
    /// Priority; lower runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i16,
    /// Run no earlier than this long from now (e.g. 30s, 5m, 2h).
    #[arg(long, value_parser = parse_duration, conflicts_with = "run_at", allow_hyphen_values = true)]
    delay: Option<Duration>,
    /// Run no earlier than this time (RFC 3339, e.g. 2030-01-01T09:00:00Z).
    #[arg(long, value_parser = parse_rfc3339)]
    run_at: Option<SystemTime>,
    /// Attempts before the job is failed for good (1 to 10,000).
    #[arg(long, default_value_t = skiplock::NewJob::DEFAULT_MAX_ATTEMPTS, allow_negative_numbers = true)]
    max_attempts: i32,
    /// Print the ids as JSON (with a uniqueness rule: one line per job, saying whether it
    /// was inserted or was a duplicate, and the id).
    #[arg(long)]
    json: bool,
    /// Unique by this key (with the kind): no second active job of the kind with the key.
    #[arg(long, group = "unique_by")]
    unique_key: Option<String>,
    /// Unique by the whole payload (with the kind).
    #[arg(long, group = "unique_by")]
    unique_by_args: bool,
    /// Unique by these top-level payload fields, comma-separated (with the kind).
    #[arg(long, group = "unique_by", value_delimiter = ',')]
    unique_fields: Option<Vec<String>>,
    /// The queue is part of the uniqueness key.
    #[arg(long, requires = "unique_by")]
    unique_by_queue: bool,
    /// The uniqueness key includes this time bucket (e.g. 1h: once per hour, by the
    /// database's clock).
    #[arg(long, value_parser = parse_duration, requires = "unique_by")]
    unique_period: Option<Duration>,
    /// What a duplicate does: skip (leave the active job), replace (a queued duplicate takes
    /// this payload and run_at) or keep-run-at (it takes this payload, keeps its run_at).
    #[arg(long, value_enum, default_value = "skip", requires = "unique_by")]
    on_conflict: Conflict,
    /// A running duplicate does not block: the job queues behind it.
    #[arg(long, requires = "unique_by")]
    queue_behind_running: bool,
    /// The job's key (1 to 128 letters, digits and `_.:@/-`, e.g. a tenant id): the queue's
    /// per-key limit (`skiplock queue limit --per-key`) counts running jobs by key. With
    /// standard input, every line's job gets it.
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// The job's sequence (same characters as --key): jobs of one sequence run one at a
    /// time, in the order they were enqueued, each once the one before has finished (done,
    /// failed or cancelled); the later ones are held meanwhile. With standard input, every
    /// line's job joins it, in line order.
    #[arg(long, value_name = "KEY")]
    sequence: Option<String>,
    /// Wait for these jobs (their ids, comma-separated or repeated): the job runs once each
    /// of them is done, and fails if one of them fails for good. A job that does not exist
    /// or has already failed is refused (nothing is enqueued); one already done counts as
    /// done. With standard input, every line's job waits for them.
    #[arg(
        long,
        value_name = "ID[,ID...]",
        value_delimiter = ',',
        value_parser = parse_job_id,
        conflicts_with_all = ["unique_by", "sequence"],
    )]
    after: Vec<i64>,
    /// Enqueue a workflow: the JSON lines of FILE (`-` for standard input), one job each,
    /// all or nothing. A line takes "kind", "payload", "queue", "priority",
    /// "max_attempts", "delay" ("30s", or seconds) or "run_at" (RFC 3339), "key" (the
    /// flags give the defaults of those left out), "ref" (a name for the job, unique in the
    /// file) and "after" (an array of the refs of the jobs it waits for, or ids of jobs that
    /// exist), e.g. {"ref":"resize","kind":"resize","after":["fetch"]}. Lines may come in
    /// any order; a cycle, an unknown or duplicate ref or a bad line is refused. Prints one
    /// id per line in the file's line order (blank lines skipped); with --json, one
    /// {"line":N,"ref":…,"id":…} per job.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["payload", "unique_by", "sequence", "after"],
    )]
    workflow: Option<String>,
    /// The payload (JSON). Without it, each line of standard input is one job's payload.
    payload: Option<String>,
}

/// A job id: a positive whole number.
fn parse_job_id(s: &str) -> Result<i64, String> {
    s.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{s:?} is not a job id (a positive whole number)"))
}

/// `--on-conflict`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Conflict {
    Skip,
    Replace,
    KeepRunAt,
}

pub(crate) fn parse_rfc3339(s: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339_weak(s.trim())
        .map_err(|e| format!("{s:?} is not an RFC 3339 time ({e})"))
}

impl Args {
    fn job(&self, payload: String) -> NewJob {
        let mut job = NewJob::from_json(&self.kind, payload)
            .queue(&self.queue)
            .priority(self.priority)
            .max_attempts(self.max_attempts);
        if let Some(d) = self.delay {
            job = job.delay(d);
        }
        if let Some(t) = self.run_at {
            job = job.run_at(t);
        }
        if let Some(rule) = self.rule() {
            job = job.unique(rule);
        }
        if let Some(k) = &self.key {
            job = job.key(k);
        }
        if let Some(s) = &self.sequence {
            job = job.sequence(s);
        }
        if !self.after.is_empty() {
            job = job.after(self.after.iter().map(|i| JobId(*i)));
        }
        job
    }

    /// `key` and `sequence` as `--json` prints them (null when not given).
    fn json_fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("key".into(), self.key.clone().into());
        m.insert("sequence".into(), self.sequence.clone().into());
        m
    }

    /// The uniqueness rule the flags give, if any.
    fn rule(&self) -> Option<Unique> {
        let mut rule = if let Some(k) = &self.unique_key {
            Unique::key(k)
        } else if let Some(f) = &self.unique_fields {
            Unique::by_fields(f.iter().map(|s| s.trim()))
        } else if self.unique_by_args {
            Unique::by_args()
        } else {
            return None;
        };
        if self.unique_by_queue {
            rule = rule.by_queue();
        }
        if let Some(p) = self.unique_period {
            rule = rule.period(p);
        }
        if self.queue_behind_running {
            rule = rule.queue_behind_running();
        }
        Some(rule.on_conflict(match self.on_conflict {
            Conflict::Skip => OnConflict::Skip,
            Conflict::Replace => OnConflict::Replace,
            Conflict::KeepRunAt => OnConflict::KeepRunAt,
        }))
    }
}

/// Prints what a unique enqueue did with each job: `ID` or `ID duplicate` per line, or with
/// `--json` one object per line: `{"id": ID, "result": "inserted"|"duplicate", "key": …,
/// "sequence": …}` (the key and sequence given, or null).
fn print_enqueued(all: &[Enqueued], args: &Args) {
    let mut out = String::with_capacity(all.len() * 32);
    for e in all {
        let (id, result) = match e {
            Enqueued::Duplicate(id) => (*id, "duplicate"),
            other => (other.id(), "inserted"),
        };
        if args.json {
            let mut m = serde_json::Map::new();
            m.insert("id".into(), id.0.into());
            m.insert("result".into(), result.into());
            m.extend(args.json_fields());
            out.push_str(&serde_json::Value::Object(m).to_string());
        } else if result == "inserted" {
            out.push_str(&id.to_string());
        } else {
            out.push_str(&format!("{id} {result}"));
        }
        out.push('\n');
    }
    out!("{out}");
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    // Checked once here, not as "line 1" of standard input: they apply to every job.
    if let Some(k) = &args.key {
        skiplock::NewJob::check_key(k)?;
    }
    if let Some(s) = &args.sequence {
        skiplock::NewJob::check_sequence(s)?;
    }
    if let Some(file) = args.workflow.clone() {
        return workflow(target, &args, &file).await;
    }
    match args.payload.clone() {
        Some(payload) => {
            let job = args.job(payload);
            let client = target.client(1).await?;
            if args.rule().is_some() {
                let e = client
                    .enqueue_unique(&job)
                    .await
                    .map_err(|e| refused(e, &target.schema))?;
                print_enqueued(&[e], &args);
                return Ok(());
            }
            let id = client
                .enqueue(&job)
                .await
                .map_err(|e| refused(e, &target.schema))?;
            if args.json {
                let mut m = serde_json::Map::new();
                m.insert("id".into(), id.0.into());
                m.extend(args.json_fields());
                print_json(&serde_json::Value::Object(m));
            } else {
                outln!("{id}");
            }
            Ok(())
        }
        None => from_stdin(target, &args).await,
    }
}

async fn from_stdin(target: &Target, args: &Args) -> anyhow::Result<()> {
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .context("could not read standard input")?;
    let mut jobs = Vec::new();
    let mut lines = Vec::new();
    for (n, raw) in input.split(|b| *b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = std::str::from_utf8(raw).map_err(|_| {
            usage(format!(
                "line {} of standard input is not valid UTF-8; nothing was enqueued",
                n + 1
            ))
        })?;
        jobs.push(args.job(line.to_owned()));
        lines.push(n + 1);
    }
    if jobs.is_empty() {
        return Err(usage(
            "no payload given and standard input held no JSON lines",
        ));
    }
    let client = target.client(1).await?;
    let mut conn = client
        .pool()
        .get()
        .await
        .context("could not get a database connection to enqueue jobs")?;
    let tx = conn
        .transaction()
        .await
        .context("could not begin a transaction")?;
    let unique = args.rule().is_some();
    let mut ids = Vec::with_capacity(jobs.len());
    let mut enqueued = Vec::new();
    for (c, chunk) in jobs.chunks(BATCH).enumerate() {
        let got = if unique {
            client
                .enqueue_many_unique_tx(&tx, chunk)
                .await
                .map(|e| enqueued.extend(e))
        } else {
            client
                .enqueue_many_tx(&tx, chunk)
                .await
                .map(|got| ids.extend(got))
        };
        match got {
            Ok(()) => {}
            Err(Error::InvalidBatchItem { index, source }) => {
                return Err(usage(format!(
                    "line {}: {source}; nothing was enqueued",
                    lines[c * BATCH + index]
                )))
            }
            Err(e) => return Err(refused(e, &target.schema)),
        }
    }
    tx.commit()
        .await
        .context("could not commit the enqueued jobs")?;
    if unique {
        print_enqueued(&enqueued, args);
    } else if args.json {
        let ids: Vec<i64> = ids.iter().map(|i| i.0).collect();
        let mut m = serde_json::Map::new();
        m.insert("ids".into(), ids.into());
        m.extend(args.json_fields());
        print_json(&serde_json::Value::Object(m));
    } else {
        let mut out = String::with_capacity(ids.len() * 8);
        for id in &ids {
            out.push_str(&id.to_string());
            out.push('\n');
        }
        out!("{out}");
    }
    Ok(())
}

/// An enqueue the database refused as invalid input (SQLSTATE 22023: a job of `--after` that
/// does not exist or has failed, …): exit status 2, its message on one line. Anything else as
/// [`schema_hint`] has it.
fn refused(e: Error, schema: &str) -> anyhow::Error {
    match refusal(&e) {
        Some(msg) => usage(format!("{msg}; nothing was enqueued")),
        None => schema_hint(e, schema),
    }
}

/// The database's message, when it refused the input (SQLSTATE 22023).
fn refusal(e: &Error) -> Option<String> {
    e.as_db_error()
        .filter(|d| *d.code() == tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE)
        .map(|d| d.message().replace('\n', " "))
}

/// `--workflow FILE`: checked and sorted here, enqueued in one transaction.
async fn workflow(target: &Target, args: &Args, file: &str) -> anyhow::Result<()> {
    let text = if file == "-" {
        let mut input = Vec::new();
        std::io::stdin()
            .read_to_end(&mut input)
            .context("could not read standard input")?;
        input
    } else {
        std::fs::read(file)
            .map_err(|e| usage(format!("--workflow {file}: could not read it: {e}")))?
    };
    let defaults = Defaults {
        kind: &args.kind,
        queue: &args.queue,
        priority: args.priority,
        max_attempts: args.max_attempts,
        delay: args.delay,
        run_at: args.run_at,
        key: args.key.as_deref(),
    };
    let nothing = |msg: String| usage(format!("{msg}; nothing was enqueued"));
    let plan = Plan::parse(&text, &defaults).map_err(nothing)?;
    let (flow, index) = plan.workflow().map_err(nothing)?;
    let client = target.client(1).await?;
    let ids = match client.enqueue_workflow(&flow).await {
        Ok(ids) => ids,
        Err(Error::InvalidBatchItem { index, source }) => {
            let at = plan
                .line_of_step(index)
                .map_or_else(String::new, |n| format!("line {n}: "));
            return Err(nothing(format!("{at}{source}")));
        }
        Err(e) => {
            let Some(msg) = refusal(&e) else {
                return Err(schema_hint(e, &target.schema));
            };
            // "… job 999 does not exist" / "… job 5 has failed …": name the line that
            // waits for it.
            let line = refused_job(&msg).and_then(|id| plan.line_waiting_for(id));
            let at = line.map_or_else(String::new, |n| format!("line {n}: "));
            return Err(nothing(format!("{at}{msg}")));
        }
    };
    if ids.len() != plan.len() {
        return Err(anyhow::anyhow!(
            "enqueue_workflow returned {} ids for {} jobs",
            ids.len(),
            plan.len()
        ));
    }
    let mut out = String::with_capacity(ids.len() * 12);
    for (placed, i) in plan.placed().zip(&index) {
        let id = ids[*i];
        if args.json {
            let line = WorkflowLine {
                line: placed.number,
                reference: placed.reference,
                id: id.0,
            };
            out.push_str(&serde_json::to_string(&line).context("could not print the ids")?);
        } else {
            out.push_str(&id.to_string());
        }
        out.push('\n');
    }
    out!("{out}");
    Ok(())
}

/// `enqueue --workflow --json`: one job line's id.
#[derive(serde::Serialize)]
struct WorkflowLine<'a> {
    line: usize,
    #[serde(rename = "ref")]
    reference: Option<&'a str>,
    id: i64,
}

/// The job a refusal of `after` names: N in "… after: job N does not exist" or "… after: job
/// N has failed …".
fn refused_job(msg: &str) -> Option<i64> {
    let rest = msg.split("after: job ").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
