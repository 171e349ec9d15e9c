//! Operator calls: retry, cancel, delete; prune and archive; health; the SQL enqueue
//! function.

use std::time::Duration;

use skiplock::{Client, JobId, JobState, NewJob, PruneOptions, Retry, Transition};
use skiplock_testdb::TestDb;

use crate::support::setup;

const LEASE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn retry_cancel_and_delete() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(
            &(0..4)
                .map(|i| NewJob::new("k", &i).max_attempts(1))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    // ids[0] fails for good (its only attempt), ids[1] runs, ids[2] is done, ids[3] queued.
    let j = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    let _ = b
        .client
        .fail(j.id, j.attempt, "boom", Retry::default())
        .await
        .unwrap();
    let running = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    let d = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    let _ = b.client.complete(d.id, d.attempt).await.unwrap();

    // Retry: the failed and the done job run again; attempts kept, max raised; running left.
    let r = b
        .client
        .retry(&[ids[0], ids[1], ids[2], JobId(999_999)])
        .await
        .unwrap();
    assert_eq!(r.changed, vec![ids[0], ids[2]]);
    assert_eq!(
        r.unchanged,
        vec![(ids[1], Some(JobState::Running)), (JobId(999_999), None)]
    );
    let row = b.client.get(ids[0]).await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.attempts, row.max_attempts),
        (JobState::Queued, 1, 2)
    );
    assert!(row.finished_at.is_none());
    let again = b.client.claim("default", 10, LEASE).await.unwrap();
    assert_eq!(again.len(), 3, "the two retried jobs and the queued one");

    // Cancel the running job: its late completion is refused.
    let c = b.client.cancel(&[running.id]).await.unwrap();
    assert_eq!(c.changed, vec![running.id]);
    let row = b.client.get(running.id).await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.last_error.as_deref()),
        (JobState::Failed, Some("cancelled"))
    );
    assert_eq!(
        b.client
            .complete(running.id, running.attempt)
            .await
            .unwrap(),
        Transition::Lost
    );

    // Delete: not running ones only.
    let still_running = again[0].id;
    let d = b.client.delete(&[running.id, still_running]).await.unwrap();
    assert_eq!(d.changed, vec![running.id]);
    assert_eq!(d.unchanged, vec![(still_running, Some(JobState::Running))]);
    assert!(b.client.get(running.id).await.unwrap().is_none());
    assert!(b.client.retry(&[]).await.unwrap().changed.is_empty());
}

/// `retry_tx`, `cancel_tx` and `delete_tx` act inside the caller's tokio-postgres
/// transaction: nothing before its commit, nothing after a rollback; the report's states
/// are read in that transaction.
#[tokio::test]
async fn admin_actions_follow_the_callers_transaction() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(&(0..3).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    let mut conn = b.db.connect().await.unwrap();
    let client = &b.client;
    let state = |id| async move { client.get(id).await.unwrap().map(|r| r.state) };

    // Rolled back: nothing happened.
    let tx = conn.transaction().await.unwrap();
    let c = b.client.cancel_tx(&tx, &[ids[0]]).await.unwrap();
    assert_eq!(c.changed, vec![ids[0]]);
    let d = b.client.delete_tx(&tx, &[ids[1]]).await.unwrap();
    assert_eq!(d.changed, vec![ids[1]]);
    // The transaction sees its own cancel: retrying it there works.
    let r = b.client.retry_tx(&tx, &[ids[0], ids[1]]).await.unwrap();
    assert_eq!(
        (r.changed, r.unchanged),
        (vec![ids[0]], vec![(ids[1], None)])
    );
    tx.rollback().await.unwrap();
    assert_eq!(state(ids[0]).await, Some(JobState::Queued));
    assert_eq!(state(ids[1]).await, Some(JobState::Queued));
    assert_eq!(b.count("true").await, 3);

    // Committed: applied, and only at the commit.
    let tx = conn.transaction().await.unwrap();
    b.client.cancel_tx(&tx, &[ids[0]]).await.unwrap();
    b.client.delete_tx(&tx, &[ids[1]]).await.unwrap();
    assert_eq!(state(ids[0]).await, Some(JobState::Queued));
    assert_eq!(state(ids[1]).await, Some(JobState::Queued));
    tx.commit().await.unwrap();
    assert_eq!(state(ids[0]).await, Some(JobState::Failed));
    assert_eq!(state(ids[1]).await, None);

    // A plain connection (and a pool object) autocommits.
    let r = b.client.retry_tx(&conn, &[ids[0]]).await.unwrap();
    assert_eq!(r.changed, vec![ids[0]]);
    assert_eq!(state(ids[0]).await, Some(JobState::Queued));
}

