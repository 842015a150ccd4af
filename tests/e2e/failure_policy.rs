//! cheiron never blocks the cluster: with the generated `failurePolicy: Ignore`, an
//! unreachable webhook does not stop Pods from being created.

use std::collections::BTreeMap;

use cheiron::install::{FailurePolicy, WebhookClient, WebhookRegistration};
use k8s_openapi::api::{admissionregistration::v1::MutatingWebhookConfiguration, core::v1::Pod};
use kube::Api;

use crate::{
    CHEIRON,
    harness::{
        Admitted, Result, SETTLE, Scenario, apiserver_log_lines, free_ports, pod, register,
        wait_for,
    },
};

#[tokio::test]
async fn pod_is_created_when_a_webhook_with_failure_policy_ignore_is_unreachable() -> Result {
    let s = Scenario::new(CHEIRON, "unreachable").await?;
    let cluster = s.cluster()?;
    let only_here = ("e2e.cheiron.anny.co/unreachable-webhook", s.id());
    let ns = s.create_namespace(&[only_here], &[]).await?;
    // The shared webhook keeps working next to the broken one.
    s.apply_pod_mode_manager(&ns, "pod-pull").await?;
    s.until_new_pod_gets(&ns, &[], &["pod-pull"]).await?;

    // A port that was free a moment ago: nothing listens there.
    let [closed_port] = free_ports()?;
    let unreachable_url = format!("https://127.0.0.1:{closed_port}/mutate");
    let mut registration = WebhookRegistration::new(
        s.unique_name("unreachable"),
        WebhookClient::Url(unreachable_url.clone()),
        "cheiron-system",
    );
    registration.ca_bundle = Some(cluster.webhook_ca_pem().as_bytes().to_vec());
    registration.failure_policy = FailurePolicy::Ignore;
    let mut configuration = registration.configuration();
    // Other tests run in parallel: only this test's namespace is sent to the broken webhook.
    for webhook in configuration.webhooks.iter_mut().flatten() {
        if let Some(selector) = webhook.namespace_selector.as_mut() {
            selector.match_labels = Some(BTreeMap::from([(
                only_here.0.to_owned(),
                only_here.1.to_owned(),
            )]));
        }
    }
    register(s.client(), &configuration).await?;

    // Until the apiserver has loaded the new configuration it does not call it; keep creating
    // Pods (each must succeed) until its log shows it failed open on the unreachable URL.
    let stored: Pod = wait_for(
        format!("the apiserver to call {unreachable_url} and fail open"),
        SETTLE,
        || async {
            let created = s.create_pod(&ns, &pod("web-", &[], &[], &[])).await?;
            if apiserver_log_lines(cluster.apiserver_log(), &unreachable_url, 10)
                .contains("failing open")
            {
                Ok(created)
            } else {
                Err("not called yet".into())
            }
        },
    )
    .await?;

    Api::<MutatingWebhookConfiguration>::all(s.client().clone())
        .delete(&registration.name, &Default::default())
        .await?;
    assert!(stored.metadata.uid.is_some(), "stored");
    assert_eq!(
        stored.pull_secret_names(),
        ["pod-pull"],
        "the reachable webhook still mutated it"
    );
    Ok(())
}
