//! `serve`: the web dashboard (the `skiplock-web` crate) on its own, behind HTTP basic
//! authentication whose user and password come from the environment.
//!
//! Without credentials it listens on loopback addresses only and answers only requests whose
//! `Host` names a loopback host (or one the operator allows), so that a web page whose name
//! was rebound to 127.0.0.1 cannot read or act through the visitor's browser. With
//! credentials, an address that keeps failing them is throttled ([`Throttle`]).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::uri::Authority;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use skiplock_web::{Access, Dashboard};

use crate::connect::Target;
use crate::errors::{schema_hint, usage};
use crate::output::{errln, outln};

/// The user that basic authentication accepts.
pub const USER_ENV: &str = "SKIPLOCK_WEB_USER";
/// Its password.
pub const PASSWORD_ENV: &str = "SKIPLOCK_WEB_PASSWORD";
/// More host names the dashboard answers to (comma-separated), as `--allowed-host`.
pub const ALLOWED_HOSTS_ENV: &str = "SKIPLOCK_ALLOWED_HOSTS";

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Authentication: set SKIPLOCK_WEB_USER and SKIPLOCK_WEB_PASSWORD to \
require them (HTTP basic authentication; put a TLS proxy in front for anything but a local \
network). An address that fails them 5 times within a minute is answered 429 (with \
Retry-After) until the oldest of those failures is a minute old.\n\n\
Without them the dashboard listens only on a loopback address, and anyone who can reach it \
may act; it then answers only requests whose Host is localhost, 127.0.0.0/8 or [::1], the \
host name of --addr, or a name given with --allowed-host (others get 421), so that a web \
page cannot reach it by rebinding its own name to 127.0.0.1."
)]
pub struct Args {
    /// The address to listen on, IP:PORT or NAME:PORT (a name is resolved, and listened on at
    /// its first address that works). A non-loopback address needs SKIPLOCK_WEB_USER and
    /// SKIPLOCK_WEB_PASSWORD.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    addr: String,
    /// Also answer requests whose Host header names this host (repeat it, or separate names
    /// with commas). Without credentials the dashboard answers only loopback names
    /// (localhost, 127.0.0.0/8, `[::1]`) and --addr's host; with credentials it answers any
    /// host unless names are given here, and then only these and the loopback ones.
    #[arg(
        long = "allowed-host",
        value_name = "NAME",
        env = ALLOWED_HOSTS_ENV,
        value_delimiter = ','
    )]
    allowed_hosts: Vec<String>,
    /// Show the pages only: no retry, cancel or delete.
    #[arg(long)]
    read_only: bool,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
}

/// The signed-in user, left in the request by the basic-auth layer.
#[derive(Debug, Clone)]
struct User(String);

struct Credentials {
    user: String,
    password: String,
}

fn credentials() -> anyhow::Result<Option<Credentials>> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (get(USER_ENV), get(PASSWORD_ENV)) {
        (Some(user), Some(password)) => {
            if user.contains(':') {
                return Err(usage(format!("{USER_ENV} cannot contain ':'")));
            }
            Ok(Some(Credentials { user, password }))
        }
        (None, None) => Ok(None),
        _ => Err(usage(format!(
            "set both {USER_ENV} and {PASSWORD_ENV}, or neither"
        ))),
    }
}

