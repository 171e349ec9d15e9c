//! A web dashboard for [skiplock]: an [`axum::Router`] that an application mounts
//! under a path of its own and behind its own authentication.
//!
//! Pages: the queues (counts per state, held jobs, jobs finished in the last minute, the
//! oldest ready job's age, running jobs against the concurrency limit, scheduled and retrying
//! jobs, the live workers serving each queue; for limited queues their limits, why their jobs
//! wait, the keys at their per-key limit and the sequences with held jobs), one queue (its
//! pause, its workers, and its last hour drawn from the per-minute rollup of migration 14:
//! throughput and depth, as inline SVG, with gaps where a minute has no sample), the job list
//! (filtered by state, queue and kind, paginated by id), one job (payload, output, attempts,
//! times, run time, key and sequence, last error and attempt history, lease; for a job of a
//! workflow, the jobs it waits for and those that wait for it, and a graph of its workflow),
//! the workers (running, sleeping or gone) and the database's health (dead rows and vacuum
//! times of the jobs table, sessions holding back vacuum, the notification queue). A search box
//! on every page opens a job by id or looks for text in the payloads of the newest
//! 10,000 jobs. Pages refresh themselves every 2 s while the browser tab is visible.
//!
//! Job states are the display states of `skiplock jobs`, derived by the same SQL expression
//! (tested by `tests/it/operator.rs`
//! `display_states_agree_with_skiplock_jobs_and_filter_the_list`): available, scheduled,
//! retrying and waiting (held) refine `queued`, and a failed job cancelled by an operator is
//! cancelled; the list filters on each of them.
//!
//! Actions: retry, cancel and delete, for one job, for the jobs ticked on a list page
//! (`ticked_jobs_are_retried_cancelled_or_deleted_through_the_guard`), or, after a confirm
//! page, for the jobs a filter selects; Run now for a queued job that never ran and is due
//! later (it becomes due at once and its queue's workers are woken; a claim that took it
//! meanwhile is left alone:
//! `run_now_moves_only_a_queued_job_that_never_ran_and_leaves_a_claim_alone`); pause and
//! resume a queue (a paused queue's list and page say by whom and since when:
//! `a_paused_queue_says_so_on_its_list_and_its_page`); run, pause and resume a schedule.
//!
//! A worker is running when seen within its own heartbeat interval plus a grace of as much
//! again (at least 2 s), sleeping when its poll is off and it is silent (it writes nothing
//! while idle), and gone when it stopped or, with its poll on, was silent for longer: the
//! states of `skiplock workers`, by the same expression. Gone workers are listed apart, for 24
//! hours
//! (`workers_are_running_sleeping_or_gone_by_their_own_heartbeat`).
//!
//! ```no_run
//! use axum::{http::request::Parts, Router};
//! use skiplock_web::{Access, Dashboard};
//!
//! # fn app(client: skiplock::Client) -> Router {
//! // Your authentication layer runs first and leaves the user in the request extensions;
//! // the hook decides what that user may do here.
//! #[derive(Clone)]
//! struct User { name: String, admin: bool }
//!
//! let dashboard = Dashboard::new(client, |req: &Parts| match req.extensions.get::<User>() {
//!     Some(u) if u.admin => Access::full(&u.name),
//!     Some(u) => Access::read_only(&u.name),
//!     None => Access::Forbidden,
//! });
//! Router::new().nest("/admin/jobs", dashboard.router())
//! # }
//! ```
//!
//! # Cost on large tables
//!
//! Every page reads in one read-only transaction with its own statement timeout
//! ([`Dashboard::statement_timeout`], 3 s by default), and every statement has a `LIMIT`.
//! Counts stop at [`Dashboard::count_limit`] (10,000 by default) and show as `10,000+`. Each
//! queue's done, failed and last-minute counts are exact up to it, read through the index of
//! finished jobs (the library's migration 10); past it, a done or failed count is an estimate
//! from a sample of the table's pages, marked `≈` and never below the limit. A
//! filter that no index serves (done or failed jobs, a queue or a kind) reads at most
//! [`Dashboard::scan_budget`] jobs (50,000 by default) per statement, by id from the page's
//! position: the page says how far it searched and links to the next stretch, and its count
//! covers the newest jobs only. The statements are in the crate's `queries/` folder, one file
//! per statement.
//!
//! # Cross-site requests
//!
//! Actions are `POST` forms, and a `POST` that a browser marks as coming from another site is
//! refused: the request must carry `Sec-Fetch-Site: same-origin` (or `none`), or, from a
//! browser that does not send that header, an `Origin` whose host is the request's `Host` (or
//! one given with [`Dashboard::trusted_origin`]). Requests with neither header do not come
//! from a browser and cannot be forged by a web page; they pass (your authentication still
//! applies). Pages are sent with a `Content-Security-Policy` that forbids framing.
#![warn(missing_docs)]

