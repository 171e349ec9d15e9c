//! Periodic jobs against a real server: the cursor's compare-and-set under racing
//! schedulers, no backfill, pause/resume/remove/run-now, missed fires, restarts that keep
//! the cursor, a changed timing that starts it over, and changes made while a poll-off
//! worker's LISTEN connection is down.

use std::time::{Duration, SystemTime};

use skiplock::periodic::{run_once, FireReport, ScheduleChange, SchedulerConfig};
use skiplock::{Client, JobOptions, Missed, Registry, Schedule, Worker};

use crate::support::{setup, Bundle};
use crate::worker::{client, eventually, listener_pid, listening, noop, spawn_worker};

const EVERY_SECOND: &str = "* * * * * *";

fn cfg() -> SchedulerConfig {
    SchedulerConfig::default()
}

/// The fire times (run_at) of the jobs schedule `name` enqueued, oldest first.
async fn fires(b: &Bundle, name: &str) -> Vec<SystemTime> {
    b.raw
        .query(
            "SELECT run_at FROM jobs WHERE schedule = $1 ORDER BY run_at, id",
            &[&name],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn cursor(b: &Bundle, name: &str) -> SystemTime {
    b.raw
        .query_one(
            "SELECT last_fire_at FROM schedules WHERE name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `n` schedulers that all read the same cursor before any of them fires: a transaction
/// holds the schedule's row lock while they start, so that every one of them reads the old
/// cursor and then waits in its compare-and-set. Returns their reports.
async fn race(b: &Bundle, c: &Client, name: &str, n: usize, at: SystemTime) -> Vec<FireReport> {
    let mut blocker = b.db.connect().await.unwrap();
    let tx = blocker.transaction().await.unwrap();
    tx.execute(
        &format!(
            "SELECT 1 FROM \"{}\".schedules WHERE name = $1 FOR UPDATE",
            b.db.schema()
        ),
        &[&name],
    )
    .await
    .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            run_once(&c, &cfg(), Some(at)).await.unwrap()
        }));
    }
    // Every scheduler has read the schedule and waits for the row lock in its fire.
    eventually(
        secs(20),
        "every scheduler waiting on the row lock",
        || async {
            let waiting: i64 = b
                .raw
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE '%advanced%'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            waiting == n as i64
        },
    )
    .await;
    tx.commit().await.unwrap();
    let mut reports = Vec::new();
    for t in tasks {
        reports.push(t.await.unwrap());
    }
    reports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_schedulers_enqueue_each_fire_once() {
    let b = setup().await;
    let s = Schedule::new("race", EVERY_SECOND, "tick");
    assert_eq!(
        b.client.add_schedule(&s).await.unwrap(),
        ScheduleChange::Added
    );
    let start = cursor(&b, "race").await;
    for round in 1..=3u64 {
        let at = start + secs(2 * round) + Duration::from_millis(500);
        let reports = race(&b, &b.client, "race", 6, at).await;
        let enqueued: u64 = reports.iter().map(|r| r.enqueued).sum();
        let conflicts: u64 = reports.iter().map(|r| r.conflicts).sum();
        assert_eq!((enqueued, conflicts), (2, 5), "round {round}: {reports:?}");
    }
    let got = fires(&b, "race").await;
    let want: Vec<SystemTime> = (1..=6).map(|i| start + secs(i)).collect();
    assert_eq!(got, want, "every fire once, none missing");
}

/// The negative control: the same race without the compare-and-set enqueues each fire once
/// per scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_compare_and_set_racing_schedulers_duplicate_fires() {
    let b = setup().await;
    let unfenced = Client::builder(b.db.url())
        .schema(b.db.schema())
        .pool_size(8)
        .unfenced_for_negative_control()
        .build()
        .unwrap();
    let s = Schedule::new("race", EVERY_SECOND, "tick");
    unfenced.add_schedule(&s).await.unwrap();
    let start = cursor(&b, "race").await;
    let reports = race(&b, &unfenced, "race", 4, start + secs(2)).await;
    let enqueued: u64 = reports.iter().map(|r| r.enqueued).sum();
    assert_eq!(enqueued, 8, "{reports:?}");
    assert_eq!(fires(&b, "race").await.len(), 8);
}

