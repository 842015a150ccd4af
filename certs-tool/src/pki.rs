//! The CA and the serving certificate: issued with rcgen (ECDSA P-256), and read back with
//! x509-parser to decide whether what is stored can be kept.

use std::{collections::BTreeSet, net::IpAddr};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PublicKeyData, SanType,
};
use time::{Duration, OffsetDateTime};
use x509_parser::{certificate::X509Certificate, extensions::GeneralName, prelude::FromDer};

use crate::names::{San, ServingNames};

/// How long a new CA is valid.
pub const CA_VALIDITY: Duration = Duration::days(10 * 365);
/// How long a new serving certificate is valid (never beyond its CA).
pub const SERVING_VALIDITY: Duration = Duration::days(365);
/// `notBefore` lies this far in the past, for clients whose clock is a little behind.
pub const BACKDATE: Duration = Duration::hours(1);

/// The PEM label of a certificate.
const CERTIFICATE: &str = "CERTIFICATE";

/// Why a certificate or key could not be issued or read.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen failed.
    #[error("cannot issue the certificate: {0}")]
    Issue(#[from] rcgen::Error),
    /// No PEM `CERTIFICATE` block.
    #[error("no PEM certificate found")]
    NoCertificate,
    /// Invalid PEM.
    #[error("invalid PEM: {0}")]
    Pem(#[from] pem::PemError),
    /// A certificate that x509-parser cannot read.
    #[error("cannot parse the certificate: {0}")]
    Certificate(String),
    /// A private key that cannot be read (PKCS#8 ECDSA, Ed25519 or RSA expected).
    #[error("cannot read the private key: {0}")]
    Key(rcgen::Error),
    /// The key does not belong to the certificate.
    #[error("the private key does not belong to the certificate")]
    KeyMismatch,
    /// The CA certificate is not a CA.
    #[error("the CA certificate is not a CA (basicConstraints CA:TRUE missing)")]
    NotCa,
}

/// Validity periods of what is issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// Of a new CA.
    pub ca: Duration,
    /// Of a new serving certificate (cut short at the CA's `notAfter`).
    pub serving: Duration,
}

impl Default for Validity {
    /// [`CA_VALIDITY`] and [`SERVING_VALIDITY`].
    fn default() -> Self {
        Self {
            ca: CA_VALIDITY,
            serving: SERVING_VALIDITY,
        }
    }
}

/// A CA that signs serving certificates: its certificate and its signing key.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    not_after: OffsetDateTime,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("not_after", &self.not_after)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl Ca {
    /// A new self-signed CA, `notBefore` [`BACKDATE`] before `now`, valid for `validity`.
    pub fn generate(now: OffsetDateTime, validity: Duration) -> Result<Self, PkiError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "cheiron webhook CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = now - BACKDATE;
        params.not_after = now + validity;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let certificate = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: certificate.pem(),
            not_after: params.not_after,
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA stored earlier: its certificate (the first in `cert_pem`) and PKCS#8 key, which
    /// must belong together and be a CA.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, PkiError> {
        let info = CertificateInfo::first_from_pem(cert_pem)?;
        if !info.is_ca {
            return Err(PkiError::NotCa);
        }
        let key = private_key(key_pem)?;
        if key.der_bytes() != info.public_key {
            return Err(PkiError::KeyMismatch);
        }
        let cert_pem = encode_pem(std::slice::from_ref(&info.der));
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key)?;
        Ok(Self {
            issuer,
            cert_pem,
            not_after: OffsetDateTime::from_unix_timestamp(info.not_after)
                .map_err(|e| PkiError::Certificate(e.to_string()))?,
        })
    }

    /// The CA certificate (PEM), the `ca.crt` of the Secret and the `caBundle` entry.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key (PKCS#8 PEM).
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// `notAfter` of the CA certificate.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// Issues a serving certificate for `names` with a new ECDSA P-256 key: `serverAuth`,
    /// `digitalSignature`, valid from [`BACKDATE`] before `now` for `validity`, but never
    /// beyond this CA.
    pub fn issue(
        &self,
        names: &ServingNames,
        now: OffsetDateTime,
        validity: Duration,
    ) -> Result<ServingCertificate, PkiError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, names.common_name());
        params.subject_alt_names = names
            .sans()
            .into_iter()
            .map(|san| match san {
                San::Dns(name) => name.try_into().map(SanType::DnsName),
                San::Ip(ip) => Ok(SanType::IpAddress(ip)),
            })
            .collect::<Result<_, _>>()?;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = now - BACKDATE;
        params.not_after = (now + validity).min(self.not_after);
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let certificate = params.signed_by(&key, &self.issuer)?;
        Ok(ServingCertificate {
            cert_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
            not_after: params.not_after,
        })
    }
}

