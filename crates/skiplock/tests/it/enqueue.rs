//! Enqueue: single and batch, inside the caller's transaction, and the statement-level
//! wake-up notification.

use skiplock::{JobState, NewJob};

use crate::support::{listen, setup};

/// A job enqueued in a transaction that rolls back leaves no row and no notification; one
/// that commits leaves both, seen by a real LISTEN connection.
#[tokio::test]
async fn tokio_postgres_transaction_enqueue_is_all_or_nothing() {
    let b = setup().await;
    let mut l = listen(b.db.url(), &b.client.schema().channel_quoted()).await;
    l.wait_on(b.client.schema(), &["rollback", "commit"]).await;
    let mut conn = b.db.connect().await.unwrap();

    let tx = conn.transaction().await.unwrap();
    let gone = b
        .client
        .enqueue_tx(&tx, &NewJob::new("k", &"rolled back").queue("rollback"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(b.client.get(gone).await.unwrap().is_none());

    let tx = conn.transaction().await.unwrap();
    let kept = b
        .client
        .enqueue_tx(&tx, &NewJob::new("k", &"committed").queue("commit"))
        .await
        .unwrap();
    // Not visible (and not announced) before the commit.
    assert!(b.client.get(kept).await.unwrap().is_none());
    assert!(l.rx.try_recv().is_err());
    tx.commit().await.unwrap();

    // Notifications arrive in commit order, so the first one is the committed job's: the
    // rolled-back transaction sent none.
    let n = l.next().await;
    assert_eq!(n.channel(), b.client.schema().channel());
    assert_eq!(n.payload(), "commit");
    let row = b.client.get(kept).await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.queue.as_str()),
        (JobState::Queued, "commit")
    );
    assert_eq!(b.count("true").await, 1);
}

/// Pool objects and their transactions from deadpool-postgres work the same way, for both
/// single and batch enqueues.
#[tokio::test]
async fn deadpool_objects_and_transactions() {
    let b = setup().await;
    let mut obj = b.client.pool().get().await.unwrap();
    let id = b
        .client
        .enqueue_tx(&obj, &NewJob::new("k", &1))
        .await
        .unwrap();
    let tx = obj.transaction().await.unwrap();
    let ids = b
        .client
        .enqueue_many_tx(&tx, &[NewJob::new("k", &2), NewJob::new("k", &3)])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let tx = obj.transaction().await.unwrap();
    let kept = b
        .client
        .enqueue_many_tx(&tx, &[NewJob::new("k", &4), NewJob::new("k", &5)])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(b.client.get(id).await.unwrap().is_some());
    for gone in ids {
        assert!(b.client.get(gone).await.unwrap().is_none());
    }
    assert_eq!(b.count("true").await, 3);
    assert_eq!(kept.len(), 2);
}

/// sqlx transactions (`&mut *tx`), behind the `sqlx-0_8` feature.
#[cfg(feature = "sqlx-0_8")]
#[tokio::test]
async fn sqlx_transaction_enqueue_is_all_or_nothing() {
    let b = setup().await;
    let mut l = listen(b.db.url(), &b.client.schema().channel_quoted()).await;
    l.wait_on(b.client.schema(), &["rollback", "commit"]).await;
    let pool = sqlx::PgPool::connect(b.db.url()).await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    let gone = b
        .client
        .enqueue_tx(
            &mut *tx,
            &NewJob::new("k", &"rolled back").queue("rollback"),
        )
        .await
        .unwrap();
    let gone_many = b
        .client
        .enqueue_many_tx(&mut tx, &[NewJob::new("k", &1).queue("rollback")])
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    let kept = b
        .client
        .enqueue_tx(&mut *tx, &NewJob::new("k", &"committed").queue("commit"))
        .await
        .unwrap();
    let kept_many = b
        .client
        .enqueue_many_tx(
            &mut *tx,
            &[
                NewJob::new("k", &1).queue("commit"),
                NewJob::new("k", &2)
                    .queue("commit")
                    .delay(std::time::Duration::from_secs(5)),
            ],
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();

    assert_eq!(l.next().await.payload(), "commit");
    assert!(b.client.get(gone).await.unwrap().is_none());
    assert!(b.client.get(gone_many[0]).await.unwrap().is_none());
    assert!(b.client.get(kept).await.unwrap().is_some());
    assert_eq!(kept_many.len(), 2);
    assert_eq!(b.count("queue = 'commit'").await, 3);
    assert_eq!(b.count("queue = 'rollback'").await, 0);
    // Also through a plain connection, outside any transaction.
    let mut conn = pool.acquire().await.unwrap();
    b.client
        .enqueue_tx(&mut *conn, &NewJob::new("k", &9))
        .await
        .unwrap();
    assert_eq!(b.count("true").await, 4);
}

/// One INSERT of many jobs sends one notification per distinct queue, with only the queue
/// name as payload, and the ids come back in input order.
#[tokio::test]
async fn a_batch_sends_one_notification_per_queue() {
    let b = setup().await;
    let mut l = listen(b.db.url(), &b.client.schema().channel_quoted()).await;
    l.wait_on(b.client.schema(), &["even", "odd", "sentinel"])
        .await;
    let jobs: Vec<NewJob> = (0..1_000)
        .map(|i| NewJob::new("k", &i).queue(if i % 2 == 0 { "even" } else { "odd" }))
        .collect();
    let ids = b.client.enqueue_many(&jobs).await.unwrap();
    assert_eq!(ids.len(), 1_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids in input order");
    let first = b.client.get(ids[0]).await.unwrap().unwrap();
    assert_eq!(first.payload, "0");
    let last = b.client.get(ids[999]).await.unwrap().unwrap();
    assert_eq!((last.payload.as_str(), last.queue.as_str()), ("999", "odd"));

    b.client
        .enqueue(&NewJob::new("k", &"sentinel").queue("sentinel"))
        .await
        .unwrap();
    let mut got = Vec::new();
    loop {
        let n = l.next().await;
        if n.payload() == "sentinel" {
            break;
        }
        got.push(n.payload().to_owned());
    }
    got.sort();
    assert_eq!(got, ["even", "odd"]);
}

/// 100,000 jobs in one call: far past the protocol's 65,535 bind parameters, since each
/// column is one array.
#[tokio::test]
async fn a_batch_of_100_000_jobs_is_one_statement() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..100_000).map(|i| NewJob::new("k", &i)).collect();
    let ids = b.client.enqueue_many(&jobs).await.unwrap();
    assert_eq!(ids.len(), 100_000);
    assert_eq!(b.count("status = 'queued'").await, 100_000);
    assert!(b.client.enqueue_many(&[]).await.unwrap().is_empty());
}

/// Jobs inserted with plain SQL (any language) get the article's defaults and are claimable.
#[tokio::test]
async fn plain_sql_inserts_work() {
    let b = setup().await;
    b.raw
        .batch_execute(
            "INSERT INTO jobs (payload) SELECT jsonb_build_object('email_id', g)
             FROM generate_series(1, 10) AS g",
        )
        .await
        .unwrap();
    let jobs = b
        .client
        .claim("default", 20, std::time::Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(jobs.len(), 10);
    assert_eq!(
        (jobs[0].kind.as_str(), jobs[0].max_attempts),
        ("default", 5)
    );
    // The CHECK constraints refuse what the library would refuse.
    let err = b
        .raw
        .batch_execute("INSERT INTO jobs (queue, payload) VALUES ('bad queue', '{}')")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("db error") || err.as_db_error().is_some());
}
