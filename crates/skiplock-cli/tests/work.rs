//! `skiplock work` as an operator runs it: how its commands start (`--exec`), what it keeps
//! of them, the durations it accepts, its exit status and its shutdown, against a real
//! server.
#![allow(clippy::unwrap_used)]

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use skiplock_testdb::TestDb;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn cmd_url(url: &str, db: &TestDb, args: &[&str]) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin!("skiplock"));
    c.env_remove("DATABASE_URL").env_remove("SKIPLOCK_HOME");
    c.args(["--database-url", url, "--schema", db.schema()]);
    c.args(args);
    c
}

fn cmd(db: &TestDb, args: &[&str]) -> Command {
    cmd_url(db.url(), db, args)
}

fn run(db: &TestDb, args: &[&str]) -> Output {
    cmd(db, args).output().unwrap()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(o.status.success(), "exit {:?}: {}", o.status.code(), err(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A failure: the expected exit status, one line on stderr naming `needle`, no panic.
#[track_caller]
fn fails(o: &Output, code: i32, needle: &str) {
    let e = err(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {e}");
    assert!(e.contains(needle), "{needle:?} not in {e:?}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

async fn migrated() -> TestDb {
    let db = TestDb::new().await;
    ok(&run(&db, &["migrate"]));
    db
}

async fn sql_one(db: &TestDb, q: &str) -> i64 {
    let c = db.connect().await.unwrap();
    let q = q.replace("jobs", &format!("\"{}\".jobs", db.schema()));
    c.query_one(&q, &[]).await.unwrap().get(0)
}

async fn sql(db: &TestDb, q: &str) {
    let c = db.connect().await.unwrap();
    let q = q.replace("jobs", &format!("\"{}\".jobs", db.schema()));
    c.batch_execute(&q).await.unwrap();
}

fn signal(child: &Child, sig: &str) {
    assert!(Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap()
        .success());
}

async fn wait_until_running(db: &TestDb, n: i64) {
    let start = Instant::now();
    while sql_one(db, "SELECT count(*) FROM jobs WHERE status = 'running'").await < n {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "jobs never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for the child to exit, killing it (and failing) after `limit`.
fn wait_within(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: the worker was still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn scratch(db: &TestDb, name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("skiplock-{name}-{}", db.schema()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The `SigBlk:` and `SigIgn:` masks in a `/proc/<pid>/status` text.
fn masks(status: &str) -> (u64, u64) {
    let mask = |name: &str| {
        let hex = status
            .split(name)
            .nth(1)
            .unwrap_or_else(|| panic!("no {name} in {status:?}"))
            .split_whitespace()
            .next()
            .unwrap();
        u64::from_str_radix(hex, 16).unwrap()
    };
    (mask("SigBlk:"), mask("SigIgn:"))
}

/// Signals 32 and 33: glibc's private ones, which its own `posix_spawn` marks ignored in every
/// process it starts (and which no program can set or use through it). Everything else must
/// be clear.
const LIBC_PRIVATE: u64 = (1 << 31) | (1 << 32);

// ---- Item 2: commands start with no signal blocked or ignored -------------------------------

/// Through bash (which, unlike dash, keeps the mask it was given) and through a plain
/// binary: no signal blocked (SIGTERM was, inherited from the job guard), none ignored.
#[tokio::test]
async fn exec_commands_start_with_no_signal_blocked_or_ignored() {
    let db = migrated().await;
    let id = ok(&run(&db, &["enqueue", "--max-attempts", "1", "{}"]))
        .trim()
        .to_owned();
    ok(&run(
        &db,
        &[
            "work",
            "--drain",
            "--exec",
            "bash",
            "-c",
            "cat /proc/self/status >&2; exit 3",
        ],
    ));
    let job = json(&ok(&run(&db, &["show", &id, "--json"])));
    let e = job["last_error"].as_str().unwrap();
    assert!(e.starts_with("exit 3: "), "{e}");
    let (blocked, ignored) = masks(e);
    assert_eq!(
        blocked, 0,
        "bash started with signals blocked: {blocked:#x}"
    );
    assert_eq!(ignored & !LIBC_PRIVATE, 0, "bash ignores {ignored:#x}");

    // A plain binary, its output on the worker's standard output.
    ok(&run(&db, &["enqueue", "{}"]));
    let out = ok(&run(
        &db,
        &["work", "--drain", "--exec", "cat", "/proc/self/status"],
    ));
    let (blocked, ignored) = masks(&out);
    assert_eq!(blocked, 0, "cat started with signals blocked: {blocked:#x}");
    assert_eq!(ignored & !LIBC_PRIVATE, 0, "cat ignores {ignored:#x}");
}

/// The documented shutdown SIGTERM reaches a bash job, whose `trap` runs.
#[tokio::test]
async fn exec_a_trap_on_term_runs_at_shutdown() {
    let db = migrated().await;
    let dir = scratch(&db, "exec-trap");
    let (started, trapped) = (dir.join("started"), dir.join("trapped"));
    let script = format!(
        "trap 'echo trapped > {}; exit 0' TERM; touch {}; while :; do sleep 0.1; done",
        trapped.display(),
        started.display()
    );
    ok(&run(&db, &["enqueue", "{}"]));
    let mut child = cmd(
        &db,
        &[
            "work",
            "--json",
            "--shutdown-timeout",
            "1s",
            "--exec",
            "bash",
            "-c",
            &script,
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let start = Instant::now();
    while !started.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the job never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(&child, "TERM");
    let status = wait_within(&mut child, Duration::from_secs(20), "the trap");
    assert!(status.success(), "{status:?}");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(trapped.exists(), "the job's trap on TERM never ran");
    // The trap ended the command with exit 0: the job is done.
    assert_eq!(json(&out)["done"], 1, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- Item 5: a command's standard error is read with bounded memory --------------------------

/// Peak resident memory of a process, in kB (`VmHWM`).
fn peak_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn exec_a_command_writing_200_mb_of_stderr_keeps_the_worker_small() {
    let db = migrated().await;
    let id = ok(&run(&db, &["enqueue", "--max-attempts", "1", "{}"]))
        .trim()
        .to_owned();
    let mut child = cmd(
        &db,
        &[
            "work",
            "--exec",
            "sh",
            "-c",
            "head -c 200000000 /dev/zero | tr '\\0' x >&2; echo ' the last words' >&2; exit 4",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let start = Instant::now();
    while sql_one(&db, "SELECT count(*) FROM jobs WHERE status = 'failed'").await < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the job never failed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let peak = peak_kb(child.id());
    signal(&child, "TERM");
    wait_within(&mut child, Duration::from_secs(30), "shutdown");
    // The worker's own footprint (a debug build) is some tens of MB; reading the whole
    // stream into memory made it 200 MB more.
    eprintln!("the worker's peak RSS: {peak} kB");
    assert!(peak < 100_000, "the worker's peak RSS was {peak} kB");
    let job = json(&ok(&run(&db, &["show", &id, "--json"])));
    let e = job["last_error"].as_str().unwrap();
    assert!(e.starts_with("exit 4: "), "{}", &e[..e.len().min(100)]);
    assert!(e.ends_with("xxxx the last words"), "{e:?}");
    assert!(e.len() < 2100, "{} bytes kept", e.len());
}

// ---- Item 8: every duration is bounded ---------------------------------------------------

#[tokio::test]
async fn work_refuses_durations_out_of_range_with_one_line_and_exit_2() {
    let db = migrated().await;
    ok(&run(&db, &["enqueue", "{}"]));
    for (args, needle) in [
        (vec!["--poll-interval", "100000000d"], "--poll-interval"),
        (vec!["--poll-interval", "18446744073709551615"], "too long"),
        (vec!["--poll-interval", "1ms"], "outside 10ms..=7d"),
        (
            vec![
                "--shutdown-timeout",
                "18446744073709551615",
                "--exec",
                "true",
            ],
            "--shutdown-timeout",
        ),
        (vec!["--shutdown-timeout", "2d"], "outside 0s..=1d"),
        (vec!["--lease", "100000000d"], "--lease"),
        (vec!["--retry-base", "400d"], "--retry-base"),
        (vec!["--retry-cap", "100000000d"], "--retry-cap"),
        (vec!["--reap-interval", "100000000d"], "--reap-interval"),
        (vec!["--timeout", "100000000d"], "--timeout"),
        (vec!["--prune-older-than", "36501d"], "at most 36500d"),
        (vec!["--idle-timeout", "100000000d"], "--idle-timeout"),
        (
            vec!["--metrics-gauges-interval", "100000000d"],
            "--metrics-gauges-interval",
        ),
    ] {
        let mut a = vec!["work", "--drain"];
        a.extend(args.iter().copied());
        let o = run(&db, &a);
        fails(&o, 2, needle);
    }
    // Nothing ran.
    assert_eq!(
        sql_one(&db, "SELECT count(*) FROM jobs WHERE attempts = 0").await,
        1
    );
    // The bounds themselves are accepted.
    ok(&run(
        &db,
        &[
            "work",
            "--drain",
            "--poll-interval",
            "7d",
            "--shutdown-timeout",
            "1d",
            "--idle-timeout",
            "7d",
        ],
    ));
}

// ---- Item 9: the shutdown's put-back keeps run_at ----------------------------------------

#[tokio::test]
async fn exec_shutdown_put_back_keeps_the_jobs_run_at() {
    let db = migrated().await;
    ok(&run(&db, &["enqueue", "{}"]));
    // Its place in line: an hour ago.
    sql(&db, "UPDATE jobs SET run_at = now() - interval '1 hour'").await;
    let before = sql_one(
        &db,
        "SELECT (extract(epoch FROM run_at) * 1000000)::int8 FROM jobs",
    )
    .await;
    let mut child = cmd(
        &db,
        &[
            "work",
            "--json",
            "--shutdown-timeout",
            "1s",
            "--exec",
            "sleep",
            "60",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    wait_until_running(&db, 1).await;
    signal(&child, "TERM");
    let status = wait_within(&mut child, Duration::from_secs(20), "shutdown");
    assert!(status.success(), "{status:?}");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert_eq!(json(&out)["handed_back"], 1, "{out}");
    assert_eq!(
        sql_one(
            &db,
            "SELECT count(*) FROM jobs WHERE status = 'queued' AND attempts = 1 AND max_attempts = 6"
        )
        .await,
        1
    );
    let after = sql_one(
        &db,
        "SELECT (extract(epoch FROM run_at) * 1000000)::int8 FROM jobs",
    )
    .await;
    assert_eq!(after, before, "the put-back moved run_at");
}

// ---- Item 14: a program that cannot be started is refused at start -----------------------

#[tokio::test]
async fn exec_a_program_that_cannot_start_is_refused_at_start() {
    let db = migrated().await;
    ok(&run(&db, &["enqueue", "{}"]));
    let dir = scratch(&db, "exec-noexec");
    let plain = dir.join("not-executable.sh");
    std::fs::write(&plain, "#!/bin/sh\nexit 0\n").unwrap();
    let plain = plain.to_str().unwrap().to_owned();
    for (program, needle) in [
        (
            "/nonexistent/skiplock-job",
            "cannot run /nonexistent/skiplock-job: no such file",
        ),
        (plain.as_str(), "is not executable"),
        (dir.to_str().unwrap(), "is a directory"),
        ("skiplock-no-such-program", "not found in PATH"),
    ] {
        let o = run(&db, &["work", "--drain", "--exec", program]);
        fails(&o, 2, needle);
    }
    // No job was claimed: no attempt spent.
    assert_eq!(
        sql_one(
            &db,
            "SELECT count(*) FROM jobs WHERE status = 'queued' AND attempts = 0"
        )
        .await,
        1
    );
    // Found in PATH, as the guard finds it.
    let o = run(&db, &["work", "--drain", "--json", "--exec", "true"]);
    assert_eq!(json(&ok(&o))["done"], 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `work`'s log leaves out the span each job runs in (formatting its fields for every job
/// cost more CPU than a short job's whole path), and a line about an attempt names its job
/// itself: kind, id, attempt and queue, as the span's prefix did (`job{kind=… id=…}: …`,
/// which the check below refuses: with the span on, this test fails).
#[tokio::test]
async fn a_failed_attempt_is_logged_with_its_job() {
    let db = migrated().await;
    let id = ok(&run(
        &db,
        &[
            "enqueue",
            "--queue",
            "mailer",
            "--kind",
            "send",
            "--max-attempts",
            "2",
            "{}",
        ],
    ));
    let id = id.trim();
    let o = cmd(
        &db,
        &[
            "work",
            "--queue",
            "mailer",
            "--drain",
            "--exec",
            "sh",
            "-c",
            "echo boom >&2; exit 3",
        ],
    )
    .env_remove("RUST_LOG")
    .output()
    .unwrap();
    let e = err(&o);
    assert!(o.status.success(), "{e}");
    let line = e
        .lines()
        .find(|l| l.contains("attempt failed"))
        .unwrap_or_else(|| panic!("no `attempt failed` line in {e}"));
    for field in [
        "kind=send".to_owned(),
        format!("id={id}"),
        "attempt=1".to_owned(),
        "queue=mailer".to_owned(),
        "error=exit 3: boom".to_owned(),
    ] {
        assert!(line.contains(&field), "{field:?} not in {line:?}");
    }
    assert!(!e.contains("job{"), "the job span is formatted: {e}");
}

// ---- Item 15: exit status and shutdown ----------------------------------------------------

/// A drain cut short by a signal says so: 143 for SIGTERM, 130 for SIGINT, after handing its
/// running jobs back; a drain that finishes exits 0.
#[tokio::test]
async fn an_interrupted_drain_exits_128_plus_the_signal() {
    let db = migrated().await;
    for (sig, code) in [("TERM", 143), ("INT", 130)] {
        ok(&run(&db, &["enqueue", "{}"]));
        let mut child = cmd(
            &db,
            &[
                "work",
                "--drain",
                "--json",
                "--shutdown-timeout",
                "1s",
                "--exec",
                "sleep",
                "60",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        wait_until_running(&db, 1).await;
        signal(&child, sig);
        let status = wait_within(&mut child, Duration::from_secs(20), "an interrupted drain");
        let o = child.wait_with_output().unwrap();
        assert_eq!(status.code(), Some(code), "SIG{sig}: {}", err(&o));
        assert_eq!(json(&String::from_utf8_lossy(&o.stdout))["handed_back"], 1);
        let e = err(&o);
        let errors: Vec<&str> = e.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(errors.len(), 1, "{e}");
        assert!(
            errors[0].contains(&format!("interrupted by SIG{sig}")),
            "{e}"
        );
        sql(&db, "DELETE FROM jobs").await;
    }
    // A finished drain exits 0.
    ok(&run(&db, &["enqueue", "{}"]));
    ok(&run(&db, &["work", "--drain", "--exec", "true"]));
}

/// A second SIGINT/SIGTERM stops at once: the running commands are stopped and their jobs
/// handed back, long before the shutdown timeout.
#[tokio::test]
async fn a_second_signal_stops_at_once_and_hands_back() {
    let db = migrated().await;
    for _ in 0..2 {
        ok(&run(&db, &["enqueue", "{}"]));
    }
    let mut child = cmd(
        &db,
        &[
            "work",
            "--json",
            "--queue",
            "default=2",
            "--shutdown-timeout",
            "120s",
            "--exec",
            "sleep",
            "300",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    wait_until_running(&db, 2).await;
    signal(&child, "INT");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first signal stopped at once"
    );
    let second = Instant::now();
    signal(&child, "INT");
    let status = wait_within(&mut child, Duration::from_secs(20), "a second Ctrl-C");
    assert!(status.success(), "{status:?}");
    assert!(
        second.elapsed() < Duration::from_secs(10),
        "{:?}",
        second.elapsed()
    );
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert_eq!(json(&out)["handed_back"], 2, "{out}");
    assert_eq!(
        sql_one(
            &db,
            "SELECT count(*) FROM jobs WHERE status = 'queued' AND attempts = 1 AND max_attempts = 6 AND locked_until IS NULL"
        )
        .await,
        2
    );
}

/// A TCP proxy in front of the database that can go silent: it then forwards nothing more
/// and answers nothing, holding every connection open (no RST), as a database host that
/// vanished from the network.
struct Proxy {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    /// Connections accepted so far.
    accepted: Arc<AtomicU64>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let accepted = Arc::new(AtomicU64::new(0));
        let (flag, count) = (open.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let open = flag.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    tokio::join!(pump(ri, wo, open.clone()), pump(ro, wi, open));
                });
            }
        });
        Proxy {
            addr,
            open,
            accepted,
        }
    }

    /// In front of `db`'s server: the proxy, and `db`'s URL through it.
    async fn before(db: &TestDb) -> (Proxy, String) {
        // The server's address, from the URL (postgres://user@host:port/db).
        let hostport = db
            .url()
            .split('@')
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap()
            .to_owned();
        let target: SocketAddr = hostport.parse().unwrap();
        let proxy = Proxy::start(target).await;
        let url = db.url().replace(&hostport, &proxy.addr.to_string());
        (proxy, url)
    }

    fn go_silent(&self) {
        self.open.store(false, Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    open: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if !open.load(Ordering::SeqCst) {
            // Silent: hold both sockets, forward nothing.
            std::future::pending::<()>().await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !open.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// With the database gone silent (no answer, no reset), SIGTERM still ends the worker
/// within its shutdown timeout (+3 s with --exec) plus the stated 15 s; the outcomes it
/// could not write are logged and left to the reaper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_in_bounded_time_with_the_database_gone() {
    let db = migrated().await;
    for _ in 0..2 {
        ok(&run(&db, &["enqueue", "{}"]));
    }
    let (proxy, url) = Proxy::before(&db).await;
    let mut child = cmd_url(
        &url,
        &db,
        &[
            "work",
            "--queue",
            "default=2",
            "--shutdown-timeout",
            "1s",
            "--exec",
            "sh",
            "-c",
            "sleep 2; exit 0",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_until_running(&db, 2).await;
    // Gone before the jobs end: their outcomes cannot be written.
    proxy.go_silent();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let stop = Instant::now();
    signal(&child, "TERM");
    let limit = Duration::from_secs(1 + 3 + 15 + 5);
    let status = wait_within(
        &mut child,
        Duration::from_secs(90),
        "a shutdown with the database gone",
    );
    let took = stop.elapsed();
    let mut e = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut e).unwrap();
    assert!(
        took < limit,
        "shutdown took {took:?} (bound {limit:?}): {e}"
    );
    assert!(status.code().is_some(), "{status:?}");
    assert!(
        e.contains("could not write these job outcomes before stopping"),
        "the unwritten outcomes were not logged: {e}"
    );
    // The jobs are still the dead worker's: the reaper hands them out again at lease expiry.
    assert_eq!(
        sql_one(&db, "SELECT count(*) FROM jobs WHERE status = 'running'").await,
        2
    );
    let _ = std::io::stderr().flush();
}

/// A drain opens two connections, not three: the worker shares the pool of the command's
/// start-up check (`WorkerConfig::share_client_pool`), whose connection it then uses for
/// its own start (its presence and the reaper's pass run at once, on two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_opens_two_connections() {
    let db = migrated().await;
    let (proxy, url) = Proxy::before(&db).await;
    for _ in 0..3 {
        let before = proxy.accepted.load(Ordering::SeqCst);
        // Blocking: the proxy runs on this test's runtime.
        let mut c = cmd_url(&url, &db, &["work", "--queue", "default=4", "--drain"]);
        let o = tokio::task::spawn_blocking(move || c.output().unwrap())
            .await
            .unwrap();
        ok(&o);
        let opened = proxy.accepted.load(Ordering::SeqCst) - before;
        assert!(
            (1..=2).contains(&opened),
            "a drain opened {opened} connections"
        );
    }
}
