//! `skiplock queue list|pause|resume|limit`: a queue's pause and its limits (concurrency,
//! per key, rate), which hold for every worker of that queue on the database and schema, in
//! every process.

use std::time::Duration;

use skiplock::{QueueLimits, QueueState};

use crate::connect::{redact, Target};
use crate::errors::{schema_hint, usage};
use crate::output::{errln, outln, print_json, time};
use crate::parse::{limit_or_off, period_text, rate_or_off, text};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Every queue: paused or not (since when, by whom); its queued, ready, held and running
    /// jobs; its limits, and running against its concurrency limit (`7/5!` when more run
    /// than a lowered limit allows); and `bound`: why its last claim left ready jobs behind
    /// (`slots`: a full concurrency or per-key limit; `rate`: a full rate window).
    List {
        /// Print the queues as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Pause a queue for EVERY worker of it on this database and schema, in every process
    /// and deployment (not only one): none claims from it until it is resumed. Running jobs
    /// finish; new jobs wait. Workers started meanwhile stay paused. A queue that no job
    /// names and that was never paused is refused (most often a typo) unless
    /// --create is given.
    Pause {
        /// The queue.
        name: String,
        /// Pause the queue even if no job names it and it was never paused
        /// (to pause a queue before its first job arrives).
        #[arg(long)]
        create: bool,
        /// Who pauses it, and why, recorded for whoever finds it paused (default: the user
        /// and host running this command).
        #[arg(long)]
        by: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Resume a paused queue: its workers claim from it again (listening ones at once).
    Resume {
        /// The queue.
        name: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Set a queue's limits for EVERY worker of it on this database and schema, in every
    /// process: at most N of its jobs running at once (--concurrency), at most N per job
    /// key (--per-key, see `enqueue --key`), at most N starts in any interval of a period
    /// (--rate N/DURATION, a sliding window). An option not given keeps its value; `off`
    /// lifts that limit. Any valid queue name, with jobs yet or not. Lowering a limit stops
    /// no running job: none starts until fewer run. Without an option, prints the limits.
    #[command(group(clap::ArgGroup::new("change").multiple(true)))]
    Limit {
        /// The queue.
        name: String,
        #[arg(long, value_name = "N|off", value_parser = parse_limit, group = "change",
              allow_negative_numbers = true,
              help = text!(format!(
                  "At most N jobs of the queue running at once (1 to {}), or off",
                  skiplock::QueueLimits::MAX_LIMIT
              )))]
        concurrency: Option<Limit>,
        #[arg(long, value_name = "N|off", value_parser = parse_limit, group = "change",
              allow_negative_numbers = true,
              help = text!(format!(
                  "At most N running jobs of one key (1 to {}), or off. Jobs without a key \
                   are not subject to it",
                  skiplock::QueueLimits::MAX_LIMIT
              )))]
        per_key: Option<Limit>,
        #[arg(long, value_name = "N/DURATION|off", value_parser = parse_rate, group = "change",
              allow_hyphen_values = true,
              help = text!(format!(
                  "At most N starts in any interval of DURATION (N 1 to {}, DURATION {} to \
                   {}: 100/1s, 5/250ms, 1000/1h), or off",
                  skiplock::QueueLimits::MAX_LIMIT,
                  period_text(skiplock::QueueLimits::MIN_RATE_PERIOD),
                  period_text(skiplock::QueueLimits::MAX_RATE_PERIOD)
              )))]
        rate: Option<RateArg>,
        /// Who sets them, and why, recorded for operators (default: the user and host
        /// running this command).
        #[arg(long, requires = "change")]
        by: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `--concurrency` or `--per-key`: a limit, or `None` for `off`.
#[derive(Debug, Clone, Copy)]
pub struct Limit(Option<u32>);

fn parse_limit(s: &str) -> Result<Limit, String> {
    limit_or_off(s).map(Limit)
}

/// `--rate`: starts per period, or `None` for `off`.
#[derive(Debug, Clone, Copy)]
pub struct RateArg(Option<(u32, Duration)>);

