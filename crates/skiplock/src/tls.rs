//! How skiplock's own connections are made: the URL's TLS settings (`sslmode`, `sslrootcert`,
//! read as libpq reads them), and the fallback for poolers that refuse the `options` startup
//! parameter.
//!
//! tokio-postgres parses `sslmode` but knows only `disable`, `prefer` and `require`, and does
//! not verify anything itself: the TLS parameters are taken out of the connection string here,
//! before tokio-postgres parses the rest, and become a rustls configuration.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_postgres::config::{Host, SslMode as PgSslMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Config, Socket};

use crate::error::{Error, Result};

/// The `sslmode` values libpq knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS if the server offers it, plaintext otherwise; the certificate is not checked.
    Prefer,
    /// TLS, certificate not checked (checked against `sslrootcert` as `verify-ca` when given).
    Require,
    /// TLS, certificate signed by a trusted root; any host name.
    VerifyCa,
    /// TLS, certificate signed by a trusted root and valid for the host.
    VerifyFull,
}

impl SslMode {
    fn parse(v: &str) -> Result<SslMode> {
        Ok(match v {
            "disable" => SslMode::Disable,
            // libpq's `allow` tries plaintext first; skiplock tries TLS first instead.
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(Error::invalid(
                    "database URL",
                    format!(
                        "sslmode={other} is not one of disable, allow, prefer, require, \
                         verify-ca, verify-full"
                    ),
                ))
            }
        })
    }
}

/// Where trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootCert {
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// The operating system's trust store (`sslrootcert=system`).
    System,
}

/// The TLS settings of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub(crate) mode: SslMode,
    pub(crate) root_cert: Option<RootCert>,
}

impl Default for TlsSettings {
    /// libpq's default: `prefer`.
    fn default() -> Self {
        TlsSettings {
            mode: SslMode::Prefer,
            root_cert: None,
        }
    }
}

impl TlsSettings {
    /// The settings a tokio-postgres configuration carries (it has no root certificate).
    pub(crate) fn of_config(cfg: &Config) -> TlsSettings {
        let mode = match cfg.get_ssl_mode() {
            PgSslMode::Disable => SslMode::Disable,
            PgSslMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        };
        TlsSettings {
            mode,
            root_cert: None,
        }
    }
}

/// The TLS parameters libpq reads that tokio-postgres does not (or not all of their values).
const TLS_KEYS: &[&str] = &["sslmode", "sslrootcert"];
/// Client-certificate and revocation parameters: refused rather than silently ignored.
const UNSUPPORTED_KEYS: &[&str] = &["sslcert", "sslkey", "sslpassword", "sslcrl", "sslcrldir"];

/// Parses a connection string (a `postgres://` URL or libpq `key=value` pairs): its TLS
/// settings, and the tokio-postgres configuration of the rest (`sslmode` mapped onto
/// tokio-postgres's three values).
pub(crate) fn parse(url: &str) -> Result<(Config, TlsSettings)> {
    let (rest, found) = split(url)?;
    let mut cfg: Config = rest
        .parse()
        .map_err(|e| Error::invalid("database URL", format!("it could not be parsed: {e}")))?;
    let mut mode = None;
    let mut root_cert = None;
    for (k, v) in found {
        match k.as_str() {
            "sslmode" => mode = Some(SslMode::parse(&v)?),
            "sslrootcert" if v == "system" => root_cert = Some(RootCert::System),
            "sslrootcert" if !v.is_empty() => root_cert = Some(RootCert::File(v.into())),
            "sslrootcert" => root_cert = None,
            other => {
                return Err(Error::invalid(
                    "database URL",
                    format!("{other} (client certificates, revocation lists) is not supported"),
                ))
            }
        }
    }
    let mode = match (mode, &root_cert) {
        // As libpq: the system's roots are only worth having with the host name checked.
        (None, Some(RootCert::System)) => SslMode::VerifyFull,
        (Some(m), Some(RootCert::System)) if m != SslMode::VerifyFull => {
            return Err(Error::invalid(
                "database URL",
                "sslrootcert=system needs sslmode=verify-full (a weaker mode would trust any \
                 certificate a public CA issued)",
            ))
        }
        (m, _) => m.unwrap_or(SslMode::Prefer),
    };
    let settings = TlsSettings { mode, root_cert };
    cfg.ssl_mode(settings.pg_mode());
    Ok((cfg, settings))
}

impl TlsSettings {
    fn pg_mode(&self) -> PgSslMode {
        match self.mode {
            SslMode::Disable => PgSslMode::Disable,
            SslMode::Prefer => PgSslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => PgSslMode::Require,
        }
    }
}

/// Splits the TLS parameters out of a connection string: the rest, and the `(key, value)`
/// pairs taken out (decoded).
fn split(url: &str) -> Result<(String, Vec<(String, String)>)> {
    let taken = |k: &str| TLS_KEYS.contains(&k) || UNSUPPORTED_KEYS.contains(&k);
    let mut found = Vec::new();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), found));
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key = percent_decode(k)?;
            if taken(&key) {
                found.push((key, percent_decode(v)?));
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, found));
    }
    let mut kept = Vec::new();
    for (k, v) in key_values(url)? {
        if taken(&k) {
            found.push((k, v));
        } else {
            let quoted = v.replace('\\', "\\\\").replace('\'', "\\'");
            kept.push(format!("{k}='{quoted}'"));
        }
    }
    Ok((kept.join(" "), found))
}

