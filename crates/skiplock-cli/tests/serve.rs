//! `skiplock serve` as a user runs it: the real binary, a real server, HTTP over a socket.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// A running `serve`, stopped when dropped (also when a test fails before its end).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

use skiplock_testdb::TestDb;

/// `admin:s3cret`, base64.
const GOOD: &str = "YWRtaW46czNjcmV0";
/// `admin:wrong`, base64.
const BAD: &str = "YWRtaW46d3Jvbmc=";

fn cmd(db: &TestDb, args: &[&str]) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin!("skiplock"));
    c.env_remove("DATABASE_URL")
        .env_remove("SKIPLOCK_HOME")
        .env_remove("SKIPLOCK_WEB_USER")
        .env_remove("SKIPLOCK_WEB_PASSWORD")
        .env_remove("SKIPLOCK_ALLOWED_HOSTS")
        .args(["--database-url", db.url(), "--schema", db.schema()])
        .args(args);
    c
}

/// Starts `serve` on a free port and returns it with its address.
fn serve(db: &TestDb, extra: &[&str], auth: bool) -> (Server, String) {
    serve_with(
        cmd(
            db,
            &[&["serve", "--addr", "127.0.0.1:0"][..], extra].concat(),
        ),
        auth,
    )
}

/// Starts `c` (a `serve` command) and returns it with the address it prints.
fn serve_with(mut c: Command, auth: bool) -> (Server, String) {
    if auth {
        c.env("SKIPLOCK_WEB_USER", "admin")
            .env("SKIPLOCK_WEB_PASSWORD", "s3cret");
    }
    let mut child = Server(
        c.stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    (child, addr)
}

/// One HTTP/1.1 request; the status code and the whole answer.
fn http(addr: &str, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    http_to(addr, addr, method, path, headers)
}

/// One HTTP/1.1 request to `addr` with `host` in its Host header.
fn http_to(addr: &str, host: &str, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    if method == "POST" {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 0\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out[9..12].parse().unwrap();
    (code, out)
}

#[tokio::test]
async fn serve_refuses_a_public_address_without_credentials() {
    let db = TestDb::new().await;
    let o = cmd(&db, &["serve", "--addr", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0") && err.contains("SKIPLOCK_WEB_USER"),
        "{err}"
    );
    let o = cmd(&db, &["serve"])
        .env("SKIPLOCK_WEB_USER", "admin")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("set both"));
}

#[tokio::test]
async fn serve_asks_for_the_password_and_honours_read_only() {
    let db = TestDb::new().await;
    let m = cmd(&db, &["migrate"]).output().unwrap();
    assert!(m.status.success());
    let e = cmd(&db, &["enqueue", "--kind", "k", "{}"])
        .output()
        .unwrap();
    assert!(e.status.success(), "{}", String::from_utf8_lossy(&e.stderr));

    let (child, addr) = serve(&db, &[], true);
    let (code, out) = http(&addr, "GET", "/", &[]);
    assert_eq!(code, 401);
    assert!(
        out.contains("www-authenticate: Basic realm=\"skiplock\""),
        "{out}"
    );
    assert_eq!(
        http(&addr, "GET", "/", &[&format!("Authorization: Basic {BAD}")]).0,
        401
    );
    let (code, out) = http(
        &addr,
        "GET",
        "/",
        &[&format!("Authorization: Basic {GOOD}")],
    );
    assert_eq!(code, 200, "{out}");
    assert!(out.contains("Queues") && out.contains("admin"));
    // Full access: cancel the job.
    let (code, _) = http(
        &addr,
        "POST",
        "/jobs/1/cancel",
        &[&format!("Authorization: Basic {GOOD}")],
    );
    assert_eq!(code, 303);
    drop(child);

    let (child, addr) = serve(&db, &["--read-only"], true);
    let (code, out) = http(
        &addr,
        "POST",
        "/jobs/1/retry",
        &[&format!("Authorization: Basic {GOOD}")],
    );
    assert_eq!(code, 403, "{out}");
    let (code, out) = http(
        &addr,
        "GET",
        "/jobs/1",
        &[&format!("Authorization: Basic {GOOD}")],
    );
    assert_eq!(code, 200);
    assert!(
        out.contains("cancelled") && out.contains("read-only"),
        "{out}"
    );
    drop(child);
}

/// Whether queue `q` is paused, as `queue list` reports it.
fn paused(db: &TestDb, q: &str) -> bool {
    let o = cmd(db, &["queue", "list"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .any(|l| l.split_whitespace().next() == Some(q) && l.contains("paused"))
}

/// A rebinding page's requests (its own name in Host and Origin, same-origin as the browser
/// sees it) get neither a payload nor an action; loopback names get both.
#[tokio::test]
async fn serve_without_credentials_answers_only_loopback_hosts() {
    let db = TestDb::new().await;
    assert!(cmd(&db, &["migrate"]).output().unwrap().status.success());
    let e = cmd(
        &db,
        &["enqueue", "--queue", "mail", "{\"token\": \"p4yl0ad\"}"],
    )
    .output()
    .unwrap();
    assert!(e.status.success(), "{}", String::from_utf8_lossy(&e.stderr));
    let p = cmd(&db, &["queue", "pause", "mail"]).output().unwrap();
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    assert!(paused(&db, "mail"));

    let (child, addr) = serve(&db, &[], false);
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let evil = format!("evil.example:{port}");
    let forged = [
        format!("Origin: http://{evil}"),
        "Sec-Fetch-Site: same-origin".to_owned(),
    ];
    let forged: Vec<&str> = forged.iter().map(String::as_str).collect();
    let (code, out) = http_to(&addr, &evil, "GET", "/jobs/1", &forged);
    assert_eq!(code, 421, "{out}");
    assert!(!out.contains("p4yl0ad"), "{out}");
    assert!(
        out.contains("does not answer for the Host \"evil.example:")
            && out.contains("--allowed-host"),
        "{out}"
    );
    let (code, out) = http_to(&addr, &evil, "POST", "/queues/mail/resume", &forged);
    assert_eq!(code, 421, "{out}");
    assert!(paused(&db, "mail"), "a forged Host resumed the queue");
    // A target in absolute form names the host too.
    let absolute = format!("http://{evil}/jobs/1");
    let (code, out) = http_to(&addr, &format!("localhost:{port}"), "GET", &absolute, &[]);
    assert_eq!(code, 421, "{out}");
    assert!(!out.contains("p4yl0ad"), "{out}");
    // Names that only look local are not.
    for host in ["localhost.evil.example", "127.0.0.1.nip.io", "evil.example"] {
        assert_eq!(http_to(&addr, host, "GET", "/", &[]).0, 421, "{host}");
    }
    for host in [
        format!("localhost:{port}"),
        format!("LOCALHOST.:{port}"),
        format!("127.0.0.1:{port}"),
        format!("127.1.2.3:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_owned(),
    ] {
        let (code, out) = http_to(&addr, &host, "GET", "/jobs/1", &[]);
        assert_eq!(code, 200, "{host}: {out}");
        assert!(out.contains("p4yl0ad"), "{host}");
    }
    let (code, out) = http_to(
        &addr,
        &format!("localhost:{port}"),
        "POST",
        "/queues/mail/resume",
        &["Sec-Fetch-Site: same-origin"],
    );
    assert_eq!(code, 303, "{out}");
    assert!(!paused(&db, "mail"));
    drop(child);
}

#[tokio::test]
async fn serve_answers_the_hosts_it_is_told_to() {
    let db = TestDb::new().await;
    assert!(cmd(&db, &["migrate"]).output().unwrap().status.success());
    let (child, addr) = serve(&db, &["--allowed-host", "dash.internal"], false);
    assert_eq!(http_to(&addr, "dash.internal:8441", "GET", "/", &[]).0, 200);
    assert_eq!(http_to(&addr, "Dash.Internal", "GET", "/", &[]).0, 200);
    assert_eq!(http_to(&addr, "evil.example", "GET", "/", &[]).0, 421);
    drop(child);

    let mut c = cmd(&db, &["serve", "--addr", "127.0.0.1:0"]);
    c.env("SKIPLOCK_ALLOWED_HOSTS", "a.internal,b.internal");
    let (child, addr) = serve_with(c, false);
    assert_eq!(http_to(&addr, "b.internal", "GET", "/", &[]).0, 200);
    assert_eq!(http_to(&addr, "c.internal", "GET", "/", &[]).0, 421);
    drop(child);

    // With credentials, any Host passes unless names are given.
    let (child, addr) = serve(&db, &[], true);
    let auth = format!("Authorization: Basic {GOOD}");
    assert_eq!(http_to(&addr, "dash.example", "GET", "/", &[&auth]).0, 200);
    drop(child);

    for bad in ["dash.internal:8080", "", "bad name", "-x.example"] {
        let arg = format!("--allowed-host={bad}");
        let o = cmd(&db, &["serve", &arg]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("--allowed-host") && err.contains("without a port"),
            "{bad:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// One HTTP/1.1 GET from the local address `from`.
async fn get_from(from: &str, addr: &str, headers: &[&str]) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(from.parse().unwrap()).unwrap();
    let mut s = sock.connect(addr.parse().unwrap()).await.unwrap();
    let mut req = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    (out[9..12].parse().unwrap(), out)
}

#[tokio::test]
async fn serve_throttles_failed_sign_ins_per_address() {
    let db = TestDb::new().await;
    assert!(cmd(&db, &["migrate"]).output().unwrap().status.success());
    let (child, addr) = serve(&db, &[], true);
    let bad = format!("Authorization: Basic {BAD}");
    let good = format!("Authorization: Basic {GOOD}");
    // Asking without credentials is not a failure.
    for _ in 0..10 {
        assert_eq!(http(&addr, "GET", "/", &[]).0, 401);
    }
    for i in 0..5 {
        assert_eq!(http(&addr, "GET", "/", &[&bad]).0, 401, "failure {i}");
    }
    for h in [&bad, &good] {
        let (code, out) = http(&addr, "GET", "/", &[h]);
        assert_eq!(code, 429, "{out}");
        let retry: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("retry-after: "))
            .unwrap_or_else(|| panic!("no Retry-After: {out}"))
            .trim()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
        assert!(out.contains("too many failed sign-ins"), "{out}");
    }
    // Another address is not held back by this one's failures.
    let (code, out) = get_from("127.0.0.2:0", &addr, &[&good]).await;
    assert_eq!(code, 200, "{out}");
    // A correct sign-in clears its address's failures.
    for _ in 0..4 {
        assert_eq!(get_from("127.0.0.3:0", &addr, &[&bad]).await.0, 401);
    }
    assert_eq!(get_from("127.0.0.3:0", &addr, &[&good]).await.0, 200);
    for _ in 0..4 {
        assert_eq!(get_from("127.0.0.3:0", &addr, &[&bad]).await.0, 401);
    }
    assert_eq!(get_from("127.0.0.3:0", &addr, &[&good]).await.0, 200);
    drop(child);
}

#[tokio::test]
async fn serve_listens_on_a_host_name() {
    let db = TestDb::new().await;
    assert!(cmd(&db, &["migrate"]).output().unwrap().status.success());
    let (child, addr) = serve_with(cmd(&db, &["serve", "--addr", "localhost:0"]), false);
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let (code, out) = http_to(&addr, &format!("localhost:{port}"), "GET", "/", &[]);
    assert_eq!(code, 200, "{out}");
    drop(child);
    for (bad, says) in [
        ("localhost", "expected HOST:PORT"),
        ("localhost:http", "expected HOST:PORT"),
        ("no-such-host.invalid:8080", "cannot resolve"),
    ] {
        let o = cmd(&db, &["serve", "--addr", bad]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says) && err.contains("--addr"), "{bad}: {err}");
    }
}