fn parse_rate(s: &str) -> Result<RateArg, String> {
    rate_or_off(s).map(RateArg)
}

/// A rate as `--rate` takes it: `100/1s`.
pub fn rate_text(r: &skiplock::Rate) -> String {
    format!("{}/{}", r.limit, period_text(r.period))
}

/// The limits in a sentence: `concurrency 5, per key off, rate 100/1s`, or `no limits`.
fn limits_text(l: &QueueLimits) -> String {
    if !l.is_limited() {
        return "no limits".to_owned();
    }
    let n = |v: Option<u32>| v.map_or_else(|| "off".to_owned(), |v| v.to_string());
    format!(
        "concurrency {}, per key {}, rate {}",
        n(l.concurrency),
        n(l.per_key),
        l.rate.as_ref().map_or_else(|| "off".to_owned(), rate_text)
    )
}

/// The limits in a column: `max 5, 2/key, 100/1s`, or `-`.
pub fn limits_short(l: &QueueLimits) -> String {
    let mut parts = Vec::new();
    if let Some(c) = l.concurrency {
        parts.push(format!("max {c}"));
    }
    if let Some(k) = l.per_key {
        parts.push(format!("{k}/key"));
    }
    if let Some(r) = &l.rate {
        parts.push(rate_text(r));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(", ")
    }
}

/// The limits as JSON fields: `concurrency`, `per_key` (numbers or null), `rate` (`"100/1s"`
/// or null), `rate_limit` and `rate_period_s` (its parts, or null).
pub fn limits_json(l: &QueueLimits) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("concurrency".into(), l.concurrency.into());
    m.insert("per_key".into(), l.per_key.into());
    m.insert("rate".into(), l.rate.as_ref().map(rate_text).into());
    m.insert("rate_limit".into(), l.rate.map(|r| r.limit).into());
    m.insert(
        "rate_period_s".into(),
        l.rate.map(|r| r.period.as_secs_f64()).into(),
    );
    m
}

/// Whether more of the queue's jobs run than its concurrency limit allows (it was lowered
/// while they ran).
pub fn over_limit(q: &QueueState) -> bool {
    q.limits
        .concurrency
        .is_some_and(|c| q.running > i64::from(c))
}

/// Running against the concurrency limit: `3`, `3/5`, or `7/5!` when above it.
fn running_text(q: &QueueState) -> String {
    match q.limits.concurrency {
        None => q.running.to_string(),
        Some(c) if over_limit(q) => format!("{}/{c}!", q.running),
        Some(c) => format!("{}/{c}", q.running),
    }
}

/// One queue as `queue list --json` prints it.
fn queue_json(q: &QueueState) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("queue".into(), q.queue.clone().into());
    m.insert("paused".into(), q.paused.into());
    m.insert(
        "paused_at".into(),
        q.paused_at.map(|t| time(Some(t))).into(),
    );
    m.insert("paused_by".into(), q.paused_by.clone().into());
    m.insert("queued".into(), q.queued.into());
    m.insert("ready".into(), q.ready.into());
    m.insert("held".into(), q.held.into());
    m.insert("running".into(), q.running.into());
    m.extend(limits_json(&q.limits));
    m.insert("over_limit".into(), over_limit(q).into());
    m.insert("bound".into(), q.bound.clone().into());
    m.insert("limits_by".into(), q.limits_by.clone().into());
    serde_json::Value::Object(m)
}

