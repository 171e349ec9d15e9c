//! The queues page: per queue, jobs in each state, jobs finished in the last minute, the
//! oldest ready job's age and whether it is paused (with Pause and Resume buttons); then the
//! periodic schedules (with Run now, Pause and Resume).
//!
//! The table is a list of [`Column`]s over [`QueueRow`]s, and the page a list of sections:
//! a column (a queue's pause state) or a section (periodic schedules) is one more entry.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use tokio_postgres::types::Type;
use tokio_postgres::Transaction;

use crate::db::{self, DbResult};
use crate::html::{self, esc, url_value, Count, Frame, Nav};
use crate::{html_response, App, Viewer};

/// One queue's figures.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QueueRow {
    pub(crate) queue: String,
    pub(crate) queued: Count,
    pub(crate) ready: Count,
    pub(crate) running: Count,
    pub(crate) done: Count,
    pub(crate) failed: Count,
    pub(crate) last_minute: Count,
    pub(crate) oldest_ready_s: f64,
    /// Paused: since when (epoch seconds), by whom, and the database's clock then.
    pub(crate) paused: Option<(Option<f64>, Option<String>, f64)>,
}

/// One periodic schedule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScheduleRow {
    pub(crate) name: String,
    pub(crate) cron: String,
    pub(crate) time_zone: String,
    pub(crate) queue: String,
    pub(crate) kind: String,
    pub(crate) paused: bool,
    pub(crate) last_fire_at: f64,
    /// The next fire after the cursor (epoch seconds; `None` while paused, or if the
    /// expression has no later fire or no longer parses).
    pub(crate) next_fire_at: Option<f64>,
}

impl QueueRow {
    fn new(queue: String) -> Self {
        QueueRow {
            queue,
            queued: Count::Exact(0),
            ready: Count::Exact(0),
            running: Count::Exact(0),
            done: Count::Exact(0),
            failed: Count::Exact(0),
            last_minute: Count::Exact(0),
            oldest_ready_s: 0.0,
            paused: None,
        }
    }
}

/// How long the estimates of large finished counts are kept: each reads a sample of the
/// table's pages, so it is not repeated on every refresh.
pub(crate) const ESTIMATE_TTL: Duration = Duration::from_secs(10);

/// About how many of the table's pages an estimate reads.
const SAMPLE_PAGES: f64 = 500.0;

/// The estimated done and failed jobs of the queues whose counts passed the bound, as read
/// at `at`.
#[derive(Debug, Clone)]
pub(crate) struct Estimates {
    at: Instant,
    /// (queue, state) -> estimate, for every pair asked (0 when the sample found none).
    counts: BTreeMap<(String, String), f64>,
}

/// What the page shows.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queues {
    pub(crate) rows: Vec<QueueRow>,
    /// Some finished counts passed the count limit and are estimates, read this long ago.
    pub(crate) estimated: Option<Duration>,
    /// Some finished counts passed the count limit, and the estimate could not be read
    /// within the statement timeout (they show as lower bounds).
    pub(crate) estimate_timed_out: bool,
    /// Counts are exact up to this many.
    pub(crate) count_limit: i64,
    /// The schedules, by name.
    pub(crate) schedules: Vec<ScheduleRow>,
    /// The database's clock (epoch seconds) when the schedules were read.
    pub(crate) now: f64,
}

