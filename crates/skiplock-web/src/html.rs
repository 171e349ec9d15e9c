//! HTML building blocks: escaping, the page layout, and how numbers and times are shown.

use std::fmt::Write as _;

/// Escapes text for HTML element content and double-quoted attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a query-string value (names here are `[A-Za-z0-9_.:-]`, but be safe).
pub(crate) fn url_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A whole number with thousands separators: `1,234,567`.
pub(crate) fn int(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count as the dashboard knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// Counted exactly.
    Exact(i64),
    /// Counting stopped at this many: there are at least this many.
    AtLeast(i64),
    /// Estimated (from a sample of the table), past a bound that was counted.
    About(i64),
    /// Counted among the newest this many jobs only (the scan budget): at least this many.
    Among(i64, i64),
}

impl Count {
    /// The number to test against zero (links, emphasis).
    pub(crate) fn value(self) -> i64 {
        match self {
            Count::Exact(n) | Count::AtLeast(n) | Count::About(n) | Count::Among(n, _) => n,
        }
    }

    pub(crate) fn html(self) -> String {
        match self {
            Count::Exact(n) => int(n),
            Count::AtLeast(n) => format!(
                "<span class=\"approx\" title=\"counting stopped at {0}\">{0}+</span>",
                int(n)
            ),
            Count::Among(n, budget) => format!(
                "<span class=\"approx\" title=\"counted among the newest {} jobs only\">≥&#8239;{}</span>",
                int(budget),
                int(n)
            ),
            Count::About(n) => format!(
                "<span class=\"approx\" title=\"estimate from a sample of the table: counting \
                 stopped at the count limit\">≈&#8239;{}</span>",
                int(n)
            ),
        }
    }
}