#[tokio::test]
async fn a_new_schedule_does_not_backfill() {
    let b = setup().await;
    // Even a policy that would make up a thousand missed fires finds none before the
    // schedule existed.
    let s = Schedule::new("fresh", EVERY_SECOND, "tick").missed(Missed::CatchUp(1000));
    b.client.add_schedule(&s).await.unwrap();
    let registered = cursor(&b, "fresh").await;
    let now: SystemTime = b.raw.query_one("SELECT now()", &[]).await.unwrap().get(0);
    assert!(registered <= now && now.duration_since(registered).unwrap() < secs(2));
    let r = run_once(&b.client, &cfg(), Some(registered)).await.unwrap();
    assert_eq!((r.schedules, r.enqueued, r.missed), (1, 0, 0), "{r:?}");
    assert!(fires(&b, "fresh").await.is_empty());
    assert_eq!(r.next_fire_in, Some(secs(1)));
    let r = run_once(&b.client, &cfg(), Some(registered + secs(1)))
        .await
        .unwrap();
    assert_eq!(r.enqueued, 1);
    assert_eq!(fires(&b, "fresh").await, vec![registered + secs(1)]);
}

#[tokio::test]
async fn pause_resume_remove_and_run_now() {
    let b = setup().await;
    let s = Schedule::new("p", EVERY_SECOND, "tick")
        .queue("periodic")
        .payload(&serde_json::json!({ "n": 1 }))
        .priority(-2)
        .max_attempts(3);
    b.client.add_schedule(&s).await.unwrap();
    let start = cursor(&b, "p").await;

    assert!(b.client.pause_schedule("p").await.unwrap());
    let r = run_once(&b.client, &cfg(), Some(start + secs(5)))
        .await
        .unwrap();
    assert_eq!(
        (r.schedules, r.enqueued),
        (0, 0),
        "a paused schedule is not looked at"
    );
    let info = &b.client.schedules().await.unwrap()[0];
    assert!(info.paused && info.next_fire_at.is_none());

    // run-now works on a paused schedule and leaves the cursor alone.
    let id = b.client.run_schedule_now("p").await.unwrap().unwrap();
    let job = b.client.get(id).await.unwrap().unwrap();
    assert_eq!(job.schedule.as_deref(), Some("p"));
    assert_eq!(
        (
            job.queue.as_str(),
            job.kind.as_str(),
            job.priority,
            job.max_attempts
        ),
        ("periodic", "tick", -2, 3)
    );
    assert_eq!(job.payload, r#"{"n": 1}"#);
    assert_eq!(cursor(&b, "p").await, start);

    // Resuming moves the cursor to the present: nothing of the paused time is made up.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(b.client.resume_schedule("p").await.unwrap());
    let resumed = cursor(&b, "p").await;
    assert!(resumed > start, "the cursor moved to the resumption");
    let r = run_once(&b.client, &cfg(), Some(resumed + secs(2)))
        .await
        .unwrap();
    assert_eq!(r.enqueued, 2);
    let got = fires(&b, "p").await;
    assert_eq!(got.len(), 3, "the run-now job and two fires after resuming");
    assert!(got
        .iter()
        .filter(|t| **t > start)
        .all(|t| *t > resumed || *t == got[0]));

    assert!(b.client.remove_schedule("p").await.unwrap());
    assert!(!b.client.remove_schedule("p").await.unwrap());
    assert!(b.client.schedules().await.unwrap().is_empty());
    assert_eq!(b.client.run_schedule_now("p").await.unwrap(), None);
    assert!(!b.client.pause_schedule("p").await.unwrap());
    let r = run_once(&b.client, &cfg(), Some(resumed + secs(60)))
        .await
        .unwrap();
    assert_eq!((r.schedules, r.enqueued), (0, 0));
    assert_eq!(b.count("schedule = 'p'").await, 3, "its jobs stay");
}

#[tokio::test]
async fn missed_fires_follow_the_schedules_policy() {
    let b = setup().await;
    for (name, missed) in [
        ("skip", Missed::Skip),
        ("latest", Missed::Latest),
        ("three", Missed::CatchUp(3)),
    ] {
        let s = Schedule::new(name, EVERY_SECOND, "tick").missed(missed);
        b.client.add_schedule(&s).await.unwrap();
    }
    let start = cursor(&b, "skip").await.max(cursor(&b, "three").await);
    // Back after 100 s with no scheduler: the last 10 s of fires are on time (11 of them,
    // grace 10 s), the rest were missed.
    let r = run_once(&b.client, &cfg(), Some(start + secs(100)))
        .await
        .unwrap();
    assert_eq!(r.schedules, 3);
    let on_time = 11;
    assert_eq!(fires(&b, "skip").await.len(), on_time);
    assert_eq!(fires(&b, "latest").await.len(), on_time + 1);
    assert_eq!(fires(&b, "three").await.len(), on_time + 3);
    let latest = fires(&b, "latest").await;
    assert_eq!(latest[0], start + secs(89), "the most recent missed fire");
    for name in ["skip", "latest", "three"] {
        assert_eq!(cursor(&b, name).await, start + secs(100));
    }
    assert_eq!(r.enqueued, 3 * on_time as u64 + 1 + 3);
    assert!(r.missed >= 3 * 85, "{r:?}");
}

#[tokio::test]
async fn re_registering_updates_the_definition_and_keeps_the_cursor() {
    let b = setup().await;
    let s = Schedule::new("r", EVERY_SECOND, "tick");
    assert_eq!(
        b.client.add_schedule(&s).await.unwrap(),
        ScheduleChange::Added
    );
    let start = cursor(&b, "r").await;
    run_once(&b.client, &cfg(), Some(start + secs(3)))
        .await
        .unwrap();
    assert_eq!(cursor(&b, "r").await, start + secs(3));
    assert_eq!(
        b.client.add_schedule(&s).await.unwrap(),
        ScheduleChange::Unchanged
    );
    b.client.pause_schedule("r").await.unwrap();
    let changed = s
        .clone()
        .payload(&serde_json::json!({ "v": 2 }))
        .queue("q2");
    assert_eq!(
        b.client.add_schedule(&changed).await.unwrap(),
        ScheduleChange::Updated
    );
    let info = &b.client.schedules().await.unwrap()[0];
    assert_eq!(info.last_fire_at, start + secs(3), "the cursor is kept");
    assert!(info.paused, "and so is the paused flag");
    assert_eq!(
        (info.queue.as_str(), info.payload.as_str()),
        ("q2", r#"{"v": 2}"#)
    );

    // Bad input is refused before any SQL and changes nothing.
    for bad in [
        Schedule::new("r", "*/0 * * * *", "tick"),
        Schedule::new("r", EVERY_SECOND, "tick").time_zone("Nowhere/Land"),
        Schedule::new("r", EVERY_SECOND, "tick").payload_json("{"),
    ] {
        let e = b.client.add_schedule(&bad).await.unwrap_err();
        assert!(e.is_invalid_input(), "{e}");
    }
    assert_eq!(b.client.schedules().await.unwrap()[0].queue, "q2");
}

/// A worker registers its schedules from code and fires them; stopped and started again
/// (re-registering the same schedule), it goes on from the cursor: every fire in the span
/// once, none missing, none replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_worker_goes_on_from_the_cursor() {
    let b = setup().await;
    let worker = || {
        Worker::builder(
            client(&b, "sched"),
            Registry::new().register_handler("tick", JobOptions::default(), noop()),
        )
        .queue("default", 4)
        .periodic(Schedule::new("w", EVERY_SECOND, "tick"))
        .build()
        .unwrap()
    };
    for run in 0..2 {
        let before = fires(&b, "w").await.len();
        let (stop, h) = spawn_worker(worker());
        eventually(secs(15), "three fires", || async {
            fires(&b, "w").await.len() >= before + 3
        })
        .await;
        stop.send(()).unwrap();
        h.await.unwrap();
        if run == 0 {
            // Down for two seconds: within the grace period, so nothing is missed.
            tokio::time::sleep(secs(2)).await;
        }
    }
    let got = fires(&b, "w").await;
    assert!(got.len() >= 6, "{got:?}");
    for pair in got.windows(2) {
        assert_eq!(
            pair[1].duration_since(pair[0]).unwrap(),
            secs(1),
            "a fire is missing or repeated: {got:?}"
        );
    }
    assert_eq!(*got.last().unwrap(), cursor(&b, "w").await);
}

/// With the poll off and no schedule, the scheduler sleeps until told of a change: a new
/// schedule's notification wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_schedule_wakes_a_sleeping_scheduler() {
    let b = setup().await;
    let w = Worker::builder(
        client(&b, "sched"),
        Registry::new().register_handler("tick", JobOptions::default(), noop()),
    )
    .queue("default", 4)
    .poll_interval(None)
    .build()
    .unwrap();
    let (stop, h) = spawn_worker(w);
    // Let it start, find no schedule and go to sleep.
    tokio::time::sleep(secs(2)).await;
    b.client
        .add_schedule(&Schedule::new("late", EVERY_SECOND, "tick"))
        .await
        .unwrap();
    eventually(secs(5), "a fire of the new schedule", || async {
        !fires(&b, "late").await.is_empty()
    })
    .await;
    stop.send(()).unwrap();
    h.await.unwrap();
}

