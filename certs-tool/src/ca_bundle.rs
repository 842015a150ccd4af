//! `caBundle` across a CA rotation: the new CA first, then the previous CAs still valid, so
//! that an API server that has the new bundle also accepts a webhook replica still serving a
//! certificate of the old CA. Pure: no I/O, `now` given.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;

use crate::pki::{CertificateInfo, encode_pem};

/// Most CAs a `caBundle` holds: the current one and two before it.
pub const MAX_CAS: usize = 3;

/// The CAs `caBundle` should hold (DER, in order): those of the Secret's `ca.crt`, then the
/// distinct CAs of `previous` that are still valid at `now` (Unix seconds), at most
/// [`MAX_CAS`] in all. Blocks of `previous` that are not certificates are dropped.
pub fn merge(current: &[Vec<u8>], previous: &[u8], now: i64) -> Vec<Vec<u8>> {
    let mut merged: Vec<Vec<u8>> = Vec::with_capacity(MAX_CAS);
    for der in current {
        if !merged.contains(der) {
            merged.push(der.clone());
        }
    }
    for der in certificates(previous) {
        let still_valid = CertificateInfo::from_der(&der).is_ok_and(|ca| ca.not_after > now);
        if still_valid && !merged.contains(&der) {
            merged.push(der);
        }
    }
    merged.truncate(MAX_CAS);
    merged
}

/// The certificates (DER) of a `caBundle`; nothing if it is not PEM.
pub fn certificates(bundle: &[u8]) -> Vec<Vec<u8>> {
    pem::parse_many(bundle)
        .map(|blocks| {
            blocks
                .into_iter()
                .filter(|block| block.tag() == "CERTIFICATE")
                .map(pem::Pem::into_contents)
                .collect()
        })
        .unwrap_or_default()
}

/// One webhook whose `caBundle` changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleChange {
    /// The webhook's name within the configuration.
    pub webhook: String,
    /// The new `caBundle` (PEM).
    pub ca_bundle: Vec<u8>,
    /// How many CAs it holds.
    pub cas: usize,
}

/// The webhooks of `configuration` whose `caBundle` differs from [`merge`]'s answer; empty
/// when there is nothing to write. Bundles are compared by their certificates, so one
/// written in another PEM layout is not rewritten.
pub fn changes(
    configuration: &MutatingWebhookConfiguration,
    current: &[Vec<u8>],
    now: i64,
) -> Vec<BundleChange> {
    configuration
        .webhooks
        .iter()
        .flatten()
        .filter_map(|webhook| {
            let previous = webhook
                .client_config
                .ca_bundle
                .as_ref()
                .map(|bundle| bundle.0.as_slice())
                .unwrap_or_default();
            let merged = merge(current, previous, now);
            (merged != certificates(previous)).then(|| BundleChange {
                webhook: webhook.name.clone(),
                ca_bundle: encode_pem(&merged).into_bytes(),
                cas: merged.len(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        ByteString,
        api::admissionregistration::v1::{MutatingWebhook, WebhookClientConfig},
    };
    use time::{Duration, OffsetDateTime};

    use super::*;
    use crate::pki::{Ca, certificates_from_pem};

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    fn ca(days: i64) -> Vec<u8> {
        let ca = Ca::generate(now(), Duration::days(days)).unwrap();
        certificates_from_pem(ca.cert_pem().as_bytes())
            .unwrap()
            .remove(0)
    }

    fn bundle(cas: &[&Vec<u8>]) -> Vec<u8> {
        let ders: Vec<Vec<u8>> = cas.iter().map(|c| (*c).clone()).collect();
        encode_pem(&ders).into_bytes()
    }

    #[test]
    fn empty_bundle_gets_the_current_ca() {
        let current = ca(3650);
        let now = now().unix_timestamp();
        assert_eq!(
            merge(std::slice::from_ref(&current), b"", now),
            vec![current]
        );
    }

    #[test]
    fn rotation_puts_the_new_ca_first_and_keeps_the_previous_one() {
        let (old, new) = (ca(3650), ca(3650));
        let now = now().unix_timestamp();
        let merged = merge(std::slice::from_ref(&new), &bundle(&[&old]), now);
        assert_eq!(merged, vec![new.clone(), old.clone()]);
        // Applying it again changes nothing.
        assert_eq!(
            merge(std::slice::from_ref(&new), &bundle(&[&new, &old]), now),
            merged
        );
    }

    #[test]
    fn expired_previous_cas_are_dropped_and_duplicates_kept_once() {
        let (expired, old, new) = (ca(10), ca(3650), ca(3650));
        let now = (now() + Duration::days(11)).unix_timestamp();
        let previous = bundle(&[&old, &expired, &old, &new]);
        assert_eq!(
            merge(std::slice::from_ref(&new), &previous, now),
            vec![new, old]
        );
    }

    #[test]
    fn bundle_is_bounded_to_three_cas_newest_first() {
        let cas: Vec<Vec<u8>> = (0..5).map(|_| ca(3650)).collect();
        let now = now().unix_timestamp();
        let previous = bundle(&[&cas[1], &cas[2], &cas[3], &cas[4]]);
        let merged = merge(std::slice::from_ref(&cas[0]), &previous, now);
        assert_eq!(merged, vec![cas[0].clone(), cas[1].clone(), cas[2].clone()]);
    }

    #[test]
    fn garbage_in_the_previous_bundle_is_replaced() {
        let current = ca(3650);
        let now = now().unix_timestamp();
        assert_eq!(
            merge(std::slice::from_ref(&current), b"not a bundle", now),
            vec![current]
        );
    }

    fn configuration(bundles: &[Option<Vec<u8>>]) -> MutatingWebhookConfiguration {
        MutatingWebhookConfiguration {
            webhooks: Some(
                bundles
                    .iter()
                    .enumerate()
                    .map(|(i, bundle)| MutatingWebhook {
                        name: format!("hook-{i}.cheiron.anny.co"),
                        client_config: WebhookClientConfig {
                            ca_bundle: bundle.clone().map(ByteString),
                            ..WebhookClientConfig::default()
                        },
                        ..MutatingWebhook::default()
                    })
                    .collect(),
            ),
            ..MutatingWebhookConfiguration::default()
        }
    }

    #[test]
    fn every_webhook_whose_bundle_differs_is_changed_and_no_other() {
        let (old, new) = (ca(3650), ca(3650));
        let now = now().unix_timestamp();
        let current = [new.clone()];
        let config = configuration(&[None, Some(bundle(&[&new])), Some(bundle(&[&old]))]);
        let changes = changes(&config, &current, now);
        assert_eq!(
            changes,
            vec![
                BundleChange {
                    webhook: "hook-0.cheiron.anny.co".to_owned(),
                    ca_bundle: bundle(&[&new]),
                    cas: 1,
                },
                BundleChange {
                    webhook: "hook-2.cheiron.anny.co".to_owned(),
                    ca_bundle: bundle(&[&new, &old]),
                    cas: 2,
                },
            ]
        );
    }

    #[test]
    fn bundle_with_the_same_certificates_in_another_layout_is_unchanged() {
        let current = ca(3650);
        let now = now().unix_timestamp();
        let crlf = String::from_utf8(bundle(&[&current]))
            .unwrap()
            .replace('\n', "\r\n")
            .into_bytes();
        assert!(changes(&configuration(&[Some(crlf)]), &[current], now).is_empty());
        assert!(changes(&configuration(&[]), &[ca(3650)], now).is_empty());
    }
}
