//! What a tenant can make the controller hold: anyone may put cheiron's labels on their own
//! Secrets. 10 000 such Secrets, 8 KiB each and claiming to belong to a live manager, must not
//! grow the controller at all (its cache keeps the metadata of the Secrets a manager owns, and
//! nothing of look-alikes), and must never be changed or deleted (cheiron did not write them).

use std::{collections::BTreeMap, time::Duration};

use cheiron::api::label;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::ListParams};

use crate::{
    fault_cluster::{FaultCluster, create_secret, mib, pull_secret, serial},
    harness::{
        ControlPlaneOptions, Result,
        controller::{CheironProcess, READY_WITHIN},
    },
};

const FOREIGN: usize = 10_000;
const PADDING: usize = 8 * 1024;
/// The bound the controller's growth must stay under: 4 MiB, allocator noise. Keeping the
/// look-alikes' metadata (as the cache did before it admitted only Secrets a manager owns) cost
/// 18 MiB here; keeping their data would cost the 78 MiB they hold.
const GROWTH_BOUND: u64 = 4 * 1024 * 1024;

/// The highest of five RSS samples a second apart (jemalloc returns memory in the background).
async fn settled_rss(controller: &CheironProcess) -> Result<u64> {
    let mut highest = 0;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        highest = highest.max(controller.rss_bytes()?);
    }
    Ok(highest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_foreign_secrets_with_cheirons_labels_cost_the_controller_no_data() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("foreign-secrets", ControlPlaneOptions::default()).await?;
    let namespaces = cluster.create_target_namespaces(20).await?;
    let controller = CheironProcess::controller_on(
        &cluster.host(),
        "controller",
        &["--no-leader-election", "--resync", "15"],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let manager = "victim";
    cluster
        .scenario()
        .apply_manager(&cluster.service_account_manager(manager, "pull", "p4ss"))
        .await?;
    cluster.until_converged(&namespaces, "pull").await?;
    let before = settled_rss(&controller).await?;

    // Every label cheiron puts on its own Secrets, naming the live manager, in the namespaces
    // it covers.
    let labels = [
        (label::MANAGED_BY, label::MANAGED_BY_VALUE),
        (label::MANAGER_KIND, "ClusterImagePullSecretManager"),
        (label::MANAGER_NAME, manager),
    ];
    let mut created = tokio::task::JoinSet::new();
    for i in 0..FOREIGN {
        if created.len() >= 32
            && let Some(done) = created.join_next().await
        {
            done??;
        }
        let client = cluster.client().clone();
        let ns = namespaces[i % namespaces.len()].clone();
        let secret = pull_secret(&format!("foreign-{i}"), &labels, PADDING);
        created.spawn(async move {
            create_secret(&client, &ns, &secret).await?;
            Ok::<_, crate::harness::Error>(())
        });
    }
    while let Some(done) = created.join_next().await {
        done??;
    }
    let versions = foreign_versions(&cluster).await?;
    assert_eq!(versions.len(), FOREIGN, "all foreign Secrets were created");

    // Long enough for the watch to deliver them all and for a resync (15 s) to pass.
    tokio::time::sleep(Duration::from_secs(20)).await;
    controller.check_running()?;
    let after = settled_rss(&controller).await?;
    let growth = after.saturating_sub(before);
    eprintln!(
        "controller RSS {:.1} MiB before, {:.1} MiB after {FOREIGN} labelled foreign Secrets \
         ({:.1} MiB of data): +{:.1} MiB, {} bytes per Secret",
        mib(before),
        mib(after),
        mib((FOREIGN * PADDING) as u64),
        mib(growth),
        growth / FOREIGN as u64
    );
    assert!(
        growth < GROWTH_BOUND,
        "the controller grew by {:.1} MiB for {FOREIGN} foreign Secrets (bound {:.1} MiB)",
        mib(growth),
        mib(GROWTH_BOUND)
    );
    assert_eq!(
        foreign_versions(&cluster).await?,
        versions,
        "no foreign Secret was changed or deleted"
    );
    cluster.until_converged(&namespaces, "pull").await?;
    Ok(())
}

/// `namespace/name -> resourceVersion` of every foreign Secret.
async fn foreign_versions(cluster: &FaultCluster) -> Result<BTreeMap<String, String>> {
    let secrets: Api<Secret> = Api::all(cluster.client().clone());
    let mut versions = BTreeMap::new();
    let mut params = ListParams::default()
        .labels(&label::managed_by_selector())
        .limit(2000);
    loop {
        let page = secrets.list_metadata(&params).await?;
        for secret in page.items {
            let name = secret.metadata.name.unwrap_or_default();
            if name.starts_with("foreign-") {
                versions.insert(
                    format!("{}/{name}", secret.metadata.namespace.unwrap_or_default()),
                    secret.metadata.resource_version.unwrap_or_default(),
                );
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok(versions)
}