/// A serving certificate and its key, as written to `tls.crt` and `tls.key`.
#[derive(Clone, PartialEq, Eq)]
pub struct ServingCertificate {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// The private key (PKCS#8 PEM).
    pub key_pem: String,
    /// `notAfter` of the certificate.
    pub not_after: OffsetDateTime,
}

impl std::fmt::Debug for ServingCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCertificate")
            .field("not_after", &self.not_after)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// What cheiron-certs needs to know about a certificate, read once with x509-parser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateInfo {
    /// The DER encoding.
    pub der: Vec<u8>,
    /// `notBefore`, seconds since the Unix epoch.
    pub not_before: i64,
    /// `notAfter`, seconds since the Unix epoch.
    pub not_after: i64,
    /// DNS names and IP addresses among the subject alternative names.
    pub sans: BTreeSet<San>,
    /// basicConstraints CA:TRUE.
    pub is_ca: bool,
    /// The subject public key (the bits of subjectPublicKeyInfo).
    pub public_key: Vec<u8>,
}

impl CertificateInfo {
    /// Reads a DER certificate.
    pub fn from_der(der: &[u8]) -> Result<Self, PkiError> {
        let (_, certificate) =
            X509Certificate::from_der(der).map_err(|e| PkiError::Certificate(e.to_string()))?;
        let validity = certificate.validity();
        let sans = certificate
            .subject_alternative_name()
            .map_err(|e| PkiError::Certificate(e.to_string()))?
            .map(|extension| {
                extension
                    .value
                    .general_names
                    .iter()
                    .filter_map(san)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            der: der.to_vec(),
            not_before: validity.not_before.timestamp(),
            not_after: validity.not_after.timestamp(),
            sans,
            is_ca: certificate.is_ca(),
            public_key: certificate.public_key().subject_public_key.data.to_vec(),
        })
    }

    /// Reads the first certificate of a PEM file.
    pub fn first_from_pem(pem: &[u8]) -> Result<Self, PkiError> {
        let ders = certificates_from_pem(pem)?;
        let first = ders.first().ok_or(PkiError::NoCertificate)?;
        Self::from_der(first)
    }

    /// Whether `issuer`'s key signed this certificate.
    pub fn is_signed_by(&self, issuer: &CertificateInfo) -> bool {
        let parsed = X509Certificate::from_der(&self.der);
        let issuer = X509Certificate::from_der(&issuer.der);
        match (parsed, issuer) {
            (Ok((_, certificate)), Ok((_, issuer))) => certificate
                .verify_signature(Some(issuer.public_key()))
                .is_ok(),
            _ => false,
        }
    }
}

/// The DER of every `CERTIFICATE` block in `pem` (other blocks are skipped); an error if there
/// is none or the PEM is malformed.
pub fn certificates_from_pem(pem: &[u8]) -> Result<Vec<Vec<u8>>, PkiError> {
    let ders: Vec<Vec<u8>> = pem::parse_many(pem)?
        .into_iter()
        .filter(|block| block.tag() == CERTIFICATE)
        .map(pem::Pem::into_contents)
        .collect();
    if ders.is_empty() {
        return Err(PkiError::NoCertificate);
    }
    Ok(ders)
}

