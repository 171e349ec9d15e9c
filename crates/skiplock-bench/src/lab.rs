//! The article's experiments, runnable against any database: many concurrent claimers on
//! separate connections, and exact accounting of what each claim handed out.
//!
//! [`claim_race`] is the harness the test suite uses to show that skiplock's claim hands
//! every job out exactly once, and that the same harness *does* see the naive claim's double
//! runs. The `skiplock lab` command prints its tables.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use skiplock::reexports::deadpool_postgres;
use skiplock::{Client, NewJob, Schema};
use tokio_postgres::error::DbError;

use crate::db::{self, Statement};
use crate::error::{Error, Result};

/// The queue the lab's jobs go to.
pub const LAB_QUEUE: &str = "lab";

/// Which claim statement the claimers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimMethod {
    /// `UPDATE ... WHERE id = (SELECT ... LIMIT 1)` without a row lock: double-runs jobs.
    Naive,
    /// `FOR UPDATE` without `SKIP LOCKED`: correct, but claimers wait for each other.
    ForUpdate,
    /// skiplock's own claim (`FOR UPDATE SKIP LOCKED` with a lease), each job then completed
    /// with the guarded complete.
    SkipLocked,
}

impl ClaimMethod {
    /// A short name (`naive`, `for-update`, `skip-locked`).
    pub fn name(self) -> &'static str {
        match self {
            ClaimMethod::Naive => "naive",
            ClaimMethod::ForUpdate => "for-update",
            ClaimMethod::SkipLocked => "skip-locked",
        }
    }
}

/// When a claimer stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// When a claim returns nothing.
    WhenEmpty,
    /// After this many claim statements (the article's `pgbench -t 1250`).
    AfterClaims(u32),
}

/// How a race is run.
#[derive(Debug, Clone, Copy)]
pub struct RaceOptions {
    /// Concurrent claimers, each on its own connection (default 8).
    pub workers: usize,
    /// Jobs enqueued before the claimers start (default 10,000).
    pub jobs: usize,
    /// Jobs per claim statement (default 1).
    pub batch: u32,
    /// When each claimer stops (default: after `jobs / workers` claims, as in the article).
    pub stop: Stop,
}

impl Default for RaceOptions {
    fn default() -> Self {
        RaceOptions {
            workers: 8,
            jobs: 10_000,
            batch: 1,
            stop: Stop::AfterClaims(1_250),
        }
    }
}

/// What a race handed out.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RaceReport {
    /// The statement raced.
    pub method: ClaimMethod,
    /// Jobs enqueued.
    pub jobs: usize,
    /// Job hand-outs in total, counting a job each time a claim returned it.
    pub claims: u64,
    /// Distinct jobs handed out.
    pub distinct_jobs: u64,
    /// Hand-outs of a job that had already been handed out (`claims - distinct_jobs`).
    pub duplicate_claims: u64,
    /// The most claimers that took one and the same job.
    pub max_claimers_of_one_job: usize,
    /// Guarded completions that were refused (skip-locked only; must be 0).
    pub lost_completions: u64,
    /// The article's table afterwards: `(status, count, max attempts)`.
    pub statuses: Vec<(String, i64, i32)>,
    /// Wall time of the claiming phase.
    pub elapsed: Duration,
}

