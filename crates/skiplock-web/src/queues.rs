//! The queues page: per queue, jobs in each state, jobs finished in the last minute and the
//! oldest ready job's age.
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
    /// `None`: not known (its read was cancelled by the statement timeout).
    pub(crate) last_minute: Option<Count>,
    pub(crate) oldest_ready_s: f64,
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
            last_minute: Some(Count::Exact(0)),
            oldest_ready_s: 0.0,
        }
    }
}

/// How long the last minute's finished counts of a large table are kept: reading them is
/// the one full scan of the page, so it is not repeated on every refresh.
pub(crate) const RECENT_TTL: Duration = Duration::from_secs(10);

/// The last minute's finished counts per queue, as read at `at`.
#[derive(Debug, Clone)]
pub(crate) struct Recent {
    at: Instant,
    counts: Vec<(String, Count)>,
}

/// What the page shows.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queues {
    pub(crate) rows: Vec<QueueRow>,
    /// Finished counts are estimates (the table is larger than the count limit).
    pub(crate) estimated: bool,
    /// The last minute's count could not be read in time.
    pub(crate) recent_timed_out: bool,
    /// The last minute's count comes from the cache, read this long ago.
    pub(crate) recent_age: Option<Duration>,
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
        cell: |_, r| match r.last_minute {
            Some(c) => c.html(),
            None => "<span class=\"muted\" title=\"not read in time\">?</span>".to_owned(),
        },
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
];

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
const SECTIONS: &[fn(&Frame<'_>, &Queues) -> String] = &[queues_table];

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

    let finished = db::rows(&*tx, &sql.queue_finished, &limits).await?;
    let seen: i64 = finished
        .iter()
        .map(|r| r.get::<_, i64>("done") + r.get::<_, i64>("failed"))
        .sum();
    let mut out = Queues::default();
    if seen < cap {
        // Every finished row was read: exact.
        for r in &finished {
            let q: String = r.get("queue");
            let row = rows.entry(q.clone()).or_insert_with(|| QueueRow::new(q));
            row.done = Count::Exact(r.get("done"));
            row.failed = Count::Exact(r.get("failed"));
            row.last_minute = Some(Count::Exact(r.get("last_minute")));
        }
    } else {
        // The read stopped at the count limit: share the planner's row count out as in the
        // part read, and count the last minute on its own (under the timeout).
        out.estimated = true;
        let schema = app.client.schema().name();
        let est = db::rows(&*tx, &sql.table_estimate, &[(&schema, Type::TEXT)]).await?;
        let reltuples = est.first().map_or(-1.0, |r| r.get::<_, f64>("reltuples"));
        let finished_total = if reltuples > 0.0 {
            ((reltuples as i64) - queued_total - running_total).max(seen)
        } else {
            seen
        };
        let scale = |n: i64| -> Count {
            if reltuples <= 0.0 {
                return Count::AtLeast(n);
            }
            Count::About(((n as f64) / (seen as f64) * (finished_total as f64)).round() as i64)
        };
        for r in &finished {
            let q: String = r.get("queue");
            let row = rows.entry(q.clone()).or_insert_with(|| QueueRow::new(q));
            row.done = scale(r.get("done"));
            row.failed = scale(r.get("failed"));
            row.last_minute = Some(Count::Exact(0));
        }
        let cached = app
            .recent
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .filter(|c| c.at.elapsed() < RECENT_TTL);
        let recent = match cached {
            Some(c) => {
                out.recent_age = Some(c.at.elapsed());
                Some(c.counts)
            }
            None => {
                let sp = tx.savepoint("recent").await?;
                match db::rows(&sp, &sql.queue_finished_recent, &limits).await {
                    Ok(recent) => {
                        let total: i64 =
                            recent.iter().map(|r| r.get::<_, i64>("last_minute")).sum();
                        let counts: Vec<(String, Count)> = recent
                            .iter()
                            .map(|r| (r.get("queue"), bound(r.get("last_minute"), total)))
                            .collect();
                        sp.commit().await?;
                        if let Ok(mut c) = app.recent.lock() {
                            *c = Some(Recent {
                                at: Instant::now(),
                                counts: counts.clone(),
                            });
                        }
                        Some(counts)
                    }
                    Err(e) if e.is_timeout() => None,
                    Err(e) => return Err(e),
                }
            }
        };
        match recent {
            Some(counts) => {
                for (q, c) in counts {
                    let row = rows.entry(q.clone()).or_insert_with(|| QueueRow::new(q));
                    row.last_minute = Some(c);
                }
            }
            None => {
                out.recent_timed_out = true;
                for row in rows.values_mut() {
                    row.last_minute = None;
                }
            }
        }
    }
    out.rows = rows.into_values().collect();
    Ok(out)
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
    let mut notes = Vec::new();
    if q.estimated {
        notes.push(
            "Done and failed counts marked ≈ are estimates: the table holds more finished jobs \
             than the count limit, so they are the planner's row count shared out as in the \
             part read.",
        );
    }
    if q.recent_timed_out {
        notes.push(
            "The last minute's count was not read within the statement timeout (no index covers \
             finished_at).",
        );
    }
    let cached;
    if let Some(age) = q.recent_age {
        cached = format!(
            "Finished / min on a table this large is read at most every {} s (this one {} s ago).",
            RECENT_TTL.as_secs(),
            age.as_secs()
        );
        notes.push(&cached);
    }
    for n in notes {
        s.push_str(&format!("<p class=\"note\">{}</p>", esc(n)));
    }
    s
}
