//! The job list (filtered, paginated by id) and the page of one job.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;
use tokio_postgres::Row;

use crate::db::{self, Filter};
use crate::html::{self, esc, int, state_badge, url_value, when, when_full, Count, Frame, Nav};
use crate::workflow::{self, Workflow};
use crate::{html_response, App, Viewer};

/// The states the list filters on, in the order the filter lists them: `queued` (any queued
/// job), the display states of `skiplock jobs` (`held` is its `waiting`: queued jobs waiting
/// for their parents or their turn in a sequence; `failed` leaves the cancelled ones out),
/// and `running` and `done`.
pub(crate) const STATES: [&str; 10] = [
    "queued",
    "available",
    "scheduled",
    "retrying",
    "held",
    "running",
    "done",
    "failed",
    "cancelled",
    // Not listed: read as `held`.
    "waiting",
];

/// The list's query string. Numbers are taken as text so that a bad one gets a clear page.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    pub(crate) state: Option<String>,
    #[serde(default)]
    pub(crate) queue: Option<String>,
    #[serde(default)]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    after: Option<String>,
    /// Set after a job was deleted from its page.
    #[serde(default)]
    deleted: Option<String>,
}

/// A name as the jobs table allows it: 1 to 128 characters of `[A-Za-z0-9_.-]` (and `:` in
/// kinds).
pub(crate) fn valid_name(s: &str, colon: bool) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-') || (colon && b == b':')
        })
}

