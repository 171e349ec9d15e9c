//! The held-snapshot scenario (`skiplock bench held-snapshot`; not part of `all`): a worker
//! with default settings at a steady offered rate while a `REPEATABLE READ` transaction stays
//! open for a long time (30 minutes by default), holding back vacuum: the case the article
//! warns about. First the highest rate this machine sustains without a held snapshot (steady
//! runs at doubling rates until fewer than 95 % of the offered jobs start); then the held run
//! at `--rate` (1,000 jobs/s by default): a minute before, the held snapshot, five minutes
//! after, sampled each second. It reports jobs started against offered, pickup latency, dead
//! tuples and the table's size over time, and the time back under the footprint bound after
//! the snapshot ends; with `--plot FILE`, an SVG of the run.

use std::fmt::Write as _;
use std::time::Duration;

use super::options::Options;
use super::plot;
use super::report::{thousands, Section};
use super::sitting::Sitting;
use crate::bench::{self, FootprintPoint, Tick, FOOTPRINT_MAX_BOUND, FOOTPRINT_MEDIAN_BOUND};
use crate::error::{Error, Result};

/// The default offered rate of the held run.
pub(super) const RATE: f64 = 1_000.0;
/// The default length of the held snapshot.
pub(super) const HOLD: Duration = Duration::from_secs(30 * 60);
/// The share of the offered jobs that must start, with or without the held snapshot.
const KEPT: f64 = 0.95;

/// Refuses a `--rate` not above 0 and finite, and a `--duration` of 0.
pub(super) fn check(o: &Options) -> Result<()> {
    o.check_rate()?;
    if o.duration == Some(Duration::ZERO) {
        return Err(Error::refused("--duration must be above 0"));
    }
    Ok(())
}

