//! Against the real kube-apiserver of the e2e harness.

use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::{
    authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
    coordination::v1::Lease,
    core::v1::{Namespace, Pod, Secret, ServiceAccount},
    events::v1::Event,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, PostParams},
};
use tokio::sync::OnceCell;

use super::*;
use harness::{Scenario, wait_for};

const FIELD_MANAGER: &str = "cheiron-install-test";

/// [`wait_for`] with a check that answers `None` for "not yet".
async fn until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
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
async fn apply(client: &Client, object: &Value, persist: bool) -> Result<()> {
    harness::apply_object(client, object, FIELD_MANAGER, persist).await
}

/// Applies every object as a server-side dry run; all failures in one message.
async fn dry_run_all(client: &Client, what: &str, objects: &[Value]) -> Result<usize> {
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
async fn installed(client: &Client) -> Result<()> {
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
fn pod_of(template: &Value, name: &str) -> Result<Pod> {
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
const CHEIRON_USER: &str = "system:serviceaccount:cheiron-system:cheiron";
/// The split mode's identities.
const WEBHOOK_USER: &str = "system:serviceaccount:cheiron-system:cheiron-webhook";
const CONTROLLER_USER: &str = "system:serviceaccount:cheiron-system:cheiron-controller";
const CERTS_USER: &str = "system:serviceaccount:cheiron-system:cheiron-certs";

/// One access check: verb, API group, resource (`resource/subresource`), namespace ("" for
/// all namespaces or a cluster-scoped resource), object name ("" for any), and why.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

const G: &str = "cheiron.anny.co";
const IPSM: &str = "imagepullsecretmanagers";
const CIPSM: &str = "clusterimagepullsecretmanagers";
const EVENTS: &str = "events.k8s.io";
const LEASES: &str = "coordination.k8s.io";
const RBAC: &str = "rbac.authorization.k8s.io";
const ADMISSION: &str = "admissionregistration.k8s.io";
const MWC: &str = "mutatingwebhookconfigurations";
const NS: &str = NAMESPACE;
const LEASE: &str = "cheiron-controller";

/// Every call the webhook makes (src/source/cluster.rs).
    #[rustfmt::skip]
    const WEBHOOK_NEEDS: &[Row] = &[
        ("list",   G,  IPSM,         "", "", "managers reflector (and the CRD probe)"),
        ("watch",  G,  IPSM,         "", "", "managers reflector"),
        ("list",   G,  CIPSM,        "", "", "cluster managers reflector"),
        ("watch",  G,  CIPSM,        "", "", "cluster managers reflector"),
        ("list",   "", "namespaces", "", "", "namespaces (metadata)"),
        ("watch",  "", "namespaces", "", "", "namespaces (metadata)"),
        ("get",    "", "namespaces", "", "team-a", "a namespace its cache has not seen yet"),
    ];

/// What the webhook's identity must not do, though the controller's may: read any Secret,
    /// or write anything.
    #[rustfmt::skip]
    const WEBHOOK_MUST_NOT: &[Row] = &[
        ("list",   "", "secrets", "",       "",               "no Secret access at all"),
        ("watch",  "", "secrets", "",       "",               "no Secret access at all"),
        ("get",    "", "secrets", "team-b", "registry-token", "no Secret access at all"),
        ("list",   "", "secrets", "team-b", "",               "no Secret access at all"),
        ("get",    "", "secrets", NS,       "cheiron-tls",    "its certificate is a mounted volume"),
        ("create", "", "secrets", "team-a", "",               "writes nothing"),
        ("update", "", "secrets", "team-a", "docker-hub",     "writes nothing"),
        ("delete", "", "secrets", "team-a", "docker-hub",     "writes nothing"),
        ("list",   "", "serviceaccounts", "", "",                "ServiceAccounts are the controller's"),
        ("list",   "", "pods", "", "",                           "Pods are the controller's"),
        ("get",    "", "serviceaccounts", "team-a", "default",   "ServiceAccounts are the controller's"),
        ("patch",  "", "serviceaccounts", "team-a", "default",   "writes nothing"),
        ("patch",  G,  IPSM,  "team-a", "m", "writes nothing"),
        ("patch",  G,  CIPSM, "",       "m", "writes nothing"),
        ("patch",  G,  "imagepullsecretmanagers/status",        "team-a", "m", "writes nothing"),
        ("patch",  G,  "clusterimagepullsecretmanagers/status", "",       "m", "writes nothing"),
        ("create", EVENTS, "events", "team-a", "",  "writes nothing"),
        ("patch",  EVENTS, "events", "team-a", "e", "writes nothing"),
        ("create", LEASES, "leases", NS, "",    "no leader election"),
        ("get",    LEASES, "leases", NS, LEASE, "no leader election"),
        ("patch",  LEASES, "leases", NS, LEASE, "no leader election"),
    ];

/// Every call the controller makes (src/controller/).
    #[rustfmt::skip]
    const CONTROLLER_NEEDS: &[Row] = &[
        ("list",   G,  IPSM,  "", "", "managers (and the CRD probe)"),
        ("watch",  G,  IPSM,  "", "", "managers"),
        ("list",   G,  CIPSM, "", "", "cluster managers"),
        ("watch",  G,  CIPSM, "", "", "cluster managers"),
        ("patch",  G,  IPSM,  "team-a", "m", "add/remove the finalizer"),
        ("patch",  G,  CIPSM, "",       "m", "add/remove the finalizer"),
        ("patch",  G,  "imagepullsecretmanagers/status",        "team-a", "m", "status"),
        ("patch",  G,  "clusterimagepullsecretmanagers/status", "",       "m", "status"),
        ("list",   "", "namespaces", "", "", "namespaces (metadata)"),
        ("watch",  "", "namespaces", "", "", "namespaces (metadata)"),
        ("list",   "", "pods", "", "", "Pods labelled missing-secrets (metadata)"),
        ("watch",  "", "pods", "", "", "Pods labelled missing-secrets (metadata)"),
        ("list",   "", "secrets", "", "", "cheiron's Secrets, by label"),
        ("watch",  "", "secrets", "", "", "cheiron's Secrets, by label"),
        ("get",    "", "secrets", "team-b", "registry-token", "read a source by name"),
        ("list",   "", "secrets", "team-b", "", "watch a source by field selector"),
        ("watch",  "", "secrets", "team-b", "", "watch a source by field selector"),
        ("get",    "", "secrets", "team-a", "docker-hub", "its Secret, before writing"),
        ("create", "", "secrets", "team-a", "", "materialise a Secret"),
        ("update", "", "secrets", "team-a", "docker-hub", "replace its Secret"),
        ("delete", "", "secrets", "team-a", "docker-hub", "remove its Secret"),
        ("list",   "", "serviceaccounts", "", "", "ServiceAccounts reflector"),
        ("watch",  "", "serviceaccounts", "", "", "ServiceAccounts reflector"),
        ("get",    "", "serviceaccounts", "team-a", "default", "before patching"),
        ("patch",  "", "serviceaccounts", "team-a", "default", "backfill, clean up"),
        ("create", EVENTS, "events", "team-a",  "", "Event on a manager or ServiceAccount"),
        ("create", EVENTS, "events", "default", "", "Event on a cluster manager"),
        ("create", EVENTS, "events", "team-b",  "", "Event on a Pod whose pull secret is missing"),
        ("patch",  EVENTS, "events", "team-a",  "e", "a repeated Event"),
        ("create", LEASES, "leases", NS, "",    "leader election: the first replica"),
        ("get",    LEASES, "leases", NS, LEASE, "leader election"),
        ("patch",  LEASES, "leases", NS, LEASE, "leader election: renew, take over, release"),
        ("list",   "", "nodes", "", "", "mode Node: the Nodes' labels (metadata)"),
        ("watch",  "", "nodes", "", "", "mode Node: the Nodes' labels (metadata)"),
        ("list",   LEASES, "leases", NS, "", "mode Node: the node agents' report Leases"),
        ("watch",  LEASES, "leases", NS, "", "mode Node: the node agents' report Leases"),
    ];

/// What the controller's identity must not do, though the webhook's may.
    #[rustfmt::skip]
    const CONTROLLER_MUST_NOT: &[Row] = &[
        ("get", "", "namespaces", "", "team-a", "namespaces come from the watch"),
    ];

/// Broader things no identity of cheiron may do.
    #[rustfmt::skip]
    const NONE_MAY: &[Row] = &[
        ("delete", "", "namespaces", "", "team-a", "namespaces are read only"),
        ("patch",  "", "namespaces", "", "team-a", "namespaces are read only"),
        ("create", "", "namespaces", "", "",       "namespaces are read only"),
        ("patch",  "apps", "deployments", NS, "cheiron", "no workloads"),
        ("create", "", "pods",      "team-a", "",  "no workloads"),
        ("create", "", "pods/exec", "team-a", "p", "no workloads"),
        ("get",    "", "pods",      "team-a", "p", "Pods come from the watch"),
        ("patch",  "", "pods",      "team-a", "p", "Pods are only read"),
        ("delete", "", "pods",      "team-a", "p", "Pods are only read"),
        ("update", "apiextensions.k8s.io", "customresourcedefinitions", "", "imagepullsecretmanagers.cheiron.anny.co", "CRDs are installed by you"),
        ("escalate", RBAC, "clusterroles", "", "cheiron-controller", "no escalation"),
        ("bind",     RBAC, "clusterroles", "", "cheiron-controller", "no escalation"),
        ("bind",     RBAC, "clusterroles", "", "cluster-admin",      "no escalation"),
        ("create",   RBAC, "rolebindings", NS, "",                   "no escalation"),
        ("impersonate", "", "users", "", "admin", "no escalation"),
        ("create", "", "serviceaccounts/token", "team-a", "default", "never mints tokens"),
        ("create", "", "serviceaccounts/token", NS, "cheiron-controller", "never mints tokens"),
        ("get",    "", "secrets/status", "team-a", "docker-hub", "no Secret subresources"),
        ("deletecollection", "", "secrets", "team-a", "", "deletes its Secrets one by one"),
        ("patch",  "", "secrets", "team-a", "docker-hub", "replaces, never patches, Secrets"),
        ("create", "", "serviceaccounts", "team-a", "",        "only patches ServiceAccounts"),
        ("update", "", "serviceaccounts", "team-a", "default", "only patches ServiceAccounts"),
        ("delete", "", "serviceaccounts", "team-a", "default", "only patches ServiceAccounts"),
        ("create", G, IPSM,  "team-a", "",  "managers are written by users"),
        ("update", G, IPSM,  "team-a", "m", "managers are only patched (finalizer)"),
        ("update", G, "imagepullsecretmanagers/finalizers", "team-a", "m", "no blockOwnerDeletion"),
        ("delete", G, CIPSM, "",       "m", "managers are written by users"),
        ("get",    G, IPSM,  "team-a", "m", "managers come from the watch"),
        ("update", G, "clusterimagepullsecretmanagers/status", "", "m", "status is only patched"),
        ("get",    "", "configmaps", "team-a", "c", "nothing else is read"),
        ("get",    "", "nodes", "", "n", "Nodes come from the watch"),
        ("patch",  "", "nodes", "", "n", "Nodes are only read"),
        ("create", "", "events", "team-a", "", "Events only through events.k8s.io"),
        ("delete", EVENTS, "events", "team-a", "e", "Events are never deleted"),
        ("patch",  LEASES, "leases", "kube-system", "kube-controller-manager", "Leases only in its namespace"),
        ("create", LEASES, "leases", "team-a", "", "Leases only in its namespace"),
        ("patch",  LEASES, "leases", NS, "someone-else", "only its own Lease"),
        ("delete", LEASES, "leases", NS, LEASE, "the Lease is released by a patch"),
        ("patch",  ADMISSION, MWC, "", "cheiron", "caBundle is cheiron-certs' job"),
    ];

/// Every call `cheiron-certs create` and `patch` make (certs-tool/src/).
    #[rustfmt::skip]
    const CERTS_NEED: &[Row] = &[
        ("create", "", "secrets", NS, "",               "create: store the certificate or its CA"),
        ("get",    "", "secrets", NS, "cheiron-tls",    "create: keep a valid one; patch: read ca.crt"),
        ("update", "", "secrets", NS, "cheiron-tls",    "create: re-issue"),
        ("get",    "", "secrets", NS, "cheiron-tls-ca", "create: reuse the CA"),
        ("update", "", "secrets", NS, "cheiron-tls-ca", "create: a new CA"),
        ("get",    ADMISSION, MWC, "", "cheiron", "patch: read caBundle"),
        ("patch",  ADMISSION, MWC, "", "cheiron", "patch: write caBundle"),
    ];

/// Broader things `cheiron-certs` must not be able to do.
    #[rustfmt::skip]
    const CERTS_MUST_NOT: &[Row] = &[
        ("get",    "", "secrets", NS, "other", "only its two Secrets"),
        ("list",   "", "secrets", NS, "",      "only its two Secrets"),
        ("patch",  "", "secrets", NS, "cheiron-tls", "replaces, never patches"),
        ("delete", "", "secrets", NS, "cheiron-tls", "never deletes"),
        ("get",    "", "secrets", "team-a", "cheiron-tls", "only its namespace"),
        ("create", "", "secrets", "team-a", "",            "only its namespace"),
        ("patch",  ADMISSION, MWC, "", "someone-else", "only cheiron's configuration"),
        ("update", ADMISSION, MWC, "", "cheiron",      "patches, never replaces"),
        ("create", ADMISSION, MWC, "", "",             "only cheiron's configuration"),
        ("delete", ADMISSION, MWC, "", "cheiron",      "only cheiron's configuration"),
        ("patch",  ADMISSION, "validatingwebhookconfigurations", "", "cheiron", "only the mutating one"),
        ("list",   G, IPSM, "", "", "nothing of cheiron's own"),
    ];

/// Asks the apiserver whether `user` (a ServiceAccount, with the groups it authenticates
/// with) may do `row`.
async fn allowed(client: &Client, user: &str, row: &Row) -> Result<bool> {
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

/// Checks every row and reports all rows whose answer is not `expected` at once.
async fn expect(client: &Client, user: &str, expected: bool, table: &[Row]) -> Result {
    let mut wrong = Vec::new();
    for row in table {
        if allowed(client, user, row).await? != expected {
            let (verb, group, resource, namespace, name, why) = row;
            wrong.push(format!(
                "{verb} {group}/{resource} namespace={namespace:?} name={name:?}  ({why})"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{user} {}:\n  {}",
        if expected {
            "cannot make calls the code needs"
        } else {
            "can do more than it needs"
        },
        wrong.join("\n  ")
    );
    Ok(())
}

#[tokio::test]
async fn webhook_service_account_can_make_every_call_the_webhook_makes() -> Result {
    let s = Scenario::new(CHEIRON, "install-rbac-webhook-can").await?;
    installed(s.client()).await?;
    expect(s.client(), WEBHOOK_USER, true, WEBHOOK_NEEDS).await
}

#[tokio::test]
async fn webhook_service_account_can_read_no_secret_and_write_nothing() -> Result {
    let s = Scenario::new(CHEIRON, "install-rbac-webhook-cannot").await?;
    installed(s.client()).await?;
    expect(s.client(), WEBHOOK_USER, false, WEBHOOK_MUST_NOT).await?;
    expect(s.client(), WEBHOOK_USER, false, NONE_MAY).await
}

#[tokio::test]
async fn controller_service_account_can_make_every_call_the_controller_makes() -> Result {
    let s = Scenario::new(CHEIRON, "install-rbac-controller-can").await?;
    installed(s.client()).await?;
    expect(s.client(), CONTROLLER_USER, true, CONTROLLER_NEEDS).await
}

#[tokio::test]
async fn controller_service_account_cannot_do_more_than_the_controller_needs() -> Result {
    let s = Scenario::new(CHEIRON, "install-rbac-controller-cannot").await?;
    installed(s.client()).await?;
    expect(s.client(), CONTROLLER_USER, false, CONTROLLER_MUST_NOT).await?;
    expect(s.client(), CONTROLLER_USER, false, NONE_MAY).await
}

#[tokio::test]
async fn combined_service_account_can_make_every_call_of_webhook_and_controller() -> Result {
    let s = Scenario::new(CHEIRON, "install-rbac-can").await?;
    installed(s.client()).await?;
    expect(s.client(), CHEIRON_USER, true, WEBHOOK_NEEDS).await?;
    expect(s.client(), CHEIRON_USER, true, CONTROLLER_NEEDS).await
}

#[tokio::test]
async fn combined_service_account_cannot_do_more_than_webhook_and_controller_need() -> Result {
    let s = Scenario::new(CHEIRON, "install-rbac-cannot").await?;
    installed(s.client()).await?;
    expect(s.client(), CHEIRON_USER, false, NONE_MAY).await
}

#[tokio::test]
async fn certificate_job_can_write_only_its_secrets_and_webhook_configuration() -> Result {
    let s = Scenario::new(CHEIRON, "install-rbac-certs").await?;
    installed(s.client()).await?;
    expect(s.client(), CERTS_USER, true, CERTS_NEED).await?;
    expect(s.client(), CERTS_USER, false, CERTS_MUST_NOT).await
}

#[tokio::test]
async fn controller_mints_tokens_only_of_the_service_accounts_and_namespaces_listed() -> Result {
    let s = Scenario::new(CHEIRON, "install-rbac-tokens").await?;
    installed(s.client()).await?;
    // Rows are 'static: leak the two names (once per test run).
    let tenant: &'static str = Box::leak(s.create_namespace(&[], &[]).await?.into_boxed_str());
    let other: &'static str = Box::leak(s.create_namespace(&[], &[]).await?.into_boxed_str());
    let install = cheiron::install::Install {
        credential_providers: Some(super::chart::credential_provider_setup(tenant)),
        ..cheiron::install::Install::default()
    };
    for mode in cheiron::install::DeploymentMode::ALL {
        let objects = install.server_objects_for(mode)?;
        dry_run_all(
            s.client(),
            "cheiron manifests with credential providers",
            &objects,
        )
        .await?;
    }
    let objects = install.server_objects()?;
    let tokens: Vec<&Value> = objects
        .iter()
        .filter(|o| o["metadata"]["name"] == "cheiron-credential-provider-tokens")
        .collect();
    assert_eq!(
        tokens.len(),
        4,
        "a Role and a RoleBinding in each namespace"
    );
    for object in tokens {
        apply(s.client(), object, true).await?;
    }
    let mint = |namespace: &'static str, name: &'static str| -> Row {
        (
            "create",
            "",
            "serviceaccounts/token",
            namespace,
            name,
            "a KEP-4412 provider's token",
        )
    };
    until(
        "the authorizer to see the token Roles",
        Duration::from_secs(20),
        || async {
            allowed(s.client(), CONTROLLER_USER, &mint(NS, "ecr-puller"))
                .await
                .ok()
                .filter(|a| *a)
        },
    )
    .await?;
    expect(
        s.client(),
        CONTROLLER_USER,
        true,
        &[
            mint(NS, "ecr-puller"),
            mint(tenant, "default"),
            mint(tenant, "builder"),
        ],
    )
    .await?;
    expect(
        s.client(),
        CONTROLLER_USER,
        false,
        &[
            mint(NS, "cheiron-controller"),
            mint(NS, "cheiron-certs"),
            mint(NS, "cheiron-webhook"),
            mint(other, "ecr-puller"),
            mint(other, "default"),
            mint("kube-system", "ecr-puller"),
            (
                "get",
                "",
                "serviceaccounts/token",
                NS,
                "ecr-puller",
                "only create",
            ),
            ("create", "", "serviceaccounts", tenant, "", "only tokens"),
        ],
    )
    .await?;
    expect(
        s.client(),
        WEBHOOK_USER,
        false,
        &[mint(NS, "ecr-puller"), mint(tenant, "default")],
    )
    .await
}

/// A child process killed when the test ends, however it ends.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A kubeconfig for the apiserver of `config` with a token of `service_account` in
/// cheiron's namespace.
async fn service_account_kubeconfig(
    client: &Client,
    config: &kube::Config,
    service_account: &str,
    path: &Path,
) -> Result {
    let token = harness::service_account_token(client, NAMESPACE, service_account).await?;
    harness::write_token_kubeconfig(config, &token, path)
}

#[tokio::test]
async fn cheiron_certs_create_and_patch_work_with_only_their_rbac() -> Result {
    use cheiron_certs::{CreateRequest, Created, PatchRequest, Patched, ServingNames, Validity};

    let s = Scenario::new(CHEIRON, "install-certs").await?;
    installed(s.client()).await?;
    // The plain manifests' webhook configuration, for real, but selecting no namespace:
    // nothing serves it in this cluster.
    let mut registration =
        find(&plain_objects()?, "MutatingWebhookConfiguration", "cheiron")?.clone();
    registration["webhooks"][0]["namespaceSelector"] =
        serde_json::json!({"matchLabels": {"install.cheiron.anny.co/never": "true"}});
    apply(s.client(), &registration, true).await?;

    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("cheiron-certs.kubeconfig");
    service_account_kubeconfig(
        s.client(),
        &s.cluster()?.admin_config(),
        "cheiron-certs",
        &kubeconfig,
    )
    .await?;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let certs = Client::try_from(config)?;

    // The plain Job's arguments, through the library `cheiron-certs` runs.
    let create = CreateRequest {
        names: ServingNames::new("cheiron", NAMESPACE, &[], &[])?,
        secret_name: "cheiron-tls".to_owned(),
        validity: Validity::default(),
    };
    let patch = PatchRequest {
        webhook_name: "cheiron".to_owned(),
        secret_name: "cheiron-tls".to_owned(),
        namespace: NAMESPACE.to_owned(),
    };
    let first = cheiron_certs::create(&certs, &create).await?;
    assert!(matches!(first, Created::Issued { .. }), "{first}");
    let second = cheiron_certs::create(&certs, &create).await?;
    assert!(matches!(second, Created::Kept { .. }), "{second}");
    let patched = cheiron_certs::patch(&certs, &patch).await?;
    assert!(matches!(patched, Patched::Updated { .. }), "{patched:?}");
    let again = cheiron_certs::patch(&certs, &patch).await?;
    assert!(matches!(again, Patched::Unchanged { .. }), "{again:?}");

    let secret = Api::<Secret>::namespaced(s.client().clone(), NAMESPACE)
        .get("cheiron-tls")
        .await?;
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.unwrap_or_default();
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(data.contains_key(key), "cheiron-tls lacks {key}");
    }
    let ca = String::from_utf8_lossy(&data["ca.crt"].0).into_owned();
    let ca_body = ca.lines().nth(1).unwrap_or_default();
    let stored =
        Api::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>::all(
            s.client().clone(),
        )
        .get("cheiron")
        .await?;
    let bundle = stored
        .webhooks
        .unwrap_or_default()
        .first()
        .and_then(|w| w.client_config.ca_bundle.clone())
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default();
    assert!(
        !ca_body.is_empty() && bundle.contains(ca_body),
        "caBundle does not hold ca.crt:\n{bundle}"
    );
    Ok(())
}

/// Held by a test while its process may hold the controller's Lease: the generated Role
/// allows one Lease name only, so two controllers under test would take turns, and one test
/// could pass on the other's work.
static LEASE_HOLDER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `cheiron <args>` with a token of `service_account` in cheiron's namespace, as Pod
/// `pod_name`, its log in `dir`, admin server on `admin`; returned once `/readyz` answers 200.
async fn start_as(
    s: &Scenario,
    dir: &Path,
    service_account: &str,
    pod_name: &str,
    args: &[String],
    admin: u16,
) -> Result<(Running, PathBuf)> {
    let kubeconfig = dir.join(format!("{service_account}.kubeconfig"));
    service_account_kubeconfig(
        s.client(),
        &s.cluster()?.admin_config(),
        service_account,
        &kubeconfig,
    )
    .await?;
    let log_path = dir.join(format!("{pod_name}.log"));
    let log = std::fs::File::create(&log_path)?;
    let mut process = Running(
        Command::new(env!("CARGO_BIN_EXE_cheiron"))
            .args(args)
            .arg(format!("--admin-listen=127.0.0.1:{admin}"))
            .env("KUBECONFIG", &kubeconfig)
            .env("CHEIRON_POD_NAMESPACE", NAMESPACE)
            .env("CHEIRON_POD_NAME", pod_name)
            .env("CHEIRON_LOG", "info,cheiron=debug")
            .env("NO_COLOR", "1")
            .env_remove("CHEIRON_FROM")
            .env_remove("CHEIRON_TLS_CERT_DIR")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?,
    );
    let readyz = format!("http://127.0.0.1:{admin}/readyz");
    let ready = until(
        &format!("`cheiron {}` ready", args.join(" ")),
        Duration::from_secs(30),
        || async {
            reqwest::get(&readyz)
                .await
                .ok()
                .filter(|r| r.status().is_success())
        },
    )
    .await;
    if let Some(status) = process.0.try_wait()? {
        return Err(format!(
            "`cheiron {}` exited ({status}):\n{}",
            args.join(" "),
            tail(&log_path)
        )
        .into());
    }
    if let Err(e) = ready {
        return Err(format!("{e}\n--- log (tail) ---\n{}", tail(&log_path)).into());
    }
    Ok((process, log_path))
}

/// The last lines of the log at `path`.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The lines of `log` that say an API call was refused, but for `allowed_about`.
fn refusals<'a>(log: &'a str, allowed_about: Option<&str>) -> Vec<&'a str> {
    log.lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .filter(|l| allowed_about.is_none_or(|about| !l.contains(about)))
        .collect()
}

/// The controller's job, done by the process of `log` as Pod `pod_name`: a manager's
/// Secret materialised from its source, `default` backfilled, `Ready=True` in status, an
/// Event, the Lease held by that process, and the finalizer's clean-up, all without a
/// refused API call.
async fn controller_does_its_job(s: &Scenario, log: &Path, pod_name: &str) -> Result {
    let ns = s.create_namespace(&[], &[]).await?;
    let service_accounts: Api<ServiceAccount> = Api::namespaced(s.client().clone(), &ns);
    // kcm's `default` first, so that its pull secret can only come from the controller.
    until(
        "ServiceAccount default",
        Duration::from_secs(30),
        || async { service_accounts.get_opt("default").await.ok().flatten() },
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(s.client().clone(), &ns);
    let token: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "registry-token"},
        "stringData": {"token": "s3cr3t"},
    }))?;
    secrets.create(&PostParams::default(), &token).await?;

    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {{name: rbac, namespace: {ns}}}
spec:
  secrets:
    - name: pulled
      registry: registry.example
      username: bot
      passwordSecretRef: {{name: registry-token, key: token}}
"
    ))
    .await?;

    let outcome = async {
        let started = Instant::now();
        until(
            "Secret `pulled` materialised",
            Duration::from_secs(60),
            || async { secrets.get_opt("pulled").await.ok().flatten() },
        )
        .await?;
        until(
            "ServiceAccount default backfilled",
            Duration::from_secs(30),
            || async {
                let sa = service_accounts.get_opt("default").await.ok().flatten()?;
                sa.image_pull_secrets
                    .unwrap_or_default()
                    .iter()
                    .any(|r| r.name == "pulled")
                    .then_some(())
            },
        )
        .await?;
        let managers: Api<DynamicObject> = Api::namespaced_with(
            s.client().clone(),
            &ns,
            &kube::api::ApiResource::erase::<cheiron::api::ImagePullSecretManager>(&()),
        );
        until(
            "manager Ready=True in status",
            Duration::from_secs(30),
            || async {
                let m = managers.get_opt("rbac").await.ok().flatten()?;
                let conditions = m.data["status"]["conditions"].as_array()?.clone();
                conditions
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    .then_some(())
            },
        )
        .await?;
        let events: Api<Event> = Api::namespaced(s.client().clone(), &ns);
        until("an Event from cheiron", Duration::from_secs(30), || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| e.reporting_controller.as_deref() == Some("cheiron"))
                .then_some(())
        })
        .await?;
        let lease = Api::<Lease>::namespaced(s.client().clone(), NAMESPACE)
            .get("cheiron-controller")
            .await?;
        let holder = lease
            .spec
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        assert!(
            holder.starts_with(&format!("{pod_name}-")),
            "the Lease is held by {holder:?}, not by the process under test"
        );

        // Deleting the manager: the finalizer removes what cheiron wrote.
        managers.delete("rbac", &DeleteParams::default()).await?;
        until(
            "Secret `pulled` removed by the finalizer",
            Duration::from_secs(30),
            || async {
                secrets
                    .get_opt("pulled")
                    .await
                    .ok()
                    .and_then(|s| s.is_none().then_some(()))
            },
        )
        .await?;
        eprintln!(
            "{pod_name} did the controller's job in {:?}",
            started.elapsed()
        );
        Ok::<(), harness::Error>(())
    }
    .await;
    if let Err(e) = outcome {
        return Err(format!("{e}\n--- {pod_name} log (tail) ---\n{}", tail(log)).into());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let refused = refusals(&text, None);
    assert!(
        refused.is_empty(),
        "{pod_name} was refused API calls under the generated RBAC:\n{}",
        refused.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn cheiron_run_does_its_job_with_only_the_combined_rbac() -> Result {
    let s = Scenario::new(CHEIRON, "install-run").await?;
    installed(s.client()).await?;
    let _lease = LEASE_HOLDER.lock().await;
    let dir = tempfile::tempdir()?;
    let [listen, admin] = harness::free_ports()?;
    let args = [
        "run".to_owned(),
        "--self-signed".to_owned(),
        "--leader-election".to_owned(),
        "--lease-duration=5".to_owned(),
        "--shutdown-delay=0".to_owned(),
        format!("--listen=127.0.0.1:{listen}"),
    ];
    let (_cheiron, log) = start_as(&s, dir.path(), "cheiron", "install-run", &args, admin).await?;
    controller_does_its_job(&s, &log, "install-run").await
}

#[tokio::test]
async fn cheiron_controller_does_its_job_with_only_its_own_rbac() -> Result {
    let s = Scenario::new(CHEIRON, "install-controller").await?;
    installed(s.client()).await?;
    let _lease = LEASE_HOLDER.lock().await;
    let dir = tempfile::tempdir()?;
    let [admin] = harness::free_ports()?;
    let args = [
        "controller".to_owned(),
        "--leader-election".to_owned(),
        "--lease-duration=5".to_owned(),
    ];
    let (_controller, log) = start_as(
        &s,
        dir.path(),
        "cheiron-controller",
        "install-controller",
        &args,
        admin,
    )
    .await?;
    controller_does_its_job(&s, &log, "install-controller").await
}

#[tokio::test]
async fn cheiron_webhook_becomes_ready_and_answers_with_only_its_own_rbac() -> Result {
    let s = Scenario::new(CHEIRON, "install-webhook").await?;
    installed(s.client()).await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {{name: webhook-rbac, namespace: {ns}}}
spec:
  mode: Pod
  secrets:
    - name: pulled
      registry: registry.example
      username: bot
      passwordSecretRef: {{name: registry-token, key: token}}
"
    ))
    .await?;
    let dir = tempfile::tempdir()?;
    let [listen, admin] = harness::free_ports()?;
    let args = [
        "webhook".to_owned(),
        "--self-signed".to_owned(),
        "--shutdown-delay=0".to_owned(),
        format!("--listen=127.0.0.1:{listen}"),
    ];
    let (_webhook, log) = start_as(
        &s,
        dir.path(),
        "cheiron-webhook",
        "install-webhook",
        &args,
        admin,
    )
    .await?;

    // A Pod review in the manager's namespace: the webhook adds the manager's Secret.
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "install-webhook",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns,
            "operation": "CREATE",
            "userInfo": {"username": "install-test"},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": ns},
                "spec": {"containers": [{"name": "c", "image": "registry.example/app"}]},
            },
        },
    });
    let https = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()?;
    let url = format!("https://127.0.0.1:{listen}/mutate");
    let answered = until(
        "the webhook to add the manager's Secret to a Pod",
        Duration::from_secs(30),
        || async {
            let response: Value = https
                .post(&url)
                .json(&review)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let patch = response["response"]["patch"].as_str()?;
            let patch = base64::engine::general_purpose::STANDARD
                .decode(patch)
                .ok()?;
            String::from_utf8_lossy(&patch)
                .contains("pulled")
                .then_some(())
        },
    )
    .await;
    if let Err(e) = answered {
        return Err(format!("{e}\n--- cheiron webhook log (tail) ---\n{}", tail(&log)).into());
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    // Its identity may not list Secrets, and the webhook may say so; nothing else is
    // refused.
    let refused = refusals(&text, Some("secrets"));
    assert!(
        refused.is_empty(),
        "cheiron webhook was refused API calls under its generated RBAC:\n{}",
        refused.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn notes_say_how_to_check_the_installation() -> Result {
    // `helm install --dry-run=client` renders NOTES.txt, but asks a cluster for its version
    // and for objects the release would take over: the harness's admin kubeconfig, and a
    // release of its own (the plain manifests' objects exist in this cluster).
    let s = Scenario::new(CHEIRON, "install-notes").await?;
    let kubeconfig = s.cluster()?.dir.join("admin.kubeconfig");
    if !kubeconfig.is_file() {
        return Err(format!("no admin kubeconfig at {}", kubeconfig.display()).into());
    }
    let dir = tempfile::tempdir()?;
    let output = Command::new(helm()?)
        .args([
            "install",
            "notes",
            "charts/cheiron",
            "--namespace",
            "notes",
            "--dry-run=client",
        ])
        .current_dir(repo())
        .env("KUBECONFIG", &kubeconfig)
        .env("HELM_CACHE_HOME", dir.path().join("cache"))
        .env("HELM_CONFIG_HOME", dir.path().join("config"))
        .env("HELM_DATA_HOME", dir.path().join("data"))
        .stdin(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let notes = text.split("NOTES:").nth(1).unwrap_or_default();
    for needle in [
        "kubectl get ipsm,cipsm",
        "--dry-run=server",
        "curl -s localhost:8080/metrics",
        "rollout status deployment/notes-cheiron-webhook",
        "rollout status deployment/notes-cheiron-controller",
        "no Secret access",
        "delete every manager first",
    ] {
        assert!(
            notes.contains(needle),
            "NOTES.txt lacks {needle:?}:\n{notes}"
        );
    }
    Ok(())
}
