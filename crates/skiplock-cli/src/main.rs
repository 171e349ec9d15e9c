//! The `skiplock` command. It parses arguments and calls the library; the queue's logic
//! lives in the `skiplock` crate.
// Output goes through output's outln!/errln!: `println!` panics when the reader went away.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod admin;
mod bench;
mod bulk;
mod connect;
mod database;
mod demo;
mod enqueue;
mod errors;
mod exec;
mod guard;
mod jobs;
mod lab;
mod metrics;
mod output;
mod parse;
mod queue;
mod schedule;
mod serve;
mod stats;
mod work;
mod workers;
mod workflow;

use std::process::ExitCode;

/// mimalloc: a worker allocates a few small objects for every job (its row, its task, its
/// outcome), and glibc's allocator took a fifth of the worker process's profile for them
/// (docs/BENCHMARKS.md, the note on the best setting and the defaults). The library leaves
/// the choice to the program that uses it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

use crate::output::{errln, outln, QuietStderr};

/// A PostgreSQL job queue: FOR UPDATE SKIP LOCKED claims with leases, guarded completion,
/// retries with backoff, LISTEN/NOTIFY wake-ups.
///
/// The database is --database-url, else DATABASE_URL, else a private local PostgreSQL kept in
/// ./.skiplock (or $SKIPLOCK_HOME), created and started on first use from the local server
/// binaries, and restarted on the port it had. Exit status: 0 success, 1 a database or runtime error, 2 a usage error or input
/// that was refused.
#[derive(Debug, Parser)]
#[command(name = "skiplock", version, propagate_version = true)]
struct Cli {
    /// PostgreSQL connection URL (postgres://user@host:port/db); an empty one is refused.
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,

    /// Schema holding the queue's tables. Only `migrate` creates one (on the embedded
    /// database, the default schema migrates itself on first use).
    #[arg(long, global = true, default_value = skiplock::Schema::DEFAULT)]
    schema: String,

    /// Do not send statement, lock and idle-in-transaction timeouts at connect (a pooler
    /// that refuses them, such as a stock PgBouncer, is retried without them anyway, with
    /// one warning; this skips the refused try).
    #[arg(long, global = true)]
    no_server_timeouts: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the queue's schema, or upgrade it to this version. Safe to run again, and from
    /// several processes at once.
    Migrate,
    /// Enqueue one job, JSON lines from standard input, or a workflow (--workflow FILE: jobs
    /// that wait for each other).
    Enqueue(enqueue::Args),
    /// Run a worker: built-in demo kinds, or every job handed to a command (--exec).
    Work(work::Args),
    /// Queue depths, throughput, table health and sessions holding back vacuum.
    Stats(stats::Args),
    /// List, pause, resume or limit queues (a pause or a limit holds for every worker of the
    /// queue on this database, in every process).
    Queue(queue::Args),
    /// Return jobs whose lease expired to the queue, once (for cron).
    Reap(admin::JsonArgs),
    #[command(about = parse::text!(format!(
        "Delete (or archive) finished jobs older than a retention, in batches of {}",
        parse::grouped(u64::from(skiplock::PruneOptions::MAX_BATCH))
    )))]
    Prune(admin::PruneArgs),
    /// Make jobs ready to run now (queued, done or failed ones): by id, or every job some
    /// filters match (as `jobs` takes them; counted and confirmed first).
    Retry(admin::IdsArgs),
    /// Cancel queued or running jobs (they become failed, 'cancelled'): by id, or every job
    /// some filters match.
    Cancel(admin::IdsArgs),
    /// Delete jobs that are not running: by id, or every job some filters match.
    Delete(admin::IdsArgs),
    /// Show one job: every column, its output, and the jobs it waits for and that wait for
    /// it.
    Show(admin::ShowArgs),
    /// List jobs, newest first: by state (stored or derived: scheduled, available, waiting,
    /// retrying, cancelled), queue, kind, id range and age, a page at a time (--before).
    /// It only lists: retry, cancel and delete take the same filters.
    Jobs(jobs::Args),
    /// The workers registered on the schema (running, sleeping with the poll off, or gone).
    Workers(workers::Args),
    /// Periodic (cron) jobs: add, list, remove, pause, resume, run-now.
    Schedule {
        #[command(subcommand)]
        action: schedule::Action,
    },
    /// Reproduce the article's experiments on this database, in a scratch schema.
    Lab(lab::Args),
    #[command(about = parse::text!(format!(
        "Run {} jobs through {} workers, crash one, and summarise (a scratch schema)",
        parse::grouped(demo::DEFAULT_JOBS as u64),
        demo::DEFAULT_WORKERS
    )))]
    Demo(demo::Args),
    /// Measure throughput (against the raw-SQL ceiling), latency, enqueue rate, claim cost
    /// with history, and footprint, in scratch schemas.
    Bench(bench::Args),
    /// Serve the web dashboard (basic authentication from SKIPLOCK_WEB_USER and
    /// SKIPLOCK_WEB_PASSWORD).
    Serve(serve::Args),
    /// Manage the embedded default database (./.skiplock, or $SKIPLOCK_HOME).
    Pg {
        #[command(subcommand)]
        action: PgAction,
    },
    /// Run one job's command under a guard that ends its process group when the worker
    /// goes away (started by `work --exec`, not by hand).
    #[command(hide = true)]
    ExecGuard(guard::Args),
}