/// The filter of a query string; empty fields mean "any".
pub(crate) fn parse_filter(
    state: Option<&str>,
    queue: Option<&str>,
    kind: Option<&str>,
) -> Result<Filter, String> {
    let some = |s: Option<&str>| {
        s.map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let f = Filter {
        // `waiting` as `skiplock jobs` says it is the list's `held`.
        state: some(state).map(|s| if s == "waiting" { "held".to_owned() } else { s }),
        queue: some(queue),
        kind: some(kind),
    };
    if let Some(s) = &f.state {
        if !STATES.contains(&s.as_str()) {
            return Err(format!(
                "{s:?} is not a job state (queued, available, scheduled, retrying, waiting, \
                 running, done, failed or cancelled)."
            ));
        }
    }
    if let Some(q) = &f.queue {
        if !valid_name(q, false) {
            return Err(format!(
                "{q:?} is not a queue name (1 to 128 of A-Z a-z 0-9 _ . -)."
            ));
        }
    }
    if let Some(k) = &f.kind {
        if !valid_name(k, true) {
            return Err(format!(
                "{k:?} is not a job kind (1 to 128 of A-Z a-z 0-9 _ . : -)."
            ));
        }
    }
    Ok(f)
}

/// A job id from the URL: a positive whole number.
pub(crate) fn parse_id(s: &str) -> Option<i64> {
    s.trim().parse::<i64>().ok().filter(|n| *n > 0)
}

/// The query string of a filter (with a leading `?` when not empty), HTML-escaped.
pub(crate) fn filter_query(f: &Filter, extra: &[(&str, String)]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for (k, v) in [("state", &f.state), ("queue", &f.queue), ("kind", &f.kind)] {
        if let Some(v) = v {
            parts.push(format!("{k}={}", url_value(v)));
        }
    }
    for (k, v) in extra {
        parts.push(format!("{k}={}", url_value(v)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        esc(&format!("?{}", parts.join("&")))
    }
}

pub(crate) fn bad_request(app: &App, v: &Viewer, text: &str) -> Response {
    html_response(
        StatusCode::BAD_REQUEST,
        html::message(&app.frame(v), "Bad request", text),
    )
}

/// One row of the list.
pub(crate) struct ListRow {
    id: i64,
    queue: String,
    kind: String,
    status: String,
    /// The display state (as `skiplock jobs` derives it).
    state: String,
    attempts: i32,
    max_attempts: i32,
    run_at: f64,
    created_at: f64,
    finished_at: Option<f64>,
    locked_until: Option<f64>,
    last_error: Option<String>,
    /// Why a queued job waits other than for time (`sequence`), if it does.
    held: Option<String>,
    now: f64,
}

impl From<&Row> for ListRow {
    fn from(r: &Row) -> Self {
        ListRow {
            id: r.get("id"),
            queue: r.get("queue"),
            kind: r.get("kind"),
            status: r.get("status"),
            state: r.get("state"),
            attempts: r.get("attempts"),
            max_attempts: r.get("max_attempts"),
            run_at: r.get("run_at"),
            created_at: r.get("created_at"),
            finished_at: r.get("finished_at"),
            locked_until: r.get("locked_until"),
            last_error: r.get("last_error"),
            held: r.get("held"),
            now: r.get("now"),
        }
    }
}

pub(crate) async fn list(
    State(app): State<App>,
    Extension(v): Extension<Viewer>,
    Query(q): Query<ListQuery>,
) -> Response {
    let filter = match parse_filter(q.state.as_deref(), q.queue.as_deref(), q.kind.as_deref()) {
        Ok(f) => f,
        Err(e) => return bad_request(&app, &v, &e),
    };
    let anchor = |s: &Option<String>| -> Result<Option<i64>, String> {
        match s.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => parse_id(s)
                .map(Some)
                .ok_or_else(|| format!("{s:?} is not a job id.")),
        }
    };
    let (before, after) = match (anchor(&q.before), anchor(&q.after)) {
        (Ok(b), Ok(a)) => (b, a),
        (Err(e), _) | (_, Err(e)) => return bad_request(&app, &v, &e),
    };
    let n = app.options.page_size;
    let fetch = n + 1;
    let cap = app.options.count_limit;
    let budget = app.options.scan_budget;
    let bounded = !filter.indexed();
    let read = async {
        let mut obj = db::conn(app.client.pool()).await?;
        let tx = db::begin(&mut obj, &app.sql, app.options.statement_timeout).await?;
        // The end of the scan budget from the newest job: the count's range, and the first
        // page's.
        let top = if bounded {
            app.sql.job_scan_older(&tx, None, budget).await?
        } else {
            None
        };
        let mut scan = Scan::default();
        let (mut rows, newer_mode) = match (before, after) {
            (None, Some(a)) => {
                let hi = if bounded {
                    app.sql.job_scan_newer(&tx, a, budget).await?
                } else {
                    None
                };
                let page = db::Page { fetch, bound: hi };
                let rows = app.sql.job_list_newer(&tx, &filter, a, &page).await?;
                if let Some(hi) = hi {
                    scan = Scan {
                        lo: Some(a + 1),
                        hi: Some(hi),
                        newer: Some(hi),
                        older: None,
                    };
                }
                (rows, true)
            }
            _ => {
                let lo = match (bounded, before) {
                    (false, _) => None,
                    (true, None) => top,
                    (true, Some(b)) => app.sql.job_scan_older(&tx, Some(b), budget).await?,
                };
                let page = db::Page { fetch, bound: lo };
                let rows = app.sql.job_list_older(&tx, &filter, before, &page).await?;
                if let Some(lo) = lo {
                    scan = Scan {
                        lo: Some(lo),
                        hi: before.map(|b| b - 1),
                        newer: None,
                        older: Some(lo),
                    };
                }
                (rows, false)
            }
        };
        let count = app.sql.job_count(&tx, &filter, cap, top).await?;
        let pause = match &filter.queue {
            Some(q) => crate::queues::paused(&app, &tx, q).await?,
            None => None,
        };
        let more = rows.len() as i64 > n;
        rows.truncate(n as usize);
        let mut rows: Vec<ListRow> = rows.iter().map(ListRow::from).collect();
        if newer_mode {
            rows.reverse();
        }
        // A full page pages on from its last row as usual; a page the budget cut short
        // continues from where the scan stopped.
        let (newer, older) = if newer_mode {
            (
                if more {
                    rows.first().map(|r| r.id)
                } else {
                    scan.newer
                },
                rows.last().map(|r| r.id),
            )
        } else {
            (
                before.and(rows.first().map(|r| r.id)),
                if more {
                    rows.last().map(|r| r.id)
                } else {
                    scan.older
                },
            )
        };
        if more {
            scan = Scan::default();
        }
        let count = if count >= cap {
            Count::AtLeast(count)
        } else if top.is_some() {
            Count::Among(count, budget)
        } else {
            Count::Exact(count)
        };
        let newest_link = if newer_mode {
            more || scan.newer.is_some()
        } else {
            before.is_some()
        };
        Ok::<_, db::DbError>((
            rows,
            count,
            pause,
            Pager {
                newest: newest_link,
                newer,
                older,
                scan,
                budget,
            },
        ))
    };
    match read.await {
        Ok((rows, count, pause, pager)) => {
            let f = app.frame(&v);
            let top = filter_form(&f, &filter);
            let mut body = String::new();
            if let (Some(q), Some((at, by, now))) = (&filter.queue, &pause) {
                body.push_str(&crate::queues::paused_banner(q, *at, by.as_deref(), *now));
            }
            if let Some(id) = q.deleted.as_deref().and_then(parse_id) {
                body.push_str(&format!(
                    "<p class=\"notice ok\">Job {} was deleted.</p>",
                    int(id)
                ));
            }
            body.push_str(&list_body(&f, &filter, &rows, count, &pager, v.full));
            if v.full {
                body.push_str(&bulk_bar(&f, &filter, count));
            }
            html_response(
                StatusCode::OK,
                html::page(&f, "Jobs", Nav::Jobs, &top, &body, true),
            )
        }
        Err(e) => app.db_error(&v, &e),
    }
}

/// How far a page read, when the scan budget cut it short (fewer matches than a page).
#[derive(Debug, Default, Clone, Copy)]
struct Scan {
    /// The lowest id read (`None`: no bound).
    lo: Option<i64>,
    /// The highest id read (`None`: up to the newest job).
    hi: Option<i64>,
    /// Where a "search newer" link continues (`after`).
    newer: Option<i64>,
    /// Where a "search older" link continues (`before`).
    older: Option<i64>,
}

/// The list's links: "newest", "newer" (`after` this id), "older" (`before` this id), and
/// the stretch a page read when the scan budget cut it short.
struct Pager {
    newest: bool,
    newer: Option<i64>,
    older: Option<i64>,
    scan: Scan,
    budget: i64,
}

/// What a page cut short by the scan budget searched, said plainly.
fn scan_note(found: usize, p: &Pager) -> String {
    let range = match (p.scan.lo, p.scan.hi) {
        (Some(lo), Some(hi)) => format!("ids {} to {}", int(lo), int(hi)),
        (Some(lo), None) => format!("ids from {} to the newest", int(lo)),
        (None, Some(hi)) => format!("ids up to {}", int(hi)),
        (None, None) => "every id".to_owned(),
    };
    let way = if p.scan.older.is_some() {
        "older"
    } else {
        "newer"
    };
    format!(
        "<p class=\"note scan\">{} match{} among the {} jobs searched ({range}): this filter \
         has no index, so each page reads at most {} jobs. Search {way} to go on from where it \
         stopped.</p>",
        int(found as i64),
        if found == 1 { "" } else { "es" },
        int(p.budget),
        int(p.budget),
    )
}

fn filter_form(f: &Frame<'_>, filter: &Filter) -> String {
    let mut opts = String::from("<option value=\"\">any state</option>");
    for s in STATES.iter().filter(|s| **s != "waiting") {
        let sel = if filter.state.as_deref() == Some(*s) {
            " selected"
        } else {
            ""
        };
        let label = match *s {
            "queued" => "queued (any)",
            "held" => "waiting (held)",
            s => s,
        };
        opts.push_str(&format!("<option value=\"{s}\"{sel}>{label}</option>"));
    }
    let val = |o: &Option<String>| esc(o.as_deref().unwrap_or(""));
    format!(
        "<form class=\"filters\" method=\"get\" action=\"{base}/jobs\">\
         <label>State <select name=\"state\">{opts}</select></label>\
         <label>Queue <input name=\"queue\" value=\"{q}\" placeholder=\"any\" size=\"14\"></label>\
         <label>Kind <input name=\"kind\" value=\"{k}\" placeholder=\"any\" size=\"14\"></label>\
         <button type=\"submit\">Filter</button> <a href=\"{base}/jobs\">Clear</a></form>",
        base = esc(f.base),
        q = val(&filter.queue),
        k = val(&filter.kind),
    )
}

fn list_body(
    f: &Frame<'_>,
    filter: &Filter,
    rows: &[ListRow],
    count: Count,
    p: &Pager,
    select: bool,
) -> String {
    let base = esc(f.base);
    let among = match count {
        Count::Among(_, budget) => format!(" among the newest {} jobs", int(budget)),
        _ => String::new(),
    };
    let mut s = format!(
        "<p class=\"summary\">{} matching job{}{among}, newest first.</p>",
        count.html(),
        if count.value() == 1 { "" } else { "s" }
    );
    if p.scan.older.is_some() || p.scan.newer.is_some() {
        s.push_str(&scan_note(rows.len(), p));
    }
    if rows.is_empty() {
        s.push_str("<p class=\"empty\">No jobs here.</p>");
    } else {
        if select {
            s.push_str(&selected_form(f, filter));
        }
        s.push_str(&jobs_table(f, rows, select));
    }
    let mut pager = Vec::new();
    if p.newest {
        pager.push(format!(
            "<a href=\"{base}/jobs{}\">« Newest</a>",
            filter_query(filter, &[])
        ));
    }
    if let Some(id) = p.newer {
        let label = if p.scan.newer.is_some() {
            "‹ Search newer"
        } else {
            "‹ Newer"
        };
        pager.push(format!(
            "<a href=\"{base}/jobs{}\" rel=\"prev\">{label}</a>",
            filter_query(filter, &[("after", id.to_string())])
        ));
    }
    if let Some(id) = p.older {
        let label = if p.scan.older.is_some() {
            "Search older ›"
        } else {
            "Older ›"
        };
        pager.push(format!(
            "<a href=\"{base}/jobs{}\" rel=\"next\">{label}</a>",
            filter_query(filter, &[("before", id.to_string())])
        ));
    }
    if !pager.is_empty() {
        s.push_str(&format!("<nav class=\"pager\">{}</nav>", pager.join(" ")));
    }
    s
}

/// The buttons that act on the jobs ticked in the list (the form the rows' checkboxes belong
/// to): the same actions, through the same guard, as a job's own buttons.
fn selected_form(f: &Frame<'_>, filter: &Filter) -> String {
    let hidden = |k: &str, val: &Option<String>| match val {
        Some(val) => format!(
            "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
            esc(val)
        ),
        None => String::new(),
    };
    format!(
        "<form method=\"post\" action=\"{base}/selected\" id=\"selected\" class=\"selected\">\
         {s}{q}{k}<span>Ticked jobs:</span> \
         <button type=\"submit\" name=\"action\" value=\"retry\" class=\"retry\" \
         id=\"selected-retry\">Retry</button> \
         <button type=\"submit\" name=\"action\" value=\"cancel\" class=\"cancel\" \
         id=\"selected-cancel\">Cancel</button> \
         <button type=\"submit\" name=\"action\" value=\"delete\" class=\"delete\" \
         id=\"selected-delete\" data-confirm=\"Delete the ticked jobs? This cannot be \
         undone.\">Delete</button></form>",
        base = esc(f.base),
        s = hidden("state", &filter.state),
        q = hidden("queue", &filter.queue),
        k = hidden("kind", &filter.kind),
    )
}

/// The table of a job list or of search results; with `select`, a checkbox per row for the
/// form `selected_form` draws.
pub(crate) fn jobs_table(f: &Frame<'_>, rows: &[ListRow], select: bool) -> String {
    let base = esc(f.base);
    let mut s = String::new();
    let pick = if select {
        "<th class=\"pick\"><input type=\"checkbox\" id=\"pick-all\" \
         aria-label=\"tick every job of this page\"></th>"
    } else {
        ""
    };
    s.push_str(&format!(
        "<table class=\"grid jobs\"><thead><tr>{pick}<th>ID</th><th>State</th><th>Queue</th>\
         <th>Kind</th><th>Attempts</th><th>Run at</th><th>Created</th><th>Finished</th>\
         <th>Last error</th></tr></thead><tbody>"
    ));
    for r in rows {
        let lease = match (r.status.as_str(), r.locked_until) {
            ("running", Some(t)) => format!(
                "<div class=\"muted small\">lease {}</div>",
                when(Some(t), r.now)
            ),
            _ => String::new(),
        };
        let held = match (r.status.as_str(), &r.held) {
            ("queued", Some(h)) => format!(" {}", held_tag(h)),
            _ => String::new(),
        };
        let check = if select {
            format!(
                "<td class=\"pick\"><input type=\"checkbox\" name=\"id\" value=\"{id}\" \
                 form=\"selected\" aria-label=\"job {id}\"></td>",
                id = r.id
            )
        } else {
            String::new()
        };
        let err = r.last_error.as_deref().unwrap_or("");
        s.push_str(&format!(
            "<tr>{check}<td><a href=\"{base}/jobs/{id}\">{id}</a></td><td>{state}{held}{lease}</td>\
             <td>{queue}</td><td>{kind}</td><td class=\"n\">{a} / {m}</td><td>{run}</td>\
             <td>{created}</td><td>{fin}</td><td class=\"err\" title=\"{errt}\">{err}</td></tr>",
            id = r.id,
            state = state_badge(&r.state),
            queue = esc(&r.queue),
            kind = esc(&r.kind),
            a = r.attempts,
            m = r.max_attempts,
            run = when(Some(r.run_at), r.now),
            created = when(Some(r.created_at), r.now),
            fin = when(r.finished_at, r.now),
            errt = esc(err),
            err = esc(&truncate(err, 80)),
        ));
    }
    s.push_str("</tbody></table>");
    s
}

/// How many of the newest jobs a payload search reads.
pub(crate) const SEARCH_SCOPE: i64 = 10_000;
/// The longest search text.
const SEARCH_MAX_CHARS: usize = 200;

/// The search page's query string.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SearchQuery {
    #[serde(default)]
    q: Option<String>,
}

/// `GET /search?q=`: a job id goes to that job's page; any other text (or an id no job has)
/// is looked for in the payloads of the newest [`SEARCH_SCOPE`] jobs, read backwards along
/// the primary key within the page's statement timeout.
pub(crate) async fn search(
    State(app): State<App>,
    Extension(v): Extension<Viewer>,
    Query(q): Query<SearchQuery>,
) -> Response {
    let text = q.q.as_deref().map(str::trim).unwrap_or("").to_owned();
    if text.chars().count() > SEARCH_MAX_CHARS {
        return bad_request(
            &app,
            &v,
            &format!("Search for at most {SEARCH_MAX_CHARS} characters."),
        );
    }
    let f = app.frame(&v);
    let top = search_form(&f, &text);
    if text.is_empty() {
        let body = format!(
            "<p class=\"note\">A job id opens that job; other text is looked for in the \
             payloads of the newest {} jobs.</p>",
            int(SEARCH_SCOPE)
        );
        return html_response(
            StatusCode::OK,
            html::page(&f, "Search", Nav::Jobs, &top, &body, false),
        );
    }
    let id = parse_id(&text);
    let limit = app.options.page_size;
    let read = async {
        let mut obj = db::conn(app.client.pool()).await?;
        let tx = db::begin(&mut obj, &app.sql, app.options.statement_timeout).await?;
        if let Some(id) = id {
            if app.sql.job_get(&tx, id, 0).await?.is_some() {
                return Ok(None);
            }
        }
        let lo = app.sql.job_scan_older(&tx, None, SEARCH_SCOPE).await?;
        let rows = app.sql.job_search(&tx, &text, lo, limit + 1).await?;
        Ok::<_, db::DbError>(Some((rows, lo)))
    };
    match read.await {
        Ok(None) => {
            axum::response::Redirect::to(&format!("{}/jobs/{}", v.base, id.unwrap_or_default()))
                .into_response()
        }
        Ok(Some((rows, lo))) => {
            let more = rows.len() as i64 > limit;
            let rows: Vec<ListRow> = rows
                .iter()
                .take(limit as usize)
                .map(ListRow::from)
                .collect();
            let mut body = String::new();
            if let Some(id) = id {
                body.push_str(&format!(
                    "<p class=\"notice warn\">There is no job {}; the payloads were searched \
                     for the text.</p>",
                    int(id)
                ));
            }
            let scope = match lo {
                Some(lo) => format!(
                    "searched the newest {} jobs (ids from {})",
                    int(SEARCH_SCOPE),
                    int(lo)
                ),
                None => format!(
                    "searched every job (there are fewer than {})",
                    int(SEARCH_SCOPE)
                ),
            };
            let found = if more {
                format!("The newest {} matches", int(limit))
            } else {
                format!(
                    "{} {}",
                    int(rows.len() as i64),
                    if rows.len() == 1 { "match" } else { "matches" }
                )
            };
            body.push_str(&format!(
                "<p class=\"summary\" id=\"search-summary\">{found} for <b>{}</b> in the \
                 payload (ignoring case): {scope}.</p>",
                esc(&text)
            ));
            if rows.is_empty() {
                body.push_str("<p class=\"empty\">No job's payload contains this text.</p>");
            } else {
                body.push_str(&jobs_table(&f, &rows, false));
            }
            html_response(
                StatusCode::OK,
                html::page(&f, "Search", Nav::Jobs, &top, &body, false),
            )
        }
        Err(e) => app.db_error(&v, &e),
    }
}

fn search_form(f: &Frame<'_>, text: &str) -> String {
    format!(
        "<form class=\"filters\" method=\"get\" action=\"{}/search\">\
         <label>Job id or payload text <input name=\"q\" value=\"{}\" size=\"40\" \
         id=\"search-text\"></label><button type=\"submit\">Search</button></form>",
        esc(f.base),
        esc(text)
    )
}

/// The bulk actions a state allows: each moves jobs out of that state, so that running it
/// again takes the next ones.
pub(crate) fn bulk_actions(state: &str) -> &'static [&'static str] {
    match state {
        "queued" | "available" | "scheduled" | "retrying" | "held" => &["cancel", "delete"],
        "running" => &["cancel"],
        "done" | "failed" | "cancelled" => &["retry", "delete"],
        _ => &[],
    }
}