/// The same through an sqlx transaction.
#[cfg(feature = "sqlx-0_8")]
#[tokio::test]
async fn admin_actions_follow_an_sqlx_transaction() {
    let b = setup().await;
    let ids = b
        .client
        .enqueue_many(&(0..2).map(|i| NewJob::new("k", &i)).collect::<Vec<_>>())
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(b.db.url()).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    b.client.cancel_tx(&mut *tx, &[ids[0]]).await.unwrap();
    let d = b
        .client
        .delete_tx(&mut tx, &[ids[1], JobId(999_999)])
        .await
        .unwrap();
    assert_eq!(
        (d.changed, d.unchanged),
        (vec![ids[1]], vec![(JobId(999_999), None)])
    );
    tx.rollback().await.unwrap();
    assert_eq!(b.count("status = 'queued'").await, 2);

    let mut tx = pool.begin().await.unwrap();
    b.client.cancel_tx(&mut *tx, &[ids[0]]).await.unwrap();
    let r = b.client.retry_tx(&mut *tx, &[ids[0]]).await.unwrap();
    assert_eq!(r.changed, vec![ids[0]]);
    b.client.cancel_tx(&mut *tx, &[ids[0]]).await.unwrap();
    b.client.delete_tx(&mut *tx, &[ids[1]]).await.unwrap();
    tx.commit().await.unwrap();
    let row = b.client.get(ids[0]).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Failed);
    assert!(b.client.get(ids[1]).await.unwrap().is_none());
}

#[tokio::test]
async fn prune_takes_batches_keeps_recent_and_unfinished_and_can_archive() {
    let b = setup().await;
    let jobs: Vec<NewJob> = (0..25_000).map(|i| NewJob::new("k", &i)).collect();
    b.client.enqueue_many(&jobs).await.unwrap();
    let keep: Vec<NewJob> = (0..10).map(|i| NewJob::new("k", &i)).collect();
    let keep = b.client.enqueue_many(&keep).await.unwrap();
    // 25,000 done 8 days ago; of the 10 others: 3 done now, 3 failed 8 days ago, 4 queued.
    b.raw
        .batch_execute(&format!(
            "UPDATE jobs SET status = 'done', attempts = 1, finished_at = now() - interval '8 days'
               WHERE id < {first};
             UPDATE jobs SET status = 'done', attempts = 1, finished_at = now()
               WHERE id IN ({a}, {b}, {c});
             UPDATE jobs SET status = 'failed', attempts = 5, finished_at = now() - interval '8 days'
               WHERE id IN ({d}, {e}, {f});",
            first = keep[0].0,
            a = keep[0].0,
            b = keep[1].0,
            c = keep[2].0,
            d = keep[3].0,
            e = keep[4].0,
            f = keep[5].0,
        ))
        .await
        .unwrap();
    let r = b.client.prune(PruneOptions::default()).await.unwrap();
    assert_eq!((r.removed, r.batches, r.skipped), (25_000, 3, false));
    assert_eq!(
        b.count("true").await,
        10,
        "recent, failed and queued jobs kept"
    );

    let r = b
        .client
        .prune(PruneOptions::default().include_failed(true).archive(true))
        .await
        .unwrap();
    assert_eq!((r.removed, r.batches, r.archived), (3, 1, true));
    let archived: i64 = b
        .raw
        .query_one(
            "SELECT count(*) FROM jobs_archive WHERE status = 'failed'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(archived, 3);
    assert_eq!(b.count("true").await, 7);
    assert!(b
        .client
        .prune(PruneOptions::default().batch_size(0))
        .await
        .unwrap_err()
        .is_invalid_input());
}

/// The key of the workers' reaper lock: the schema's migration lock key (FNV-1a of
/// `skiplock migrate <schema>`) plus one.
fn reaper_lock_key(schema: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "skiplock migrate ".bytes().chain(schema.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes()).wrapping_add(1)
}

/// A manual reap runs the workers' reaper pass under the same lock: while another session
/// holds it (a worker's reaper mid-round), the manual reap moves nothing and waits; once
/// the lock is free, it reaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_reap_takes_the_workers_reaper_lock() {
    let b = setup().await;
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    b.client.claim("default", 1, LEASE).await.unwrap();
    b.expire_lease(id).await;
    let mut other = b.db.connect().await.unwrap();
    let tx = other.transaction().await.unwrap();
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&reaper_lock_key(b.db.schema())],
    )
    .await
    .unwrap();
    let client = b.client.clone();
    let reap = tokio::spawn(async move { client.reap().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!reap.is_finished(), "the manual reap waits for the lock");
    assert_eq!(
        b.client.get(id).await.unwrap().unwrap().state,
        JobState::Running
    );
    tx.commit().await.unwrap();
    let reaped = tokio::time::timeout(Duration::from_secs(5), reap)
        .await
        .expect("the manual reap ran once the lock was free")
        .unwrap();
    assert_eq!(
        reaped.iter().map(|r| (r.id, r.state)).collect::<Vec<_>>(),
        [(id, JobState::Queued)]
    );
}

