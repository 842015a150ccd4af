//! The cluster a phase measures: its namespaces, ServiceAccounts, Secrets and managers, named
//! and labelled the same way in every phase, created many at a time.

use std::{collections::BTreeMap, future::Future, time::Instant};

use cheiron::api::{ClusterImagePullSecretManager, ImagePullSecretManager, label};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::{
    ByteString,
    api::core::v1::{Namespace, Secret, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
    core::{ObjectMeta, PartialObjectMeta},
};
use serde_json::json;

use cheiron_harness::Result;

/// Creations in flight while setting up.
pub const CREATE_CONCURRENCY: usize = 32;
/// Cluster managers: one over every namespace, the others over one slice each.
pub const CLUSTER_MANAGERS: usize = 100;
/// Extra ServiceAccounts per namespace besides `default`.
pub const EXTRA_SERVICE_ACCOUNTS: usize = 4;
/// The namespace of the managers' source Secrets (selected by none of them).
pub const SOURCES: &str = "scale-sources";
const SLICE: &str = "bench.cheiron.anny.co/slice";
const GROUP: &str = "bench.cheiron.anny.co/group";
const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// Field manager of the benchmark's own writes.
pub const FIELD_MANAGER: &str = "cheiron-scale-bench";

/// The name of namespace `i` of the measured set.
pub fn namespace(i: usize) -> String {
    format!("scale-{i}")
}

/// The index of a measured namespace, from its name.
pub fn index_of(ns: &str) -> Option<usize> {
    ns.strip_prefix("scale-")?.parse().ok()
}

/// The cluster manager `j` (0 covers every namespace; `j` ≥ 1 covers slice `j - 1`).
pub fn cluster_manager_name(j: usize) -> String {
    format!("ctl-{j}")
}

/// The Secret name cluster manager `j` writes.
pub fn cluster_secret(j: usize) -> String {
    format!("ctl-{j}-pull")
}

/// The cluster managers whose scope holds namespace `i`, by index.
pub fn managers_of_namespace(i: usize) -> Vec<usize> {
    let slice = i % 100;
    if slice < CLUSTER_MANAGERS - 1 {
        vec![0, slice + 1]
    } else {
        vec![0]
    }
}

/// What the controller phase sets up and converges: how many cluster managers, and how many
/// ServiceAccounts each namespace has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Cluster managers applied.
    pub managers: usize,
    /// ServiceAccounts per namespace, `default` included.
    pub accounts: usize,
}

impl Shape {
    /// The `controller` phase: [`CLUSTER_MANAGERS`] cluster managers (one over every namespace,
    /// the others over a slice each) and `default` + [`EXTRA_SERVICE_ACCOUNTS`] per namespace.
    pub const MANY: Self = Self {
        managers: CLUSTER_MANAGERS,
        accounts: EXTRA_SERVICE_ACCOUNTS + 1,
    };
    /// The `wide` phase: one cluster manager over every namespace, `default` only: one Secret
    /// and one ServiceAccount patch per namespace, affordable at 100 000 namespaces.
    pub const WIDE: Self = Self {
        managers: 1,
        accounts: 1,
    };

    /// The cluster managers whose scope holds namespace `i`, by index.
    pub fn managers_of_namespace(self, i: usize) -> Vec<usize> {
        if self.managers == 1 {
            vec![0]
        } else {
            managers_of_namespace(i)
        }
    }

    /// The namespaces of the measured set (of `n`) cluster manager `j` covers.
    pub fn namespaces_of_manager(self, j: usize, n: usize) -> Vec<usize> {
        (0..n)
            .filter(|i| self.managers_of_namespace(*i).contains(&j))
            .collect()
    }

    /// The name of ServiceAccount `k` of a namespace (`default` first).
    pub fn account_name(k: usize) -> String {
        match k {
            0 => "default".to_owned(),
            k => format!("sa-{k}"),
        }
    }

    /// A figure's key in the results file: the `wide` phase's are prefixed `wide_`.
    pub fn key(self, key: &str) -> String {
        if self == Self::WIDE {
            format!("wide_{key}")
        } else {
            key.to_owned()
        }
    }
}

/// Runs `make(i)` for `0..count`, [`CREATE_CONCURRENCY`] at a time, reporting progress.
pub async fn many<F, Fut>(what: &str, count: usize, make: F) -> Result
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result>,
{
    let started = Instant::now();
    let step = (count / 10).max(1);
    stream::iter(0..count)
        .map(|i| {
            let made = make(i);
            async move {
                made.await?;
                if (i + 1) % step == 0 {
                    eprintln!("[scale]   {what}: {}/{count}", i + 1);
                }
                Ok::<_, cheiron_harness::Error>(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    eprintln!("[scale]   {count} {what} in {:.1?}", started.elapsed());
    Ok(())
}

/// Treats "already exists" as done, so a setup can be topped up.
fn created<T>(result: kube::Result<T>) -> Result {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn labels(pairs: &[(&str, String)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    )
}

/// Creates namespace `i` of the measured set: `tier=apps`, its slice and its group.
pub async fn create_namespace(client: &Client, i: usize) -> Result {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace(i)),
            labels: labels(&[
                ("tier", "apps".to_owned()),
                (SLICE, format!("s{}", i % 100)),
                (GROUP, format!("g{}", i % 50)),
            ]),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    created(
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await,
    )
}

/// Creates a namespace selected by no manager.
pub async fn create_plain_namespace(client: &Client, name: &str) -> Result {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    created(
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await,
    )
}

/// Creates ServiceAccount `name` in `ns`.
pub async fn create_service_account(client: &Client, ns: &str, name: &str) -> Result {
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    created(
        Api::<ServiceAccount>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &sa)
            .await,
    )
}

/// A small Secret nothing of cheiron's selects.
pub async fn create_unrelated_secret(client: &Client, ns: &str, name: &str) -> Result {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: labels(&[("app", "unrelated".to_owned())]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(
            "token".to_owned(),
            ByteString(format!("value-of-{ns}-{name}").into_bytes()),
        )])),
        ..Secret::default()
    };
    created(
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await,
    )
}