fn bulk_bar(f: &Frame<'_>, filter: &Filter, count: Count) -> String {
    let Some(state) = filter.state.as_deref() else {
        return "<p class=\"note\">Choose a state to act on all the jobs a filter selects.</p>"
            .to_owned();
    };
    if count.value() == 0 {
        return String::new();
    }
    let links: Vec<String> = bulk_actions(state)
        .iter()
        .map(|a| {
            format!(
                "<a class=\"button {a}\" href=\"{}/bulk{}\">{} all…</a>",
                esc(f.base),
                filter_query(filter, &[("action", (*a).to_owned())]),
                title_case(a)
            )
        })
        .collect();
    format!(
        "<div class=\"bulk\"><span>Every job this filter selects:</span> {}</div>",
        links.join(" ")
    )
}

pub(crate) fn title_case(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// The tag of a held job: queued, waiting for its turn in its sequence (`held` is
/// `sequence`), or for the jobs it depends on (`after`).
fn held_tag(held: &str) -> &'static str {
    if held == "after" {
        "<span class=\"tag held after\" title=\"Queued, waiting for the jobs it depends on: it \
         becomes ready when they are all done\">for its parents</span>"
    } else {
        "<span class=\"tag held\" title=\"Queued, waiting for its turn in its sequence: it \
         becomes ready when the member before it finishes\">held</span>"
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n).collect();
        t.push('…');
        t
    }
}

