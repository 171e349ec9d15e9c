//! The workflow scenario of `skiplock bench` at tiny sizes: every shape enqueues and runs
//! to the end through a real worker, and the scratch schemas are dropped.
#![allow(clippy::unwrap_used)]

use skiplock_bench::bench::{workflow_enqueue, workflow_throughput, FlowShape, WorkerSetup};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_workflow_shape_enqueues_and_runs_to_the_end() {
    let db = TestDb::new().await;
    let shapes = [
        FlowShape::Plain { jobs: 200 },
        FlowShape::Unlinked { jobs: 200 },
        FlowShape::FanOut { children: 199 },
        FlowShape::Chains {
            chains: 1,
            length: 200,
        },
    ];
    let points = workflow_enqueue(db.url(), db.schema(), &shapes, 2)
        .await
        .unwrap();
    assert_eq!(points.len(), 4);
    for (p, s) in points.iter().zip(shapes) {
        assert_eq!(p.shape, s);
        assert_eq!(p.shape.jobs(), 200);
        assert_eq!(p.runs_ms.len(), 2, "{p:?}");
        assert!(p.best_ms > 0.0 && p.jobs_per_s > 0.0, "{p:?}");
    }

    let setup = WorkerSetup::defaults(20);
    for shape in [
        FlowShape::Plain { jobs: 100 },
        FlowShape::FanOut { children: 99 },
        FlowShape::Chains {
            chains: 5,
            length: 20,
        },
        FlowShape::Chains {
            chains: 1,
            length: 20,
        },
    ] {
        // Every job ends done, or the run fails (a chain whose links were not released
        // would stall and fail, not hang).
        let p = workflow_throughput(db.url(), db.schema(), shape, &setup)
            .await
            .unwrap();
        assert_eq!(p.shape, shape);
        assert!(p.seconds > 0.0, "{p:?}");
        assert!(
            (p.jobs_per_s - shape.jobs() as f64 / p.seconds).abs() < 1e-6,
            "{p:?}"
        );
        assert!(
            (p.ms_per_link - p.seconds * 1000.0 / shape.links() as f64).abs() < 1e-9,
            "{p:?}"
        );
    }
    assert_eq!(left(&db).await, 0, "the scratch schemas are dropped");
}

#[tokio::test]
async fn a_shape_without_jobs_is_refused_before_anything_runs() {
    let db = TestDb::new().await;
    let e = workflow_throughput(
        db.url(),
        db.schema(),
        FlowShape::Chains {
            chains: 0,
            length: 10,
        },
        &WorkerSetup::defaults(10),
    )
    .await
    .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    assert_eq!(left(&db).await, 0);
}
