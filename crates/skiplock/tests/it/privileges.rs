//! Least privilege: a role with only the grants the README lists can enqueue, work and prune,
//! and run `migrate` on a current schema; it cannot migrate (create) a schema.

use std::time::Duration;

use skiplock::{Client, JobContext, JobError, JobOptions, NewJob, PruneOptions, Registry, Worker};

use crate::support::setup;

/// The grants of docs/OPERATIONS.md (least privilege), for `role` on `schema` (both quoted by the caller).
fn grants(schema: &str, role: &str) -> String {
    format!(
        "GRANT USAGE ON SCHEMA {schema} TO {role};
         GRANT SELECT, INSERT, UPDATE, DELETE
           ON {schema}.jobs, {schema}.jobs_archive, {schema}.maintenance_locks,
              {schema}.queues, {schema}.schedules, {schema}.done_deleted TO {role};
         GRANT SELECT ON {schema}.schema_migrations TO {role};"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_role_can_enqueue_work_and_prune_but_not_create_the_schema() {
    let b = setup().await;
    let schema = b.client.schema().quoted().to_owned();
    let role_name = format!("{}_worker", b.db.schema());
    let role = format!("\"{role_name}\"");
    b.raw
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; {}",
            grants(&schema, &role)
        ))
        .await
        .unwrap();
    let mut cfg: tokio_postgres::Config = b.db.url().parse().unwrap();
    cfg.user(&role_name);
    let client = Client::builder_from_config(cfg.clone())
        .schema(b.db.schema())
        .pool_size(4)
        .build()
        .unwrap();

    // `migrate` with nothing pending: no CREATE, no DDL lock.
    let report = client.migrate().await.unwrap();
    assert!(report.applied.is_empty());

    // Enqueue: one, many, in a transaction.
    client.enqueue(&NewJob::new("k", &1)).await.unwrap();
    client
        .enqueue_many(&[NewJob::new("k", &2), NewJob::new("k", &3)])
        .await
        .unwrap();
    let mut conn = client.pool().get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    client.enqueue_tx(&tx, &NewJob::new("k", &4)).await.unwrap();
    tx.commit().await.unwrap();
    drop(conn);

    // A worker (claims, completions, heartbeats, the reaper, LISTEN) runs them all.
    let registry = Registry::new().register_handler(
        "k",
        JobOptions::default(),
        |_p: String, _ctx: JobContext| async { Ok::<(), JobError>(()) },
    );
    let worker = Worker::builder(client.clone(), registry)
        .queue("default", 4)
        .reap_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    let stats = tokio::time::timeout(Duration::from_secs(30), worker.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stats.done, 4, "{stats:?}");

    // A worker that deletes what it completes (delete_done), and the health report that
    // counts those jobs.
    client
        .enqueue_many(&[NewJob::new("k", &6), NewJob::new("k", &7)])
        .await
        .unwrap();
    let registry = Registry::new().register_handler(
        "k",
        JobOptions::default(),
        |_p: String, _ctx: JobContext| async { Ok::<(), JobError>(()) },
    );
    let worker = Worker::builder(client.clone(), registry)
        .queue("default", 4)
        .delete_done(true)
        .build()
        .unwrap();
    let stats = tokio::time::timeout(Duration::from_secs(30), worker.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((stats.done, stats.lost), (2, 0), "{stats:?}");
    let health = client.health(Duration::from_secs(60)).await.unwrap();
    let q = health.queues.iter().find(|q| q.queue == "default").unwrap();
    assert!(q.finished_last_minute >= 6, "{q:?}");
    assert_eq!(q.done, 4, "{q:?}");

    // Prune, deleting and archiving.
    let age = "UPDATE jobs SET finished_at = now() - interval '8 days' WHERE id IN \
               (SELECT id FROM jobs WHERE finished_at > now() - interval '1 day' LIMIT 2)";
    b.raw.batch_execute(age).await.unwrap();
    let mut archive = PruneOptions::default();
    archive.archive = true;
    assert_eq!(client.prune(archive).await.unwrap().removed, 2);
    b.raw.batch_execute(age).await.unwrap();
    assert_eq!(
        client.prune(PruneOptions::default()).await.unwrap().removed,
        2
    );
    // Lifecycle calls on a job by hand, and the reaper.
    let id = client.enqueue(&NewJob::new("k", &5)).await.unwrap();
    let jobs = client
        .claim("default", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(jobs[0].id, id);
    b.expire_lease(id).await;
    assert_eq!(client.reap().await.unwrap().len(), 1);
    // A claim through a backlog takes its queue's turn: the role may lock the turn's view
    // (migration 24 grants that to PUBLIC), and the worker's claim in turn claims.
    let mut role_conn = client.pool().get().await.unwrap();
    let turn = role_conn.transaction().await.unwrap();
    turn.batch_execute(&format!(
        "LOCK TABLE {schema}.claim_turn_{} IN EXCLUSIVE MODE NOWAIT",
        skiplock::claim_turn("default")
    ))
    .await
    .expect("the role may take a turn");
    turn.rollback().await.unwrap();
    drop(role_conn);
    let id = client.enqueue(&NewJob::new("k", &6)).await.unwrap();
    // (The job the reaper put back is claimed too.)
    let jobs = client
        .claim_in_turn_for_tests("default", 5, 5, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(jobs.iter().any(|j| j.id == id), "{jobs:?}");

    // Creating a schema is refused, with the database's reason.
    let other = Client::builder_from_config(cfg)
        .schema(format!("{}_new", b.db.schema()))
        .build()
        .unwrap();
    let e = other.migrate().await.unwrap_err();
    let mut msg = e.to_string();
    let mut cur = std::error::Error::source(&e);
    while let Some(c) = cur {
        msg = format!("{msg}: {c}");
        cur = c.source();
    }
    assert!(msg.contains("permission denied"), "{msg}");
    assert!(msg.contains("create the schema"), "{msg}");

    drop(client);
    drop(other);
    b.raw
        .batch_execute(&format!(
            "REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role};
             REVOKE ALL ON SCHEMA {schema} FROM {role};
             DROP OWNED BY {role}; DROP ROLE {role}"
        ))
        .await
        .ok();
}