/// A duration in seconds, short: `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
pub(crate) fn span(secs: f64) -> String {
    if !secs.is_finite() {
        return "-".to_owned();
    }
    let s = secs.abs().round() as u64;
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min", s / 60)
    } else if s < 86_400 {
        format!("{} h {} min", s / 3600, (s % 3600) / 60)
    } else {
        format!("{} d {} h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// An instant (epoch seconds) in UTC: `2026-11-30 16:42:23 UTC`.
pub(crate) fn utc(epoch: f64) -> String {
    if !epoch.is_finite() {
        return "-".to_owned();
    }
    let secs = epoch.floor() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// An instant relative to the database's `now`, with the absolute time as a tooltip:
/// `3 min ago`, `in 20 s`, or `-` when there is none.
pub(crate) fn when(t: Option<f64>, now: f64) -> String {
    match t {
        None => "<span class=\"muted\">-</span>".to_owned(),
        Some(t) => {
            let d = now - t;
            let rel = if d.abs() < 1.0 {
                "now".to_owned()
            } else if d > 0.0 {
                format!("{} ago", span(d))
            } else {
                format!("in {}", span(-d))
            };
            format!("<time title=\"{}\">{rel}</time>", utc(t))
        }
    }
}

/// An instant shown in full, with the relative time beside it.
pub(crate) fn when_full(t: Option<f64>, now: f64) -> String {
    match t {
        None => "<span class=\"muted\">-</span>".to_owned(),
        Some(t) => format!("{} <span class=\"muted\">({})</span>", utc(t), {
            let d = now - t;
            if d.abs() < 1.0 {
                "now".to_owned()
            } else if d > 0.0 {
                format!("{} ago", span(d))
            } else {
                format!("in {}", span(-d))
            }
        }),
    }
}

/// A size in bytes: `512 B`, `1.5 MB`.
pub(crate) fn bytes(n: i64) -> String {
    let n = n.max(0) as f64;
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The badge of a job state (a display state as `skiplock jobs` derives it, or a stored
/// status), with what it means as its tooltip.
pub(crate) fn state_badge(state: &str) -> String {
    let title = match state {
        "available" => "Queued and due: the next free worker of its queue takes it",
        "scheduled" => "Queued, due later (its run time is in the future)",
        "retrying" => "Queued again after a failed attempt",
        "waiting" => "Queued, waiting for the jobs it depends on or its turn in a sequence",
        "queued" => "Queued",
        "running" => "Claimed by a worker, holding a lease",
        "done" => "Completed",
        "failed" => "Gave up: no attempt left, or discarded",
        "cancelled" => "Failed: cancelled",
        _ => "",
    };
    format!(
        "<span class=\"state state-{0}\" title=\"{1}\">{0}</span>",
        esc(state),
        title
    )
}

/// Which nav entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Queues,
    Jobs,
    Workers,
    Health,
    None,
}

/// What the layout needs to know about the request.
#[derive(Debug, Clone)]
pub(crate) struct Frame<'a> {
    /// The path the dashboard is mounted at (no trailing slash; empty at the root).
    pub(crate) base: &'a str,
    /// Who is looking, and whether they may act.
    pub(crate) principal: &'a str,
    pub(crate) read_only: bool,
    /// Poll every this many milliseconds (0: never).
    pub(crate) refresh_ms: u64,
    /// The schema shown.
    pub(crate) schema: &'a str,
}

/// A whole page: head, nav bar, then in `<main>` the title, `top` (kept as it is: filter
/// forms) and `body`. With `live`, the body is the part that the refresh script replaces
/// every few seconds.
pub(crate) fn page(
    f: &Frame<'_>,
    title: &str,
    nav: Nav,
    top: &str,
    body: &str,
    live: bool,
) -> String {
    let base = esc(f.base);
    let link = |n: Nav, href: &str, label: &str| {
        let class = if n == nav { " class=\"active\"" } else { "" };
        format!("<a href=\"{base}{href}\"{class}>{label}</a>")
    };
    let refresh = if live { f.refresh_ms } else { 0 };
    let mode = if f.read_only {
        "<span class=\"tag\">read-only</span>"
    } else {
        ""
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · skiplock</title>\
         <link rel=\"stylesheet\" href=\"{base}/assets/dashboard.css\">\
         <script src=\"{base}/assets/dashboard.js\" defer></script></head>\
         <body data-refresh=\"{refresh}\">\
         <header class=\"bar\"><a class=\"brand\" href=\"{base}/\">skiplock</a>\
         <nav>{q}{j}{w}{h}</nav>\
         <form class=\"search\" method=\"get\" action=\"{base}/search\">\
         <input type=\"search\" name=\"q\" placeholder=\"Job id or payload text\" \
         aria-label=\"Search jobs\"></form>\
         <span class=\"who\">schema <b>{schema}</b> · {principal} {mode}\
         <span id=\"refresh-status\" class=\"muted\"></span></span></header>\
         <main><h1>{title}</h1>{top}<div id=\"live\">{body}</div></main></body></html>\n",
        title = esc(title),
        q = link(Nav::Queues, "/", "Queues"),
        j = link(Nav::Jobs, "/jobs", "Jobs"),
        w = link(Nav::Workers, "/workers", "Workers"),
        h = link(Nav::Health, "/health", "Database health"),
        schema = esc(f.schema),
        principal = esc(f.principal),
    )
}

/// A page of one message (errors, refusals).
pub(crate) fn message(f: &Frame<'_>, title: &str, text: &str) -> String {
    page(
        f,
        title,
        Nav::None,
        "",
        &format!("<p class=\"notice error\">{}</p>", esc(text)),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn numbers_and_times() {
        assert_eq!(int(0), "0");
        assert_eq!(int(999), "999");
        assert_eq!(int(1000), "1,000");
        assert_eq!(int(-1_234_567), "-1,234,567");
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_709_251_199.9), "2024-02-29 23:59:59 UTC");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00 UTC");
        assert_eq!(span(59.0), "59 s");
        assert_eq!(span(3_725.0), "1 h 2 min");
        assert_eq!(span(2.4), "2 s");
        assert_eq!(bytes(1_500_000), "1.5 MB");
        assert_eq!(url_value("a b&c"), "a%20b%26c");
    }
}
