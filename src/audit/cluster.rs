//! `cheiron audit`'s reads: Pods and ServiceAccounts page by page (limit/continue), the
//! Namespaces' metadata, the managers, the owners of Pods (ReplicaSets as metadata), and
//! whether the webhook is registered; the managers' status for the pull findings. Secrets are
//! never read.

use std::collections::HashMap;

use k8s_openapi::api::{
    admissionregistration::v1::MutatingWebhookConfiguration,
    apps::v1::ReplicaSet,
    core::v1::{Namespace, Pod, ServiceAccount},
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use serde::de::DeserializeOwned;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Finding, Lacking, Registration, Why, lacking, pod_fix, pulls, why_pod};
use crate::{
    admission::interpret,
    explain::source::{SourceError, manager_objects},
    policy::{Manager, NamespaceMeta, SubjectKind, live_managers},
};

/// Objects read per list request, unless `--page-size` says otherwise.
pub const PAGE_SIZE: u32 = 500;

/// The name of cheiron's webhook in its MutatingWebhookConfiguration.
pub const WEBHOOK_NAME: &str = "inject.cheiron.anny.co";

fn read(what: &str) -> impl FnOnce(kube::Error) -> SourceError {
    let what = what.to_owned();
    move |error| SourceError::Read { what, error }
}

/// Every object of `api`, `page_size` at a time.
async fn all<K>(api: Api<K>, what: &str, page_size: u32) -> Result<Vec<K>, SourceError>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(page_size);
    loop {
        let page = api.list(&params).await.map_err(read(what))?;
        items.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(items),
        }
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The findings in `namespace` (all namespaces when `None`), listing `page_size` objects per
/// request.
pub async fn audit(
    client: &Client,
    namespace: Option<&str>,
    page_size: u32,
) -> Result<Audit, SourceError> {
    let (namespaced_managers, cluster_managers) = manager_objects(client).await?;
    let namespaces: HashMap<String, NamespaceMeta> = all(
        Api::<Namespace>::all(client.clone()),
        "Namespaces",
        page_size,
    )
    .await?
    .iter()
    .map(|n| (n.name_any(), NamespaceMeta::from_metadata(&n.metadata)))
    .collect();
    let mut auditor = Auditor {
        client,
        managers: live_managers(&namespaced_managers, &cluster_managers).0,
        serving: pulls::serving(&namespaced_managers, &cluster_managers),
        namespaces,
        registered: registration(client).await,
        owners: Owners::default(),
        findings: Vec::new(),
    };
    for pod in all(api::<Pod>(client, namespace), "Pods", page_size).await? {
        auditor.pod(&pod).await?;
    }
    for sa in all(
        api::<ServiceAccount>(client, namespace),
        "ServiceAccounts",
        page_size,
    )
    .await?
    {
        auditor.service_account(&sa)?;
    }
    Ok(Audit {
        findings: auditor.findings,
        docker_hub: pulls::docker_hub_allowances(&namespaced_managers, &cluster_managers),
    })
}

/// What the findings are worked out against, and the findings so far.
struct Auditor<'c> {
    client: &'c Client,
    managers: Vec<Manager>,
    /// The managers' pull findings (refused pulls attributed to a manager).
    serving: Vec<pulls::Serving>,
    namespaces: HashMap<String, NamespaceMeta>,
    registered: Registration,
    owners: Owners,
    findings: Vec<Finding>,
}

