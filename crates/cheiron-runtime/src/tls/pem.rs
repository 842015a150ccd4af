//! A serving certificate's two files, their contents, and why they cannot be used.

use std::{fmt, path::PathBuf};

/// The certificate chain file in `--tls-cert-dir` (the `kubernetes.io/tls` Secret key).
pub const CERT_FILE: &str = "tls.crt";
/// The private key file in `--tls-cert-dir` (the `kubernetes.io/tls` Secret key).
pub const KEY_FILE: &str = "tls.key";

/// The contents of `tls.crt` and `tls.key`. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct PemPair {
    /// PEM certificate chain, end-entity first.
    pub cert: Vec<u8>,
    /// PEM private key.
    pub key: Vec<u8>,
}

impl fmt::Debug for PemPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PemPair")
            .field("cert", &format_args!("{} bytes", self.cert.len()))
            .field("key", &"<redacted>")
            .finish()
    }
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
