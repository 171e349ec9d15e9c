//! `skiplock queue list|pause|resume`: a queue's pause, which holds for every worker of
//! that queue on the database and schema, in every process.

use crate::connect::{redact, Target};
use crate::errors::{schema_hint, usage};
use crate::output::{errln, outln, print_json, time};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Every queue: paused or not (since when, by whom), and its queued, ready and running
    /// jobs.
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
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    let client = target.client(1).await?;
    let hint = |e| schema_hint(e, &target.schema);
    match args.action {
        Action::List { json } => {
            let queues = client.queues().await.map_err(hint)?;
            if json {
                let list: Vec<serde_json::Value> = queues
                    .iter()
                    .map(|q| {
                        serde_json::json!({
                            "queue": q.queue, "paused": q.paused,
                            "paused_at": q.paused_at.map(|t| time(Some(t))),
                            "paused_by": q.paused_by,
                            "queued": q.queued, "ready": q.ready, "running": q.running,
                        })
                    })
                    .collect();
                print_json(&serde_json::json!({ "schema": target.schema, "queues": list }));
                return Ok(());
            }
            outln!("schema {}", target.schema);
            outln!(
                "{:<24} {:<7} {:>9} {:>9} {:>9}  {:<20} by",
                "queue",
                "state",
                "queued",
                "ready",
                "running",
                "paused since"
            );
            if queues.is_empty() {
                outln!("(no queue has jobs or was ever paused)");
            }
            for q in &queues {
                outln!(
                    "{:<24} {:<7} {:>9} {:>9} {:>9}  {:<20} {}",
                    q.queue,
                    if q.paused { "paused" } else { "active" },
                    q.queued,
                    q.ready,
                    q.running,
                    time(q.paused_at),
                    q.paused_by.as_deref().unwrap_or("-")
                );
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
            let by = by.unwrap_or_else(default_by);
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
    }
}

/// Who runs this command: the user and the host, as far as the environment tells.
fn default_by() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown user".to_owned());
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown host".to_owned());
    format!("{user} on {host} (skiplock queue pause)")
}

/// Says on standard error which of `queues` are paused, with the jobs that wait for the
/// resume: a draining worker claims nothing from a paused queue, and its "0 claimed" must not
/// read as an empty queue. A failure to read the pauses is said too, never fatal.
pub async fn say_paused(client: &skiplock::Client, queues: &[String]) {
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