mod actions;
mod chart;
mod db;
mod guard;
mod health;
mod html;
mod jobs;
mod queues;
mod workers;
mod workflow;

use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use skiplock::Client;

use crate::db::{DbError, Sql};
use crate::html::Frame;

/// What a request may do on the dashboard, and who makes it (the name goes into the log of
/// every action).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// See every page and retry, cancel or delete jobs.
    Full {
        /// Who it is.
        principal: String,
    },
    /// See every page; no action.
    ReadOnly {
        /// Who it is.
        principal: String,
    },
    /// Nothing: every request is answered `403 Forbidden`.
    Forbidden,
}

impl Access {
    /// [`Access::Full`] for `principal`.
    pub fn full(principal: impl Into<String>) -> Self {
        Access::Full {
            principal: principal.into(),
        }
    }

    /// [`Access::ReadOnly`] for `principal`.
    pub fn read_only(principal: impl Into<String>) -> Self {
        Access::ReadOnly {
            principal: principal.into(),
        }
    }
}

/// Decides, for each request, what it may do. Implemented for closures
/// `Fn(&Parts) -> Access`.
///
/// It sees the request's method, URI, headers and extensions: an authentication layer of the
/// application that runs before the dashboard can leave the user there.
pub trait Authorize: Send + Sync + 'static {
    /// The access of this request.
    fn authorize(&self, request: &Parts) -> Access;
}

impl<F> Authorize for F
where
    F: Fn(&Parts) -> Access + Send + Sync + 'static,
{
    fn authorize(&self, request: &Parts) -> Access {
        self(request)
    }
}

/// Builds the dashboard's [`Router`]. Every setting has a default; out-of-range values are
/// brought into range (see each).
#[must_use]
pub struct Dashboard {
    client: Client,
    authorize: Arc<dyn Authorize>,
    options: Options,
}

#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) read_only: bool,
    pub(crate) statement_timeout: Duration,
    pub(crate) count_limit: i64,
    pub(crate) scan_budget: i64,
    pub(crate) page_size: i64,
    pub(crate) bulk_limit: i64,
    pub(crate) refresh: Option<Duration>,
    pub(crate) trusted_origins: Vec<String>,
    pub(crate) max_queues: i64,
    pub(crate) payload_chars: i32,
    pub(crate) blocker_age: Duration,
}

impl Dashboard {
    /// The default statement timeout of a page's reads.
    pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(3);
    /// The default count beyond which counting stops.
    pub const DEFAULT_COUNT_LIMIT: u32 = 10_000;
    /// The default number of jobs a filter that no index serves reads per statement.
    pub const DEFAULT_SCAN_BUDGET: u32 = 50_000;
    /// The default number of jobs on a page of the job list.
    pub const DEFAULT_PAGE_SIZE: u32 = 50;
    /// The default number of jobs one bulk action changes at most.
    pub const DEFAULT_BULK_LIMIT: u32 = 1_000;
    /// The default polling interval of a visible page.
    pub const DEFAULT_REFRESH: Duration = Duration::from_secs(2);

    /// A dashboard on `client`'s database and schema; `authorize` decides what each request
    /// may do.
    pub fn new(client: Client, authorize: impl Authorize) -> Self {
        Dashboard {
            client,
            authorize: Arc::new(authorize),
            options: Options {
                read_only: false,
                statement_timeout: Self::DEFAULT_STATEMENT_TIMEOUT,
                count_limit: i64::from(Self::DEFAULT_COUNT_LIMIT),
                scan_budget: i64::from(Self::DEFAULT_SCAN_BUDGET),
                page_size: i64::from(Self::DEFAULT_PAGE_SIZE),
                bulk_limit: i64::from(Self::DEFAULT_BULK_LIMIT),
                refresh: Some(Self::DEFAULT_REFRESH),
                trusted_origins: Vec::new(),
                max_queues: 500,
                payload_chars: 64 * 1024,
                blocker_age: skiplock::health::DEFAULT_BLOCKER_AGE,
            },
        }
    }

    /// With `true`, nobody may act, whatever the hook says (default `false`).
    pub fn read_only(mut self, yes: bool) -> Self {
        self.options.read_only = yes;
        self
    }

