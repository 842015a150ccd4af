//! The GitOps contract of docs/gitops.md, on the real apiserver with the webhook and the
//! controller running: objects applied the way Argo CD and Flux apply them converge with
//! cheiron's entries and never flap, a diff sees exactly what cheiron adds (and the documented
//! `ignoreDifferences` hide exactly that), cheiron's Secrets never carry a GitOps tool's
//! tracking labels, and pruning an object makes cheiron recreate nothing.
//!
//! The appliers: the real `kubectl` (client-side apply: `last-applied-configuration` and the
//! three-way strategic merge), `kubectl apply --server-side --field-manager=argocd-controller
//! --force-conflicts` (Argo CD with `ServerSideApply=true`), and a server-side apply with field
//! manager `kustomize-controller` and force through kube-rs (Flux's kustomize-controller).

mod drift;

use std::{collections::BTreeSet, path::Path, time::Duration};

use cheiron::api::annotation::{RECONCILE_WITH, RECONCILED};
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::{Pod, ServiceAccount},
};
use kube::{
    Api, Resource, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{
    dockerconfig::{dockerconfigjson_secret, registry_entry},
    harness::{Admitted, Result, kubectl::Kubectl},
    scenario::{ControllerScenario, has_pull_secrets},
};

/// The Secret every manager of these tests injects.
const PULL_SECRET: &str = "gitops-registry";
/// How many times each object is applied again once it has converged.
const REAPPLIES: usize = 5;
/// Longer than one resync of the shared controller (`--resync 15`): a controller that wanted
/// to write would have done so by then.
const PAST_A_RESYNC: Duration = Duration::from_secs(17);

fn manager_spec(mode: &str) -> String {
    format!(
        "  mode: {mode}
  secrets:
    - name: {PULL_SECRET}
      registry: registry.gitops.example
      username: deploy
      password: deploy-password
"
    )
}

/// How a GitOps tool writes an object.
#[derive(Clone, Copy, Debug)]
enum Applier {
    /// `kubectl apply` (client-side), as Argo CD does by default.
    ClientSide,
    /// Argo CD with `ServerSideApply=true`: field manager `argocd-controller`, force.
    ArgoCd,
    /// Flux's kustomize-controller: field manager `kustomize-controller`, force.
    Flux,
}

const APPLIERS: [Applier; 3] = [Applier::ClientSide, Applier::ArgoCd, Applier::Flux];

impl Applier {
    fn slug(self) -> &'static str {
        match self {
            Self::ClientSide => "csa",
            Self::ArgoCd => "argocd",
            Self::Flux => "flux",
        }
    }

    fn field_manager(self) -> Option<&'static str> {
        match self {
            Self::ClientSide => None,
            Self::ArgoCd => Some("argocd-controller"),
            Self::Flux => Some("kustomize-controller"),
        }
    }

    /// Applies `manifest` (YAML of a `K`) in `ns`.
    async fn apply<K>(self, s: &ControllerScenario, ns: &str, manifest: &str) -> Result<()>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let kubectl = Kubectl::shared()?;
        match self {
            Self::ClientSide => {
                kubectl
                    .ok(&["apply", "-n", ns, "-f", "-"], manifest)
                    .await?;
            }
            Self::ArgoCd => {
                kubectl
                    .ok(
                        &[
                            "apply",
                            "--server-side",
                            "--field-manager=argocd-controller",
                            "--force-conflicts",
                            "-n",
                            ns,
                            "-f",
                            "-",
                        ],
                        manifest,
                    )
                    .await?;
            }
            Self::Flux => {
                server_side_apply::<K>(s, ns, manifest, "kustomize-controller", false).await?;
            }
        }
        Ok(())
    }

    /// `kubectl diff` as this applier would run it; `Some(output)` when it sees a difference.
    async fn kubectl_diff(self, ns: &str, manifest: &str) -> Result<Option<String>> {
        let kubectl = Kubectl::shared()?;
        let mut args = vec!["diff", "-n", ns];
        let manager;
        if let Some(field_manager) = self.field_manager() {
            manager = format!("--field-manager={field_manager}");
            args.extend(["--server-side", "--force-conflicts", manager.as_str()]);
        }
        args.extend(["-f", "-"]);
        let out = kubectl.run(&args, manifest).await?;
        match out.code {
            Some(0) => Ok(None),
            Some(1) => Ok(Some(out.stdout)),
            code => Err(format!("kubectl diff exited {code:?}: {}", out.stderr).into()),
        }
    }
}

