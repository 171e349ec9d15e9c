//! The TLS connector maker for [`super::TlsSettings`]: rustls with the `tls` feature,
//! `NoTls` without it.

#[cfg(feature = "tls")]
use std::path::PathBuf;
#[cfg(feature = "tls")]
use std::sync::Arc;

#[cfg(feature = "tls")]
use super::RootCert;
use super::{SslMode, TlsSettings};
use crate::error::{Error, Result};

#[cfg(feature = "tls")]
pub(super) type Maker = tokio_postgres_rustls::MakeRustlsConnect;
#[cfg(not(feature = "tls"))]
pub(super) type Maker = tokio_postgres::NoTls;

#[cfg(not(feature = "tls"))]
pub(super) fn maker(settings: &TlsSettings) -> Result<Maker> {
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
pub(super) fn maker(settings: &TlsSettings) -> Result<Maker> {
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