    /// The statement timeout of every read (default 3 s; at least 10 ms). A page whose read
    /// takes longer shows an error that says so instead of loading the database.
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.options.statement_timeout = timeout.max(Duration::from_millis(10));
        self
    }

    /// Counting stops at this many rows and shows `N+` (default 10,000; at least 100).
    pub fn count_limit(mut self, n: u32) -> Self {
        self.options.count_limit = i64::from(n.max(100));
        self
    }

    /// The most jobs one statement reads for a filter that no index serves (default 50,000;
    /// at least 10): done or failed jobs, or a queue or kind without a queued or running
    /// state. Such a list page reads at most this many jobs by id from its position and, when
    /// it finds fewer matches than a page, says how far it searched and links to the next
    /// stretch; its count covers the newest this many jobs (`≥ n`), and a bulk action acts
    /// on the matches among them. Queued and running jobs (through their indexes) and the
    /// unfiltered list are exact whatever the budget.
    pub fn scan_budget(mut self, n: u32) -> Self {
        self.options.scan_budget = i64::from(n.max(10));
        self
    }

    /// Jobs per page of the job list (default 50; 1 to 1,000).
    pub fn page_size(mut self, n: u32) -> Self {
        self.options.page_size = i64::from(n.clamp(1, 1_000));
        self
    }

    /// The most jobs one bulk action changes (default 1,000; 1 to 10,000): run it again for
    /// the next ones.
    pub fn bulk_limit(mut self, n: u32) -> Self {
        self.options.bulk_limit = i64::from(n.clamp(1, 10_000));
        self
    }

    /// How often a visible page polls for fresh figures (default 2 s, at least 500 ms);
    /// `None` never.
    pub fn refresh(mut self, every: Option<Duration>) -> Self {
        self.options.refresh = every.map(|d| d.max(Duration::from_millis(500)));
        self
    }

    /// Accept actions from pages served at this origin (`https://admin.example.com`), for a
    /// proxy that rewrites the `Host` header; only browsers that do not send
    /// `Sec-Fetch-Site` need it.
    pub fn trusted_origin(mut self, origin: impl Into<String>) -> Self {
        self.options
            .trusted_origins
            .push(origin.into().trim_end_matches('/').to_ascii_lowercase());
        self
    }

    /// The router: mount it with [`Router::nest`] (or serve it as it is). It carries its
    /// own state, and answers every path below its mount point.
    pub fn router(self) -> Router {
        let state = App(Arc::new(Inner {
            estimates: std::sync::Mutex::new(None),
            sql: Sql::new(self.client.schema()),
            client: self.client,
            authorize: self.authorize,
            options: self.options,
        }));
        Router::new()
            .route("/", get(queues::page))
            .route("/jobs", get(jobs::list))
            .route("/jobs/{id}", get(jobs::show))
            .route("/jobs/{id}/{action}", post(actions::single))
            .route("/bulk", get(actions::confirm).post(actions::bulk))
            .route("/selected", post(actions::selected))
            .route("/search", get(jobs::search))
            .route("/workers", get(workers::page))
            .route("/queues/{name}", get(queues::queue_page))
            .route("/queues/{name}/{action}", post(actions::queue))
            .route("/schedules/{name}/{action}", post(actions::schedule))
            .route("/health", get(health::page))
            .route("/assets/dashboard.css", get(css))
            .route("/assets/dashboard.js", get(js))
            .fallback(not_found)
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                guard::guard,
            ))
            .with_state(state)
    }
}

/// The router's state.
#[derive(Clone)]
pub(crate) struct App(Arc<Inner>);

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) sql: Sql,
    pub(crate) authorize: Arc<dyn Authorize>,
    pub(crate) options: Options,
    /// The estimates of finished counts past the count limit, and when they were read.
    pub(crate) estimates: std::sync::Mutex<Option<queues::Estimates>>,
}

impl std::ops::Deref for App {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

/// Who is looking, put in the request's extensions by the guard.
#[derive(Debug, Clone)]
pub(crate) struct Viewer {
    pub(crate) principal: String,
    /// May act.
    pub(crate) full: bool,
    /// Where the dashboard is mounted (no trailing slash).
    pub(crate) base: String,
}

impl App {
    pub(crate) fn frame<'a>(&'a self, v: &'a Viewer) -> Frame<'a> {
        Frame {
            base: &v.base,
            principal: &v.principal,
            read_only: !v.full,
            refresh_ms: self
                .options
                .refresh
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            schema: self.client.schema().name(),
        }
    }

    /// The page for a failed read.
    pub(crate) fn db_error(&self, v: &Viewer, e: &DbError) -> Response {
        let (status, text) = if e.is_timeout() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "This page's query took longer than the dashboard's statement timeout ({} ms) \
                     and was cancelled. Narrow the filter, or raise the timeout.",
                    self.options.statement_timeout.as_millis()
                ),
            )
        } else {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Database error: {e}"),
            )
        };
        tracing::warn!(error = %e, "dashboard read failed");
        html_response(status, html::message(&self.frame(v), "Error", &text))
    }
}

/// An HTML response that no cache keeps.
pub(crate) fn html_response(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

async fn not_found(
    axum::extract::State(app): axum::extract::State<App>,
    axum::Extension(v): axum::Extension<Viewer>,
) -> Response {
    html_response(
        StatusCode::NOT_FOUND,
        html::message(&app.frame(&v), "Not found", "There is no such page."),
    )
}

async fn css() -> Response {
    asset(
        "text/css; charset=utf-8",
        include_str!("../assets/dashboard.css"),
    )
}

async fn js() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("../assets/dashboard.js"),
    )
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}
