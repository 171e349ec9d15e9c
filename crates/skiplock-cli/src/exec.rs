//! `skiplock work --exec`: each job runs a command, in a process group of its own, so that
//! everything the command starts (`sh script.sh` and whatever the script runs) is stopped
//! with it: when it exits, when it times out, when its job is cancelled or its lease is lost,
//! at shutdown and when the worker itself exits. A job never overlaps a leftover of its
//! previous attempt.
//!
//! At a graceful shutdown the commands still running at the deadline get SIGTERM, then
//! SIGKILL [`TERM_GRACE`] later; either way the worker hands the job back when its shutdown
//! timeout (this deadline plus [`TERM_GRACE`]) ends: no attempt spent, its `run_at` (its
//! place in line) kept. A command that still ends with exit 0 is done. Commands start with
//! no signal blocked or ignored (see [`crate::guard`]), so they do see that SIGTERM. Of a
//! command's standard error only the last [`STDERR_TAIL`] bytes are kept in memory.
//!
//! A worker killed with `kill -9` cannot act, so each group is led by a small guard (the
//! hidden `skiplock exec-guard`, see [`crate::guard`]) that starts the command and watches
//! a pipe from the worker: the kernel closes it when the worker dies, however it dies, and
//! the guard then kills its whole group at once, long before the job's lease expires and
//! the job runs again (`exec_kill_9_of_the_worker_ends_every_command_group`). The one thing
//! left to chance is a `kill -9` landing between a command's end and the worker's kill of
//! its leftovers (the guard has exited by then): leftovers of a command that already
//! finished would then run on.

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt as _;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use skiplock::{BoxFuture, Handler, JobContext, JobError};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

/// The exit status a command uses to ask for a retry (`EX_TEMPFAIL`).
pub const EXIT_RETRY: i32 = 75;

/// How long a command has between SIGTERM and SIGKILL at shutdown.
pub const TERM_GRACE: Duration = Duration::from_secs(3);

/// How much of a failed command's standard error is kept in `last_error`.
const STDERR_TAIL: usize = 2048;

/// The process groups of the commands running now.
static LIVE: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Set once the shutdown deadline passed and the commands were sent SIGTERM.
static STOPPING: AtomicBool = AtomicBool::new(false);

fn live() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn signal_all(sig: Signal) {
    for pgid in live().iter() {
        // ESRCH (the group just ended) is not an error.
        let _ = killpg(Pid::from_raw(*pgid), sig);
    }
}

/// Sends SIGTERM to every running command's group: the shutdown deadline passed.
pub fn terminate_all() {
    STOPPING.store(true, Ordering::SeqCst);
    signal_all(Signal::SIGTERM);
}

/// Kills every running command's group: the worker is exiting.
pub fn kill_all() {
    signal_all(Signal::SIGKILL);
}

/// Resolves when `shutdown` does, and from then on stops the commands still running after
/// `deadline`: SIGTERM then, SIGKILL [`TERM_GRACE`] later (when the worker gives up waiting
/// and drops them). Give the worker a shutdown timeout of `deadline + TERM_GRACE`.
pub async fn on_shutdown(shutdown: impl std::future::Future<Output = ()>, deadline: Duration) {
    shutdown.await;
    tokio::spawn(async move {
        tokio::time::sleep(deadline).await;
        let n = live().len();
        if n > 0 {
            tracing::info!(
                commands = n,
                "shutdown deadline reached: sending SIGTERM to the running commands"
            );
            terminate_all();
        }
    });
}

/// One command's process group: killed (SIGKILL) when this is dropped, however the job
/// ends (the handler's future is dropped on a timeout and at the shutdown deadline).
struct Group(Option<i32>);

impl Group {
    fn new(pid: Option<u32>) -> Self {
        let pgid = pid.and_then(|p| i32::try_from(p).ok());
        if let Some(p) = pgid {
            live().insert(p);
        }
        Group(pgid)
    }