/// A server-side apply of `manifest` with `field_manager` and force; with `dry_run`, the
/// `dryRun=All` request Argo CD's server-side diff and Flux's drift detection send.
async fn server_side_apply<K>(
    s: &ControllerScenario,
    ns: &str,
    manifest: &str,
    field_manager: &str,
    dry_run: bool,
) -> Result<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let object: Value = serde_saphyr::from_str(manifest)?;
    let name = object["metadata"]["name"]
        .as_str()
        .ok_or("the manifest has no metadata.name")?
        .to_owned();
    let mut params = PatchParams::apply(field_manager).force();
    params.dry_run = dry_run;
    let api: Api<K> = Api::namespaced(s.client().clone(), ns);
    Ok(api.patch(&name, &params, &Patch::Apply(&object)).await?)
}

/// A ServiceAccount as it sits in Git: a label, an annotation, and `own` pull secrets.
fn service_account_manifest(name: &str, own: &[&str]) -> String {
    let mut yaml = format!(
        "apiVersion: v1
kind: ServiceAccount
metadata:
  name: {name}
  labels:
    app.kubernetes.io/part-of: shop
  annotations:
    team: web
"
    );
    if !own.is_empty() {
        yaml.push_str("imagePullSecrets:\n");
        for entry in own {
            yaml.push_str(&format!("  - name: {entry}\n"));
        }
    }
    yaml
}

/// What one applied ServiceAccount looks like once converged.
struct Converged {
    name: String,
    manifest: String,
    applier: Applier,
    own: Vec<&'static str>,
    resource_version: Option<String>,
}

/// A target namespace with a ServiceAccount-mode manager, and each applier's ServiceAccount
/// with and without pull secrets of its own applied and converged.
async fn applied_service_accounts(s: &ControllerScenario) -> Result<(String, Vec<Converged>)> {
    let ns = s.create_target_namespace(&[], &[]).await?;
    s.apply(&s.cluster_manager("gitops", &manager_spec("ServiceAccount")))
        .await?;
    s.until_new_service_account_gets(&ns, "probe", &[PULL_SECRET])
        .await?;
    let mut converged = Vec::new();
    for applier in APPLIERS {
        for own in [vec![], vec!["own-registry"]] {
            let name = format!(
                "{}-{}",
                applier.slug(),
                if own.is_empty() { "bare" } else { "own" }
            );
            let manifest = service_account_manifest(&name, &own);
            applier.apply::<ServiceAccount>(s, &ns, &manifest).await?;
            let mut expected = own.clone();
            expected.push(PULL_SECRET);
            let sa = s
                .until_service_account(&ns, &name, has_pull_secrets(&expected))
                .await?;
            converged.push(Converged {
                name,
                manifest,
                applier,
                own,
                resource_version: sa.resource_version(),
            });
        }
    }
    Ok((ns, converged))
}

