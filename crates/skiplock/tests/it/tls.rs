//! TLS: a server of its own with `ssl = on` and a `hostssl`-only pg_hba.conf, a certificate
//! for `localhost` signed by a CA the test makes; `127.0.0.1` is then the wrong host name.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use skiplock::{Client, JobContext, JobError, JobOptions, NewJob, Registry, Worker};
use skiplock_testdb::{LocalCluster, StartOptions};

struct TlsServer {
    port: u16,
    /// The CA that signed the server's certificate.
    ca: PathBuf,
    /// Another CA, that signed nothing the server has.
    other_ca: PathBuf,
}

static SERVER: OnceLock<TlsServer> = OnceLock::new();

fn server() -> &'static TlsServer {
    SERVER.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir =
            std::env::temp_dir().join(format!("skiplock-test-tls-{}-{nanos}", std::process::id()));
        let cluster = LocalCluster::new(&dir).unwrap();
        cluster.init().unwrap();
        cluster.remove_on_exit().unwrap();

        let ca = ca("skiplock test CA");
        let other = ca_params("another CA");
        let other_key = rcgen::KeyPair::generate().unwrap();
        let other_cert = other.self_signed(&other_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        cluster
            .write_file("server.crt", cert.pem().as_bytes())
            .unwrap();
        cluster
            .write_file("server.key", key.serialize_pem().as_bytes())
            .unwrap();
        cluster
            .write_file(
                "pg_hba.conf",
                b"local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
            )
            .unwrap();
        let port = cluster
            .start(&StartOptions {
                port: None,
                unsafe_fast: true,
                settings: vec![
                    ("ssl".into(), "on".into()),
                    ("ssl_cert_file".into(), "server.crt".into()),
                    ("ssl_key_file".into(), "server.key".into()),
                ],
            })
            .unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let other_ca = dir.join("other-ca.pem");
        std::fs::write(&other_ca, other_cert.pem()).unwrap();
        TlsServer {
            port,
            ca: ca_file,
            other_ca,
        }
    })
}

fn ca_params(name: &str) -> rcgen::CertificateParams {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, name.to_owned());
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    p
}

fn ca(name: &str) -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    rcgen::CertifiedIssuer::self_signed(ca_params(name), rcgen::KeyPair::generate().unwrap())
        .unwrap()
}

fn url(host: &str, params: &str) -> String {
    let s = server();
    format!("postgres://postgres@{host}:{}/postgres?{params}", s.port)
}

fn client(url: &str, schema: &str) -> Client {
    Client::builder(url)
        .schema(schema)
        .pool_size(4)
        .build()
        .unwrap()
}

