//! The `MutatingWebhookConfiguration` with docs/design.md §5's safe defaults: failures ignored, short
//! timeout, no side effects, system and opted-out namespaces excluded before the request is
//! even sent, and opted-out objects skipped by `matchConditions`.

use std::collections::BTreeMap;

use k8s_openapi::{
    ByteString,
    api::admissionregistration::v1::{
        MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
        ServiceReference, WebhookClientConfig,
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta},
};

use crate::api::{annotation, label};

/// How the apiserver reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookClient {
    /// Through a Service (in-cluster installs).
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The Service port.
        port: i32,
    },
    /// A URL (`https://127.0.0.1:8443/mutate`), for out-of-cluster webhooks and tests.
    Url(String),
}

/// What happens when the webhook cannot be reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Admit unchanged (default): cheiron never blocks the cluster.
    #[default]
    Ignore,
    /// Reject the request.
    Fail,
}

impl FailurePolicy {
    fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Ignore => "Ignore",
            FailurePolicy::Fail => "Fail",
        }
    }
}

/// The parameters of the registration.
#[derive(Clone, Debug)]
pub struct WebhookRegistration {
    /// `metadata.name` of the configuration.
    pub name: String,
    /// How the apiserver reaches the webhook.
    pub client: WebhookClient,
    /// PEM of the CA(s) that signed the serving certificate; `None` leaves `caBundle` to be
    /// injected (cheiron-certs patch, cert-manager).
    pub ca_bundle: Option<Vec<u8>>,
    /// Default [`FailurePolicy::Ignore`].
    pub failure_policy: FailurePolicy,
    /// Default 5.
    pub timeout_seconds: i32,
    /// cheiron's own namespace, never sent to the webhook.
    pub own_namespace: String,
}

impl WebhookRegistration {
    /// A registration with the defaults of docs/design.md §5.
    pub fn new(
        name: impl Into<String>,
        client: WebhookClient,
        own_namespace: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            client,
            ca_bundle: None,
            failure_policy: FailurePolicy::Ignore,
            timeout_seconds: 5,
            own_namespace: own_namespace.into(),
        }
    }

    /// The configuration object.
    pub fn configuration(&self) -> MutatingWebhookConfiguration {
        let Self {
            name,
            client,
            ca_bundle,
            failure_policy,
            timeout_seconds,
            own_namespace,
        } = self;
        let client_config = WebhookClientConfig {
            ca_bundle: ca_bundle.clone().map(ByteString),
            service: match client {
                WebhookClient::Service {
                    namespace,
                    name,
                    port,
                } => Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some("/mutate".to_owned()),
                    port: Some(*port),
                }),
                WebhookClient::Url(_) => None,
            },
            url: match client {
                WebhookClient::Url(url) => Some(url.clone()),
                WebhookClient::Service { .. } => None,
            },
        };
        let rule = |resource: &str, operations: &[&str]| RuleWithOperations {
            api_groups: Some(vec![String::new()]),
            api_versions: Some(vec!["v1".to_owned()]),
            operations: Some(operations.iter().map(|o| (*o).to_owned()).collect()),
            resources: Some(vec![resource.to_owned()]),
            scope: Some("Namespaced".to_owned()),
        };
        let not_in = |key: &str, values: Vec<String>| LabelSelectorRequirement {
            key: key.to_owned(),
            operator: "NotIn".to_owned(),
            values: Some(values),
        };
        let opted_out = |key: &str, value: &str| MatchCondition {
            name: format!("not-{}-{value}", key.rsplit('/').next().unwrap_or(key)),
            expression: format!(
                "!has(object.metadata.annotations) || !('{key}' in object.metadata.annotations) || object.metadata.annotations['{key}'] != '{value}'"
            ),
        };
        MutatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    label::MANAGED_BY.to_owned(),
                    label::MANAGED_BY_VALUE.to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            webhooks: Some(vec![MutatingWebhook {
                name: "inject.cheiron.anny.co".to_owned(),
                admission_review_versions: vec!["v1".to_owned()],
                client_config,
                failure_policy: Some(failure_policy.as_str().to_owned()),
                match_policy: Some("Equivalent".to_owned()),
                side_effects: "None".to_owned(),
                timeout_seconds: Some(*timeout_seconds),
                reinvocation_policy: Some("IfNeeded".to_owned()),
                rules: Some(vec![
                    rule("pods", &["CREATE"]),
                    rule("serviceaccounts", &["CREATE", "UPDATE"]),
                ]),
                namespace_selector: Some(LabelSelector {
                    match_expressions: Some(vec![
                        not_in(
                            "kubernetes.io/metadata.name",
                            vec!["kube-system".to_owned(), own_namespace.clone()],
                        ),
                        not_in(annotation::IGNORE, vec!["true".to_owned()]),
                    ]),
                    match_labels: None,
                }),
                object_selector: None,
                match_conditions: Some(vec![
                    opted_out(annotation::IGNORE, "true"),
                    opted_out(annotation::RECONCILABLE, "false"),
                ]),
            }]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_never_block_the_cluster_and_exclude_system_and_own_namespaces()
    -> Result<(), serde_json::Error> {
        let config = WebhookRegistration::new(
            "cheiron",
            WebhookClient::Service {
                namespace: "cheiron-system".into(),
                name: "cheiron".into(),
                port: 443,
            },
            "cheiron-system",
        )
        .configuration();
        let json = serde_json::to_value(&config)?;
        let hook = &json["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(hook["sideEffects"], "None");
        assert_eq!(hook["timeoutSeconds"], 5);
        assert_eq!(hook["reinvocationPolicy"], "IfNeeded");
        assert_eq!(hook["admissionReviewVersions"], serde_json::json!(["v1"]));
        assert_eq!(hook["clientConfig"]["service"]["path"], "/mutate");
        assert_eq!(
            hook["namespaceSelector"]["matchExpressions"][0]["values"],
            serde_json::json!(["kube-system", "cheiron-system"])
        );
        assert_eq!(
            hook["namespaceSelector"]["matchExpressions"][1]["key"],
            annotation::IGNORE
        );
        assert_eq!(
            hook["rules"][0]["operations"],
            serde_json::json!(["CREATE"])
        );
        assert_eq!(
            hook["rules"][1]["operations"],
            serde_json::json!(["CREATE", "UPDATE"])
        );
        let conditions: Vec<&str> = hook["matchConditions"]
            .as_array()
            .map(|c| c.iter().filter_map(|c| c["expression"].as_str()).collect())
            .unwrap_or_default();
        assert!(conditions[0].contains("['cheiron.anny.co/ignore'] != 'true'"));
        assert!(conditions[1].contains("['cheiron.anny.co/reconcilable'] != 'false'"));
        Ok(())
    }
}
