//! `reap`, `prune`, `retry`, `cancel`, `delete`, `show`.

use std::time::Duration;

use skiplock::{JobId, JobState, PruneOptions, Relative};

use crate::connect::Target;
use crate::errors::{schema_hint, usage};
use crate::jobs;
use crate::output::{outln, print_json, time};
use crate::parse::parse_duration;

#[derive(Debug, clap::Args)]
pub struct JsonArgs {
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// Remove jobs that finished longer ago than this.
    #[arg(long, value_parser = parse_duration,
          default_value = crate::parse::text!(crate::parse::period_text(
              PruneOptions::DEFAULT_OLDER_THAN
          )))]
    older_than: Duration,
    /// Remove failed jobs too, not only done ones.
    #[arg(long)]
    include_failed: bool,
    /// Move them to jobs_archive instead of deleting them.
    #[arg(long)]
    archive: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_long_help = crate::parse::text!(BULK_HELP.replace(
    "{batch}",
    &crate::parse::grouped(crate::bulk::BATCH.unsigned_abs())
)))]
pub struct IdsArgs {
    /// Job ids; or, instead, filters (below) that select the jobs.
    #[arg(num_args = 0.., allow_negative_numbers = true, value_name = "IDS")]
    ids: Vec<String>,
    #[command(flatten, next_help_heading = "Filters (as `skiplock jobs` takes them)")]
    filter: jobs::Filter,
    /// With filters: act without asking. Without it, the command counts the matching jobs
    /// and asks on a terminal, and refuses (exit status 2) without one.
    #[arg(long)]
    yes: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

const BULK_HELP: &str = "\
With job ids, the command acts on those jobs and prints one line per id.

With filters instead (the ones `skiplock jobs` lists by; `skiplock jobs --help` describes
the states), it acts on every job they match, not one page: it counts them and prints the
count (\"N jobs match\", on standard error), asks for confirmation on a terminal (or
proceeds with --yes; without a terminal and without --yes it is refused, exit status 2, and
nothing changes), then acts in batches of {batch} jobs, newest first, and prints how many it changed and how many it skipped, and why: the job's
status when the action does not apply to it (a running job for retry and delete, a done or
failed one for cancel), \"gone\" (deleted meanwhile) or \"unique key taken\" (a retry that
would make a second active job with its unique key). A job that comes to match after the
count with an id outside the ids counted (above the highest, below the lowest) is left
alone. Every statement reads one window of ids (a range of the primary key), so that none
reads the whole table whatever the statistics say. At least one filter is needed
(`--id-from 1` matches every job). With --json, the result is one object:
{\"matched\": N, \"retried\": N, \"skipped\": N, \"skipped_by\": {REASON: N}} (\"cancelled\" or
\"deleted\" in place of \"retried\").

Examples:
  skiplock jobs --state failed --queue emails        (look first)
  skiplock retry --state failed --queue emails --yes
  skiplock cancel --state scheduled --kind report --older-than 1d
  skiplock delete --state done,cancelled --older-than 30d --yes";

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// Job id.
    #[arg(allow_negative_numbers = true)]
    id: String,
    /// Print the job as JSON (its output as a JSON value; "parents" and the first 100
    /// "children" as {"id", "state", "kind"}, with "children_total").
    #[arg(long)]
    json: bool,
}

/// How many of a job's children `show` lists.
const SHOWN_CHILDREN: usize = 100;

#[derive(Debug, Clone, Copy)]
pub enum Action {
    Retry,
    Cancel,
    Delete,
}

pub async fn reap(target: &Target, args: JsonArgs) -> anyhow::Result<()> {
    let client = target.client(1).await?;
    let reaped = client
        .reap()
        .await
        .map_err(|e| schema_hint(e, &target.schema))?;
    let requeued = reaped
        .iter()
        .filter(|r| r.state == JobState::Queued)
        .count();
    let failed = reaped.len() - requeued;
    if args.json {
        let ids: Vec<i64> = reaped.iter().map(|r| r.id.0).collect();
        print_json(
            &serde_json::json!({ "reaped": reaped.len(), "requeued": requeued, "failed": failed, "ids": ids }),
        );
    } else {
        outln!("reaped {} job(s) with expired leases: {requeued} back to the queue, {failed} failed (no attempts left)", reaped.len());
    }
    Ok(())
}

