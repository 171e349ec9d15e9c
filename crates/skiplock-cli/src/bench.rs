//! `skiplock bench`: the benchmark suite of `skiplock_bench::suite`, printed as tables, JSON
//! lines, or the Markdown of docs/BENCHMARKS.md.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use skiplock_bench::suite::{self, Header, Observer, Section};

use crate::connect::Target;
use crate::output::{errln, out, outln, print_json};
use crate::parse::parse_duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// No-op jobs through a worker, against the ceiling: pgbench running the worker's own
    /// claim and a fenced completion at 1 to 16 clients (the Rust loops of the same
    /// statements as a second line, and the ceiling where no pgbench is found).
    Throughput,
    /// Enqueue-to-start latency at a steady offered load, LISTEN on and off, beside its floor
    /// (a bare LISTEN connection claiming with the worker's statement).
    Latency,
    /// Enqueue rate: single-row transactions and batches.
    Enqueue,
    /// Claim latency with many finished rows kept.
    History,
    /// Dead tuples, size, WAL and transactions per job at a steady load, with and without a
    /// transaction holding back vacuum.
    Footprint,
    /// The same total concurrency (200, or --concurrency) split over 1, 2, 4 and 8
    /// `skiplock work` processes draining one queue: total jobs/s against one process, and
    /// the claim latency beside them.
    Processes,
    /// Flow control: concurrency 200 with a limit that does not bind, and with a per-key
    /// limit of 2 over 1,000 keys, against the same runs without limits and the raw-SQL
    /// ceiling, in one sitting.
    Limits,
    /// Workflows: 10,000 jobs enqueued as a fan-out, without edges and as a chain against
    /// `enqueue_many`, and a worker through a fan-out and chains against plain jobs (jobs/s,
    /// and the time per link of a chain).
    Workflow,
    /// skiplock's worker against graphile_worker on the same cluster, in one run: the peer is
    /// a separate binary of the bench crate (`cargo build --release -p skiplock-bench
    /// --features peers --bin skiplock-peer-graphile`, which scripts/bench.sh runs), found
    /// beside this program or through SKIPLOCK_PEER_GRAPHILE; without it, the scenario says
    /// how to build it.
    Peers,
    /// Everything above (see `bench all`'s first line for how long it takes).
    All,
    /// Not part of `all`: the highest offered rate sustained without a held snapshot, then a
    /// worker at --rate (default 1,000 jobs/s) while a REPEATABLE READ transaction stays open
    /// for --duration (default 30m), a minute before and five after: jobs started against
    /// offered, pickup latency, dead tuples and table size over time, and the time back under
    /// the footprint bound (about 40 minutes, longer where enqueues fall behind the offered
    /// rate; --plot FILE writes an SVG of the run).
    HeldSnapshot,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which scenario.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Jobs per throughput run (default 100,000), the enqueue scenario's batch total (default
    /// 100,000), the processes scenario's queue (default 100,000), and the workflow scenario's jobs per shape (default 10,000; its chains are
    /// 100 of a hundredth of that, and one of a tenth).
    #[arg(long)]
    jobs: Option<usize>,
    /// Queue concurrency for one throughput point (against the ceiling sweep); default: a
    /// sweep of points. The workflow scenario's worker: default 100. The processes
    /// scenario's total, split over the processes: default 200.
    #[arg(long)]
    concurrency: Option<usize>,
    /// Jobs per claim for the --concurrency point (default: the worker's default).
    #[arg(long, requires = "concurrency")]
    batch: Option<u32>,
    /// Claims in flight for the --concurrency point (default: automatic).
    #[arg(long, requires = "concurrency")]
    claims_in_flight: Option<usize>,
    /// Offered jobs per second (latency: one point instead of the 50/500/5000 sweep;
    /// footprint: default 200; held-snapshot: default 1000).
    #[arg(long)]
    rate: Option<f64>,
    /// How long each latency run offers jobs (default: about 15,000 jobs, between 10s and
    /// 30s: 30s at 50 and 500 jobs/s, 10s at 5,000), or the footprint's steady phase
    /// (default 2m; the held-snapshot run adds 30s before, 60s held, 90s after), or how
    /// long the held-snapshot scenario holds its snapshot (default 30m).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Write an SVG plot of the held-snapshot run to this file (that scenario only).
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,
    /// Finished rows for the history scenario, comma-separated (default 0,1000000,10000000).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<i64>,
    /// Tiny sizes, for checking that every scenario still runs (seconds, not minutes).
    #[arg(long)]
    quick: bool,
    /// One JSON object per measured point.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print the report as Markdown (scripts/bench.sh writes it to docs/BENCHMARKS.md).
    #[arg(long)]
    markdown: bool,
    /// Also write every measured point, each run of each scenario as --json prints it (one
    /// JSON object per line, in the order they ran), to FILE (created, or emptied first).
    #[arg(long, value_name = "FILE")]
    points: Option<std::path::PathBuf>,
}

