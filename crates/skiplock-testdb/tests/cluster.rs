//! The harness itself: per-test schemas on the shared server.
#![allow(clippy::unwrap_used)]

use skiplock_testdb::TestDb;

#[tokio::test]
async fn each_test_db_is_a_distinct_schema_on_a_live_server() {
    let a = TestDb::new().await;
    let b = TestDb::new().await;
    assert_ne!(a.schema(), b.schema());
    assert_eq!(a.url(), b.url(), "one server per test process");
    let conn = a.connect().await.unwrap();
    conn.batch_execute(&format!("CREATE SCHEMA \"{}\"", a.schema()))
        .await
        .unwrap();
    let v: String = conn
        .query_one("SHOW server_version", &[])
        .await
        .unwrap()
        .get(0);
    eprintln!("server {v}");
    // CI runs the suite once per PostgreSQL major version and says which it expects.
    if let Ok(major) = std::env::var("SKIPLOCK_EXPECT_PG_MAJOR") {
        assert!(
            v.starts_with(&format!("{major}.")),
            "expected {major}, got {v}"
        );
    }
}
