//! `workers`: the workers registered on the schema, with their states.

use std::time::SystemTime;

use skiplock::WorkerRow;

use crate::connect::Target;
use crate::errors::schema_hint;
use crate::output::{outln, print_json, time};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the workers as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    let client = target.client(1).await?;
    let workers = client
        .workers()
        .await
        .map_err(|e| schema_hint(e, &target.schema))?;
    if args.json {
        let list: Vec<serde_json::Value> = workers.iter().map(worker_json).collect();
        print_json(&serde_json::json!({ "schema": target.schema, "workers": list }));
        return Ok(());
    }
    outln!("schema {}", target.schema);
    outln!(
        "{:>6} {:<8} {:<24} {:>8} {:>7} {:>5} {:<9} {:<20} {:<20} queues",
        "id",
        "state",
        "host",
        "pid",
        "running",
        "slots",
        "last seen",
        "started",
        "stopped"
    );
    if workers.is_empty() {
        outln!("(no worker registered in the last day)");
    }
    let now = SystemTime::now();
    for w in &workers {
        let queues: Vec<String> = w.queues.iter().map(|(q, n)| format!("{q}={n}")).collect();
        outln!(
            "{:>6} {:<8} {:<24} {:>8} {:>7} {:>5} {:<9} {:<20} {:<20} {}",
            w.id,
            w.state,
            w.host,
            w.pid,
            w.running,
            w.concurrency,
            ago(now, w.last_seen),
            time(Some(w.started_at)),
            time(w.stopped_at),
            queues.join(",")
        );
    }
    if workers.iter().any(|w| w.poll_off) {
        outln!(
            "note: a worker with its poll off writes nothing while idle: it shows sleeping, \
             not gone, while silent"
        );
    }
    Ok(())
}

/// How long ago, by this machine's clock: "3s ago", "5m ago", "2h ago".
fn ago(now: SystemTime, t: SystemTime) -> String {
    let s = now.duration_since(t).map_or(0, |d| d.as_secs());
    match s {
        0..=119 => format!("{s}s ago"),
        120..=7199 => format!("{}m ago", s / 60),
        _ => format!("{}h ago", s / 3600),
    }
}

fn worker_json(w: &WorkerRow) -> serde_json::Value {
    let queues: serde_json::Map<String, serde_json::Value> = w
        .queues
        .iter()
        .map(|(q, n)| (q.clone(), serde_json::Value::from(*n)))
        .collect();
    serde_json::json!({
        "id": w.id,
        "state": w.state.as_str(),
        "host": w.host,
        "pid": w.pid,
        "queues": queues,
        "concurrency": w.concurrency,
        "running": w.running,
        "poll_off": w.poll_off,
        "heartbeat_ms": u64::try_from(w.heartbeat.as_millis()).unwrap_or(u64::MAX),
        "version": w.version,
        "started_at": time(Some(w.started_at)),
        "last_seen": time(Some(w.last_seen)),
        "stopped_at": w.stopped_at.map(|t| time(Some(t))),
    })
}
