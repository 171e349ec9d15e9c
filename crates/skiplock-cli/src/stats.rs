//! `skiplock stats`: per-queue counts and the oldest ready job's age, throughput of the last
//! minute, the jobs table's dead tuples and last autovacuum, and sessions holding back
//! vacuum; and which queues are paused.

use std::time::Duration;

use crate::connect::Target;
use crate::errors::schema_hint;
use crate::output::{outln, print_json, time};
use crate::parse::parse_duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Report open transactions older than this even when they are active (idle ones
    /// always).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    blocker_age: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    let client = target.client(1).await?;
    let h = client
        .health(args.blocker_age)
        .await
        .map_err(|e| schema_hint(e, &target.schema))?;
    if args.json {
        let queues: Vec<serde_json::Value> = h
            .queues
            .iter()
            .map(|q| {
                serde_json::json!({
                    "queue": q.queue,
                    "queued": q.queued, "ready": q.ready, "running": q.running,
                    "done": q.done, "failed": q.failed,
                    "oldest_ready_age_s": q.oldest_ready_age_s,
                    "finished_last_minute": q.finished_last_minute,
                    "unserved": q.unserved,
                    "paused": q.paused,
                })
            })
            .collect();
        let table = h.table.as_ref().map(|t| {
            serde_json::json!({
                "n_live_tup": t.n_live_tup, "n_dead_tup": t.n_dead_tup,
                "last_vacuum": t.last_vacuum.map(|v| time(Some(v))),
                "last_autovacuum": t.last_autovacuum.map(|v| time(Some(v))),
                "total_bytes": t.total_bytes,
            })
        });
        let blockers: Vec<serde_json::Value> = h
            .blockers
            .iter()
            .map(|b| {
                serde_json::json!({
                    "pid": b.pid, "user": b.user, "application_name": b.application_name,
                    "client": b.client, "state": b.state, "xmin_age": b.xmin_age,
                    "transaction_age_s": b.transaction_age_s, "state_age_s": b.state_age_s,
                    "query": b.query, "warning": b.warning(),
                })
            })
            .collect();
        print_json(&serde_json::json!({
            "schema": target.schema, "queues": queues, "table": table,
            "blockers": blockers, "warnings": h.warnings,
        }));
        return Ok(());
    }
    outln!("schema {}", target.schema);
    outln!(
        "{:<24} {:>9} {:>9} {:>9} {:>10} {:>9} {:>14} {:>10}  state",
        "queue",
        "queued",
        "ready",
        "running",
        "done",
        "failed",
        "oldest ready",
        "done/min"
    );
    if h.queues.is_empty() {
        outln!("(no jobs)");
    }
    for q in &h.queues {
        outln!(
            "{:<24} {:>9} {:>9} {:>9} {:>10} {:>9} {:>13.1}s {:>10}  {}",
            q.queue,
            q.queued,
            q.ready,
            q.running,
            q.done,
            q.failed,
            q.oldest_ready_age_s,
            q.finished_last_minute,
            if q.paused { "PAUSED" } else { "active" }
        );
    }
    match &h.table {
        Some(t) => outln!(
            "\njobs table: {} live, {} dead row versions, {:.1} MiB with indexes; last autovacuum {}, last vacuum {}",
            t.n_live_tup,
            t.n_dead_tup,
            t.total_bytes as f64 / (1024.0 * 1024.0),
            time(t.last_autovacuum),
            time(t.last_vacuum)
        ),
        None => outln!("\njobs table: no statistics yet"),
    }
    if h.warnings.is_empty() {
        outln!("no session is holding back vacuum");
    }
    for w in &h.warnings {
        outln!("warning: {w}");
    }
    Ok(())
}
