//! The per-test bundle: a migrated schema, a client on it, a plain connection, and helpers
//! that call the router as a browser would.

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::Router;
use skiplock::{Client, JobId};
use skiplock_testdb::TestDb;
use skiplock_web::{Access, Dashboard};
use tower::ServiceExt as _;

pub struct Bundle {
    pub db: TestDb,
    pub client: Client,
    /// A plain connection whose search_path is the test schema.
    pub raw: tokio_postgres::Client,
}

pub async fn setup() -> Bundle {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
    let db = TestDb::new().await;
    let url = db.url().to_owned();
    on(db, &url).await
}

/// A bundle on `db`'s schema whose client connects through `url` (the server's, or a
/// pooler's in front of it); the plain connection goes to the server.
pub async fn on(db: TestDb, url: &str) -> Bundle {
    let client = Client::builder(url)
        .schema(db.schema())
        .pool_size(4)
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let raw = db.connect().await.unwrap();
    raw.batch_execute(&format!("SET search_path TO \"{}\"", db.schema()))
        .await
        .unwrap();
    Bundle { db, client, raw }
}

impl Bundle {
    /// A dashboard on the test schema where every request has `access`.
    pub fn dashboard(&self, access: Access) -> Dashboard {
        Dashboard::new(
            self.client.clone(),
            move |_: &axum::http::request::Parts| access.clone(),
        )
    }

    /// The router with full access for "tester".
    pub fn router(&self) -> Router {
        self.dashboard(Access::full("tester")).router()
    }

    /// Adds a job in `status` (finished ones get finished_at, failed ones an error) and
    /// returns its id.
    pub async fn add(&self, queue: &str, kind: &str, status: &str) -> i64 {
        self.raw
            .query_one(
                "INSERT INTO jobs (queue, kind, payload, status, attempts, finished_at, \
                 last_error, locked_until) \
                 VALUES ($1, $2, '{\"n\": 1}', $3, \
                         CASE WHEN $3 = 'queued' THEN 0 ELSE 1 END, \
                         CASE WHEN $3 IN ('done', 'failed') THEN now() END, \
                         CASE WHEN $3 = 'failed' THEN 'boom' END, \
                         CASE WHEN $3 = 'running' THEN now() + interval '5 minutes' END) \
                 RETURNING id",
                &[&queue, &kind, &status],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Adds `n` jobs at once.
    pub async fn add_many(&self, n: i64, queue: &str, kind: &str, status: &str) -> Vec<i64> {
        self.raw
            .query(
                "INSERT INTO jobs (queue, kind, payload, status, attempts, finished_at, last_error) \
                 SELECT $1, $2, jsonb_build_object('i', i), $3, \
                        CASE WHEN $3 = 'queued' THEN 0 ELSE 1 END, \
                        CASE WHEN $3 IN ('done', 'failed') THEN now() END, \
                        CASE WHEN $3 = 'failed' THEN 'boom ' || i END \
                 FROM generate_series(1, $4::int8) i RETURNING id",
                &[&queue, &kind, &status, &n],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    pub async fn status(&self, id: i64) -> Option<String> {
        self.raw
            .query_opt("SELECT status FROM jobs WHERE id = $1", &[&id])
            .await
            .unwrap()
            .map(|r| r.get(0))
    }

    pub async fn job(&self, id: i64) -> skiplock::JobRow {
        self.client.get(JobId(id)).await.unwrap().unwrap()
    }
}

/// The answer to one request.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

pub async fn send(router: &Router, req: Request<Body>) -> Reply {
    let res = router.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .unwrap();
    Reply {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

pub async fn get(router: &Router, path: &str) -> Reply {
    send(router, Request::get(path).body(Body::empty()).unwrap()).await
}

/// A form POST as a browser sends it from a page of the dashboard.
pub async fn post(router: &Router, path: &str, form: &str) -> Reply {
    post_with(router, path, form, &[("sec-fetch-site", "same-origin")]).await
}

pub async fn post_with(router: &Router, path: &str, form: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = Request::post(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::HOST, "127.0.0.1:8080");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(router, req.body(Body::from(form.to_owned())).unwrap()).await
}

/// The target of the link with `rel="..."`, HTML entities undone.
pub fn link(body: &str, rel: &str) -> Option<String> {
    let marker = format!("\" rel=\"{rel}\"");
    let end = body.find(&marker)?;
    let start = body[..end].rfind("href=\"")? + "href=\"".len();
    Some(body[start..end].replace("&amp;", "&"))
}

/// The job ids of a job list page, in page order.
pub fn ids(body: &str) -> Vec<i64> {
    let mut out = Vec::new();
    let table = match body.find("<table class=\"grid jobs\">") {
        Some(i) => &body[i..],
        None => return out,
    };
    let table = &table[..table.find("</table>").unwrap_or(table.len())];
    // Each body row's first link is to its job (after the row's checkbox, if any).
    for row in table.split("<tr>").skip(2) {
        let link = &row[row.find("<a href=\"").unwrap()..];
        let after = &link[link.find("\">").unwrap() + 2..];
        out.push(after[..after.find('<').unwrap()].parse().unwrap());
    }
    out
}
