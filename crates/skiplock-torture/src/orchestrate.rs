//! The run: a private PostgreSQL, worker processes, an enqueuer, the fault injector, and at
//! the end the accounting.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use skiplock::{Client, NewJob};
use skiplock_embedded::{LocalCluster, StartOptions};
use skiplock_testdb::proxy::{Flow, Select};
use skiplock_testdb::FaultProxy;

use crate::check::{self, Expected};
use crate::faults::{Fault, Rng, Tally};
use crate::jobs::{Slow, Spec, Typed};

const SCHEMA: &str = "torture";

/// How far ahead the skewed worker's clock is (FAKETIME below says the same).
const SKEW: Duration = Duration::from_secs(2 * 3600);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long to inject faults (enqueueing spreads over most of it), e.g. 45s, 30m.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    duration: Duration,
    /// Jobs to enqueue.
    #[arg(long, default_value_t = 5_000)]
    jobs: u64,
    /// Worker processes with typed handlers.
    #[arg(long, default_value_t = 2)]
    typed_workers: usize,
    /// `skiplock work --exec` worker processes.
    #[arg(long, default_value_t = 2)]
    exec_workers: usize,
    /// Faults to inject (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<Fault>,
    /// Inject no fault (a baseline run).
    #[arg(long, conflicts_with = "faults")]
    no_faults: bool,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON too.
    #[arg(long)]
    json: bool,
    /// Keep the run's folder (database, logs) afterwards.
    #[arg(long)]
    keep: bool,
    /// The negative control: typed workers write outcomes and heartbeats without the
    /// attempts fence, so stale workers' writes land; the accounting must then fail.
    #[arg(long)]
    unfenced: bool,
}

/// A worker process of the run: how to start it, and the running one (if any).
pub(crate) struct Proc {
    pub(crate) name: String,
    pub(crate) cmd: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    /// Where its stdout and stderr go (appended to across restarts).
    pub(crate) out: PathBuf,
    pub(crate) child: Option<Child>,
    /// How many times it was started.
    pub(crate) starts: u32,
}

impl Proc {
    pub(crate) fn start(&mut self) -> anyhow::Result<()> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.out)?;
        let child = Command::new(&self.cmd[0])
            .args(&self.cmd[1..])
            .envs(self.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("could not start {}", self.cmd[0]))?;
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    pub(crate) fn alive(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub(crate) fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    pub(crate) fn wait(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.alive() {
            self.signal("-KILL");
        }
        if let Some(c) = &mut self.child {
            let _ = c.wait();
        }
        self.child = None;
    }
}

