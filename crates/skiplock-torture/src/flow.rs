//! `skiplock-torture flow`: workflows whose handlers have effects in the database, exactly
//! once, under `kill -9` and SIGSTOP.
//!
//! A private PostgreSQL (with `track_commit_timestamp`, for the order check), the queue's
//! schema and an application table `effects`; worker processes (`worker --flow`) whose
//! handler checks in its own transaction that the job's parents are done, writes one effect,
//! pauses a few milliseconds and completes the job in that transaction
//! (`JobContext::complete_tx`). Meanwhile: chains, diamonds, a fan-out of 10,000 children
//! (and a fan-in after some of them) enqueued as workflows, and jobs enqueued after existing
//! ones (`NewJob::after`), spread over the run; workers killed (`kill -9`, restarted) and
//! stopped (SIGSTOP for longer than the lease, then SIGCONT: their stale attempts resume and
//! their completions must be refused). Then, once every job is done: the accounting
//! (`flow_check`).
//!
//! An enqueue the database ends with a deadlock (40P01) is repeated and counted: enqueueing
//! a job after a parent and that parent's child can deadlock with the parent's completion
//! (migration 13 locks the parents that have no children yet before the others).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use skiplock::{Client, JobId, NewJob, Workflow};

use crate::faults::Rng;
use crate::flow_check::{self, Expected, Faults};
use crate::flow_job::{self, FlowStep};
use crate::orchestrate::{start_cluster, ClusterGuard, Proc};

/// The run's schema (the harness's statements name it).
const SCHEMA: &str = "torture";

const INSTALL: &str = include_str!("../queries/flow_install.sql");
const STATES: &str = include_str!("../queries/flow_states.sql");

#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long to inject faults (enqueueing spreads over the first 60% of it).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    duration: Duration,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Chains (each job after the one before it).
    #[arg(long, default_value_t = 20)]
    chains: usize,
    /// Jobs per chain.
    #[arg(long, default_value_t = 50)]
    chain_len: usize,
    /// Diamonds (A, then B and C after A, then D after B and C).
    #[arg(long, default_value_t = 200)]
    diamonds: usize,
    /// Children of the fan-out's one parent (0: no fan-out).
    #[arg(long, default_value_t = 10_000)]
    fan_out: usize,
    /// The fan-in job waits for this many of the fan-out's children (0: none).
    #[arg(long, default_value_t = 100)]
    fan_in: usize,
    /// Jobs enqueued after existing ones (`NewJob::after`), per round after the first.
    #[arg(long, default_value_t = 30)]
    grafts: usize,
    /// Rounds of enqueueing.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// The negative control: the handler commits its effect on its own and the worker
    /// completes the job separately; the accounting must find duplicate effects.
    #[arg(long)]
    no_tx: bool,
    /// Inject no fault (a baseline run).
    #[arg(long)]
    no_faults: bool,
    /// How long to wait, after the faults, for every job to be done before failing.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "150s")]
    settle_timeout: Duration,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON too.
    #[arg(long)]
    json: bool,
    /// Keep the run's folder (database, logs) afterwards.
    #[arg(long)]
    keep: bool,
}

