//! The pool's limits: a caller starved of connections gets an error, not a hang.

use std::time::{Duration, Instant};

use skiplock::{Client, NewJob};

use crate::support::setup;

#[tokio::test]
async fn a_starved_caller_gets_a_pool_error_after_the_wait_timeout() {
    let b = setup().await;
    let client = Client::builder(b.db.url())
        .schema(b.db.schema())
        .pool_size(1)
        .pool_wait_timeout(Some(Duration::from_millis(300)))
        .build()
        .unwrap();
    let held = client.pool().get().await.unwrap();
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        client.enqueue(&NewJob::new("k", &1)),
    )
    .await
    .expect("enqueue waited for a connection for 10 s");
    assert!(matches!(r, Err(skiplock::Error::Pool { .. })), "{r:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    drop(held);
    client.enqueue(&NewJob::new("k", &1)).await.unwrap();

    // The default is 30 s; zero is refused, None waits for ever.
    assert_eq!(
        skiplock::Client::DEFAULT_POOL_WAIT_TIMEOUT,
        Duration::from_secs(30)
    );
    let e = Client::builder(b.db.url())
        .pool_wait_timeout(Some(Duration::ZERO))
        .build()
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    Client::builder(b.db.url())
        .pool_wait_timeout(None)
        .build()
        .unwrap();
}