#[tokio::test]
async fn service_accounts_applied_by_kubectl_argo_cd_and_flux_keep_cheirons_entries_and_never_flap()
-> Result {
    let s = ControllerScenario::new("gitops-converge").await?;
    let (ns, converged) = applied_service_accounts(&s).await?;

    for _ in 0..REAPPLIES {
        for c in &converged {
            c.applier
                .apply::<ServiceAccount>(&s, &ns, &c.manifest)
                .await?;
            let now = s.service_account(&ns, &c.name).await?;
            let mut expected = c.own.clone();
            expected.push(PULL_SECRET);
            assert_eq!(
                (now.pull_secret_names(), now.resource_version()),
                (
                    expected.iter().map(|n| (*n).to_owned()).collect(),
                    c.resource_version.clone()
                ),
                "{:?} applied {} again: cheiron's entry must stay and nothing be written",
                c.applier,
                c.name
            );
        }
    }

    tokio::time::sleep(PAST_A_RESYNC).await;
    for c in &converged {
        let now = s.service_account(&ns, &c.name).await?;
        assert_eq!(
            now.resource_version(),
            c.resource_version,
            "{}: written after it converged (the controller must make no write in steady state)",
            c.name
        );
        assert_eq!(now.annotation(RECONCILED), Some("true"), "{}", c.name);
        assert_eq!(
            now.annotation(RECONCILE_WITH),
            Some(PULL_SECRET),
            "{}",
            c.name
        );
        let managers: Vec<String> = now
            .managed_fields()
            .iter()
            .filter_map(|m| m.manager.clone())
            .collect();
        assert!(
            !managers.iter().any(|m| m == "cheiron"),
            "{}: the controller wrote it (field managers {managers:?}); the webhook alone should have",
            c.name
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_diff_sees_exactly_cheirons_entries_and_annotations_which_the_documented_jq_expressions_hide()
-> Result {
    let s = ControllerScenario::new("gitops-diff").await?;
    let (ns, converged) = applied_service_accounts(&s).await?;
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/gitops.md");
    let expressions = drift::documented_jq_expressions(&docs, "ServiceAccount")?;

    for c in &converged {
        let what = format!("{:?} {}", c.applier, c.name);
        let manifest: Value = serde_saphyr::from_str(&c.manifest)?;
        let live = drift::normalised(&serde_json::to_value(
            s.service_account(&ns, &c.name).await?,
        )?);

        // What cheiron adds, and nothing else.
        let expected: BTreeSet<String> = [
            format!("/imagePullSecrets/{}", c.own.len()),
            "/metadata/annotations/cheiron.anny.co~1reconcile-with".to_owned(),
            "/metadata/annotations/cheiron.anny.co~1reconciled".to_owned(),
        ]
        .into();
        assert_eq!(drift::drift(&manifest, &live), expected, "{what}");

        // A diff through the server (the webhook runs on dry runs too) sees nothing.
        assert_eq!(
            c.applier.kubectl_diff(&ns, &c.manifest).await?,
            None,
            "{what}: kubectl diff"
        );
        for field_manager in ["argocd-controller", "kustomize-controller"] {
            let dry_run: ServiceAccount =
                server_side_apply(&s, &ns, &c.manifest, field_manager, true).await?;
            assert_eq!(
                drift::normalised(&serde_json::to_value(dry_run)?),
                live,
                "{what}: a dryRun=All apply by {field_manager} predicts the live object"
            );
        }

        // Argo CD's ignoreDifferences as docs/gitops.md writes them.
        let live_ignored = drift::jq_delete(&live, &expressions).await?;
        let manifest_ignored = drift::jq_delete(&manifest, &expressions).await?;
        assert_eq!(
            manifest_ignored, manifest,
            "{what}: the expressions change nothing in the manifest"
        );
        assert_eq!(
            drift::drift(&manifest_ignored, &live_ignored),
            BTreeSet::new(),
            "{what}: after the documented jqPathExpressions, live {live_ignored} vs manifest"
        );
    }
    Ok(())
}

/// A Deployment as it sits in Git, without imagePullSecrets.
fn deployment_manifest(name: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      containers:
        - name: web
          image: registry.gitops.example/shop/web:1.0
"
    )
}

#[tokio::test]
async fn a_deployment_applied_without_pull_secrets_stays_as_applied_and_its_pods_get_the_entries()
-> Result {
    let s = ControllerScenario::new("gitops-deployment").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    s.apply(&s.cluster_manager("gitops-pods", &manager_spec("Pod")))
        .await?;
    s.until_new_pod_gets(&ns, &[], &[PULL_SECRET]).await?;
    let deployments: Api<Deployment> = Api::namespaced(s.client().clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(s.client().clone(), &ns);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(s.client().clone(), &ns);
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/gitops.md");
    let pod_expressions = drift::documented_jq_expressions(&docs, "Pod")?;

    for applier in APPLIERS {
        let name = format!("web-{}", applier.slug());
        let manifest = deployment_manifest(&name);
        let selector = ListParams::default().labels(&format!("app={name}"));
        applier.apply::<Deployment>(&s, &ns, &manifest).await?;
        // kube-controller-manager's Deployment and ReplicaSet controllers create the Pod.
        let pod = s
            .eventually(format!("a Pod of Deployment {ns}/{name}"), || async {
                pods.list(&selector)
                    .await?
                    .items
                    .into_iter()
                    .next()
                    .ok_or_else(|| "none yet".into())
            })
            .await?;
        assert_eq!(pod.pull_secret_names(), vec![PULL_SECRET.to_owned()]);
        assert_eq!(pod.annotation(RECONCILE_WITH), Some(PULL_SECRET));
        // docs/gitops.md's Pod expressions remove exactly cheiron's entry and annotations.
        let ignored = drift::jq_delete(&serde_json::to_value(&pod)?, &pod_expressions).await?;
        assert_eq!(
            (
                &ignored["spec"]["imagePullSecrets"],
                &ignored["metadata"]["annotations"]
            ),
            (&json!([]), &json!({})),
            "{applier:?}: the Pod after the documented jqPathExpressions"
        );

        for _ in 0..REAPPLIES {
            applier.apply::<Deployment>(&s, &ns, &manifest).await?;
        }
        let deployment = deployments.get(&name).await?;
        let template_secrets = deployment
            .spec
            .as_ref()
            .and_then(|spec| spec.template.spec.as_ref())
            .and_then(|pod| pod.image_pull_secrets.clone());
        assert_eq!(
            (deployment.metadata.generation, template_secrets),
            (Some(1), None),
            "{applier:?}: the Deployment's spec is what was applied, never changed"
        );
        assert_eq!(
            replica_sets.list(&selector).await?.items.len(),
            1,
            "{applier:?}: no new rollout"
        );
        assert_eq!(
            applier.kubectl_diff(&ns, &manifest).await?,
            None,
            "{applier:?}: kubectl diff of the Deployment"
        );
    }
    Ok(())
}

#[tokio::test]
async fn pruning_a_gitops_managed_service_account_makes_cheiron_recreate_nothing() -> Result {
    let s = ControllerScenario::new("gitops-prune").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    s.apply(&s.cluster_manager("gitops-prune", &manager_spec("ServiceAccount")))
        .await?;
    s.until_new_service_account_gets(&ns, "probe", &[PULL_SECRET])
        .await?;
    let kubectl = Kubectl::shared()?;
    let names: Vec<String> = APPLIERS
        .iter()
        .map(|a| format!("pruned-{}", a.slug()))
        .collect();
    for (applier, name) in APPLIERS.iter().zip(&names) {
        applier
            .apply::<ServiceAccount>(&s, &ns, &service_account_manifest(name, &[]))
            .await?;
        s.until_service_account(&ns, name, has_pull_secrets(&[PULL_SECRET]))
            .await?;
    }
    let secret_before = s
        .until_secret(&ns, PULL_SECRET, |_| Ok(()))
        .await?
        .resource_version();

    // What a prune does: Argo CD and Flux delete the object (background propagation).
    for name in &names {
        kubectl
            .ok(&["delete", "serviceaccount", "-n", &ns, name], "")
            .await?;
    }
    tokio::time::sleep(PAST_A_RESYNC).await;
    let service_accounts: Api<ServiceAccount> = Api::namespaced(s.client().clone(), &ns);
    for name in &names {
        assert!(
            service_accounts.get_opt(name).await?.is_none(),
            "{ns}/{name} was pruned and must stay gone"
        );
    }
    assert_eq!(
        s.secret(&ns, PULL_SECRET)
            .await?
            .and_then(|secret| secret.resource_version()),
        secret_before,
        "the materialised Secret is neither rewritten nor deleted by a prune"
    );
    Ok(())
}

#[tokio::test]
async fn materialised_secrets_carry_only_cheirons_metadata_never_a_sources_gitops_tracking()
-> Result {
    let s = ControllerScenario::new("gitops-tracking").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    // A source Secret as Argo CD or Flux would have applied it from Git.
    let mut source = dockerconfigjson_secret(
        "tracked-pull",
        &json!({"registry.gitops.example": registry_entry("ci", "ci-password", None)}),
    );
    source.metadata.labels = Some(
        [
            ("app.kubernetes.io/instance", "platform"),
            ("kustomize.toolkit.fluxcd.io/name", "platform"),
            ("kustomize.toolkit.fluxcd.io/namespace", "flux-system"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
    );
    source.metadata.annotations = Some(
        [(
            "argocd.argoproj.io/tracking-id",
            "platform:/Secret:sources/tracked-pull",
        )]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
    );
    s.create_secret(&sources, &source).await?;
    let manager = s
        .apply(&s.cluster_manager(
            "gitops-tracking",
            &format!(
                "  secrets:
    - existingSecretRef:
        name: tracked-pull
        namespace: {sources}
"
            ),
        ))
        .await?;
    s.until_ready_reason(&manager, "Synced").await?;
    let copy = s.until_secret(&ns, "tracked-pull", |_| Ok(())).await?;
    let labels: Vec<&str> = copy.labels().keys().map(String::as_str).collect();
    assert_eq!(
        labels,
        [
            "app.kubernetes.io/managed-by",
            "cheiron.anny.co/manager-kind",
            "cheiron.anny.co/manager-name"
        ],
        "a copy carries cheiron's labels only: no GitOps tool takes it for one of its objects"
    );
    let annotations: Vec<&str> = copy.annotations().keys().map(String::as_str).collect();
    assert_eq!(annotations, ["cheiron.anny.co/content-sha256"]);
    let owners: Vec<(&str, &str)> = copy
        .owner_references()
        .iter()
        .map(|o| (o.kind.as_str(), o.name.as_str()))
        .collect();
    assert_eq!(
        owners,
        [("ClusterImagePullSecretManager", manager.name.as_str())],
        "owned by the manager: Argo CD shows it under the manager, never as extraneous"
    );
    Ok(())
}
