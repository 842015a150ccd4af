//! Fleets (docs/fleet.md): one `ClusterImagePullSecretManager` in the management cluster (the
//! test cluster) acting in workload clusters, each a kube-apiserver of its own on the
//! management etcd under another `--etcd-prefix`, reached through Cluster API-style kubeconfig
//! Secrets, with Cluster API's real `Cluster` CRD installed.

use std::time::Duration;

use k8s_openapi::api::core::v1::{LocalObjectReference, Namespace, Secret, ServiceAccount};
use kube::{
    Api, Client, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    },
};
use serde_json::{Value, json};

use crate::{
    dockerconfig::{dockerconfigjson_secret, holds, registry_entry},
    harness::{
        Result,
        controller::{CheironProcess, READY_WITHIN},
        wait_for,
        workload::{
            PagingServer, RefusingServer, WorkloadCluster, install_capi_crd,
            write_kubeconfig_secret,
        },
    },
    scenario::{ControllerScenario, ManagerRef, TARGET_LABEL, describe_ready},
};

/// How long a change may take to reach a workload cluster that is up; a cluster coming back
/// is caught up by the backoff (5 s doubling), so that gets longer.
const REACH: Duration = Duration::from_secs(30);
const CATCH_UP: Duration = Duration::from_secs(90);

/// The name of the copies (the source's name, an `existingSecretRef`).
const COPY: &str = "fleet-pull";

/// A namespace selected by the test's manager in `cluster`, with a `default` ServiceAccount
/// (no controller-manager runs there to create it) and one ServiceAccount that already
/// references a pull secret of its own.
async fn workload_namespace(client: &Client, scenario_id: &str, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {TARGET_LABEL: scenario_id}}
    }))?;
    namespaces.create(&PostParams::default(), &ns).await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    for (sa, own) in [("default", None), ("builder", Some("builders-own"))] {
        let mut object = ServiceAccount::default();
        object.metadata.name = Some(sa.to_owned());
        object.image_pull_secrets =
            own.map(|n: &str| vec![LocalObjectReference { name: n.to_owned() }]);
        sas.create(&PostParams::default(), &object).await?;
    }
    Ok(())
}

fn pull_secret_names(sa: &ServiceAccount) -> Vec<String> {
    sa.image_pull_secrets
        .iter()
        .flatten()
        .map(|r| r.name.clone())
        .collect()
}

/// Waits until `cluster`'s copy in `ns` holds `auths` and both ServiceAccounts reference it
/// (the `builder` one after its own entry).
async fn until_synced(
    cluster: &WorkloadCluster,
    ns: &str,
    auths: &Value,
    within: Duration,
) -> Result<()> {
    let client = cluster.client()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let sas: Api<ServiceAccount> = Api::namespaced(client, ns);
    wait_for(
        format!(
            "cluster {}: {ns}/{COPY} holding {auths} and both ServiceAccounts referencing it",
            cluster.name
        ),
        within,
        || async {
            let copy = secrets.get_opt(COPY).await?.ok_or("no copy")?;
            holds(&copy, auths)?;
            let default = pull_secret_names(&sas.get("default").await?);
            let builder = pull_secret_names(&sas.get("builder").await?);
            if default != [COPY] || builder != ["builders-own", COPY] {
                return Err(format!("default {default:?}, builder {builder:?}").into());
            }
            Ok(())
        },
    )
    .await
}

/// Waits until `cluster` holds nothing of cheiron's in `ns`: no copy, and the ServiceAccounts
/// as they were before (the `builder`'s own entry kept).
async fn until_clean(cluster: &WorkloadCluster, ns: &str) -> Result<()> {
    let client = cluster.client()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let sas: Api<ServiceAccount> = Api::namespaced(client, ns);
    wait_for(
        format!(
            "cluster {}: nothing of cheiron's left in {ns}",
            cluster.name
        ),
        REACH,
        || async {
            if secrets.get_opt(COPY).await?.is_some() {
                return Err("the copy is still there".into());
            }
            let default = pull_secret_names(&sas.get("default").await?);
            let builder = pull_secret_names(&sas.get("builder").await?);
            if !default.is_empty() || builder != ["builders-own"] {
                return Err(format!("default {default:?}, builder {builder:?}").into());
            }
            Ok(())
        },
    )
    .await
}

/// Waits until the manager's `status.clusters` entry for `cluster` passes `check`.
async fn until_cluster_status(
    s: &ControllerScenario,
    manager: &ManagerRef,
    cluster: &str,
    check: impl Fn(&cheiron::api::ClusterStatus) -> Result<()>,
    within: Duration,
) -> Result<cheiron::api::ClusterStatus> {
    let check = &check;
    wait_for(
        format!("status.clusters of {manager} for {cluster}"),
        within,
        || async move {
            let (_, status) = s.manager_status(manager).await?;
            let entry = status
                .clusters
                .iter()
                .find(|c| c.name.ends_with(&format!("/{cluster}")))
                .ok_or_else(|| {
                    format!(
                        "no entry in {:?} ({})",
                        status.clusters,
                        describe_ready(&status)
                    )
                })?;
            check(entry)?;
            Ok(entry.clone())
        },
    )
    .await
}

fn is_ready(c: &cheiron::api::ClusterStatus) -> Result<()> {
    if c.ready && c.target_namespaces == 1 && c.synced_namespaces == 1 {
        Ok(())
    } else {
        Err(format!("{c:?}").into())
    }
}