/// Enqueues `opts.jobs` jobs in queue [`LAB_QUEUE`] of `schema` (which must be migrated),
/// then runs `opts.workers` claimers concurrently, each on its own connection, all using
/// `method`, and accounts for every job each claim returned.
pub async fn claim_race(
    url: &str,
    schema: &Schema,
    method: ClaimMethod,
    opts: RaceOptions,
) -> Result<RaceReport> {
    if opts.workers == 0 || opts.batch == 0 {
        return Err(Error::invalid(
            "lab options",
            "workers and batch must be at least 1",
        ));
    }
    let client = Client::builder(url)
        .schema(schema.name())
        .pool_size(opts.workers.max(1))
        .build()?;
    let jobs: Vec<NewJob> = (0..opts.jobs)
        .map(|i| NewJob::new("lab", &serde_json::json!({ "email_id": i })).queue(LAB_QUEUE))
        .collect();
    for chunk in jobs.chunks(10_000) {
        client.enqueue_many(chunk).await?;
    }

    // Open every connection first, so that all claimers start together.
    let mut conns = Vec::with_capacity(opts.workers);
    for _ in 0..opts.workers {
        conns.push(pooled(&client, "open a lab connection").await?);
    }
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(opts.workers);
    for (worker, conn) in conns.into_iter().enumerate() {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            claimer(worker, conn, client, method, opts).await
        }));
    }
    let mut seen: HashMap<i64, Vec<usize>> = HashMap::with_capacity(opts.jobs);
    let mut claims = 0u64;
    let mut lost = 0u64;
    for t in tasks {
        let out = t.await.map_err(Error::task("a claimer task"))??;
        claims += out.taken.len() as u64;
        lost += out.lost;
        for id in out.taken {
            seen.entry(id).or_default().push(out.worker);
        }
    }
    let elapsed = started.elapsed();
    let max_claimers = seen
        .values()
        .map(|ws| {
            let mut ws = ws.clone();
            ws.sort_unstable();
            ws.dedup();
            ws.len()
        })
        .max()
        .unwrap_or(0);
    let conn = pooled(&client, "read the lab results").await?;
    let statuses = db::status(&**conn, schema, LAB_QUEUE)
        .await
        .map_err(Error::db("read the lab results"))?;
    Ok(RaceReport {
        method,
        jobs: opts.jobs,
        claims,
        distinct_jobs: seen.len() as u64,
        duplicate_claims: claims - seen.len() as u64,
        max_claimers_of_one_job: max_claimers,
        lost_completions: lost,
        statuses,
        elapsed,
    })
}

/// A connection from `client`'s pool, for `op`.
async fn pooled(client: &Client, op: &'static str) -> Result<deadpool_postgres::Object> {
    client
        .pool()
        .get()
        .await
        .map_err(|source| skiplock::Error::Pool { op, source }.into())
}

struct ClaimerOut {
    worker: usize,
    taken: Vec<i64>,
    lost: u64,
}

async fn claimer(
    worker: usize,
    conn: deadpool_postgres::Object,
    client: Client,
    method: ClaimMethod,
    opts: RaceOptions,
) -> Result<ClaimerOut> {
    let mut out = ClaimerOut {
        worker,
        taken: Vec::new(),
        lost: 0,
    };
    let c: &tokio_postgres::Client = &conn;
    let naive = Statement::LabClaimNaive.sql(client.schema());
    let for_update = Statement::LabClaimForUpdate.sql(client.schema());
    let claim = client.statement(skiplock::Statement::Claim);
    let finish = client.statement(skiplock::Statement::FinishMany);
    let mut n = 0u32;
    loop {
        if let Stop::AfterClaims(max) = opts.stop {
            if n >= max {
                break;
            }
        }
        n += 1;
        let got: Vec<(i64, i32)> = match method {
            ClaimMethod::Naive | ClaimMethod::ForUpdate => {
                let stmt = if method == ClaimMethod::Naive {
                    &naive
                } else {
                    &for_update
                };
                db::claim_with(c, stmt, LAB_QUEUE, i64::from(opts.batch))
                    .await
                    .map_err(Error::db("run a lab claim"))?
            }
            ClaimMethod::SkipLocked => {
                let jobs = db::claim(c, claim, LAB_QUEUE, i64::from(opts.batch), 300_000_000)
                    .await
                    .map_err(Error::db("claim jobs"))?;
                for &(id, attempt) in &jobs {
                    if !db::complete(c, finish, id, attempt)
                        .await
                        .map_err(Error::db("complete a job"))?
                    {
                        out.lost += 1;
                    }
                }
                jobs
            }
        };
        if got.is_empty() && opts.stop == Stop::WhenEmpty {
            break;
        }
        out.taken.extend(got.into_iter().map(|(id, _)| id));
    }
    Ok(out)
}