/// `.dockerconfigjson` of a made-up registry, as a source or a copy holds it.
pub fn docker_config(registry: &str) -> BTreeMap<String, ByteString> {
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode("bench:password");
    BTreeMap::from([(
        ".dockerconfigjson".to_owned(),
        ByteString(
            json!({"auths": {registry: {"username": "bench", "password": "password", "auth": auth}}})
                .to_string()
                .into_bytes(),
        ),
    )])
}

/// Creates the source Secret of cluster manager `j`.
pub async fn create_source(client: &Client, j: usize) -> Result {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(format!("src-{j}")),
            ..ObjectMeta::default()
        },
        type_: Some(DOCKER_CONFIG_JSON.to_owned()),
        data: Some(docker_config(&format!("registry-{j}.example.com"))),
        ..Secret::default()
    };
    created(
        Api::<Secret>::namespaced(client.clone(), SOURCES)
            .create(&PostParams::default(), &secret)
            .await,
    )
}

/// A copy as cheiron labels it, made by the benchmark (the webhook phase needs cheiron's
/// Secrets to exist, not the controller that writes them).
pub async fn create_copy(
    client: &Client,
    ns: &str,
    name: &str,
    kind: &str,
    manager: &str,
    manager_ns: Option<&str>,
) -> Result {
    let mut pairs = vec![
        (label::MANAGED_BY, label::MANAGED_BY_VALUE.to_owned()),
        (label::MANAGER_KIND, kind.to_owned()),
        (label::MANAGER_NAME, manager.to_owned()),
    ];
    if let Some(home) = manager_ns {
        pairs.push((label::MANAGER_NAMESPACE, home.to_owned()));
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: labels(&pairs),
            ..ObjectMeta::default()
        },
        type_: Some(DOCKER_CONFIG_JSON.to_owned()),
        data: Some(docker_config("registry.example.com")),
        ..Secret::default()
    };
    created(
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await,
    )
}

/// Server-side applies cluster manager `j` (mode ServiceAccount).
pub async fn apply_cluster_manager(client: &Client, j: usize) -> Result {
    let selector = if j == 0 {
        json!({"matchLabels": {"tier": "apps"}})
    } else {
        json!({"matchLabels": {SLICE: format!("s{}", j - 1)}})
    };
    let manager: ClusterImagePullSecretManager = serde_json::from_value(json!({
        "apiVersion": "cheiron.anny.co/v1alpha1",
        "kind": "ClusterImagePullSecretManager",
        "metadata": {"name": cluster_manager_name(j)},
        "spec": {
            "namespaceSelector": selector,
            "secrets": [{"name": cluster_secret(j), "existingSecretRef": {"name": format!("src-{j}"), "namespace": SOURCES}}],
        },
    }))?;
    Api::<ClusterImagePullSecretManager>::all(client.clone())
        .patch(
            &cluster_manager_name(j),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&manager),
        )
        .await?;
    Ok(())
}

/// Server-side applies namespaced manager `k` in namespace `k` of the measured set, with an
/// inline entry (mode Pod: the webhook's decision reads it for Pods only).
pub async fn apply_namespaced_manager(client: &Client, k: usize) -> Result {
    let ns = namespace(k);
    let manager: ImagePullSecretManager = serde_json::from_value(json!({
        "apiVersion": "cheiron.anny.co/v1alpha1",
        "kind": "ImagePullSecretManager",
        "metadata": {"name": format!("own-{k}"), "namespace": ns},
        "spec": {
            "secrets": [{"name": format!("own-{k}-pull"), "registry": format!("r{k}.example.com"), "username": "u", "password": "p"}],
        },
    }))?;
    Api::<ImagePullSecretManager>::namespaced(client.clone(), &ns)
        .patch(
            &format!("own-{k}"),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&manager),
        )
        .await?;
    Ok(())
}

/// How many objects a metadata list finds.
pub async fn count<K>(client: &Client, params: &ListParams) -> Result<usize>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let api: Api<PartialObjectMeta<K>> = Api::all(client.clone());
    let mut total = 0;
    let mut params = params.clone().limit(5_000);
    loop {
        let page = api.list_metadata(&params).await?;
        total += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(total),
        }
    }
}