/// The note for a queue that runs more jobs than its lowered concurrency limit allows.
fn over_limit_note(q: &QueueState) -> Option<String> {
    let c = q.limits.concurrency.filter(|_| over_limit(q))?;
    Some(format!(
        "{} jobs run, above its concurrency limit of {c} (lowered while they ran); no job \
         starts until the running ones are below it",
        q.running
    ))
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    let client = target.client(1).await?;
    let hint = |e| schema_hint(e, &target.schema);
    match args.action {
        Action::List { json } => {
            let queues = client.queues().await.map_err(hint)?;
            if json {
                let list: Vec<serde_json::Value> = queues.iter().map(queue_json).collect();
                print_json(&serde_json::json!({ "schema": target.schema, "queues": list }));
                return Ok(());
            }
            outln!("schema {}", target.schema);
            outln!(
                "{:<24} {:<7} {:>9} {:>9} {:>9} {:>11}  {:<24} {:<6} {:<20} BY",
                "QUEUE",
                "STATE",
                "QUEUED",
                "READY",
                "HELD",
                "RUNNING",
                "LIMITS",
                "BOUND",
                "PAUSED SINCE"
            );
            if queues.is_empty() {
                outln!("(no queue has jobs or was ever paused or limited)");
            }
            for q in &queues {
                outln!(
                    "{:<24} {:<7} {:>9} {:>9} {:>9} {:>11}  {:<24} {:<6} {:<20} {}",
                    q.queue,
                    if q.paused { "paused" } else { "active" },
                    q.queued,
                    q.ready,
                    q.held,
                    running_text(q),
                    limits_short(&q.limits),
                    q.bound.as_deref().unwrap_or("-"),
                    time(q.paused_at),
                    q.paused_by.as_deref().unwrap_or("-")
                );
            }
            for q in &queues {
                if let Some(note) = over_limit_note(q) {
                    outln!("note: queue {}: {note}", q.queue);
                }
            }
            Ok(())
        }
        Action::Pause {
            name,
            by,
            create,
            json,
        } => {
            if !create && !client.queue_known(&name).await.map_err(hint)? {
                return Err(usage(format!(
                    "queue {name} is unknown: no job names it and it was \
                     never paused; check the name (`skiplock queue list`), or pass --create to \
                     pause it before its first job"
                )));
            }
            let by = by.unwrap_or_else(|| default_by("pause"));
            let p = client.pause_queue(&name, Some(&by)).await.map_err(hint)?;
            let state = client
                .queues()
                .await
                .map_err(hint)?
                .into_iter()
                .find(|q| q.queue == name);
            let (queued, running) = state.map_or((0, 0), |q| (q.queued, q.running));
            if json {
                print_json(&serde_json::json!({
                    "schema": target.schema, "queue": p.queue, "paused": p.paused,
                    "changed": p.changed, "paused_at": p.paused_at.map(|t| time(Some(t))),
                    "paused_by": p.paused_by, "queued": queued, "running": running,
                    "scope": "every worker of this queue on this database and schema",
                }));
                return Ok(());
            }
            let db = redact(&target.url().await?);
            if p.changed {
                outln!("queue {name} is now PAUSED (by {by})");
            } else {
                outln!(
                    "queue {name} was already paused, since {} by {}; nothing changed",
                    time(p.paused_at),
                    p.paused_by.as_deref().unwrap_or("-")
                );
            }
            outln!(
                "This pause applies to EVERY worker of queue {name} on database {db}, schema {}: \
                 all processes and deployments that use this schema, not only one. None of them \
                 claims from it, and workers started now stay paused, until someone runs:\n  \
                 skiplock queue resume {name}",
                target.schema
            );
            outln!("{running} running jobs of it finish; {queued} queued jobs wait.");
            Ok(())
        }
        Action::Resume { name, json } => {
            let r = client.resume_queue(&name).await.map_err(hint)?;
            if json {
                print_json(&serde_json::json!({
                    "schema": target.schema, "queue": r.queue, "paused": r.paused,
                    "changed": r.changed,
                }));
                return Ok(());
            }
            if r.changed {
                outln!(
                    "queue {name} resumed on schema {}: its workers claim from it again \
                     (listening ones at once, the others at their next poll)",
                    target.schema
                );
            } else {
                outln!("queue {name} was not paused; nothing changed");
            }
            Ok(())
        }
        Action::Limit {
            name,
            concurrency,
            per_key,
            rate,
            by,
            json,
        } => {
            skiplock::NewJob::check_queue(&name)?;
            let asked = concurrency.is_some() || per_key.is_some() || rate.is_some();
            let mut change = false;
            if asked {
                // Read, merge, write: the options not given keep their value. Limits that
                // are already in force are not written again (a typo's `off` creates no row).
                let old = client.queue_limits(&name).await.map_err(hint)?;
                let mut limits = old;
                if let Some(Limit(c)) = concurrency {
                    limits.concurrency = c;
                }
                if let Some(Limit(k)) = per_key {
                    limits.per_key = k;
                }
                if let Some(RateArg(r)) = rate {
                    limits.rate = None;
                    if let Some((n, period)) = r {
                        limits = limits.rate(n, period);
                    }
                }
                change = limits != old;
                if change {
                    let by = by.unwrap_or_else(|| default_by("limit"));
                    client
                        .set_queue_limits(&name, limits, Some(&by))
                        .await
                        .map_err(hint)?;
                }
            }
            let state = client
                .queues()
                .await
                .map_err(hint)?
                .into_iter()
                .find(|q| q.queue == name);
            let limits = state.as_ref().map(|q| q.limits).unwrap_or_default();
            if json {
                let mut m = match state.as_ref().map(queue_json) {
                    Some(serde_json::Value::Object(m)) => m,
                    _ => {
                        let mut m = serde_json::Map::new();
                        m.insert("queue".into(), name.clone().into());
                        m.extend(limits_json(&limits));
                        m
                    }
                };
                m.insert("schema".into(), target.schema.clone().into());
                m.insert("changed".into(), change.into());
                print_json(&serde_json::Value::Object(m));
                return Ok(());
            }
            let text = limits_text(&limits);
            if asked && !change {
                outln!("queue {name} already has {text}; nothing changed");
                return Ok(());
            }
            if !change {
                let by = state
                    .as_ref()
                    .and_then(|q| q.limits_by.as_deref())
                    .filter(|_| limits.is_limited())
                    .map(|b| format!(" (set by {b})"))
                    .unwrap_or_default();
                outln!("queue {name}: {text}{by}");
                return Ok(());
            }
            let over = state
                .as_ref()
                .and_then(over_limit_note)
                .map(|n| format!("; {n}"))
                .unwrap_or_default();
            outln!(
                "queue {name} now has {text}, for every worker of it on schema {}{over}",
                target.schema
            );
            Ok(())
        }
    }
}

