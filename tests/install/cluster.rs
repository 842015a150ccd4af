//! Against the real kube-apiserver of the e2e harness.

use std::time::Duration;

use k8s_openapi::api::{
    authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
    core::v1::{Namespace, Pod},
};
use kube::{Api, Client, ResourceExt, api::PostParams};
use tokio::sync::OnceCell;

use super::*;
use harness::{Scenario, wait_for};

const FIELD_MANAGER: &str = "cheiron-install-test";

/// [`wait_for`] with a check that answers `None` for "not yet".
pub(super) async fn until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for(what, timeout, || {
        let next = check();
        async move { next.await.ok_or_else(|| "not yet".into()) }
    })
    .await
}

/// Server-side applies `object`, as a dry run unless `persist`.
pub(super) async fn apply(client: &Client, object: &Value, persist: bool) -> Result<()> {
    harness::apply_object(client, object, FIELD_MANAGER, persist).await
}

/// Applies every object as a server-side dry run; all failures in one message.
pub(super) async fn dry_run_all(client: &Client, what: &str, objects: &[Value]) -> Result<usize> {
    let mut failures = Vec::new();
    for object in objects {
        if let Err(e) = apply(client, object, false).await {
            failures.push(e.to_string());
        }
    }
    if failures.is_empty() {
        Ok(objects.len())
    } else {
        Err(format!(
            "{what}: the apiserver refused:\n  {}",
            failures.join("\n  ")
        )
        .into())
    }
}

/// The combined mode's identity: ServiceAccount `cheiron` and its bindings, renamed
/// `<name>-combined` so that they hold in the same cluster as the split bindings of the
/// same roles (a real cluster has one mode, and one name for each binding).
fn combined_identity() -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for mut object in combined_objects()? {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let is_binding = kind == "ClusterRoleBinding" || kind == "RoleBinding";
        let is_identity = kind == "ServiceAccount" && object["metadata"]["name"] == "cheiron";
        if is_binding && object["subjects"][0]["name"] == "cheiron" {
            let name = format!(
                "{}-combined",
                object["metadata"]["name"].as_str().unwrap_or_default()
            );
            object["metadata"]["name"] = Value::String(name);
            out.push(object);
        } else if is_identity {
            out.push(object);
        }
    }
    Ok(out)
}

