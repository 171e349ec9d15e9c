//! A web-style app with background jobs: `POST /signup` inserts a user and enqueues a
//! welcome email *in the same transaction*, and a worker in the same process sends it.
//!
//! ```sh
//! export DATABASE_URL=$(cargo run -q -p skiplock-cli -- pg url)
//! cargo run --example signup                    # serves on 127.0.0.1:3000 until Ctrl-C
//! curl -X POST localhost:3000/signup -H 'content-type: application/json' -d '{"email":"a@example.com"}'
//! curl localhost:3000/users
//! cargo run --example signup -- --self-test     # signs up 20 users over HTTP, waits, exits
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use skiplock::reexports::deadpool_postgres::{Config, Pool, Runtime};
use skiplock::{Client, Job, JobContext, JobError, NewJob, Registry, Worker};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const APP_SCHEMA: &str = "CREATE SCHEMA IF NOT EXISTS signup_app;
CREATE TABLE IF NOT EXISTS signup_app.users (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  email       text NOT NULL UNIQUE,
  welcomed_at timestamptz
)";

/// The background job: its payload is this struct.
#[derive(Serialize, Deserialize)]
struct WelcomeEmail {
    user_id: i64,
}

impl Job for WelcomeEmail {
    const KIND: &'static str = "welcome_email";
    const QUEUE: &'static str = "emails";

    async fn run(self, ctx: JobContext) -> Result<(), JobError> {
        // "Send" the email; then record it. Idempotent: a second run changes nothing.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let conn = ctx.client().pool().get().await?;
        conn.execute(
            "UPDATE signup_app.users SET welcomed_at = coalesce(welcomed_at, now()) WHERE id = $1",
            &[&self.user_id],
        )
        .await?;
        Ok(())
    }
}

#[derive(Clone)]
struct App {
    pool: Pool,
    queue: Client,
}

#[derive(Deserialize)]
struct Signup {
    email: String,
}

#[derive(Serialize)]
struct User {
    id: i64,
    email: String,
    welcomed: bool,
}

async fn signup(
    State(app): State<App>,
    Json(req): Json<Signup>,
) -> Result<Json<User>, (StatusCode, String)> {
    let fail = |e: &dyn std::fmt::Display| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let mut conn = app.pool.get().await.map_err(|e| fail(&e))?;
    let tx = conn.transaction().await.map_err(|e| fail(&e))?;
    let row = tx
        .query_one(
            "INSERT INTO signup_app.users (email) VALUES ($1) RETURNING id",
            &[&req.email],
        )
        .await
        .map_err(|e| match e.as_db_error() {
            Some(db) => (StatusCode::CONFLICT, db.message().to_owned()),
            None => fail(&e),
        })?;
    let id: i64 = row.get(0);
    // The job exists (and the worker is woken) only if this transaction commits.
    app.queue
        .enqueue_tx(&tx, &NewJob::of(&WelcomeEmail { user_id: id }))
        .await
        .map_err(|e| fail(&e))?;
    tx.commit().await.map_err(|e| fail(&e))?;
    Ok(Json(User {
        id,
        email: req.email,
        welcomed: false,
    }))
}

async fn users(State(app): State<App>) -> Result<Json<Vec<User>>, (StatusCode, String)> {
    let conn = app
        .pool
        .get()
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let rows = conn
        .query(
            "SELECT id, email, welcomed_at IS NOT NULL FROM signup_app.users ORDER BY id",
            &[],
        )
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(
        rows.iter()
            .map(|r| User {
                id: r.get(0),
                email: r.get(1),
                welcomed: r.get(2),
            })
            .collect(),
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let self_test = std::env::args().any(|a| a == "--self-test");
    let url = std::env::var("DATABASE_URL")
        .context("set DATABASE_URL (for example to the output of `skiplock pg url`)")?;

    // One pool for the app and the queue, so that enqueueing joins the app's transactions.
    let mut cfg = Config::new();
    cfg.url = Some(url.clone());
    let pool = cfg.create_pool(Some(Runtime::Tokio1), tokio_postgres::NoTls)?;
    let queue = Client::from_pool(pool.clone()).build()?;
    queue.migrate().await?;
    pool.get().await?.batch_execute(APP_SCHEMA).await?;

    let worker = Worker::builder(queue.clone(), Registry::new().register::<WelcomeEmail>())
        .queue("emails", 4)
        .listen_url(&url)
        .build()?;
    let (stop_worker, worker_stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(worker.run(async {
        let _ = worker_stopped.await;
    }));

    let app = Router::new()
        .route("/signup", post(signup))
        .route("/users", get(users))
        .with_state(App {
            pool: pool.clone(),
            queue,
        });
    let addr: SocketAddr = if self_test {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3000"
    }
    .parse()?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    if self_test {
        run_self_test(addr, &pool).await?;
    } else {
        tokio::signal::ctrl_c().await?;
    }
    server.abort();
    let _ = stop_worker.send(());
    let stats = worker.await??;
    println!(
        "worker stopped: {} done, {} retried, {} failed",
        stats.done, stats.retried, stats.failed
    );
    Ok(())
}

/// Signs up 20 users over HTTP and waits until the worker has welcomed every one.
async fn run_self_test(addr: SocketAddr, pool: &Pool) -> anyhow::Result<()> {
    let run = std::process::id();
    let emails: Vec<String> = (0..20)
        .map(|i| format!("user{i}.{run}@example.com"))
        .collect();
    for email in &emails {
        let status = post_json(addr, "/signup", &format!(r#"{{"email":"{email}"}}"#)).await?;
        anyhow::ensure!(status == 200, "signup of {email} answered {status}");
    }
    let conn = pool.get().await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let welcomed: i64 = conn
            .query_one(
                "SELECT count(*) FROM signup_app.users WHERE email = ANY($1) AND welcomed_at IS NOT NULL",
                &[&emails],
            )
            .await?
            .get(0);
        if welcomed == emails.len() as i64 {
            println!("self-test: {welcomed} users signed up over HTTP and welcomed by the worker");
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "only {welcomed} welcomed after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A minimal HTTP/1.1 POST (the example needs no HTTP client crate).
async fn post_json(addr: SocketAddr, path: &str, body: &str) -> anyhow::Result<u16> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).await?;
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status in the response")?;
    Ok(status)
}
