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
        workload::{WorkloadCluster, install_capi_crd, write_kubeconfig_secret},
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
        write_kubeconfig_secret(
            s.client(),
            &capi,
            &w.name,
            &w.kubeconfig(),
            &[("env", "prod")],
        )
        .await?;
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

    let controller = CheironProcess::controller(
        &s.unique_name("fleet"),
        &[
            "--no-leader-election",
            "--resync",
            "15",
            "--fleet",
            "--fleet-namespace",
            &capi,
        ],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let manager = s
        .apply(&s.cluster_manager(
            "fleet",
            &format!(
                "  secrets:
    - existingSecretRef:
        name: {COPY}
        namespace: {sources}
  clusters:
    selector:
      matchLabels:
        env: prod
"
            ),
        ))
        .await?;

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
    west.start().await?;
    until_synced(&west, &apps, &v3, CATCH_UP).await?;
    until_cluster_status(&s, &manager, &west.name, is_ready, CATCH_UP).await?;

    // A bad kubeconfig is reported without its content; the rotated one is picked up.
    write_kubeconfig_secret(
        s.client(),
        &capi,
        &west.name,
        &west.bad_kubeconfig(),
        &[("env", "prod")],
    )
    .await?;
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
    write_kubeconfig_secret(
        s.client(),
        &capi,
        &west.name,
        &west.rotated_kubeconfig(),
        &[("env", "prod")],
    )
    .await?;
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

fn capi_clusters(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster");
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk))
}
