//! `skiplock exec-guard -- PROGRAM [ARGS...]` (hidden): the small process `work --exec` puts
//! between the worker and each job's command, so that the command's process group ends even
//! when the worker is killed with SIGKILL and cannot end it itself.
//!
//! The worker starts the guard as the leader of the job's new process group; the guard
//! starts the command, which inherits that group, its environment, standard output and
//! standard error. The guard's standard input is a pipe from the worker: first the payload
//! (its length as 8 big-endian bytes, then the bytes), which the guard hands to the command
//! on the command's own standard input, then nothing: the worker holds the pipe open for as
//! long as the job is its. End of file there means the worker is gone (the kernel closes
//! the pipe of a process that dies, however it dies): the guard then removes the attempt's
//! files (`SKIPLOCK_OUTPUT`, `SKIPLOCK_PARENT_OUTPUTS`) and kills its whole group, itself
//! included, with SIGKILL.
//!
//! The guard exits as the command did: with its exit code, or by the same signal (so the
//! worker reports "killed by signal N" as for a command it ran directly). A command that
//! cannot be started is reported on standard error as `could not start PROGRAM: ...`, with
//! exit status [`NOT_STARTED`]. The guard does not die of SIGTERM: the worker sends it to
//! the whole group, which the command receives anyway, and the guard keeps waiting for the
//! command; a SIGTERM from anyone else is passed on to the command.
//!
//! The command starts clean: no signal blocked, and every signal at its default action. The
//! guard catches SIGTERM with a handler (never by blocking it: a blocked signal stays blocked
//! across `exec`, and the command would never see the shutdown's SIGTERM), clears any signal
//! mask it inherited, and puts a handler on every signal it inherited ignored (an ignored
//! signal stays ignored across `exec`; one with a handler is reset to its default). The one
//! exception is the C library's two private signals (32 and 33 with glibc), which its
//! `posix_spawn` itself marks ignored in the processes it starts and which no program can
//! use or set through it.

use std::io::{Read, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::{getpgrp, Pid};

use crate::output::errln;

/// The guard's exit status when the command could not be started (as a shell's for a
/// command it cannot find).
pub const NOT_STARTED: u8 = 127;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

/// The words a command that could not be started is reported with.
pub fn not_started(program: &str) -> String {
    format!("could not start {program}: ")
}

pub fn run(args: Args) -> ExitCode {
    let Some((program, rest)) = args.command.split_first() else {
        errln!("error: exec-guard needs a command");
        return ExitCode::from(2);
    };
    // Before any thread starts (they inherit the mask), and so before the command does.
    let _ = SigSet::empty().thread_set_mask();
    clear_ignored();
    let signals = sigterm::Signals::new();

    let mut input = std::io::stdin();
    let payload = match read_payload(&mut input) {
        Ok(p) => p,
        Err(e) => {
            errln!("error: the job guard could not read the job's input: {e}");
            return ExitCode::FAILURE;
        }
    };
    // From here on, the end of the worker is the end of the group.
    std::thread::spawn(move || watch_worker(input));

    let mut child = match Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            errln!("{}{e}", not_started(program));
            return ExitCode::from(NOT_STARTED);
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        std::thread::spawn(move || {
            // A command that does not read its input closes the pipe: not an error.
            let _ = stdin.write_all(&payload);
        });
    }
    match (signals, i32::try_from(child.id())) {
        (Ok(mut signals), Ok(pid)) => {
            std::thread::spawn(move || signals.pass_on(Pid::from_raw(pid)));
        }
        (Err(e), _) => errln!("warning: the job guard cannot catch SIGTERM: {e}"),
        (Ok(_), Err(_)) => {}
    }
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => {
            errln!("error: the job guard could not wait for {program}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(code) = status.code() {
        // An exit status is 0 to 255 on Unix.
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    if let Some(sig) = status.signal() {
        die_of(sig);
        // Only a signal whose default is to go on (none a process dies of) gets here.
        return ExitCode::from(u8::try_from(128 + sig).unwrap_or(1));
    }
    ExitCode::FAILURE
}

/// Reads the payload the worker sends first: its length (8 big-endian bytes), then it.
fn read_payload(input: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 8];
    input.read_exact(&mut len)?;
    let len = u64::from_be_bytes(len);
    let mut payload = Vec::new();
    input.take(len).read_to_end(&mut payload)?;
    if (payload.len() as u64) < len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(payload)
}

/// Waits for the end of the worker's pipe, then removes the attempt's files (the worker,
/// gone, cannot: see `crate::exec`) and kills the whole group (this process too).
fn watch_worker(mut input: impl Read) {
    let files: Vec<std::ffi::OsString> = ["SKIPLOCK_OUTPUT", "SKIPLOCK_PARENT_OUTPUTS"]
        .into_iter()
        .filter_map(std::env::var_os)
        .collect();
    let mut buf = [0u8; 64];
    loop {
        match input.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    for f in files {
        let _ = std::fs::remove_file(f);
    }
    let _ = killpg(getpgrp(), Signal::SIGKILL);
}

/// Puts a handler on every signal this process inherited ignored, so that the command
/// starts with their default action (`exec` keeps an ignored signal ignored, and resets one
/// with a handler). Read from `/proc/self/status` (Linux); elsewhere nothing is changed.
fn clear_ignored() {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return;
    };
    let Some(ignored) = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    else {
        return;
    };
    let flag = Arc::new(AtomicBool::new(false));
    for bit in 0..64 {
        if ignored & (1u64 << bit) != 0 {
            // Refused for the signals no handler may take (and the C library's own): they
            // stay as they are.
            let _ = signal_hook::flag::register(bit + 1, flag.clone());
        }
    }
}

mod sigterm {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::{getppid, Pid};
    use signal_hook::consts::SIGTERM;
    use signal_hook::iterator::exfiltrator::WithOrigin;
    use signal_hook::iterator::SignalsInfo;

    /// The guard's SIGTERMs (caught by a handler, so that the guard lives on), and who the
    /// worker is.
    pub struct Signals(SignalsInfo<WithOrigin>, Pid);

    impl Signals {
        pub fn new() -> std::io::Result<Self> {
            Ok(Signals(SignalsInfo::new([SIGTERM])?, getppid()))
        }

        /// Passes SIGTERM on to the command, unless it came from the worker: the worker
        /// signals the whole group, so the command has it already.
        pub fn pass_on(&mut self, command: Pid) {
            let worker = self.1;
            for origin in self.0.forever() {
                let from_worker = origin
                    .process
                    .is_some_and(|p| i64::from(p.pid) == i64::from(worker.as_raw()));
                if !from_worker {
                    let _ = kill(command, Signal::SIGTERM);
                }
            }
        }
    }
}

/// Ends this process by signal `sig`, as the command ended (without a core file of its own).
fn die_of(sig: i32) {
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_CORE) {
        let _ = setrlimit(Resource::RLIMIT_CORE, 0, hard);
    }
    let _ = std::io::stderr().flush();
    let _ = signal_hook::low_level::emulate_default_handler(sig);
}