/// A column of the queues table.
struct Column {
    header: &'static str,
    /// The header's tooltip.
    title: &'static str,
    cell: fn(&Frame<'_>, &QueueRow) -> String,
}

const COLUMNS: &[Column] = &[
    Column {
        header: "Queue",
        title: "",
        cell: |f, r| {
            format!(
                "<a href=\"{}/jobs?queue={}\">{}</a>",
                esc(f.base),
                url_value(&r.queue),
                esc(&r.queue)
            )
        },
    },
    Column {
        header: "Queued",
        title: "Waiting: ready now or scheduled later",
        cell: |f, r| state_link(f, r, "queued", r.queued),
    },
    Column {
        header: "Ready",
        title: "Queued and due now",
        cell: |_, r| r.ready.html(),
    },
    Column {
        header: "Running",
        title: "Claimed by a worker (holding a lease)",
        cell: |f, r| state_link(f, r, "running", r.running),
    },
    Column {
        header: "Done",
        title: "Completed, still kept in the table",
        cell: |f, r| state_link(f, r, "done", r.done),
    },
    Column {
        header: "Failed",
        title: "Gave up or cancelled, still kept in the table",
        cell: |f, r| state_link(f, r, "failed", r.failed),
    },
    Column {
        header: "Finished / min",
        title: "Done or failed in the last minute",
        cell: |_, r| r.last_minute.html(),
    },
    Column {
        header: "Oldest ready",
        title: "How long the oldest ready job has waited",
        cell: |_, r| {
            if r.ready.value() == 0 {
                "<span class=\"muted\">-</span>".to_owned()
            } else {
                let class = if r.oldest_ready_s > 60.0 { " warn" } else { "" };
                format!(
                    "<span class=\"age{class}\">{}</span>",
                    html::span(r.oldest_ready_s)
                )
            }
        },
    },
    Column {
        header: "Paused",
        title: "Paused queues: no worker claims from them (running jobs finish)",
        cell: |_, r| match &r.paused {
            None => "<span class=\"muted\">-</span>".to_owned(),
            Some((at, by, now)) => {
                let by = match by {
                    Some(b) => format!("<span class=\"by\">by {}</span>", esc(b)),
                    None => String::new(),
                };
                format!(
                    "<span class=\"paused\">paused</span> {}{by}",
                    html::when(*at, *now)
                )
            }
        },
    },
    Column {
        header: "",
        title: "",
        cell: |f, r| {
            if f.read_only {
                return String::new();
            }
            let (action, label) = if r.paused.is_some() {
                ("resume", "Resume")
            } else {
                ("pause", "Pause")
            };
            post_button(
                f,
                &format!("queues/{}/{action}", url_value(&r.queue)),
                action,
                label,
                &format!("{action}-queue-{}", r.queue),
            )
        },
    },
];

/// A one-button form that posts to `{base}/{path}`.
fn post_button(f: &Frame<'_>, path: &str, class: &str, label: &str, id: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{}/{path}\" class=\"inline\">\
         <button type=\"submit\" class=\"{class}\" id=\"{}\">{label}</button></form>",
        esc(f.base),
        esc(id)
    )
}

fn state_link(f: &Frame<'_>, r: &QueueRow, state: &str, c: Count) -> String {
    if c.value() == 0 {
        return "<span class=\"muted\">0</span>".to_owned();
    }
    format!(
        "<a class=\"n\" href=\"{}/jobs?queue={}&amp;state={state}\">{}</a>",
        esc(f.base),
        url_value(&r.queue),
        c.html()
    )
}