/// The most failed attempts a job keeps in its history (migration 14 keeps the last 20).
const MAX_HISTORY: i64 = 20;
/// Each error of the history is cut at this many characters.
const ERROR_CHARS: i32 = 4_000;

/// One failed attempt of a job's history (any field the database holds in another shape is
/// `None`).
pub(crate) struct Attempt {
    attempt: Option<i64>,
    /// When it ended (epoch seconds).
    at: Option<f64>,
    ran_ms: Option<f64>,
    error: Option<String>,
}

impl From<&Row> for Attempt {
    fn from(r: &Row) -> Self {
        Attempt {
            attempt: r.get("attempt"),
            at: r.get("at"),
            ran_ms: r.get("ran_ms"),
            error: r.get("error"),
        }
    }
}

/// A duration in milliseconds, as precise as it is short: `850 ms`, `12.4 s`, `3 min`.
fn ran(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        "-".to_owned()
    } else if ms < 1_000.0 {
        format!("{} ms", ms.round())
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1_000.0)
    } else {
        html::span(ms / 1_000.0)
    }
}

/// The attempt history of a job's page: each failed attempt, when it ended, how long it ran
/// and its error; the last error alone for a job whose failures predate the history.
fn history(errors: &[Attempt], last_error: Option<&str>, now: f64) -> String {
    let mut s = String::from("<h2>Attempt history</h2>");
    if errors.is_empty() {
        s.push_str(if last_error.is_some() {
            "<p class=\"note\">No failed attempt in its history (kept from migration 14 on): \
             its last error is shown above.</p>"
        } else {
            "<p class=\"note\">No failed attempt.</p>"
        });
        return s;
    }
    s.push_str(
        "<table class=\"grid history\"><thead><tr><th>Attempt</th><th>Ended</th><th>Ran</th>\
         <th>Error</th></tr></thead><tbody>",
    );
    for a in errors {
        let dash = || "<span class=\"muted\">-</span>".to_owned();
        s.push_str(&format!(
            "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td>\
             <td><pre class=\"error\">{}</pre></td></tr>",
            a.attempt.map_or_else(dash, |n| n.to_string()),
            html::when(a.at, now),
            a.ran_ms.map_or_else(dash, ran),
            a.error.as_deref().map_or_else(dash, esc),
        ));
    }
    s.push_str("</tbody></table>");
    if errors.len() as i64 >= MAX_HISTORY {
        s.push_str(&format!(
            "<p class=\"note\">The last {MAX_HISTORY} failed attempts are kept.</p>"
        ));
    }
    s
}

