//! Line charts of the last hour, drawn on the server as inline SVG (no script): one point per
//! minute that has a sample, and a gap where a minute has none, so that missing samples never
//! read as zeros.

use std::fmt::Write as _;

use crate::html::{esc, int};

/// One line: its name (the legend), its CSS class (its colour) and its points, (minute as
/// epoch seconds, value), in time order.
pub(crate) struct Series<'a> {
    pub(crate) name: &'a str,
    pub(crate) class: &'a str,
    pub(crate) points: Vec<(f64, f64)>,
}

const W: f64 = 560.0;
const H: f64 = 170.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 24.0;
/// Minutes on the x axis.
const MINUTES: f64 = 60.0;

/// The smallest "round" number (1, 2 or 5 times a power of ten) at or above `x`.
fn nice(x: f64) -> f64 {
    if !x.is_finite() || x <= 1.0 {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|v| *v >= x)
        .unwrap_or(10.0 * p)
}

/// A chart of `series` over the hour that ends at the minute of `now` (epoch seconds), with
/// `label` as its accessible name. The caller shows an empty state instead when no series
/// has a point.
pub(crate) fn chart(id: &str, label: &str, now: f64, series: &[Series<'_>]) -> String {
    let end = (now / 60.0).floor() * 60.0;
    let start = end - (MINUTES - 1.0) * 60.0;
    let max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let top = nice(max);
    let x = |t: f64| LEFT + (t - start) / ((MINUTES - 1.0) * 60.0) * (W - LEFT - RIGHT);
    let y = |v: f64| TOP + (1.0 - v / top) * (H - TOP - BOTTOM);
    let mut s = format!(
        "<svg class=\"chart\" id=\"{id}\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" \
         role=\"img\" aria-label=\"{}\">",
        esc(label)
    );
    // The grid: zero, half and the top, labelled.
    for v in [0.0, top / 2.0, top] {
        let _ = write!(
            s,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"axis\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            y(v) + 4.0,
            label_of(v),
            y = y(v)
        );
    }
    for (m, text) in [(0.0, "60 min ago"), (30.0, "30 min ago"), (59.0, "now")] {
        let anchor = match m as i32 {
            0 => "start",
            59 => "end",
            _ => "middle",
        };
        let _ = write!(
            s,
            "<text class=\"axis\" x=\"{:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{text}</text>",
            x(start + m * 60.0),
            H - 6.0
        );
    }
    for se in series {
        // Runs of consecutive minutes become one line each; a lone minute, a dot.
        let pts: Vec<(f64, f64)> = se
            .points
            .iter()
            .copied()
            .filter(|(t, _)| *t >= start && *t <= end)
            .collect();
        let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
        for p in pts {
            match runs.last_mut() {
                Some(run) if run.last().is_some_and(|q| p.0 - q.0 <= 60.5) => run.push(p),
                _ => runs.push(vec![p]),
            }
        }
        let _ = write!(s, "<g class=\"series {}\">", esc(se.class));
        for run in runs {
            if run.len() == 1 {
                let _ = write!(
                    s,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\"/>",
                    x(run[0].0),
                    y(run[0].1)
                );
            } else {
                let d: Vec<String> = run
                    .iter()
                    .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
                    .collect();
                let _ = write!(s, "<polyline points=\"{}\"/>", d.join(" "));
            }
        }
        s.push_str("</g>");
    }
    s.push_str("</svg><div class=\"chart-legend\">");
    for se in series {
        let last = se.points.last().map_or_else(
            || "no sample".to_owned(),
            |p| format!("{} in the last sampled minute", int(p.1.round() as i64)),
        );
        let _ = write!(
            s,
            "<span class=\"key {}\" title=\"{}\">{}</span>",
            esc(se.class),
            esc(&last),
            esc(se.name)
        );
    }
    s.push_str("</div>");
    s
}

fn label_of(v: f64) -> String {
    if v.fract() == 0.0 {
        int(v as i64)
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_tops() {
        assert_eq!(nice(0.0), 1.0);
        assert_eq!(nice(3.0), 5.0);
        assert_eq!(nice(7.0), 10.0);
        assert_eq!(nice(10.0), 10.0);
        assert_eq!(nice(11.0), 20.0);
        assert_eq!(nice(230.0), 500.0);
    }

    #[test]
    fn a_missing_minute_breaks_the_line() {
        let now = 36_000.0 + 59.0 * 60.0;
        let s = Series {
            name: "done",
            class: "done",
            // Minutes 10, 11, 12, then nothing until 20; 40 alone.
            points: [10.0, 11.0, 12.0, 20.0, 21.0, 40.0]
                .iter()
                .map(|m| (36_000.0 + m * 60.0, 5.0))
                .collect(),
        };
        let svg = chart("c", "done", now, &[s]);
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 1, "{svg}");
    }
}