#[tokio::test]
async fn only_one_pruner_runs_at_a_time() {
    let b = setup().await;
    // Another process holds the prune lock.
    assert!(b
        .client
        .try_maintenance_lock("prune", "someone else", Duration::from_secs(60))
        .await
        .unwrap());
    let r = b.client.prune(PruneOptions::default()).await.unwrap();
    assert!(r.skipped);
    // An expired holder does not block forever.
    b.raw
        .batch_execute("UPDATE maintenance_locks SET expires_at = now() - interval '1 second'")
        .await
        .unwrap();
    assert!(
        !b.client
            .prune(PruneOptions::default())
            .await
            .unwrap()
            .skipped
    );
}

#[tokio::test]
async fn health_reports_counts_and_an_idle_in_transaction_session() {
    let b = setup().await;
    b.client
        .enqueue_many(&[NewJob::new("k", &1), NewJob::new("k", &2).queue("other")])
        .await
        .unwrap();
    let j = b.client.claim("default", 1, LEASE).await.unwrap().remove(0);
    let _ = b.client.complete(j.id, j.attempt).await.unwrap();
    b.client
        .enqueue(&NewJob::new("k", &3).delay(Duration::from_secs(600)))
        .await
        .unwrap();

    // A session left idle in transaction after writing.
    let mut idle = b.db.connect().await.unwrap();
    let pid: i32 = idle
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let tx = idle.transaction().await.unwrap();
    tx.batch_execute(&format!(
        "UPDATE \"{}\".jobs SET priority = priority WHERE queue = 'other'",
        b.db.schema()
    ))
    .await
    .unwrap();

    let h = b.client.health(Duration::from_secs(3600)).await.unwrap();
    let default = h.queues.iter().find(|q| q.queue == "default").unwrap();
    assert_eq!((default.queued, default.ready, default.done), (1, 0, 1));
    assert_eq!(default.finished_last_minute, 1);
    let other = h.queues.iter().find(|q| q.queue == "other").unwrap();
    assert_eq!((other.queued, other.ready), (1, 1));
    let blocker = h
        .blockers
        .iter()
        .find(|s| s.pid == pid)
        .expect("the idle session");
    assert!(
        blocker.state.starts_with("idle in transaction"),
        "{blocker:?}"
    );
    assert!(h.warnings.iter().any(|w| w.contains(&pid.to_string())));
    tx.rollback().await.unwrap();
    let h = b.client.health(Duration::from_secs(3600)).await.unwrap();
    assert!(h.blockers.iter().all(|s| s.pid != pid));
}

