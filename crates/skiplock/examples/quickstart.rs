//! The guide's "claiming by hand" example (docs/GUIDE.md), runnable: `DATABASE_URL=postgres://... cargo run --example quickstart`
//! (or with `DATABASE_URL=$(skiplock pg url)`).

use std::time::Duration;

use deadpool_postgres::Pool;
use skiplock::{Client, NewJob, Retry, Transition};

async fn signup_and_work(pool: Pool) -> anyhow::Result<()> {
    let queue = Client::from_pool(pool.clone()).schema("skiplock").build()?;
    queue.migrate().await?;

    // Enqueue in the same transaction as the data change: the job exists, and workers are
    // woken, only if the transaction commits.
    let mut conn = pool.get().await?;
    let tx = conn.transaction().await?;
    // ... INSERT INTO users ... on `tx`
    let job = NewJob::new("welcome_email", &serde_json::json!({ "user_id": 42 }))
        .queue("emails")
        .max_attempts(10);
    queue.enqueue_tx(&tx, &job).await?;
    tx.commit().await?;

    // Claim a batch with a 5-minute lease (one short autocommit statement), run each job
    // outside any transaction, then finish it with a write guarded by the claimed attempt.
    for job in queue.claim("emails", 10, Duration::from_secs(300)).await? {
        match send_welcome_email(&job.payload).await {
            Ok(()) => {
                if queue.complete(job.id, job.attempt).await? == Transition::Lost {
                    // The lease expired and the job was re-queued or taken over: not ours.
                }
            }
            Err(e) => {
                // Back off 20 s, 40 s, 80 s, ... (capped at 1 hour); `failed` at max_attempts.
                let _ = queue
                    .fail(job.id, job.attempt, &e, Retry::default())
                    .await?;
            }
        }
    }

    // Return jobs whose worker died (lease expired) to the queue; run it periodically.
    queue.reap().await?;
    Ok(())
}

async fn send_welcome_email(payload: &str) -> Result<(), String> {
    println!("sending welcome email for {payload}");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL")
        .map_err(|_| anyhow::anyhow!("set DATABASE_URL (for example to `skiplock pg url`)"))?;
    let mut cfg = deadpool_postgres::Config::new();
    cfg.url = Some(url);
    let pool = cfg.create_pool(
        Some(deadpool_postgres::Runtime::Tokio1),
        tokio_postgres::NoTls,
    )?;
    signup_and_work(pool).await
}
