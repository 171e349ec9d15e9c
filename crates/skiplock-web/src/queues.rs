//! The queues page: per queue, jobs in each state (held ones too: queued, waiting for their
//! turn in a sequence), jobs finished in the last minute, the oldest ready job's age, running
//! jobs against the queue's concurrency limit, and whether it is paused (with Pause and Resume
//! buttons); then flow control (each limited queue's limits, why its jobs wait, the keys at
//! their per-key limit and the sequences with held jobs), and the periodic schedules (with
//! Run now, Pause and Resume).
//!
//! The table is a list of [`Column`]s over [`QueueRow`]s, and the page a list of sections:
//! a column (a queue's pause state) or a section (periodic schedules) is one more entry.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use tokio_postgres::Transaction;

use crate::chart::{self, Series};
use crate::db::{self, DbResult};
use crate::html::{self, esc, url_value, Count, Frame, Nav};
use crate::jobs::{bad_request, valid_name};
use crate::{html_response, App, Viewer};

/// One queue's figures.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QueueRow {
    pub(crate) queue: String,
    pub(crate) queued: Count,
    pub(crate) ready: Count,
    /// Queued, due later (display state `scheduled`).
    pub(crate) scheduled: Count,
    /// Queued again after a failed attempt (display state `retrying`).
    pub(crate) retrying: Count,
    pub(crate) running: Count,
    pub(crate) done: Count,
    pub(crate) failed: Count,
    pub(crate) last_minute: Count,
    pub(crate) oldest_ready_s: f64,
    /// Queued jobs waiting for their turn in a sequence (not ready, whatever their run_at).
    pub(crate) held: Count,
    /// Paused: since when (epoch seconds), by whom, and the database's clock then.
    pub(crate) paused: Option<(Option<f64>, Option<String>, f64)>,
    /// Its limits, if it has any.
    pub(crate) limits: Option<Limits>,
    /// The live workers serving it (running or sleeping, not gone).
    pub(crate) workers: i64,
}

/// A limited queue's limits (`None`: no such limit), as its `queues` row holds them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limits {
    pub(crate) concurrency: Option<i32>,
    pub(crate) per_key: Option<i32>,
    /// Starts allowed per period, and the period in microseconds.
    pub(crate) rate: Option<(i32, i64)>,
    /// Why the last claim left ready jobs behind: `slots` or `rate`.
    pub(crate) bound: Option<String>,
    /// Who set them.
    pub(crate) by: Option<String>,
}

/// A key at its per-key limit that has ready jobs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeyRow {
    pub(crate) queue: String,
    pub(crate) key: String,
    pub(crate) running: i64,
    pub(crate) per_key: i32,
    /// Ready and waiting (queued, not held) jobs among the first [`KEY_ROWS`] of the key.
    pub(crate) ready: Count,
    pub(crate) waiting: Count,
}

/// A sequence with held jobs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SequenceRow {
    pub(crate) queue: String,
    pub(crate) sequence: String,
    pub(crate) held: Count,
    /// The member it waits for, and that member's state.
    pub(crate) waits_for: Option<(i64, String)>,
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
            scheduled: Count::Exact(0),
            retrying: Count::Exact(0),
            running: Count::Exact(0),
            done: Count::Exact(0),
            failed: Count::Exact(0),
            last_minute: Count::Exact(0),
            oldest_ready_s: 0.0,
            held: Count::Exact(0),
            paused: None,
            limits: None,
            workers: 0,
        }
    }

    /// Running jobs above its concurrency limit: the limit was lowered below what ran (the
    /// running jobs finish; none starts until the count is below the limit).
    fn above_limit(&self) -> bool {
        matches!(
            self.limits.as_ref().and_then(|l| l.concurrency),
            Some(c) if self.running.value() > i64::from(c)
        )
    }
}

/// How long the estimates of large finished counts are kept: each reads a sample of the
/// table's pages, so it is not repeated on every refresh.
pub(crate) const ESTIMATE_TTL: Duration = Duration::from_secs(10);

/// About how many of the table's pages an estimate reads.
const SAMPLE_PAGES: f64 = 500.0;