/// `<schema>.enqueue(...)` from SQL: enqueues with the library's checks and fires the
/// notification; bad input is refused with SQLSTATE 22023 and a clear message.
#[tokio::test]
async fn the_sql_enqueue_function() {
    let b = setup().await;
    let mut l = crate::support::listen(b.db.url(), &b.client.schema().channel_quoted()).await;
    l.wait_on(b.client.schema(), &["mail"]).await;
    let id: i64 = b
        .raw
        .query_one(
            "SELECT enqueue('mail', '{\"user_id\": 42}', kind => 'welcome', priority => 2::smallint,
                            max_attempts => 7, delay => interval '10 seconds')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(l.next().await.payload(), "mail");
    let row = b.client.get(JobId(id)).await.unwrap().unwrap();
    assert_eq!(
        (
            row.queue.as_str(),
            row.kind.as_str(),
            row.priority,
            row.max_attempts
        ),
        ("mail", "welcome", 2, 7)
    );
    assert!(row.run_at > std::time::SystemTime::now() + Duration::from_secs(5));
    let plain: i64 = b
        .raw
        .query_one("SELECT enqueue('default', '[1, 2]')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        b.client.get(JobId(plain)).await.unwrap().unwrap().kind,
        "default"
    );

    for (call, needle) in [
        ("enqueue('bad queue', '{}')", "invalid queue name"),
        (
            "enqueue('q''; DROP TABLE jobs;--', '{}')",
            "invalid queue name",
        ),
        ("enqueue(NULL, '{}')", "invalid queue name"),
        ("enqueue('q', '{}', kind => '')", "invalid job kind"),
        ("enqueue('q', NULL)", "invalid payload"),
        (
            "enqueue('q', jsonb_build_object('x', repeat('x', 1100000)))",
            "the limit is 1048576",
        ),
        (
            "enqueue('q', '{}', max_attempts => 0)",
            "invalid max_attempts",
        ),
        (
            "enqueue('q', '{}', delay => interval '-1 second')",
            "invalid delay",
        ),
        ("enqueue('q', '{}', run_at => 'infinity')", "finite"),
        (
            "enqueue('q', '{}', delay => interval '1s', run_at => now())",
            "not both",
        ),
    ] {
        let err = b
            .raw
            .query_one(&format!("SELECT {call}"), &[])
            .await
            .unwrap_err();
        let db = err.as_db_error().expect("a database error");
        assert_eq!(db.code().code(), "22023", "{call}: {db:?}");
        assert!(db.message().contains(needle), "{call}: {}", db.message());
    }
    assert_eq!(b.count("true").await, 2, "nothing else was inserted");
}