#[tokio::test]
async fn a_manager_in_the_management_cluster_keeps_two_workload_clusters_in_step() -> Result {
    let s = ControllerScenario::without_shared_controller("fleet").await?;
    let cluster = s.cluster()?;
    install_capi_crd(s.client()).await?;
    let mut east = cluster.start_workload(&s.unique_name("east")).await?;
    let mut west = cluster.start_workload(&s.unique_name("west")).await?;
    let capi = s.create_namespace(&[], &[]).await?;
    for w in [&east, &west] {
        write_prod_kubeconfig(&s, &capi, &w.name, &w.kubeconfig()).await?;
    }
    // A Secret of CAPI's that is not a kubeconfig (the cluster's CA): never read.
    let ca = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{}-ca", east.name)),
            labels: Some(
                [(
                    "cluster.x-k8s.io/cluster-name".to_owned(),
                    east.name.clone(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        ..Secret::default()
    };
    Api::<Secret>::namespaced(s.client().clone(), &capi)
        .create(&PostParams::default(), &ca)
        .await?;
    let apps = s.unique_name("apps");
    for w in [&east, &west] {
        workload_namespace(&w.client()?, s.id(), &apps).await?;
    }
    let local = s.create_target_namespace(&[], &[]).await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let v1 = json!({"registry.example.com": registry_entry("fleet", "v1", None)});
    s.create_secret(&sources, &dockerconfigjson_secret(COPY, &v1))
        .await?;

    let controller = start_fleet_controller(&s, "fleet", &capi, &[])?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let manager = apply_prod_manager(&s, "fleet", &sources, true).await?;

    // Both workload clusters and, includeLocal being true by default, this one.
    for w in [&east, &west] {
        until_synced(w, &apps, &v1, REACH).await?;
        until_cluster_status(&s, &manager, &w.name, is_ready, REACH).await?;
    }
    s.until_secret(&local, COPY, |c| holds(c, &v1)).await?;
    let status = s.until_ready_reason(&manager, "Synced").await?;
    assert_eq!(status.clusters.len(), 2, "{:?}", status.clusters);
    let metrics = controller.metrics().await?;
    for w in [&east, &west] {
        let series = format!(
            "cheiron_fleet_cluster_connected{{cluster=\"{capi}/{}\"}} 1",
            w.name
        );
        assert!(metrics.contains(&series), "no {series} in\n{metrics}");
    }

    // A rotation reaches both.
    let v2 = json!({"registry.example.com": registry_entry("fleet", "v2", None)});
    s.replace_secret_data(&sources, COPY, &dockerconfigjson_secret(COPY, &v2))
        .await?;
    for w in [&east, &west] {
        until_synced(w, &apps, &v2, REACH).await?;
    }

    // West goes down: a rotation still reaches east at once, west is reported, and caught up
    // when it is back.
    west.stop();
    let v3 = json!({"registry.example.com": registry_entry("fleet", "v3", None)});
    s.replace_secret_data(&sources, COPY, &dockerconfigjson_secret(COPY, &v3))
        .await?;
    until_synced(&east, &apps, &v3, REACH).await?;
    let down = until_cluster_status(
        &s,
        &manager,
        &west.name,
        |c| match &c.message {
            Some(m) if !c.ready && m.contains("unreachable") => Ok(()),
            _ => Err(format!("{c:?}").into()),
        },
        REACH,
    )
    .await?;
    let status = s
        .until_ready_reason(&manager, "WorkloadClusterNotSynced")
        .await?;
    assert!(
        status
            .clusters
            .iter()
            .any(|c| c.name.ends_with(&east.name) && c.ready),
        "east stays ready: {:?}",
        status.clusters
    );
    println!("west down: {down:?}");
    // One Warning Event for the change, not one per retry: it stays one over three failed
    // syncs, and one more, Normal, when west is back.
    let west_series = format!("{capi}/{}", west.name);
    wait_for("three failed syncs into west", CATCH_UP, || async {
        let failed = fleet_syncs(&controller.metrics().await?, &west_series, "failed");
        if failed >= 3.0 {
            Ok(())
        } else {
            Err(format!("{failed} failed syncs").into())
        }
    })
    .await?;
    let about_west = |events: Vec<k8s_openapi::api::events::v1::Event>, reason: &str| {
        events
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| e.note.as_deref().is_some_and(|n| n.contains(&west_series)))
            .collect::<Vec<_>>()
    };
    let unreachable = about_west(
        s.events_about_manager(&manager).await?,
        "WorkloadClusterUnreachable",
    );
    assert_eq!(unreachable.len(), 1, "{unreachable:?}");
    assert!(
        unreachable[0].series.is_none() && unreachable[0].type_.as_deref() == Some("Warning"),
        "{unreachable:?}"
    );
    west.start().await?;
    until_synced(&west, &apps, &v3, CATCH_UP).await?;
    until_cluster_status(&s, &manager, &west.name, is_ready, CATCH_UP).await?;
    let synced = s
        .eventually("a WorkloadClusterSynced Event about west", || async {
            let found = about_west(
                s.events_about_manager(&manager).await?,
                "WorkloadClusterSynced",
            );
            if found.is_empty() {
                Err("none yet".into())
            } else {
                Ok(found)
            }
        })
        .await?;
    assert_eq!(synced[0].type_.as_deref(), Some("Normal"), "{synced:?}");
    let unreachable = about_west(
        s.events_about_manager(&manager).await?,
        "WorkloadClusterUnreachable",
    );
    assert_eq!(unreachable.len(), 1, "{unreachable:?}");

    // A bad kubeconfig is reported without its content; the rotated one is picked up.
    write_prod_kubeconfig(&s, &capi, &west.name, &west.bad_kubeconfig()).await?;
    let bad = until_cluster_status(
        &s,
        &manager,
        &west.name,
        |c| {
            if c.ready {
                Err("still ready".into())
            } else {
                Ok(())
            }
        },
        CATCH_UP,
    )
    .await?;
    assert!(
        !format!("{bad:?}").contains("not-a-known-token"),
        "the token appears in {bad:?}"
    );
    // A second change into trouble: a second Event, or (the recorder folds a repeat of the
    // same reason within minutes into a series) the first one's series.
    let events = s
        .eventually(
            "a second WorkloadClusterUnreachable Event about west",
            || async {
                let found = about_west(
                    s.events_about_manager(&manager).await?,
                    "WorkloadClusterUnreachable",
                );
                let count: i32 = found
                    .iter()
                    .map(|e| e.series.as_ref().map_or(1, |s| s.count))
                    .sum();
                if count == 2 {
                    Ok(found)
                } else {
                    Err(format!("{found:?}").into())
                }
            },
        )
        .await?;
    assert!(
        !format!("{events:?}").contains("not-a-known-token"),
        "the token appears in {events:?}"
    );
    write_prod_kubeconfig(&s, &capi, &west.name, &west.rotated_kubeconfig()).await?;
    until_cluster_status(&s, &manager, &west.name, is_ready, CATCH_UP).await?;
    let v4 = json!({"registry.example.com": registry_entry("fleet", "v4", None)});
    s.replace_secret_data(&sources, COPY, &dockerconfigjson_secret(COPY, &v4))
        .await?;
    for w in [&east, &west] {
        until_synced(w, &apps, &v4, REACH).await?;
    }

    // East's Cluster API Cluster says env: staging: its labels win over the Secret's, east
    // leaves the selector and is cleaned exactly (builder keeps its own entry); west stays.
    let clusters = capi_clusters(s.client(), &capi);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": east.name, "namespace": capi, "labels": {"env": "staging"}},
        "spec": {"paused": false}
    }))?;
    clusters.create(&PostParams::default(), &object).await?;
    until_clean(&east, &apps).await?;
    until_synced(&west, &apps, &v4, REACH).await?;
    wait_for("east to leave status.clusters", REACH, || async {
        let (_, status) = s.manager_status(&manager).await?;
        match status
            .clusters
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
        {
            names if names.len() == 1 && names[0].ends_with(&west.name) => Ok(()),
            names => Err(format!("{names:?}").into()),
        }
    })
    .await?;
    // Cleaned up, and selected by no manager: east's client and watches are let go.
    until_connections(&controller, 1).await?;

    // Back in the selector, east is synced again; then its Cluster is deleted (a finalizer of
    // Cluster API's keeps it while the cluster is torn down): east is released, not cleaned.
    clusters
        .patch(
            &east.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"env": "prod"}, "finalizers": ["e2e.cheiron.anny.co/teardown"]}})),
        )
        .await?;
    until_synced(&east, &apps, &v4, REACH).await?;
    until_cluster_status(&s, &manager, &east.name, is_ready, REACH).await?;
    clusters
        .delete(&east.name, &DeleteParams::default())
        .await?;
    wait_for(
        "east to be released from status.clusters",
        REACH,
        || async {
            let (_, status) = s.manager_status(&manager).await?;
            if status.clusters.iter().any(|c| c.name.ends_with(&east.name)) {
                return Err(format!("{:?}", status.clusters).into());
            }
            Ok(())
        },
    )
    .await?;
    // Released, not cleaned: what cheiron wrote there stays for the teardown to take.
    until_synced(&east, &apps, &v4, REACH).await?;
    clusters
        .patch(
            &east.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;

    // A namespace of west leaving the scope loses what cheiron put there, and gets it back.
    let west_namespaces: Api<Namespace> = Api::all(west.client()?);
    let relabel = |value: Value| json!({"metadata": {"labels": {TARGET_LABEL: value}}});
    west_namespaces
        .patch(
            &apps,
            &PatchParams::default(),
            &Patch::Merge(relabel(Value::Null)),
        )
        .await?;
    until_clean(&west, &apps).await?;
    west_namespaces
        .patch(
            &apps,
            &PatchParams::default(),
            &Patch::Merge(relabel(Value::from(s.id()))),
        )
        .await?;
    until_synced(&west, &apps, &v4, REACH).await?;

    // includeLocal: false takes the copies away here, not there.
    let api: Api<DynamicObject> = Api::all_with(
        s.client().clone(),
        &ApiResource::erase::<cheiron::api::ClusterImagePullSecretManager>(&()),
    );
    api.patch(
        &manager.name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"clusters": {"includeLocal": false}}})),
    )
    .await?;
    s.until_no_secret(&local, COPY).await?;
    until_synced(&west, &apps, &v4, REACH).await?;

    // Deleting the manager cleans up in the workload cluster it selects.
    api.delete(&manager.name, &DeleteParams::default()).await?;
    until_clean(&west, &apps).await?;
    wait_for("the manager to be gone", REACH, || async {
        match api.get_opt(&manager.name).await? {
            None => Ok(()),
            Some(m) => Err(format!("still there: {:?}", m.finalizers()).into()),
        }
    })
    .await?;
    controller.check_running()?;
    east.stop();
    west.stop();
    Ok(())
}

