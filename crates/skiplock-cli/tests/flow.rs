//! Flow control across `skiplock work` processes killed with SIGKILL and restarted: a sampler
//! reads the database every few milliseconds and checks that the queue's concurrency and
//! per-key limits are never exceeded; the negative control (the limit check taken out of the
//! claim, in the database) must fail the same sampler.
#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use skiplock_testdb::TestDb;

const CONCURRENCY: i64 = 4;
const PER_KEY: i64 = 2;
const JOBS: i64 = 300;

fn worker(db: &TestDb) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin!("skiplock"))
        .env_remove("DATABASE_URL")
        .env_remove("SKIPLOCK_HOME")
        .args(["--database-url", db.url(), "--schema", db.schema()])
        .args([
            "work",
            "--queue",
            "default=8",
            "--lease",
            "2s",
            "--reap-interval",
            "200ms",
            "--poll-interval",
            "off",
            "--exec",
            "sleep",
            "0.03",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// What the sampler saw at most: slots in use in the queue, and of one key.
struct Peak {
    total: i64,
    per_key: i64,
    samples: u64,
}

/// Runs three workers over the jobs, killing one with SIGKILL every second (three times at
/// most) and starting a new one, while sampling the slots in use; returns the peaks once every
/// job is done, checking that at least `kills_needed` kills happened before.
async fn run(db: &TestDb, kills_needed: usize) -> Peak {
    let c = db.connect().await.unwrap();
    c.batch_execute(&format!("SET search_path TO \"{}\"", db.schema()))
        .await
        .unwrap();
    let mut workers: Vec<Child> = (0..3).map(|_| worker(db)).collect();
    let mut peak = Peak {
        total: 0,
        per_key: 0,
        samples: 0,
    };
    let t0 = Instant::now();
    let mut next_kill = t0 + Duration::from_millis(1000);
    let mut kills = 0;
    loop {
        // One snapshot: the slots in use (running, or cancelled with a lease not yet ended),
        // in all and for the busiest key; and what is left.
        let r = c
            .query_one(
                "SELECT count(*) FILTER (WHERE slot),
                        coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM jobs
                                  WHERE status = 'running' GROUP BY key) k), 0),
                        count(*) FILTER (WHERE status IN ('queued', 'running'))
                 FROM (SELECT status, status = 'running'
                              OR (status = 'failed' AND locked_until > now()) AS slot
                       FROM jobs) j",
                &[],
            )
            .await
            .unwrap();
        let (total, per_key, left): (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
        peak.total = peak.total.max(total);
        peak.per_key = peak.per_key.max(per_key);
        peak.samples += 1;
        if left == 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{left} jobs left after 120 s"
        );
        if Instant::now() >= next_kill && kills < 3 {
            let mut victim = workers.remove(0);
            victim.kill().unwrap();
            victim.wait().unwrap();
            workers.push(worker(db));
            kills += 1;
            next_kill = Instant::now() + Duration::from_millis(1000);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for mut w in workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    assert!(kills >= kills_needed, "the run ended after {kills} kills");
    let done: i64 = c
        .query_one("SELECT count(*) FROM jobs WHERE status = 'done'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(done, JOBS, "every job done");
    peak
}

async fn setup() -> TestDb {
    let db = TestDb::new().await;
    let o = Command::new(assert_cmd::cargo::cargo_bin!("skiplock"))
        .env_remove("DATABASE_URL")
        .env_remove("SKIPLOCK_HOME")
        .args([
            "--database-url",
            db.url(),
            "--schema",
            db.schema(),
            "migrate",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = db.connect().await.unwrap();
    c.batch_execute(&format!(
        "SET search_path TO \"{s}\";
         INSERT INTO queues (name, concurrency, per_key) VALUES ('default', {CONCURRENCY}, {PER_KEY});
         INSERT INTO jobs (payload, key) SELECT '{{}}', 'k' || (i % 3) FROM generate_series(1, {JOBS}) i;",
        s = db.schema()
    ))
    .await
    .unwrap();
    db
}

/// The limits hold through three SIGKILLs and restarts (the killed workers' slots come back
/// when the reaper moves their jobs after the 2 s lease), and every job is done once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_across_processes_killed_and_restarted() {
    let db = setup().await;
    let peak = run(&db, 3).await;
    assert!(peak.samples > 100, "only {} samples", peak.samples);
    assert!(
        peak.total <= CONCURRENCY,
        "{} slots in use at once",
        peak.total
    );
    assert!(
        peak.per_key <= PER_KEY,
        "{} of one key at once",
        peak.per_key
    );
    // The limits were reached: the sampler saw them bind.
    assert_eq!(peak.total, CONCURRENCY);
}

/// The negative control: the same run with the limit check taken out of the claim (the
/// limited branch claims as if there were no limit) fails the sampler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_limit_check_the_sampler_sees_the_limits_exceeded() {
    let db = setup().await;
    let c = db.connect().await.unwrap();
    c.batch_execute(&format!(
        "SET search_path TO \"{s}\";
         CREATE OR REPLACE FUNCTION claim_limited(p_queue text, p_want bigint, p_lease_us bigint)
         RETURNS TABLE (id bigint, queue text, kind text, payload text, attempts int,
                        max_attempts int, priority smallint, run_at timestamptz,
                        created_at timestamptz, locked_until timestamptz)
         LANGUAGE sql AS $$
           WITH next AS MATERIALIZED (
             SELECT j.id FROM \"{s}\".jobs j
             WHERE j.queue = p_queue AND j.status = 'queued' AND j.held IS NULL
               AND j.run_at <= now() AND j.attempts < j.max_attempts
             ORDER BY j.priority, j.run_at, j.id LIMIT p_want FOR UPDATE SKIP LOCKED)
           UPDATE \"{s}\".jobs j SET status = 'running', attempts = j.attempts + 1,
                  locked_until = now() + p_lease_us * interval '1 microsecond'
           FROM next WHERE j.id = next.id
           RETURNING j.id, j.queue, j.kind, j.payload::text, j.attempts, j.max_attempts,
                     j.priority, j.run_at, j.created_at, j.locked_until
         $$;",
        s = db.schema()
    ))
    .await
    .unwrap();
    let peak = run(&db, 0).await;
    assert!(
        peak.total > CONCURRENCY && peak.per_key > PER_KEY,
        "the sampler saw no excess: {} in all, {} of one key",
        peak.total,
        peak.per_key
    );
}