/// skiplock's own connections carry server-side timeouts and keepalives by default, and none
/// when told not to.
#[tokio::test]
async fn connections_carry_server_timeouts() {
    let b = setup().await;
    let conn = b.client.pool().get().await.unwrap();
    let show = |name: &'static str| {
        let conn = &conn;
        async move {
            conn.query_one(&format!("SHOW {name}"), &[])
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    assert_eq!(show("statement_timeout").await, "1min");
    assert_eq!(show("lock_timeout").await, "10s");
    assert_eq!(show("idle_in_transaction_session_timeout").await, "1min");
    assert_eq!(show("application_name").await, "skiplock");
    let plain = Client::builder(b.db.url())
        .schema(b.db.schema())
        .server_timeouts(None)
        .build()
        .unwrap();
    let conn = plain.pool().get().await.unwrap();
    let st: String = conn
        .query_one("SHOW statement_timeout", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(st, "0");
}

/// The health report's dead tuples follow the article: they pile up while a transaction that
/// wrote stays open (vacuum cannot remove them; the report names the session), and fall
/// once it commits and vacuum runs. In a database of its own, so that no other test's
/// transaction holds vacuum back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_dead_tuples_rise_while_a_transaction_is_open_and_fall_after() {
    let db = TestDb::new_database().await;
    let client = Client::builder(db.url())
        .schema(db.schema())
        .build()
        .unwrap();
    client.migrate().await.unwrap();
    let jobs: Vec<NewJob> = (0..2_001).map(|i| NewJob::new("k", &i)).collect();
    client.enqueue_many(&jobs).await.unwrap();
    // One claim left open in a transaction, as a worker holding it while it works would.
    let mut holder = db.connect().await.unwrap();
    let pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let tx = holder.transaction().await.unwrap();
    tx.query_typed(
        client.statement(skiplock::Statement::Claim),
        &[
            (&"default", tokio_postgres::types::Type::TEXT),
            (&1i64, tokio_postgres::types::Type::INT8),
            (&60_000_000i64, tokio_postgres::types::Type::INT8),
            (&i16::MIN, tokio_postgres::types::Type::INT2),
            (
                &None::<std::time::SystemTime>,
                tokio_postgres::types::Type::TIMESTAMPTZ,
            ),
            (&i64::MIN, tokio_postgres::types::Type::INT8),
        ],
    )
    .await
    .unwrap();
    // The others run 2,000 jobs: a claim and a completion each, on connections that then
    // close (a backend reports its dead-tuple counts when it ends, or up to 10 s after it
    // goes idle; closing makes the statistics settle now).
    let app = format!("hdt-{}", db.schema());
    let work = Client::builder(db.url())
        .schema(db.schema())
        .application_name(&app)
        .build()
        .unwrap();
    loop {
        let batch = work.claim("default", 100, LEASE).await.unwrap();
        if batch.is_empty() {
            break;
        }
        for j in batch {
            let _ = work.complete(j.id, j.attempt).await.unwrap();
        }
    }
    drop(work);
    let raw = db.connect().await.unwrap();
    for _ in 0..100 {
        let left: i64 = raw
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let vacuum = format!("VACUUM \"{}\".jobs", db.schema());
    raw.batch_execute(&vacuum).await.unwrap();
    let dead = |client: Client| async move {
        // The statistics arrive asynchronously: wait for them to settle.
        let mut last = -1;
        for _ in 0..40 {
            let h = client.health(Duration::from_secs(3600)).await.unwrap();
            let now = h.table.map_or(0, |t| t.n_dead_tup);
            if now == last {
                return (now, h.blockers);
            }
            last = now;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let h = client.health(Duration::from_secs(3600)).await.unwrap();
        (h.table.map_or(0, |t| t.n_dead_tup), h.blockers)
    };
    let (while_open, blockers) = dead(client.clone()).await;
    assert!(
        while_open >= 2_000,
        "dead tuples while the claim is open: {while_open}"
    );
    assert!(
        blockers.iter().any(|b| b.pid == pid),
        "the open session is named"
    );
    tx.commit().await.unwrap();
    drop(holder);
    tokio::time::sleep(Duration::from_millis(300)).await;
    raw.batch_execute(&vacuum).await.unwrap();
    // PostgreSQL 13 and 14 send statistics through a collector process: the vacuum's count
    // can take a while to show, and two equal readings need not be the final one.
    let mut settled = dead(client.clone()).await;
    for _ in 0..20 {
        if settled.0 < 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        settled = dead(client.clone()).await;
    }
    let (after, blockers) = settled;
    assert!(after < 100, "dead tuples after commit and vacuum: {after}");
    assert!(blockers.iter().all(|b| b.pid != pid));
}

#[tokio::test]
async fn an_unknown_status_read_back_is_a_decode_error() {
    let b = setup().await;
    let id = b.client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    // A status none of the four states: only with the CHECK constraint gone (a schema
    // changed by hand, or by a newer skiplock).
    b.raw
        .batch_execute("ALTER TABLE jobs DROP CONSTRAINT jobs_status_check")
        .await
        .unwrap();
    b.raw
        .execute("UPDATE jobs SET status = 'paused' WHERE id = $1", &[&id.0])
        .await
        .unwrap();
    let decode = |r: Result<_, skiplock::Error>| match r {
        Err(e @ skiplock::Error::Decode { .. }) => e.to_string(),
        other => panic!("expected a decode error, got {other:?}"),
    };

    let msg = decode(b.client.get(id).await.map(drop));
    assert!(msg.contains("\"paused\""), "{msg}");
    // The admin calls read the state of what they left alone: the retry leaves the job
    // alone (it is neither queued, done nor failed) and reads its status.
    let msg = decode(b.client.retry(&[id]).await.map(drop));
    assert!(msg.contains("\"paused\""), "{msg}");
    #[cfg(feature = "sqlx-0_8")]
    {
        let pool = sqlx::PgPool::connect(b.db.url()).await.unwrap();
        let mut conn = pool.acquire().await.unwrap();
        let msg = decode(b.client.retry_tx(&mut *conn, &[id]).await.map(drop));
        assert!(msg.contains("\"paused\""), "{msg}");
    }
}