/// The query string of a job page after an action.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ShowQuery {
    #[serde(default)]
    done: Option<String>,
    #[serde(default)]
    changed: Option<String>,
}

pub(crate) async fn show(
    State(app): State<App>,
    Extension(v): Extension<Viewer>,
    Path(id): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return bad_request(&app, &v, &format!("{id:?} is not a job id."));
    };
    let chars = app.options.payload_chars;
    let read = async {
        let mut obj = db::conn(app.client.pool()).await?;
        let tx = db::begin(&mut obj, &app.sql, app.options.statement_timeout).await?;
        let row = app.sql.job_get(&tx, id, chars).await?;
        // A job of a workflow: its parents and children, and its graph, in the same snapshot.
        let flow = match &row {
            Some(r) if workflow::takes_part(r) => {
                Some(workflow::read(&tx, &app.sql, id, app.options.count_limit).await?)
            }
            _ => None,
        };
        let errors = match &row {
            Some(_) => app
                .sql
                .job_errors(&tx, id, MAX_HISTORY, ERROR_CHARS)
                .await?
                .iter()
                .map(Attempt::from)
                .collect(),
            None => Vec::new(),
        };
        Ok::<_, db::DbError>((row, flow, errors))
    };
    let f = app.frame(&v);
    match read.await {
        Ok((row, flow, errors)) => match &row {
            Some(r) => html_response(
                StatusCode::OK,
                html::page(
                    &f,
                    &format!("Job {id}"),
                    Nav::Jobs,
                    "",
                    &job_body(&f, v.full, r, &q, chars, flow.as_ref(), &errors),
                    true,
                ),
            ),
            None => html_response(
                StatusCode::NOT_FOUND,
                html::message(&f, "Not found", &format!("There is no job {id}.")),
            ),
        },
        Err(e) => app.db_error(&v, &e),
    }
}