pub async fn run(target: &Target, args: Args) -> anyhow::Result<()> {
    let creds = credentials()?;
    let mut hosts = args
        .allowed_hosts
        .iter()
        .map(|h| allowed_host(h))
        .collect::<anyhow::Result<Vec<HostName>>>()?;
    let (addr_host, addrs) = resolve(&args.addr).await?;
    if creds.is_none() {
        if let Some(public) = addrs.iter().find(|a| !a.ip().is_loopback()) {
            return Err(usage(format!(
                "refusing to listen on {}{} without authentication: set {USER_ENV} and \
                 {PASSWORD_ENV}, or listen on a loopback address such as 127.0.0.1",
                args.addr,
                if public.to_string() == args.addr {
                    String::new()
                } else {
                    format!(" ({public})")
                }
            )));
        }
    }
    // Checked without credentials always; with them only when the operator names hosts.
    let host_check = if creds.is_none() || !hosts.is_empty() {
        hosts.extend(addr_host);
        Some(Arc::new(hosts))
    } else {
        None
    };
    let client = target.client(4).await?;
    // Fail now, with the usual hint, if the schema is not there.
    client
        .get(skiplock::JobId(1))
        .await
        .map_err(|e| schema_hint(e, &target.schema))?;
    args.metrics.start().await?;
    // The dashboard's charts draw the per-minute rollup the gauges round writes: run it here
    // even without --metrics-addr (one process at a time across serves and workers).
    if let Some(every) = args.metrics.rollup_interval() {
        let client = client.clone();
        tokio::spawn(async move {
            skiplock::metrics::publish_gauges(&client, every, std::future::pending()).await
        });
    }
    let router = Dashboard::new(client, |req: &axum::http::request::Parts| {
        match req.extensions.get::<User>() {
            Some(User(name)) => Access::full(name.clone()),
            None => Access::Forbidden,
        }
    })
    .read_only(args.read_only)
    .router();
    let authenticated = creds.is_some();
    let app = match creds {
        Some(c) => router.layer(axum::middleware::from_fn_with_state(
            Arc::new(Basic {
                credentials: c,
                throttle: Throttle::default(),
            }),
            basic,
        )),
        None => router.layer(axum::middleware::map_request(|mut req: Request| async {
            req.extensions_mut().insert(User("local".to_owned()));
            req
        })),
    };
    // The Host check runs first, before authentication.
    let app = match host_check {
        Some(allowed) => app.layer(axum::middleware::from_fn_with_state(allowed, check_host)),
        None => app,
    };
    let listener = tokio::net::TcpListener::bind(&addrs[..])
        .await
        .with_context(|| format!("could not listen on {}", args.addr))?;
    let addr = listener.local_addr().context("the listening address")?;
    outln!(
        "skiplock dashboard on http://{addr}/ (schema {}{}{})",
        target.schema,
        if args.read_only { ", read-only" } else { "" },
        if authenticated {
            ", basic authentication"
        } else {
            ", no authentication"
        }
    );
    if !authenticated {
        errln!(
            "warning: no {USER_ENV}/{PASSWORD_ENV}: anyone who can reach {addr} can use the dashboard"
        );
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async {
            let _ = stop_rx.await;
        })
        .await
    });
    let signal = shutdown_signal().context("could not install the signal handlers")?;
    tokio::select! {
        r = &mut server => return r.context("the server task failed")?.context("the server failed"),
        () = signal => {}
    }
    let _ = stop_tx.send(());
    // Open keep-alive connections get a moment to finish, not forever.
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(r) => r
            .context("the server task failed")?
            .context("the server failed"),
        Err(_) => Ok(()),
    }
}

/// The basic-auth layer's state.
struct Basic {
    credentials: Credentials,
    throttle: Throttle,
}

async fn basic(State(b): State<Arc<Basic>>, mut req: Request, next: Next) -> Response {
    let client = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(a)| a.ip());
    let key = client.map(client_key);
    let now = Instant::now();
    if let Some(wait) = key.and_then(|k| b.throttle.blocked(k, now)) {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let secs = secs.max(1);
        tracing::warn!(client = ?client, "dashboard throttled failed sign-ins");
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, secs.to_string())],
            format!(
                "too many failed sign-ins from this address ({} within {} s): try again in {secs} s\n",
                Throttle::MAX_FAILURES,
                Throttle::WINDOW.as_secs()
            ),
        )
            .into_response();
    }
    match check(req.headers(), &b.credentials) {
        Some(user) => {
            if let Some(k) = key {
                b.throttle.succeeded(k);
            }
            req.extensions_mut().insert(User(user));
            next.run(req).await
        }
        None => {
            // A request without credentials is not a guess (a browser asks first without
            // them); a wrong pair is.
            if req.headers().contains_key(header::AUTHORIZATION) {
                if let Some(k) = key {
                    b.throttle.failed(k, now);
                }
            }
            (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    "Basic realm=\"skiplock\", charset=\"UTF-8\"",
                )],
                "authentication required\n",
            )
                .into_response()
        }
    }
}

/// Whom the throttle counts failures for: an IPv4 address, or an IPv6 address's /64 (one
/// host usually holds a whole /64).
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Failed basic-auth attempts per client ([`client_key`]): after [`Throttle::MAX_FAILURES`]
/// failures within [`Throttle::WINDOW`], every request from that client is answered 429,
/// without checking its credentials, until the oldest of them is older than the window. A
/// correct sign-in clears the client's failures. At most [`Throttle::MAX_CLIENTS`] clients
/// are remembered (the one whose last failure is oldest is forgotten first).
#[derive(Default)]
struct Throttle {
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

impl Throttle {
    const MAX_FAILURES: usize = 5;
    const WINDOW: Duration = Duration::from_secs(60);
    const MAX_CLIENTS: usize = 10_000;