fn percent_decode(s: &str) -> Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    Error::invalid("database URL", "a %-escape in its parameters is malformed")
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| Error::invalid("database URL", "a parameter is not UTF-8 once decoded"))
}

/// The pairs of a libpq `key=value` string (values unquoted and unescaped).
fn key_values(s: &str) -> Result<Vec<(String, String)>> {
    let bad = |why: &str| Error::invalid("database URL", format!("it could not be parsed: {why}"));
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(bad(&format!("`{key}` has no `=`")));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => return Err(bad("unterminated quoted value")),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

#[cfg(feature = "tls")]
type Maker = tokio_postgres_rustls::MakeRustlsConnect;
#[cfg(not(feature = "tls"))]
type Maker = tokio_postgres::NoTls;

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

#[cfg(not(feature = "tls"))]
fn maker(settings: &TlsSettings) -> Result<Maker> {
    match settings.mode {
        SslMode::Disable | SslMode::Prefer if settings.root_cert.is_none() => {
            Ok(tokio_postgres::NoTls)
        }
        _ => Err(Error::invalid(
            "database URL",
            "TLS (sslmode require, verify-ca, verify-full or sslrootcert) needs skiplock's \
             `tls` feature",
        )),
    }
}

#[cfg(feature = "tls")]
fn maker(settings: &TlsSettings) -> Result<Maker> {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::client::WebPkiServerVerifier;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = |what: &RootCert| -> Result<rustls::RootCertStore> {
        let mut store = rustls::RootCertStore::empty();
        match what {
            RootCert::File(path) => {
                use rustls::pki_types::pem::PemObject;
                let bad = |why: String| {
                    Error::invalid(
                        "sslrootcert",
                        format!("{} could not be read: {why}", path.display()),
                    )
                };
                let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
                    .map_err(|e| bad(e.to_string()))?
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| bad(e.to_string()))?;
                if certs.is_empty() {
                    return Err(bad("it holds no PEM certificate".into()));
                }
                for c in certs {
                    store.add(c).map_err(|e| bad(e.to_string()))?;
                }
            }
            RootCert::System => {
                let found = rustls_native_certs::load_native_certs();
                store.add_parsable_certificates(found.certs);
                if store.is_empty() {
                    return Err(Error::invalid(
                        "sslrootcert",
                        "system: no trusted root certificate was found on this system",
                    ));
                }
            }
        }
        Ok(store)
    };
    let webpki = |what: &RootCert| -> Result<Arc<WebPkiServerVerifier>> {
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots(what)?), provider.clone())
            .build()
            .map_err(|e| Error::invalid("sslrootcert", e.to_string()))
    };
    let default_root = || -> Result<RootCert> {
        // As libpq: ~/.postgresql/root.crt unless sslrootcert says otherwise.
        let path = std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".postgresql/root.crt"))
            .filter(|p| p.is_file());
        path.map(RootCert::File).ok_or_else(|| {
            Error::invalid(
                "database URL",
                "sslmode=verify-ca and verify-full need the CA to trust: sslrootcert=<file of \
                 PEM certificates>, or sslrootcert=system for the system's trusted roots",
            )
        })
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (settings.mode, &settings.root_cert) {
        (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => {
            Arc::new(AnyCert(provider.clone()))
        }
        (SslMode::VerifyFull, root) => match root {
            Some(r) => webpki(r)?,
            None => webpki(&default_root()?)?,
        },
        // As libpq: `require` with a root certificate checks it as `verify-ca` does.
        (SslMode::Require, Some(r)) => Arc::new(AnyName(webpki(r)?)),
        (SslMode::VerifyCa, root) => match root {
            Some(r) => Arc::new(AnyName(webpki(r)?)),
            None => Arc::new(AnyName(webpki(&default_root()?)?)),
        },
    };
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid("TLS", e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// `verify-ca`: the chain must lead to a trusted root; the host name is not checked.
#[cfg(feature = "tls")]
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

#[cfg(feature = "tls")]
impl rustls::client::danger::ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error as E};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(E::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without a root certificate: encrypted, any certificate (as libpq).
/// The handshake's signatures are still checked.
#[cfg(feature = "tls")]
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

#[cfg(feature = "tls")]
impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_come_out_of_urls_and_key_values() {
        let (cfg, s) =
            parse("postgres://u@h:5/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&application_name=x")
                .expect("parses");
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert_eq!(s.root_cert, Some(RootCert::File("/tmp/ca.pem".into())));
        assert_eq!(cfg.get_application_name(), Some("x"));
        assert_eq!(cfg.get_ssl_mode(), PgSslMode::Require);

        let (cfg, s) = parse("host=h user='a b' sslmode=verify-ca sslrootcert='/x y'").expect("kv");
        assert_eq!(s.mode, SslMode::VerifyCa);
        assert_eq!(s.root_cert, Some(RootCert::File("/x y".into())));
        assert_eq!(cfg.get_user(), Some("a b"));

        let (_, s) = parse("postgres://h/db?sslrootcert=system").expect("system");
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert!(parse("postgres://h/db?sslrootcert=system&sslmode=require").is_err());
        assert!(parse("postgres://h/db?sslmode=bogus").is_err());
        assert!(parse("postgres://h/db?sslcert=/c.pem").is_err());
        let (cfg, s) = parse("postgres://h/db").expect("plain");
        assert_eq!(s.mode, SslMode::Prefer);
        assert_eq!(cfg.get_ssl_mode(), PgSslMode::Prefer);
    }
}
