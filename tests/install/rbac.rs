//! Each identity of an installation, asked of the real kube-apiserver with
//! SubjectAccessReviews: it can make every call its code makes, and nothing broader.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use super::cluster::*;
use super::*;
use harness::Scenario;

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

/// Every call the webhook makes (crates/cheiron-webhook/src/source/cluster.rs).
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

/// Every call the controller makes (crates/cheiron-controller/src/).
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
    let may_mint = [
        mint(NS, "ecr-puller"),
        mint(tenant, "default"),
        mint(tenant, "builder"),
    ];
    // The authorizer's informers see each namespace's Role and RoleBinding on their own
    // time: wait for all of them, not only the first namespace's.
    until(
        "the authorizer to see the token Roles in both namespaces",
        Duration::from_secs(20),
        || async {
            for row in &may_mint {
                if !allowed(s.client(), CONTROLLER_USER, row).await.ok()? {
                    return None;
                }
            }
            Some(())
        },
    )
    .await?;
    expect(s.client(), CONTROLLER_USER, true, &may_mint).await?;
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

/// A kubeconfig for the apiserver of `config` with a token of `service_account` in
/// cheiron's namespace.
pub(super) async fn service_account_kubeconfig(
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

/// The built-in roles a namespace owner holds gain cheiron's aggregated ClusterRoles
/// (`cheiron-manager-edit`, `cheiron-manager-view`; kube-controller-manager's
/// clusterrole-aggregation controller fills them in): `admin` and `edit` bound in a namespace
/// manage its ImagePullSecretManagers, `view` reads them; none of them reaches another
/// namespace, a manager's status (the controller's) or the cluster-scoped managers.
#[tokio::test]
async fn namespace_admin_and_edit_manage_its_managers_and_view_reads_them() -> Result {
    let s = Scenario::new(CHEIRON, "install-rbac-aggregated").await?;
    installed(s.client()).await?;
    // Rows are 'static: leak the two names (once per test run).
    let ns: &'static str = Box::leak(s.create_namespace(&[], &[]).await?.into_boxed_str());
    let other: &'static str = Box::leak(s.create_namespace(&[], &[]).await?.into_boxed_str());
    let users = [
        ("admin", "tenant-admin"),
        ("edit", "tenant-editor"),
        ("view", "tenant-viewer"),
    ];
    for (role, user) in users {
        let binding: k8s_openapi::api::rbac::v1::RoleBinding =
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": user, "namespace": ns },
                "roleRef": { "apiGroup": RBAC, "kind": "ClusterRole", "name": role },
                "subjects": [{ "apiGroup": RBAC, "kind": "User", "name": user }],
            }))?;
        Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(s.client().clone(), ns)
            .create(&Default::default(), &binding)
            .await?;
    }
    let manage: Vec<Row> = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ]
    .into_iter()
    .map(|verb| (verb, G, IPSM, ns, "", "aggregated into admin and edit"))
    .collect();
    let read: Vec<Row> = ["get", "list", "watch"]
        .into_iter()
        .map(|verb| (verb, G, IPSM, ns, "", "aggregated into view"))
        .collect();
    #[rustfmt::skip]
    let nobody: &[Row] = &[
        ("create", G, IPSM, other, "", "only the namespace bound in"),
        ("list",   G, IPSM, "",    "", "not across namespaces"),
        ("patch",  G, "imagepullsecretmanagers/status", ns, "m", "the status is the controller's"),
        ("create", G, CIPSM, "", "", "cluster managers stay the cluster admin's"),
        ("list",   G, CIPSM, "", "", "cluster managers stay the cluster admin's"),
    ];
    // The aggregation controller fills the built-in roles in shortly after the install.
    until(
        "admin to gain cheiron-manager-edit",
        Duration::from_secs(30),
        || async {
            allowed(s.client(), "tenant-admin", &manage[3])
                .await
                .ok()
                .filter(|allowed| *allowed)
        },
    )
    .await?;
    for user in ["tenant-admin", "tenant-editor"] {
        expect(s.client(), user, true, &manage).await?;
        expect(s.client(), user, false, nobody).await?;
    }
    expect(s.client(), "tenant-viewer", true, &read).await?;
    expect(s.client(), "tenant-viewer", false, &manage[3..]).await?;
    expect(s.client(), "tenant-viewer", false, nobody).await
}