/// Installs a trigger on `client`'s jobs table that records every transition into `done`
/// (for demos and tests: it costs an insert per completion). See [`completion_audit`].
pub async fn install_completion_audit(client: &Client) -> Result<()> {
    const OP: &str = "install the completion audit";
    let conn = pooled(client, OP).await?;
    conn.batch_execute(&Statement::LabAuditInstall.sql(client.schema()))
        .await
        .map_err(Error::db(OP))
}

/// `(completions, distinct jobs)` recorded since [`install_completion_audit`]: their
/// difference is the number of duplicate completions.
pub async fn completion_audit(client: &Client) -> Result<(i64, i64)> {
    const OP: &str = "read the completion audit";
    let conn = pooled(client, OP).await?;
    let row = conn
        .query_one(&Statement::LabAuditCount.sql(client.schema()), &[])
        .await
        .map_err(Error::db(OP))?;
    Ok((
        row.try_get(0).map_err(Error::db(OP))?,
        row.try_get(1).map_err(Error::db(OP))?,
    ))
}

/// The second experiment's figures: how long a second claimer waits behind the first one's
/// open transaction, with `FOR UPDATE` alone and with `SKIP LOCKED`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WaitReport {
    /// How long the first claimer kept its transaction open.
    pub hold: Duration,
    /// The job the first claimer took.
    pub first_job: i64,
    /// `FOR UPDATE` alone: the job the second claimer got, and how long it took.
    pub for_update_job: Option<i64>,
    /// `FOR UPDATE` alone: the second claimer's wait, in milliseconds.
    pub for_update_ms: f64,
    /// `SKIP LOCKED`: the job the second claimer got.
    pub skip_locked_job: Option<i64>,
    /// `SKIP LOCKED`: the second claimer's time, in milliseconds.
    pub skip_locked_ms: f64,
}

/// Session A claims a job in a transaction and keeps it open for `hold`; meanwhile session B
/// runs the same claim. With `FOR UPDATE` alone B waits for A's commit, then skips A's job;
/// with `SKIP LOCKED` B gets the next job at once. Enqueues three jobs in [`LAB_QUEUE`].
pub async fn claim_wait(url: &str, schema: &Schema, hold: Duration) -> Result<WaitReport> {
    const OP: &str = "run the wait experiment";
    let client = Client::builder(url)
        .schema(schema.name())
        .pool_size(3)
        .build()?;
    let jobs: Vec<NewJob> = (0..4)
        .map(|i| NewJob::new("lab", &serde_json::json!({ "email_id": i })).queue(LAB_QUEUE))
        .collect();
    client.enqueue_many(&jobs).await?;
    let one = 1i64;
    let mut report = WaitReport {
        hold,
        first_job: 0,
        for_update_job: None,
        for_update_ms: 0.0,
        skip_locked_job: None,
        skip_locked_ms: 0.0,
    };
    for statement in [
        Statement::LabClaimForUpdate,
        Statement::LabClaimSkipLockedDone,
    ] {
        let mut a = pooled(&client, OP).await?;
        let b = pooled(&client, OP).await?;
        let tx = a.transaction().await.map_err(Error::db(OP))?;
        let stmt = statement.sql(schema);
        let first = db::claim_with(&*tx, &stmt, LAB_QUEUE, one)
            .await
            .map_err(Error::db(OP))?;
        report.first_job = first.first().map_or(0, |j| j.0);
        let second = tokio::spawn(async move {
            let started = Instant::now();
            let got = db::claim_with(&**b, &stmt, LAB_QUEUE, one).await;
            (got, started.elapsed())
        });
        tokio::time::sleep(hold).await;
        tx.commit().await.map_err(Error::db(OP))?;
        let (got, took) = second.await.map_err(Error::task("the second claimer"))?;
        let got = got.map_err(Error::db(OP))?.first().map(|j| j.0);
        let ms = took.as_secs_f64() * 1000.0;
        if statement == Statement::LabClaimForUpdate {
            report.for_update_job = got;
            report.for_update_ms = ms;
        } else {
            report.skip_locked_job = got;
            report.skip_locked_ms = ms;
        }
    }
    Ok(report)
}