/// Once per binary: cheiron's namespace, ServiceAccounts and RBAC from the plain manifests
/// (split), and the combined mode's identity, applied for real (Deployments, Services, Job
/// and webhook configuration stay dry-run only), and the authorizer seen to use them.
pub(super) async fn installed(client: &Client) -> Result<()> {
    static INSTALLED: OnceCell<Result<(), String>> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let persisted = [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
            ];
            let mut objects = plain_objects().map_err(|e| e.to_string())?;
            objects.extend(combined_identity().map_err(|e| e.to_string())?);
            for object in objects
                .iter()
                .filter(|o| persisted.contains(&o["kind"].as_str().unwrap_or_default()))
            {
                apply(client, object, true)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            for (user, probe) in [
                (CHEIRON_USER, ("list", "", "secrets", "", "", "probe")),
                (CONTROLLER_USER, ("list", "", "secrets", "", "", "probe")),
                (
                    WEBHOOK_USER,
                    ("get", "", "namespaces", "", "probe", "probe"),
                ),
            ] {
                until(
                    &format!("the authorizer to see the RBAC of {user}"),
                    Duration::from_secs(20),
                    || async { allowed(client, user, &probe).await.ok().filter(|a| *a) },
                )
                .await
                .map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .await
        .clone()
        .map_err(Into::into)
}

#[tokio::test]
async fn plain_manifests_apply_cleanly_in_a_server_side_dry_run() -> Result {
    let s = Scenario::new(CHEIRON, "install-plain").await?;
    installed(s.client()).await?;
    let crds = documents(&std::fs::read(repo().join("webhook-config/crds.yaml"))?)?;
    let objects = plain_objects()?;
    let combined = combined_objects()?;
    // `cheiron manifests --node`: the node agent's objects.
    let node: Vec<Value> = cheiron::install::Install {
        node_agent: Some(cheiron::install::NodeAgentSetup::default()),
        ..cheiron::install::Install::default()
    }
    .server_objects_for(cheiron::install::DeploymentMode::Split)?
    .into_iter()
    .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/component"] == "node-agent")
    .collect();
    // Namespace, ServiceAccount, 2 ClusterRole(Binding)s, report Role(Binding), the
    // admission policy and its binding, Secret Role(Binding), DaemonSet, NetworkPolicy.
    assert_eq!(node.len(), 12, "{}", describe(&node));
    // Its namespaced objects' dry run needs the node namespace.
    for namespace in node.iter().filter(|o| o["kind"] == "Namespace") {
        apply(s.client(), namespace, true).await?;
    }
    let applied = dry_run_all(s.client(), "webhook-config/crds.yaml", &crds).await?
        + dry_run_all(s.client(), "webhook-config/", &objects).await?
        + dry_run_all(s.client(), "cheiron manifests, combined", &combined).await?
        + dry_run_all(s.client(), "cheiron manifests --node", &node).await?;
    assert_eq!(
        applied,
        crds.len() + objects.len() + combined.len() + node.len()
    );
    assert!(applied >= 40, "{}", describe(&objects));
    Ok(())
}

#[tokio::test]
async fn rendered_chart_applies_cleanly_in_a_server_side_dry_run() -> Result {
    let s = Scenario::new(CHEIRON, "install-chart").await?;
    installed(s.client()).await?;
    let crds = documents(&std::fs::read(
        repo().join("charts/cheiron/crds/crds.yaml"),
    )?)?;
    dry_run_all(s.client(), "charts/cheiron/crds/", &crds).await?;
    for values in [
        vec![],
        vec![
            "certificates.source=secret",
            "certificates.secretName=my-tls",
            "certificates.caBundle=Zm9v",
        ],
        CERT_MANAGER_AND_MONITORING.to_vec(),
        vec!["deployment=combined"],
        super::values::OPERATOR_VALUES.to_vec(),
        // Monitoring with metrics auth: the Deployments probing HTTPS with the certificate
        // mounted, the scraper's ServiceAccount, token Secret and binding, the dashboard.
        vec![
            "metrics.auth=kubernetes",
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "grafanaDashboard.enabled=true",
        ],
        vec![
            "networkPolicy.webhookFrom[0].ipBlock.cidr=172.16.0.0/28",
            "networkPolicy.webhookFrom[1].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system",
            "networkPolicy.webhookFrom[1].podSelector.matchLabels.app=konnectivity-agent",
            "networkPolicy.adminFrom=null",
        ],
    ] {
        let objects = render(&values)?;
        let (foreign, own): (Vec<Value>, Vec<Value>) = objects.into_iter().partition(is_foreign);
        // cert-manager's and the Prometheus Operator's kinds are checked as rendered only
        // (their CRDs are not in the test cluster); everything else must be accepted.
        if values.is_empty() {
            assert!(foreign.is_empty());
        }
        dry_run_all(s.client(), &format!("helm template {values:?}"), &own).await?;
    }
    Ok(())
}

/// A Pod with the template's metadata and spec.
pub(super) fn pod_of(template: &Value, name: &str) -> Result<Pod> {
    let mut pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": template["metadata"],
        "spec": template["spec"],
    }))?;
    pod.metadata.name = Some(name.to_owned());
    pod.metadata.namespace = Some(NAMESPACE.to_owned());
    Ok(pod)
}

#[tokio::test]
async fn every_pod_meets_the_restricted_pod_security_standard() -> Result {
    let s = Scenario::new(CHEIRON, "install-pss").await?;
    installed(s.client()).await?;
    let namespace = Api::<Namespace>::all(s.client().clone())
        .get(NAMESPACE)
        .await?;
    assert_eq!(
        namespace
            .labels()
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted")
    );
    let pods: Api<Pod> = Api::namespaced(s.client().clone(), NAMESPACE);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };

    // The check has teeth: a Pod that may run as root is refused here.
    let careless = pod_of(
        &serde_json::json!({"spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        "careless",
    )?;
    let refused = pods.create(&dry_run, &careless).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.message.contains("violates PodSecurity")),
        "{refused:?}"
    );

    // Every Pod template of both installs, in both modes.
    let mut templates = Vec::new();
    for (install, objects) in [
        ("plain", plain_objects()?),
        ("plain combined", combined_objects()?),
        ("chart", render(&[])?),
        ("chart combined", render(&["deployment=combined"])?),
    ] {
        for object in &objects {
            if object["kind"] == "Deployment" || object["kind"] == "Job" {
                let what = format!(
                    "{install} {} {}",
                    object["kind"].as_str().unwrap_or_default(),
                    object["metadata"]["name"].as_str().unwrap_or_default()
                );
                templates.push((what, object["spec"]["template"].clone()));
            }
        }
    }
    // Deployments and Jobs: plain 2 + 1, plain combined 1 + 1, chart 2 + 2 (hooks), chart
    // combined 1 + 2.
    assert_eq!(templates.len(), 12, "{templates:#?}");
    for (what, template) in &templates {
        let pod = pod_of(template, "cheiron-pss")?;
        pods.create(&dry_run, &pod)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}