/// A role of this test's own for a worker's LISTEN connection, and a listen URL that logs in
/// with it: `ALTER ROLE .. NOLOGIN` keeps that connection from coming back for as long as a
/// test needs, while the worker's pool (another role) goes on.
async fn listen_role(b: &Bundle) -> (String, String) {
    let role = format!("{}_listen", b.db.schema());
    b.raw
        .batch_execute(&format!("CREATE ROLE \"{role}\" LOGIN"))
        .await
        .unwrap();
    let cfg: tokio_postgres::Config = b.db.url().parse().unwrap();
    let from = format!("://{}@", cfg.get_user().unwrap());
    assert!(b.db.url().contains(&from), "{}", b.db.url());
    let url = b.db.url().replacen(&from, &format!("://{role}@"), 1);
    (role, url)
}

async fn set_login(b: &Bundle, role: &str, login: bool) {
    let what = if login { "LOGIN" } else { "NOLOGIN" };
    b.raw
        .batch_execute(&format!("ALTER ROLE \"{role}\" {what}"))
        .await
        .unwrap();
}

/// With the poll off, a schedule added while the worker's LISTEN connection is down sent its
/// notification to nobody; once the listener is back the scheduler reads the schedules
/// again, and the schedule fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_added_while_listen_is_down_fires_after_the_reconnect() {
    let b = setup().await;
    let (role, listen) = listen_role(&b).await;
    let w = Worker::builder(
        client(&b, "sched-reconnect"),
        Registry::new().register_handler("tick", JobOptions::default(), noop()),
    )
    .queue("default", 4)
    .poll_interval(None)
    .listen_url(&listen)
    .build()
    .unwrap();
    let mut events = w.subscribe();
    let (stop, h) = spawn_worker(w);
    listening(&mut events, secs(10)).await;
    // Its first round found no schedule: the scheduler sleeps with no timer.
    tokio::time::sleep(secs(1)).await;
    let first = listener_pid(&b).await.unwrap();

    set_login(&b, &role, false).await;
    b.raw
        .execute("SELECT pg_terminate_backend($1)", &[&first])
        .await
        .unwrap();
    eventually(secs(10), "the LISTEN connection gone", || async {
        listener_pid(&b).await.is_none()
    })
    .await;
    b.client
        .add_schedule(&Schedule::new("during", EVERY_SECOND, "tick"))
        .await
        .unwrap();
    // Down a while longer (its reconnects are refused), then let it back.
    tokio::time::sleep(secs(1)).await;
    set_login(&b, &role, true).await;
    eventually(secs(15), "the LISTEN connection back", || async {
        listener_pid(&b).await.is_some_and(|p| p != first)
    })
    .await;
    eventually(
        secs(5),
        "a fire of the schedule added meanwhile",
        || async { !fires(&b, "during").await.is_empty() },
    )
    .await;
    stop.send(()).unwrap();
    h.await.unwrap();
    let _ = b.raw.batch_execute(&format!("DROP ROLE \"{role}\"")).await;
}