    /// Kills the whole group (the command, if still running, and all it started).
    fn kill(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
            live().remove(&p);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs each job with an external command.
#[derive(Clone)]
pub struct Exec(Arc<(String, Vec<String>)>);

impl Exec {
    pub fn new(program: String, args: Vec<String>) -> Self {
        Exec(Arc::new((program, args)))
    }
}

impl Handler for Exec {
    fn call(&self, payload: String, ctx: JobContext) -> BoxFuture<Result<(), JobError>> {
        let cmd = self.0.clone();
        Box::pin(async move { exec(&cmd.0, &cmd.1, payload, ctx).await })
    }
}

/// Reads a command's standard error to its end, keeping only the last [`STDERR_TAIL`]
/// bytes: memory stays bounded however much the command writes.
async fn read_tail(mut stderr: Option<impl AsyncRead + Unpin>) -> String {
    let mut tail = Tail::default();
    if let Some(s) = stderr.as_mut() {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) => break,
                Ok(n) => tail.push(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    tail.text()
}

/// The last [`STDERR_TAIL`] bytes of a stream.
#[derive(Default)]
struct Tail {
    buf: std::collections::VecDeque<u8>,
    /// Whether bytes before `buf` were dropped.
    cut: bool,
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        let bytes = match bytes.len().checked_sub(STDERR_TAIL) {
            Some(skip) if skip > 0 => {
                self.cut = true;
                self.buf.clear();
                &bytes[skip..]
            }
            _ => bytes,
        };
        self.buf.extend(bytes);
        let over = self.buf.len().saturating_sub(STDERR_TAIL);
        if over > 0 {
            self.cut = true;
            self.buf.drain(..over);
        }
    }

    /// The tail as text, trimmed; a cut through a character drops its remains.
    fn text(self) -> String {
        let (cut, buf) = (self.cut, Vec::from(self.buf));
        // A cut may leave the continuation bytes (0b10xx_xxxx) of a character first.
        let start = if cut {
            buf.iter().take(3).take_while(|b| *b & 0xC0 == 0x80).count()
        } else {
            0
        };
        String::from_utf8_lossy(&buf[start..]).trim().to_owned()
    }
}

async fn exec(
    program: &str,
    args: &[String],
    payload: String,
    ctx: JobContext,
) -> Result<(), JobError> {
    let guard = guard_program()
        .map_err(|e| JobError::retry(format!("could not start {program}: no job guard: {e}")))?;
    // The payload goes to the guard (which hands it on to the command), its length first;
    // the pipe then stays open, the guard's sign that this worker is still there.
    let mut input = Vec::with_capacity(8 + payload.len());
    input.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    input.extend_from_slice(payload.as_bytes());
    let mut child = tokio::process::Command::new(&guard)
        .arg0("skiplock")
        .args(["exec-guard", "--", program])
        .args(args)
        .env("SKIPLOCK_JOB_ID", ctx.id.to_string())
        .env("SKIPLOCK_ATTEMPT", ctx.attempt.to_string())
        .env("SKIPLOCK_MAX_ATTEMPTS", ctx.max_attempts.to_string())
        .env("SKIPLOCK_QUEUE", &ctx.queue)
        .env("SKIPLOCK_KIND", &ctx.kind)
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        // Its own process group: it can be stopped with all it started, and a Ctrl-C at the
        // terminal reaches the worker (which shuts down gracefully), not the running jobs.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            JobError::retry(format!(
                "could not start {program}: the job guard ({}) did not start: {e}",
                guard.display()
            ))
        })?;
    let mut group = Group::new(child.id());
    let stdin = child.stdin.take();
    // Held until the job ends here (dropping it closes the pipe).
    let _lifeline = tokio::spawn(async move {
        let mut stdin = stdin?;
        // A guard that is gone already closed the pipe: its exit status tells why.
        let _ = stdin.write_all(&input).await;
        Some(stdin)
    });
    // Read concurrently (a full pipe would block the command); the pipe closes when the
    // last process holding it ends, which the group kill below makes prompt.
    let tail = tokio::spawn(read_tail(child.stderr.take()));
    let status = tokio::select! {
        s = child.wait() => s,
        () = ctx.cancelled() => {
            group.kill();
            let _ = child.wait().await;
            return Err(JobError::retry("cancelled: the job is no longer this worker's"));
        }
    };
    // Whatever the command left running in its group ends with it.
    group.kill();
    let tail = tail.await.unwrap_or_default();
    let status =
        status.map_err(|e| JobError::retry(format!("waiting for {program} failed: {e}")))?;
    if STOPPING.load(Ordering::SeqCst) && !status.success() {
        // Stopped by the shutdown: the worker hands the job back (no attempt spent, its
        // run_at kept) when its shutdown timeout ends, at most TERM_GRACE from now; until
        // then this attempt has not ended.
        ctx.cancelled().await;
        return Err(JobError::retry("stopped by the shutdown"));
    }
    let not_started = crate::guard::not_started(program);
    if status.code() == Some(i32::from(crate::guard::NOT_STARTED)) && tail.starts_with(&not_started)
    {
        // The guard could not start the command: its one line says why.
        return Err(JobError::retry(tail));
    }
    let tail = if tail.is_empty() {
        String::new()
    } else {
        format!(": {tail}")
    };
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(()),
        (Some(EXIT_RETRY), _) => Err(JobError::retry(format!(
            "exit {EXIT_RETRY} (retry requested){tail}"
        ))),
        (Some(code), _) => Err(JobError::retry(format!("exit {code}{tail}"))),
        (None, Some(sig)) => Err(JobError::retry(format!("killed by signal {sig}{tail}"))),
        (None, None) => Err(JobError::retry(format!("ended abnormally{tail}"))),
    }
}

/// Checks, before the worker starts, that `program` can be run as the guard will run it
/// (found as `execvp` finds it: a name with a `/` as a path, else in `PATH`), so that a
/// typo fails at once instead of failing every job. The error is one line.
pub fn check_program(program: &str) -> Result<(), String> {
    use nix::unistd::{access, AccessFlags};
    use std::path::{Path, PathBuf};

    let runnable = |p: &Path| -> Result<(), String> {
        let meta = std::fs::metadata(p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "no such file".to_owned(),
            _ => nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0))
                .desc()
                .to_owned(),
        })?;
        if meta.is_dir() {
            return Err("it is a directory".to_owned());
        }
        access(p, AccessFlags::X_OK).map_err(|e| format!("it is not executable ({})", e.desc()))
    };
    if program.is_empty() {
        return Err("--exec needs a command".to_owned());
    }
    if program.contains('/') {
        return runnable(Path::new(program))
            .map_err(|why| format!("--exec: cannot run {program}: {why}"));
    }
    // As execvp: PATH, or its default when unset.
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    let mut first_refusal = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        match runnable(&candidate) {
            Ok(()) => return Ok(()),
            Err(why) if candidate.exists() && first_refusal.is_none() => {
                first_refusal = Some(format!("{}: {why}", candidate.display()));
            }
            Err(_) => {}
        }
    }
    Err(match first_refusal {
        Some(why) => format!("--exec: cannot run {program}: {why}"),
        None => format!("--exec: cannot run {program}: not found in PATH"),
    })
}

/// The program that guards each command: this very binary (on Linux through
/// `/proc/self/exe`, which still runs it when its file was replaced since it started).
fn guard_program() -> std::io::Result<std::path::PathBuf> {
    let this = std::path::Path::new("/proc/self/exe");
    if this.exists() {
        Ok(this.to_path_buf())
    } else {
        std::env::current_exe()
    }
}