    /// How long `key` must still wait, if it is throttled.
    fn blocked(&self, key: IpAddr, now: Instant) -> Option<Duration> {
        let mut map = self.failures.lock().ok()?;
        let q = map.get_mut(&key)?;
        Self::expire(q, now);
        if q.len() < Self::MAX_FAILURES {
            return None;
        }
        let oldest = *q.front()?;
        Some((oldest + Self::WINDOW).saturating_duration_since(now))
    }

    fn failed(&self, key: IpAddr, now: Instant) {
        let Ok(mut map) = self.failures.lock() else {
            return;
        };
        if !map.contains_key(&key) && map.len() >= Self::MAX_CLIENTS {
            map.retain(|_, q| {
                Self::expire(q, now);
                !q.is_empty()
            });
            if map.len() >= Self::MAX_CLIENTS {
                let stalest = map
                    .iter()
                    .min_by_key(|(_, q)| q.back().copied())
                    .map(|(k, _)| *k);
                if let Some(k) = stalest {
                    map.remove(&k);
                }
            }
        }
        let q = map.entry(key).or_default();
        Self::expire(q, now);
        q.push_back(now);
        while q.len() > Self::MAX_FAILURES {
            q.pop_front();
        }
    }

    fn succeeded(&self, key: IpAddr) {
        if let Ok(mut map) = self.failures.lock() {
            map.remove(&key);
        }
    }

    fn expire(q: &mut VecDeque<Instant>, now: Instant) {
        while q
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= Self::WINDOW)
        {
            q.pop_front();
        }
    }
}

/// A host as a `Host` header names it: an IP address or a lower-case name without the
/// trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostName {
    Ip(IpAddr),
    Name(String),
}

impl HostName {
    /// The host of a `Host` header or an authority (`name`, `name:port`, `1.2.3.4:port`,
    /// `[::1]:port`).
    fn of_authority(value: &str) -> Option<HostName> {
        let authority: Authority = value.parse().ok()?;
        let host = authority.host();
        if authority.as_str().contains('@') {
            return None;
        }
        Some(Self::of_host(host))
    }

    fn of_host(host: &str) -> HostName {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => HostName::Ip(IpAddr::V4(v4)),
                None => HostName::Ip(IpAddr::V6(v6)),
            },
            Ok(ip) => HostName::Ip(ip),
            Err(_) => HostName::Name(host.trim_end_matches('.').to_ascii_lowercase()),
        }
    }

    fn is_loopback(&self) -> bool {
        match self {
            HostName::Ip(ip) => ip.is_loopback(),
            HostName::Name(n) => n == "localhost",
        }
    }
}

/// A host name the operator allows: a DNS name or an IP address, without a port.
fn allowed_host(value: &str) -> anyhow::Result<HostName> {
    let v = value.trim();
    let bad = |why: &str| {
        usage(format!(
            "--allowed-host {value:?} (or {ALLOWED_HOSTS_ENV}): {why}; give a host name such as \
             dashboard.internal or an IP address, without a port"
        ))
    };
    if v.is_empty() {
        return Err(bad("empty name"));
    }
    let bare = v
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(v);
    if bare.parse::<IpAddr>().is_ok() {
        return Ok(HostName::of_host(v));
    }
    if v.contains(':') {
        return Err(bad(
            "a port or an unbracketed IPv6 address is not a host name",
        ));
    }
    let name = v.trim_end_matches('.');
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(bad("not a host name"));
    }
    Ok(HostName::of_host(name))
}

/// `--addr`'s host and the addresses it resolves to.
async fn resolve(addr: &str) -> anyhow::Result<(Option<HostName>, Vec<SocketAddr>)> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok((Some(HostName::of_host(&a.ip().to_string())), vec![a]));
    }
    let expected = || {
        usage(format!(
            "--addr {addr:?}: expected HOST:PORT, such as 127.0.0.1:8080, [::1]:8080 or \
             localhost:8080"
        ))
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(expected)?;
    if host.is_empty() || host.contains(':') || port.parse::<u16>().is_err() {
        return Err(expected());
    }
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host(addr).await {
        Ok(a) => a.collect(),
        Err(e) => {
            return Err(usage(format!(
                "--addr {addr:?}: cannot resolve {host:?} ({e}); give an IP address such as \
                 127.0.0.1:8080"
            )))
        }
    };
    if addrs.is_empty() {
        return Err(usage(format!(
            "--addr {addr:?}: {host:?} resolves to no address; give an IP address such as \
             127.0.0.1:8080"
        )));
    }
    Ok((Some(HostName::of_host(host)), addrs))
}

