//! The bare client: the writes cheiron makes to converge, made by a plain kube client with the
//! controller's concurrency, to compare against.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use cheiron_harness::watches::MetadataWatches;
use futures::{StreamExt, TryStreamExt, future, stream};
use k8s_openapi::{
    api::core::v1::{Secret, ServiceAccount},
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    core::ObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef},
        watcher,
    },
};
use serde_json::{Value, json};

use cheiron_harness::Result;

use crate::objects::{self, Shape, index_of, namespace};

/// Managers reconciled at once by the controller (its `--concurrency`-like default for one
/// kind), and by the bare client.
pub const MANAGERS_AT_ONCE: usize = 4;
/// Writes in flight within one manager's reconcile, and within one of the bare client's jobs.
pub const WRITES_IN_FLIGHT: usize = 16;
/// ServiceAccount patch attempts (the controller's `PATCH_ATTEMPTS`).
pub const PATCH_ATTEMPTS: usize = 5;
/// Marks the ServiceAccounts the bare client patched, and what it gave them.
const BARE_ANNOTATION: &str = "bench.cheiron.anny.co/bare";
const BARE_WITH_ANNOTATION: &str = "bench.cheiron.anny.co/bare-with";

/// The `app.kubernetes.io/managed-by` value of the bare client's Secrets shaped like cheiron's:
/// not cheiron's, so that neither cheiron's controller nor its webhook watches them.
const SHAPED_BY: &str = "bench-shaped";

/// What the bare client's Secrets look like.
pub enum Copies {
    /// One label, the benchmark's: the least a client could write.
    Plain,
    /// What cheiron writes for manager `j`: its three labels (with another `managed-by`
    /// value), a 64-hex annotation like its content hash and a controller ownerReference (to
    /// `owner`), under `watches` metadata watches of them, as many as watch cheiron's copies.
    Shaped {
        owner: OwnerReference,
        watches: usize,
    },
}

impl Copies {
    /// The Secret manager `j` wants in each namespace, written by the bare client.
    fn secret(&self, j: usize, name: &str) -> Secret {
        let mut metadata = ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                BARE_ANNOTATION.to_owned(),
                "true".to_owned(),
            )])),
            ..ObjectMeta::default()
        };
        if let Self::Shaped { owner, .. } = self {
            metadata.labels = Some(BTreeMap::from([
                (BARE_ANNOTATION.to_owned(), "true".to_owned()),
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    SHAPED_BY.to_owned(),
                ),
                (
                    "cheiron.anny.co/manager-kind".to_owned(),
                    "ClusterImagePullSecretManager".to_owned(),
                ),
                (
                    "cheiron.anny.co/manager-name".to_owned(),
                    objects::cluster_manager_name(j),
                ),
            ]));
            metadata.annotations = Some(BTreeMap::from([(
                "cheiron.anny.co/content-sha256".to_owned(),
                format!("{j:064x}"),
            )]));
            metadata.owner_references = Some(vec![owner.clone()]);
        }
        Secret {
            metadata,
            type_: Some("kubernetes.io/dockerconfigjson".to_owned()),
            data: Some(objects::docker_config(&format!("bare-{j}.example.com"))),
            ..Secret::default()
        }
    }

    /// Opens the metadata watches of the shaped Secrets, each past its initial list.
    async fn watch(&self, client: &Client) -> Result<Option<MetadataWatches>> {
        let Self::Shaped { watches, .. } = self else {
            return Ok(None);
        };
        let selector = format!("app.kubernetes.io/managed-by={SHAPED_BY}");
        Ok(Some(
            MetadataWatches::open(client, &selector, *watches).await?,
        ))
    }
}

