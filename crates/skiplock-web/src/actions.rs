//! Retry, cancel and delete: for one job, and for the jobs a filter selects (after a confirm
//! page). Each goes through the library's [`Client::retry`](skiplock::Client::retry),
//! [`Client::cancel`](skiplock::Client::cancel) or [`Client::delete`](skiplock::Client::delete),
//! which lock and re-check every row, and each is logged with who did it.

use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use serde::Deserialize;
use skiplock::{AdminReport, JobId};

use crate::db::{self, Filter};
use crate::html::{self, esc, int, Count, Nav};
use crate::jobs::{bad_request, bulk_actions, filter_query, parse_filter, parse_id, title_case};
use crate::{html_response, App, Viewer};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Retry,
    Cancel,
    Delete,
}

impl Action {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "retry" => Action::Retry,
            "cancel" => Action::Cancel,
            "delete" => Action::Delete,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Cancel => "cancel",
            Action::Delete => "delete",
        }
    }

    fn past(self) -> &'static str {
        match self {
            Action::Retry => "retried",
            Action::Cancel => "cancelled",
            Action::Delete => "deleted",
        }
    }

    /// Why the library leaves a job alone (as the command says it).
    fn why(self) -> &'static str {
        match self {
            Action::Retry => "running jobs are left alone",
            Action::Cancel => "only queued or running jobs can be cancelled",
            Action::Delete => "running jobs cannot be deleted; cancel them first",
        }
    }

    async fn run(self, app: &App, ids: &[JobId]) -> skiplock::Result<AdminReport> {
        match self {
            Action::Retry => app.client.retry(ids).await,
            Action::Cancel => app.client.cancel(ids).await,
            Action::Delete => app.client.delete(ids).await,
        }
    }
}

fn action_failed(app: &App, v: &Viewer, action: Action, e: &skiplock::Error) -> Response {
    tracing::warn!(principal = %v.principal, action = action.name(), error = %e, "dashboard action failed");
    html_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        html::message(
            &app.frame(v),
            "Action failed",
            &format!("Could not {} the jobs: {e}", action.name()),
        ),
    )
}

/// `POST /jobs/{id}/{action}`: then back to the job's page (or to the list after a delete).
pub(crate) async fn single(
    State(app): State<App>,
    Extension(v): Extension<Viewer>,
    Path((id, action)): Path<(String, String)>,
) -> Response {
    if action == "run" {
        return run_now(&app, &v, &id).await;
    }
    let Some(action) = Action::parse(&action) else {
        return html_response(
            StatusCode::NOT_FOUND,
            html::message(&app.frame(&v), "Not found", "There is no such action."),
        );
    };
    let Some(id) = parse_id(&id) else {
        return bad_request(&app, &v, &format!("{id:?} is not a job id."));
    };
    let report = match action.run(&app, &[JobId(id)]).await {
        Ok(r) => r,
        Err(e) => return action_failed(&app, &v, action, &e),
    };
    let changed = !report.changed.is_empty();
    tracing::info!(
        principal = %v.principal,
        action = action.name(),
        job = id,
        changed,
        "dashboard action"
    );
    let to = if action == Action::Delete && changed {
        format!("{}/jobs?deleted={id}", v.base)
    } else {
        format!(
            "{}/jobs/{id}?done={}&changed={}",
            v.base,
            action.name(),
            u8::from(changed)
        )
    };
    Redirect::to(&to).into_response()
}

/// `POST /jobs/{id}/run`: a job that never ran and is due later becomes due now
/// (`job_run_now.sql`: only while it is still queued and never ran, so a concurrent claim is
/// left alone), then back to the job's page.
async fn run_now(app: &App, v: &Viewer, id: &str) -> Response {
    let Some(id) = parse_id(id) else {
        return bad_request(app, v, &format!("{id:?} is not a job id."));
    };
    let channel = app.client.schema().channel();
    let moved = async {
        let obj = db::conn(app.client.pool()).await?;
        let pg: &tokio_postgres::Client = &obj;
        app.sql.job_run_now(pg, id, channel).await
    };
    let moved = match moved.await {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(principal = %v.principal, action = "run", error = %e, "dashboard action failed");
            return html_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                html::message(
                    &app.frame(v),
                    "Action failed",
                    &format!("Could not run job {id} now: {e}"),
                ),
            );
        }
    };
    tracing::info!(principal = %v.principal, action = "run", job = id, changed = moved, "dashboard action");
    Redirect::to(&format!(
        "{}/jobs/{id}?done=run&changed={}",
        v.base,
        u8::from(moved)
    ))
    .into_response()
}

