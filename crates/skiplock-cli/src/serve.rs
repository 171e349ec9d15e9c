//! `serve`: the web dashboard (the `skiplock-web` crate) on its own, behind HTTP basic
//! authentication whose user and password come from the environment.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::{Request, State};
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

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Authentication: set SKIPLOCK_WEB_USER and SKIPLOCK_WEB_PASSWORD to \
require them (HTTP basic authentication; put a TLS proxy in front for anything but a local \
network). Without them the dashboard listens only on a loopback address, and anyone who can \
reach it may act."
)]
pub struct Args {
    /// The address to listen on. A non-loopback address needs SKIPLOCK_WEB_USER and
    /// SKIPLOCK_WEB_PASSWORD.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
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
    if creds.is_none() && !args.addr.ip().is_loopback() {
        return Err(usage(format!(
            "refusing to listen on {} without authentication: set {USER_ENV} and \
             {PASSWORD_ENV}, or listen on a loopback address such as 127.0.0.1",
            args.addr
        )));
    }
    let client = target.client(4).await?;
    // Fail now, with the usual hint, if the schema is not there.
    client
        .get(skiplock::JobId(1))
        .await
        .map_err(|e| schema_hint(e, &target.schema))?;
    args.metrics.start().await?;
    if let Some(every) = args.metrics.gauges_interval() {
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
        Some(c) => router.layer(axum::middleware::from_fn_with_state(Arc::new(c), basic)),
        None => router.layer(axum::middleware::map_request(|mut req: Request| async {
            req.extensions_mut().insert(User("local".to_owned()));
            req
        })),
    };
    let listener = tokio::net::TcpListener::bind(args.addr)
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
        axum::serve(listener, app)
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

async fn basic(State(c): State<Arc<Credentials>>, mut req: Request, next: Next) -> Response {
    match check(req.headers(), &c) {
        Some(user) => {
            req.extensions_mut().insert(User(user));
            next.run(req).await
        }
        None => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"skiplock\", charset=\"UTF-8\"",
            )],
            "authentication required\n",
        )
            .into_response(),
    }
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