/// The JSON Patch adding `name` to `sa` as cheiron's would (a `test` of the resourceVersion,
/// the entry, two annotations), or `None` when `sa` has it.
fn bare_patch(sa: &ServiceAccount, name: &str) -> Option<json_patch::Patch> {
    let list = sa.image_pull_secrets.as_deref().unwrap_or_default();
    if list.iter().any(|r| r.name == name) {
        return None;
    }
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": sa.metadata.resource_version}),
    ];
    if sa.image_pull_secrets.is_some() {
        ops.push(json!({"op": "add", "path": "/imagePullSecrets/-", "value": {"name": name}}));
    } else {
        ops.push(json!({"op": "add", "path": "/imagePullSecrets", "value": [{"name": name}]}));
    }
    let previous = sa
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BARE_WITH_ANNOTATION))
        .cloned();
    let with = match previous {
        Some(p) if !p.is_empty() => format!("{p},{name}"),
        _ => name.to_owned(),
    };
    let escape = |k: &str| k.replace('~', "~0").replace('/', "~1");
    if sa.metadata.annotations.is_some() {
        ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", escape(BARE_ANNOTATION)), "value": "true"}));
        ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", escape(BARE_WITH_ANNOTATION)), "value": with}));
    } else {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {BARE_ANNOTATION: "true", BARE_WITH_ANNOTATION: with}}));
    }
    serde_json::from_value(Value::Array(ops)).ok()
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Patches `sa` like the controller does: from the cached state, again from a fresh read
/// when another writer got there first (counted in `conflicts`).
async fn bare_patch_service_account(
    client: &Client,
    sa: ServiceAccount,
    name: &str,
    conflicts: &AtomicUsize,
) -> Result {
    let ns = sa.namespace().unwrap_or_default();
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let mut current = sa;
    for _ in 0..PATCH_ATTEMPTS {
        let Some(patch) = bare_patch(&current, name) else {
            return Ok(());
        };
        let params = PatchParams {
            field_manager: Some(objects::FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match api
            .patch(&current.name_any(), &params, &Patch::<()>::Json(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if matches!(status_code(&e), Some(409 | 422)) => {
                conflicts.fetch_add(1, Ordering::Relaxed);
                current = api.get(&current.name_any()).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(format!("ServiceAccount {ns}/{} kept changing", current.name_any()).into())
}

/// The writes cheiron makes to converge, made by a plain client: per manager, its Secrets
/// created in each of its namespaces, then every ServiceAccount there patched, [`MANAGERS_AT_ONCE`]
/// managers at a time with [`WRITES_IN_FLIGHT`] writes in flight each. Like the controller, it
/// computes each patch from a cache its own watch keeps current (so a patch starts from what
/// the other managers' writes left), synced before the clock starts. Timed from the first
/// write to the last answer. Returns the time, the number of writes and of patches that lost
/// a race and were made again.
pub async fn bare_client(
    client: &Client,
    n: usize,
    tag: &str,
    shape: Shape,
    copies: &Copies,
) -> Result<(Duration, usize, usize)> {
    let watches = copies.watch(client).await?;
    let (cache, writer) = reflector::store::<ServiceAccount>();
    let watch = tokio::spawn(
        watcher(
            Api::<ServiceAccount>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(writer)
        .for_each(|_| future::ready(())),
    );
    cache.wait_until_ready().await?;
    let mut by_namespace: HashMap<usize, Vec<String>> = HashMap::new();
    for sa in cache.state() {
        if let Some(i) = sa.namespace().as_deref().and_then(index_of) {
            by_namespace.entry(i).or_default().push(sa.name_any());
        }
    }
    let by_namespace = Arc::new(by_namespace);
    let conflicts = Arc::new(AtomicUsize::new(0));
    let writes = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    stream::iter(0..shape.managers)
        .map(|j| {
            let (by_namespace, writes) = (by_namespace.clone(), writes.clone());
            let (cache, conflicts) = (cache.clone(), conflicts.clone());
            async move {
                let name = format!("{tag}-{j}-pull");
                let targets = shape.namespaces_of_manager(j, n);
                stream::iter(targets.iter())
                    .map(|i| {
                        let name = name.clone();
                        async move {
                            let api: Api<Secret> = Api::namespaced(client.clone(), &namespace(*i));
                            let secret = copies.secret(j, &name);
                            let pp = PostParams {
                                field_manager: Some(objects::FIELD_MANAGER.to_owned()),
                                ..PostParams::default()
                            };
                            api.create(&pp, &secret).await.map(|_| ())
                        }
                    })
                    .buffer_unordered(WRITES_IN_FLIGHT)
                    .try_collect::<Vec<_>>()
                    .await?;
                writes.fetch_add(targets.len(), Ordering::Relaxed);
                let accounts: Vec<ObjectRef<ServiceAccount>> = targets
                    .iter()
                    .flat_map(|i| {
                        let ns = namespace(*i);
                        by_namespace
                            .get(i)
                            .into_iter()
                            .flatten()
                            .map(move |sa| ObjectRef::new(sa).within(&ns))
                    })
                    .collect();
                let count = accounts.len();
                stream::iter(accounts)
                    .filter_map(|r| future::ready(cache.get(&r)))
                    .map(|sa| bare_patch_service_account(client, (*sa).clone(), &name, &conflicts))
                    .buffer_unordered(WRITES_IN_FLIGHT)
                    .try_collect::<Vec<_>>()
                    .await?;
                writes.fetch_add(count, Ordering::Relaxed);
                if j.is_multiple_of(10) {
                    eprintln!(
                        "[scale]   bare client: manager {j}'s writes done after {:.1?}",
                        started.elapsed()
                    );
                }
                Ok::<_, cheiron_harness::Error>(())
            }
        })
        .buffer_unordered(MANAGERS_AT_ONCE)
        .try_collect::<Vec<_>>()
        .await?;
    let took = started.elapsed();
    watch.abort();
    drop(watches);
    Ok((
        took,
        writes.load(Ordering::Relaxed),
        conflicts.load(Ordering::Relaxed),
    ))
}
