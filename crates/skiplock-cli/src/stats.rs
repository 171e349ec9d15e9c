//! `skiplock stats`: per-queue counts and the oldest ready job's age, throughput of the last
//! minute, the jobs table's dead tuples and last autovacuum, and sessions holding back
//! vacuum; and which queues are paused, their limits and their held jobs.

use std::time::Duration;

use skiplock::QueueState;

use crate::connect::Target;
use crate::errors::schema_hint;
use crate::output::{outln, print_json, time};
use crate::parse::parse_duration;
use crate::queue::{limits_json, limits_short, over_limit};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Report open transactions older than this even when they are active (idle ones
    /// always).
    #[arg(long, value_parser = parse_duration,
          default_value = crate::parse::text!(crate::parse::period_text(
              skiplock::health::DEFAULT_BLOCKER_AGE
          )))]
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
    // Limits and held jobs come from the queue listing (a second, cheap read).
    let states = client
        .queues()
        .await
        .map_err(|e| schema_hint(e, &target.schema))?;
    let state = |name: &str| states.iter().find(|s| s.queue == name);
    if args.json {
        let queues: Vec<serde_json::Value> = h
            .queues
            .iter()
            .map(|q| {
                let mut v = serde_json::json!({
                    "queue": q.queue,
                    "queued": q.queued, "ready": q.ready, "running": q.running,
                    "done": q.done, "failed": q.failed,
                    "oldest_ready_age_s": q.oldest_ready_age_s,
                    "finished_last_minute": q.finished_last_minute,
                    "unserved": q.unserved,
                    "paused": q.paused,
                });
                let s = state(&q.queue);
                if let Some(m) = v.as_object_mut() {
                    m.insert("held".into(), s.map_or(0, |s| s.held).into());
                    m.extend(limits_json(&s.map(|s| s.limits).unwrap_or_default()));
                    m.insert("over_limit".into(), s.is_some_and(over_limit).into());
                    m.insert("bound".into(), s.and_then(|s| s.bound.clone()).into());
                }
                v
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
        "{:<24} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>14} {:>10}  {:<24} STATE",
        "QUEUE",
        "QUEUED",
        "READY",
        "HELD",
        "RUNNING",
        "DONE",
        "FAILED",
        "OLDEST READY",
        "DONE/MIN",
        "LIMITS"
    );
    if h.queues.is_empty() {
        outln!("(no jobs)");
    }
    for q in &h.queues {
        let s = state(&q.queue);
        outln!(
            "{:<24} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>13.1}s {:>10}  {:<24} {}",
            q.queue,
            q.queued,
            q.ready,
            s.map_or(0, |s| s.held),
            q.running,
            q.done,
            q.failed,
            q.oldest_ready_age_s,
            q.finished_last_minute,
            s.map_or_else(|| "-".to_owned(), limits_note),
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

/// A queue's limits in the stats column (`max 5, 2/key, 100/1s`, or `-`), with why its last
/// claim left ready jobs behind (`; bound: slots`) and `; OVER` when more run than a lowered
/// concurrency limit allows.
fn limits_note(s: &QueueState) -> String {
    let mut text = limits_short(&s.limits);
    if let Some(b) = &s.bound {
        text.push_str(&format!("; bound: {b}"));
    }
    if over_limit(s) {
        text.push_str("; OVER");
    }
    text
}