/// The node agent runs as root with host paths: cheiron's namespace (Pod Security
/// `restricted`) refuses its Pod, the node namespace `cheiron manifests --node` renders
/// (`privileged`) admits it, server-side.
#[tokio::test]
async fn the_node_agents_pod_is_admitted_in_the_node_namespace_only() -> Result {
    use cheiron::install::{DeploymentMode, Install, NodeAgentSetup};

    let s = Scenario::new(CHEIRON, "install-node-pss").await?;
    installed(s.client()).await?;
    let node_namespace = s.unique_name("node");
    let objects = Install {
        node_agent: Some(NodeAgentSetup {
            namespace: Some(node_namespace.clone()),
        }),
        ..Install::default()
    }
    .server_objects_for(DeploymentMode::Split)?;
    let rendered = |kind: &str| {
        objects
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["metadata"]["labels"]["app.kubernetes.io/component"] == "node-agent"
            })
            .ok_or(format!("no node agent {kind}"))
    };
    for kind in ["Namespace", "ServiceAccount"] {
        apply(s.client(), rendered(kind)?, true).await?;
    }
    let template = &rendered("DaemonSet")?["spec"]["template"];
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut pod = pod_of(template, "node-agent-pss")?;
    pod.metadata.namespace = Some(node_namespace.clone());
    let admitted = Api::<Pod>::namespaced(s.client().clone(), &node_namespace)
        .create(&dry_run, &pod)
        .await;
    let mut restricted = pod_of(template, "node-agent-pss")?;
    if let Some(spec) = restricted.spec.as_mut() {
        // An identity that exists there: only Pod Security may refuse it.
        spec.service_account_name = Some("cheiron-controller".to_owned());
    }
    let refused = Api::<Pod>::namespaced(s.client().clone(), NAMESPACE)
        .create(&dry_run, &restricted)
        .await;
    Api::<Namespace>::all(s.client().clone())
        .delete(&node_namespace, &Default::default())
        .await?;
    admitted.map_err(|e| format!("the node namespace refused the agent's Pod: {e}"))?;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.message.contains("violates PodSecurity")),
        "{refused:?}"
    );
    Ok(())
}

/// The combined mode's identity (`cheiron run`).
pub(super) const CHEIRON_USER: &str = "system:serviceaccount:cheiron-system:cheiron";
/// The split mode's identities.
pub(super) const WEBHOOK_USER: &str = "system:serviceaccount:cheiron-system:cheiron-webhook";
pub(super) const CONTROLLER_USER: &str = "system:serviceaccount:cheiron-system:cheiron-controller";
pub(super) const CERTS_USER: &str = "system:serviceaccount:cheiron-system:cheiron-certs";

/// One access check: verb, API group, resource (`resource/subresource`), namespace ("" for
/// all namespaces or a cluster-scoped resource), object name ("" for any), and why.
pub(super) type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// Asks the apiserver whether `user` (a ServiceAccount, with the groups it authenticates
/// with) may do `row`.
pub(super) async fn allowed(client: &Client, user: &str, row: &Row) -> Result<bool> {
    let (verb, group, resource, namespace, name, _) = *row;
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            groups: Some(vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{NAMESPACE}"),
                "system:authenticated".to_owned(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                subresource,
                namespace: non_empty(namespace),
                name: non_empty(name),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// `kubectl apply -f examples/cluster/` works on the first try: kubectl applies a directory's
/// files in the order of their names, so the Namespaces the namespaced manager lives in come
/// first (`00-namespaces.yaml`).
#[tokio::test]
async fn kubectl_apply_of_the_cluster_examples_works_on_the_first_try() -> Result {
    let _s = Scenario::new(CHEIRON, "install-examples").await?;
    let kubectl = harness::kubectl::Kubectl::shared()?;
    let examples = repo().join("examples/cluster").display().to_string();
    let applied = kubectl.ok(&["apply", "-f", &examples], "").await?;
    for object in [
        "namespace/team-a",
        "imagepullsecretmanager.cheiron.anny.co/",
        "clusterimagepullsecretmanager.cheiron.anny.co/",
    ] {
        assert!(applied.contains(object), "{object} not applied:\n{applied}");
    }
    kubectl
        .ok(&["delete", "-f", &examples, "--wait=false"], "")
        .await?;
    Ok(())
}
