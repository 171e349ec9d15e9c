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
//!
//! Outputs: each attempt gets a fresh empty file (mode 0600, in the temporary directory),
//! its path in `SKIPLOCK_OUTPUT`. What a command that exits 0 left in it is the job's output:
//! nothing (or only white space) for none, else one JSON value of at most
//! [`MAX_OUTPUT_BYTES`] (read no further than that), stored with the completion. Anything
//! else fails the attempt (retried), saying why. A job that waits for other jobs also gets
//! `SKIPLOCK_PARENT_OUTPUTS`: the path of a file holding one JSON object, each parent's id
//! (as a string) to its output (`null` for none); for a job without parents the variable is
//! not set. Both files are removed when the attempt ends, however it ends.

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// The largest output a command may leave in `SKIPLOCK_OUTPUT`, in bytes (the client's
/// limit, `skiplock::ClientBuilder::max_output_bytes`, which the command leaves at its
/// default).
pub const MAX_OUTPUT_BYTES: usize = skiplock::Client::DEFAULT_MAX_OUTPUT_BYTES;

/// The variable naming the file a command writes its output to.
const OUTPUT_VAR: &str = "SKIPLOCK_OUTPUT";

/// The variable naming the file holding the outputs of a job's parents.
const PARENTS_VAR: &str = "SKIPLOCK_PARENT_OUTPUTS";

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
    // Removed when this attempt ends, however it ends (dropped with this future).
    let (output, parents) = attempt_files(&ctx).await?;
    let mut command = tokio::process::Command::new(&guard);
    command
        .arg0("skiplock")
        .args(["exec-guard", "--", program])
        .args(args)
        .env("SKIPLOCK_JOB_ID", ctx.id.to_string())
        .env("SKIPLOCK_ATTEMPT", ctx.attempt.to_string())
        .env("SKIPLOCK_MAX_ATTEMPTS", ctx.max_attempts.to_string())
        .env("SKIPLOCK_QUEUE", &ctx.queue)
        .env("SKIPLOCK_KIND", &ctx.kind)
        .env(OUTPUT_VAR, output.path());
    // Set only for a job with parents (never inherited from the worker's environment).
    match &parents {
        Some(p) => command.env(PARENTS_VAR, p.path()),
        None => command.env_remove(PARENTS_VAR),
    };
    let mut child = command
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
        (Some(0), _) => store_output(&ctx, output.path()),
        (Some(EXIT_RETRY), _) => Err(JobError::retry(format!(
            "exit {EXIT_RETRY} (retry requested){tail}"
        ))),
        (Some(code), _) => Err(JobError::retry(format!("exit {code}{tail}"))),
        (None, Some(sig)) => Err(JobError::retry(format!("killed by signal {sig}{tail}"))),
        (None, None) => Err(JobError::retry(format!("ended abnormally{tail}"))),
    }
}

/// A file of one attempt, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    /// A new empty file in the temporary directory, readable and writable by this user
    /// alone, under a name no other file has (created with O_EXCL: never an existing file
    /// or a link someone planted).
    fn create(ctx: &JobContext, what: &str) -> std::io::Result<(TempFile, std::fs::File)> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir();
        let mut tries = 0;
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = dir.join(format!(
                "skiplock-{}-job{}-{}-{n}-{nanos:x}-{what}.json",
                std::process::id(),
                ctx.id,
                ctx.attempt
            ));
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(f) => return Ok((TempFile(path), f)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 16 => {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The attempt's files: the empty one for its output, and the one holding its parents'
/// outputs if it has parents.
async fn attempt_files(ctx: &JobContext) -> Result<(TempFile, Option<TempFile>), JobError> {
    let no_file = |e: std::io::Error| {
        JobError::retry(format!(
            "could not create a file for {OUTPUT_VAR} in {}: {e}",
            std::env::temp_dir().display()
        ))
    };
    let parents = ctx.parent_outputs().await.map_err(|e| {
        JobError::retry(format!(
            "could not read the outputs of the jobs this job waits for: {}",
            chain(&e)
        ))
    })?;
    let (output, _) = TempFile::create(ctx, "output").map_err(no_file)?;
    if parents.is_empty() {
        return Ok((output, None));
    }
    let object: serde_json::Map<String, serde_json::Value> = parents
        .into_iter()
        .map(|(id, v)| (id.to_string(), v))
        .collect();
    let text = serde_json::Value::Object(object).to_string();
    let no_parents_file = |e: std::io::Error| {
        JobError::retry(format!(
            "could not write the file for {PARENTS_VAR} in {}: {e}",
            std::env::temp_dir().display()
        ))
    };
    let (file, mut f) = TempFile::create(ctx, "parents").map_err(no_parents_file)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.flush())
        .map_err(no_parents_file)?;
    Ok((output, Some(file)))
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cause = c.source();
    }
    s.replace('\n', " ")
}

/// Reads what the command left in its `SKIPLOCK_OUTPUT` file (no further than
/// [`MAX_OUTPUT_BYTES`] + 1 bytes) and sets it as the job's output; `Ok` with nothing set
/// for an empty file (or one of white space only, or one the command removed).
fn store_output(ctx: &JobContext, path: &Path) -> Result<(), JobError> {
    match read_output(path)? {
        Some(text) => {
            let raw: Box<serde_json::value::RawValue> = serde_json::from_str(&text)
                .map_err(|e| JobError::retry(format!("{OUTPUT_VAR}: not valid JSON: {e}")))?;
            ctx.set_output(&raw)
                .map_err(|e| JobError::retry(format!("{OUTPUT_VAR}: {e}")))
        }
        None => Ok(()),
    }
}

/// The text of an output file, trimmed; `None` when there is none.
fn read_output(path: &Path) -> Result<Option<String>, JobError> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(JobError::retry(format!(
                "{OUTPUT_VAR}: could not read {}: {e}",
                path.display()
            )))
        }
    };
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_OUTPUT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            JobError::retry(format!(
                "{OUTPUT_VAR}: could not read {}: {e}",
                path.display()
            ))
        })?;
    if bytes.len() > MAX_OUTPUT_BYTES {
        return Err(JobError::retry(format!(
            "{OUTPUT_VAR}: the output is over {MAX_OUTPUT_BYTES} bytes, the limit (store large \
             results elsewhere and output a reference to them)"
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| JobError::retry(format!("{OUTPUT_VAR}: not valid JSON: not UTF-8 text")))?;
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    Ok(Some(trimmed.to_owned()))
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
