//! The names a serving certificate is issued for: the four DNS names by which the API server
//! and Pods reach a Service, plus any extra DNS names and IP addresses asked for.

use std::{collections::BTreeSet, fmt, net::IpAddr};

/// One subject alternative name. Ordered so that sets of them compare regardless of order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum San {
    /// A DNS name, lower case.
    Dns(String),
    /// An IP address.
    Ip(IpAddr),
}

impl fmt::Display for San {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            San::Dns(name) => f.write_str(name),
            San::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A name given on the command line that cannot go into a certificate.
#[derive(Debug, thiserror::Error)]
#[error("invalid --{flag} {value:?}: {why}")]
pub struct InvalidName {
    /// The flag it came from.
    pub flag: &'static str,
    /// What was given.
    pub value: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// The Service the webhook is reached through, and extra names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingNames {
    service: String,
    namespace: String,
    dns: Vec<String>,
    ips: Vec<IpAddr>,
}

impl ServingNames {
    /// The names of Service `service` in `namespace` (both DNS-1123 labels), with extra DNS
    /// names and IP addresses.
    pub fn new(
        service: &str,
        namespace: &str,
        dns: &[String],
        ips: &[IpAddr],
    ) -> Result<Self, InvalidName> {
        dns_label("service", service)?;
        dns_label("namespace", namespace)?;
        let dns = dns
            .iter()
            .map(|name| dns_name(name))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            service: service.to_owned(),
            namespace: namespace.to_owned(),
            dns,
            ips: ips.to_vec(),
        })
    }

    /// The Service name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The namespace of the Service (and of the Secrets `create` writes).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `<service>.<namespace>.svc`, the name the API server dials for a Service reference.
    pub fn common_name(&self) -> String {
        format!("{}.{}.svc", self.service, self.namespace)
    }

    /// Every subject alternative name, in certificate order and without duplicates:
    /// `<service>`, `<service>.<namespace>`, `<service>.<namespace>.svc`,
    /// `<service>.<namespace>.svc.cluster.local`, the extra DNS names, the IP addresses.
    pub fn sans(&self) -> Vec<San> {
        let Self {
            service,
            namespace,
            dns,
            ips,
        } = self;
        let service_names = [
            service.clone(),
            format!("{service}.{namespace}"),
            format!("{service}.{namespace}.svc"),
            format!("{service}.{namespace}.svc.cluster.local"),
        ];
        let mut seen = BTreeSet::new();
        service_names
            .into_iter()
            .chain(dns.iter().cloned())
            .map(San::Dns)
            .chain(ips.iter().copied().map(San::Ip))
            .filter(|san| seen.insert(san.clone()))
            .collect()
    }

    /// The subject alternative names as a set, to compare with a stored certificate's.
    pub fn san_set(&self) -> BTreeSet<San> {
        self.sans().into_iter().collect()
    }
}

/// A DNS-1123 label, as Service and namespace names are.
fn dns_label(flag: &'static str, value: &str) -> Result<(), InvalidName> {
    let invalid = |why| InvalidName {
        flag,
        value: value.to_owned(),
        why,
    };
    if value.is_empty() || value.len() > 63 {
        return Err(invalid("must be 1 to 63 characters"));
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(invalid(
            "must consist of lower case letters, digits and '-' (a DNS-1123 label)",
        ));
    }
    if value.starts_with('-') || value.ends_with('-') {
        return Err(invalid("must start and end with a letter or digit"));
    }
    Ok(())
}

/// A DNS name (possibly a `*.` wildcard), lower-cased as certificates compare them.
fn dns_name(value: &str) -> Result<String, InvalidName> {
    let invalid = |why| InvalidName {
        flag: "dns",
        value: value.to_owned(),
        why,
    };
    let name = value.to_ascii_lowercase();
    let labels = name.strip_prefix("*.").unwrap_or(&name);
    if name.len() > 253 || labels.is_empty() {
        return Err(invalid("must be a DNS name of at most 253 characters"));
    }
    let valid_label = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if !labels.split('.').all(valid_label) {
        return Err(invalid(
            "must be dot-separated labels of letters, digits and '-'",
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns(name: &str) -> San {
        San::Dns(name.to_owned())
    }

    #[test]
    fn service_names_come_first_then_extra_dns_names_then_ips() {
        let names = ServingNames::new(
            "cheiron",
            "cheiron-system",
            &["Webhook.Example.com".to_owned()],
            &["127.0.0.1".parse().unwrap()],
        )
        .unwrap();
        assert_eq!(
            names.sans(),
            vec![
                dns("cheiron"),
                dns("cheiron.cheiron-system"),
                dns("cheiron.cheiron-system.svc"),
                dns("cheiron.cheiron-system.svc.cluster.local"),
                dns("webhook.example.com"),
                San::Ip("127.0.0.1".parse().unwrap()),
            ]
        );
        assert_eq!(names.common_name(), "cheiron.cheiron-system.svc");
    }

    #[test]
    fn duplicate_names_appear_once() {
        let names = ServingNames::new(
            "hook",
            "ns",
            &[
                "hook.ns.svc".to_owned(),
                "extra".to_owned(),
                "EXTRA".to_owned(),
            ],
            &["::1".parse().unwrap(), "::1".parse().unwrap()],
        )
        .unwrap();
        let sans = names.sans();
        assert_eq!(sans.len(), 6, "{sans:?}");
        assert_eq!(names.san_set().len(), 6);
    }

    #[test]
    fn invalid_service_namespace_and_dns_names_are_rejected_with_the_flag() {
        let error = ServingNames::new("Hook", "ns", &[], &[]).unwrap_err();
        assert_eq!(error.flag, "service");
        let error = ServingNames::new("hook", "-ns", &[], &[]).unwrap_err();
        assert_eq!(error.flag, "namespace");
        let error = ServingNames::new("hook", "ns", &["a..b".to_owned()], &[]).unwrap_err();
        assert_eq!(error.flag, "dns");
        assert!(
            error.to_string().starts_with("invalid --dns \"a..b\""),
            "{error}"
        );
        assert!(ServingNames::new("hook", "ns", &["*.example.com".to_owned()], &[]).is_ok());
    }
}
