//! Batch statements cost time linear in their batch whatever the statistics say.
//!
//! The trap: statistics taken while every row was queued say that almost no row is running,
//! so a planner may drive a statement over running jobs from a (supposedly one-row) scan of
//! the table and rescan the batch's input once per row: quadratic. Each test below creates
//! exactly that situation (ANALYZE while all jobs are queued, then claim them all with
//! autovacuum off for the table), runs the statement the worker or the admin API runs under
//! `EXPLAIN (ANALYZE, FORMAT JSON)` with 1,000 and 4,000 rows, and checks the plan's shape,
//! not its timing: no scan of the input (Function Scan, CTE Scan) or of the table is run more
//! than once, and no node handles more rows than a small multiple of the batch.

use serde_json::Value;
use skiplock::{NewJob, Statement};
use tokio_postgres::types::ToSql;

use crate::support::{setup, Bundle, FRONT};

pub(crate) const N: usize = 4_000;

/// N jobs, analyzed while all were queued, then all claimed (running) with no new
/// statistics. Returns their ids and attempts.
pub(crate) async fn stale_statistics() -> (Bundle, Vec<i64>, Vec<i32>) {
    let b = setup().await;
    b.raw
        .batch_execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..N).map(|i| NewJob::new("k", &i)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    b.raw.batch_execute("ANALYZE jobs").await.unwrap();
    let claimed = b
        .client
        .claim("default", N as u32, std::time::Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(claimed.len(), N);
    let ids = claimed.iter().map(|j| j.id.0).collect();
    let attempts = claimed.iter().map(|j| j.attempt).collect();
    (b, ids, attempts)
}

/// Runs `sql` under EXPLAIN ANALYZE in a transaction that is rolled back, and checks that
/// the plan is linear in `batch`.
pub(crate) async fn assert_linear(
    b: &mut Bundle,
    what: &str,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    batch: usize,
) {
    let tx = b.raw.transaction().await.unwrap();
    let rows = tx
        .query(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), params)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let plan: Value = rows[0].get(0);
    let mut problems = Vec::new();
    walk(&plan[0]["Plan"], batch, &mut problems);
    assert!(
        problems.is_empty(),
        "{what} with {batch} rows: {problems:#?}\nplan: {}",
        serde_json::to_string_pretty(&plan).unwrap()
    );
}

fn walk(node: &Value, batch: usize, problems: &mut Vec<String>) {
    let kind = node["Node Type"].as_str().unwrap_or("?");
    let loops = node["Actual Loops"].as_f64().unwrap_or(0.0);
    let rows = node["Actual Rows"].as_f64().unwrap_or(0.0);
    let removed = node["Rows Removed by Filter"].as_f64().unwrap_or(0.0)
        + node["Rows Removed by Join Filter"].as_f64().unwrap_or(0.0)
        + node["Rows Removed by Index Recheck"]
            .as_f64()
            .unwrap_or(0.0);
    let label = format!(
        "{kind} {} (loops {loops}, rows {rows}, removed {removed})",
        node["Relation Name"]
            .as_str()
            .or(node["CTE Name"].as_str())
            .or(node["Function Name"].as_str())
            .unwrap_or("")
    );
    let rescanned_input = matches!(
        kind,
        "Function Scan" | "CTE Scan" | "Seq Scan" | "Materialize" | "Sort" | "Hash"
    );
    if rescanned_input && loops > 1.0 {
        problems.push(format!("rescanned per row: {label}"));
    }
    // Rows a node looks at, over all its loops: the batch, the table (N) for a scan, a
    // small multiple of them at most.
    let handled = loops * (rows + removed);
    let limit = 4.0 * (batch + N) as f64;
    if handled > limit {
        problems.push(format!("handles {handled} rows (limit {limit}): {label}"));
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        walk(child, batch, problems);
    }
}

#[tokio::test]
async fn outcome_batches_stay_linear_with_stale_statistics() {
    let (mut b, ids, attempts) = stale_statistics().await;
    let sql = b.client.statement(Statement::FinishMany).to_owned();
    for batch in [1_000, N] {
        let ids = ids[..batch].to_vec();
        let attempts = attempts[..batch].to_vec();
        let outcomes = vec!["complete"; batch];
        let errors = vec![""; batch];
        let zeros = vec![0i64; batch];
        let outputs = vec![None::<&str>; batch];
        assert_linear(
            &mut b,
            "job_finish_many.sql",
            &sql,
            &[
                &ids, &attempts, &outcomes, &errors, &zeros, &zeros, &zeros, &outputs,
            ],
            batch,
        )
        .await;
    }
}