/// DER certificates as PEM, `\n` line endings.
pub fn encode_pem(ders: &[Vec<u8>]) -> String {
    let blocks: Vec<pem::Pem> = ders
        .iter()
        .map(|der| pem::Pem::new(CERTIFICATE, der.clone()))
        .collect();
    pem::encode_many_config(
        &blocks,
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

/// Reads a PKCS#8 private key (the form rcgen writes).
pub fn private_key(pem: &[u8]) -> Result<KeyPair, PkiError> {
    let text =
        std::str::from_utf8(pem).map_err(|_| PkiError::Key(rcgen::Error::CouldNotParseKeyPair))?;
    KeyPair::from_pem(text).map_err(PkiError::Key)
}

/// Whether `key_pem` is the private key of `certificate`.
pub fn key_matches(certificate: &CertificateInfo, key_pem: &[u8]) -> Result<(), PkiError> {
    let key = private_key(key_pem)?;
    if key.der_bytes() == certificate.public_key {
        Ok(())
    } else {
        Err(PkiError::KeyMismatch)
    }
}

fn san(name: &GeneralName<'_>) -> Option<San> {
    match name {
        GeneralName::DNSName(name) => Some(San::Dns(name.to_ascii_lowercase())),
        GeneralName::IPAddress(bytes) => match bytes.len() {
            4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
            _ => None,
        }
        .map(San::Ip),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use x509_parser::extensions::ParsedExtension;

    use super::*;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    fn names() -> ServingNames {
        ServingNames::new(
            "cheiron",
            "cheiron-system",
            &["webhook.example.com".to_owned()],
            &["127.0.0.1".parse().unwrap()],
        )
        .unwrap()
    }

    fn parsed(pem: &str) -> (Vec<u8>, CertificateInfo) {
        let der = certificates_from_pem(pem.as_bytes()).unwrap().remove(0);
        let info = CertificateInfo::from_der(&der).unwrap();
        (der, info)
    }

    #[test]
    fn serving_certificate_carries_every_service_name_and_the_extra_names() {
        let ca = Ca::generate(now(), CA_VALIDITY).unwrap();
        let serving = ca.issue(&names(), now(), SERVING_VALIDITY).unwrap();
        let (_, info) = parsed(&serving.cert_pem);
        assert_eq!(info.sans, names().san_set());
        assert!(info.sans.contains(&San::Dns(
            "cheiron.cheiron-system.svc.cluster.local".to_owned()
        )));
        assert!(info.sans.contains(&San::Ip("127.0.0.1".parse().unwrap())));
    }

    #[test]
    fn serving_certificate_is_an_ecdsa_p256_server_leaf_signed_by_the_ca() {
        let ca = Ca::generate(now(), CA_VALIDITY).unwrap();
        let serving = ca.issue(&names(), now(), SERVING_VALIDITY).unwrap();
        let (der, info) = parsed(&serving.cert_pem);
        let (_, ca_info) = parsed(ca.cert_pem());
        assert!(info.is_signed_by(&ca_info));
        assert!(!info.is_ca);
        key_matches(&info, serving.key_pem.as_bytes()).unwrap();

        let (_, certificate) = X509Certificate::from_der(&der).unwrap();
        assert_eq!(
            certificate.public_key().algorithm.algorithm,
            x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
        );
        let key_usage = certificate.key_usage().unwrap().unwrap().value;
        assert!(key_usage.digital_signature());
        assert!(!key_usage.key_cert_sign());
        let eku = certificate.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth);
        assert!(!eku.client_auth);
        let basic = certificate.basic_constraints().unwrap().unwrap().value;
        assert!(!basic.ca);
        assert!(certificate.extensions().iter().any(|e| matches!(
            e.parsed_extension(),
            ParsedExtension::AuthorityKeyIdentifier(_)
        )));
        assert_eq!(
            certificate.subject().to_string(),
            "CN=cheiron.cheiron-system.svc"
        );
    }

    #[test]
    fn ca_may_sign_certificates_but_no_intermediate() {
        let ca = Ca::generate(now(), CA_VALIDITY).unwrap();
        let (der, info) = parsed(ca.cert_pem());
        assert!(info.is_ca);
        assert!(info.is_signed_by(&info));
        let (_, certificate) = X509Certificate::from_der(&der).unwrap();
        let key_usage = certificate.key_usage().unwrap().unwrap().value;
        assert!(key_usage.key_cert_sign());
        let basic = certificate.basic_constraints().unwrap().unwrap().value;
        assert_eq!(basic.path_len_constraint, Some(0));
    }

    #[test]
    fn ca_is_valid_ten_years_and_serving_one_year_both_backdated_an_hour() {
        let ca = Ca::generate(now(), CA_VALIDITY).unwrap();
        let serving = ca.issue(&names(), now(), SERVING_VALIDITY).unwrap();
        let (_, ca_info) = parsed(ca.cert_pem());
        let (_, info) = parsed(&serving.cert_pem);
        let now = now().unix_timestamp();
        let day = 86_400;
        assert_eq!(ca_info.not_before, now - 3600);
        assert_eq!(ca_info.not_after, now + 3650 * day);
        assert_eq!(info.not_before, now - 3600);
        assert_eq!(info.not_after, now + 365 * day);
        assert_eq!(serving.not_after.unix_timestamp(), info.not_after);
    }

    #[test]
    fn serving_certificate_never_outlives_its_ca() {
        let ca = Ca::generate(now(), Duration::days(40)).unwrap();
        let serving = ca.issue(&names(), now(), SERVING_VALIDITY).unwrap();
        assert_eq!(serving.not_after, ca.not_after());
    }

    #[test]
    fn stored_ca_is_read_back_and_signs_like_the_original() {
        let original = Ca::generate(now(), CA_VALIDITY).unwrap();
        let stored = Ca::from_pem(
            original.cert_pem().as_bytes(),
            original.key_pem().as_bytes(),
        )
        .unwrap();
        assert_eq!(stored.cert_pem(), original.cert_pem());
        assert_eq!(stored.not_after(), original.not_after());
        let serving = stored.issue(&names(), now(), SERVING_VALIDITY).unwrap();
        let (_, info) = parsed(&serving.cert_pem);
        let (_, ca_info) = parsed(original.cert_pem());
        assert!(info.is_signed_by(&ca_info));
    }

    #[test]
    fn stored_ca_with_another_key_or_a_leaf_is_rejected() {
        let ca = Ca::generate(now(), CA_VALIDITY).unwrap();
        let other = Ca::generate(now(), CA_VALIDITY).unwrap();
        assert!(matches!(
            Ca::from_pem(ca.cert_pem().as_bytes(), other.key_pem().as_bytes()),
            Err(PkiError::KeyMismatch)
        ));
        let serving = ca.issue(&names(), now(), SERVING_VALIDITY).unwrap();
        assert!(matches!(
            Ca::from_pem(serving.cert_pem.as_bytes(), serving.key_pem.as_bytes()),
            Err(PkiError::NotCa)
        ));
        assert!(matches!(
            Ca::from_pem(b"garbage", b"garbage"),
            Err(PkiError::NoCertificate)
        ));
    }

    #[test]
    fn pem_round_trips_and_skips_other_blocks() {
        let ca = Ca::generate(now(), CA_VALIDITY).unwrap();
        let ders = certificates_from_pem(ca.cert_pem().as_bytes()).unwrap();
        let mixed = format!("{}{}", ca.key_pem(), encode_pem(&ders));
        assert_eq!(certificates_from_pem(mixed.as_bytes()).unwrap(), ders);
        assert_eq!(encode_pem(&ders), ca.cert_pem());
        assert!(!encode_pem(&ders).contains('\r'));
    }

    #[test]
    fn debug_never_shows_a_private_key() {
        let ca = Ca::generate(now(), CA_VALIDITY).unwrap();
        let serving = ca.issue(&names(), now(), SERVING_VALIDITY).unwrap();
        let shown = format!("{ca:?} {serving:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    }
}
