//! The article's experiments, runnable against any database: many concurrent claimers on
//! separate connections, and exact accounting of what each claim handed out.
//!
//! [`claim_race`] is the harness the test suite uses to show that skiplock's claim hands
//! every job out exactly once, and that the same harness *does* see the naive claim's double
//! runs. The `skiplock lab` command prints its tables.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::db::{self, Sql, Statement};
use crate::error::{Error, Result};
use crate::job::NewJob;
use crate::schema::Schema;

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
        conns.push(client.pool().get().await.map_err(|source| Error::Pool {
            op: "open a lab connection",
            source,
        })?);
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
        let out = t
            .await
            .map_err(|e| Error::invalid("lab", format!("a claimer task failed: {e}")))??;
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
    let conn = client.pool().get().await.map_err(|source| Error::Pool {
        op: "read the lab results",
        source,
    })?;
    let statuses = db::lab::status(&**conn, &Sql::new(schema), LAB_QUEUE)
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
    let sql = Sql::new(client.schema());
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
                    sql.get(Statement::LabClaimNaive)
                } else {
                    sql.get(Statement::LabClaimForUpdate)
                };
                db::lab::claim_with(c, stmt, LAB_QUEUE, i64::from(opts.batch))
                    .await
                    .map_err(Error::db("run a lab claim"))?
            }
            ClaimMethod::SkipLocked => {
                let jobs = db::job::claim(c, &sql, LAB_QUEUE, i64::from(opts.batch), 300_000_000)
                    .await
                    .map_err(Error::db("claim jobs"))?;
                let mut got = Vec::with_capacity(jobs.len());
                for j in jobs {
                    if !db::job::complete(c, &sql, j.id, j.attempt)
                        .await
                        .map_err(Error::db("complete a job"))?
                        .is_applied()
                    {
                        out.lost += 1;
                    }
                    got.push((j.id.0, j.attempt));
                }
                got
            }
        };
        if got.is_empty() && opts.stop == Stop::WhenEmpty {
            break;
        }
        out.taken.extend(got.into_iter().map(|(id, _)| id));
    }
    Ok(out)
}