#[tokio::test]
async fn completion_batches_stay_linear_with_stale_statistics() {
    let (mut b, ids, attempts) = stale_statistics().await;
    // The worker's completion, and the one that deletes (WorkerConfig::delete_done).
    for (name, statement) in [
        ("job_complete_many.sql", Statement::CompleteMany),
        (
            "job_complete_delete_many.sql",
            Statement::CompleteDeleteMany,
        ),
    ] {
        let sql = b.client.statement(statement).to_owned();
        for batch in [1_000, N] {
            let ids = ids[..batch].to_vec();
            let attempts = attempts[..batch].to_vec();
            let outputs = vec![None::<&str>; batch];
            assert_linear(&mut b, name, &sql, &[&ids, &attempts, &outputs], batch).await;
        }
    }
}

#[tokio::test]
async fn heartbeat_batches_stay_linear_with_stale_statistics() {
    let (mut b, ids, attempts) = stale_statistics().await;
    let sql = b.client.statement(Statement::ExtendMany).to_owned();
    for batch in [1_000, N] {
        let ids = ids[..batch].to_vec();
        let attempts = attempts[..batch].to_vec();
        assert_linear(
            &mut b,
            "job_extend_many.sql",
            &sql,
            &[&ids, &attempts, &300_000_000i64],
            batch,
        )
        .await;
    }
}

#[tokio::test]
async fn admin_statements_stay_linear_with_stale_statistics() {
    let (mut b, ids, _) = stale_statistics().await;
    // Cancel runs over running jobs; retry and delete over finished ones.
    let cancel = b.client.statement(Statement::Cancel).to_owned();
    for batch in [1_000, N] {
        let ids = ids[..batch].to_vec();
        assert_linear(&mut b, "job_cancel.sql", &cancel, &[&ids], batch).await;
    }
    b.raw
        .batch_execute(
            "UPDATE jobs SET status = 'failed', finished_at = now(), locked_until = NULL",
        )
        .await
        .unwrap();
    for statement in [Statement::Retry, Statement::Delete] {
        let sql = b.client.statement(statement).to_owned();
        for batch in [1_000, N] {
            let ids = ids[..batch].to_vec();
            assert_linear(&mut b, &format!("{statement:?}"), &sql, &[&ids], batch).await;
        }
    }
}

#[tokio::test]
async fn claim_reap_and_prune_stay_linear_with_stale_statistics() {
    let (mut b, _, _) = stale_statistics().await;
    // Reap: every lease expired, statistics still say queued.
    b.raw
        .batch_execute("UPDATE jobs SET locked_until = now() - interval '1 second'")
        .await
        .unwrap();
    let reap = b.client.statement(Statement::Reap).to_owned();
    for batch in [1_000i64, N as i64] {
        assert_linear(&mut b, "job_reap.sql", &reap, &[&batch], batch as usize).await;
    }
    // Claim: everything queued again.
    b.raw
        .batch_execute("UPDATE jobs SET status = 'queued', locked_until = NULL")
        .await
        .unwrap();
    let claim = b.client.statement(Statement::Claim).to_owned();
    for batch in [1_000i64, N as i64] {
        assert_linear(
            &mut b,
            "job_claim.sql",
            &claim,
            &[
                &"default",
                &batch,
                &300_000_000i64,
                &FRONT.0,
                &FRONT.1,
                &FRONT.2,
            ],
            batch as usize,
        )
        .await;
    }
    // Prune: everything done long ago.
    b.raw
        .batch_execute("UPDATE jobs SET status = 'done', finished_at = now() - interval '30 days'")
        .await
        .unwrap();
    let prune = b.client.statement(Statement::Prune).to_owned();
    for batch in [1_000i64, N as i64] {
        assert_linear(
            &mut b,
            "job_prune.sql",
            &prune,
            &[&1_000_000i64, &false, &batch],
            batch as usize,
        )
        .await;
    }
}