/// Refuses a request whose `Host` (or HTTP/2 authority) is neither loopback nor allowed.
async fn check_host(
    State(allowed): State<Arc<Vec<HostName>>>,
    req: Request,
    next: Next,
) -> Response {
    let value = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    let ok = |v: Option<&str>| {
        v.and_then(HostName::of_authority)
            .is_some_and(|h| h.is_loopback() || allowed.contains(&h))
    };
    // A request in absolute form names its host in the target too: both must be allowed.
    let target_ok = req.uri().authority().is_none_or(|a| ok(Some(a.as_str())));
    if ok(value.as_deref()) && target_ok {
        return next.run(req).await;
    }
    let named = match &value {
        Some(v) => format!("the Host {v:?}"),
        None => "a request without a Host".to_owned(),
    };
    tracing::warn!(host = ?value, uri = %req.uri(), "dashboard refused a request for another host");
    (
        StatusCode::MISDIRECTED_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!(
            "This dashboard does not answer for {named}: it answers localhost, 127.0.0.0/8, \
             [::1] and the names given with --allowed-host or {ALLOWED_HOSTS_ENV}.\n"
        ),
    )
        .into_response()
}

/// The user of a correct `Authorization: Basic` header.
fn check(headers: &HeaderMap, c: &Credentials) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, b64) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    // Both compared in full, whatever the first says.
    let ok =
        same(user.as_bytes(), c.user.as_bytes()) & same(password.as_bytes(), c.password.as_bytes());
    ok.then(|| user.to_owned())
}

/// Equality that takes the same time wherever the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_are_read_as_a_browser_sends_them() {
        let h = |v: &str| HostName::of_authority(v);
        for loopback in [
            "localhost",
            "localhost:8080",
            "LocalHost.:1",
            "127.0.0.1:8080",
            "127.255.0.9",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:80",
        ] {
            assert!(h(loopback).is_some_and(|n| n.is_loopback()), "{loopback}");
        }
        for other in [
            "evil.example:8441",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "10.0.0.1:80",
            "[::2]:80",
            "0.0.0.0",
        ] {
            assert!(!h(other).is_some_and(|n| n.is_loopback()), "{other}");
        }
        assert_eq!(h("user@localhost"), None);
        assert_eq!(h(""), None);
        assert_eq!(
            h("Dash.Internal.:8441"),
            Some(HostName::Name("dash.internal".to_owned()))
        );
        assert_eq!(
            allowed_host("dash.internal").ok(),
            Some(HostName::Name("dash.internal".to_owned()))
        );
        assert_eq!(
            allowed_host("[::1]").ok(),
            Some(HostName::Ip("::1".parse().unwrap()))
        );
        for bad in ["", "a:80", "a b", "-a", "a..b", "[a]"] {
            assert!(allowed_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_throttle_counts_failures_in_a_sliding_minute() {
        let t = Throttle::default();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let start = Instant::now();
        for i in 0..Throttle::MAX_FAILURES as u64 {
            assert_eq!(t.blocked(ip, start + Duration::from_secs(i)), None);
            t.failed(ip, start + Duration::from_secs(i));
        }
        let at = start + Duration::from_secs(10);
        assert_eq!(t.blocked(ip, at), Some(Duration::from_secs(50)));
        // Once the oldest failure is a minute old, one more guess is allowed.
        assert_eq!(t.blocked(ip, start + Duration::from_secs(60)), None);
        // Another client is not affected; a /64 is one client.
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let b: IpAddr = "2001:db8::ffff:2".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(
            client_key(a),
            client_key("2001:db8:0:1::1".parse().unwrap())
        );
        assert_eq!(t.blocked(client_key(a), at), None);
        t.succeeded(ip);
        assert_eq!(t.blocked(ip, at), None);
    }

    #[test]
    fn basic_auth_accepts_only_the_right_pair() {
        let c = Credentials {
            user: "admin".to_owned(),
            password: "s3cret".to_owned(),
        };
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            check(&h, &c)
        };
        let enc = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert_eq!(
            with(&format!("Basic {}", enc("admin:s3cret"))).as_deref(),
            Some("admin")
        );
        assert_eq!(
            with(&format!("basic {}", enc("admin:s3cret"))).as_deref(),
            Some("admin")
        );
        for bad in [
            "admin:s3cre",
            "admin:s3cret2",
            "Admin:s3cret",
            "admin",
            ":s3cret",
            "",
        ] {
            assert_eq!(with(&format!("Basic {}", enc(bad))), None, "{bad}");
        }
        assert_eq!(with("Bearer abc"), None);
        assert_eq!(with("Basic !!!"), None);
        assert_eq!(check(&HeaderMap::new(), &c), None);
    }
}