/// What an action did, for the notice on the job's page.
fn notice(q: &ShowQuery, status: &str) -> String {
    let (Some(action), Some(changed)) = (q.done.as_deref(), q.changed.as_deref()) else {
        return String::new();
    };
    let text = match (action, changed == "1") {
        ("retry", true) => "Retried: the job is queued again.".to_owned(),
        ("run", true) => "Due now: the next free worker of its queue takes it.".to_owned(),
        ("run", false) => format!(
            "Not moved ({status}): only a queued job that never ran and is due later can be \
             run now."
        ),
        ("cancel", true) => "Cancelled: the job is failed, 'cancelled'.".to_owned(),
        ("retry", false) => format!("Not retried ({status}): running jobs are left alone."),
        ("cancel", false) => {
            format!("Not cancelled ({status}): only queued or running jobs can be cancelled.")
        }
        ("delete", false) => {
            format!("Not deleted ({status}): running jobs cannot be deleted; cancel them first.")
        }
        _ => return String::new(),
    };
    let class = if changed == "1" { "ok" } else { "warn" };
    format!("<p class=\"notice {class}\">{}</p>", esc(&text))
}

fn job_body(
    f: &Frame<'_>,
    full: bool,
    r: &Row,
    q: &ShowQuery,
    chars: i32,
    flow: Option<&Workflow>,
    errors: &[Attempt],
) -> String {
    let base = esc(f.base);
    let id: i64 = r.get("id");
    let status: String = r.get("status");
    let display: String = r.get("state");
    let run_at: f64 = r.get("run_at");
    let finished_at: Option<f64> = r.get("finished_at");
    let attempted_at: Option<f64> = r.get("attempted_at");
    let now: f64 = r.get("now");
    let queue: String = r.get("queue");
    let kind: String = r.get("kind");
    let attempts: i32 = r.get("attempts");
    let max_attempts: i32 = r.get("max_attempts");
    let locked_until: Option<f64> = r.get("locked_until");
    let last_error: Option<String> = r.get("last_error");
    let payload: String = r.get("payload");
    let payload_bytes: i64 = r.get("payload_bytes");
    let key: Option<String> = r.get("key");
    let sequence: Option<String> = r.get("sequence");
    let held: Option<String> = r.get("held");
    let waits_for: Option<i64> = r.get("waits_for");
    let waits_for_status: Option<String> = r.get("waits_for_status");
    let output: Option<String> = r.get("output");
    let output_bytes: Option<i64> = r.get("output_bytes");
    let parents_total: i64 = r.get("parents_total");
    let parents_waiting: Option<i32> = r.get("waiting");
    let mut s = notice(q, &status);
    let none = || "<span class=\"muted\">-</span>".to_owned();
    // Held: queued, but waiting for its turn in its sequence, or for the jobs it depends on,
    // rather than for time.
    let is_held = status == "queued" && held.is_some();
    let held_kind = held.as_deref().unwrap_or("");
    let state = match (&sequence, is_held) {
        (Some(seq), true) => format!(
            "{} {} <span class=\"muted\">(waiting for its turn in sequence <b>{}</b>)</span>",
            state_badge(&display),
            held_tag(held_kind),
            esc(seq)
        ),
        (None, true) if held_kind == "after" => {
            let open = parents_waiting.unwrap_or(0);
            format!(
                "{} {} <span class=\"muted\">({} of the {} {} it depends on not done yet)</span>",
                state_badge(&display),
                held_tag(held_kind),
                int(i64::from(open)),
                int(parents_total),
                if parents_total == 1 { "job" } else { "jobs" }
            )
        }
        (None, true) => format!("{} {}", state_badge(&display), held_tag(held_kind)),
        _ if status == "failed" && held_kind == "after" => format!(
            "{} <span class=\"muted\">(a job it depends on did not finish: see the last \
             error)</span>",
            state_badge(&display)
        ),
        _ => state_badge(&display),
    };
    // How long it ran: its last attempt, from its claim (migration 14's attempted_at) to its
    // end, or to now while it runs.
    let run_time = match (status.as_str(), attempted_at, finished_at) {
        ("running", Some(a), _) => format!(
            "{} <span class=\"muted\">so far</span>",
            ran((now - a) * 1_000.0)
        ),
        ("done" | "failed", Some(a), Some(fin)) if fin >= a => format!(
            "{} <span class=\"muted\">(its last attempt)</span>",
            ran((fin - a) * 1_000.0)
        ),
        _ => none(),
    };
    let sequence_cell = match (&sequence, waits_for) {
        (None, _) => none(),
        (Some(seq), None) => esc(seq),
        (Some(seq), Some(before)) => format!(
            "{} <span class=\"muted\">· runs after job <a href=\"{base}/jobs/{before}\">{before}</a>{}</span>",
            esc(seq),
            waits_for_status
                .map(|st| format!(" ({})", esc(&st)))
                .unwrap_or_default()
        ),
    };
    let lease = match (status.as_str(), locked_until) {
        ("running", Some(t)) if t < now => {
            format!(
                "{} <span class=\"tag warn\">expired: the reaper will take it back</span>",
                when_full(Some(t), now)
            )
        }
        (_, t) => when_full(t, now),
    };
    let rows: [(&str, String); 15] = [
        ("State", state),
        (
            "Queue",
            format!(
                "<a href=\"{base}/jobs?queue={}\">{}</a>",
                url_value(&queue),
                esc(&queue)
            ),
        ),
        (
            "Kind",
            format!(
                "<a href=\"{base}/jobs?kind={}\">{}</a>",
                url_value(&kind),
                esc(&kind)
            ),
        ),
        ("Key", key.as_deref().map_or_else(none, esc)),
        ("Sequence", sequence_cell),
        ("Priority", r.get::<_, i16>("priority").to_string()),
        ("Attempts", format!("{attempts} of {max_attempts}")),
        ("Run at", when_full(Some(run_at), now)),
        ("Created", when_full(Some(r.get("created_at")), now)),
        ("Finished", when_full(finished_at, now)),
        ("Run time", run_time),
        ("Lease (locked until)", lease),
        ("Payload size", html::bytes(payload_bytes)),
        ("Output size", output_bytes.map_or_else(none, html::bytes)),
        (
            "Last error",
            match &last_error {
                Some(e) => format!("<pre class=\"error\">{}</pre>", esc(e)),
                None => none(),
            },
        ),
    ];
    s.push_str("<div class=\"cols\"><table class=\"kv\"><tbody>");
    for (k, val) in rows {
        s.push_str(&format!("<tr><th>{k}</th><td>{val}</td></tr>"));
    }
    s.push_str("</tbody></table><div class=\"side\">");
    let never_ran_due_later = status == "queued" && attempts == 0 && run_at > now;
    s.push_str(&actions(
        f,
        full,
        id,
        &status,
        is_held.then_some(held_kind),
        never_ran_due_later,
    ));
    s.push_str("</div></div>");
    s.push_str(&history(errors, last_error.as_deref(), now));
    if let Some(w) = flow {
        s.push_str(&workflow::section(
            f,
            id,
            &status,
            parents_total,
            parents_waiting,
            w,
        ));
    }
    s.push_str("<h2>Payload</h2>");
    s.push_str(&json_block("payload", &payload, chars));
    if let Some(out) = &output {
        s.push_str("<h2>Output</h2>");
        s.push_str(&json_block("payload output", out, chars));
    }
    s
}

