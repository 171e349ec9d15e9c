//! The plot of a held-snapshot run (an SVG, drawn with plotters): jobs started per second
//! against the offered rate, pickup latency, dead tuples and the table's size, over time, the
//! held interval shaded.

use plotters::prelude::*;

use crate::bench::Tick;
use crate::error::{Error, Result};

/// The held interval, in seconds from the run's start: from the first `during` sample to the
/// first sample after them.
fn held(ticks: &[Tick]) -> Option<(f64, f64)> {
    let first = ticks.iter().position(|t| t.phase == "during")?;
    let start = if first == 0 {
        0.0
    } else {
        ticks[first - 1].t_s
    };
    let end = ticks[first..]
        .iter()
        .find(|t| t.phase != "during")
        .map_or_else(|| ticks.last().map_or(start, |t| t.t_s), |t| t.t_s);
    Some((start, end))
}

/// The SVG of `ticks` (one sample a second, [`crate::bench::footprint`]'s timeline) at
/// `rate` jobs per second offered, titled `title`.
pub(super) fn svg(ticks: &[Tick], rate: f64, title: &str) -> Result<String> {
    let mut out = String::new();
    draw(&mut out, ticks, rate, title).map_err(|e| Error::Output {
        what: format!("draw the plot: {e}"),
        source: None,
    })?;
    Ok(out)
}

type Drawn = std::result::Result<(), Box<dyn std::error::Error>>;

