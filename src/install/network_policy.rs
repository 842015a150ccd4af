//! The NetworkPolicies of cheiron's Pods: each admits only the ports its Pods serve.
//!
//! - The webhook port admits everyone. Only the apiserver needs it, but where the apiserver's
//!   connections come from differs by distribution (a control plane node, a managed control
//!   plane's network, a konnectivity agent Pod), and a policy that guesses wrong fails
//!   silently: with `failurePolicy: Ignore`, Pods are admitted without their pull secrets.
//!   What the port answers is harmless to anyone else: a patch that names Secrets, served by
//!   an identity that can read no Secret. docs/install.md says how to restrict it per
//!   distribution.
//! - The admin port (`/healthz`, `/readyz`, `/metrics`) admits Pods of cheiron's namespace
//!   only. Kubelet probes need no rule: NetworkPolicy always admits traffic from the Pod's own
//!   node.
//! - Egress is not restricted: the apiserver's address is as distribution-specific as its
//!   source address.

use k8s_openapi::{
    api::networking::v1::{
        NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
        NetworkPolicySpec,
    },
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};

use super::installation::{ADMIN_PORT, Install, Workload};

fn port(number: i32) -> Vec<NetworkPolicyPort> {
    vec![NetworkPolicyPort {
        port: Some(IntOrString::Int(number)),
        protocol: Some("TCP".to_owned()),
        end_port: None,
    }]
}

/// The policy of `workload`'s Pods: ingress to the webhook port from anywhere (Pods that serve
/// the webhook only), to the admin port from cheiron's namespace; nothing else.
pub fn network_policy(install: &Install, workload: Workload) -> NetworkPolicy {
    let mut ingress = Vec::new();
    if workload.serves_webhook() {
        ingress.push(NetworkPolicyIngressRule {
            from: None,
            ports: Some(port(install.webhook.port)),
        });
    }
    ingress.push(NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer {
            pod_selector: Some(LabelSelector::default()),
            ..NetworkPolicyPeer::default()
        }]),
        ports: Some(port(ADMIN_PORT)),
    });
    NetworkPolicy {
        metadata: install.meta(workload.name(), workload.component()),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(install.selector(workload.component())),
                match_expressions: None,
            }),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(ingress),
            egress: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::WEBHOOK_PORT;

    fn ports(rule: &NetworkPolicyIngressRule) -> Vec<IntOrString> {
        rule.ports
            .iter()
            .flatten()
            .filter_map(|p| p.port.clone())
            .collect()
    }

    #[test]
    fn the_webhook_port_is_open_and_the_admin_port_only_to_the_namespace() {
        let spec = network_policy(&Install::default(), Workload::Webhook)
            .spec
            .unwrap_or_default();
        let rules = spec.ingress.unwrap_or_default();
        assert_eq!(rules.len(), 2);
        assert_eq!(ports(&rules[0]), [IntOrString::Int(WEBHOOK_PORT)]);
        assert!(rules[0].from.is_none(), "from anywhere");
        assert_eq!(ports(&rules[1]), [IntOrString::Int(ADMIN_PORT)]);
        let from = rules[1].from.clone().unwrap_or_default();
        assert_eq!(from.len(), 1);
        assert_eq!(from[0].pod_selector, Some(LabelSelector::default()));
        assert!(from[0].namespace_selector.is_none(), "this namespace only");
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]));
    }

    #[test]
    fn the_controller_admits_only_its_admin_port() {
        let rules = network_policy(&Install::default(), Workload::Controller)
            .spec
            .and_then(|s| s.ingress)
            .unwrap_or_default();
        let all: Vec<IntOrString> = rules.iter().flat_map(ports).collect();
        assert_eq!(all, [IntOrString::Int(ADMIN_PORT)]);
        assert!(rules.iter().all(|r| r.from.is_some()));
    }
}
