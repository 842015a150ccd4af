//! One serving certificate with its key, checked to belong together, and its expiry.

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use rustls::{
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, pem::PemObject},
    sign::CertifiedKey,
};

use super::pem::{CERT_FILE, KEY_FILE, PemPair, TlsError};

/// Names the self-signed certificate is valid for: enough for local runs and tests.
const SELF_SIGNED_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// How long a self-signed certificate is valid. The process regenerates it on every start.
const SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Backdating of a self-signed certificate, to tolerate clients whose clock is a little behind.
const SELF_SIGNED_BACKDATE: Duration = Duration::from_secs(60 * 60);

/// A certificate chain and its private key, ready to serve, with the end-entity
/// certificate's `notAfter`.
#[derive(Clone, Debug)]
pub struct ServingKey {
    certified: Arc<CertifiedKey>,
    not_after: i64,
}

impl ServingKey {
    /// Parses a PEM certificate chain (end-entity first) and a PEM private key (PKCS#8,
    /// PKCS#1 or SEC1), and checks that the key belongs to the certificate.
    pub fn from_pem(pair: &PemPair) -> Result<Self, TlsError> {
        let chain = CertificateDer::pem_slice_iter(&pair.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| TlsError::Pem {
                file: CERT_FILE,
                source,
            })?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(&pair.key).map_err(|source| TlsError::Pem {
            file: KEY_FILE,
            source,
        })?;
        Self::from_der(chain, key)
    }

    /// Generates an in-memory self-signed certificate for `localhost`, `127.0.0.1` and `::1`,
    /// valid for a year.
    pub fn self_signed() -> Result<Self, TlsError> {
        let names = SELF_SIGNED_NAMES.map(str::to_owned).to_vec();
        let mut params = CertificateParams::new(names).map_err(TlsError::SelfSigned)?;
        let mut subject = DistinguishedName::new();
        subject.push(DnType::CommonName, "cheiron webhook (self-signed)");
        params.distinguished_name = subject;
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        params.not_before = epoch + since_epoch.saturating_sub(SELF_SIGNED_BACKDATE);
        params.not_after = epoch + since_epoch.saturating_add(SELF_SIGNED_VALIDITY);
        let key_pair = KeyPair::generate().map_err(TlsError::SelfSigned)?;
        let certificate = params
            .self_signed(&key_pair)
            .map_err(TlsError::SelfSigned)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pair.serialize_der()));
        Self::from_der(vec![certificate.der().clone()], key)
    }

    fn from_der(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<Self, TlsError> {
        let end_entity = chain.first().ok_or(TlsError::NoCertificate)?;
        let not_after = not_after(end_entity)?;
        let certified = CertifiedKey::from_der(chain, key, &ring::default_provider())
            .map_err(TlsError::Pair)?;
        Ok(Self {
            certified: Arc::new(certified),
            not_after,
        })
    }

    /// The chain and signing key, as rustls serves them.
    pub fn certified_key(&self) -> &Arc<CertifiedKey> {
        &self.certified
    }

    /// The end-entity certificate (DER), e.g. to trust a self-signed certificate in a client.
    pub fn end_entity(&self) -> Option<&CertificateDer<'static>> {
        self.certified.cert.first()
    }

    /// `notAfter` of the end-entity certificate, in seconds since the Unix epoch.
    pub fn not_after(&self) -> i64 {
        self.not_after
    }
}

fn not_after(certificate: &CertificateDer<'_>) -> Result<i64, TlsError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate)
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
    Ok(parsed.validity().not_after.timestamp())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_key_expires_in_about_a_year() {
        let key = ServingKey::self_signed().unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let year = SELF_SIGNED_VALIDITY.as_secs() as i64;
        assert!(
            (key.not_after() - now - year).abs() < 60,
            "not_after {}",
            key.not_after()
        );
        assert_eq!(key.certified_key().cert.len(), 1);
    }

    #[test]
    fn pem_without_certificate_is_rejected() {
        let pair = PemPair {
            cert: b"not pem at all".to_vec(),
            key: b"".to_vec(),
        };
        assert!(matches!(
            ServingKey::from_pem(&pair),
            Err(TlsError::NoCertificate)
        ));
    }

    #[test]
    fn key_of_another_certificate_is_rejected() {
        let first = ServingKey::self_signed().unwrap();
        let other = KeyPair::generate().unwrap();
        let cert_pem = pem_certificate(first.end_entity().unwrap());
        let pair = PemPair {
            cert: cert_pem.into_bytes(),
            key: other.serialize_pem().into_bytes(),
        };
        let error = ServingKey::from_pem(&pair).unwrap_err();
        assert!(matches!(error, TlsError::Pair(_)), "{error}");
    }

    fn pem_certificate(der: &CertificateDer<'_>) -> String {
        use base64::Engine;
        let body = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            lines.join("\n")
        )
    }
}
