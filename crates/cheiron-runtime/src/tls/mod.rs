//! The webhook's serving certificate: a rustls [`ResolvesServerCert`] whose key sits behind an
//! `ArcSwap`, so that rotating the certificate is one atomic swap and never drops a connection.
//!
//! The certificate comes either from `--tls-cert-dir` (`tls.crt` + `tls.key`, re-read as soon
//! as the directory changes, and periodically as a fallback, so that a rotated Secret volume
//! takes effect without a restart) or from `--self-signed` (generated in memory for
//! `localhost`, `127.0.0.1` and `::1`).
//!
//! [`ResolvesServerCert`]: rustls::server::ResolvesServerCert

mod dir;
mod key;
mod resolver;

use std::{path::PathBuf, sync::Arc};

use rustls::{ServerConfig, crypto::ring};

pub use dir::{
    CERT_FILE, CertDir, KEY_FILE, PemPair, RELOAD_PERIOD, Reload, Reloader, WATCH_SETTLE,
};
pub use key::ServingKey;
pub use resolver::CertResolver;

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSource {
    /// `--self-signed`: generated in memory at startup.
    SelfSigned,
    /// `--tls-cert-dir`: `tls.crt` and `tls.key` in this directory, reloaded on change.
    Dir(PathBuf),
}

/// Why a certificate could not be loaded or a TLS configuration built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file that is not valid PEM.
    #[error("{file}: invalid PEM: {source}")]
    Pem {
        /// [`CERT_FILE`] or [`KEY_FILE`].
        file: &'static str,
        /// What is wrong.
        source: rustls::pki_types::pem::Error,
    },
    /// `tls.crt` holds no `CERTIFICATE` block.
    #[error("{CERT_FILE}: no PEM certificate found")]
    NoCertificate,
    /// The certificate's DER cannot be parsed (so its validity cannot be read).
    #[error("{CERT_FILE}: cannot parse the certificate: {0}")]
    Certificate(String),
    /// The key is unusable or does not belong to the certificate.
    #[error("{CERT_FILE} and {KEY_FILE} do not form a usable pair: {0}")]
    Pair(#[source] rustls::Error),
    /// rcgen failed to generate a self-signed certificate.
    #[error("cannot generate a self-signed certificate: {0}")]
    SelfSigned(#[source] rcgen::Error),
    /// rustls rejected the server configuration.
    #[error("invalid TLS server configuration: {0}")]
    Config(#[source] rustls::Error),
}

/// The rustls configuration of the webhook: TLS 1.2 and 1.3 with the ring provider, no client
/// authentication, ALPN `h2` and `http/1.1`, certificates from `resolver`.
pub fn server_config(resolver: Arc<CertResolver>) -> Result<ServerConfig, TlsError> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