fn draw(out: &mut String, ticks: &[Tick], rate: f64, title: &str) -> Drawn {
    let minutes = |t: &Tick| t.t_s / 60.0;
    let end = ticks.last().map_or(1.0, minutes).max(1.0 / 60.0);
    let shade = held(ticks).map(|(a, b)| (a / 60.0, b / 60.0));
    let root = SVGBackend::with_string(out, (1000, 1100)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let panels = root.split_evenly((4, 1));
    let grey = RGBColor(225, 225, 225);
    let blue = RGBColor(31, 119, 180);
    let orange = RGBColor(255, 127, 14);
    let red = RGBColor(214, 39, 40);

    // Jobs started per second, against the offered rate and 95 % of it.
    let top = ticks
        .iter()
        .map(|t| t.started as f64)
        .fold(rate * 1.3, f64::max);
    let mut c = ChartBuilder::on(&panels[0])
        .margin(12)
        .x_label_area_size(34)
        .y_label_area_size(70)
        .caption(
            "jobs started per second (offered rate dashed, 95 % of it dotted)",
            ("sans-serif", 15),
        )
        .build_cartesian_2d(0f64..end, 0f64..top)?;
    c.configure_mesh()
        .x_desc("minutes")
        .y_desc("jobs/s")
        .draw()?;
    if let Some((a, b)) = shade {
        c.draw_series(std::iter::once(Rectangle::new(
            [(a, 0.0), (b, top)],
            grey.filled(),
        )))?;
    }
    c.draw_series(DashedLineSeries::new(
        [(0.0, rate), (end, rate)],
        8,
        5,
        BLACK.into(),
    ))?;
    c.draw_series(DashedLineSeries::new(
        [(0.0, rate * 0.95), (end, rate * 0.95)],
        2,
        4,
        BLACK.into(),
    ))?;
    c.draw_series(LineSeries::new(
        ticks.iter().map(|t| (minutes(t), t.started as f64)),
        &blue,
    ))?;

    // Pickup latency, log scale; seconds without a started job are left out.
    let lat: Vec<&Tick> = ticks.iter().filter(|t| t.started > 0).collect();
    let high = lat.iter().map(|t| t.p99_ms).fold(10.0, f64::max) * 1.5;
    let low = lat.iter().map(|t| t.p50_ms).fold(high, f64::min).max(0.05) / 1.5;
    let mut c = ChartBuilder::on(&panels[1])
        .margin(12)
        .x_label_area_size(34)
        .y_label_area_size(70)
        .caption(
            "pickup latency, enqueue to start (ms, log scale): p50 and p99 of each second",
            ("sans-serif", 15),
        )
        .build_cartesian_2d(0f64..end, (low..high).log_scale())?;
    c.configure_mesh().x_desc("minutes").y_desc("ms").draw()?;
    if let Some((a, b)) = shade {
        c.draw_series(std::iter::once(Rectangle::new(
            [(a, low), (b, high)],
            grey.filled(),
        )))?;
    }
    c.draw_series(LineSeries::new(
        lat.iter().map(|t| (minutes(t), t.p99_ms.max(low))),
        &red,
    ))?
    .label("p99")
    .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], red));
    c.draw_series(LineSeries::new(
        lat.iter().map(|t| (minutes(t), t.p50_ms.max(low))),
        &blue,
    ))?
    .label("p50")
    .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], blue));
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;

    // Dead tuples.
    let dead_top = ticks.iter().map(|t| t.dead as f64).fold(10.0, f64::max) * 1.1;
    let mut c = ChartBuilder::on(&panels[2])
        .margin(12)
        .x_label_area_size(34)
        .y_label_area_size(70)
        .caption(
            "dead tuples of the jobs table (statistics system)",
            ("sans-serif", 15),
        )
        .build_cartesian_2d(0f64..end, 0f64..dead_top)?;
    c.configure_mesh()
        .x_desc("minutes")
        .y_desc("dead tuples")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    if let Some((a, b)) = shade {
        c.draw_series(std::iter::once(Rectangle::new(
            [(a, 0.0), (b, dead_top)],
            grey.filled(),
        )))?;
    }
    c.draw_series(LineSeries::new(
        ticks.iter().map(|t| (minutes(t), t.dead as f64)),
        &orange,
    ))?;

    // Table size with its indexes.
    let mib = |t: &Tick| t.table_bytes as f64 / (1024.0 * 1024.0);
    let size_top = ticks.iter().map(mib).fold(1.0, f64::max) * 1.1;
    let mut c = ChartBuilder::on(&panels[3])
        .margin(12)
        .x_label_area_size(34)
        .y_label_area_size(70)
        .caption("jobs table with its indexes (MiB)", ("sans-serif", 15))
        .build_cartesian_2d(0f64..end, 0f64..size_top)?;
    c.configure_mesh().x_desc("minutes").y_desc("MiB").draw()?;
    if let Some((a, b)) = shade {
        c.draw_series(std::iter::once(Rectangle::new(
            [(a, 0.0), (b, size_top)],
            grey.filled(),
        )))?;
    }
    c.draw_series(LineSeries::new(
        ticks.iter().map(|t| (minutes(t), mib(t))),
        &blue,
    ))?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(t_s: f64, phase: &str, started: usize) -> Tick {
        Tick {
            t_s,
            phase: phase.into(),
            dead: (t_s * 100.0) as i64,
            table_bytes: 8 << 20,
            started,
            p50_ms: if started > 0 { 1.0 } else { 0.0 },
            p99_ms: if started > 0 { 9.0 } else { 0.0 },
        }
    }

    #[test]
    fn the_held_interval_runs_from_the_sample_before_the_first_held_one_to_the_first_after() {
        let ticks = [
            tick(1.0, "before", 10),
            tick(2.0, "during", 10),
            tick(3.0, "during", 0),
            tick(4.0, "after", 10),
        ];
        assert_eq!(held(&ticks), Some((1.0, 4.0)));
        assert_eq!(held(&ticks[..1]), None);
        assert_eq!(held(&ticks[1..3]), Some((0.0, 3.0)));
    }

    #[test]
    fn the_plot_is_an_svg_with_every_panel() {
        let ticks: Vec<Tick> = (1..=30)
            .map(|s| {
                let phase = match s {
                    0..=9 => "before",
                    10..=19 => "during",
                    _ => "after",
                };
                tick(s as f64, phase, if s == 15 { 0 } else { 1000 })
            })
            .collect();
        let svg = svg(&ticks, 1000.0, "held snapshot").unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        for words in [
            "held snapshot",
            "jobs started per second",
            "pickup latency",
            "dead tuples of the jobs table",
            "jobs table with its indexes",
            "p99",
        ] {
            assert!(svg.contains(words), "{words}");
        }
        // No samples at all still draws (empty axes), not an error.
        assert!(svg_of_nothing().starts_with("<svg"));
    }

    fn svg_of_nothing() -> String {
        svg(&[], 1000.0, "nothing").unwrap()
    }
}