pub async fn prune(target: &Target, args: PruneArgs) -> anyhow::Result<()> {
    let client = target.client(1).await?;
    let r = client
        .prune(
            PruneOptions::older_than(args.older_than)
                .include_failed(args.include_failed)
                .archive(args.archive),
        )
        .await
        .map_err(|e| schema_hint(e, &target.schema))?;
    if args.json {
        print_json(&serde_json::json!({
            "removed": r.removed, "batches": r.batches, "archived": r.archived, "skipped": r.skipped
        }));
    } else if r.skipped {
        outln!("another process is pruning this schema; nothing done");
    } else {
        let verb = if r.archived { "archived" } else { "deleted" };
        outln!(
            "{verb} {} finished job(s) in {} batch(es)",
            r.removed,
            r.batches
        );
    }
    Ok(())
}

fn parse_ids(raw: &[String]) -> anyhow::Result<Vec<JobId>> {
    raw.iter()
        .map(|s| {
            s.trim()
                .parse::<i64>()
                .ok()
                .filter(|n| *n > 0)
                .map(JobId)
                .ok_or_else(|| usage(format!("{s:?} is not a job id (a positive whole number)")))
        })
        .collect()
}

impl Action {
    /// The verb and its past participle: `retry`, `retried`.
    pub fn verb(self) -> (&'static str, &'static str) {
        match self {
            Action::Retry => ("retry", "retried"),
            Action::Cancel => ("cancel", "cancelled"),
            Action::Delete => ("delete", "deleted"),
        }
    }
}

pub async fn ids(target: &Target, action: Action, args: IdsArgs) -> anyhow::Result<()> {
    let (verb, _) = action.verb();
    match (args.ids.is_empty(), args.filter.is_empty()) {
        (true, true) => {
            return Err(usage(format!(
                "give job ids (<IDS>), or filters (--state, --queue, --kind, --id-from, --id-to, \
                 --older-than, --newer-than) to {verb} every job they match"
            )))
        }
        (false, false) => {
            return Err(usage(format!(
                "give job ids or filters, not both (to {verb} some of those ids, narrow the \
                 filters with --id-from and --id-to)"
            )))
        }
        (true, false) => {
            return crate::bulk::run(target, action, &args.filter, args.yes, args.json).await
        }
        (false, true) => {}
    }
    let ids = parse_ids(&args.ids)?;
    let client = target.client(1).await?;
    let r = match action {
        Action::Retry => client.retry(&ids).await,
        Action::Cancel => client.cancel(&ids).await,
        Action::Delete => client.delete(&ids).await,
    }
    .map_err(|e| schema_hint(e, &target.schema))?;
    let (verb, why) = match action {
        Action::Retry => ("retried", "running jobs are left alone"),
        Action::Cancel => ("cancelled", "only queued or running jobs can be cancelled"),
        Action::Delete => (
            "deleted",
            "running jobs cannot be deleted; cancel them first",
        ),
    };
    if args.json {
        let unchanged: Vec<serde_json::Value> = r
            .unchanged
            .iter()
            .map(|(id, s)| serde_json::json!({ "id": id.0, "status": s.map(|s| s.as_str()) }))
            .collect();
        let changed: Vec<i64> = r.changed.iter().map(|i| i.0).collect();
        print_json(&serde_json::json!({ verb: changed, "unchanged": unchanged }));
    } else {
        for id in &r.changed {
            outln!("{id}: {verb}");
        }
        for (id, state) in &r.unchanged {
            match state {
                Some(s) => outln!("{id}: unchanged ({s}; {why})"),
                None => outln!("{id}: no such job"),
            }
        }
    }
    if r.changed.is_empty() {
        return Err(anyhow::anyhow!("no job was {verb}"));
    }
    Ok(())
}