/// How long the scenario takes with `o` where the machine keeps up with the offered rate
/// (`about 39 minutes, longer if ...`): a phase lasts until its offered jobs are all
/// enqueued, so a machine that falls behind takes longer.
pub(super) fn expected_time(o: &Options) -> String {
    if o.quick {
        return "about 20 s".into();
    }
    // The probe (up to five rates of 20 s and a scratch schema each), a minute before, the
    // hold, five minutes after.
    let secs = 150.0 + 60.0 + o.duration.unwrap_or(HOLD).as_secs_f64() + 300.0;
    format!(
        "about {:.0} minutes, longer if enqueues fall behind the offered rate (a phase lasts until its jobs are all enqueued)",
        (secs / 60.0).ceil()
    )
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let q = s.quick();
    let rate = s.options.rate.unwrap_or(RATE);
    let hold = s
        .options
        .duration
        .unwrap_or(if q { Duration::from_secs(3) } else { HOLD });
    let (before, after) = if q {
        (Duration::from_secs(2), Duration::from_secs(3))
    } else {
        (Duration::from_secs(60), Duration::from_secs(300))
    };

    // The highest rate without a held snapshot: doubling until fewer than 95 % start.
    let (probe_rates, probe_len): (&[f64], Duration) = if q {
        (&[1_000.0], Duration::from_secs(2))
    } else {
        (
            &[1_000.0, 2_000.0, 4_000.0, 8_000.0, 16_000.0],
            Duration::from_secs(20),
        )
    };
    let mut t = String::from(
        "### The highest rate without a held snapshot\n\n| offered jobs/s | s | started jobs/s | started/offered | p50 ms | p99 ms | dead tuples max |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut highest: Option<f64> = None;
    for &r in probe_rates {
        let run = bench::footprint(s.url, s.base, r, &[("steady", probe_len)]).await?;
        let Some(p) = run.phases.first() else { break };
        let kept = p.jobs_per_s / r;
        s.point(serde_json::json!({
            "scenario": "held-snapshot", "part": "probe", "rate": r,
            "seconds": p.seconds, "jobs": p.jobs, "jobs_per_s": p.jobs_per_s, "kept": kept,
            "p50_ms": p.p50_ms, "p99_ms": p.p99_ms, "dead_max": p.dead_max,
        }));
        let _ = writeln!(
            t,
            "| {} | {:.0} | {} | {:.1} % | {:.2} | {:.2} | {} |",
            thousands(r as i64),
            p.seconds,
            thousands(p.jobs_per_s.round() as i64),
            kept * 100.0,
            p.p50_ms,
            p.p99_ms,
            thousands(p.dead_max)
        );
        if kept < KEPT {
            break;
        }
        highest = Some(r);
    }
    let _ = writeln!(
        t,
        "\nEach row: {:.0} s of single-row enqueues (eight connections, evenly paced) through a worker with default settings; the doubling stops at the first rate where fewer than 95 % of the offered jobs started in the run. The enqueuing client shares the machine, so the highest rate is the machine's (server, worker and client together), not the worker's alone.\n",
        probe_len.as_secs_f64()
    );
    s.target(
        "the highest offered rate sustained without a held snapshot (>= 95 % started)",
        highest.map_or_else(
            || format!("none of {} jobs/s", thousands(probe_rates[0] as i64)),
            |r| format!("{} jobs/s", thousands(r as i64)),
        ),
        None,
    );

    // The held run.
    let run = bench::footprint(
        s.url,
        s.base,
        rate,
        &[("before", before), ("during", hold), ("after", after)],
    )
    .await?;
    let minutes = hold.as_secs_f64() / 60.0;
    let held_for = if hold.as_secs() % 60 == 0 {
        format!("{minutes:.0} min")
    } else {
        format!("{:.0} s", hold.as_secs_f64())
    };
    if let Some(d) = run.phases.iter().find(|p| p.phase == "during") {
        let kept = d.jobs_per_s / rate;
        s.target(
            format!(
                "a snapshot held {held_for} at {} jobs/s offered: >= 95 % of the offered jobs start while it is held",
                thousands(rate as i64)
            ),
            format!(
                "{} jobs/s started, {:.1} %; pickup p50 {:.2} ms, p99 {:.2} ms",
                thousands(d.jobs_per_s.round() as i64),
                kept * 100.0,
                d.p50_ms,
                d.p99_ms
            ),
            Some(kept >= KEPT),
        );
    }
    if let Some(a) = run.phases.iter().find(|p| p.phase == "after") {
        s.target(
            format!(
                "dead tuples back under the footprint bound ({}) after the held snapshot ends",
                thousands(FOOTPRINT_MAX_BOUND)
            ),
            format!(
                "max {} while held; under {} {}, under {} {} after it ended",
                thousands(
                    run.phases
                        .iter()
                        .find(|p| p.phase == "during")
                        .map_or(0, |p| p.dead_max)
                ),
                thousands(FOOTPRINT_MAX_BOUND),
                secs(a.under_max_bound_s),
                thousands(FOOTPRINT_MEDIAN_BOUND),
                secs(a.under_median_bound_s)
            ),
            None,
        );
    }
    let _ = writeln!(
        t,
        "### {} jobs/s offered, a `REPEATABLE READ` transaction held {held_for}\n\n| phase | s | started jobs/s | started/offered | dead tuples median | dead tuples max | under {} after | under {} after | table+indexes at its end | WAL bytes/job | transactions/job | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        thousands(rate as i64),
        thousands(FOOTPRINT_MAX_BOUND),
        thousands(FOOTPRINT_MEDIAN_BOUND)
    );
    for p in &run.phases {
        phase_row(&mut t, p, rate);
        let mut point = super::footprint::phase_json(p);
        point["scenario"] = "held-snapshot".into();
        point["part"] = "phase".into();
        point["kept"] = (p.jobs_per_s / rate).into();
        s.point(point);
    }
    for k in &run.timeline {
        s.point(serde_json::json!({
            "scenario": "held-snapshot", "part": "tick", "t_s": k.t_s, "phase": k.phase,
            "dead": k.dead, "table_bytes": k.table_bytes, "started": k.started,
            "p50_ms": k.p50_ms, "p99_ms": k.p99_ms,
        }));
    }
    let _ = writeln!(
        t,
        "\nStarted/offered divides the jobs started in a phase by the jobs its schedule offered; what the worker could not start in `during` is a backlog it works off in `after`. \"Under … after\" is the time from the held transaction's end to the first sample at or under that bound. p50 and p99 are over every job started in the phase.\n\n### Minute by minute\n\n| minute | phase | started jobs/s | p50 ms (median second) | p99 ms (worst second) | dead tuples at its end | table+indexes at its end |\n|---:|---|---:|---:|---:|---:|---:|"
    );
    minute_rows(&mut t, &run.timeline);
    if let Some(path) = &s.options.plot {
        let title = format!(
            "skiplock: {} jobs/s offered, a REPEATABLE READ transaction held {held_for} (shaded)",
            thousands(rate as i64)
        );
        let svg = plot::svg(&run.timeline, rate, &title)?;
        std::fs::write(path, svg).map_err(|e| Error::Output {
            what: format!("write {}", path.display()),
            source: Some(e),
        })?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        let _ = writeln!(t, "\n![The held-snapshot run, second by second]({name})");
    }
    Ok(Section {
        title: format!(
            "A held snapshot: {held_for} at {} jobs/s",
            thousands(rate as i64)
        ),
        table: t,
    })
}

fn phase_row(t: &mut String, p: &FootprintPoint, rate: f64) {
    let after = |s: Option<f64>| {
        if p.phase == "after" {
            secs(s)
        } else {
            "–".into()
        }
    };
    let _ = writeln!(
        t,
        "| {} | {:.0} | {} | {:.1} % | {} | {} | {} | {} | {:.1} MiB | {:.0} | {:.2} | {:.2} | {:.2} |",
        p.phase,
        p.seconds,
        thousands(p.jobs_per_s.round() as i64),
        p.jobs_per_s / rate * 100.0,
        thousands(p.dead_median),
        thousands(p.dead_max),
        after(p.under_max_bound_s),
        after(p.under_median_bound_s),
        p.table_bytes as f64 / (1024.0 * 1024.0),
        p.wal_bytes_per_job,
        p.transactions_per_job,
        p.p50_ms,
        p.p99_ms
    );
}

/// One row a minute of the timeline (a row per phase change within a minute).
fn minute_rows(t: &mut String, ticks: &[Tick]) {
    let mut i = 0;
    while i < ticks.len() {
        let minute = (ticks[i].t_s / 60.0).floor();
        let phase = &ticks[i].phase;
        let j = ticks[i..]
            .iter()
            .position(|k| (k.t_s / 60.0).floor() != minute || &k.phase != phase)
            .map_or(ticks.len(), |n| i + n);
        let group = &ticks[i..j];
        let span = group
            .last()
            .map_or(1.0, |l| l.t_s - if i == 0 { 0.0 } else { ticks[i - 1].t_s })
            .max(1.0);
        let started: usize = group.iter().map(|k| k.started).sum();
        let mut p50: Vec<f64> = group
            .iter()
            .filter(|k| k.started > 0)
            .map(|k| k.p50_ms)
            .collect();
        p50.sort_by(f64::total_cmp);
        let p99 = group
            .iter()
            .filter(|k| k.started > 0)
            .map(|k| k.p99_ms)
            .fold(0.0, f64::max);
        let last = &group[group.len() - 1];
        let _ = writeln!(
            t,
            "| {:.0} | {} | {} | {:.2} | {:.2} | {} | {:.1} MiB |",
            minute + 1.0,
            phase,
            thousands((started as f64 / span).round() as i64),
            p50.get(p50.len() / 2).copied().unwrap_or(0.0),
            p99,
            thousands(last.dead),
            last.table_bytes as f64 / (1024.0 * 1024.0)
        );
        i = j;
    }
}

fn secs(s: Option<f64>) -> String {
    s.map_or_else(|| "never".into(), |s| format!("{s:.0} s"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(t_s: f64, phase: &str, started: usize, p99_ms: f64) -> Tick {
        Tick {
            t_s,
            phase: phase.into(),
            dead: t_s as i64,
            table_bytes: 1 << 20,
            started,
            p50_ms: 1.0,
            p99_ms,
        }
    }

    #[test]
    fn the_minute_table_has_a_row_a_minute_and_one_more_where_the_phase_changes() {
        let mut ticks = Vec::new();
        for s in 1..=150 {
            let phase = if s <= 90 { "before" } else { "during" };
            ticks.push(tick(s as f64, phase, 1000, s as f64 / 10.0));
        }
        let mut t = String::new();
        minute_rows(&mut t, &ticks);
        let rows: Vec<&str> = t.lines().collect();
        // Minute 1 (seconds 1-59), minute 2 before (60-90), minute 2 during (91-119),
        // minute 3 (120-150).
        assert_eq!(rows.len(), 4, "{t}");
        assert_eq!(
            rows[0],
            "| 1 | before | 1,000 | 1.00 | 5.90 | 59 | 1.0 MiB |"
        );
        assert!(rows[1].starts_with("| 2 | before | 1,000 |"), "{}", rows[1]);
        assert!(rows[2].starts_with("| 2 | during | 1,000 |"), "{}", rows[2]);
        assert!(
            rows[3].starts_with("| 3 | during | 1,000 | 1.00 | 15.00 | 150 |"),
            "{}",
            rows[3]
        );
    }

    #[test]
    fn seconds_without_a_started_job_count_in_the_rate_but_not_the_latency() {
        let ticks = [tick(1.0, "during", 100, 3.0), tick(2.0, "during", 0, 0.0)];
        let mut t = String::new();
        minute_rows(&mut t, &ticks);
        assert_eq!(t, "| 1 | during | 50 | 1.00 | 3.00 | 2 | 1.0 MiB |\n");
    }
}