/// The ticked jobs of a list page and what to do with them: the `POST /selected` form.
#[derive(Debug, PartialEq, Eq)]
struct Selected {
    action: Action,
    ids: Vec<i64>,
    /// The list's filter, for the way back.
    filter: Filter,
}

/// Decodes a form value: `+` is a space, `%XX` a byte.
fn form_value(s: &str) -> Result<String, String> {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("The form is not well formed.")?;
                out.push(hex);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "The form is not well formed.".to_owned())
}

/// The `POST /selected` form (its `id` field repeats, once per ticked job): at least one id
/// and at most `limit`, each a job id, and one action.
fn parse_selected(body: &str, limit: i64) -> Result<Selected, String> {
    let (mut action, mut ids) = (None, Vec::new());
    let (mut state, mut queue, mut kind) = (None, None, None);
    for pair in body.split('&').filter(|p| !p.is_empty()) {
        let (k, val) = pair.split_once('=').unwrap_or((pair, ""));
        let val = form_value(val)?;
        match k {
            "id" => ids.push(parse_id(&val).ok_or_else(|| format!("{val:?} is not a job id."))?),
            "action" => {
                action =
                    Some(Action::parse(&val).ok_or("Choose an action: retry, cancel or delete.")?)
            }
            "state" => state = Some(val),
            "queue" => queue = Some(val),
            "kind" => kind = Some(val),
            _ => {}
        }
    }
    let action = action.ok_or("Choose an action: retry, cancel or delete.")?;
    let filter = parse_filter(state.as_deref(), queue.as_deref(), kind.as_deref())?;
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Err("Tick at least one job.".to_owned());
    }
    if ids.len() as i64 > limit {
        return Err(format!("Tick at most {} jobs at once.", int(limit)));
    }
    Ok(Selected {
        action,
        ids,
        filter,
    })
}

/// `POST /selected`: retry, cancel or delete the jobs ticked on a list page, through the
/// library as the other actions are, then a page that says what changed.
pub(crate) async fn selected(
    State(app): State<App>,
    Extension(v): Extension<Viewer>,
    body: String,
) -> Response {
    let Selected {
        action,
        ids,
        filter,
    } = match parse_selected(&body, app.options.bulk_limit) {
        Ok(s) => s,
        Err(e) => return bad_request(&app, &v, &e),
    };
    let jobs: Vec<JobId> = ids.iter().copied().map(JobId).collect();
    let report = match action.run(&app, &jobs).await {
        Ok(r) => r,
        Err(e) => return action_failed(&app, &v, action, &e),
    };
    tracing::info!(
        principal = %v.principal,
        action = action.name(),
        jobs = ?ids,
        changed = report.changed.len(),
        unchanged = report.unchanged.len(),
        "dashboard action on ticked jobs"
    );
    let n = ids.len() as i64;
    let mut body = format!(
        "<p class=\"notice ok\">{} {} of the {} ticked {}.</p>",
        title_case(action.past()),
        int(report.changed.len() as i64),
        int(n),
        if n == 1 { "job" } else { "jobs" }
    );
    if !report.unchanged.is_empty() {
        let list: Vec<String> = report
            .unchanged
            .iter()
            .map(|j| format!("<a href=\"{}/jobs/{}\">{}</a>", esc(&v.base), j.0, j.0))
            .collect();
        body.push_str(&format!(
            "<p class=\"notice warn\">{} left alone ({}): {}.</p>",
            int(report.unchanged.len() as i64),
            action.why(),
            list.join(", ")
        ));
    }
    body.push_str(&format!(
        "<p><a href=\"{}/jobs{}\" id=\"back-to-list\">Back to the list</a></p>",
        esc(&v.base),
        filter_query(&filter, &[])
    ));
    html_response(
        StatusCode::OK,
        html::page(
            &app.frame(&v),
            &format!("{} ticked jobs", title_case(action.name())),
            Nav::Jobs,
            "",
            &body,
            false,
        ),
    )
}