/// Who runs this command: the user and the host, as far as the environment tells.
fn default_by(command: &str) -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown user".to_owned());
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown host".to_owned());
    format!("{user} on {host} (skiplock queue {command})")
}

/// Says on standard error which of `queues` are paused, with the jobs that wait for the
/// resume: a draining worker claims nothing from a paused queue, and its "0 claimed" must not
/// read as an empty queue. A failure to read the pauses is said too, never fatal.
pub async fn say_paused(client: &skiplock::Client, queues: &[String]) {
    // One probe of the `queues` row each first: the listing counts every queued and running
    // job of the schema, which a drain that just ended would walk in its indexes.
    let mut any = false;
    for q in queues {
        match client.queue_paused(q).await {
            Ok(paused) => any |= paused,
            Err(e) => {
                errln!("warning: could not read which queues are paused: {e}");
                return;
            }
        }
    }
    if !any {
        return;
    }
    let states = match client.queues().await {
        Ok(s) => s,
        Err(e) => {
            errln!("warning: could not read which queues are paused: {e}");
            return;
        }
    };
    for q in states
        .iter()
        .filter(|q| q.paused && queues.contains(&q.queue))
    {
        errln!(
            "queue {} is PAUSED (since {} by {}): no worker claims from it; its {} queued \
             job(s) wait for `skiplock queue resume {}`",
            q.queue,
            time(q.paused_at),
            q.paused_by.as_deref().unwrap_or("-"),
            q.queued,
            q.queue
        );
    }
}