/// The sections of the page, in order.
const SECTIONS: &[fn(&Frame<'_>, &Queues) -> String] = &[queues_table, schedules_table];

pub(crate) async fn page(State(app): State<App>, Extension(v): Extension<Viewer>) -> Response {
    let read = async {
        let mut obj = db::conn(app.client.pool()).await?;
        let mut tx = db::begin(&mut obj, &app.sql, app.options.statement_timeout).await?;
        read(&app, &mut tx).await
    };
    match read.await {
        Ok(q) => {
            let f = app.frame(&v);
            let body: String = SECTIONS.iter().map(|s| s(&f, &q)).collect();
            html_response(
                StatusCode::OK,
                html::page(&f, "Queues", Nav::Queues, "", &body, true),
            )
        }
        Err(e) => app.db_error(&v, &e),
    }
}

async fn read(app: &App, tx: &mut Transaction<'_>) -> DbResult<Queues> {
    let sql = &app.sql;
    let cap = app.options.count_limit;
    let max_queues = app.options.max_queues;
    let limits: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
        [(&cap, Type::INT8), (&max_queues, Type::INT8)];
    let mut rows: BTreeMap<String, QueueRow> = BTreeMap::new();

    let active = db::rows(&*tx, &sql.queue_active, &limits).await?;
    let (mut queued_total, mut running_total) = (0i64, 0i64);
    for r in &active {
        queued_total += r.get::<_, i64>("queued");
        running_total += r.get::<_, i64>("running");
    }
    let bound = |n: i64, total: i64| {
        if total >= cap {
            Count::AtLeast(n)
        } else {
            Count::Exact(n)
        }
    };
    for r in &active {
        let q: String = r.get("queue");
        let row = rows.entry(q.clone()).or_insert_with(|| QueueRow::new(q));
        row.queued = bound(r.get("queued"), queued_total);
        row.ready = bound(r.get("ready"), queued_total);
        row.running = bound(r.get("running"), running_total);
        row.oldest_ready_s = r.get("oldest_ready_age_s");
    }

    // Finished jobs: each queue's done, failed and last minute's counts, each exact up to
    // the count limit (read one row past it to know); beyond it, an estimate.
    let past = cap + 1;
    let finished = db::rows(
        &*tx,
        &sql.queue_finished,
        &[(&past, Type::INT8), (&max_queues, Type::INT8)],
    )
    .await?;
    let mut out = Queues {
        count_limit: cap,
        ..Queues::default()
    };
    let mut over: Vec<(String, &'static str)> = Vec::new();
    let upto = |n: i64| {
        if n > cap {
            Count::AtLeast(cap)
        } else {
            Count::Exact(n)
        }
    };
    for r in &finished {
        let q: String = r.get("queue");
        let row = rows
            .entry(q.clone())
            .or_insert_with(|| QueueRow::new(q.clone()));
        let (done, failed): (i64, i64) = (r.get("done"), r.get("failed"));
        row.done = upto(done);
        row.failed = upto(failed);
        if done > cap {
            over.push((q.clone(), "done"));
        }
        if failed > cap {
            over.push((q, "failed"));
        }
        let (d, f): (i64, i64) = (r.get("done_last_minute"), r.get("failed_last_minute"));
        row.last_minute = if d > cap || f > cap {
            Count::AtLeast(d.min(cap) + f.min(cap))
        } else {
            Count::Exact(d + f)
        };
    }
    if !over.is_empty() {
        match estimates(app, tx, &over).await? {
            Some((age, counts)) => {
                out.estimated = Some(age);
                for (q, state) in &over {
                    let est = two_figures(
                        counts
                            .get(&(q.clone(), (*state).to_owned()))
                            .copied()
                            .unwrap_or(0.0),
                    );
                    // Never below what was counted: a sample that finds fewer shows the bound.
                    if est >= cap as f64 {
                        if let Some(row) = rows.get_mut(q) {
                            let c = Count::About(est as i64);
                            if *state == "done" {
                                row.done = c;
                            } else {
                                row.failed = c;
                            }
                        }
                    }
                }
            }
            None => out.estimate_timed_out = true,
        }
    }
    let paused = db::rows(&*tx, &sql.queue_paused, &[(&max_queues, Type::INT8)]).await?;
    for r in &paused {
        let q: String = r.get("name");
        let row = rows.entry(q.clone()).or_insert_with(|| QueueRow::new(q));
        row.paused = Some((r.get("paused_at"), r.get("paused_by"), r.get("now")));
    }
    let schedules = db::rows(&*tx, &sql.schedule_list, &[(&max_queues, Type::INT8)]).await?;
    out.schedules = schedules
        .iter()
        .map(|r| {
            let (cron, time_zone): (String, String) = (r.get("cron"), r.get("time_zone"));
            let (paused, last_fire_at): (bool, f64) = (r.get("paused"), r.get("last_fire_at"));
            let next_fire_at = if paused {
                None
            } else {
                next_fire_after(&cron, &time_zone, last_fire_at)
            };
            ScheduleRow {
                name: r.get("name"),
                cron,
                time_zone,
                queue: r.get("queue"),
                kind: r.get("kind"),
                paused,
                last_fire_at,
                next_fire_at,
            }
        })
        .collect();
    out.now = schedules.first().map_or(0.0, |r| r.get("now"));
    out.rows = rows.into_values().collect();
    Ok(out)
}

/// An estimate rounded to two significant figures (3,105,276 -> 3,100,000): a sample does not
/// know more, and the page should not look as if it did.
fn two_figures(x: f64) -> f64 {
    if !x.is_finite() || x < 100.0 {
        return x.max(0.0).round();
    }
    let scale = 10f64.powf(x.log10().floor() - 1.0);
    (x / scale).round() * scale
}

/// The estimates of the (queue, state) pairs in `over`, and how old they are: from the cache
/// when it is fresh and has them all, else from a sample read now. `None` when the sample
/// was cancelled by the statement timeout.
async fn estimates(
    app: &App,
    tx: &mut Transaction<'_>,
    over: &[(String, &'static str)],
) -> DbResult<Option<(Duration, BTreeMap<(String, String), f64>)>> {
    let cached = app
        .estimates
        .lock()
        .ok()
        .and_then(|c| c.clone())
        .filter(|c| {
            c.at.elapsed() < ESTIMATE_TTL
                && over
                    .iter()
                    .all(|(q, s)| c.counts.contains_key(&(q.clone(), (*s).to_owned())))
        });
    if let Some(c) = cached {
        return Ok(Some((c.at.elapsed(), c.counts)));
    }
    let mut queues: Vec<String> = over.iter().map(|(q, _)| q.clone()).collect();
    queues.dedup();
    let limit = i64::try_from(over.len()).unwrap_or(i64::MAX);
    let schema = app.client.schema().name();
    let sp = tx.savepoint("estimate").await?;
    let read = db::rows(
        &sp,
        &app.sql.queue_finished_sample,
        &[
            (&SAMPLE_PAGES, Type::FLOAT8),
            (&queues, Type::TEXT_ARRAY),
            (&limit, Type::INT8),
            (&schema, Type::TEXT),
        ],
    )
    .await;
    let sampled = match read {
        Ok(rows) => rows,
        Err(e) if e.is_timeout() => return Ok(None),
        Err(e) => return Err(e),
    };
    sp.commit().await?;
    let mut counts: BTreeMap<(String, String), f64> = over
        .iter()
        .map(|(q, s)| ((q.clone(), (*s).to_owned()), 0.0))
        .collect();
    for r in &sampled {
        counts.insert((r.get("queue"), r.get("status")), r.get("estimate"));
    }
    if let Ok(mut c) = app.estimates.lock() {
        *c = Some(Estimates {
            at: Instant::now(),
            counts: counts.clone(),
        });
    }
    Ok(Some((Duration::ZERO, counts)))
}

fn queues_table(f: &Frame<'_>, q: &Queues) -> String {
    if q.rows.is_empty() {
        return "<p class=\"empty\">No jobs in this schema yet.</p>".to_owned();
    }
    let mut s = String::from("<table class=\"grid queues\"><thead><tr>");
    for c in COLUMNS {
        if c.title.is_empty() {
            s.push_str(&format!("<th>{}</th>", c.header));
        } else {
            s.push_str(&format!("<th title=\"{}\">{}</th>", esc(c.title), c.header));
        }
    }
    s.push_str("</tr></thead><tbody>");
    for r in &q.rows {
        s.push_str("<tr>");
        for c in COLUMNS {
            s.push_str(&format!("<td>{}</td>", (c.cell)(f, r)));
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    let mut notes: Vec<String> = Vec::new();
    if let Some(age) = q.estimated {
        notes.push(format!(
            "Counts stop at {limit}: a done or failed count past it, marked ≈, is an estimate \
             from a sample of the table's pages ({age}), never below {limit}; one marked + is a \
             lower bound.",
            limit = html::int(q.count_limit),
            age = if age.as_secs() == 0 {
                "read now".to_owned()
            } else {
                format!(
                    "read {} s ago; re-read at most every {} s",
                    age.as_secs(),
                    ESTIMATE_TTL.as_secs()
                )
            }
        ));
    }
    if q.estimate_timed_out {
        notes.push(
            "Done and failed counts marked + passed the count limit, and their estimate was not \
             read within the statement timeout: they are lower bounds."
                .to_owned(),
        );
    }
    for n in notes {
        s.push_str(&format!("<p class=\"note\">{}</p>", esc(&n)));
    }
    s
}

/// The next fire of `cron` in `time_zone` after `after` (epoch seconds), by the library's
/// own cron reading.
fn next_fire_after(cron: &str, time_zone: &str, after: f64) -> Option<f64> {
    let after = std::time::UNIX_EPOCH + std::time::Duration::try_from_secs_f64(after).ok()?;
    let next = skiplock::periodic::next_fire(cron, time_zone, after).ok()??;
    Some(
        next.duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs_f64(),
    )
}

fn schedules_table(f: &Frame<'_>, q: &Queues) -> String {
    if q.schedules.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "<h2>Schedules</h2><table class=\"grid schedules\"><thead><tr><th>Schedule</th>\
         <th>Cron</th><th>Time zone</th><th>Queue</th><th>Kind</th><th>Paused</th>\
         <th title=\"The latest fire enqueued (or skipped as missed), or when it was added or \
         resumed\">Last fire</th><th title=\"The next fire after the last one (in the past: \
         due, and no worker has fired it yet)\">Next fire</th><th></th></tr></thead><tbody>",
    );
    for r in &q.schedules {
        let name = url_value(&r.name);
        let buttons = if f.read_only {
            String::new()
        } else {
            let (action, label) = if r.paused {
                ("resume", "Resume")
            } else {
                ("pause", "Pause")
            };
            format!(
                "<div class=\"buttons\">{}{}</div>",
                post_button(
                    f,
                    &format!("schedules/{name}/run"),
                    "retry",
                    "Run now",
                    &format!("run-schedule-{}", r.name)
                ),
                post_button(
                    f,
                    &format!("schedules/{name}/{action}"),
                    action,
                    label,
                    &format!("{action}-schedule-{}", r.name)
                )
            )
        };
        s.push_str(&format!(
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td><a href=\"{}/jobs?queue={}\">{}</a></td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{buttons}</td></tr>",
            esc(&r.name),
            esc(&r.cron),
            esc(&r.time_zone),
            esc(f.base),
            url_value(&r.queue),
            esc(&r.queue),
            esc(&r.kind),
            if r.paused {
                "<span class=\"paused\">paused</span>"
            } else {
                "<span class=\"muted\">-</span>"
            },
            html::when(Some(r.last_fire_at), q.now),
            html::when(r.next_fire_at, q.now),
        ));
    }
    s.push_str("</tbody></table>");
    s
}

#[cfg(test)]
mod tests {
    use super::two_figures;

    #[test]
    fn estimates_keep_two_significant_figures() {
        assert_eq!(two_figures(3_105_276.7), 3_100_000.0);
        assert_eq!(two_figures(32_459.3), 32_000.0);
        assert_eq!(two_figures(10_400.0), 10_000.0);
        assert_eq!(two_figures(10_999.0), 11_000.0);
        assert_eq!(two_figures(300.0), 300.0);
        assert_eq!(two_figures(155.0), 160.0);
        assert_eq!(two_figures(42.4), 42.0);
        assert_eq!(two_figures(f64::NAN), 0.0);
        assert_eq!(two_figures(-1.0), 0.0);
    }
}