/// `cheiron controller --fleet` reading the kubeconfig Secrets of `capi`, their own labels
/// selecting where no Cluster API `Cluster` does (these tests' administrator writes them), with
/// `extra` flags.
fn start_fleet_controller(
    s: &ControllerScenario,
    name: &str,
    capi: &str,
    extra: &[&str],
) -> Result<CheironProcess> {
    let mut args = vec![
        "--no-leader-election",
        "--resync",
        "15",
        "--fleet",
        "--fleet-namespace",
        capi,
        "--fleet-select-by-secret-labels",
    ];
    args.extend(extra);
    CheironProcess::controller(&s.unique_name(name), &args)
}

/// Writes the kubeconfig Secret of the workload cluster `name` into `capi`, labelled
/// `env: prod` (what the managers of these tests select).
async fn write_prod_kubeconfig(
    s: &ControllerScenario,
    capi: &str,
    name: &str,
    kubeconfig: &str,
) -> Result<Secret> {
    write_kubeconfig_secret(s.client(), capi, name, kubeconfig, &[("env", "prod")]).await
}

/// A cluster manager `name` copying the source [`COPY`] of `sources` into the workload
/// clusters labelled `env: prod` (and this one with `include_local`).
async fn apply_prod_manager(
    s: &ControllerScenario,
    name: &str,
    sources: &str,
    include_local: bool,
) -> Result<ManagerRef> {
    s.apply(&s.cluster_manager(
        name,
        &format!(
            "  secrets:
    - existingSecretRef:
        name: {COPY}
        namespace: {sources}
  clusters:
    selector:
      matchLabels:
        env: prod
    includeLocal: {include_local}
"
        ),
    ))
    .await
}