/// Waits (up to 20 s) for the worker's LISTEN connection named `app`, and checks that it is
/// encrypted.
async fn assert_listener_encrypted(c: &Client, app: &str) {
    let raw = c.pool().get().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let row = raw
            .query_opt(
                "SELECT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
                 WHERE a.application_name = $1 \
                   AND (a.query ILIKE 'LISTEN%' OR a.query LIKE '%/waiting/%')",
                &[&app],
            )
            .await
            .unwrap();
        if let Some(row) = row {
            assert!(
                row.get::<_, bool>(0),
                "the LISTEN connection is not encrypted"
            );
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no LISTEN connection"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the pooled connection the client hands out is encrypted.
async fn encrypted(client: &Client) -> skiplock::Result<bool> {
    let conn = client
        .pool()
        .get()
        .await
        .map_err(|source| skiplock::Error::Pool { op: "test", source })?;
    Ok(conn
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0))
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[tokio::test]
async fn require_connects_encrypted() {
    let c = client(&url("127.0.0.1", "sslmode=require"), "tls_require");
    c.migrate().await.unwrap();
    assert!(encrypted(&c).await.unwrap());
    c.enqueue(&NewJob::new("k", &1)).await.unwrap();
}

#[tokio::test]
async fn the_default_prefer_uses_tls_when_the_server_offers_it() {
    let s = server();
    let c = client(
        &format!("postgres://postgres@127.0.0.1:{}/postgres", s.port),
        "tls_prefer",
    );
    assert!(encrypted(&c).await.unwrap());
}

#[tokio::test]
async fn verify_full_with_the_right_ca_connects() {
    let ca = server().ca.display().to_string();
    let c = client(
        &url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        "tls_full",
    );
    assert!(encrypted(&c).await.unwrap());
    // The libpq key=value form too.
    let kv = format!(
        "host=localhost port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert='{ca}'",
        server().port
    );
    assert!(encrypted(&client(&kv, "tls_full_kv")).await.unwrap());
}

#[tokio::test]
async fn verify_full_refuses_a_certificate_for_another_host() {
    let ca = server().ca.display().to_string();
    let c = client(
        &url(
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        "tls_wrong_host",
    );
    let e = encrypted(&c).await.unwrap_err();
    let msg = chain(&e);
    assert!(msg.contains("certificate not valid for name"), "{msg}");
}

#[tokio::test]
async fn verify_full_refuses_a_certificate_of_another_ca() {
    let other = server().other_ca.display().to_string();
    let c = client(
        &url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={other}"),
        ),
        "tls_other_ca",
    );
    let msg = chain(&encrypted(&c).await.unwrap_err());
    assert!(msg.contains("UnknownIssuer"), "{msg}");
}

#[tokio::test]
async fn verify_ca_accepts_the_cas_certificate_for_another_host() {
    let ca = server().ca.display().to_string();
    let c = client(
        &url("127.0.0.1", &format!("sslmode=verify-ca&sslrootcert={ca}")),
        "tls_ca",
    );
    assert!(encrypted(&c).await.unwrap());
}

#[tokio::test]
async fn disable_is_refused_by_a_hostssl_only_server() {
    let c = client(&url("127.0.0.1", "sslmode=disable"), "tls_disable");
    let msg = chain(&encrypted(&c).await.unwrap_err());
    // "no encryption" from PostgreSQL 14 on, "SSL off" before.
    assert!(
        msg.contains("no encryption") || msg.contains("SSL off"),
        "{msg}"
    );
}

#[test]
fn tls_settings_are_checked_when_the_client_is_built() {
    for (params, expect) in [
        (
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "could not be read",
        ),
        ("sslmode=verify-everything", "sslmode=verify-everything"),
        ("sslrootcert=system&sslmode=require", "verify-full"),
        ("sslcert=/c.pem", "not supported"),
    ] {
        let e = Client::builder(format!("postgres://h/db?{params}"))
            .build()
            .unwrap_err();
        assert!(e.is_invalid_input(), "{e}");
        assert!(e.to_string().contains(expect), "{params}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_a_job_over_tls() {
    let ca = server().ca.display().to_string();
    let tls = url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let c = client(&tls, "tls_worker");
    c.migrate().await.unwrap();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let registry = Registry::new().register_handler(
        "k",
        JobOptions::default(),
        move |_p: String, ctx: JobContext| {
            let done = done_tx.clone();
            async move {
                let _ = done.send(ctx.id);
                Ok::<(), JobError>(())
            }
        },
    );
    // No fallback poll: the job is found through the LISTEN connection's notification (or
    // the look every (re)connect of it takes).
    let worker = Worker::builder(c.clone(), registry)
        .queue("default", 2)
        .poll_interval(None)
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    // Wait for the LISTEN connection, then check that it is encrypted.
    assert_listener_encrypted(&c, "skiplock-listener").await;
    let id = c.enqueue(&NewJob::new("k", &1)).await.unwrap();
    let ran = tokio::time::timeout(Duration::from_secs(20), done_rx.recv())
        .await
        .unwrap();
    assert_eq!(ran, Some(id));
    stop.send(()).unwrap();
    let stats = run.await.unwrap().unwrap();
    assert_eq!(stats.done, 1);
}

/// A worker's own `listen_url` is read like the client's URL: its `sslmode` and
/// `sslrootcert` are honoured (verify-full with the CA builds and listens encrypted), and a
/// bad root certificate path is refused when the worker is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_url_has_its_own_tls_settings() {
    let ca = server().ca.display().to_string();
    let plain = url("localhost", "sslmode=require");
    let c = client(&plain, "tls_listen_url");
    c.migrate().await.unwrap();
    let registry = Registry::new().register_handler(
        "k",
        JobOptions::default(),
        |_p: String, _c: JobContext| async { Ok::<(), JobError>(()) },
    );
    let missing = url(
        "localhost",
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
    );
    let err = Worker::builder(c.clone(), registry.clone())
        .queue("default", 1)
        .listen_url(missing)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("ca.pem"), "{err}");

    let listen = url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}&application_name=tls-own-listen-url"),
    );
    let worker = Worker::builder(c.clone(), registry)
        .queue("default", 1)
        .poll_interval(None)
        .listen_url(listen)
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    assert_listener_encrypted(&c, "tls-own-listen-url").await;
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
}

/// The caller's sqlx connection brings its own TLS (sqlx's rustls, in these tests).
#[cfg(feature = "sqlx-0_8")]
#[tokio::test]
async fn enqueue_tx_works_on_a_tls_sqlx_connection() {
    use sqlx::Connection as _;
    let ca = server().ca.display().to_string();
    let tls = url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let c = client(&tls, "tls_sqlx");
    c.migrate().await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&tls).await.unwrap();
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(ssl);
    let mut tx = conn.begin().await.unwrap();
    let id = c.enqueue_tx(&mut *tx, &NewJob::new("k", &1)).await.unwrap();
    tx.commit().await.unwrap();
    assert!(c.get(id).await.unwrap().is_some());
}
