//! `skiplock schedule add|list|remove|pause|resume|run-now`: periodic jobs for workers in
//! any language. Every running worker fires the schedules (each fire once, whichever
//! worker gets there first).

use skiplock::{Missed, Schedule};

use crate::connect::Target;
use crate::errors::schema_hint;
use crate::output::{outln, print_json, time};

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Add a schedule, or update the one of that name (a new cron or zone starts it over).
    ///
    /// A new schedule fires from now on: nothing before it is backfilled. An update that
    /// changes the cron expression or time zone starts over the same way: it fires from now
    /// on under the new timing, and no fire before the change is made up. An update of
    /// anything else (payload, queue, kind, priority, attempts, missed policy) keeps the
    /// schedule's progress, so fires already due still run as its policy says. An update
    /// keeps the paused state.
    Add(AddArgs),
    /// List the schedules with their last and next fire times.
    List(JsonArg),
    /// Remove a schedule (the jobs it enqueued stay).
    Remove(NameArg),
    /// Pause a schedule: it does not fire until resumed.
    Pause(NameArg),
    /// Resume a paused schedule; fires it would have had while paused are not made up.
    Resume(NameArg),
    /// Enqueue one job from a schedule now, without changing when it fires next.
    RunNow(NameArg),
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The schedule's name (1 to 128 letters, digits, '_', '.' or '-').
    name: String,
    /// Cron expression: 5 fields (minute hour day-of-month month day-of-week), or 6 with
    /// seconds first, e.g. "*/5 * * * *" or "0 30 2 * * MON-FRI". Nicknames such as
    /// @hourly and @daily work too.
    #[arg(long)]
    cron: String,
    /// The IANA time zone the expression is read in, e.g. Europe/Berlin.
    #[arg(long = "tz", default_value = skiplock::periodic::DEFAULT_TIME_ZONE)]
    time_zone: String,
    /// Queue of each fire's job.
    #[arg(long, default_value = skiplock::NewJob::DEFAULT_QUEUE)]
    queue: String,
    /// Kind of each fire's job (which handler runs it).
    #[arg(long, default_value = skiplock::NewJob::DEFAULT_KIND)]
    kind: String,
    #[arg(long, value_name = "skip|latest|catch-up=N", value_parser = parse_missed,
          default_value_t = Missed::default(),
          help = crate::parse::text!(format!(
              "Fires missed while no worker ran (older than the workers' grace period, {} by \
               default): skip them, run the latest once, or run the most recent N \
               (catch-up=N, N at most {})",
              crate::parse::period_text(skiplock::periodic::SchedulerConfig::DEFAULT_GRACE),
              skiplock::periodic::MAX_CATCH_UP
          )))]
    missed: Missed,
    /// Priority of each fire's job; lower runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i16,
    /// Attempts of each fire's job before it is failed for good (1 to 10,000).
    #[arg(long, default_value_t = skiplock::NewJob::DEFAULT_MAX_ATTEMPTS, allow_negative_numbers = true)]
    max_attempts: i32,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Each fire's payload (JSON; default {}).
    payload: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct NameArg {
    /// The schedule's name.
    name: String,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct JsonArg {
    /// Print the schedules as JSON, one array.
    #[arg(long)]
    json: bool,
}

fn parse_missed(s: &str) -> Result<Missed, String> {
    s.parse::<Missed>().map_err(|e| e.to_string())
}

pub async fn run(target: &Target, action: Action) -> anyhow::Result<()> {
    let client = target.client(1).await?;
    let hint = |e| schema_hint(e, &target.schema);
    match action {
        Action::Add(a) => {
            let mut s = Schedule::new(&a.name, &a.cron, &a.kind)
                .queue(&a.queue)
                .time_zone(&a.time_zone)
                .missed(a.missed)
                .priority(a.priority)
                .max_attempts(a.max_attempts);
            if let Some(p) = a.payload {
                s = s.payload_json(p);
            }
            let change = client.add_schedule(&s).await.map_err(hint)?;
            use skiplock::periodic::ScheduleChange;
            let (word, text) = match change {
                ScheduleChange::Added => ("added", "added"),
                ScheduleChange::Updated => ("updated", "updated (its progress kept)"),
                ScheduleChange::Retimed => (
                    "retimed",
                    "updated with a new timing (it fires from now on; nothing before the \
                     change is made up)",
                ),
                ScheduleChange::Unchanged => ("unchanged", "unchanged"),
            };
            if a.json {
                print_json(&serde_json::json!({ "name": a.name, "result": word }));
            } else {
                outln!("schedule {}: {text}", a.name);
            }
        }
        Action::List(a) => {
            let all = client.schedules().await.map_err(hint)?;
            if a.json {
                let v: Vec<serde_json::Value> = all
                    .iter()
                    .map(|s| {
                        let payload: serde_json::Value = serde_json::from_str(&s.payload)
                            .unwrap_or(serde_json::Value::String(s.payload.clone()));
                        serde_json::json!({
                            "name": s.name, "cron": s.cron, "time_zone": s.time_zone,
                            "queue": s.queue, "kind": s.kind, "payload": payload,
                            "priority": s.priority, "max_attempts": s.max_attempts,
                            "missed": s.missed.to_string(), "paused": s.paused,
                            "last_fire_at": time(Some(s.last_fire_at)),
                            "next_fire_at": s.next_fire_at.map(|t| time(Some(t))),
                        })
                    })
                    .collect();
                print_json(&serde_json::Value::Array(v));
            } else if all.is_empty() {
                outln!("no schedules");
            } else {
                outln!(
                    "{:<24} {:<20} {:<16} {:<12} {:<16} {:<10} {:<7} {:<20} NEXT FIRE",
                    "NAME",
                    "CRON",
                    "TIME ZONE",
                    "QUEUE",
                    "KIND",
                    "MISSED",
                    "STATE",
                    "LAST FIRE"
                );
                for s in &all {
                    outln!(
                        "{:<24} {:<20} {:<16} {:<12} {:<16} {:<10} {:<7} {:<20} {}",
                        s.name,
                        s.cron,
                        s.time_zone,
                        s.queue,
                        s.kind,
                        s.missed.to_string(),
                        if s.paused { "paused" } else { "active" },
                        time(Some(s.last_fire_at)),
                        time(s.next_fire_at)
                    );
                }
            }
        }
        Action::Remove(a) => {
            let found = client.remove_schedule(&a.name).await.map_err(hint)?;
            done(&a, found, "removed")?;
        }
        Action::Pause(a) => {
            let found = client.pause_schedule(&a.name).await.map_err(hint)?;
            done(&a, found, "paused")?;
        }
        Action::Resume(a) => {
            let found = client.resume_schedule(&a.name).await.map_err(hint)?;
            done(&a, found, "resumed")?;
        }
        Action::RunNow(a) => {
            let id = client.run_schedule_now(&a.name).await.map_err(hint)?;
            let Some(id) = id else {
                return Err(no_such(&a.name));
            };
            if a.json {
                print_json(&serde_json::json!({ "name": a.name, "id": id.0 }));
            } else {
                outln!("{id}");
            }
        }
    }
    Ok(())
}

fn done(a: &NameArg, found: bool, verb: &str) -> anyhow::Result<()> {
    if !found {
        return Err(no_such(&a.name));
    }
    if a.json {
        print_json(&serde_json::json!({ "name": a.name, "result": verb }));
    } else {
        outln!("schedule {}: {verb}", a.name);
    }
    Ok(())
}

fn no_such(name: &str) -> anyhow::Error {
    anyhow::anyhow!("no schedule named {name:?}")
}