/// Indented JSON in a `<pre>` (scrolling past its height), with a note when it was cut at
/// `chars` characters.
fn json_block(class: &str, text: &str, chars: i32) -> String {
    let mut s = format!("<pre class=\"{class}\">{}</pre>", esc(text));
    if text.chars().count() >= chars.max(0) as usize {
        s.push_str(&format!(
            "<p class=\"note\">Only the first {} characters are shown.</p>",
            int(i64::from(chars))
        ));
    }
    s
}

/// The buttons of a job's page; `held` is why a queued job is held, if it is; `run_now`
/// whether it never ran and is due later (Run now makes it due at once).
fn actions(
    f: &Frame<'_>,
    full: bool,
    id: i64,
    status: &str,
    held: Option<&str>,
    run_now: bool,
) -> String {
    if !full {
        return "<p class=\"note\">Read-only access: no actions.</p>".to_owned();
    }
    let base = esc(f.base);
    let mut s = String::from("<h2>Actions</h2><div class=\"actions\">");
    let form = |action: &str, label: &str, confirm: Option<&str>| {
        let c = confirm
            .map(|m| format!(" data-confirm=\"{}\"", esc(m)))
            .unwrap_or_default();
        format!(
            "<form method=\"post\" action=\"{base}/jobs/{id}/{action}\"{c}>\
             <button type=\"submit\" class=\"{action}\" id=\"action-{action}\">{label}</button></form>"
        )
    };
    if run_now {
        s.push_str(&form("run", "Run now", None));
    } else if status != "running" {
        s.push_str(&form("retry", "Retry now", None));
    }
    if status == "queued" || status == "running" {
        s.push_str(&form("cancel", "Cancel", None));
    }
    if status != "running" {
        s.push_str(&form(
            "delete",
            "Delete",
            Some(&format!("Delete job {id}? This cannot be undone.")),
        ));
    }
    if status == "running" {
        s.push_str("<p class=\"note\">A running job can be cancelled; it keeps its lease until its worker stops.</p>");
    }
    match held {
        Some("after") => s.push_str(
            "<p class=\"note\">A waiting job runs when the jobs it depends on are done: retrying \
             it moves its run time, not that.</p>",
        ),
        Some(_) => s.push_str(
            "<p class=\"note\">A held job runs when its turn in its sequence comes: retrying it \
             moves its run time, not its turn.</p>",
        ),
        None => {}
    }
    s.push_str("</div>");
    s
}