impl Scenario {
    fn suite(self) -> suite::Scenario {
        match self {
            Scenario::Throughput => suite::Scenario::Throughput,
            Scenario::Latency => suite::Scenario::Latency,
            Scenario::Enqueue => suite::Scenario::Enqueue,
            Scenario::History => suite::Scenario::History,
            Scenario::Footprint => suite::Scenario::Footprint,
            Scenario::Processes => suite::Scenario::Processes,
            Scenario::Limits => suite::Scenario::Limits,
            Scenario::Workflow => suite::Scenario::Workflow,
            Scenario::Peers => suite::Scenario::Peers,
            Scenario::All => suite::Scenario::All,
            Scenario::HeldSnapshot => suite::Scenario::HeldSnapshot,
        }
    }
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    let url = target.url().await?;
    let asked = args.scenario.suite();
    let mut options = suite::Options::default();
    options.jobs = args.jobs;
    options.concurrency = args.concurrency;
    options.batch = args.batch;
    options.claims_in_flight = args.claims_in_flight;
    options.rate = args.rate;
    options.duration = args.duration;
    options.sizes = args.sizes;
    options.quick = args.quick;
    options.plot = args.plot;
    if asked == suite::Scenario::All || asked == suite::Scenario::Processes {
        // The worker processes are this command.
        options.program = Some(std::env::current_exe()?);
    }
    suite::check(asked, &options)?;
    if asked == suite::Scenario::All && !args.json {
        errln!(
            "skiplock bench all: expect {}",
            suite::expected_time(args.quick)
        );
    }
    if asked == suite::Scenario::HeldSnapshot && !args.json {
        errln!(
            "skiplock bench held-snapshot: expect {}",
            suite::held_snapshot_expected_time(&options)
        );
    }
    let header = if args.markdown {
        Some(Header::read(&url, &command()).await)
    } else {
        None
    };
    let points = match &args.points {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        )),
        None => None,
    };
    let mut printer = Printer {
        json: args.json,
        markdown: args.markdown,
        bar: None,
        points,
    };
    let report = suite::run(&url, &target.schema, asked, &options, &mut printer).await?;
    if let Some(header) = header {
        out!("{}", report.markdown(&header));
    }
    // After the report: a points file that cannot be finished does not cost the report.
    if let (Some(w), Some(path)) = (printer.points.as_mut(), &args.points) {
        w.flush()
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Prints what the suite reports as it goes: JSON lines, or each section as a table (the
/// Markdown is printed whole at the end), and a progress bar on a terminal.
struct Printer {
    json: bool,
    markdown: bool,
    bar: Option<indicatif::ProgressBar>,
    /// --points: every point, one JSON line each (dropped after a write fails, with one
    /// warning; the report goes on).
    points: Option<std::io::BufWriter<std::fs::File>>,
}

impl Observer for Printer {
    fn point(&mut self, point: serde_json::Value) {
        if self.json {
            print_json(&point);
        }
        if let Some(w) = &mut self.points {
            if let Err(e) = writeln!(w, "{point}") {
                errln!("warning: --points: {e}; no more points are written");
                self.points = None;
            }
        }
    }

    fn section(&mut self, section: &Section) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if !self.json && !self.markdown {
            outln!("\n{}\n{}", section.title, section.table);
        }
    }

    fn planned(&mut self, scenario: suite::Scenario, runs: usize) {
        let bar = if self.json || self.markdown || !std::io::stderr().is_terminal() {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(runs as u64)
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(&format!(
                "{} {{bar:30}} {{pos}}/{{len}} runs  {{elapsed_precise}}  {{msg}}",
                scenario.name()
            ))
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        self.bar = Some(bar);
    }

    fn run(&mut self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.to_owned());
        }
    }

    fn ran(&mut self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }
}

/// The command, without the (machine-specific) database URL.
fn command() -> String {
    let mut cmd: Vec<String> = Vec::new();
    let mut skip = false;
    for a in std::env::args().skip(1) {
        if skip {
            skip = false;
            continue;
        }
        // Where the database is and where the points go change no figure.
        if a == "--database-url" || a == "--points" {
            skip = true;
            continue;
        }
        if a.starts_with("--database-url=") || a.starts_with("--points=") {
            continue;
        }
        cmd.push(a);
    }
    cmd.join(" ")
}
