//! How skiplock's own connections are made: the URL's TLS settings (`sslmode`, `sslrootcert`,
//! read as libpq reads them), and the fallback for poolers that refuse the `options` startup
//! parameter.
//!
//! tokio-postgres parses `sslmode` but knows only `disable`, `prefer` and `require`, and does
//! not verify anything itself: the TLS parameters are taken out of the connection string here,
//! before tokio-postgres parses the rest, and become a rustls configuration.

use std::path::PathBuf;

use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::Config;

use crate::error::{Error, Result};

mod connector;
mod maker;

pub(crate) use connector::Connector;

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