impl Auditor<'_> {
    fn meta(&self, namespace: &str) -> NamespaceMeta {
        self.namespaces
            .get(namespace)
            .cloned()
            .unwrap_or_else(|| NamespaceMeta::named(namespace))
    }

    /// A Pod's findings: each pull a registry refused with a credential cheiron wrote, and the
    /// pull secrets it lacks.
    async fn pod(&mut self, p: &Pod) -> Result<(), SourceError> {
        let ns = p.namespace().unwrap_or_default();
        let meta = self.meta(&ns);
        for found in pulls::refused_pulls(p, &meta, &self.serving) {
            let (why, missing, fix) = refused_pull(&found, &ns, &p.name_any());
            let owner = self.owners.of(self.client, p).await;
            self.findings.push(Finding {
                kind: "Pod",
                namespace: ns.clone(),
                name: p.name_any(),
                owner,
                lacking: Lacking {
                    wanted: Vec::new(),
                    missing,
                    managers: vec![found.manager.clone()],
                },
                why,
                reason: why.words(),
                fix,
                pull: Some(found.pull),
            });
        }
        let object = interpret(&serde_json::to_value(p)?, SubjectKind::Pod)?;
        let Some(lacks) = lacking(&object, &meta, &self.managers) else {
            return Ok(());
        };
        let wanting: Vec<_> = self
            .managers
            .iter()
            .filter(|m| lacks.managers.contains(&m.id.to_string()))
            .map(|m| m.created.clone())
            .collect();
        let why = why_pod(
            p.metadata.creation_timestamp.as_ref(),
            &wanting,
            &self.registered,
        );
        let owner = self.owners.of(self.client, p).await;
        self.findings.push(Finding {
            kind: "Pod",
            fix: pod_fix(&ns, &p.name_any(), owner.as_deref()),
            namespace: ns,
            name: p.name_any(),
            owner,
            lacking: lacks,
            why,
            reason: why.words(),
            pull: None,
        });
        Ok(())
    }

    /// A ServiceAccount's finding: the pull secrets it lacks, which the controller backfills.
    fn service_account(&mut self, sa: &ServiceAccount) -> Result<(), SourceError> {
        let ns = sa.namespace().unwrap_or_default();
        let object = interpret(&serde_json::to_value(sa)?, SubjectKind::ServiceAccount)?;
        let Some(lacks) = lacking(&object, &self.meta(&ns), &self.managers) else {
            return Ok(());
        };
        self.findings.push(Finding {
            kind: "ServiceAccount",
            fix: "none: the controller backfills it; check the manager's Ready condition (kubectl get clusterimagepullsecretmanagers,imagepullsecretmanagers -A)".into(),
            namespace: ns,
            name: sa.name_any(),
            owner: None,
            lacking: lacks,
            why: Why::NotBackfilled,
            reason: Why::NotBackfilled.words(),
            pull: None,
        });
        Ok(())
    }
}

/// Since when cheiron's webhook is registered: the oldest MutatingWebhookConfiguration holding
/// it; unknown when the client may not list them (the webhook is then not blamed).
async fn registration(client: &Client) -> Registration {
    let Ok(list) = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
    else {
        return Registration::Unknown;
    };
    let mut since: Vec<Option<Time>> = list
        .items
        .iter()
        .filter(|c| c.webhooks.iter().flatten().any(|w| w.name == WEBHOOK_NAME))
        .map(|c| c.metadata.creation_timestamp.clone())
        .collect();
    since.sort_by_key(|t| t.as_ref().map(|t| t.0));
    match since.into_iter().next() {
        Some(oldest) => Registration::Since(oldest),
        None => Registration::Absent,
    }
}

/// Why the Pod `pod` in `ns` could not pull as `found` says, the Secrets it lacks, and the fix.
fn refused_pull(found: &pulls::PullFinding, ns: &str, pod: &str) -> (Why, Vec<String>, String) {
    match found.why {
        pulls::PullWhy::Rejected => (
            Why::PullRejected,
            Vec::new(),
            format!(
                "rotate the credential {} writes to Secret {} (its source Secret or password), then kubectl delete pod {pod} -n {ns} so it pulls again",
                found.manager, found.pull.secret,
            ),
        ),
        pulls::PullWhy::NoCredential if found.in_scope => (
            Why::NoCredential,
            vec![found.pull.secret.clone()],
            format!(
                "lift the Pod's or its ServiceAccount's opt-out from {}, or the selector that leaves it out (cheiron explain pod {pod} -n {ns} says which), then recreate the Pod",
                found.manager,
            ),
        ),
        pulls::PullWhy::NoCredential => (
            Why::NoCredential,
            vec![found.pull.secret.clone()],
            format!(
                "bring namespace {ns} into {}'s scope, then recreate the Pod",
                found.manager,
            ),
        ),
    }
}

/// What `cheiron audit` found.
pub struct Audit {
    /// The findings.
    pub findings: Vec<Finding>,
    /// The credentials Docker Hub pulls count against, with their allowance
    /// ([`pulls::docker_hub_allowances`]).
    pub docker_hub: Vec<String>,
}

/// The workloads owning Pods, with each ReplicaSet read once (as metadata).
#[derive(Default)]
struct Owners(HashMap<(String, String), Option<String>>);

impl Owners {
    async fn of(&mut self, client: &Client, pod: &Pod) -> Option<String> {
        let owner = pod
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))?;
        if owner.kind != "ReplicaSet" {
            return Some(format!("{}/{}", owner.kind, owner.name));
        }
        let ns = pod.namespace().unwrap_or_default();
        let key = (ns.clone(), owner.name.clone());
        if let Some(known) = self.0.get(&key) {
            return known.clone();
        }
        let rs = Api::<ReplicaSet>::namespaced(client.clone(), &ns)
            .get_metadata_opt(&owner.name)
            .await
            .ok()
            .flatten();
        let found = Some(
            rs.and_then(|rs| {
                rs.owner_references()
                    .iter()
                    .find(|o| o.controller == Some(true))
                    .map(|o| format!("{}/{}", o.kind, o.name))
            })
            .unwrap_or_else(|| format!("ReplicaSet/{}", owner.name)),
        );
        self.0.insert(key, found.clone());
        found
    }
}