/// The value of `cheiron_fleet_syncs_total` for `cluster` and `outcome` (0 without the
/// series).
fn fleet_syncs(metrics: &str, cluster: &str, outcome: &str) -> f64 {
    let series =
        format!("cheiron_fleet_syncs_total{{cluster=\"{cluster}\",outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits until the controller has `n` workload clusters connected
/// (`cheiron_fleet_connections`).
async fn until_connections(controller: &CheironProcess, n: u32) -> Result<()> {
    wait_for(
        format!("cheiron_fleet_connections to be {n}"),
        REACH,
        || async {
            let metrics = controller.metrics().await?;
            let line = format!("cheiron_fleet_connections {n}");
            if metrics.lines().any(|l| l == line) {
                Ok(())
            } else {
                let now: Vec<&str> = metrics
                    .lines()
                    .filter(|l| l.starts_with("cheiron_fleet_"))
                    .collect();
                Err(format!("{now:?}").into())
            }
        },
    )
    .await
}

fn capi_clusters(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster");
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk))
}

/// Removes Cluster API's CRD from the management cluster (the Clusters of earlier tests with
/// it, their finalizers first), and waits until it is gone.
async fn remove_capi_crd(client: &Client) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt("clusters.cluster.x-k8s.io").await?.is_none() {
        return Ok(());
    }
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster");
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    for cluster in all.list(&Default::default()).await? {
        let ns = cluster.namespace().unwrap_or_default();
        capi_clusters(client, &ns)
            .patch(
                &cluster.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await?;
    }
    crds.delete("clusters.cluster.x-k8s.io", &DeleteParams::default())
        .await?;
    wait_for("Cluster API's CRD to be gone", REACH, || async {
        match crds.get_opt("clusters.cluster.x-k8s.io").await? {
            None => Ok(()),
            Some(_) => Err("still there".into()),
        }
    })
    .await
}

/// Makes `cluster` refuse every write of a Secret: a ValidatingAdmissionPolicy and its
/// binding there (the binding named after the cluster, to lift the refusal by deleting it).
async fn refuse_secret_writes(cluster: &WorkloadCluster) -> Result<Api<DynamicObject>> {
    let client = cluster.client()?;
    let resource = |kind: &str| {
        ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            kind,
        ))
    };
    let policies: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource("ValidatingAdmissionPolicy"));
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "refuse-secrets"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["secrets"]
            }]},
            "validations": [{"expression": "false", "message": "this cluster takes no Secrets (e2e)"}]
        }
    }))?;
    policies.create(&PostParams::default(), &policy).await?;
    let bindings: Api<DynamicObject> =
        Api::all_with(client, &resource("ValidatingAdmissionPolicyBinding"));
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "refuse-secrets"},
        "spec": {"policyName": "refuse-secrets", "validationActions": ["Deny"]}
    }))?;
    bindings.create(&PostParams::default(), &binding).await?;
    // In force once a Secret create is refused.
    let probe: Api<Secret> = Api::namespaced(cluster.client()?, "default");
    wait_for(
        format!("cluster {} to refuse Secrets", cluster.name),
        REACH,
        || async {
            let secret = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("refusal-probe".to_owned()),
                    ..Default::default()
                },
                ..Secret::default()
            };
            match probe
                .create(
                    &PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    },
                    &secret,
                )
                .await
            {
                Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => Ok(()),
                other => Err(format!("not refused yet: {other:?}").into()),
            }
        },
    )
    .await?;
    Ok(bindings)
}