pub async fn show(target: &Target, args: ShowArgs) -> anyhow::Result<()> {
    let id = parse_ids(std::slice::from_ref(&args.id))?[0];
    let client = target.client(1).await?;
    let Some(j) = client
        .get(id)
        .await
        .map_err(|e| schema_hint(e, &target.schema))?
    else {
        return Err(anyhow::anyhow!("no job {id} in schema {}", target.schema));
    };
    let family = client
        .family(id, SHOWN_CHILDREN)
        .await
        .map_err(|e| schema_hint(e, &target.schema))?;
    // The payload as PostgreSQL returned its text: numbers exactly as stored (parsing it into
    // a JSON value would round 1.0000000000000001 and numbers past 64 bits).
    let payload = serde_json::value::RawValue::from_string(j.payload.clone())
        .unwrap_or_else(|_| raw_string(&j.payload));
    let output = j.output.as_ref().map(|o| {
        serde_json::value::RawValue::from_string(o.clone()).unwrap_or_else(|_| raw_string(o))
    });
    if args.json {
        let after: Vec<i64> = j.after.iter().map(|i| i.0).collect();
        let job = ShowJson {
            id: j.id.0,
            queue: &j.queue,
            kind: &j.kind,
            status: j.state.as_str(),
            priority: j.priority,
            attempts: j.attempts,
            max_attempts: j.max_attempts,
            run_at: time(Some(j.run_at)),
            created_at: time(Some(j.created_at)),
            locked_until: j.locked_until.map(|t| time(Some(t))),
            finished_at: j.finished_at.map(|t| time(Some(t))),
            attempted_at: j.attempted_at.map(|t| time(Some(t))),
            last_error: j.last_error.as_deref(),
            errors: j.errors.iter().map(error_json).collect(),
            schedule: j.schedule.as_deref(),
            key: j.key.as_deref(),
            sequence: j.sequence.as_deref(),
            held: j.held.as_deref(),
            after,
            waiting: j.waiting,
            has_children: j.has_children,
            unique_key: j.unique_key.as_deref(),
            unique_queued_only: j.unique_queued_only,
            parents: family.parents.iter().map(RelativeJson::from).collect(),
            children: family.children.iter().map(RelativeJson::from).collect(),
            children_total: family.children_total,
            output: output.as_deref(),
            payload: &payload,
        };
        match serde_json::to_string(&job) {
            Ok(line) => outln!("{line}"),
            Err(e) => return Err(anyhow::anyhow!("could not print job {id} as JSON: {e}")),
        }
    } else {
        outln!("id           {}", j.id);
        outln!("queue        {}", j.queue);
        outln!("kind         {}", j.kind);
        outln!("status       {}", j.state);
        outln!("priority     {}", j.priority);
        outln!("attempts     {} of {}", j.attempts, j.max_attempts);
        outln!("run_at       {}", time(Some(j.run_at)));
        outln!("created_at   {}", time(Some(j.created_at)));
        outln!("locked_until {}", time(j.locked_until));
        outln!("finished_at  {}", time(j.finished_at));
        outln!("attempted_at {}", time(j.attempted_at));
        outln!("last_error   {}", j.last_error.as_deref().unwrap_or("-"));
        print_errors(&j.errors);
        outln!("schedule     {}", j.schedule.as_deref().unwrap_or("-"));
        outln!("key          {}", j.key.as_deref().unwrap_or("-"));
        match (&j.sequence, &j.held) {
            (Some(s), Some(h)) if h == "sequence" => {
                outln!("sequence     {s} (held: waiting for its turn)")
            }
            (Some(s), _) => outln!("sequence     {s}"),
            (None, _) => outln!("sequence     -"),
        }
        outln!("held         {}", held_text(&j));
        if j.after.is_empty() {
            outln!("after        -");
        } else {
            let ids: Vec<String> = j.after.iter().map(ToString::to_string).collect();
            outln!("after        {}", ids.join(", "));
        }
        match j.waiting {
            Some(n) => outln!("waiting      {n} of them not done yet"),
            None => outln!("waiting      -"),
        }
        // unique_queued_only shows as "(queued only)": the key binds queued jobs only, and
        // the claim released it when the job started.
        match (&j.unique_key, j.unique_queued_only) {
            (Some(k), true) => outln!("unique_key   {k} (queued only)"),
            (Some(k), false) => outln!("unique_key   {k}"),
            (None, true) => outln!("unique_key   - (queued only: released when it started)"),
            (None, false) => outln!("unique_key   -"),
        }
        outln!(
            "has_children {}",
            j.has_children.map_or("-".to_owned(), |b| b.to_string())
        );
        print_relatives("parents", &family.parents, 0);
        let more = usize::try_from(family.children_total)
            .unwrap_or(0)
            .saturating_sub(family.children.len());
        print_relatives("children", &family.children, more);
        match &output {
            Some(o) => outln!("output       {}", o.get()),
            None => outln!("output       -"),
        }
        outln!("payload      {}", payload.get());
    }
    Ok(())
}

