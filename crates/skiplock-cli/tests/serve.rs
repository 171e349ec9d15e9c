//! `skiplock serve` as a user runs it: the real binary, a real server, HTTP over a socket.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

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
        .args(["--database-url", db.url(), "--schema", db.schema()])
        .args(args);
    c
}

/// Starts `serve` on a free port and returns it with its address.
fn serve(db: &TestDb, extra: &[&str], auth: bool) -> (Child, String) {
    let mut c = cmd(
        db,
        &[&["serve", "--addr", "127.0.0.1:0"][..], extra].concat(),
    );
    if auth {
        c.env("SKIPLOCK_WEB_USER", "admin")
            .env("SKIPLOCK_WEB_PASSWORD", "s3cret");
    }
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
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
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
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

    let (mut child, addr) = serve(&db, &[], true);
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
    child.kill().unwrap();
    child.wait().unwrap();

    let (mut child, addr) = serve(&db, &["--read-only"], true);
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
    child.kill().unwrap();
    child.wait().unwrap();
}