#[tokio::test]
async fn a_cluster_refusing_writes_holds_up_no_other_and_unselected_clusters_get_no_connection()
-> Result {
    let s = ControllerScenario::without_shared_controller("fleet-refuse").await?;
    let cluster = s.cluster()?;
    // Cluster API's CRD comes only after the controller started (below).
    remove_capi_crd(s.client()).await?;
    let mut near = cluster.start_workload(&s.unique_name("near")).await?;
    let mut far = cluster.start_workload(&s.unique_name("far")).await?;
    let capi = s.create_namespace(&[], &[]).await?;
    for w in [&near, &far] {
        write_prod_kubeconfig(&s, &capi, &w.name, &w.kubeconfig()).await?;
    }
    // A cluster no manager selects (its kubeconfig works: it reaches near's apiserver).
    let idle = s.unique_name("idle");
    write_kubeconfig_secret(
        s.client(),
        &capi,
        &idle,
        &near.kubeconfig(),
        &[("env", "dev")],
    )
    .await?;
    let apps = s.unique_name("apps");
    for w in [&near, &far] {
        workload_namespace(&w.client()?, s.id(), &apps).await?;
    }
    let refusal = refuse_secret_writes(&far).await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let password = "refused-cluster-password-v1";
    let v1 = json!({"registry.example.com": registry_entry("fleet", password, None)});
    s.create_secret(&sources, &dockerconfigjson_secret(COPY, &v1))
        .await?;

    let controller = start_fleet_controller(&s, "fleet-refuse", &capi, &[])?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let manager = apply_prod_manager(&s, "fleet-refuse", &sources, false).await?;

    // Near is synced; far refuses, and says so without the Secret's content.
    until_synced(&near, &apps, &v1, REACH).await?;
    until_cluster_status(&s, &manager, &near.name, is_ready, REACH).await?;
    let refused = until_cluster_status(
        &s,
        &manager,
        &far.name,
        |c| match &c.message {
            // The code, never what the workload cluster said (docs/fleet.md).
            Some(m) if !c.ready && (m.contains("422") || m.contains("403")) => Ok(()),
            _ => Err(format!("{c:?}").into()),
        },
        REACH,
    )
    .await?;
    assert!(
        !format!("{refused:?}").contains("takes no Secrets"),
        "the workload cluster's answer is shown: {refused:?}"
    );
    let encoded = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("fleet:{password}"),
    );
    for leak in [password, encoded.as_str()] {
        assert!(!format!("{refused:?}").contains(leak), "{refused:?}");
    }
    s.until_ready_reason(&manager, "WorkloadClusterNotSynced")
        .await?;
    let event = s
        .until_event_about_manager(&manager, "WorkloadClusterWriteFailed")
        .await?;
    let note = event.note.unwrap_or_default();
    assert!(note.contains(&far.name), "{note}");
    for leak in [password, encoded.as_str()] {
        assert!(!note.contains(leak), "{note}");
    }

    // Only the two selected clusters are connected to; idle, which no manager selects, is not.
    until_connections(&controller, 2).await?;
    let metrics = controller.metrics().await?;
    assert!(
        !metrics.contains(&format!("cluster=\"{capi}/{idle}\"")),
        "a series of idle:\n{metrics}"
    );

    // A rotation reaches near while far still refuses.
    let v2 = json!({"registry.example.com": registry_entry("fleet", "v2", None)});
    s.replace_secret_data(&sources, COPY, &dockerconfigjson_secret(COPY, &v2))
        .await?;
    until_synced(&near, &apps, &v2, REACH).await?;

    // The refusal is lifted: far catches up.
    refusal
        .delete("refuse-secrets", &DeleteParams::default())
        .await?;
    until_synced(&far, &apps, &v2, CATCH_UP).await?;
    until_cluster_status(&s, &manager, &far.name, is_ready, CATCH_UP).await?;
    s.until_event_about_manager(&manager, "WorkloadClusterSynced")
        .await?;
    s.until_ready_reason(&manager, "Synced").await?;

    // Cluster API's CRD installed now, after the controller started, is picked up: near's
    // Cluster says env: staging, so near leaves the selector and is cleaned.
    install_capi_crd(s.client()).await?;
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": near.name, "namespace": capi, "labels": {"env": "staging"}},
        "spec": {"paused": false}
    }))?;
    capi_clusters(s.client(), &capi)
        .create(&PostParams::default(), &object)
        .await?;
    until_clean(&near, &apps).await?;
    until_synced(&far, &apps, &v2, REACH).await?;
    until_connections(&controller, 1).await?;

    let api: Api<DynamicObject> = Api::all_with(
        s.client().clone(),
        &ApiResource::erase::<cheiron::api::ClusterImagePullSecretManager>(&()),
    );
    api.delete(&manager.name, &DeleteParams::default()).await?;
    until_clean(&far, &apps).await?;
    controller.check_running()?;
    near.stop();
    far.stop();
    Ok(())
}

