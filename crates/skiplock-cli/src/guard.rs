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
//! the pipe of a process that dies, however it dies): the guard then kills its whole group,
//! itself included, with SIGKILL.
//!
//! The guard exits as the command did: with its exit code, or by the same signal (so the
//! worker reports "killed by signal N" as for a command it ran directly). A command that
//! cannot be started is reported on standard error as `could not start PROGRAM: ...`, with
//! exit status [`NOT_STARTED`]. The guard does not die of SIGTERM: the worker sends it to
//! the whole group, which the command receives anyway, and the guard keeps waiting for the
//! command; on Linux a SIGTERM from anyone else is passed on to the command.

use std::io::{Read, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, ExitCode, Stdio};

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
    // SIGTERM blocked in every thread (they inherit this mask); on Linux it is read from a
    // signalfd instead. The command starts with no signal blocked (the standard library
    // clears the mask of the processes it starts).
    let mut term = SigSet::empty();
    term.add(Signal::SIGTERM);
    let signals = term.thread_block().and_then(|()| sigterm::Fd::new(&term));

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
        (Ok(fd), Ok(pid)) => {
            std::thread::spawn(move || fd.pass_on(Pid::from_raw(pid)));
        }
        (Err(e), _) => errln!("warning: the job guard cannot pass SIGTERM on: {e}"),
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

/// Waits for the end of the worker's pipe, then kills the whole group (this process too).
fn watch_worker(mut input: impl Read) {
    let mut buf = [0u8; 64];
    loop {
        match input.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = killpg(getpgrp(), Signal::SIGKILL);
}

#[cfg(target_os = "linux")]
mod sigterm {
    use nix::sys::signal::{kill, SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use nix::unistd::{getppid, Pid};

    /// The guard's SIGTERMs, and who the worker is.
    pub struct Fd(SignalFd, Pid);

    impl Fd {
        pub fn new(mask: &SigSet) -> nix::Result<Self> {
            Ok(Fd(
                SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC)?,
                getppid(),
            ))
        }

        /// Passes SIGTERM on to the command, unless it came from the worker: the worker
        /// signals the whole group, so the command has it already.
        pub fn pass_on(&self, command: Pid) {
            loop {
                match self.0.read_signal() {
                    Ok(Some(info)) => {
                        if i64::from(info.ssi_pid) != i64::from(self.1.as_raw()) {
                            let _ = kill(command, Signal::SIGTERM);
                        }
                    }
                    Ok(None) | Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => return,
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod sigterm {
    use nix::sys::signal::SigSet;
    use nix::unistd::Pid;

    /// Elsewhere the guard ignores SIGTERM (the worker sends it to the whole group).
    pub struct Fd;

    impl Fd {
        pub fn new(_: &SigSet) -> nix::Result<Self> {
            Ok(Fd)
        }

        pub fn pass_on(&self, _: Pid) {}
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