/// The claim's UPDATE reaches the rows its scan locked through the primary key, whatever the
/// batch beside the table and whether the plan is custom or generic (named prepared
/// statements): never a scan of the whole table. Joined to the locked rows instead, a batch
/// that is large beside the table (here each of 500, 2,000 and 4,000 of 4,000 jobs; in the
/// worker, a claim in turn of 2,000 after a wait on 100,000) or a generic plan, which guesses
/// the LIMIT, got a hash join over a sequential scan of `jobs`: every claim read every row
/// (migration 23).
#[tokio::test]
async fn the_claim_reaches_its_rows_by_primary_key_whatever_the_batch() {
    let (mut b, _, _) = stale_statistics().await;
    b.raw
        .batch_execute("UPDATE jobs SET status = 'queued', locked_until = NULL")
        .await
        .unwrap();
    let claim = b.client.statement(Statement::Claim).to_owned();
    let lease = 300_000_000i64;
    for mode in ["auto", "force_generic_plan"] {
        for batch in [500i64, 2_000, N as i64] {
            let tx = b.raw.transaction().await.unwrap();
            tx.batch_execute(&format!("SET LOCAL plan_cache_mode = {mode}"))
                .await
                .unwrap();
            let rows = tx
                .query(
                    &format!("EXPLAIN (ANALYZE, FORMAT JSON) {claim}"),
                    &[&"default", &batch, &lease, &FRONT.0, &FRONT.1, &FRONT.2],
                )
                .await
                .unwrap();
            tx.rollback().await.unwrap();
            let plan: Value = rows[0].get(0);
            let mut all = Vec::new();
            nodes(&plan[0]["Plan"], false, &mut all);
            let on_jobs: Vec<String> = all
                .iter()
                .filter(|(n, _)| n["Relation Name"] == "jobs")
                .map(|(n, _)| {
                    format!(
                        "{} {}",
                        n["Node Type"].as_str().unwrap_or("?"),
                        n["Index Name"].as_str().unwrap_or("")
                    )
                })
                .collect();
            let pretty = serde_json::to_string_pretty(&plan).unwrap();
            assert!(
                !on_jobs.iter().any(|n| n.starts_with("Seq Scan")),
                "{mode}, batch {batch}: a scan of the whole table: {on_jobs:?}\n{pretty}"
            );
            assert!(
                on_jobs.iter().any(|n| n == "ModifyTable ")
                    && on_jobs.iter().any(|n| n == "Index Scan jobs_pkey"),
                "{mode}, batch {batch}: the UPDATE does not probe the primary key: {on_jobs:?}\n{pretty}"
            );
            assert!(
                !all.iter().any(|(n, _)| n["Node Type"] == "Hash Join"),
                "{mode}, batch {batch}: a hash join\n{pretty}"
            );
        }
    }
}