/// The vacuum experiment's figures, from `VACUUM (VERBOSE)` of the jobs table.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct VacuumReport {
    /// Jobs processed by other sessions while one claim transaction stayed open.
    pub jobs: usize,
    /// While it was open: dead row versions vacuum could not remove.
    pub dead_not_removable_open: i64,
    /// While it was open: row versions removed.
    pub removed_open: i64,
    /// After it committed: dead row versions vacuum could not remove.
    pub dead_not_removable_after_commit: i64,
    /// After it committed: row versions removed.
    pub removed_after_commit: i64,
    /// VACUUM's own lines, as PostgreSQL printed them.
    pub vacuum_lines: Vec<String>,
}

/// One session claims a job and keeps its transaction open (as a worker that holds a
/// transaction while it works would); other sessions then process `jobs` jobs; `VACUUM
/// (VERBOSE)` reports how many dead rows it cannot remove. After the open transaction
/// commits, `VACUUM` runs again (again every 250 ms for up to 5 s while it still cannot
/// remove them: another short snapshot, such as an autovacuum worker's ANALYZE, may hold them
/// a moment longer). Other long transactions in the database change the figures.
pub async fn vacuum(
    url: &str,
    schema: &Schema,
    jobs: usize,
    workers: usize,
) -> Result<VacuumReport> {
    const OP: &str = "run the vacuum experiment";
    let client = Client::builder(url)
        .schema(schema.name())
        .pool_size(workers.max(1) + 1)
        .build()?;
    let new: Vec<NewJob> = (0..=jobs)
        .map(|i| NewJob::new("lab", &serde_json::json!({ "email_id": i })).queue(LAB_QUEUE))
        .collect();
    for chunk in new.chunks(10_000) {
        client.enqueue_many(chunk).await?;
    }
    let claim = Statement::LabClaimSkipLockedDone.sql(schema);
    let (vac, mut notices) = connect_with_notices(url).await?;
    vac.batch_execute(&Statement::LabVacuum.sql(schema))
        .await
        .map_err(Error::db(OP))?;
    while notices.try_recv().is_ok() {}

    // The open claim.
    let mut holder = pooled(&client, OP).await?;
    let tx = holder.transaction().await.map_err(Error::db(OP))?;
    db::claim_with(&*tx, &claim, LAB_QUEUE, 1)
        .await
        .map_err(Error::db(OP))?;

    // Others process the rest, each job claimed and marked done in one statement.
    let mut tasks = Vec::new();
    for _ in 0..workers.max(1) {
        let conn = pooled(&client, OP).await?;
        let stmt = claim.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let got = db::claim_with(&**conn, &stmt, LAB_QUEUE, 1).await?;
                if got.is_empty() {
                    return Ok::<(), tokio_postgres::Error>(());
                }
            }
        }));
    }
    for t in tasks {
        t.await
            .map_err(Error::task("a worker task"))?
            .map_err(Error::db(OP))?;
    }

    let verbose = Statement::LabVacuumVerbose.sql(schema);
    vac.batch_execute(&verbose).await.map_err(Error::db(OP))?;
    let open = collect(&mut notices);
    tx.commit().await.map_err(Error::db(OP))?;
    // Another snapshot of the database taken before the commit (an autovacuum worker's
    // ANALYZE of the table just filled, another client's statement) holds the rows back
    // for as long as it runs: look again for a few seconds before reporting them as kept.
    let mut after;
    let mut tries = 0;
    loop {
        vac.batch_execute(&verbose).await.map_err(Error::db(OP))?;
        after = collect(&mut notices);
        tries += 1;
        if tuples_line(&after).1 == 0 || tries >= 20 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let (removed_open, dead_open) = tuples_line(&open);
    let (removed_after, dead_after) = tuples_line(&after);
    Ok(VacuumReport {
        jobs,
        dead_not_removable_open: dead_open,
        removed_open,
        dead_not_removable_after_commit: dead_after,
        removed_after_commit: removed_after,
        vacuum_lines: open
            .into_iter()
            .chain(after)
            .filter(|l| {
                l.contains("tuples:")
                    || l.contains("row versions cannot be removed")
                    || (l.contains("found") && l.contains("removable"))
            })
            .collect(),
    })
}