#[derive(Debug, Subcommand)]
enum PgAction {
    /// Say whether it exists and runs, and where.
    Status,
    /// Create it if needed and start it.
    Start,
    /// Stop it.
    Stop,
    /// Print a connection URL for it (starting it if needed).
    Url,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    // A small synchronous program of its own: no runtime, no log set-up.
    let cli = match cli {
        Cli {
            command: Command::ExecGuard(args),
            ..
        } => return guard::run(args),
        cli => cli,
    };
    let default_log = match cli.command {
        Command::Work(_) => "warn,skiplock=info",
        Command::Serve(_) => "warn,skiplock_web=info",
        _ => "warn",
    };
    {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log)),
            )
            // A closed standard error drops the log lines; the work goes on.
            .with_writer(|| QuietStderr)
            .log_internal_errors(false)
            .with_ansi(output::colour(std::io::IsTerminal::is_terminal(
                &std::io::stderr(),
            )))
            .finish()
            .with(tracing_subscriber::filter::filter_fn(not_the_job_span))
            .init();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let url_for_errors = cli.database_url.clone();
    let result = rt.block_on(run(cli));
    // No command started by `work --exec` outlives the worker.
    exec::kill_all();
    // Output that could not be written (a full disk) fails the command, whatever it did.
    let result = match (result, output::stdout_failure()) {
        (Ok(()), Some(w)) => Err(anyhow::Error::new(w).context("could not write the output")),
        (result, _) => result,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let usage = errors::is_usage(&e);
            let reaching_db = errors::is_reaching_db(&e);
            // One line: the whole cause chain, with the database's multi-line reports folded.
            let mut msg = errors::one_line(&e);
            if let (true, Some(url)) = (reaching_db, url_for_errors.as_deref()) {
                msg.push_str(&format!(" (database {})", connect::redact(url)));
            }
            errln!("error: {msg}");
            ExitCode::from(errors::interrupted_status(&e).unwrap_or(if usage { 2 } else { 1 }))
        }
    }
}

/// Help and version go out as clap prints them; a usage error becomes one line and exit 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let failure = e.print().err().or_else(output::stdout_failure);
        if let Some(w) = failure.filter(|w| w.kind() != std::io::ErrorKind::BrokenPipe) {
            errln!("error: could not write the output: {w}");
            return ExitCode::FAILURE;
        }
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    errln!("error: {} (see --help)", errors::clap_one_line(e));
    ExitCode::from(2)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // DATABASE_URL set but empty is refused, as `--database-url ''` is (clap reads an empty
    // variable as unset).
    let url = cli.database_url.or_else(|| {
        std::env::var_os("DATABASE_URL")
            .filter(|v| v.is_empty())
            .map(|_| String::new())
    });
    let target = connect::Target {
        url,
        schema: cli.schema,
        server_timeouts: !cli.no_server_timeouts,
    };
    match cli.command {
        Command::Migrate => {
            let client = target.client_with(1, false).await?;
            let report = client.migrate().await?;
            if report.applied.is_empty() {
                outln!(
                    "schema {} is up to date (version {})",
                    target.schema,
                    report.to
                );
            } else {
                let names: Vec<String> = report
                    .applied
                    .iter()
                    .map(|(v, n)| format!("{v:04}_{n}"))
                    .collect();
                outln!(
                    "schema {}: migrated from version {} to {} ({})",
                    target.schema,
                    report.from,
                    report.to,
                    names.join(", ")
                );
            }
            Ok(())
        }
        Command::Enqueue(args) => enqueue::run(&target, args).await,
        Command::Work(args) => work::run(&target, args).await,
        Command::Stats(args) => stats::run(&target, args).await,
        Command::Workers(args) => workers::run(&target, args).await,
        Command::Queue(args) => queue::run(&target, args).await,
        Command::Reap(args) => admin::reap(&target, args).await,
        Command::Prune(args) => admin::prune(&target, args).await,
        Command::Retry(args) => admin::ids(&target, admin::Action::Retry, args).await,
        Command::Cancel(args) => admin::ids(&target, admin::Action::Cancel, args).await,
        Command::Delete(args) => admin::ids(&target, admin::Action::Delete, args).await,
        Command::Show(args) => admin::show(&target, args).await,
        Command::Jobs(args) => jobs::run(&target, args).await,
        Command::Schedule { action } => schedule::run(&target, action).await,
        Command::Lab(args) => lab::run(&target, args).await,
        Command::Demo(args) => demo::run(&target, args).await,
        Command::Bench(args) => bench::run(&target, args).await,
        Command::Serve(args) => serve::run(&target, args).await,
        Command::ExecGuard(_) => Err(anyhow::anyhow!("exec-guard runs on its own")),
        Command::Pg { action } => {
            let home = database::Home::locate()?;
            match action {
                PgAction::Status => outln!("{}", home.status()),
                PgAction::Start => {
                    let url = home.ensure_running()?;
                    outln!("running: {url}");
                }
                PgAction::Stop => {
                    home.stop()?;
                    outln!("stopped");
                }
                PgAction::Url => outln!("{}", home.ensure_running()?),
            }
            Ok(())
        }
    }
}

/// The log's filter leaves out the span each job runs in ([`skiplock::JOB_SPAN`]): formatting
/// its fields for every job cost `work` more CPU than the rest of a no-op job's path, and
/// the worker's log lines about a job carry the job's kind, id, attempt and queue
/// themselves when the span is off (`work::a_failed_attempt_is_logged_with_its_job`).
fn not_the_job_span(m: &tracing::Metadata<'_>) -> bool {
    !(m.is_span() && m.name() == skiplock::JOB_SPAN && m.target() == skiplock::JOB_SPAN_TARGET)
}