/// Runs `EXPLAIN (<options>, FORMAT JSON) sql` in a transaction that is rolled back and
/// returns the top plan node.
async fn explain(
    b: &mut Bundle,
    options: &str,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Value {
    let tx = b.raw.transaction().await.unwrap();
    let rows = tx
        .query(&format!("EXPLAIN ({options}, FORMAT JSON) {sql}"), params)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let plan: Value = rows[0].get(0);
    plan[0]["Plan"].clone()
}

/// Every node of a plan, with whether it sits under an InitPlan.
fn nodes(node: &Value, under_init_plan: bool, out: &mut Vec<(Value, bool)>) {
    let under = under_init_plan || node["Parent Relationship"] == "InitPlan";
    out.push((node.clone(), under));
    for child in node["Plans"].as_array().into_iter().flatten() {
        nodes(child, under, out);
    }
}

/// The plan's shape outside its InitPlans: node type, relation and index of each node, but
/// for the Result nodes that only hold a one-time filter.
fn shape(plan: &Value) -> Vec<String> {
    let mut all = Vec::new();
    nodes(plan, false, &mut all);
    all.iter()
        .filter(|(n, init)| !init && n.get("One-Time Filter").is_none())
        // The limited queue's branch of the claim (an Append of the plain claim and the
        // function call under its one-time filter), which runs only for a limited queue.
        .filter(|(n, _)| n["Node Type"] != "Append" && n["Node Type"] != "Function Scan")
        .map(|(n, _)| {
            format!(
                "{} {} {}",
                n["Node Type"].as_str().unwrap_or("?"),
                n["Relation Name"].as_str().unwrap_or(""),
                n["Index Name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// The claim's pause check is read once per claim (an InitPlan, one loop), not per row; the
/// rest of the plan is the plan of the claim without it, and costs no more than the check's
/// one probe; on a paused queue the jobs are never scanned. With stale statistics on both
/// tables: jobs analyzed while all were queued (then claimed and requeued), and `queues`
/// analyzed empty, then given 1,000 paused queues.
#[tokio::test]
async fn the_pause_check_runs_once_per_claim_with_stale_statistics() {
    let (mut b, _, _) = stale_statistics().await;
    b.raw
        .batch_execute(
            "UPDATE jobs SET status = 'queued', locked_until = NULL;
             ANALYZE queues;
             INSERT INTO queues (name, paused, paused_at)
               SELECT 'q' || i, true, now() FROM generate_series(1, 1000) i;",
        )
        .await
        .unwrap();
    let claim = b.client.statement(Statement::Claim).to_owned();
    // The claim without its queue checks: the first branch alone (the second is the limited
    // queue's, which runs only under its one-time filter), without the pause test.
    let first_branch = claim.split("UNION ALL").next().unwrap_or_default();
    let unchecked: String = first_branch
        .lines()
        .filter(|l| !l.contains(".queues"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(claim, unchecked, "the claim has no pause check:\n{claim}");
    let lease = 300_000_000i64;

    for batch in [1_000i64, N as i64] {
        // Still linear in the batch.
        assert_linear(
            &mut b,
            "job_claim.sql",
            &claim,
            &[&"default", &batch, &lease, &FRONT.0, &FRONT.1, &FRONT.2],
            batch as usize,
        )
        .await;
        // Same plan, and no dearer than the check's probe (planned back to back, without
        // running, so that both see the same table; planned again if an autoanalyze of
        // another test's table moved the estimates in between).
        for attempt in 1..=3 {
            let with = explain(
                &mut b,
                "COSTS",
                &claim,
                &[&"default", &batch, &lease, &FRONT.0, &FRONT.1, &FRONT.2],
            )
            .await;
            let without = explain(
                &mut b,
                "COSTS",
                &unchecked,
                &[&"default", &batch, &lease, &FRONT.0, &FRONT.1, &FRONT.2],
            )
            .await;
            assert_eq!(shape(&with), shape(&without), "{with:#}\n{without:#}");
            let mut all = Vec::new();
            nodes(&with, false, &mut all);
            let probes: Vec<&Value> = all
                .iter()
                .filter(|(n, _)| n["Relation Name"] == "queues")
                .map(|(n, _)| n)
                .collect();
            // Two probes of the queue's row: the first branch's (paused or limited?) and the
            // limited branch's one-time filter; the limited branch's call is planned but
            // never run for an unlimited queue (checked below), so its estimate counts too.
            assert_eq!(probes.len(), 2, "{with:#}");
            let limited_branch: f64 = all
                .iter()
                .filter(|(n, _)| n["Node Type"] == "Append")
                .filter_map(|(n, _)| n["Plans"].as_array().and_then(|p| p.get(1)))
                .map(|n| n["Total Cost"].as_f64().unwrap_or(0.0))
                .sum();
            let probe_cost = probes
                .iter()
                .map(|p| p["Total Cost"].as_f64().unwrap())
                .sum::<f64>()
                + limited_branch;
            let cost = |p: &Value| p["Total Cost"].as_f64().unwrap();
            let extra = cost(&with) - cost(&without);
            if extra <= probe_cost + 0.01 {
                break;
            }
            assert!(
                attempt < 3,
                "the check costs {extra} more than its probe ({probe_cost}):\n{with:#}\n{without:#}"
            );
        }

        // Run: the probe runs once, under an InitPlan.
        let ran = explain(
            &mut b,
            "ANALYZE",
            &claim,
            &[&"default", &batch, &lease, &FRONT.0, &FRONT.1, &FRONT.2],
        )
        .await;
        let mut all = Vec::new();
        nodes(&ran, false, &mut all);
        let probes: Vec<&(Value, bool)> = all
            .iter()
            .filter(|(n, _)| n["Relation Name"] == "queues")
            .collect();
        assert_eq!(probes.len(), 2, "{ran:#}");
        for (probe, in_init_plan) in probes {
            assert!(
                *in_init_plan,
                "the pause check is not an InitPlan:\n{ran:#}"
            );
            assert_eq!(probe["Actual Loops"].as_f64(), Some(1.0), "{ran:#}");
        }
        // The limited queue's branch never runs for a queue without limits.
        for (n, _) in &all {
            if n["Node Type"] == "Function Scan" {
                assert_eq!(n["Actual Loops"].as_f64(), Some(0.0), "{ran:#}");
            }
        }
        assert_eq!(ran["Actual Rows"].as_f64(), Some(batch as f64), "{ran:#}");
    }

    // Paused: the claim takes nothing and never scans the jobs.
    b.client
        .pause_queue("default", Some("plans"))
        .await
        .unwrap();
    let ran = explain(
        &mut b,
        "ANALYZE",
        &claim,
        &[&"default", &1_000i64, &lease, &FRONT.0, &FRONT.1, &FRONT.2],
    )
    .await;
    let mut all = Vec::new();
    nodes(&ran, false, &mut all);
    for (n, init) in &all {
        let scan = n["Node Type"].as_str().unwrap_or("").ends_with("Scan");
        if scan && n["Relation Name"] == "jobs" && !init {
            // Not run at all (under the one-time filter), or, on PostgreSQL 13, where the
            // update's merge join starts its side, stopped at its first row.
            let loops = n["Actual Loops"].as_f64().unwrap_or(0.0);
            let rows = n["Actual Rows"].as_f64().unwrap_or(0.0);
            assert!(
                loops * rows <= 1.0,
                "a paused queue's jobs were scanned:\n{ran:#}"
            );
        }
    }
    assert_eq!(ran["Actual Rows"].as_f64(), Some(0.0), "{ran:#}");
}

/// The reaper's read of the earliest lease is one descent of the lease index per queue with
/// running jobs (the index is led by the queue, migration 18), however many jobs run and
/// whatever the statistics say (analyzed while every job was queued), and it finds the
/// earliest lease of all queues.
#[tokio::test]
async fn the_earliest_lease_is_one_descent_per_queue_with_stale_statistics() {
    let (mut b, _, _) = stale_statistics().await;
    // Two more queues with running jobs; the earliest lease is in the last one.
    for (queue, lease) in [("a-first", 600u64), ("z-last", 30)] {
        let jobs: Vec<NewJob> = (0..50).map(|i| NewJob::new("k", &i).queue(queue)).collect();
        b.client.enqueue_many(&jobs).await.unwrap();
        let claimed = b
            .client
            .claim(queue, 50, std::time::Duration::from_secs(lease))
            .await
            .unwrap();
        assert_eq!(claimed.len(), 50);
    }
    let sql = b.client.statement(Statement::NextLease).to_owned();
    let plan = explain(&mut b, "ANALYZE", &sql, &[]).await;
    let mut all = Vec::new();
    nodes(&plan, false, &mut all);
    assert!(
        all.iter().any(|(n, _)| n["Index Name"] == "jobs_lease_idx"),
        "the lease index is not used: {plan:#}"
    );
    for (n, _) in &all {
        let loops = n["Actual Loops"].as_f64().unwrap_or(0.0);
        let rows = n["Actual Rows"].as_f64().unwrap_or(0.0)
            + n["Rows Removed by Filter"].as_f64().unwrap_or(0.0);
        assert!(
            loops * rows <= 4.0,
            "a node reads {rows} rows in {loops} loops (three queues): {plan:#}"
        );
    }
    let wait_us: i64 = b.raw.query_one(&sql, &[]).await.unwrap().get(0);
    assert!(
        (25_000_000..=30_000_000).contains(&wait_us),
        "the earliest lease is z-last's, 30 s away: {wait_us} us"
    );
}

/// A reaper round reads the lease index, not the table: with 20,000 jobs, statistics taken
/// while every one of them was running with an expired lease (the case where walking the
/// table in id order looks cheapest to the planner), and then all but 100 of them done, the
/// round reads about as many rows as there are leases (the lease index holds the running
/// and slot-holding jobs only, migration 18) and reaps the 100.
#[tokio::test]
async fn a_reaper_round_reads_the_leases_not_the_history_with_stale_statistics() {
    let mut b = setup().await;
    b.raw
        .batch_execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..20_000).map(|i| NewJob::new("k", &i)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let claimed = b
        .client
        .claim("default", 20_000, std::time::Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 20_000);
    b.raw
        .batch_execute(
            "UPDATE jobs SET locked_until = now() - interval '1 minute';
             ANALYZE jobs;
             UPDATE jobs SET status = 'done', locked_until = NULL, finished_at = now()
             WHERE id % 200 <> 0",
        )
        .await
        .unwrap();
    let sql = b.client.statement(Statement::Reap).to_owned();
    let plan = explain(&mut b, "ANALYZE", &sql, &[&1_000i64]).await;
    let mut all = Vec::new();
    nodes(&plan, false, &mut all);
    assert!(
        all.iter().any(|(n, _)| n["Index Name"] == "jobs_lease_idx"),
        "the lease index is not used: {plan:#}"
    );
    let read: f64 = all
        .iter()
        .filter(|(n, _)| n["Relation Name"] == "jobs")
        .map(|(n, _)| {
            n["Actual Loops"].as_f64().unwrap_or(0.0)
                * (n["Actual Rows"].as_f64().unwrap_or(0.0)
                    + n["Rows Removed by Filter"].as_f64().unwrap_or(0.0)
                    + n["Rows Removed by Index Recheck"].as_f64().unwrap_or(0.0))
        })
        .sum();
    assert!(
        read <= 1_000.0,
        "the round read {read} rows of jobs: {plan:#}"
    );
    assert_eq!(b.client.reap().await.unwrap().len(), 100);
}