/// The notices received so far (VACUUM VERBOSE's INFO lines), line by line. Before
/// PostgreSQL 15 the dead-but-not-removable count is in a notice's detail.
fn collect(rx: &mut tokio::sync::mpsc::UnboundedReceiver<DbError>) -> Vec<String> {
    let mut v = Vec::new();
    while let Ok(n) = rx.try_recv() {
        v.extend(n.message().lines().map(str::to_owned));
        if let Some(d) = n.detail() {
            v.extend(d.lines().map(str::to_owned));
        }
    }
    v
}

/// From `tuples: 0 removed, 11992 remain, 2000 are dead but not yet removable`: (removed,
/// dead but not removable). The first such line is the table's own (not its TOAST table's).
/// Before PostgreSQL 15: `"jobs": found 2001 removable, 8542 nonremovable row versions in
/// 90 out of 120 pages` and `2000 dead row versions cannot be removed yet, oldest xmin: 1`.
fn tuples_line(lines: &[String]) -> (i64, i64) {
    let Some(line) = lines.iter().find(|l| l.trim_start().starts_with("tuples:")) else {
        let first_number = |l: &String, after: &str| -> Option<i64> {
            let rest = l.split(after).nth(1).unwrap_or(l);
            rest.split_whitespace().find_map(|w| w.parse::<i64>().ok())
        };
        let removed = lines
            .iter()
            .find(|l| l.contains("found") && l.contains("removable"))
            .and_then(|l| first_number(l, "found"));
        let dead = lines
            .iter()
            .find(|l| l.contains("dead row versions cannot be removed yet"))
            .and_then(|l| l.split_whitespace().find_map(|w| w.parse::<i64>().ok()));
        return (removed.unwrap_or(0), dead.unwrap_or(0));
    };
    let num_before = |word: &str| -> i64 {
        line.split(',')
            .find(|part| part.contains(word))
            .and_then(|part| part.split_whitespace().find_map(|w| w.parse::<i64>().ok()))
            .unwrap_or(0)
    };
    (num_before("removed"), num_before("not yet removable"))
}

/// A connection of the lab's own, outside any pool, whose notices (the report of `VACUUM
/// (VERBOSE)`) arrive on the receiver, in order. Plain TCP or a Unix socket: the lab runs on
/// a scratch database, and a URL that requires TLS is refused with a one-line error.
async fn connect_with_notices(
    url: &str,
) -> Result<(
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<DbError>,
)> {
    const OP: &str = "open the lab's VACUUM connection";
    let cfg: tokio_postgres::Config = url
        .parse()
        .map_err(|e| Error::Database { op: OP, source: e })?;
    if cfg.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
        return Err(Error::Invalid {
            what: "database URL",
            reason: "the lab's VACUUM connection does not use TLS (sslmode=require): run the lab on a local or scratch database".into(),
        });
    }
    let (client, mut conn) = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| Error::Database { op: OP, source: e })?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(msg)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notice(n) = msg {
                let _ = tx.send(n);
            }
        }
    });
    Ok((client, rx))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_vacuum_verbose() {
        let lines = vec![
            "finished vacuuming \"postgres.s.jobs\": index scans: 0".to_owned(),
            "tuples: 0 removed, 11992 remain, 2000 are dead but not yet removable".to_owned(),
        ];
        assert_eq!(super::tuples_line(&lines), (0, 2000));
        let lines = vec![
            "tuples: 2001 removed, 8542 remain, 0 are dead but not yet removable, oldest xmin: 1"
                .to_owned(),
        ];
        assert_eq!(super::tuples_line(&lines), (2001, 0));
    }
}