/// The keys at their per-key limit, and the sequences with held jobs, shown per queue.
const WAITS_SHOWN: i64 = 10;
/// How many keys at their limit are looked at, across queues.
const KEYS_LOOKED: i64 = 50;
/// How many queued rows of each such key are counted.
const KEY_ROWS: i64 = 1_000;

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
    /// The keys at their per-key limit with ready jobs, by queue, most ready first.
    pub(crate) keys: Vec<KeyRow>,
    /// How many keys were found at their limit (more than [`KEYS_LOOKED`]: not all were
    /// looked at).
    pub(crate) keys_considered: i64,
    /// The sequences with held jobs, by queue, most held first.
    pub(crate) sequences: Vec<SequenceRow>,
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
                "<a href=\"{}/queues/{}\">{}</a>",
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
        title: "Queued, due now and with an attempt left: the next claim takes them",
        cell: |_, r| r.ready.html(),
    },
    Column {
        header: "Waiting",
        title: "Queued, waiting for their parents or their turn in a sequence (held: not ready, \
                whatever their run_at)",
        cell: |f, r| state_link(f, r, "held", r.held),
    },
    Column {
        header: "Running",
        title: "Claimed by a worker (holding a lease); against the concurrency limit, if any",
        cell: running_cell,
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
        header: "Scheduled",
        title: "Queued, due later",
        cell: |f, r| state_link(f, r, "scheduled", r.scheduled),
    },
    Column {
        header: "Retrying",
        title: "Queued again after a failed attempt (due now or after their backoff)",
        cell: |f, r| state_link(f, r, "retrying", r.retrying),
    },
    Column {
        header: "Workers",
        title: "Live workers serving it (running, or sleeping with the poll off)",
        cell: |f, r| {
            if r.workers == 0 {
                "<span class=\"muted\">0</span>".to_owned()
            } else {
                format!(
                    "<a class=\"n\" href=\"{}/workers\">{}</a>",
                    esc(f.base),
                    html::int(r.workers)
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

/// Running jobs, and against the concurrency limit when the queue has one: `3 / 5`, marked
/// when above it.
fn running_cell(f: &Frame<'_>, r: &QueueRow) -> String {
    let n = state_link(f, r, "running", r.running);
    match r.limits.as_ref().and_then(|l| l.concurrency) {
        None => n,
        Some(c) => {
            let above = if r.above_limit() {
                format!(" {}", above_limit_tag(c))
            } else {
                String::new()
            };
            format!(
                "{n} <span class=\"limit\" title=\"its concurrency limit\">/ {}</span>{above}",
                html::int(i64::from(c))
            )
        }
    }
}

fn above_limit_tag(c: i32) -> String {
    format!(
        "<span class=\"tag warn\" title=\"More run than its concurrency limit of {}: it was \
         lowered. They finish; none starts until fewer run than the limit.\">above limit</span>",
        html::int(i64::from(c))
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
const SECTIONS: &[fn(&Frame<'_>, &Queues) -> String] =
    &[queues_table, flow_control, schedules_table];

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
    let mut rows: BTreeMap<String, QueueRow> = BTreeMap::new();

    let active = sql.queue_active(&*tx, cap, max_queues).await?;
    // Each branch of the statement (queued and not held, held, running) stops at the limit.
    let (mut unheld_total, mut held_total, mut running_total) = (0i64, 0i64, 0i64);
    for r in &active {
        let held: i64 = r.get("held");
        unheld_total += r.get::<_, i64>("queued") - held;
        held_total += held;
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
        row.queued = bound(r.get("queued"), unheld_total.max(held_total));
        row.ready = bound(r.get("ready"), unheld_total);
        row.scheduled = bound(r.get("scheduled"), unheld_total);
        row.retrying = bound(r.get("retrying"), unheld_total);
        row.held = bound(r.get("held"), held_total);
        row.running = bound(r.get("running"), running_total);
        row.oldest_ready_s = r.get("oldest_ready_age_s");
    }

    // Finished jobs: each queue's done, failed and last minute's counts, each exact up to
    // the count limit (read one row past it to know); beyond it, an estimate.
    let past = cap + 1;
    let finished = sql.queue_finished(&*tx, past, max_queues).await?;
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
    let paused = sql.queue_paused(&*tx, max_queues).await?;
    for r in &paused {
        let q: String = r.get("name");
        let row = rows.entry(q.clone()).or_insert_with(|| QueueRow::new(q));
        row.paused = Some((r.get("paused_at"), r.get("paused_by"), r.get("now")));
    }
    let limited = sql.queue_limits(&*tx, max_queues).await?;
    for r in &limited {
        let q: String = r.get("name");
        let row = rows.entry(q.clone()).or_insert_with(|| QueueRow::new(q));
        let rate = match (r.get("rate_limit"), r.get("rate_period_us")) {
            (Some(n), Some(us)) => Some((n, us)),
            _ => None,
        };
        row.limits = Some(Limits {
            concurrency: r.get("concurrency"),
            per_key: r.get("per_key"),
            rate,
            bound: r.get("limit_bound"),
            by: r.get("limits_by"),
        });
    }
    if limited
        .iter()
        .any(|r| r.get::<_, Option<i32>>("per_key").is_some())
    {
        let keys = sql
            .queue_keys_waiting(&*tx, cap, KEYS_LOOKED, KEY_ROWS, WAITS_SHOWN, max_queues)
            .await?;
        out.keys_considered = keys.first().map_or(0, |r| r.get("considered"));
        out.keys = keys
            .iter()
            .map(|r| {
                // Counted among the key's first KEY_ROWS queued rows: lower bounds when it
                // has that many.
                let (ready, waiting): (i64, i64) = (r.get("ready"), r.get("waiting"));
                let count = |n| {
                    if waiting >= KEY_ROWS {
                        Count::AtLeast(n)
                    } else {
                        Count::Exact(n)
                    }
                };
                KeyRow {
                    queue: r.get("queue"),
                    key: r.get("key"),
                    running: r.get("running"),
                    per_key: r.get("per_key"),
                    ready: count(ready),
                    waiting: count(waiting),
                }
            })
            .collect();
    }
    if held_total > 0 {
        let seqs = sql
            .queue_sequences_held(&*tx, cap, WAITS_SHOWN, max_queues)
            .await?;
        let capped = seqs.first().is_some_and(|r| r.get::<_, i64>("read") >= cap);
        out.sequences = seqs
            .iter()
            .map(|r| {
                let held: i64 = r.get("held");
                SequenceRow {
                    queue: r.get("queue"),
                    sequence: r.get("sequence"),
                    held: if capped {
                        Count::AtLeast(held)
                    } else {
                        Count::Exact(held)
                    },
                    waits_for: r
                        .get::<_, Option<i64>>("active_id")
                        .zip(r.get::<_, Option<String>>("active_status")),
                }
            })
            .collect();
    }
    let serving = sql.queue_workers(&*tx, max_queues).await?;
    for r in &serving {
        let q: String = r.get("queue");
        let row = rows.entry(q.clone()).or_insert_with(|| QueueRow::new(q));
        row.workers = r.get("workers");
    }
    let schedules = sql.schedule_list(&*tx, max_queues).await?;
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
    let read = app
        .sql
        .queue_finished_sample(&sp, SAMPLE_PAGES, &queues, limit, schema)
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

/// A paused queue's banner: who paused it and since when (as `queue_paused.sql` reads it).
pub(crate) fn paused_banner(queue: &str, at: Option<f64>, by: Option<&str>, now: f64) -> String {
    let by = by.map_or_else(String::new, |b| format!(" by <b>{}</b>", esc(b)));
    let since = match at {
        Some(_) => format!(" since {}", html::when_full(at, now)),
        None => String::new(),
    };
    format!(
        "<p class=\"notice warn banner\" id=\"paused-banner\">Queue <b>{}</b> is paused{by}{since}: \
         no worker claims its jobs until it is resumed (running ones finish).</p>",
        esc(queue)
    )
}

/// The pause of `queue`, if it is paused: since when, by whom, and the database's clock.
pub(crate) async fn paused(
    app: &App,
    tx: &(impl tokio_postgres::GenericClient + Sync),
    queue: &str,
) -> DbResult<Option<(Option<f64>, Option<String>, f64)>> {
    Ok(app
        .sql
        .queue_paused(tx, app.options.max_queues)
        .await?
        .iter()
        .find(|r| r.get::<_, &str>("name") == queue)
        .map(|r| (r.get("paused_at"), r.get("paused_by"), r.get("now"))))
}

/// `GET /queues/{name}`: one queue: its pause, the workers serving it, links to its jobs by
/// state, and its last hour from the per-minute rollup (throughput and depth).
pub(crate) async fn queue_page(
    State(app): State<App>,
    Extension(v): Extension<Viewer>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    if !valid_name(&name, false) {
        return bad_request(
            &app,
            &v,
            &format!("{name:?} is not a queue name (1 to 128 of A-Z a-z 0-9 _ . -)."),
        );
    }
    let read = async {
        let mut obj = db::conn(app.client.pool()).await?;
        let mut tx = db::begin(&mut obj, &app.sql, app.options.statement_timeout).await?;
        // Its row of the queues page, read as that page reads it.
        let all = read(&app, &mut tx).await?;
        let pause = paused(&app, &tx, &name).await?;
        let workers = app
            .sql
            .queue_workers(&tx, app.options.max_queues)
            .await?
            .iter()
            .find(|r| r.get::<_, &str>("queue") == name)
            .map_or(0, |r| r.get::<_, i64>("workers"));
        let stats = app.sql.queue_stats_hour(&tx, &name).await?;
        let now = match stats.first() {
            Some(r) => r.get("now"),
            None => pause.as_ref().map_or(0.0, |p| p.2),
        };
        let row = Queues {
            rows: all.rows.into_iter().filter(|r| r.queue == name).collect(),
            ..all
        };
        Ok::<_, db::DbError>((row, pause, workers, stats, now))
    };
    let (row, pause, workers, stats, now) = match read.await {
        Ok(x) => x,
        Err(e) => return app.db_error(&v, &e),
    };
    let f = app.frame(&v);
    let base = esc(f.base);
    let q = url_value(&name);
    let mut s = String::new();
    if let Some((at, by, now)) = &pause {
        s.push_str(&paused_banner(&name, *at, by.as_deref(), *now));
    }
    if row.rows.is_empty() {
        s.push_str("<p class=\"empty\">No job in this queue.</p>");
    } else {
        s.push_str(&queues_table(&f, &row));
    }
    s.push_str(&format!(
        "<p class=\"summary\" id=\"queue-workers\">{} live {} serving it \
         (<a href=\"{base}/workers\">workers</a>).</p>",
        html::int(workers),
        if workers == 1 { "worker" } else { "workers" }
    ));
    let links: Vec<String> = crate::jobs::STATES
        .iter()
        .filter(|s| **s != "waiting")
        .map(|st| {
            let label = if *st == "held" { "waiting" } else { st };
            format!("<a href=\"{base}/jobs?queue={q}&amp;state={st}\">{label}</a>")
        })
        .collect();
    s.push_str(&format!(
        "<p class=\"links\">Its jobs: <a href=\"{base}/jobs?queue={q}\">all</a> · {}</p>",
        links.join(" · ")
    ));
    s.push_str(&charts(&name, &stats, now));
    html_response(
        StatusCode::OK,
        html::page(&f, &format!("Queue {name}"), Nav::Queues, "", &s, true),
    )
}

/// The throughput and depth charts of a queue's last hour, or the empty state when the rollup
/// has no sample of it.
fn charts(queue: &str, stats: &[tokio_postgres::Row], now: f64) -> String {
    let mut s = String::from("<h2>Last hour</h2>");
    if stats.is_empty() {
        s.push_str(
            "<p class=\"empty\" id=\"no-samples\">No samples: the rollup is written by the \
             elected gauges service of <code>skiplock serve</code>, or of a worker with its \
             metrics gauges on (<code>skiplock work --metrics-addr</code>).</p>",
        );
        return s;
    }
    let series = |col: &str| -> Vec<(f64, f64)> {
        stats
            .iter()
            .map(|r| (r.get::<_, f64>("minute"), r.get::<_, i64>(col) as f64))
            .collect()
    };
    s.push_str("<div class=\"charts\"><figure><figcaption>Throughput: jobs finished per minute</figcaption>");
    s.push_str(&chart::chart(
        "chart-throughput",
        &format!("Jobs of queue {queue} done and failed per minute, last hour"),
        now,
        &[
            Series {
                name: "done",
                class: "done",
                points: series("done"),
            },
            Series {
                name: "failed",
                class: "failed",
                points: series("failed"),
            },
        ],
    ));
    s.push_str(
        "</figure><figure><figcaption>Depth: jobs at each minute's last sample</figcaption>",
    );
    s.push_str(&chart::chart(
        "chart-depth",
        &format!("Jobs of queue {queue} available, scheduled and running, last hour"),
        now,
        &[
            Series {
                name: "available",
                class: "available",
                points: series("available"),
            },
            Series {
                name: "scheduled",
                class: "scheduled",
                points: series("scheduled"),
            },
            Series {
                name: "running",
                class: "running",
                points: series("running"),
            },
        ],
    ));
    s.push_str(&format!(
        "</figure></div><p class=\"note\">{} of the last 60 minutes sampled; a minute with no \
         sample is a gap, not a zero. Written by the elected gauges service of \
         <code>skiplock serve</code> or of a worker with its metrics gauges on.</p>",
        stats.len()
    ));
    s
}

/// A rate: `100 / s`, `5 / 500 ms`, `1,000 / 10 min`.
fn rate(n: i32, period_us: i64) -> String {
    let units: [(i64, &str); 5] = [
        (86_400_000_000, "d"),
        (3_600_000_000, "h"),
        (60_000_000, "min"),
        (1_000_000, "s"),
        (1_000, "ms"),
    ];
    let (k, unit) = units
        .iter()
        .find(|(u, _)| period_us >= *u && period_us % u == 0)
        .map_or((period_us, "µs"), |(u, name)| (period_us / u, *name));
    let period = if k == 1 {
        unit.to_owned()
    } else {
        format!("{} {unit}", html::int(k))
    };
    format!("{} / {period}", html::int(i64::from(n)))
}

/// Why a limited queue's jobs wait, from its last claim.
fn bound_tag(bound: Option<&str>) -> String {
    match bound {
        Some("slots") => {
            "<span class=\"tag\" title=\"The last claim left ready jobs behind for want of a \
             concurrency or per-key slot: a finished job frees one and wakes the workers\">\
             waiting for a slot</span>"
                .to_owned()
        }
        Some("rate") => {
            "<span class=\"tag\" title=\"The last claim left ready jobs behind for want of room \
             in the rate window: the workers wait until it has room\">rate window full</span>"
                .to_owned()
        }
        Some(other) => esc(other),
        None => "<span class=\"muted\">-</span>".to_owned(),
    }
}

/// Flow control: each limited queue (or queue with held jobs), its limits, running jobs
/// against the concurrency limit and why its jobs wait; then the keys at their per-key limit
/// and the sequences with held jobs.
fn flow_control(f: &Frame<'_>, q: &Queues) -> String {
    let rows: Vec<&QueueRow> = q
        .rows
        .iter()
        .filter(|r| r.limits.is_some() || r.held.value() > 0)
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let base = esc(f.base);
    let dash = || "<span class=\"muted\">-</span>".to_owned();
    let limit = |n: Option<i32>| n.map_or_else(dash, |n| html::int(i64::from(n)));
    let queue_link = |queue: &str| {
        format!(
            "<a href=\"{base}/jobs?queue={}\">{}</a>",
            url_value(queue),
            esc(queue)
        )
    };
    let mut s = String::from(
        "<h2>Flow control</h2><table class=\"grid flow\"><thead><tr><th>Queue</th>\
         <th title=\"At most this many of its jobs run at once, across every worker and process\">\
         Concurrency</th>\
         <th title=\"At most this many jobs of one key run at once\">Per key</th>\
         <th title=\"At most this many starts in any interval of the period (a sliding window)\">\
         Rate</th>\
         <th title=\"Running jobs, against the concurrency limit\">Running</th>\
         <th title=\"Queued, waiting for their turn in a sequence\">Held</th>\
         <th title=\"Why the last claim left ready jobs behind, if it did\">Jobs wait</th>\
         <th>Limits set by</th></tr></thead><tbody>",
    );
    for r in rows {
        let l = r.limits.as_ref();
        s.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td></tr>",
            queue_link(&r.queue),
            limit(l.and_then(|l| l.concurrency)),
            limit(l.and_then(|l| l.per_key)),
            l.and_then(|l| l.rate)
                .map_or_else(dash, |(n, us)| rate(n, us)),
            running_cell(f, r),
            state_link(f, r, "held", r.held),
            match l {
                Some(l) => bound_tag(l.bound.as_deref()),
                None => dash(),
            },
            l.and_then(|l| l.by.as_deref()).map_or_else(dash, esc),
        ));
    }
    s.push_str("</tbody></table>");

    if !q.keys.is_empty() {
        s.push_str(
            "<h3>Keys at their per-key limit</h3><table class=\"grid keys\"><thead><tr>\
             <th>Queue</th><th>Key</th>\
             <th title=\"Its running jobs, against the per-key limit\">Running</th>\
             <th title=\"Queued, due now, waiting for a slot of this key\">Ready</th>\
             <th title=\"Queued and not held, due now or later\">Waiting</th>\
             </tr></thead><tbody>",
        );
        for k in &q.keys {
            s.push_str(&format!(
                "<tr><td>{}</td><td><code>{}</code></td><td>{} <span class=\"limit\">/ {}</span></td>\
                 <td>{}</td><td>{}</td></tr>",
                queue_link(&k.queue),
                esc(&k.key),
                html::int(k.running),
                html::int(i64::from(k.per_key)),
                k.ready.html(),
                k.waiting.html(),
            ));
        }
        s.push_str("</tbody></table>");
        let mut note = format!(
            "The keys with the most ready jobs among those at their limit, {WAITS_SHOWN} per \
             queue at most; each key's queued jobs are counted up to {}.",
            html::int(KEY_ROWS)
        );
        if q.keys_considered > KEYS_LOOKED {
            note.push_str(&format!(
                " {} keys are at their limit: the first {KEYS_LOOKED} by queue and key were \
                 looked at.",
                html::int(q.keys_considered)
            ));
        }
        s.push_str(&format!("<p class=\"note\">{}</p>", esc(&note)));
    }

    if !q.sequences.is_empty() {
        s.push_str(
            "<h3>Sequences with held jobs</h3><table class=\"grid sequences\"><thead><tr>\
             <th>Queue</th><th>Sequence</th>\
             <th title=\"Its jobs in this queue waiting for their turn\">Held</th>\
             <th title=\"The member that runs before them: the next one becomes ready when it \
             finishes\">Waiting for</th></tr></thead><tbody>",
        );
        for q in &q.sequences {
            let waits = match &q.waits_for {
                Some((id, state)) => format!(
                    "<a href=\"{base}/jobs/{id}\">job {id}</a> {}",
                    html::state_badge(state)
                ),
                None => dash(),
            };
            s.push_str(&format!(
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{waits}</td></tr>",
                queue_link(&q.queue),
                esc(&q.sequence),
                q.held.html(),
            ));
        }
        s.push_str("</tbody></table>");
        s.push_str(&format!(
            "<p class=\"note\">The sequences with the most held jobs, {WAITS_SHOWN} per queue at \
             most.</p>"
        ));
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
    use super::{rate, two_figures};

    #[test]
    fn rates_read_as_starts_per_period() {
        assert_eq!(rate(100, 1_000_000), "100 / s");
        assert_eq!(rate(5, 500_000), "5 / 500 ms");
        assert_eq!(rate(1_000, 600_000_000), "1,000 / 10 min");
        assert_eq!(rate(10, 60_000_000), "10 / min");
        assert_eq!(rate(1, 86_400_000_000), "1 / d");
        assert_eq!(rate(3, 7_200_000_000), "3 / 2 h");
        assert_eq!(rate(3, 1_500_000), "3 / 1,500 ms");
        assert_eq!(rate(3, 1_001), "3 / 1,001 µs");
    }

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