/// The confirm page's query string, and the bulk form's fields.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct BulkQuery {
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    queue: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    /// The newest id when the confirm page was shown (the form only).
    #[serde(default)]
    max_id: Option<String>,
    /// `yes` (the form only).
    #[serde(default)]
    confirm: Option<String>,
}

/// The action and filter of a bulk request, checked: a state is required, and the action
/// must be one that moves jobs out of it.
fn bulk_request(q: &BulkQuery) -> Result<(Action, Filter), String> {
    let filter = parse_filter(q.state.as_deref(), q.queue.as_deref(), q.kind.as_deref())?;
    let action = q
        .action
        .as_deref()
        .and_then(Action::parse)
        .ok_or("Choose an action: retry, cancel or delete.")?;
    let Some(state) = filter.state.as_deref() else {
        return Err("A bulk action needs a state filter.".to_owned());
    };
    if !bulk_actions(state).contains(&action.name()) {
        return Err(format!(
            "Jobs that are {state} cannot be {} in bulk.",
            action.past()
        ));
    }
    Ok((action, filter))
}

fn describe(filter: &Filter) -> String {
    let mut s = format!(
        "<b>{}</b> jobs",
        esc(filter.state.as_deref().unwrap_or("all"))
    );
    if let Some(q) = &filter.queue {
        s.push_str(&format!(" in queue <b>{}</b>", esc(q)));
    }
    if let Some(k) = &filter.kind {
        s.push_str(&format!(" of kind <b>{}</b>", esc(k)));
    }
    s
}

/// `GET /bulk`: what a bulk action would touch, and the form that does it.
pub(crate) async fn confirm(
    State(app): State<App>,
    Extension(v): Extension<Viewer>,
    Query(q): Query<BulkQuery>,
) -> Response {
    let (action, filter) = match bulk_request(&q) {
        Ok(x) => x,
        Err(e) => return bad_request(&app, &v, &e),
    };
    let cap = app.options.count_limit;
    let budget = app.options.scan_budget;
    let read = async {
        let mut obj = db::conn(app.client.pool()).await?;
        let tx = db::begin(&mut obj, &app.sql, app.options.statement_timeout).await?;
        let latest = app.sql.job_latest_id(&tx).await?.unwrap_or(0);
        // The same range as the action's selection: the scan budget below the newest id.
        let lo = db::bulk_floor(&tx, &app.sql, &filter, latest, budget).await?;
        let n = app.sql.job_count(&tx, &filter, cap, lo).await?;
        Ok::<_, db::DbError>((n, latest, lo))
    };
    let (n, latest, lo) = match read.await {
        Ok(x) => x,
        Err(e) => return app.db_error(&v, &e),
    };
    let f = app.frame(&v);
    let count = if n >= cap {
        Count::AtLeast(n)
    } else if lo.is_some() {
        Count::Among(n, budget)
    } else {
        Count::Exact(n)
    };
    let limit = app.options.bulk_limit;
    let back = format!("{}/jobs{}", esc(&v.base), filter_query(&filter, &[]));
    let mut body = format!(
        "<p>{} {} match{}: {}.</p>",
        count.html(),
        if n == 1 { "job" } else { "jobs" },
        if n == 1 { "es" } else { "" },
        describe(&filter)
    );
    if let Some(lo) = lo {
        body.push_str(&format!(
            "<p class=\"note scan\">Among the newest {} jobs only (ids {} to {}): this filter has \
             no index, so the action reads at most that many. Older jobs are left alone.</p>",
            int(budget),
            int(lo),
            int(latest)
        ));
    }
    if n == 0 {
        body.push_str(&format!("<p><a href=\"{back}\">Back to the list</a></p>"));
    } else {
        if n > limit {
            body.push_str(&format!(
                "<p class=\"note\">One run {} at most {} of them, oldest first; run it again for \
                 the next ones.</p>",
                action.past(),
                int(limit)
            ));
        }
        let hidden = |k: &str, val: &Option<String>| match val {
            Some(val) => format!(
                "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
                esc(val)
            ),
            None => String::new(),
        };
        body.push_str(&format!(
            "<form method=\"post\" action=\"{base}/bulk\" class=\"confirm\">\
             <input type=\"hidden\" name=\"action\" value=\"{a}\">{s}{qq}{k}\
             <input type=\"hidden\" name=\"max_id\" value=\"{latest}\">\
             <input type=\"hidden\" name=\"confirm\" value=\"yes\">\
             <p>Jobs added after this page was shown (id above {latest_s}) are left alone.</p>\
             <button type=\"submit\" class=\"{a}\" id=\"confirm-bulk\">{label} {what}</button> \
             <a href=\"{back}\">Cancel</a></form>",
            base = esc(&v.base),
            a = action.name(),
            s = hidden("state", &filter.state),
            qq = hidden("queue", &filter.queue),
            k = hidden("kind", &filter.kind),
            latest_s = int(latest),
            label = title_case(action.name()),
            what = if n > limit {
                format!("the first {}", int(limit))
            } else {
                format!("{} {}", int(n), if n == 1 { "job" } else { "jobs" })
            },
        ));
    }
    html_response(
        StatusCode::OK,
        html::page(
            &f,
            &format!("{} jobs in bulk", title_case(action.name())),
            Nav::Jobs,
            "",
            &body,
            false,
        ),
    )
}

