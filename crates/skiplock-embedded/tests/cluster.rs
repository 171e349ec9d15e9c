//! A cluster kept in a folder: created, started, reported on and stopped.
#![allow(clippy::unwrap_used)]

use skiplock_embedded::{find_pg_bin, LocalCluster, StartOptions};

#[test]
fn a_local_cluster_inits_starts_reports_and_stops() {
    if std::env::var_os("DATABASE_URL").is_some() && find_pg_bin().is_err() {
        return; // no local server binaries to test with
    }
    let dir = std::env::temp_dir().join(format!("skiplock-cluster-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = LocalCluster::new(&dir).unwrap();
    assert!(!cluster.is_initialized());
    assert_eq!(cluster.running_port(), None);
    cluster.init().unwrap();
    assert!(cluster.is_initialized());
    let port = cluster
        .start(&StartOptions {
            unsafe_fast: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(cluster.running_port(), Some(port));
    let url = LocalCluster::url(port, "postgres");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let one: i32 = c.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);
    });
    cluster.stop(false).unwrap();
    assert_eq!(cluster.running_port(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}
