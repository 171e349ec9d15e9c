//! The suite's report: a section per scenario, the targets, and the Markdown of
//! docs/BENCHMARKS.md with the head that says where the figures come from.

use std::fmt::Write as _;

/// A scenario's part of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Section {
    /// Its title (`Throughput (50000 no-op jobs per run)`).
    pub title: String,
    /// Its tables and the words under them, in Markdown.
    pub table: String,
}

/// A target the suite checks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Target {
    /// What it asks (`batched enqueue >= 100,000 jobs/s`).
    pub what: String,
    /// The figure measured.
    pub measured: String,
    /// Whether it was met; `None`: see the section's table.
    pub met: Option<bool>,
}

/// What one suite run found.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Report {
    /// A section per scenario run, in their order.
    pub sections: Vec<Section>,
    /// The targets of the scenarios run, in their order.
    pub targets: Vec<Target>,
    /// How long the scenarios took, from the first run to the last (wall time).
    pub took: std::time::Duration,
}

impl Report {
    /// The report as docs/BENCHMARKS.md holds it: the head, each section, and the targets.
    pub fn markdown(&self, header: &Header) -> String {
        let mut md = header.markdown();
        let secs = self.took.as_secs();
        let _ = writeln!(
            md,
            "- the run took {} min {} s (wall time of the scenarios, after the build and the cluster's start)",
            secs / 60,
            secs % 60
        );
        for s in &self.sections {
            let _ = write!(md, "\n## {}\n\n{}", s.title, s.table);
        }
        let mut t = String::from("| target | measured | met |\n|---|---|---|\n");
        for target in &self.targets {
            let met = match target.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "see the table",
            };
            let _ = writeln!(t, "| {} | {} | {met} |", target.what, target.measured);
        }
        let _ = write!(md, "\n## Targets\n\n{t}");
        md
    }
}

/// The head of the report: the command that produced it, and the versions and the machine it
/// ran on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Header {
    /// The command's arguments after `skiplock`, without the database URL (`bench all
    /// --markdown`).
    pub command: String,
    /// The server's version (`unknown` if it could not be asked).
    pub server: String,
    /// The CPU's model name (`unknown CPU`).
    pub cpu: String,
    /// Cores available (0: unknown).
    pub cores: usize,
    /// Memory (`4 GiB`, or `unknown`).
    pub memory: String,
}

impl Header {
    /// Asks the server at `url` its version, and this machine what it is (from `/proc`).
    pub async fn read(url: &str, command: &str) -> Header {
        let server = server_version(url)
            .await
            .unwrap_or_else(|| "unknown".into());
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("MemTotal"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
            .map_or_else(
                || "unknown".into(),
                |kb| format!("{:.0} GiB", kb / 1024.0 / 1024.0),
            );
        Header {
            command: command.to_owned(),
            server,
            cpu,
            cores,
            memory,
        }
    }

    /// The head in Markdown: the title, how the figures were produced, and the versions
    /// and the machine (skiplock's version is this crate's: one version for the workspace).
    pub fn markdown(&self) -> String {
        let Header {
            command,
            server,
            cpu,
            cores,
            memory,
        } = self;
        // The held snapshot has a script and a document of its own.
        let (title, script) = if command.starts_with("bench held-snapshot") {
            (
                "Benchmark: a held snapshot",
                "scripts/bench-held-snapshot.sh",
            )
        } else {
            ("Benchmarks", "scripts/bench.sh")
        };
        format!(
            "# {title}\n\nProduced by `{script}` (which runs `skiplock {command}` against a throwaway \
             cluster). Every figure below comes from that one run on one machine; compare ratios, not \
             absolute numbers, across machines.\n\n- skiplock {} ({} build)\n- PostgreSQL {server} \
             (local, default settings)\n- {cores} cores ({cpu}), {memory} of memory; the database, the workers \
             and the load generator share them\n",
            env!("CARGO_PKG_VERSION"),
            if cfg!(debug_assertions) { "debug" } else { "release" },
        )
    }
}

async fn server_version(url: &str) -> Option<String> {
    let client = skiplock::Client::builder(url).pool_size(1).build().ok()?;
    client.server_version().await.ok()
}

/// The median of some runs (0 for none).
pub(super) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        // An even number of runs: the mean of the middle two, not the upper one.
        _ if n % 2 == 0 => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        _ => v[n / 2],
    }
}

/// A whole number with a comma between each group of three digits (`10,000`).
pub(super) fn thousands(n: impl std::fmt::Display) -> String {
    let text = n.to_string();
    let (sign, digits) = match text.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", text.as_str()),
    };
    let mut out = sign.to_owned();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_number_of_runs_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0]), 3.0);
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
        // The limits scenario's four runs of one setup, in the order they ran.
        assert_eq!(median(&[51_987.0, 51_328.0, 46_816.0, 48_759.0]), 50_043.5);
        assert_eq!(median(&[2.0, 1.0]), 1.5);
    }

    #[test]
    fn thousands_groups_digits() {
        for (n, s) in [
            (0, "0"),
            (100, "100"),
            (1_000, "1,000"),
            (65_432, "65,432"),
            (10_000_000, "10,000,000"),
            (-6_000, "-6,000"),
        ] {
            assert_eq!(thousands(n), s);
        }
    }

    #[test]
    fn markdown_has_the_head_each_section_and_the_targets() {
        let header = Header {
            command: "bench all --markdown".into(),
            server: "15.4".into(),
            cpu: "a CPU".into(),
            cores: 2,
            memory: "4 GiB".into(),
        };
        let report = Report {
            sections: vec![Section {
                title: "Enqueue".into(),
                table: "| mode |\n|---|\n| single |\n".into(),
            }],
            took: std::time::Duration::from_secs(125),
            targets: vec![
                Target {
                    what: "fast".into(),
                    measured: "1 jobs/s".into(),
                    met: Some(false),
                },
                Target {
                    what: "see".into(),
                    measured: "x".into(),
                    met: None,
                },
            ],
        };
        let md = report.markdown(&header);
        assert!(md.starts_with("# Benchmarks\n\nProduced by `scripts/bench.sh` (which runs `skiplock bench all --markdown` against"));
        assert!(md.contains(
            "- PostgreSQL 15.4 (local, default settings)\n- 2 cores (a CPU), 4 GiB of memory;"
        ));
        assert!(
            md.contains("and the load generator share them\n- the run took 2 min 5 s (wall time")
        );
        assert!(md.contains("\n## Enqueue\n\n| mode |\n|---|\n| single |\n\n## Targets\n\n"));
        assert!(md.ends_with("| target | measured | met |\n|---|---|---|\n| fast | 1 jobs/s | **no** |\n| see | x | see the table |\n"));
        // The held snapshot's document names its own script.
        let held = Header {
            command: "bench held-snapshot --markdown --plot docs/held-snapshot.svg".into(),
            ..header
        };
        assert!(held.markdown().starts_with("# Benchmark: a held snapshot\n\nProduced by `scripts/bench-held-snapshot.sh` (which runs `skiplock bench held-snapshot --markdown"));
    }
}