/// `POST /bulk`: the confirmed bulk action.
pub(crate) async fn bulk(
    State(app): State<App>,
    Extension(v): Extension<Viewer>,
    Form(q): Form<BulkQuery>,
) -> Response {
    let (action, filter) = match bulk_request(&q) {
        Ok(x) => x,
        Err(e) => return bad_request(&app, &v, &e),
    };
    if q.confirm.as_deref() != Some("yes") {
        return bad_request(
            &app,
            &v,
            "A bulk action must be confirmed on its confirm page.",
        );
    }
    let Some(max_id) = q
        .max_id
        .as_deref()
        .and_then(|s| s.trim().parse::<i64>().ok())
    else {
        return bad_request(&app, &v, "The confirm page's newest id is missing.");
    };
    let limit = app.options.bulk_limit;
    let budget = app.options.scan_budget;
    let read = async {
        let mut obj = db::conn(app.client.pool()).await?;
        let tx = db::begin(&mut obj, &app.sql, app.options.statement_timeout).await?;
        // A filter no index serves reads the scan budget below the confirmed id, as the
        // confirm page counted.
        let lo = db::bulk_floor(&tx, &app.sql, &filter, max_id, budget).await?;
        let ids = app
            .sql
            .job_select_ids(&tx, &filter, max_id, limit, lo)
            .await?
            .into_iter()
            .map(JobId)
            .collect::<Vec<_>>();
        Ok::<_, db::DbError>((ids, lo))
    };
    let (ids, lo) = match read.await {
        Ok(x) => x,
        Err(e) => return app.db_error(&v, &e),
    };
    let report = match action.run(&app, &ids).await {
        Ok(r) => r,
        Err(e) => return action_failed(&app, &v, action, &e),
    };
    tracing::info!(
        principal = %v.principal,
        action = action.name(),
        state = filter.state.as_deref().unwrap_or(""),
        queue = filter.queue.as_deref().unwrap_or(""),
        kind = filter.kind.as_deref().unwrap_or(""),
        max_id,
        scanned_from = lo,
        selected = ids.len(),
        changed = report.changed.len(),
        unchanged = report.unchanged.len(),
        "dashboard bulk action"
    );
    let f = app.frame(&v);
    let mut body = format!(
        "<p class=\"notice ok\">{} {} of {}.</p>",
        title_case(action.past()),
        int(report.changed.len() as i64),
        describe(&filter)
    );
    if !report.unchanged.is_empty() {
        body.push_str(&format!(
            "<p class=\"notice warn\">{} left alone: they changed state meanwhile ({}).</p>",
            int(report.unchanged.len() as i64),
            action.why()
        ));
    }
    if let Some(lo) = lo {
        body.push_str(&format!(
            "<p class=\"note scan\">Among the {} jobs with ids {} to {} only: this filter has no \
             index, so the action reads at most that many.</p>",
            int(budget),
            int(lo),
            int(max_id)
        ));
    }
    let back = format!("{}/jobs{}", esc(&v.base), filter_query(&filter, &[]));
    if ids.len() as i64 >= limit {
        let again = format!(
            "{}/bulk{}",
            esc(&v.base),
            filter_query(&filter, &[("action", action.name().to_owned())])
        );
        body.push_str(&format!(
            "<p>More may match: <a href=\"{again}\">{} the next ones…</a></p>",
            title_case(action.name())
        ));
    }
    body.push_str(&format!("<p><a href=\"{back}\">Back to the list</a></p>"));
    html_response(
        StatusCode::OK,
        html::page(
            &f,
            &format!("{} jobs in bulk", title_case(action.name())),
            Nav::Jobs,
            "",
            &body,
            false,
        ),
    )
}