/// With the poll off, a scheduler whose LISTEN connection stays down polls at the fallback
/// interval (5 s) meanwhile, as the producers do: a schedule added during the outage fires
/// before the listener is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_polls_while_listen_stays_down() {
    let b = setup().await;
    let (role, listen) = listen_role(&b).await;
    let w = Worker::builder(
        client(&b, "sched-deaf"),
        Registry::new().register_handler("tick", JobOptions::default(), noop()),
    )
    .queue("default", 4)
    .poll_interval(None)
    .listen_url(&listen)
    .build()
    .unwrap();
    let mut events = w.subscribe();
    let (stop, h) = spawn_worker(w);
    listening(&mut events, secs(10)).await;
    tokio::time::sleep(secs(1)).await;
    let first = listener_pid(&b).await.unwrap();

    set_login(&b, &role, false).await;
    b.raw
        .execute("SELECT pg_terminate_backend($1)", &[&first])
        .await
        .unwrap();
    eventually(secs(10), "the LISTEN connection gone", || async {
        listener_pid(&b).await.is_none()
    })
    .await;
    b.client
        .add_schedule(&Schedule::new("during", EVERY_SECOND, "tick"))
        .await
        .unwrap();
    // The fallback poll is 5 s; a round takes well under a second.
    eventually(secs(10), "a fire while LISTEN is down", || async {
        !fires(&b, "during").await.is_empty()
    })
    .await;
    assert!(listener_pid(&b).await.is_none(), "the listener came back");
    set_login(&b, &role, true).await;
    stop.send(()).unwrap();
    h.await.unwrap();
    let _ = b.raw.batch_execute(&format!("DROP ROLE \"{role}\"")).await;
}

