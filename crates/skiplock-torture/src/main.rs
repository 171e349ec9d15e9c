//! `skiplock-torture`: runs real worker processes (typed handlers, and `skiplock work
//! --exec`) against a PostgreSQL of its own while injecting faults, logs every execution
//! outside the database, and checks at the end that nothing was lost, nothing was completed
//! twice, no stale completion was accepted, and no two runs of a job overlapped while the
//! earlier one held its lease. `--unfenced` is the negative control (workers without the
//! attempts fence): the accounting must fail.
//!
//! ```sh
//! cargo build --release -p skiplock-cli -p skiplock-torture
//! target/release/skiplock-torture run --duration 30m --jobs 200000   # the long run
//! target/release/skiplock-torture run --duration 45s --jobs 3000     # the short run CI does
//! ```
//!
//! `flow` is the workflows' scenario: chains, diamonds and a fan-out of 10,000 children run
//! by worker processes whose handlers write an effect and complete the job in one
//! transaction (`JobContext::complete_tx`), under `kill -9` and SIGSTOP; the accounting
//! counts each job's effects (exactly one) and checks that no job ran before its parents
//! were done. `--no-tx` is its negative control (effect and completion apart): it must find
//! duplicate effects.
//!
//! ```sh
//! target/release/skiplock-torture flow --duration 60s
//! target/release/skiplock-torture flow --duration 20s --no-tx   # must fail
//! ```

mod check;
mod faults;
mod flow;
mod flow_check;
mod flow_job;
mod jobs;
mod log;
mod orchestrate;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "skiplock-torture", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the torture: workers, faults, then the accounting.
    Run(orchestrate::Args),
    /// Workflows with exactly-once effects: chains, diamonds and a fan-out under kill -9 and
    /// SIGSTOP, then each job's effects counted.
    Flow(flow::Args),
    /// A worker process with typed handlers (started by `run`).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        url: String,
        #[arg(long)]
        schema: String,
        #[arg(long)]
        log: PathBuf,
        #[arg(long)]
        name: String,
        /// Outcomes and heartbeats without the attempts fence (the negative control).
        #[arg(long)]
        unfenced: bool,
        /// Run the flow scenario's job (`flow`) instead of the `run` ones.
        #[arg(long)]
        flow: bool,
        /// With `--flow`: the negative control's handler (effect and completion apart).
        #[arg(long, requires = "flow")]
        no_tx: bool,
    },
    /// One job run by `skiplock work --exec` (started by the exec workers).
    #[command(hide = true)]
    ExecJob {
        #[arg(long)]
        log: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::ExecJob { log } => jobs::exec_job(log),
        Command::Worker {
            url,
            schema,
            log,
            name,
            unfenced,
            flow,
            no_tx,
        } => {
            if flow {
                return runtime(flow_job::worker(url, schema, name, log, no_tx));
            }
            let _ = jobs::LOG.set(log);
            runtime(worker(url, schema, name, unfenced))
        }
        Command::Run(args) => runtime(orchestrate::run(args)),
        Command::Flow(args) => runtime(flow::run(args)),
    }
}

fn runtime(f: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(f) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// A typed-handler worker process; SIGTERM shuts it down gracefully.
async fn worker(url: String, schema: String, name: String, unfenced: bool) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_ansi(false)
        .init();
    let mut client = skiplock::Client::builder(&url)
        .schema(&schema)
        .pool_size(6)
        .application_name(format!("torture-{name}"));
    if unfenced {
        client = client.unfenced_for_negative_control();
    }
    let client = client.build()?;
    let registry = skiplock::Registry::new()
        .register::<jobs::Typed>()
        .register::<jobs::Slow>();
    let worker = skiplock::Worker::builder(client, registry)
        .queue("typed", 8)
        .lease(jobs::LEASE)
        .heartbeat_interval(Duration::from_secs(1))
        .reap_interval(Duration::from_secs(1))
        .poll_interval(Some(Duration::from_secs(1)))
        .shutdown_timeout(Duration::from_secs(2))
        .build()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stats = worker
        .run(async move {
            let _ = term.recv().await;
        })
        .await?;
    eprintln!("{name} stopped: {stats:?}");
    Ok(())
}
