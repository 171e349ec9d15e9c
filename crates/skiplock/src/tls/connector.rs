//! Opening skiplock's connections with the TLS settings of [`super::TlsSettings`], and the
//! fallback for poolers that refuse the `options` startup parameter.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_postgres::config::Host;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Config, Socket};

use super::maker::{maker, Maker};
use super::TlsSettings;
use crate::error::Result;

/// The stream type of skiplock's connections.
pub(crate) type Stream = <Maker as MakeTlsConnect<Socket>>::Stream;

/// Opens skiplock's connections: TLS as the settings say, and, when a pooler refuses the
/// `options` startup parameter (PgBouncer does), again without it. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connector {
    maker: Maker,
    refused: Arc<Refused>,
}

#[derive(Default)]
struct Refused {
    /// Targets (hosts and ports) that refused `options`: connect without it at once.
    targets: Mutex<HashSet<String>>,
    warned: AtomicBool,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector").finish_non_exhaustive()
    }
}

impl Connector {
    /// A connector for `settings`; reads the root certificates now, so that a missing file
    /// is reported when the client is built.
    pub(crate) fn new(settings: &TlsSettings) -> Result<Connector> {
        Ok(Connector {
            maker: maker(settings)?,
            refused: Arc::default(),
        })
    }

    /// Connects with `cfg` (whose `ssl_mode` says disable, prefer or require).
    // Without the `tls` feature the maker is `NoTls`, which is Copy.
    #[allow(clippy::clone_on_copy)]
    pub(crate) async fn connect(
        &self,
        cfg: &Config,
    ) -> std::result::Result<
        (
            tokio_postgres::Client,
            tokio_postgres::Connection<Socket, Stream>,
        ),
        tokio_postgres::Error,
    > {
        let has_options = cfg.get_options().is_some_and(|o| !o.trim().is_empty());
        let target = target(cfg);
        let known = has_options && self.lock().contains(&target);
        if !known {
            match cfg.connect(self.maker.clone()).await {
                Err(e) if has_options && refuses_options(&e) => {
                    self.lock().insert(target);
                    if !self.refused.warned.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "the server (a pooler such as PgBouncer) refused the `options` \
                             startup parameter that sets skiplock's server timeouts: connecting \
                             without it. Set the timeouts on the role instead (ALTER ROLE ... \
                             SET statement_timeout = '60s'; likewise lock_timeout and \
                             idle_in_transaction_session_timeout), or turn them off \
                             (server_timeouts(None), --no-server-timeouts) to silence this"
                        );
                    }
                }
                r => return r,
            }
        }
        without_options(cfg).connect(self.maker.clone()).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.refused
            .targets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether the server refused the startup packet's `options` (PgBouncer: FATAL 08P01
/// "unsupported startup parameter: options").
fn refuses_options(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        d.message().contains("unsupported startup parameter") && d.message().contains("options")
    })
}

fn target(cfg: &Config) -> String {
    let hosts: Vec<String> = cfg
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(h) => h.clone(),
            Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    format!("{hosts:?}{:?}", cfg.get_ports())
}

/// A copy of `cfg` without `options` (tokio-postgres cannot unset a parameter).
fn without_options(cfg: &Config) -> Config {
    let mut c = Config::new();
    if let Some(u) = cfg.get_user() {
        c.user(u);
    }
    if let Some(p) = cfg.get_password() {
        c.password(p);
    }
    if let Some(d) = cfg.get_dbname() {
        c.dbname(d);
    }
    if let Some(a) = cfg.get_application_name() {
        c.application_name(a);
    }
    c.ssl_mode(cfg.get_ssl_mode());
    c.ssl_negotiation(cfg.get_ssl_negotiation());
    for h in cfg.get_hosts() {
        match h {
            Host::Tcp(h) => c.host(h),
            Host::Unix(p) => c.host_path(p),
        };
    }
    for a in cfg.get_hostaddrs() {
        c.hostaddr(*a);
    }
    for p in cfg.get_ports() {
        c.port(*p);
    }
    if let Some(t) = cfg.get_connect_timeout() {
        c.connect_timeout(*t);
    }
    if let Some(t) = cfg.get_tcp_user_timeout() {
        c.tcp_user_timeout(*t);
    }
    c.keepalives(cfg.get_keepalives());
    c.keepalives_idle(cfg.get_keepalives_idle());
    if let Some(i) = cfg.get_keepalives_interval() {
        c.keepalives_interval(i);
    }
    if let Some(r) = cfg.get_keepalives_retries() {
        c.keepalives_retries(r);
    }
    c.target_session_attrs(cfg.get_target_session_attrs());
    c.channel_binding(cfg.get_channel_binding());
    c.load_balance_hosts(cfg.get_load_balance_hosts());
    c
}
