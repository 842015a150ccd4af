//! The webhook on another port or on the node's network (`webhook.port`, `webhook.hostNetwork`;
//! `cheiron manifests --webhook-port --webhook-host-network`), for clusters whose apiserver
//! cannot reach Pod IPs: the chart renders what the plain manifests do, and the Pod Security
//! level of the namespace decides where such a Pod may run, server-side.

use cheiron::install::{DeploymentMode, Install, WebhookNetwork};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::{Api, api::PostParams};

use super::{
    chart::named,
    cluster::{apply, installed, pod_of},
    *,
};
use harness::Scenario;

const PORT: i32 = 10250;

fn on_the_nodes_network(namespace: &str) -> Install {
    Install {
        namespace: namespace.to_owned(),
        webhook: WebhookNetwork {
            port: PORT,
            host_network: true,
        },
        ..Install::default()
    }
}

#[test]
fn the_chart_puts_the_webhook_where_the_plain_manifests_do_in_both_modes() -> Result {
    let port = format!("webhook.port={PORT}");
    for (mode, values) in [
        (
            DeploymentMode::Split,
            vec![port.as_str(), "webhook.hostNetwork=true"],
        ),
        (
            DeploymentMode::Combined,
            vec![
                port.as_str(),
                "webhook.hostNetwork=true",
                "deployment=combined",
            ],
        ),
    ] {
        let plain = on_the_nodes_network(NAMESPACE).server_objects_for(mode)?;
        let chart = render(&values)?;
        for kind in ["Deployment", "NetworkPolicy", "Service"] {
            for name in named(&plain, kind) {
                let (p, c) = (find(&plain, kind, &name)?, find(&chart, kind, &name)?);
                if kind == "Deployment" {
                    assert_eq!(
                        p["spec"]["template"]["spec"], c["spec"]["template"]["spec"],
                        "{mode}: the Pod spec of {name}"
                    );
                    let spec = &p["spec"]["template"]["spec"];
                    let serves = spec["containers"][0]["args"][0] != "controller";
                    assert_eq!(spec["hostNetwork"] == true, serves, "{mode}: {name}");
                } else {
                    assert_eq!(p["spec"], c["spec"], "{mode}: {kind} {name}");
                }
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_webhook_pod_on_the_nodes_network_is_admitted_only_where_privileged_is_allowed() -> Result
{
    let s = Scenario::new(CHEIRON, "install-host-network").await?;
    installed(s.client()).await?;
    let namespace = s.unique_name("host-network");
    let objects = on_the_nodes_network(&namespace).server_objects_for(DeploymentMode::Split)?;
    let rendered = |kind: &str, name: &str| find(&objects, kind, name);
    for (kind, name) in [
        ("Namespace", namespace.as_str()),
        ("ServiceAccount", "cheiron-webhook"),
    ] {
        apply(s.client(), rendered(kind, name)?, true).await?;
    }
    let template = &rendered("Deployment", "cheiron-webhook")?["spec"]["template"];
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut pod = pod_of(template, "webhook-host-network")?;
    pod.metadata.namespace = Some(namespace.clone());
    let admitted = Api::<Pod>::namespaced(s.client().clone(), &namespace)
        .create(&dry_run, &pod)
        .await;
    // The same Pod in cheiron's usual namespace (restricted) is refused.
    let refused = Api::<Pod>::namespaced(s.client().clone(), NAMESPACE)
        .create(&dry_run, &pod_of(template, "webhook-host-network")?)
        .await;
    Api::<Namespace>::all(s.client().clone())
        .delete(&namespace, &Default::default())
        .await?;
    admitted.map_err(|e| format!("the privileged namespace refused the webhook's Pod: {e}"))?;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.message.contains("violates PodSecurity")
            && e.message.contains("host namespaces")),
        "{refused:?}"
    );
    Ok(())
}
