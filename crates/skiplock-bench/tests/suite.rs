//! The suite of `skiplock bench` at tiny sizes, through its public API: what the observer is
//! told as it goes is what the report holds at the end, the progress of a planned scenario
//! adds up, and options it refuses run nothing.
#![allow(clippy::unwrap_used)]

use skiplock_bench::suite::{self, Header, Observer, Options, Scenario, Section};
use skiplock_testdb::TestDb;

/// The scratch schemas of the benchmarks run under `db`'s schema that are left.
async fn left(db: &TestDb) -> i64 {
    db.connect()
        .await
        .unwrap()
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1",
            &[&format!("{}_bench_%", db.schema())],
        )
        .await
        .unwrap()
        .get(0)
}

/// Everything the suite told, in order.
#[derive(Default)]
struct Recorder {
    points: Vec<serde_json::Value>,
    sections: Vec<Section>,
    planned: Vec<(Scenario, usize)>,
    runs: Vec<String>,
    ran: usize,
}

impl Observer for Recorder {
    fn point(&mut self, point: serde_json::Value) {
        self.points.push(point);
    }

    fn section(&mut self, section: &Section) {
        self.sections.push(section.clone());
    }

    fn planned(&mut self, scenario: Scenario, runs: usize) {
        self.planned.push((scenario, runs));
    }

    fn run(&mut self, what: &str) {
        assert_eq!(
            self.runs.len(),
            self.ran,
            "a run starts before the last one ended"
        );
        self.runs.push(what.to_owned());
    }

    fn ran(&mut self) {
        self.ran += 1;
    }
}

