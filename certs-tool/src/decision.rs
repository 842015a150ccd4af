//! What `create` does with what is stored: keep it, issue anew (keeping the CA if it has
//! life left), or refuse to touch a Secret that is not cheiron's. Pure: no I/O, `now` given.

use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use time::{Duration, OffsetDateTime};

use crate::{
    names::{San, ServingNames},
    pki::{Ca, CertificateInfo, certificates_from_pem, key_matches},
    secret::{CA_KEY, CERT_KEY, Foreign, KEY_KEY, data, ownership},
};

/// A certificate (serving or CA) that expires within this is replaced.
pub const RENEW_BEFORE: Duration = Duration::days(30);

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The stored serving certificate is valid for the wanted names for more than
    /// [`RENEW_BEFORE`], and so is its CA.
    Keep {
        /// `notAfter` of the stored serving certificate (Unix seconds).
        not_after: i64,
    },
    /// Issue a new serving certificate.
    Issue {
        /// Why.
        reason: Reissue,
        /// Sign it with the stored CA (valid for more than [`RENEW_BEFORE`]) instead of a new
        /// one, so that `caBundle` does not change.
        reuse_ca: bool,
    },
    /// A Secret of one of the two names exists and is not cheiron's.
    Refuse(Refusal),
}

/// Why a new serving certificate is issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reissue {
    /// There is no serving Secret.
    Missing,
    /// The serving Secret does not hold a usable certificate, key and CA.
    Unreadable(String),
    /// It was issued for other names.
    NamesChanged {
        /// Names wanted that it lacks.
        added: Vec<San>,
        /// Names it has that are no longer wanted.
        removed: Vec<San>,
    },
    /// It expires within [`RENEW_BEFORE`].
    Expiring {
        /// Its `notAfter` (Unix seconds).
        not_after: i64,
    },
    /// The CA that signed it expires within [`RENEW_BEFORE`].
    CaExpiring {
        /// The CA's `notAfter` (Unix seconds).
        not_after: i64,
    },
}

impl fmt::Display for Reissue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |names: &[San]| {
            names
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Reissue::Missing => f.write_str("no certificate stored yet"),
            Reissue::Unreadable(why) => write!(f, "the stored certificate is unusable: {why}"),
            Reissue::NamesChanged { added, removed } => {
                f.write_str("the names changed")?;
                if !added.is_empty() {
                    write!(f, "; added {}", list(added))?;
                }
                if !removed.is_empty() {
                    write!(f, "; removed {}", list(removed))?;
                }
                Ok(())
            }
            Reissue::Expiring { not_after } => {
                write!(
                    f,
                    "the certificate expires soon (notAfter {})",
                    date(*not_after)
                )
            }
            Reissue::CaExpiring { not_after } => {
                write!(f, "its CA expires soon (notAfter {})", date(*not_after))
            }
        }
    }
}

/// A Secret cheiron will not overwrite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `namespace/name` of the Secret.
    pub secret: String,
    /// Why it is not cheiron's.
    pub why: Foreign,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Secret {} exists and is not cheiron's ({}); cheiron never overwrites a Secret it \
             does not own: delete it or choose another --secret-name",
            self.secret, self.why
        )
    }
}

/// Decides what `create` does, given the serving Secret and the CA Secret as stored (if they
/// exist), the names wanted, and the time.
pub fn decide(
    serving: Option<&Secret>,
    ca: Option<&Secret>,
    wanted: &ServingNames,
    now: OffsetDateTime,
) -> Decision {
    for secret in [serving, ca].into_iter().flatten() {
        if let Err(why) = ownership(secret) {
            return Decision::Refuse(Refusal {
                secret: format!(
                    "{}/{}",
                    secret.namespace().unwrap_or_default(),
                    secret.name_any()
                ),
                why,
            });
        }
    }
    let renew_at = (now + RENEW_BEFORE).unix_timestamp();
    let reuse_ca = ca.is_some_and(|ca| stored_ca(ca).is_ok_and(|ca| ca.not_after > renew_at));
    let reason = match serving {
        None => Reissue::Missing,
        Some(serving) => match check_serving(serving, wanted, renew_at) {
            Ok(not_after) => return Decision::Keep { not_after },
            Err(reason) => reason,
        },
    };
    Decision::Issue { reason, reuse_ca }
}

