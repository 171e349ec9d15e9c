//! The latency scenario: enqueue-to-start latency at each offered load, LISTEN on and off.

use std::fmt::Write as _;
use std::time::Duration;

use super::options::Options;
use super::report::Section;
use super::sitting::Sitting;
use crate::bench;
use crate::error::Result;

/// Refuses a rate that is not above 0 and finite.
pub(super) fn check(o: &Options) -> Result<()> {
    o.check_rate()
}

/// A rate's runs: the worker with LISTEN and the floor in each round, the poll once.
struct Rate {
    rate: f64,
    /// How long each of its runs offers jobs (the warm-up aside).
    dur: Duration,
    listen: Vec<bench::LatencyPoint>,
    floor: std::result::Result<Vec<bench::LatencyPoint>, String>,
    poll: Option<bench::LatencyPoint>,
}

/// The run of `runs` with the lowest p99 (the best of them).
fn best(runs: &[bench::LatencyPoint]) -> Option<&bench::LatencyPoint> {
    runs.iter().min_by(|a, b| a.p99_ms.total_cmp(&b.p99_ms))
}

pub(super) async fn run(s: &mut Sitting<'_>) -> Result<Section> {
    let q = s.quick();
    let rates = match s.options.rate {
        Some(r) => vec![r],
        None if q => vec![50.0],
        None => vec![50.0, 500.0, 5_000.0],
    };
    let dur = |rate: f64| duration(s.options.duration, q, rate);
    let rounds = if q { 1 } else { 3 };
    let mut all: Vec<Rate> = rates
        .iter()
        .map(|&rate| Rate {
            rate,
            dur: dur(rate),
            listen: Vec::new(),
            floor: Ok(Vec::new()),
            poll: None,
        })
        .collect();
    for round in 0..rounds {
        for r in &mut all {
            let p = bench::latency(s.url, s.base, r.rate, r.dur, true).await?;
            point(s, "latency", &p);
            r.listen.push(p);
            if let Ok(floor) = &mut r.floor {
                match bench::latency_floor(s.url, s.base, r.rate, r.dur).await {
                    Ok(p) => {
                        point(s, "latency-floor", &p);
                        floor.push(p);
                    }
                    Err(e) => r.floor = Err(chain(&e)),
                }
            }
            if round == 0 {
                let p = bench::latency(s.url, s.base, r.rate, r.dur, false).await?;
                point(s, "latency", &p);
                r.poll = Some(p);
            }
        }
    }
    let mut t = String::from(
        "| offered jobs/s | consumer | runs × s | jobs | p50 ms | p95 ms | p99 ms | p99 of each run ms |\n|---:|---|---:|---:|---:|---:|---:|---|\n",
    );
    for r in &all {
        line(&mut t, r, "worker, LISTEN", &r.listen);
        match &r.floor {
            Ok(f) => line(&mut t, r, "floor: bare LISTEN claimer", f),
            Err(why) => {
                let _ = writeln!(t, "| {:.0} | floor: {why} | | | | | | |", r.rate);
            }
        }
        if let Some(p) = &r.poll {
            line(&mut t, r, "worker, poll 1 s", std::slice::from_ref(p));
        }
    }
    targets(s, &all);
    t.push_str(
        "\nEach line is the run with the lowest p99 of its runs (the rounds interleave the worker and the floor); \"runs × s\" is how many runs and how long each offered jobs. A run offers about 15,000 jobs where 10 to 30 s allow it: 30 s at 50 and 500 jobs/s (its p99 is then the 15th and the 150th slowest job), 10 s at 5,000 jobs/s (the 500th), unless `--duration` sets one length for all. Jobs are enqueued one per statement and evenly paced (at 500 jobs/s one every 2 ms, from eight connections taking turns), after one second of the same load that is not counted (the pool's connections open, the consumer settles). Latency is the claim's `now()` minus the enqueue's `now()`: the enqueue's commit, the notification's delivery and the claim's start. The worker runs with default settings at concurrency 50. The floor is the same enqueues with a bare connection instead of the worker: it LISTENs, and claims with the worker's own `job_claim.sql` (prepared) the moment a notification arrives (again while a claim fills its batch), and hands each batch to a second connection that completes everything handed to it in one `job_complete_many.sql`, off the claim's path as the worker's completer is; what is left between the two is the library's.\n",
    );
    Ok(Section {
        title: "Enqueue-to-start latency (database clock)".to_owned(),
        table: t,
    })
}