fn control_failed(app: &App, v: &Viewer, what: &str, e: &skiplock::Error) -> Response {
    tracing::warn!(principal = %v.principal, action = what, error = %e, "dashboard action failed");
    html_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        html::message(
            &app.frame(v),
            "Action failed",
            &format!("Could not {what}: {e}"),
        ),
    )
}

fn no_such_action(app: &App, v: &Viewer) -> Response {
    html_response(
        StatusCode::NOT_FOUND,
        html::message(&app.frame(v), "Not found", "There is no such action."),
    )
}

/// `POST /queues/{name}/{pause|resume}`: through [`Client::pause_queue`](skiplock::Client::pause_queue)
/// (with the principal as who paused) or [`Client::resume_queue`](skiplock::Client::resume_queue),
/// then back to the queues page.
pub(crate) async fn queue(
    State(app): State<App>,
    Extension(v): Extension<Viewer>,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    let result = match action.as_str() {
        "pause" => app.client.pause_queue(&name, Some(&v.principal)).await,
        "resume" => app.client.resume_queue(&name).await,
        _ => return no_such_action(&app, &v),
    };
    if let Err(e) = result {
        return control_failed(&app, &v, &format!("{action} the queue"), &e);
    }
    tracing::info!(principal = %v.principal, action = %action, queue = %name, "dashboard queue action");
    Redirect::to(&format!("{}/", v.base)).into_response()
}

/// `POST /schedules/{name}/{run|pause|resume}`: through
/// [`Client::run_schedule_now`](skiplock::Client::run_schedule_now),
/// [`Client::pause_schedule`](skiplock::Client::pause_schedule) or
/// [`Client::resume_schedule`](skiplock::Client::resume_schedule), then back to the queues page.
pub(crate) async fn schedule(
    State(app): State<App>,
    Extension(v): Extension<Viewer>,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    let result = match action.as_str() {
        "run" => app
            .client
            .run_schedule_now(&name)
            .await
            .map(|j| j.is_some()),
        "pause" => app.client.pause_schedule(&name).await,
        "resume" => app.client.resume_schedule(&name).await,
        _ => return no_such_action(&app, &v),
    };
    let changed = match result {
        Ok(c) => c,
        Err(e) => return control_failed(&app, &v, &format!("{action} the schedule"), &e),
    };
    tracing::info!(
        principal = %v.principal,
        action = %action,
        schedule = %name,
        changed,
        "dashboard schedule action"
    );
    Redirect::to(&format!("{}/", v.base)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ticked_jobs_form_is_read_strictly() {
        let s = parse_selected(
            "state=failed&kind=build%3Apdf&id=7&id=3&id=7&action=retry",
            10,
        )
        .unwrap();
        assert_eq!(s.action, Action::Retry);
        assert_eq!(s.ids, [3, 7]);
        assert_eq!(s.filter.kind.as_deref(), Some("build:pdf"));
        for (bad, why) in [
            ("action=retry", "Tick at least one job."),
            ("id=1", "Choose an action"),
            ("id=1&action=explode", "Choose an action"),
            ("id=x1&action=retry", "is not a job id"),
            ("id=-4&action=retry", "is not a job id"),
            ("id=1&action=retry&state=nope", "is not a job state"),
            ("id=%zz&action=retry", "not well formed"),
            ("id=1&id=2&id=3&action=cancel", "at most 2 jobs"),
        ] {
            let e = parse_selected(bad, 2).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
