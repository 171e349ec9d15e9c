//! The `skiplock` command. It parses arguments and calls the library; the queue's logic
//! lives in the `skiplock` crate.

mod database;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// A PostgreSQL job queue: FOR UPDATE SKIP LOCKED claims with leases, guarded completion,
/// retries with backoff, LISTEN/NOTIFY wake-ups.
///
/// The database is --database-url, else DATABASE_URL, else a private local PostgreSQL kept in
/// ./.skiplock (or $SKIPLOCK_HOME), created and started on first use from the local server
/// binaries.
#[derive(Debug, Parser)]
#[command(name = "skiplock", version, propagate_version = true)]
struct Cli {
    /// PostgreSQL connection URL (postgres://user@host:port/db).
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,

    /// Schema holding the queue's tables.
    #[arg(long, global = true, default_value = skiplock::DEFAULT_SCHEMA)]
    schema: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the queue's schema, or upgrade it to this version. Safe to run again, and from
    /// several processes at once.
    Migrate,
    /// Manage the embedded default database (./.skiplock, or $SKIPLOCK_HOME).
    Pg {
        #[command(subcommand)]
        action: PgAction,
    },
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the whole cause chain, with the database's multi-line reports folded.
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Migrate => {
            let url = database::resolve(cli.database_url.as_deref())?;
            let client = skiplock::Client::builder(url)
                .schema(&cli.schema)
                .pool_size(1)
                .build()?;
            let report = client.migrate().await?;
            if report.applied.is_empty() {
                println!(
                    "schema {} is up to date (version {})",
                    cli.schema, report.to
                );
            } else {
                let names: Vec<String> = report
                    .applied
                    .iter()
                    .map(|(v, n)| format!("{v:04}_{n}"))
                    .collect();
                println!(
                    "schema {}: migrated from version {} to {} ({})",
                    cli.schema,
                    report.from,
                    report.to,
                    names.join(", ")
                );
            }
            Ok(())
        }
        Command::Pg { action } => {
            let home = database::Home::locate()?;
            match action {
                PgAction::Status => println!("{}", home.status()),
                PgAction::Start => {
                    let url = home.ensure_running()?;
                    println!("running: {url}");
                }
                PgAction::Stop => {
                    home.stop()
                        .context("could not stop the embedded database")?;
                    println!("stopped");
                }
                PgAction::Url => println!("{}", home.ensure_running()?),
            }
            Ok(())
        }
    }
}
