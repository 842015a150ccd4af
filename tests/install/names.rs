//! Names that stay valid for the longest release name Helm allows (53 characters): every
//! object name, and every label value, the chart renders is a DNS label (at most 63), and no
//! two objects of a kind share a name. `cluster` applies the same renderings to the real
//! apiserver in a server-side dry run.

use std::collections::BTreeSet;

use super::*;

/// A release name as long as Helm allows, without the chart's name in it: the full name is
/// then `<release>-cheiron`, longer still, and cut.
pub(super) const LONGEST_RELEASE: &str = "a-release-name-exactly-as-long-as-helm-allows-53chars";

/// Every option combination the chart tests render; `cluster` dry-runs each of them.
pub(super) fn renderings() -> Vec<Vec<&'static str>> {
    vec![
        vec![],
        vec![
            "certificates.source=secret",
            "certificates.secretName=my-tls",
            "certificates.caBundle=Zm9v",
        ],
        CERT_MANAGER_AND_MONITORING.to_vec(),
        vec!["deployment=combined"],
        super::values::OPERATOR_VALUES.to_vec(),
        vec![
            "networkPolicy.webhookFrom[0].ipBlock.cidr=172.16.0.0/28",
            "networkPolicy.webhookFrom[1].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system",
            "networkPolicy.webhookFrom[1].podSelector.matchLabels.app=konnectivity-agent",
            "networkPolicy.adminFrom=null",
        ],
        // Every optional part that adds names of its own, with the longest suffixes
        // (`-credential-provider-tokens`, `-node-agent-metrics-auth`).
        vec![
            "node.enabled=true",
            "node.credentialProvider.install=true",
            "metrics.auth=kubernetes",
            "fleet.enabled=true",
            "credentialProviders.enabled=true",
            "credentialProviders.serviceAccountTokens.serviceAccounts={ecr-puller}",
            "prometheusRule.enabled=true",
        ],
        vec![
            "deployment=combined",
            "node.enabled=true",
            "metrics.auth=kubernetes",
        ],
        // Monitoring with metrics auth: the Deployments probing HTTPS with the certificate
        // mounted, the scraper's ServiceAccount, token Secret and binding, the dashboard.
        vec![
            "metrics.auth=kubernetes",
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "grafanaDashboard.enabled=true",
        ],
        // The apiserver compiles the CEL conditions and checks the selector.
        super::chart::NARROWED_WEBHOOK.to_vec(),
        super::values::COMPONENT_VALUES.to_vec(),
    ]
}

/// A DNS-1123 label: what Services, Namespaces, Jobs' Pod labels and label values need.
fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !name.is_empty()
        && name.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// The names an object's arguments give to other objects: its Lease and the node namespace.
fn named_in_args(object: &Value) -> Vec<String> {
    let mut names = Vec::new();
    for container in object["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for arg in container["args"].as_array().into_iter().flatten() {
            let arg = arg.as_str().unwrap_or_default();
            for flag in ["--leader-election-id=", "--node-namespace="] {
                if let Some(name) = arg.strip_prefix(flag) {
                    names.push(name.to_owned());
                }
            }
        }
    }
    names
}

#[test]
fn a_53_character_release_renders_only_dns_label_names_each_once() -> Result {
    assert_eq!(LONGEST_RELEASE.len(), 53, "Helm's limit");
    for values in renderings() {
        let objects = render_with_tests(LONGEST_RELEASE, &values)?;
        let mut seen = BTreeSet::new();
        for object in &objects {
            let kind = object["kind"].as_str().unwrap_or_default();
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
            let what = format!("{values:?}: {kind} {namespace}/{name}");
            if kind == "CustomResourceDefinition" {
                // `<plural>.<group>`, a DNS subdomain that no release name changes.
                assert!(name.ends_with(".cheiron.anny.co"), "{what}");
            } else {
                assert!(is_dns_label(name), "{what}: not a DNS label");
            }
            assert!(namespace.is_empty() || is_dns_label(namespace), "{what}");
            assert!(
                seen.insert((kind.to_owned(), namespace.to_owned(), name.to_owned())),
                "{what}: rendered twice"
            );
            for labels in [
                &object["metadata"]["labels"],
                &object["spec"]["template"]["metadata"]["labels"],
            ] {
                for (key, value) in labels.as_object().into_iter().flatten() {
                    let value = value.as_str().unwrap_or_default();
                    assert!(value.len() <= 63, "{what}: label {key}={value}");
                }
            }
            for named in named_in_args(object) {
                assert!(is_dns_label(&named), "{what}: names {named}");
            }
            // cert-manager's CA: an X.509 commonName has at most 64 characters.
            if let Some(common_name) = object["spec"]["commonName"].as_str() {
                assert!(common_name.len() <= 64, "{what}: {common_name}");
            }
            // Each name starts with the release's (cut) full name: the names are still told
            // apart by release.
            if !matches!(kind, "Namespace" | "CustomResourceDefinition") {
                assert!(name.starts_with(&LONGEST_RELEASE[..30]), "{what}");
            }
        }
        // The full name is cut to 36 characters, whatever the options.
        let fullname = LONGEST_RELEASE[..36].trim_end_matches('-');
        find(&objects, "MutatingWebhookConfiguration", fullname)?;
    }
    Ok(())
}

#[test]
fn release_names_up_to_36_characters_keep_every_name_as_it_was() -> Result {
    let release = "cheiron-in-the-eu-west-1-production";
    let objects = render_release(release, &[])?;
    find(&objects, "Service", release)?;
    find(&objects, "Deployment", &format!("{release}-controller"))?;
    find(&objects, "Job", &format!("{release}-certs-create"))?;
    Ok(())
}

/// The node namespace `<release namespace>-node` of a release in a 63-character namespace is
/// cut to a DNS label, the same one `cheiron manifests --node` gives that namespace.
#[test]
fn the_node_namespace_of_the_longest_namespace_is_the_plain_manifests_one() -> Result {
    let namespace = format!("team-{}", "n".repeat(58));
    assert_eq!(namespace.len(), 63);
    let output = run_helm(&[
        "template",
        RELEASE,
        "charts/cheiron",
        "--namespace",
        &namespace,
        "--set",
        "node.enabled=true",
    ])?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let objects = documents(&output.stdout)?;
    let node = cheiron::install::NodeAgentSetup::default().namespace_of(&namespace);
    assert!(is_dns_label(&node), "{node}");
    find(&objects, "Namespace", &node)?;
    let controller = find(&objects, "Deployment", "cheiron-controller")?;
    assert!(
        named_in_args(controller).contains(&node),
        "--node-namespace={node}"
    );
    Ok(())
}