/// How long each run at `rate` offers jobs: `--duration` when given; otherwise 2 s for a
/// quick run, and long enough for about 15,000 jobs between 10 and 30 s (30 s at 50 and 500
/// jobs/s, 10 s at 5,000), so that a run's p99 rests on enough of its slowest jobs for the
/// best of three to be a reading rather than one lucky run.
fn duration(asked: Option<Duration>, quick: bool, rate: f64) -> Duration {
    if let Some(d) = asked {
        return d;
    }
    if quick {
        return Duration::from_secs(2);
    }
    let secs = (15_000.0 / rate.max(1e-9)).clamp(10.0, 30.0);
    Duration::from_secs_f64(secs)
}

/// One table line: the best of `runs`, and the p99 of each.
fn line(t: &mut String, r: &Rate, what: &str, runs: &[bench::LatencyPoint]) {
    if let Some(b) = best(runs) {
        let each: Vec<String> = runs.iter().map(|p| format!("{:.2}", p.p99_ms)).collect();
        let _ = writeln!(
            t,
            "| {:.0} | {what} | {} × {} | {} | {:.2} | {:.2} | {:.2} | {} |",
            r.rate,
            runs.len(),
            r.dur.as_secs_f64(),
            b.jobs,
            b.p50_ms,
            b.p95_ms,
            b.p99_ms,
            each.join(", ")
        );
    }
}

fn point(s: &mut Sitting<'_>, scenario: &str, p: &bench::LatencyPoint) {
    s.point(serde_json::json!({
        "scenario": scenario, "offered_per_s": p.offered_per_s,
        "listen": p.listen, "jobs": p.jobs,
        "p50_ms": p.p50_ms, "p95_ms": p.p95_ms, "p99_ms": p.p99_ms,
    }));
}

/// The latency targets: against the floor at every rate, and in absolute terms at 50 and
/// 500 jobs/s (the best run of each).
fn targets(s: &mut Sitting<'_>, all: &[Rate]) {
    for r in all {
        let Some(w) = best(&r.listen) else { continue };
        if let Ok(floor) = &r.floor {
            if let Some(f) = best(floor) {
                let ok = w.p50_ms <= f.p50_ms + 0.5 && w.p99_ms <= f.p99_ms * 1.5;
                s.target(
                    format!(
                        "{:.0} jobs/s with LISTEN: p50 within 0.5 ms of the floor's, p99 within 1.5x",
                        r.rate
                    ),
                    format!(
                        "p50 {:.2} vs {:.2} ms, p99 {:.2} vs {:.2} ms ({:.2}x)",
                        w.p50_ms,
                        f.p50_ms,
                        w.p99_ms,
                        f.p99_ms,
                        w.p99_ms / f.p99_ms.max(1e-9)
                    ),
                    Some(ok),
                );
            }
        }
        if (r.rate - 500.0).abs() < f64::EPSILON {
            s.target(
                "pickup p50 <= 2 ms and p99 <= 10 ms at 500 jobs/s with LISTEN",
                format!("p50 {:.2} ms, p99 {:.2} ms", w.p50_ms, w.p99_ms),
                Some(w.p50_ms <= 2.0 && w.p99_ms <= 10.0),
            );
        }
        if (r.rate - 50.0).abs() < f64::EPSILON {
            s.target(
                "pickup p50 <= 1.5 ms and p99 <= 10 ms at 50 jobs/s with LISTEN",
                format!("p50 {:.2} ms, p99 {:.2} ms", w.p50_ms, w.p99_ms),
                Some(w.p50_ms <= 1.5 && w.p99_ms <= 10.0),
            );
        }
    }
}

/// An error with its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_offers_about_fifteen_thousand_jobs_between_ten_and_thirty_seconds() {
        let d = |rate| duration(None, false, rate).as_secs_f64();
        assert_eq!(d(50.0), 30.0);
        assert_eq!(d(500.0), 30.0);
        assert_eq!(d(1_000.0), 15.0);
        assert_eq!(d(5_000.0), 10.0);
        assert_eq!(d(50_000.0), 10.0);
        assert_eq!(duration(None, true, 500.0), Duration::from_secs(2));
        let asked = Duration::from_secs(7);
        assert_eq!(duration(Some(asked), false, 50.0), asked);
        assert_eq!(duration(Some(asked), true, 5_000.0), asked);
    }
}