/// The stored CA, read as [`Ca::from_pem`] would; its certificate's details on success.
fn stored_ca(secret: &Secret) -> Result<CertificateInfo, String> {
    let cert = data(secret, CERT_KEY).ok_or("no tls.crt")?;
    let key = data(secret, KEY_KEY).ok_or("no tls.key")?;
    Ca::from_pem(cert, key).map_err(|e| e.to_string())?;
    CertificateInfo::first_from_pem(cert).map_err(|e| e.to_string())
}

/// `notAfter` of the serving certificate if it can be kept, else why not.
fn check_serving(secret: &Secret, wanted: &ServingNames, renew_at: i64) -> Result<i64, Reissue> {
    let unreadable = |key: &str, why: String| Reissue::Unreadable(format!("{key}: {why}"));
    let required = |key: &'static str| {
        data(secret, key)
            .filter(|bytes| !bytes.is_empty())
            .ok_or_else(|| unreadable(key, "missing".to_owned()))
    };
    let leaf = CertificateInfo::first_from_pem(required(CERT_KEY)?)
        .map_err(|e| unreadable(CERT_KEY, e.to_string()))?;
    key_matches(&leaf, required(KEY_KEY)?).map_err(|e| unreadable(KEY_KEY, e.to_string()))?;
    let cas = certificates_from_pem(required(CA_KEY)?)
        .map_err(|e| unreadable(CA_KEY, e.to_string()))?
        .iter()
        .map(|der| CertificateInfo::from_der(der))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable(CA_KEY, e.to_string()))?;
    let ca = cas
        .iter()
        .find(|ca| leaf.is_signed_by(ca))
        .ok_or_else(|| unreadable(CERT_KEY, "not signed by a CA in ca.crt".to_owned()))?;

    let wanted = wanted.san_set();
    if leaf.sans != wanted {
        return Err(Reissue::NamesChanged {
            added: wanted.difference(&leaf.sans).cloned().collect(),
            removed: leaf.sans.difference(&wanted).cloned().collect(),
        });
    }
    if leaf.not_after <= renew_at {
        return Err(Reissue::Expiring {
            not_after: leaf.not_after,
        });
    }
    if ca.not_after <= renew_at {
        return Err(Reissue::CaExpiring {
            not_after: ca.not_after,
        });
    }
    Ok(leaf.not_after)
}