#[tokio::test]
async fn a_deleted_manager_waits_for_an_unreachable_cluster_only_until_the_cleanup_timeout()
-> Result {
    let s = ControllerScenario::without_shared_controller("fleet-timeout").await?;
    let cluster = s.cluster()?;
    let mut lost = cluster.start_workload(&s.unique_name("lost")).await?;
    let capi = s.create_namespace(&[], &[]).await?;
    write_prod_kubeconfig(&s, &capi, &lost.name, &lost.kubeconfig()).await?;
    let apps = s.unique_name("apps");
    workload_namespace(&lost.client()?, s.id(), &apps).await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let v1 = json!({"registry.example.com": registry_entry("fleet", "v1", None)});
    s.create_secret(&sources, &dockerconfigjson_secret(COPY, &v1))
        .await?;
    let controller = start_fleet_controller(
        &s,
        "fleet-timeout",
        &capi,
        &["--fleet-cleanup-timeout", "10"],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let manager = apply_prod_manager(&s, "fleet-timeout", &sources, false).await?;
    until_synced(&lost, &apps, &v1, REACH).await?;
    until_cluster_status(&s, &manager, &lost.name, is_ready, REACH).await?;

    // A manager of this cluster only, which never selected a workload cluster.
    let local = s
        .apply(&s.cluster_manager(
            "fleet-timeout-local",
            &format!(
                "  secrets:
    - existingSecretRef:
        name: {COPY}
        namespace: {sources}
"
            ),
        ))
        .await?;

    // The cluster goes away, then the manager is deleted: the cleanup there fails and holds
    // the deletion, but only until --fleet-cleanup-timeout (10 s).
    lost.stop();
    // The local manager, reconciled while the cluster is down, has nothing to clean there: it
    // neither reports the cluster nor keeps a connection to it (checked below).
    let managers: Api<DynamicObject> = Api::all_with(
        s.client().clone(),
        &ApiResource::erase::<cheiron::api::ClusterImagePullSecretManager>(&()),
    );
    managers
        .patch(
            &local.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"excludeNamespaces": ["e2e-none-*"]}})),
        )
        .await?;
    s.until_status(
        &local,
        "its new generation, no workload cluster",
        |status| status.clusters.is_empty(),
    )
    .await?;
    let (object, _) = s.manager_status(&manager).await?;
    let uid = object.uid();
    let api: Api<DynamicObject> = Api::all_with(
        s.client().clone(),
        &ApiResource::erase::<cheiron::api::ClusterImagePullSecretManager>(&()),
    );
    api.delete(&manager.name, &DeleteParams::default()).await?;
    let held = s
        .until_event("default", uid.as_deref(), "CleanupFailed", &manager)
        .await?;
    assert!(
        held.note.as_deref().is_some_and(|n| n.contains(&lost.name)),
        "{held:?}"
    );
    wait_for("the manager to be gone", CATCH_UP, || async {
        match api.get_opt(&manager.name).await? {
            None => Ok(()),
            Some(m) => Err(format!("still there: {:?}", m.finalizers()).into()),
        }
    })
    .await?;
    let released = s
        .until_event(
            "default",
            uid.as_deref(),
            "WorkloadCleanupTimedOut",
            &manager,
        )
        .await?;
    let note = released.note.unwrap_or_default();
    assert!(
        note.contains(&format!("{capi}/{}", lost.name)) && note.contains("10s"),
        "{note}"
    );
    until_connections(&controller, 0).await?;
    let (_, status) = s.manager_status(&local).await?;
    assert!(status.clusters.is_empty(), "{:?}", status.clusters);
    managers
        .delete(&local.name, &DeleteParams::default())
        .await?;

    // What the Event says was left is there when the cluster comes back, and stays.
    lost.start().await?;
    let secrets: Api<Secret> = Api::namespaced(lost.client()?, &apps);
    let copy = secrets.get_opt(COPY).await?.ok_or("the copy is gone")?;
    holds(&copy, &v1)?;
    controller.check_running()?;
    lost.stop();
    Ok(())
}

/// Secrets cheiron wrote anywhere in `cluster`.
async fn cheirons_secrets(cluster: &WorkloadCluster) -> Result<Vec<String>> {
    let all: Api<Secret> = Api::all(cluster.client()?);
    Ok(all
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=cheiron"))
        .await?
        .items
        .iter()
        .map(|s| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()))
        .collect())
}