fn quick() -> Options {
    let mut o = Options::default();
    o.quick = true;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_throughput_and_enqueue_scenarios_report_as_they_go_and_at_the_end() {
    let db = TestDb::new().await;
    let mut o = quick();
    o.jobs = Some(300);
    let mut seen = Recorder::default();
    for asked in [Scenario::Throughput, Scenario::Enqueue] {
        let report = suite::run(db.url(), db.schema(), asked, &o, &mut seen)
            .await
            .unwrap();
        assert_eq!(report.sections.len(), 1, "{asked:?}");
        assert_eq!(seen.sections.last(), report.sections.last());
        assert!(!report.targets.is_empty(), "{asked:?}");
        let md = report.markdown(&Header::read(db.url(), "bench throughput --quick").await);
        assert!(md.starts_with("# Benchmarks\n"), "{md}");
        assert!(
            md.contains(&format!("\n## {}\n\n", report.sections[0].title)),
            "{md}"
        );
        assert!(md.contains("\n## Targets\n\n| target | measured | met |\n"));
        assert!(
            !md.contains("PostgreSQL unknown"),
            "the server was asked: {md}"
        );
        if asked == Scenario::Throughput {
            assert!(md.contains("| CPU per job: worker of machine |"), "{md}");
        }
    }
    assert_eq!(
        seen.sections[0].title,
        "Throughput (300 no-op jobs per run)"
    );
    assert_eq!(seen.sections[1].title, "Enqueue");

    // The planned runs are the runs made, each told before and after.
    assert_eq!(seen.planned.len(), 1, "{:?}", seen.planned);
    let (scenario, runs) = seen.planned[0];
    assert_eq!(scenario, Scenario::Throughput);
    assert!(runs > 0);
    assert_eq!(seen.runs.len(), runs, "{:?}", seen.runs);
    assert_eq!(seen.ran, runs);

    // The points, as `skiplock bench --json` prints them.
    let of = |s: &str| seen.points.iter().filter(|p| p["scenario"] == s).count();
    assert!(of("throughput-ceiling") >= 2);
    // pgbench at 1 and 2 clients, each with the lean and the worker's completion, with
    // the claim in turn, larger after a wait by the worker's default and by twice the batch,
    // and with the completion that deletes (quick: one round), where a pgbench is found;
    // every script drains its table.
    let pgbench = if skiplock_bench::pgbench::find().is_some() {
        10
    } else {
        0
    };
    assert_eq!(of("throughput-ceiling-pgbench"), pgbench);
    let deleting: Vec<_> = seen
        .points
        .iter()
        .filter(|p| p["scenario"] == "throughput-ceiling-pgbench")
        .filter(|p| p["completion"] == "worker-delete")
        .collect();
    assert_eq!(deleting.len(), pgbench / 5, "{deleting:?}");
    // Every job completed (none left in the table), none left running.
    assert!(
        deleting
            .iter()
            .all(|p| p["left_running"] == 0 && p["jobs"].as_u64() > Some(0)),
        "{deleting:?}"
    );
    let in_turn: Vec<_> = seen
        .points
        .iter()
        .filter(|p| p["scenario"] == "throughput-ceiling-pgbench")
        .filter(|p| {
            p["completion"] == "worker-in-turn" || p["completion"] == "worker-in-turn-double"
        })
        .collect();
    assert_eq!(in_turn.len(), pgbench * 2 / 5, "{in_turn:?}");
    assert!(
        in_turn
            .iter()
            .all(|p| p["left_running"] == 0 && p["jobs_per_s"].as_f64() > Some(0.0)),
        "{in_turn:?}"
    );
    // Where /proc can be read, each worker run and each pgbench run carries its CPU: the
    // worker's own (this process) or pgbench's (its child), and the machine's.
    if skiplock_bench::cpu::Sample::now().is_some() {
        let runs: Vec<_> = seen
            .points
            .iter()
            .filter(|p| {
                p["scenario"] == "throughput-run" || p["scenario"] == "throughput-ceiling-pgbench"
            })
            .collect();
        assert!(!runs.is_empty());
        for p in runs {
            let busy = p["machine_busy_share"].as_f64().unwrap_or(-1.0);
            assert!((0.0..=1.0).contains(&busy), "{p}");
            assert!(p["cpu_machine_busy_s"].as_f64() >= Some(0.0), "{p}");
            let client = if p["scenario"] == "throughput-run" {
                &p["cpu_own_s"]
            } else {
                &p["cpu_client_s"]
            };
            assert!(client.as_f64() >= Some(0.0), "{p}");
        }
    }
    // Two worker points, one round: each run, then each point's best.
    assert_eq!(of("throughput-run"), 2);
    assert_eq!(of("throughput"), 2);
    assert_eq!(of("throughput-frozen"), 1);
    assert_eq!(of("enqueue"), 4);
    assert_eq!(
        seen.points.len(),
        of("throughput-ceiling") + pgbench + 2 + 2 + 1 + 4
    );
    assert_eq!(left(&db).await, 0, "the scratch schemas are dropped");
}

#[tokio::test]
async fn refused_options_run_nothing() {
    let db = TestDb::new().await;
    let mut o = quick();
    o.sizes = vec![-1];
    let mut seen = Recorder::default();
    let e = suite::run(db.url(), db.schema(), Scenario::All, &o, &mut seen)
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    assert_eq!(e.to_string(), "--sizes must not be negative");
    assert!(seen.points.is_empty() && seen.sections.is_empty() && seen.planned.is_empty());
    // Without the program to start workers from, the processes scenario is refused, and
    // nothing else ran before it.
    let e = suite::run(db.url(), db.schema(), Scenario::All, &quick(), &mut ())
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    assert_eq!(left(&db).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_enqueue_mode_runs_each_round_and_its_best_run_counts() {
    let db = TestDb::new().await;
    let points = skiplock_bench::bench::enqueue(db.url(), db.schema(), 2_000, 2)
        .await
        .unwrap();
    let modes: Vec<(&str, usize)> = points.iter().map(|p| (p.mode.as_str(), p.jobs)).collect();
    assert_eq!(
        modes,
        [
            ("single", 200),
            ("single x8", 200),
            ("batch 1000", 2_000),
            // At least one whole batch.
            ("batch 10000", 10_000),
        ]
    );
    for p in &points {
        assert_eq!(p.runs.len(), 2, "{p:?}");
        assert!(p.runs.iter().all(|r| *r > 0.0), "{p:?}");
        let best = p.runs.iter().copied().fold(0.0, f64::max);
        assert_eq!(p.jobs_per_s, best, "{p:?}");
    }
    assert_eq!(left(&db).await, 0, "the scratch schema is dropped");
}

/// The redo position of the last checkpoint.
async fn redo(raw: &tokio_postgres::Client) -> String {
    raw.query_one("SELECT redo_lsn::text FROM pg_control_checkpoint()", &[])
        .await
        .unwrap()
        .get(0)
}

/// A run's table is filled right after a checkpoint (`bench::checkpoint`), and an enqueue
/// run starts right after one, so that no checkpoint begins while the run is timed; a role
/// that may not checkpoint runs without one instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_starts_after_a_checkpoint_and_a_role_that_may_not_checkpoint_still_runs() {
    let db = TestDb::new().await;
    let raw = db.connect().await.unwrap();

    let before = redo(&raw).await;
    let point = skiplock_bench::bench::throughput(
        db.url(),
        db.schema(),
        50,
        &skiplock_bench::bench::WorkerSetup::defaults(10),
    )
    .await
    .unwrap();
    assert_eq!(point.jobs, 50);
    assert_ne!(
        redo(&raw).await,
        before,
        "no checkpoint came before the run's fill"
    );

    // The enqueue runs too, each after its table is emptied.
    let before = redo(&raw).await;
    let points = skiplock_bench::bench::enqueue(db.url(), db.schema(), 20, 1)
        .await
        .unwrap();
    assert_eq!(points.len(), 4);
    assert_ne!(
        redo(&raw).await,
        before,
        "no checkpoint came before the enqueue runs"
    );

    let role = format!("{}_no_checkpoint", db.schema());
    raw.batch_execute(&format!("CREATE ROLE \"{role}\" LOGIN"))
        .await
        .unwrap();
    let mut cfg: tokio_postgres::Config = db.url().parse().unwrap();
    cfg.user(&role);
    let as_role = skiplock::Client::builder_from_config(cfg)
        .schema(db.schema())
        .pool_size(1)
        .build()
        .unwrap();
    let refused = skiplock_bench::bench::checkpoint(&as_role).await;
    drop(as_role);
    raw.batch_execute(&format!("DROP ROLE \"{role}\""))
        .await
        .unwrap();
    refused.unwrap();
}