/// The `held` line of `show`: why a queued job is not ready.
fn held_text(j: &skiplock::JobRow) -> String {
    match (j.held.as_deref(), j.state) {
        (None, _) => "-".to_owned(),
        (Some("after"), JobState::Failed) => {
            "after (a job it waited for failed; see last_error)".to_owned()
        }
        (Some("after"), _) => match j.waiting {
            Some(n) => format!("after (waiting: {n} of {} not done yet)", j.after.len()),
            None => "after".to_owned(),
        },
        (Some("sequence"), _) => "sequence (waiting for its turn)".to_owned(),
        (Some(other), _) => other.to_owned(),
    }
}

/// One line per parent or child, `ID STATE KIND`, then "… and N more".
fn print_relatives(label: &str, list: &[Relative], more: usize) {
    if list.is_empty() {
        outln!("{label:<12} -");
        return;
    }
    for (n, r) in list.iter().enumerate() {
        let head = if n == 0 { label } else { "" };
        let state = r.state.map_or("deleted", JobState::as_str);
        outln!(
            "{head:<12} {} {state} {}",
            r.id,
            r.kind.as_deref().unwrap_or("-")
        );
    }
    if more > 0 {
        outln!("{:<12} … and {more} more", "");
    }
}

/// A parent or child in `show --json`.
#[derive(serde::Serialize)]
struct RelativeJson<'a> {
    id: i64,
    /// Null for a job deleted since.
    state: Option<&'static str>,
    kind: Option<&'a str>,
}

impl<'a> From<&'a Relative> for RelativeJson<'a> {
    fn from(r: &'a Relative) -> Self {
        RelativeJson {
            id: r.id.0,
            state: r.state.map(JobState::as_str),
            kind: r.kind.as_deref(),
        }
    }
}

/// `skiplock show --json`: the job, its payload and output as stored.
#[derive(serde::Serialize)]
struct ShowJson<'a> {
    id: i64,
    queue: &'a str,
    kind: &'a str,
    status: &'a str,
    priority: i16,
    attempts: i32,
    max_attempts: i32,
    run_at: String,
    created_at: String,
    locked_until: Option<String>,
    finished_at: Option<String>,
    attempted_at: Option<String>,
    last_error: Option<&'a str>,
    /// The last 20 failed attempts, oldest first.
    errors: Vec<serde_json::Value>,
    schedule: Option<&'a str>,
    key: Option<&'a str>,
    sequence: Option<&'a str>,
    held: Option<&'a str>,
    /// The jobs it waits for (empty for none).
    after: Vec<i64>,
    /// How many of them are not done yet (null for a job that waits for none).
    waiting: Option<i32>,
    /// True once another job waits for it (null or false otherwise).
    has_children: Option<bool>,
    /// Its uniqueness key (null for a job enqueued without a rule).
    unique_key: Option<&'a str>,
    /// The rule lets a new job queue behind a running duplicate.
    unique_queued_only: bool,
    parents: Vec<RelativeJson<'a>>,
    /// The first [`SHOWN_CHILDREN`].
    children: Vec<RelativeJson<'a>>,
    children_total: i64,
    output: Option<&'a serde_json::value::RawValue>,
    payload: &'a serde_json::value::RawValue,
}

/// A text that is not JSON, as a JSON string (never expected: PostgreSQL returns its jsonb
/// as JSON text).
fn raw_string(text: &str) -> Box<serde_json::value::RawValue> {
    let quoted = serde_json::Value::String(text.to_owned()).to_string();
    serde_json::value::RawValue::from_string(quoted)
        .unwrap_or_else(|_| Box::<serde_json::value::RawValue>::default())
}

/// The `errors` lines of `show`: the last failed attempts, oldest first.
fn print_errors(errors: &[skiplock::AttemptError]) {
    if errors.is_empty() {
        outln!("errors       -");
    }
    for (n, e) in errors.iter().enumerate() {
        let head = if n == 0 { "errors" } else { "" };
        let ran = e.ran_ms.map_or("-".to_owned(), |ms| format!("{ms} ms"));
        outln!(
            "{head:<12} #{} {} ran {ran}: {}",
            e.attempt,
            time(Some(e.at)),
            e.error.as_deref().unwrap_or("-")
        );
    }
}

/// One failed attempt in `show --json`.
fn error_json(e: &skiplock::AttemptError) -> serde_json::Value {
    serde_json::json!({
        "attempt": e.attempt, "at": time(Some(e.at)), "error": e.error, "ran_ms": e.ran_ms,
    })
}