/// Moves schedule `name`'s cursor to the whole hour before the last one, as if an hourly
/// schedule had last fired then (its workers were down for the last hour's fire, a deploy
/// say); returns the last whole hour.
async fn last_fired_two_hours_ago(b: &Bundle, name: &str) -> SystemTime {
    b.raw
        .query_one(
            "UPDATE schedules SET last_fire_at = date_trunc('hour', now()) - interval '1 hour' \
             WHERE name = $1 RETURNING last_fire_at + interval '1 hour'",
            &[&name],
        )
        .await
        .unwrap()
        .get(0)
}

async fn updated_at(b: &Bundle, name: &str) -> SystemTime {
    b.raw
        .query_one("SELECT updated_at FROM schedules WHERE name = $1", &[&name])
        .await
        .unwrap()
        .get(0)
}

/// A worker that registers `schedules` from code, fires what is due once and drains.
async fn register_and_drain(b: &Bundle, schedules: Vec<Schedule>) {
    let mut w = Worker::builder(
        client(b, "sched-redefine"),
        Registry::new().register_handler("tick", JobOptions::default(), noop()),
    )
    .queue("default", 4);
    for s in schedules {
        w = w.periodic(s);
    }
    let w = w.build().unwrap();
    tokio::time::timeout(secs(30), w.run_until_idle())
        .await
        .unwrap()
        .unwrap();
}

/// A deploy that changes a schedule's cron expression or time zone: the worker re-registers
/// it at start, and its cursor starts at the change, so nothing that was not due under the
/// new timing since the change is enqueued (not the fires the new timing would have had
/// since the old cursor, nor the fire the old timing had left due).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_cron_or_time_zone_starts_the_cursor_at_the_change() {
    let b = setup().await;
    let hourly = |name: &str| Schedule::new(name, "0 * * * *", "tick");
    for name in ["cron", "zone"] {
        b.client.add_schedule(&hourly(name)).await.unwrap();
        last_fired_two_hours_ago(&b, name).await;
    }
    // Every second instead of hourly; hourly in a zone 5:45 ahead of UTC (at :15 UTC).
    register_and_drain(
        &b,
        vec![
            Schedule::new("cron", EVERY_SECOND, "tick"),
            hourly("zone").time_zone("Asia/Kathmandu"),
        ],
    )
    .await;
    let mut problems = Vec::new();
    for name in ["cron", "zone"] {
        let changed = updated_at(&b, name).await;
        let early: Vec<_> = fires(&b, name)
            .await
            .into_iter()
            .filter(|t| *t <= changed)
            .collect();
        if !early.is_empty() {
            problems.push(format!(
                "{name}: {} fires from before the change: {early:?}",
                early.len()
            ));
        }
        if cursor(&b, name).await + secs(2) <= changed {
            problems.push(format!("{name}: the cursor is not at the change"));
        }
    }
    assert!(problems.is_empty(), "{problems:?}");
    // The library's answer says so; an unchanged timing is not started over.
    let retimed = Schedule::new("cron", "*/2 * * * * *", "tick");
    assert_eq!(
        b.client.add_schedule(&retimed).await.unwrap(),
        ScheduleChange::Retimed
    );
    assert_eq!(
        b.client.add_schedule(&retimed).await.unwrap(),
        ScheduleChange::Unchanged
    );
}

/// A deploy that changes only a schedule's payload (and priority) keeps its cursor: the fire
/// the workers missed while down still runs once under `latest`, with the new payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_payload_keeps_the_cursor() {
    let b = setup().await;
    let hourly = Schedule::new("p", "0 * * * *", "tick");
    b.client.add_schedule(&hourly).await.unwrap();
    let missed = last_fired_two_hours_ago(&b, "p").await;
    let edited = hourly
        .clone()
        .payload(&serde_json::json!({ "v": 2 }))
        .priority(3);
    assert_eq!(
        b.client.add_schedule(&edited).await.unwrap(),
        ScheduleChange::Updated
    );
    register_and_drain(&b, vec![edited]).await;
    assert_eq!(fires(&b, "p").await, vec![missed], "the missed fire, once");
    assert_eq!(cursor(&b, "p").await, missed);
    let payload: String = b
        .raw
        .query_one("SELECT payload::text FROM jobs WHERE schedule = 'p'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(payload, r#"{"v": 2}"#);
}