/// How long a stopped worker stays stopped: its leases expire, the reaper hands its jobs
/// to the other workers, and they usually finish them before it resumes.
fn stop_for(rng: &mut Rng) -> Duration {
    flow_job::LEASE * 2 + Duration::from_millis(1000 + rng.below(1500))
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    if args.workers < 2 {
        bail!("--workers: at least 2 (one is killed or stopped while the others run)");
    }
    let dir = std::env::temp_dir().join(format!("skiplock-torture-flow-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (cluster, port) = start_cluster(&dir, &[("track_commit_timestamp", "on")])?;
    let guard = ClusterGuard(cluster, dir.clone(), args.keep);
    let url = skiplock_embedded::LocalCluster::url(port, "postgres");
    println!(
        "skiplock-torture flow: {} chains of {}, {} diamonds, a fan-out of {} (fan-in after {}), \
         {} jobs after existing ones per round, {} rounds; {} worker processes, {:?}, seed {}, {}{}",
        args.chains,
        args.chain_len,
        args.diamonds,
        args.fan_out,
        args.fan_in,
        args.grafts,
        args.rounds,
        args.workers,
        args.duration,
        args.seed,
        if args.no_faults {
            "no faults"
        } else {
            "faults: kill -9, SIGSTOP"
        },
        if args.no_tx {
            " (--no-tx: the negative control)"
        } else {
            ""
        },
    );
    let admin = Client::builder(&url)
        .schema(SCHEMA)
        .pool_size(4)
        .application_name("torture-orchestrator")
        .build()?;
    // The enqueuer's own client, in the server's stock configuration.
    let enqueuer_client = Client::builder(&url)
        .schema(SCHEMA)
        .pool_size(2)
        .application_name("torture-enqueuer")
        .build()?;
    admin.migrate().await?;
    admin
        .pool()
        .get()
        .await?
        .batch_execute(INSTALL)
        .await
        .context("could not create the application's tables")?;

    let mut fleet = Fleet(worker_processes(&args, &dir, &url)?);
    let procs = &mut fleet.0;
    for p in procs.iter_mut() {
        p.start()?;
    }
    let started = Instant::now();
    let plan = Plan::from(&args);
    let enqueuer = tokio::spawn(plan.enqueue(enqueuer_client));
    let faults = inject_faults(&args, procs, started).await?;
    let expected = enqueuer
        .await
        .context("the enqueuer panicked")?
        .context("enqueueing failed")?;
    let (settled, settle_took) = settle(&admin, procs, args.settle_timeout).await?;
    for p in procs.iter_mut() {
        p.signal("-CONT");
        p.signal("-TERM");
    }
    for p in procs.iter_mut() {
        p.wait(Duration::from_secs(20));
    }

    let logs: Vec<_> = (0..args.workers)
        .map(|i| dir.join(format!("flow-{i}.log")))
        .collect();
    let faults = Faults {
        workers: args.workers,
        restarts: procs.iter().map(|p| p.starts.saturating_sub(1)).sum(),
        lease_lost: logs.iter().map(|l| flow_job::lease_lost_in(l)).sum(),
        ..faults
    };
    let report = flow_check::check(&admin, &expected).await?;
    let ok = report.print(
        &expected,
        &faults,
        settled,
        started.elapsed(),
        settle_took,
        args.json,
    );
    drop(admin);
    drop(guard);
    if args.keep {
        println!("kept {}", dir.display());
    }
    if !ok {
        bail!(
            "the flow accounting failed: {}",
            report.failed_checks().join(", ")
        );
    }
    Ok(())
}

/// The worker processes; whichever way the run ends, none is left behind (stopped or not).
struct Fleet(Vec<Proc>);

impl Drop for Fleet {
    fn drop(&mut self) {
        for p in self.0.iter_mut() {
            if p.alive() {
                p.signal("-CONT");
                p.signal("-KILL");
                p.wait(Duration::from_secs(5));
            }
        }
    }
}

/// The worker processes, not started yet.
fn worker_processes(args: &Args, dir: &Path, url: &str) -> anyhow::Result<Vec<Proc>> {
    let exe = std::env::current_exe()?;
    Ok((0..args.workers)
        .map(|i| {
            let mut cmd = vec![
                exe.display().to_string(),
                "worker".into(),
                "--flow".into(),
                "--url".into(),
                url.to_owned(),
                "--schema".into(),
                SCHEMA.into(),
                "--log".into(),
                dir.join(format!("flow-{i}.log")).display().to_string(),
                "--name".into(),
                format!("flow-{i}"),
            ];
            if args.no_tx {
                cmd.push("--no-tx".into());
            }
            Proc {
                name: format!("flow-{i}"),
                cmd,
                env: vec![("RUST_LOG".into(), "warn".into())],
                out: dir.join(format!("flow-{i}.out")),
                child: None,
                starts: 0,
            }
        })
        .collect())
}

/// Kills and stops at random moments (seeded) until the duration is over; a worker found
/// down is restarted first.
async fn inject_faults(
    args: &Args,
    procs: &mut [Proc],
    started: Instant,
) -> anyhow::Result<Faults> {
    let mut rng = Rng::new(args.seed);
    let mut faults = Faults::default();
    while started.elapsed() < args.duration {
        tokio::time::sleep(Duration::from_millis(800 + rng.below(1700))).await;
        for p in procs.iter_mut() {
            if !p.alive() {
                p.start()?;
            }
        }
        if args.no_faults {
            continue;
        }
        let i = rng.below(procs.len() as u64) as usize;
        if rng.chance(650) {
            procs[i].signal("-KILL");
            procs[i].wait(Duration::from_secs(5));
            faults.kills += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
            procs[i].start()?;
        } else {
            let pause = stop_for(&mut rng);
            procs[i].signal("-STOP");
            tokio::time::sleep(pause).await;
            procs[i].signal("-CONT");
            faults.stops += 1;
            faults.stopped_for += pause;
        }
    }
    Ok(faults)
}

/// Every worker up until no job is queued or running, for at most `bound`. Returns whether
/// every job is done, and how long the wait took.
async fn settle(
    admin: &Client,
    procs: &mut [Proc],
    bound: Duration,
) -> anyhow::Result<(bool, Duration)> {
    let since = Instant::now();
    loop {
        for p in procs.iter_mut() {
            if !p.alive() {
                p.start()?;
            }
        }
        let conn = admin.pool().get().await?;
        let states: Vec<(String, String, i64)> = conn
            .query(STATES, &[])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        drop(conn);
        let active: i64 = states
            .iter()
            .filter(|(s, _, _)| s == "queued" || s == "running")
            .map(|(_, _, n)| n)
            .sum();
        let not_done: i64 = states
            .iter()
            .filter(|(s, _, _)| s != "done")
            .map(|(_, _, n)| n)
            .sum();
        if active == 0 {
            return Ok((not_done == 0, since.elapsed()));
        }
        if since.elapsed() > bound {
            let left: Vec<String> = states
                .iter()
                .filter(|(s, _, _)| s != "done")
                .map(|(s, h, n)| {
                    if h.is_empty() {
                        format!("{n} {s}")
                    } else {
                        format!("{n} {s} (held: {h})")
                    }
                })
                .collect();
            println!(
                "\nTIMEOUT: {not_done} jobs not done {:.0} s after the faults stopped: {}",
                bound.as_secs_f64(),
                left.join(", ")
            );
            return Ok((false, since.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What the enqueuer does, round by round.
struct Plan {
    chains: usize,
    chain_len: usize,
    diamonds: usize,
    fan_out: usize,
    fan_in: usize,
    grafts: usize,
    rounds: usize,
    gap: Duration,
    seed: u64,
}

impl Plan {
    fn from(args: &Args) -> Self {
        let rounds = args.rounds.max(1);
        Plan {
            chains: args.chains,
            chain_len: args.chain_len,
            diamonds: args.diamonds,
            fan_out: args.fan_out,
            fan_in: args.fan_in.min(args.fan_out),
            grafts: args.grafts,
            rounds,
            gap: args.duration.mul_f64(0.6).div_f64(rounds as f64),
            seed: args.seed,
        }
    }

    /// Enqueues every round, `gap` apart; returns each job's parents as enqueued.
    async fn enqueue(self, client: Client) -> anyhow::Result<Expected> {
        let mut rng = Rng::new(self.seed.wrapping_add(11));
        let mut expected = Expected::default();
        let mut tag = 0u64;
        let mut step = |shape: &'static str, parents: usize| {
            tag += 1;
            NewJob::of(&FlowStep {
                shape: shape.into(),
                tag,
                parents: parents as u32,
            })
        };
        for round in 0..self.rounds {
            let at = Instant::now();
            // Chains, spread over the rounds.
            for _ in (0..self.chains).filter(|c| c % self.rounds == round) {
                let mut flow = Workflow::new();
                let mut parents = Vec::new();
                let mut prev = None;
                for _ in 0..self.chain_len {
                    let s = match prev {
                        None => flow.add(step("chain", 0)),
                        Some(p) => flow.add_after(step("chain", 1), &[p]),
                    };
                    parents.push(prev.into_iter().collect::<Vec<_>>());
                    prev = Some(s);
                }
                expected
                    .add_workflow(&client, &flow, &parents, "chain")
                    .await?;
            }
            // Diamonds, a share of them in one workflow.
            let (from, to) = (
                self.diamonds * round / self.rounds,
                self.diamonds * (round + 1) / self.rounds,
            );
            if to > from {
                let mut flow = Workflow::new();
                let mut parents = Vec::new();
                for _ in from..to {
                    let a = flow.add(step("diamond", 0));
                    let b = flow.add_after(step("diamond", 1), &[a]);
                    let c = flow.add_after(step("diamond", 1), &[a]);
                    flow.add_after(step("diamond", 2), &[b, c]);
                    parents.extend([vec![], vec![a], vec![a], vec![b, c]]);
                }
                expected
                    .add_workflow(&client, &flow, &parents, "diamond")
                    .await?;
            }
            // The fan-out: one parent, its children, and a fan-in after some of them; in the
            // first round, so that most of the children run while the faults are injected.
            if round == 0 && self.fan_out > 0 {
                let mut flow = Workflow::new();
                let mut parents = Vec::new();
                let p = flow.add(step("fan-out parent", 0));
                parents.push(vec![]);
                let mut children = Vec::with_capacity(self.fan_out);
                for _ in 0..self.fan_out {
                    children.push(flow.add_after(step("fan-out child", 1), &[p]));
                    parents.push(vec![p]);
                }
                if self.fan_in > 0 {
                    let some = &children[..self.fan_in];
                    flow.add_after(step("fan-in", some.len()), some);
                    parents.push(some.to_vec());
                }
                let t = Instant::now();
                expected
                    .add_workflow(&client, &flow, &parents, "fan-out")
                    .await?;
                println!(
                    "  fan-out of {} enqueued in {:.1} s",
                    self.fan_out,
                    t.elapsed().as_secs_f64()
                );
            }
            // Jobs after existing ones (done, running or still waiting), half one by one with
            // `NewJob::after`, half in a workflow that mixes existing ids and its own steps.
            if round > 0 && !expected.ids.is_empty() {
                let mut flow = Workflow::new();
                let mut parents = Vec::new();
                let mut last = None;
                for g in 0..self.grafts {
                    let n = 1 + rng.below(3) as usize;
                    let existing = expected.pick(&mut rng, n);
                    if g % 2 == 0 {
                        let job = step("after existing", existing.len()).after(existing.clone());
                        let id = retry_deadlocks(&mut expected.deadlocks, || client.enqueue(&job))
                            .await
                            .context("enqueue a job after existing ones")?;
                        expected.add(id.0, existing.iter().map(|p| p.0).collect(), "after");
                        continue;
                    }
                    let mut job = |n| step("after existing", n).after(existing.clone());
                    let s = match last {
                        Some(prev) if g % 4 == 3 => {
                            let s = flow.add_after(job(existing.len() + 1), &[prev]);
                            parents.push(vec![prev]);
                            s
                        }
                        _ => {
                            let s = flow.add(job(existing.len()));
                            parents.push(vec![]);
                            s
                        }
                    };
                    expected.pending_existing(s, existing);
                    last = Some(s);
                }
                expected
                    .add_workflow(&client, &flow, &parents, "after")
                    .await?;
            }
            if round + 1 < self.rounds {
                tokio::time::sleep(self.gap.saturating_sub(at.elapsed())).await;
            }
        }
        Ok(expected)
    }
}

/// Runs `f` again while it fails with a deadlock (the database rolled it back, so that
/// repeating it is safe), counting them; at most 100 times in a run.
async fn retry_deadlocks<T, F, Fut>(deadlocks: &mut u32, mut f: F) -> skiplock::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = skiplock::Result<T>>,
{
    loop {
        match f().await {
            Err(e)
                if e.code() == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
                    && *deadlocks < 100 =>
            {
                *deadlocks += 1;
                eprintln!(
                    "torture: enqueue retried after a deadlock: {}",
                    e.detail_line()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

/// An error on one line, with the database's detail.
trait DetailLine {
    fn detail_line(&self) -> String;
}

impl DetailLine for skiplock::Error {
    fn detail_line(&self) -> String {
        let mut s = self.to_string();
        let mut cur = std::error::Error::source(self);
        while let Some(c) = cur {
            s.push_str(": ");
            s.push_str(&c.to_string());
            cur = c.source();
        }
        s.replace('\n', " ")
    }
}

impl Expected {
    /// Picks `n` distinct ids among those enqueued, most of them among the last 2,000 (jobs
    /// likely not done yet).
    fn pick(&self, rng: &mut Rng, n: usize) -> Vec<JobId> {
        let all = &self.ids;
        let mut out: Vec<JobId> = Vec::new();
        for _ in 0..n * 4 {
            if out.len() == n {
                break;
            }
            let i = if rng.chance(700) {
                all.len() - 1 - rng.below(all.len().min(2000) as u64) as usize
            } else {
                rng.below(all.len() as u64) as usize
            };
            let id = JobId(all[i]);
            if !out.contains(&id) {
                out.push(id);
            }
        }
        out
    }

    fn add(&mut self, id: i64, mut parents: Vec<i64>, group: &'static str) {
        parents.sort_unstable();
        self.parents.insert(id, parents);
        self.ids.push(id);
        *self.groups.entry(group).or_default() += 1;
    }

    /// Enqueues `flow`, whose step `i` waits for the steps `parents[i]` (and for the existing
    /// jobs noted with `pending_existing`), and records each job's parents by id.
    async fn add_workflow(
        &mut self,
        client: &Client,
        flow: &Workflow,
        parents: &[Vec<skiplock::Step>],
        group: &'static str,
    ) -> anyhow::Result<()> {
        if flow.is_empty() {
            return Ok(());
        }
        let ids = retry_deadlocks(&mut self.deadlocks, || client.enqueue_workflow(flow))
            .await
            .with_context(|| format!("enqueue a workflow ({group}, {} jobs)", flow.len()))?;
        if ids.len() != flow.len() {
            bail!(
                "enqueue_workflow returned {} ids for {} jobs",
                ids.len(),
                flow.len()
            );
        }
        let mut existing: BTreeMap<usize, Vec<JobId>> = std::mem::take(&mut self.existing);
        for (i, id) in ids.iter().enumerate() {
            let mut p: Vec<i64> = parents[i].iter().map(|s| ids[s.index()].0).collect();
            p.extend(existing.remove(&i).unwrap_or_default().iter().map(|j| j.0));
            self.add(id.0, p, group);
        }
        Ok(())
    }

    /// Notes that workflow step `s` (of the workflow being built) also waits for `existing`.
    fn pending_existing(&mut self, s: skiplock::Step, existing: Vec<JobId>) {
        self.existing.insert(s.index(), existing);
    }
}