/// RFC 3339, for messages.
pub(crate) fn date(unix: i64) -> String {
    OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| unix.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::{
        pki::{CA_VALIDITY, SERVING_VALIDITY},
        secret::{MANAGED_BY, TLS_TYPE, ca_secret, serving_secret},
    };

    const NS: &str = "cheiron-system";

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    fn names(dns: &[&str]) -> ServingNames {
        let dns: Vec<String> = dns.iter().map(|d| (*d).to_owned()).collect();
        ServingNames::new("cheiron", NS, &dns, &[]).unwrap()
    }

    /// A serving Secret and a CA Secret as `create` writes them.
    fn stored(names: &ServingNames, ca_validity: Duration, serving: Duration) -> (Secret, Secret) {
        let ca = Ca::generate(now(), ca_validity).unwrap();
        let issued = ca.issue(names, now(), serving).unwrap();
        (
            serving_secret("cheiron-tls", NS, &issued, &ca, None),
            ca_secret("cheiron-tls-ca", NS, &ca, None),
        )
    }

    fn later(days: i64) -> OffsetDateTime {
        now() + Duration::days(days)
    }

    #[test]
    fn nothing_stored_issues_with_a_new_ca() {
        assert_eq!(
            decide(None, None, &names(&[]), now()),
            Decision::Issue {
                reason: Reissue::Missing,
                reuse_ca: false
            }
        );
    }

    #[test]
    fn valid_certificate_for_the_same_names_is_kept() {
        let (serving, ca) = stored(&names(&["a.example"]), CA_VALIDITY, SERVING_VALIDITY);
        let decision = decide(Some(&serving), Some(&ca), &names(&["a.example"]), now());
        assert_eq!(
            decision,
            Decision::Keep {
                not_after: (now() + SERVING_VALIDITY).unix_timestamp()
            }
        );
        // Still kept a day before the renewal window opens, and without the CA Secret.
        let decision = decide(Some(&serving), None, &names(&["a.example"]), later(334));
        assert!(matches!(decision, Decision::Keep { .. }), "{decision:?}");
    }

    #[test]
    fn changed_names_reissue_with_the_same_ca() {
        let (serving, ca) = stored(&names(&["a.example"]), CA_VALIDITY, SERVING_VALIDITY);
        let decision = decide(Some(&serving), Some(&ca), &names(&["b.example"]), now());
        assert_eq!(
            decision,
            Decision::Issue {
                reason: Reissue::NamesChanged {
                    added: vec![San::Dns("b.example".to_owned())],
                    removed: vec![San::Dns("a.example".to_owned())],
                },
                reuse_ca: true
            }
        );
    }

    #[test]
    fn certificate_expiring_within_30_days_is_reissued_with_the_same_ca() {
        let (serving, ca) = stored(&names(&[]), CA_VALIDITY, SERVING_VALIDITY);
        let decision = decide(Some(&serving), Some(&ca), &names(&[]), later(336));
        assert_eq!(
            decision,
            Decision::Issue {
                reason: Reissue::Expiring {
                    not_after: (now() + SERVING_VALIDITY).unix_timestamp()
                },
                reuse_ca: true
            }
        );
    }

    #[test]
    fn stored_ca_is_reused_only_with_more_than_30_days_left() {
        // Serving certificate in its renewal window, CA with 210 days left: same CA.
        let (serving, ca) = stored(&names(&[]), Duration::days(400), Duration::days(200));
        let decision = decide(Some(&serving), Some(&ca), &names(&[]), later(190));
        assert!(
            matches!(
                decision,
                Decision::Issue {
                    reason: Reissue::Expiring { .. },
                    reuse_ca: true
                }
            ),
            "{decision:?}"
        );
        // Both expire in 20 days: new CA.
        let (serving, ca) = stored(&names(&[]), Duration::days(60), Duration::days(60));
        let decision = decide(Some(&serving), Some(&ca), &names(&[]), later(40));
        assert!(
            matches!(
                decision,
                Decision::Issue {
                    reason: Reissue::Expiring { .. },
                    reuse_ca: false
                }
            ),
            "{decision:?}"
        );
    }

    #[test]
    fn certificate_whose_ca_expires_within_30_days_is_reissued_by_the_stored_ca() {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        // Issued elsewhere, without cutting the leaf at its CA's notAfter.
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.not_before = now() - Duration::days(1);
        ca_params.not_after = later(20);
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let sans = names(&[])
            .sans()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>();
        let mut leaf_params = CertificateParams::new(sans).unwrap();
        leaf_params.not_before = now() - Duration::days(1);
        leaf_params.not_after = later(365);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
        let mut serving = foreign(TLS_TYPE, &[(MANAGED_BY, "cheiron")]);
        serving.data = Some(BTreeMap::from([
            (CERT_KEY.to_owned(), ByteString(leaf.pem().into_bytes())),
            (
                KEY_KEY.to_owned(),
                ByteString(leaf_key.serialize_pem().into_bytes()),
            ),
            (CA_KEY.to_owned(), ByteString(ca_cert.pem().into_bytes())),
        ]));
        let (_, stored_ca) = stored(&names(&[]), CA_VALIDITY, SERVING_VALIDITY);

        assert_eq!(
            decide(Some(&serving), Some(&stored_ca), &names(&[]), now()),
            Decision::Issue {
                reason: Reissue::CaExpiring {
                    not_after: later(20).unix_timestamp()
                },
                reuse_ca: true
            }
        );
    }

    #[test]
    fn garbage_in_an_own_secret_is_reissued() {
        let (mut serving, ca) = stored(&names(&[]), CA_VALIDITY, SERVING_VALIDITY);
        let data = serving.data.as_mut().unwrap();
        data.insert(CERT_KEY.to_owned(), ByteString(b"garbage".to_vec()));
        let decision = decide(Some(&serving), Some(&ca), &names(&[]), now());
        assert_eq!(
            decision,
            Decision::Issue {
                reason: Reissue::Unreadable("tls.crt: no PEM certificate found".to_owned()),
                reuse_ca: true
            }
        );
        serving.data = None;
        assert_eq!(
            decide(Some(&serving), Some(&ca), &names(&[]), now()),
            Decision::Issue {
                reason: Reissue::Unreadable("tls.crt: missing".to_owned()),
                reuse_ca: true
            }
        );
    }

    #[test]
    fn key_of_another_certificate_is_reissued() {
        let (mut serving, ca) = stored(&names(&[]), CA_VALIDITY, SERVING_VALIDITY);
        let (other, _) = stored(&names(&[]), CA_VALIDITY, SERVING_VALIDITY);
        let other_key = data(&other, KEY_KEY).unwrap().to_vec();
        serving
            .data
            .as_mut()
            .unwrap()
            .insert(KEY_KEY.to_owned(), ByteString(other_key));
        let decision = decide(Some(&serving), Some(&ca), &names(&[]), now());
        assert!(
            matches!(&decision, Decision::Issue { reason: Reissue::Unreadable(why), .. } if why.starts_with("tls.key")),
            "{decision:?}"
        );
    }

    #[test]
    fn certificate_not_signed_by_its_ca_crt_is_reissued() {
        let (mut serving, ca) = stored(&names(&[]), CA_VALIDITY, SERVING_VALIDITY);
        let (other, _) = stored(&names(&[]), CA_VALIDITY, SERVING_VALIDITY);
        let other_ca = data(&other, CA_KEY).unwrap().to_vec();
        serving
            .data
            .as_mut()
            .unwrap()
            .insert(CA_KEY.to_owned(), ByteString(other_ca));
        let decision = decide(Some(&serving), Some(&ca), &names(&[]), now());
        assert!(
            matches!(&decision, Decision::Issue { reason: Reissue::Unreadable(why), .. } if why.contains("not signed")),
            "{decision:?}"
        );
    }

    #[test]
    fn unusable_ca_secret_means_a_new_ca() {
        let (serving, mut ca) = stored(&names(&["a.example"]), CA_VALIDITY, SERVING_VALIDITY);
        ca.data
            .as_mut()
            .unwrap()
            .insert(KEY_KEY.to_owned(), ByteString(b"garbage".to_vec()));
        let decision = decide(Some(&serving), Some(&ca), &names(&[]), now());
        assert!(
            matches!(
                decision,
                Decision::Issue {
                    reuse_ca: false,
                    ..
                }
            ),
            "{decision:?}"
        );
    }

    fn foreign(secret_type: &str, labels: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("cheiron-tls".to_owned()),
                namespace: Some(NS.to_owned()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..ObjectMeta::default()
            },
            type_: Some(secret_type.to_owned()),
            ..Secret::default()
        }
    }

    #[test]
    fn secret_that_is_not_tls_or_not_labelled_is_refused() {
        let opaque = foreign("Opaque", &[(MANAGED_BY, "cheiron")]);
        assert_eq!(
            decide(Some(&opaque), None, &names(&[]), now()),
            Decision::Refuse(Refusal {
                secret: "cheiron-system/cheiron-tls".to_owned(),
                why: Foreign::NotTls {
                    secret_type: "Opaque".to_owned()
                }
            })
        );
        let unlabelled = foreign(TLS_TYPE, &[]);
        let decision = decide(Some(&unlabelled), None, &names(&[]), now());
        let Decision::Refuse(refusal) = decision else {
            panic!("{decision:?}");
        };
        assert_eq!(refusal.why, Foreign::NotManaged);
        assert_eq!(
            refusal.to_string(),
            "Secret cheiron-system/cheiron-tls exists and is not cheiron's (it lacks the label \
             app.kubernetes.io/managed-by=cheiron); cheiron never overwrites a Secret it does \
             not own: delete it or choose another --secret-name"
        );
    }

    #[test]
    fn foreign_ca_secret_is_refused_even_when_the_serving_secret_is_fine() {
        let (serving, _) = stored(&names(&[]), CA_VALIDITY, SERVING_VALIDITY);
        let ca = foreign("Opaque", &[]);
        assert!(matches!(
            decide(Some(&serving), Some(&ca), &names(&[]), now()),
            Decision::Refuse(_)
        ));
    }

    #[test]
    fn reasons_read_as_sentences() {
        let reason = Reissue::NamesChanged {
            added: vec![San::Dns("b".to_owned()), San::Ip("::1".parse().unwrap())],
            removed: vec![],
        };
        assert_eq!(reason.to_string(), "the names changed; added b, ::1");
        assert_eq!(
            Reissue::Expiring { not_after: 0 }.to_string(),
            "the certificate expires soon (notAfter 1970-01-01T00:00:00Z)"
        );
    }
}
