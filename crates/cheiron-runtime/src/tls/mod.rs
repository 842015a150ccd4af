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
mod pem;
mod resolver;

use std::{path::PathBuf, sync::Arc};

use rustls::{ServerConfig, crypto::ring};

pub use dir::{CertDir, RELOAD_PERIOD, Reload, Reloader, WATCH_SETTLE};
pub use key::ServingKey;
pub use pem::{CERT_FILE, KEY_FILE, PemPair, TlsError};
pub use resolver::CertResolver;

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSource {
    /// `--self-signed`: generated in memory at startup.
    SelfSigned,
    /// `--tls-cert-dir`: `tls.crt` and `tls.key` in this directory, reloaded on change.
    Dir(PathBuf),
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
