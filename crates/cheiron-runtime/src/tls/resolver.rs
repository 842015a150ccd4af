//! The rustls certificate resolver: the current [`ServingKey`] behind an `ArcSwap`.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::{
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};

use super::{key::ServingKey, pem::TlsError};

/// Serves whichever certificate was swapped in last. Handshakes read it lock-free; rotation
/// ([`CertResolver::swap`]) is one atomic store, and connections already established keep
/// the key they negotiated with.
#[derive(Debug)]
pub struct CertResolver {
    current: ArcSwap<ServingKey>,
}

impl CertResolver {
    /// A resolver serving `key` until the next [`CertResolver::swap`].
    pub fn new(key: ServingKey) -> Self {
        Self {
            current: ArcSwap::from_pointee(key),
        }
    }

    /// A resolver serving a freshly generated self-signed certificate (see
    /// [`ServingKey::self_signed`]).
    pub fn self_signed() -> Result<Self, TlsError> {
        ServingKey::self_signed().map(Self::new)
    }

    /// Serves `key` from the next handshake on.
    pub fn swap(&self, key: ServingKey) {
        self.current.store(Arc::new(key));
    }

    /// The key currently served.
    pub fn current(&self) -> Arc<ServingKey> {
        self.current.load_full()
    }

    /// `notAfter` of the certificate currently served, in seconds since the Unix epoch.
    pub fn not_after(&self) -> i64 {
        self.current.load().not_after()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(self.current.load().certified_key()))
    }
}
