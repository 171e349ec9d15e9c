//! The workers page: the workers serving the queues (migration 14's `workers` table), each
//! with its host, pid, queues and their concurrency, running jobs, start and last sign of
//! life, and its state: running, sleeping (its poll is off and it is idle: it writes nothing,
//! so its silence says nothing) or gone (stopped cleanly, or, with its poll on, silent for
//! longer than its own heartbeat interval plus a grace of as much again, at least 2 s: two
//! missed heartbeats). The states are the library's (`skiplock workers`), by the same SQL
//! expression. Gone workers are listed apart, and only those gone within the last 24 hours.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use tokio_postgres::Row;

use crate::db;
use crate::html::{self, esc, int, url_value, when, Frame, Nav};
use crate::{html_response, App, Viewer};

/// The most workers listed.
const MAX_WORKERS: i64 = 500;

/// One worker, as the page shows it.
struct WorkerRow {
    host: String,
    pid: i32,
    concurrency: i32,
    running: i32,
    poll_off: bool,
    version: String,
    state: String,
    heartbeat_s: f64,
    started_at: f64,
    last_seen: f64,
    stopped_at: Option<f64>,
    queues: Vec<(String, String)>,
    now: f64,
}

impl From<&Row> for WorkerRow {
    fn from(r: &Row) -> Self {
        let names: Vec<String> = r.get("queue_names");
        let slots: Vec<String> = r.get("queue_slots");
        WorkerRow {
            host: r.get("host"),
            pid: r.get("pid"),
            concurrency: r.get("concurrency"),
            running: r.get("running"),
            poll_off: r.get("poll_off"),
            version: r.get("version"),
            state: r.get("state"),
            heartbeat_s: r.get("heartbeat_s"),
            started_at: r.get("started_at"),
            last_seen: r.get("last_seen"),
            stopped_at: r.get("stopped_at"),
            queues: names.into_iter().zip(slots).collect(),
            now: r.get("now"),
        }
    }
}

pub(crate) async fn page(State(app): State<App>, Extension(v): Extension<Viewer>) -> Response {
    let read = async {
        let mut obj = db::conn(app.client.pool()).await?;
        let tx = db::begin(&mut obj, &app.sql, app.options.statement_timeout).await?;
        app.sql.worker_list(&tx, MAX_WORKERS).await
    };
    match read.await {
        Ok(rows) => {
            let f = app.frame(&v);
            let rows: Vec<WorkerRow> = rows.iter().map(WorkerRow::from).collect();
            html_response(
                StatusCode::OK,
                html::page(&f, "Workers", Nav::Workers, "", &body(&f, &rows), true),
            )
        }
        Err(e) => app.db_error(&v, &e),
    }
}

fn body(f: &Frame<'_>, rows: &[WorkerRow]) -> String {
    let (live, gone): (Vec<&WorkerRow>, Vec<&WorkerRow>) =
        rows.iter().partition(|w| w.state != "gone");
    let mut s = String::new();
    let serving: i64 = live.len() as i64;
    s.push_str(&format!(
        "<p class=\"summary\" id=\"workers-summary\">{} {} serving the queues.</p>",
        int(serving),
        if serving == 1 { "worker" } else { "workers" }
    ));
    if live.is_empty() {
        s.push_str(
            "<p class=\"empty\">No worker is running. A worker registers here when it starts \
             and marks itself stopped when it shuts down.</p>",
        );
    } else {
        s.push_str(&table(f, &live, "workers"));
    }
    if !gone.is_empty() {
        s.push_str("<h2>Gone in the last 24 hours</h2>");
        s.push_str(&table(f, &gone, "workers gone"));
    }
    s.push_str(
        "<p class=\"note\">Running: seen within its heartbeat interval plus a grace of as much \
         again (at least 2 s). Sleeping: its poll is off and it is idle, so it writes nothing \
         until a job arrives; its silence is not death. Gone: stopped at a clean shutdown, or, \
         with its poll on, silent for longer than that: two missed heartbeats.</p>",
    );
    s
}

fn table(f: &Frame<'_>, rows: &[&WorkerRow], class: &str) -> String {
    let base = esc(f.base);
    let mut s = format!(
        "<table class=\"grid {class}\"><thead><tr><th>Host</th><th>PID</th><th>Queues \
         <span class=\"muted\">(concurrency)</span></th>\
         <th title=\"Jobs running at its last heartbeat, against its slots\">Running</th>\
         <th>State</th><th>Started</th><th title=\"Its last heartbeat (or its stop)\">Last seen</th>\
         <th title=\"How often it says it is alive\">Heartbeat</th><th>Version</th></tr></thead><tbody>"
    );
    for w in rows {
        let queues: Vec<String> = w
            .queues
            .iter()
            .map(|(q, n)| {
                format!(
                    "<a href=\"{base}/queues/{}\">{}</a>&#8239;<span class=\"muted\">×{}</span>",
                    url_value(q),
                    esc(q),
                    esc(n)
                )
            })
            .collect();
        let state = match w.state.as_str() {
            "running" => "<span class=\"wstate running\">running</span>".to_owned(),
            "sleeping" => "<span class=\"wstate sleeping\" title=\"Its poll is off and it is \
                           idle: it writes nothing until a job arrives\">sleeping</span>"
                .to_owned(),
            _ => match w.stopped_at {
                Some(t) => format!(
                    "<span class=\"wstate gone\">stopped</span> <span class=\"muted small\">{}</span>",
                    when(Some(t), w.now)
                ),
                None => "<span class=\"wstate gone\" title=\"Silent for longer than its heartbeat \
                         allows: it died or lost the database\">gone</span>"
                    .to_owned(),
            },
        };
        let poll = if w.poll_off {
            " <span class=\"tag\" title=\"Its poll is off: idle, it sends nothing to the \
             database\">poll off</span>"
        } else {
            ""
        };
        s.push_str(&format!(
            "<tr><td>{host}</td><td class=\"n\">{pid}</td><td>{queues}</td>\
             <td class=\"n\">{running} <span class=\"limit\">/ {slots}</span></td>\
             <td>{state}{poll}</td><td>{started}</td><td>{seen}</td><td class=\"n\">{hb}</td>\
             <td>{version}</td></tr>",
            host = esc(&w.host),
            pid = w.pid,
            queues = queues.join(", "),
            running = int(i64::from(w.running)),
            slots = int(i64::from(w.concurrency)),
            started = when(Some(w.started_at), w.now),
            seen = when(Some(w.last_seen), w.now),
            hb = html::span(w.heartbeat_s),
            version = esc(&w.version),
        ));
    }
    s.push_str("</tbody></table>");
    s
}