/// Stops the private cluster however the run ends.
pub(crate) struct ClusterGuard(pub(crate) LocalCluster, pub(crate) PathBuf, pub(crate) bool);

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        let _ = self.0.stop(true);
        if !self.2 {
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let faults = chosen_faults(&args);
    let has = |f: Fault| faults.contains(&f);
    let dir = std::env::temp_dir().join(format!("skiplock-torture-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (cluster, port) = start_cluster(&dir, &[])?;
    let guard = ClusterGuard(cluster.clone(), dir.clone(), args.keep);
    let url = LocalCluster::url(port, "postgres");
    print_plan(&args, &faults);
    let admin = prepare_schema(&url).await?;

    // The worker processes.
    // Clock skew without a wrapper process (so that `kill -9` reaches the worker itself):
    // libfaketime preloaded, wall clock two hours ahead, monotonic clock untouched.
    let faketime = has(Fault::Skew).then(libfaketime).flatten();
    // With network faults, each worker process talks to the server through a proxy of its
    // own, so that one worker can be cut off while the others run.
    let mut proxies = Vec::new();
    if faults.iter().any(|f| f.is_network()) {
        for _ in 0..args.typed_workers + args.exec_workers {
            proxies.push(FaultProxy::for_url(&url).await?);
        }
    }
    let (mut procs, logs) = worker_processes(&args, &dir, &url, faketime.as_deref(), &proxies)?;
    for p in &mut procs {
        p.start()?;
    }

    let started = Instant::now();
    let slow = has(Fault::Slow);
    let (enqueuer, mut rx) = spawn_enqueuer(&args, admin.clone(), slow);
    let mut tally = Tally::default();
    if faketime.is_some() {
        tally.add(Fault::Skew);
    }
    let server = Server {
        url: &url,
        cluster: &cluster,
        port,
        proxies: &proxies,
    };
    inject_faults(&args, &faults, &server, &mut procs, started, &mut tally).await?;
    enqueuer.await.context("the enqueuer failed")?;
    let mut expected = Expected::default();
    while let Ok(batch) = rx.try_recv() {
        for (n, spec, kind) in batch {
            expected.jobs.insert(n, (spec, kind));
        }
    }

    let quiesce_took = quiesce(&admin, &mut procs).await?;
    if slow {
        tally.add(Fault::Slow);
    }

    let report = check::check(&admin, &expected, &logs).await?;
    let restarts: BTreeMap<String, u32> = procs
        .iter()
        .map(|p| (p.name.clone(), p.starts.saturating_sub(1)))
        .collect();
    let ok = report.print(
        &tally,
        &restarts,
        started.elapsed(),
        quiesce_took,
        args.json,
    );
    if !proxies.is_empty() {
        print_network(&proxies, &procs);
    }
    drop(guard);
    if !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("kept {}", dir.display());
    }
    if !ok {
        bail!("the accounting found violations (see above)");
    }
    Ok(())
}

/// The faults the run injects: those asked for, all by default, none with `--no-faults`.
fn chosen_faults(args: &Args) -> Vec<Fault> {
    if args.no_faults {
        Vec::new()
    } else if args.faults.is_empty() {
        Fault::all()
    } else {
        args.faults.clone()
    }
}

/// The run's own PostgreSQL, in `dir/pg`, started with `extra` settings besides its own;
/// returns it and its port.
pub(crate) fn start_cluster(
    dir: &Path,
    extra: &[(&str, &str)],
) -> anyhow::Result<(LocalCluster, u16)> {
    let cluster = LocalCluster::new(dir.join("pg"))?;
    cluster.init()?;
    let mut settings = vec![("max_connections".to_owned(), "300".to_owned())];
    settings.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let port = cluster.start(&StartOptions {
        port: None,
        unsafe_fast: false,
        settings,
    })?;
    Ok((cluster, port))
}

/// The run's first line: what it is about to do.
fn print_plan(args: &Args, faults: &[Fault]) {
    println!(
        "skiplock-torture: {} jobs, {:?}, {} typed + {} exec workers, seed {}, faults: {}",
        args.jobs,
        args.duration,
        args.typed_workers,
        args.exec_workers,
        args.seed,
        if faults.is_empty() {
            "none".to_owned()
        } else {
            faults
                .iter()
                .map(|f| format!("{f:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
}

/// The orchestrator's client on the run's schema, migrated, with the completion audit and
/// the lease audit installed.
async fn prepare_schema(url: &str) -> anyhow::Result<Client> {
    let admin = Client::builder(url)
        .schema(SCHEMA)
        .pool_size(4)
        .application_name("torture-orchestrator")
        .build()?;
    admin.migrate().await?;
    skiplock_bench::lab::install_completion_audit(&admin).await?;
    admin
        .pool()
        .get()
        .await?
        .batch_execute(check::LEASE_AUDIT_INSTALL)
        .await
        .context("could not install the lease audit")?;
    Ok(admin)
}

/// The worker processes (typed ones first, then `skiplock work --exec` ones), not started
/// yet, and each one's execution log with its clock offset in milliseconds.
fn worker_processes(
    args: &Args,
    dir: &Path,
    url: &str,
    faketime: Option<&Path>,
    proxies: &[FaultProxy],
) -> anyhow::Result<(Vec<Proc>, Logs)> {
    // Worker `i`'s URL: through its proxy when there are proxies.
    let url_of = |i: usize| -> anyhow::Result<String> {
        match proxies.get(i) {
            Some(p) => Ok(p.url(url)?),
            None => Ok(url.to_owned()),
        }
    };
    let exe = std::env::current_exe()?;
    let skiplock_bin = exe.with_file_name("skiplock");
    if !skiplock_bin.is_file() {
        bail!(
            "{} not found: build the skiplock command first",
            skiplock_bin.display()
        );
    }
    let mut procs = Vec::new();
    let mut logs = Vec::new();
    for i in 0..args.typed_workers {
        let log = dir.join(format!("typed-{i}.log"));
        let mut env = vec![("RUST_LOG".to_owned(), WORKER_LOG.to_owned())];
        let mut offset_ms = 0;
        if i == 0 {
            if let Some(lib) = faketime {
                offset_ms = SKEW.as_millis() as i64;
                env.push(("LD_PRELOAD".to_owned(), lib.display().to_string()));
                env.push(("FAKETIME".to_owned(), "+2h".to_owned()));
                env.push(("FAKETIME_DONT_FAKE_MONOTONIC".to_owned(), "1".to_owned()));
            }
        }
        let mut cmd = Vec::new();
        cmd.extend([
            exe.display().to_string(),
            "worker".into(),
            "--url".into(),
            url_of(i)?,
            "--schema".into(),
            SCHEMA.into(),
            "--log".into(),
            log.display().to_string(),
            "--name".into(),
            format!("typed-{i}"),
        ]);
        if args.unfenced {
            cmd.push("--unfenced".into());
        }
        procs.push(Proc {
            name: format!("typed-{i}"),
            cmd,
            env,
            out: dir.join(format!("typed-{i}.out")),
            child: None,
            starts: 0,
        });
        logs.push((log, offset_ms));
    }
    for i in 0..args.exec_workers {
        let log = dir.join(format!("exec-{i}.log"));
        let cmd = vec![
            skiplock_bin.display().to_string(),
            "--database-url".into(),
            url_of(args.typed_workers + i)?,
            "--schema".into(),
            SCHEMA.into(),
            "work".into(),
            "--queue".into(),
            "exec=4".into(),
            "--lease".into(),
            "3s".into(),
            "--poll-interval".into(),
            "1s".into(),
            "--reap-interval".into(),
            "1s".into(),
            "--retry-base".into(),
            "200ms".into(),
            "--retry-cap".into(),
            "2s".into(),
            "--shutdown-timeout".into(),
            "2s".into(),
            "--exec".into(),
            exe.display().to_string(),
            "exec-job".into(),
            "--log".into(),
            log.display().to_string(),
        ];
        procs.push(Proc {
            name: format!("exec-{i}"),
            cmd,
            env: vec![("RUST_LOG".into(), WORKER_LOG.into())],
            out: dir.join(format!("exec-{i}.out")),
            child: None,
            starts: 0,
        });
        logs.push((log, 0));
    }
    Ok((procs, logs))
}

/// The workers' log filter: warnings, and the completer's note of an outcome read back after
/// a lost reply (counted at the end).
const WORKER_LOG: &str = "warn,skiplock::worker::completer=info";

/// What the workers' logs say they noticed of the network faults: (label, text, count).
const NOTICED: [(&str, &str); 4] = [
    (
        "outcomes read back after a lost reply",
        "outcome found written by an earlier try whose reply was lost",
    ),
    (
        "statements abandoned without a reply",
        "no reply from the database in time",
    ),
    (
        "silent LISTEN connections replaced",
        "LISTEN connection went silent",
    ),
    (
        "outcome writes that gave up",
        "their leases will expire and the reaper will retry them",
    ),
];

/// The proxies' figures and what the workers noticed, from their output.
fn print_network(proxies: &[FaultProxy], procs: &[Proc]) {
    println!("\nnetwork faults (proxies in front of the workers)");
    let line = |label: &str, v: u64| println!("  {label:<52} {v:>10}");
    line(
        "connections through the proxies",
        proxies.iter().map(FaultProxy::accepted).sum(),
    );
    line(
        "replies swallowed",
        proxies.iter().map(FaultProxy::swallowed).sum(),
    );
    line(
        "connections reset (RST)",
        proxies.iter().map(FaultProxy::resets).sum(),
    );
    let text: String = procs
        .iter()
        .filter_map(|p| std::fs::read_to_string(&p.out).ok())
        .collect();
    for (label, needle) in NOTICED {
        line(label, text.matches(needle).count() as u64);
    }
}

/// Each worker process's execution log, and its clock's offset in milliseconds.
type Logs = Vec<(PathBuf, i64)>;

/// A batch of jobs as enqueued: each one's number, spec and kind.
type Batch = Vec<(u64, Spec, &'static str)>;

/// The enqueuer: batches spread over 70% of the duration, each batch's fate known, each sent
/// on the receiver once enqueued.
fn spawn_enqueuer(
    args: &Args,
    enq_admin: Client,
    slow: bool,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::mpsc::UnboundedReceiver<Batch>,
) {
    let enqueue_for = args.duration.mul_f64(0.7);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Batch>();
    let total = args.jobs;
    let seed = args.seed;
    let enqueuer = tokio::spawn(async move {
        let mut rng = Rng::new(seed.wrapping_add(7));
        let batch = 100u64;
        let batches = total.div_ceil(batch).max(1);
        let gap = enqueue_for.div_f64(batches as f64);
        let mut n = 0u64;
        while n < total {
            let upto = (n + batch).min(total);
            let specs: Vec<(u64, Spec, &'static str)> = (n..upto)
                .map(|i| {
                    let roll = rng.below(1000);
                    let mut s = Spec {
                        n: i,
                        ms: rng.below(20),
                        ..Spec::default()
                    };
                    let exec = rng.chance(500);
                    let kind = if slow && !exec && roll < 20 {
                        s.slow_first = true;
                        "slow"
                    } else if exec {
                        "exec"
                    } else {
                        "typed"
                    };
                    if (20..100).contains(&roll) {
                        s.fail = 1 + (roll % 2) as u32;
                    } else if (100..115).contains(&roll) && kind == "typed" {
                        s.permanent = true;
                    }
                    (i, s, kind)
                })
                .collect();
            let jobs: Vec<NewJob> = specs
                .iter()
                .map(|(_, s, kind)| {
                    match *kind {
                        "typed" => NewJob::of(&Typed(s.clone())),
                        "slow" => NewJob::of(&Slow(s.clone())),
                        _ => NewJob::new("exec", s).queue("exec"),
                    }
                    .max_attempts(25)
                })
                .collect();
            // Enqueue; when the outcome is unknown (an error), look before retrying.
            loop {
                match enq_admin.enqueue_many(&jobs).await {
                    Ok(_) => break,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        if let Ok(found) = count_range(&enq_admin, n, upto).await {
                            if found == upto - n {
                                break;
                            }
                            if found != 0 {
                                eprintln!(
                                    "torture: a batch was half enqueued ({found} of {})",
                                    upto - n
                                );
                                break;
                            }
                        }
                    }
                }
            }
            if tx.send(specs).is_err() {
                return;
            }
            n = upto;
            tokio::time::sleep(gap).await;
        }
    });
    (enqueuer, rx)
}

/// The run's server: its URL, the cluster to crash and restart on its port, and the proxy
/// in front of each worker process (none without network faults).
struct Server<'a> {
    url: &'a str,
    cluster: &'a LocalCluster,
    port: u16,
    proxies: &'a [FaultProxy],
}

/// How long a partition lasts: longer than either kind of worker's lease (3 s).
const PARTITION: Duration = Duration::from_secs(5);

/// How long black-holed connections are left before they are reset (as the kernel's
/// keepalives would end them).
const HALF_OPEN_FOR: Duration = Duration::from_secs(15);

/// The piece of the outcome statement's text the reply loss waits for.
const FINISH_MARK: &[u8] = b"WITH ORDINALITY AS o(id, attempt, outcome";

/// Faults at random moments (seeded) until the duration is over; a worker found down is
/// restarted first. Waits for the last bystander to end.
async fn inject_faults(
    args: &Args,
    faults: &[Fault],
    server: &Server<'_>,
    procs: &mut [Proc],
    started: Instant,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let mut rng = Rng::new(args.seed);
    let mut last_restart = Instant::now();
    let mut bystander: Option<(tokio::task::JoinHandle<()>, Instant)> = None;
    // Black-holed connections to reset later: (when, which proxy).
    let mut held: Vec<(Instant, usize)> = Vec::new();
    let injectable: Vec<Fault> = faults
        .iter()
        .copied()
        .filter(|f| !matches!(f, Fault::Skew | Fault::Slow))
        .filter(|f| !f.is_network() || !server.proxies.is_empty())
        .collect();
    while started.elapsed() < args.duration {
        tokio::time::sleep(Duration::from_millis(1500 + rng.below(2500))).await;
        held.retain(|&(at, i)| {
            if at <= Instant::now() {
                server.proxies[i].reset(&Select::Held);
                false
            } else {
                true
            }
        });
        for p in procs.iter_mut() {
            if !p.alive() {
                p.start()?;
            }
        }
        if injectable.is_empty() {
            continue;
        }
        let f = injectable[rng.below(injectable.len() as u64) as usize];
        match f {
            Fault::Kill9 => {
                let i = rng.below(procs.len() as u64) as usize;
                procs[i].signal("-KILL");
                procs[i].wait(Duration::from_secs(5));
                tokio::time::sleep(Duration::from_millis(300)).await;
                procs[i].start()?;
            }
            Fault::Sigterm => {
                let i = rng.below(procs.len() as u64) as usize;
                procs[i].signal("-TERM");
                procs[i].wait(Duration::from_secs(15));
                procs[i].start()?;
            }
            Fault::Terminate => {
                let _ = terminate_some(server.url).await;
            }
            Fault::Restart => {
                if last_restart.elapsed() < Duration::from_secs(20) {
                    continue;
                }
                last_restart = Instant::now();
                server.cluster.stop(true)?;
                tokio::time::sleep(Duration::from_millis(500)).await;
                server.cluster.start(&StartOptions {
                    port: Some(server.port),
                    unsafe_fast: false,
                    settings: vec![("max_connections".into(), "300".into())],
                })?;
            }
            Fault::IdleTx => {
                if bystander
                    .as_ref()
                    .is_some_and(|(_, t)| t.elapsed() < Duration::from_secs(10))
                {
                    continue;
                }
                let url = server.url.to_owned();
                bystander = Some((
                    tokio::spawn(async move {
                        let _ = hold_idle_transaction(&url, Duration::from_secs(8)).await;
                    }),
                    Instant::now(),
                ));
            }
            Fault::ReplyLoss => {
                let i = rng.below(server.proxies.len() as u64) as usize;
                if server.proxies[i].armed() {
                    continue;
                }
                server.proxies[i].swallow_reply_after(FINISH_MARK, Duration::from_millis(300));
            }
            Fault::HalfOpen | Fault::ListenDrop => {
                let i = rng.below(server.proxies.len() as u64) as usize;
                let select = if f == Fault::HalfOpen {
                    Select::All
                } else {
                    Select::Startup("skiplock-listener".into())
                };
                if server.proxies[i].set(&select, Flow::Hold, Flow::Hold) == 0 {
                    continue;
                }
                held.push((Instant::now() + HALF_OPEN_FOR, i));
            }
            Fault::Partition => {
                let i = rng.below(server.proxies.len() as u64) as usize;
                server.proxies[i].partition();
                tokio::time::sleep(PARTITION).await;
                server.proxies[i].heal();
            }
            Fault::Reset => {
                let i = rng.below(server.proxies.len() as u64) as usize;
                server.proxies[i].reset(&Select::All);
            }
            Fault::Skew | Fault::Slow => {}
        }
        tally.add(f);
    }
    for (_, i) in held {
        server.proxies[i].reset(&Select::Held);
    }
    if let Some((h, _)) = bystander {
        let _ = h.await;
    }
    Ok(())
}

/// Every worker up until every job is terminal (for at most 3 minutes), then every worker
/// stopped. Returns how long the wait took.
async fn quiesce(admin: &Client, procs: &mut [Proc]) -> anyhow::Result<Duration> {
    // Quiesce: every worker up, every job terminal.
    for p in procs.iter_mut() {
        if !p.alive() {
            p.start()?;
        }
    }
    let quiesce = Instant::now();
    let bound = Duration::from_secs(180);
    loop {
        match pending(admin).await {
            Ok(0) => break,
            Ok(n) if quiesce.elapsed() > bound => {
                eprintln!("torture: {n} jobs still not finished after {bound:?}");
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let quiesce_took = quiesce.elapsed();
    for p in procs.iter_mut() {
        p.signal("-TERM");
    }
    for p in procs.iter_mut() {
        p.wait(Duration::from_secs(20));
    }
    Ok(quiesce_took)
}

async fn count_range(c: &Client, from: u64, to: u64) -> anyhow::Result<u64> {
    check::count_payload_range(c, from, to).await
}

async fn pending(c: &Client) -> anyhow::Result<i64> {
    let h = c.health(Duration::from_secs(3600)).await?;
    Ok(h.queues.iter().map(|q| q.queued + q.running).sum())
}

/// Ends about half of the workers' connections (pool and LISTEN).
async fn terminate_some(url: &str) -> anyhow::Result<()> {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    c.batch_execute(check::TERMINATE_SOME).await?;
    Ok(())
}

/// A bystander that opens a REPEATABLE READ transaction, reads, and sits idle in it.
async fn hold_idle_transaction(url: &str, hold: Duration) -> anyhow::Result<()> {
    let (mut c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let tx = c
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await?;
    tx.batch_execute(check::BYSTANDER_READ).await?;
    tokio::time::sleep(hold).await;
    tx.commit().await?;
    Ok(())
}

fn libfaketime() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
        "/usr/local/lib/faketime/libfaketime.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}