/// The audit's HIGH finding (docs/fleet.md, "Who can enrol a cluster"): a tenant who may write
/// Secrets only in her own namespace writes a kubeconfig Secret there, labelled as a manager
/// selects, naming her own server. Without `--fleet-namespace` the controller reads kubeconfig
/// Secrets only in its own namespace, so her server gets nothing; kubeconfigs in that namespace
/// that skip TLS verification or name a plain `http://` server are refused without
/// `--fleet-allow-insecure`, and say so.
#[tokio::test]
async fn a_tenants_kubeconfig_secret_enrols_no_cluster_and_insecure_kubeconfigs_are_refused()
-> Result {
    let s = ControllerScenario::without_shared_controller("fleet-trust").await?;
    let cluster = s.cluster()?;
    let mut platform = cluster.start_workload(&s.unique_name("platform")).await?;
    let mut hers = cluster.start_workload(&s.unique_name("hers")).await?;
    // cheiron's own namespace, and the tenant's.
    let own = s.create_namespace(&[], &[]).await?;
    let tenant = s.create_namespace(&[], &[]).await?;
    write_prod_kubeconfig(&s, &own, &platform.name, &platform.kubeconfig()).await?;
    write_prod_kubeconfig(&s, &tenant, &hers.name, &hers.kubeconfig()).await?;
    let insecure = s.unique_name("insecure");
    write_prod_kubeconfig(&s, &own, &insecure, &hers.insecure_kubeconfig()).await?;
    let plain = s.unique_name("plain");
    write_prod_kubeconfig(&s, &own, &plain, &hers.plain_http_kubeconfig()).await?;
    let apps = s.unique_name("apps");
    for w in [&platform, &hers] {
        workload_namespace(&w.client()?, s.id(), &apps).await?;
    }
    let sources = s.create_namespace(&[], &[]).await?;
    let password = "platform-registry-password";
    let v1 = json!({"registry.example.com": registry_entry("fleet", password, None)});
    s.create_secret(&sources, &dockerconfigjson_secret(COPY, &v1))
        .await?;

    // No --fleet-namespace: cheiron's own namespace only.
    let controller = CheironProcess::controller(
        &s.unique_name("fleet-trust"),
        &[
            "--no-leader-election",
            "--resync",
            "15",
            "--pod-namespace",
            own.as_str(),
            "--fleet",
            "--fleet-select-by-secret-labels",
        ],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let manager = apply_prod_manager(&s, "fleet-trust", &sources, false).await?;

    until_synced(&platform, &apps, &v1, REACH).await?;
    until_cluster_status(&s, &manager, &platform.name, is_ready, REACH).await?;
    for (name, says) in [
        (&insecure, "insecure-skip-tls-verify"),
        (&plain, "https://"),
    ] {
        let refused = until_cluster_status(
            &s,
            &manager,
            name,
            |c| match &c.message {
                Some(m) if !c.ready && m.contains(says) && m.contains("--fleet-allow-insecure") => {
                    Ok(())
                }
                _ => Err(format!("{c:?}").into()),
            },
            REACH,
        )
        .await?;
        assert!(
            !format!("{refused:?}").contains(&hers.server),
            "the kubeconfig is quoted: {refused:?}"
        );
    }
    // A full resync later, her server still holds nothing of cheiron's, and she is not listed.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let leaked = cheirons_secrets(&hers).await?;
    assert!(leaked.is_empty(), "her server received {leaked:?}");
    let (_, status) = s.manager_status(&manager).await?;
    assert!(
        !status
            .clusters
            .iter()
            .any(|c| c.name.starts_with(&format!("{tenant}/"))),
        "{:?}",
        status.clusters
    );
    // Only the platform's cluster is connected to.
    until_connections(&controller, 1).await?;
    controller.check_running()?;
    platform.stop();
    hers.stop();
    Ok(())
}

/// The audit's MED and LOW findings: a "workload cluster" that answers 403 with a body of
/// its own (an internal listener reached through `server:`) is reported by its code only —
/// the body appears in no status, Event or log line — and clusters wanted beyond
/// `--fleet-max-clusters` are reported, not connected to.
#[tokio::test]
async fn a_workload_servers_answer_is_never_shown_and_clusters_beyond_the_cap_are_refused() -> Result
{
    const MARKER: &str = "internal-listener-marker-3c1f9e";
    let s = ControllerScenario::without_shared_controller("fleet-hostile").await?;
    let hostile = RefusingServer::start(&format!(
        "forbidden: {MARKER}: the admin console of an internal service"
    ))
    .await?;
    let own = s.create_namespace(&[], &[]).await?;
    let (first, second) = (s.unique_name("a"), s.unique_name("b"));
    for name in [&first, &second] {
        write_prod_kubeconfig(&s, &own, name, &hostile.kubeconfig(name)).await?;
    }
    let sources = s.create_namespace(&[], &[]).await?;
    let v1 = json!({"registry.example.com": registry_entry("fleet", "v1", None)});
    s.create_secret(&sources, &dockerconfigjson_secret(COPY, &v1))
        .await?;
    let controller = start_fleet_controller(
        &s,
        "fleet-hostile",
        &own,
        &["--fleet-allow-insecure", "--fleet-max-clusters", "1"],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let manager = apply_prod_manager(&s, "fleet-hostile", &sources, false).await?;

    let refused = until_cluster_status(
        &s,
        &manager,
        &first,
        |c| match &c.message {
            Some(m) if !c.ready && m.contains("403") => Ok(()),
            _ => Err(format!("{c:?}").into()),
        },
        REACH,
    )
    .await?;
    println!("refused: {refused:?}");
    let capped = until_cluster_status(
        &s,
        &manager,
        &second,
        |c| match &c.message {
            Some(m) if !c.ready && m.contains("--fleet-max-clusters") => Ok(()),
            _ => Err(format!("{c:?}").into()),
        },
        REACH,
    )
    .await?;
    println!("capped: {capped:?}");
    let event = s
        .until_event_about_manager(&manager, "WorkloadClusterUnreachable")
        .await?;
    // Let the watches of the first fail and retry a while, logging.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(hostile.requests() > 0, "the controller never asked");
    until_connections(&controller, 1).await?;

    let (object, status) = s.manager_status(&manager).await?;
    let shown = format!(
        "{}\n{:?}\n{:?}",
        serde_json::to_string(&object)?,
        status,
        s.events_about_manager(&manager).await?
    );
    assert!(!shown.contains(MARKER), "the body is shown: {shown}");
    assert!(!format!("{event:?}").contains(MARKER), "{event:?}");
    let log = std::fs::read_to_string(controller.log())?;
    assert!(
        log.contains(&first),
        "the log says nothing of the cluster:\n{}",
        controller.log_excerpt(40)
    );
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(MARKER)).collect();
    assert!(lines.is_empty(), "the body is logged: {lines:?}");
    controller.check_running()?;
    Ok(())
}

/// The audit's LOW finding on the size of a hostile workload apiserver's lists: a server that
/// answers every page of a list with one more `continue` token is asked for at most
/// `--fleet-max-list-pages` pages per list (its watches then back off and list again), the
/// cluster is reported with the flag's name, and the manager keeps a real workload cluster in
/// step meanwhile.
#[tokio::test]
async fn a_workload_server_paging_without_end_is_cut_off_at_the_page_cap() -> Result {
    const MAX_PAGES: usize = 5;
    let s = ControllerScenario::without_shared_controller("fleet-paging").await?;
    let cluster = s.cluster()?;
    let mut good = cluster.start_workload(&s.unique_name("good")).await?;
    let endless = PagingServer::start().await?;
    let own = s.create_namespace(&[], &[]).await?;
    let paging = s.unique_name("paging");
    write_prod_kubeconfig(&s, &own, &paging, &endless.kubeconfig(&paging)).await?;
    write_prod_kubeconfig(&s, &own, &good.name, &good.kubeconfig()).await?;
    let apps = s.unique_name("apps");
    workload_namespace(&good.client()?, s.id(), &apps).await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let v1 = json!({"registry.example.com": registry_entry("fleet", "v1", None)});
    s.create_secret(&sources, &dockerconfigjson_secret(COPY, &v1))
        .await?;
    let max_pages = MAX_PAGES.to_string();
    let controller = start_fleet_controller(
        &s,
        "fleet-paging",
        &own,
        &[
            "--fleet-allow-insecure",
            "--fleet-max-list-pages",
            &max_pages,
        ],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let manager = apply_prod_manager(&s, "fleet-paging", &sources, false).await?;

    until_cluster_status(
        &s,
        &manager,
        &paging,
        |c| match &c.message {
            Some(m)
                if !c.ready
                    && m.contains("--fleet-max-list-pages")
                    && m.contains(&format!("more than {MAX_PAGES} pages")) =>
            {
                Ok(())
            }
            _ => Err(format!("{c:?}").into()),
        },
        REACH,
    )
    .await?;
    s.until_event_about_manager(&manager, "WorkloadClusterUnreachable")
        .await?;
    // The other cluster is kept in step meanwhile.
    until_synced(&good, &apps, &v1, REACH).await?;
    until_cluster_status(&s, &manager, &good.name, is_ready, REACH).await?;
    // Its watches list again on their backoff, never past the cap.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (run, path) = endless.longest_run();
    assert!(run > 0, "the controller never paged");
    assert!(
        run < MAX_PAGES,
        "{path} was asked for {} pages in a row",
        run + 1
    );
    let (_, status) = s.manager_status(&manager).await?;
    let entry = status
        .clusters
        .iter()
        .find(|c| c.name.ends_with(&format!("/{paging}")))
        .ok_or("the paging cluster is no longer reported")?;
    assert!(!entry.ready, "{entry:?}");
    controller.check_running()?;
    good.stop();
    Ok(())
}

/// Without `--fleet-select-by-secret-labels`, a kubeconfig Secret's own labels select nothing
/// (docs/fleet.md, "Who can enrol a cluster"): whoever may write a Secret in a fleet namespace
/// cannot enrol a cluster by labelling it as a manager selects; a Cluster API `Cluster` of its
/// name would have to. The planted server is never asked anything, and no status lists it.
#[tokio::test]
async fn without_the_flag_a_kubeconfig_secrets_own_labels_enrol_no_cluster() -> Result {
    let s = ControllerScenario::without_shared_controller("fleet-labels").await?;
    let planted = RefusingServer::start("a planted cluster").await?;
    let own = s.create_namespace(&[], &[]).await?;
    let name = s.unique_name("planted");
    write_prod_kubeconfig(&s, &own, &name, &planted.kubeconfig(&name)).await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let v1 = json!({"registry.example.com": registry_entry("fleet", "v1", None)});
    s.create_secret(&sources, &dockerconfigjson_secret(COPY, &v1))
        .await?;
    // No --fleet-select-by-secret-labels; insecure allowed, so only the labels rule is tested.
    let controller = CheironProcess::controller(
        &s.unique_name("fleet-labels"),
        &[
            "--no-leader-election",
            "--resync",
            "10",
            "--fleet",
            "--fleet-namespace",
            own.as_str(),
            "--fleet-allow-insecure",
        ],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let manager = apply_prod_manager(&s, "fleet-labels", &sources, false).await?;
    s.until_status(&manager, "its generation observed", |_| true)
        .await?;
    // A full resync later, the planted cluster is still not enrolled.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let (_, status) = s.manager_status(&manager).await?;
    assert!(
        status.clusters.is_empty(),
        "a Secret's labels enrolled {:?}",
        status.clusters
    );
    assert_eq!(planted.requests(), 0, "the planted server was asked");
    controller.check_running()?;
    Ok(())
}
