//! Watching the kubelets' pull failures (docs/credential-health.md, "Pull failures"): the
//! `Failed` Events on Pods, read by field selector, classified ([`super::classify()`]), checked
//! against the Pod itself, and attributed ([`super::attribute()`]) to the manager whose credential
//! the registry refused. The manager's status then lists it, and the manager gets one Warning
//! Event per registry per window, not one per Pod.
//!
//! ```text
//!   core/v1 Events (involvedObject.kind=Pod, reason=Failed) ──► classify: a refusal?
//!     └─► the Pod (by name): the same uid, a container of that image waiting on its pull?
//!           └─► its imagePullSecrets' metadata: cheiron's (labels name the manager)?
//!                 └─► attribute ──► Checks::pull_refused ──► status, Event, metric
//! ```
//!
//! An Event is anyone's to write who may create Events in the namespace, so none is believed
//! on its own: the Pod must exist with the Event's uid, hold a container of the refused image,
//! and be waiting on its pull (`ErrImagePull`/`ImagePullBackOff`), which only its kubelet
//! writes. Each (Pod, image) is attributed once per [`REATTRIBUTE_AFTER`]; Events older than
//! [`MAX_EVENT_AGE`] (an old history listed at start) are skipped.

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::Duration,
};

use cheiron_controller::ManagerStores;
use cheiron_core::{
    api::{ManagerStatus, PullFailure, label},
    policy::{ManagerId, ManagerKind},
};
use cheiron_runtime::{metrics::Metrics, runtime::events::EventPublisher};
use futures::StreamExt;
use k8s_openapi::{
    api::core::v1::{Event as CoreEvent, ObjectReference, Pod, Secret},
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::ListParams,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        events::{Event, EventType},
        watcher,
    },
};
use tokio::time::Instant;

use super::{
    Attribution, ManagedSecret, attribute,
    classify::{self, Failure},
};
use crate::checks::Checks;

/// The kubelet Events read: pull failures on Pods.
pub const EVENT_FIELDS: &str = "involvedObject.kind=Pod,reason=Failed";
/// Events older than this (by their last timestamp) are history, not news.
pub const MAX_EVENT_AGE: Duration = Duration::from_secs(600);
/// A (Pod, image) attributed once is attributed again only after this.
pub const REATTRIBUTE_AFTER: Duration = Duration::from_secs(300);
/// (Pod, image) pairs remembered for [`REATTRIBUTE_AFTER`].
pub const MAX_REMEMBERED: usize = 10_000;
/// Pull secrets of one Pod looked up.
pub const MAX_PULL_SECRETS: usize = 16;
/// How often, and how many times, a Pod is read again when its status does not show the
/// refused pull yet (the kubelet writes the Event and the status apart).
const POD_STATUS_RETRY: Duration = Duration::from_secs(1);
const POD_STATUS_TRIES: u32 = 3;

/// Watches the kubelets' pull failures until aborted.
pub async fn watch(
    client: Client,
    checks: Checks,
    managers: ManagerStores,
    recorder: Arc<EventPublisher>,
    metrics: Arc<Metrics>,
) {
    let events = watcher(
        Api::<CoreEvent>::all(client.clone()),
        watcher::Config::default().fields(EVENT_FIELDS),
    )
    .default_backoff()
    .applied_objects()
    .boxed();
    let mut events = events.fuse();
    let mut seen = Seen::default();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tracing::debug!(error = %e, "Pod Event watch (pull failures)");
                continue;
            }
        };
        let Some(pull) = news(&event) else {
            continue;
        };
        if !seen.first(&pull) {
            continue;
        }
        let attribution = match refused_pull(&client, &managers, &pull).await {
            Ok(attribution) => attribution,
            Err(e) => {
                tracing::debug!(error = %cheiron_runtime::message::api_error(&e), namespace = %pull.namespace, pod = %pull.pod, "cannot attribute a pull failure");
                continue;
            }
        };
        let Some(Attribution::Rejected { credentials }) = attribution else {
            continue;
        };
        for credential in credentials {
            tracing::info!(
                manager = %credential.manager,
                namespace = %pull.namespace,
                pod = %pull.pod,
                image = %pull.failure.image,
                secret = %credential.secret,
                registry = %credential.registry_key,
                "a registry refused a pull with a manager's credential"
            );
            metrics
                .health
                .pull_failures
                .get_or_create(&cheiron_runtime::metrics::PullFailureLabels {
                    manager_kind: credential.manager.kind.as_str(),
                    registry: credential.registry_key.clone(),
                })
                .inc();
            let warn = checks.pull_refused(
                &credential.manager,
                PullFailure {
                    namespace: pull.namespace.clone(),
                    pod: pull.pod.clone(),
                    image: pull.failure.image.clone(),
                    secret: credential.secret.clone(),
                    registry: credential.registry_key.clone(),
                    since: pull.since.clone(),
                },
            );
            if warn {
                let event = Event {
                    type_: EventType::Warning,
                    reason: "PullRejected".to_owned(),
                    note: Some(format!(
                        "{} refused a pull of {} by Pod {}/{} with Secret {}: the registry rejects the credential; rotate the manager's source (status.pullFailures lists the latest)",
                        credential.registry_key,
                        pull.failure.image,
                        pull.namespace,
                        pull.pod,
                        credential.secret
                    )),
                    action: "AttributePullFailure".to_owned(),
                    secondary: None,
                };
                if let Some((reference, _)) = manager_object(&managers, &credential.manager)
                    && let Err(e) = recorder.publish(&event, &reference).await
                {
                    tracing::debug!(error = %e, "could not publish an Event");
                }
            }
        }
    }
}

/// A refused pull an Event reports.
#[derive(Clone, Debug)]
struct Pull {
    namespace: String,
    pod: String,
    uid: String,
    failure: Failure,
    since: Time,
}

/// The refused pull `event` reports, when it is one and recent.
fn news(event: &CoreEvent) -> Option<Pull> {
    let object = &event.involved_object;
    if object.kind.as_deref() != Some("Pod") || event.reason.as_deref() != Some("Failed") {
        return None;
    }
    let last = event
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    let age = Timestamp::now().duration_since(last);
    if age.as_secs() > i64::try_from(MAX_EVENT_AGE.as_secs()).unwrap_or(i64::MAX) {
        return None;
    }
    let failure = classify::classify(event.message.as_deref()?)?;
    let since = event.first_timestamp.clone().unwrap_or(Time(last));
    Some(Pull {
        namespace: object.namespace.clone()?,
        pod: object.name.clone()?,
        uid: object.uid.clone()?,
        failure,
        since,
    })
}

/// (Pod uid, image) pairs attributed lately, bounded.
#[derive(Default)]
struct Seen {
    at: HashMap<(String, String), Instant>,
    order: VecDeque<(String, String)>,
}

impl Seen {
    /// True when `pull` was not attributed within [`REATTRIBUTE_AFTER`]; remembers it.
    fn first(&mut self, pull: &Pull) -> bool {
        let now = Instant::now();
        let key = (pull.uid.clone(), pull.failure.image.clone());
        if self
            .at
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < REATTRIBUTE_AFTER)
        {
            return false;
        }
        if self.at.insert(key.clone(), now).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > MAX_REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.at.remove(&old);
            }
        }
        true
    }
}

/// Reads the Pod and its pull secrets and attributes the refusal; `None` when the Pod does
/// not confirm the Event.
async fn refused_pull(
    client: &Client,
    managers: &ManagerStores,
    pull: &Pull,
) -> Result<Option<Attribution>, kube::Error> {
    let pods = Api::<Pod>::namespaced(client.clone(), &pull.namespace);
    let mut tries = 0;
    let pod = loop {
        let listed = pods
            .list(&ListParams::default().fields(&format!("metadata.name={}", pull.pod)))
            .await?;
        let pod = listed
            .items
            .into_iter()
            .find(|p| p.metadata.uid.as_deref() == Some(pull.uid.as_str()));
        let Some(pod) = pod else {
            return Ok(None);
        };
        if waiting_on_pull(&pod, &pull.failure.image) {
            break pod;
        }
        tries += 1;
        if tries >= POD_STATUS_TRIES {
            return Ok(None);
        }
        tokio::time::sleep(POD_STATUS_RETRY).await;
    };
    let names: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| !r.name.is_empty())
        .map(|r| r.name.clone())
        .take(MAX_PULL_SECRETS)
        .collect();
    let secrets = Api::<Secret>::namespaced(client.clone(), &pull.namespace);
    let mut managed = Vec::new();
    for name in &names {
        let Some(meta) = secrets.get_metadata_opt(name).await? else {
            continue;
        };
        let Some(manager) = manager_of(&meta) else {
            continue;
        };
        managed.push(ManagedSecret {
            registries: registries_of(managers, &manager, name),
            name: name.clone(),
            manager,
        });
    }
    Ok(attribute(&pull.failure.image, &names, &managed))
}

/// True when a container of `pod` with `image` waits on its pull.
fn waiting_on_pull(pod: &Pod, image: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let names: Vec<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter(|c| c.image.as_deref() == Some(image))
        .map(|c| c.name.as_str())
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .filter(|c| c.image.as_deref() == Some(image))
                .map(|c| c.name.as_str()),
        )
        .collect();
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .chain(status.ephemeral_container_statuses.iter().flatten())
        .filter(|s| names.contains(&s.name.as_str()))
        .filter_map(|s| s.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
        .any(|reason| reason == "ErrImagePull" || reason == "ImagePullBackOff")
}

/// The manager a Secret's labels name, when cheiron manages it.
fn manager_of(meta: &PartialObjectMeta<Secret>) -> Option<ManagerId> {
    let labels = meta.labels();
    if labels.get(label::MANAGED_BY).map(String::as_str) != Some(label::MANAGED_BY_VALUE) {
        return None;
    }
    let name = labels.get(label::MANAGER_NAME)?.clone();
    match labels.get(label::MANAGER_KIND).map(String::as_str) {
        Some("ClusterImagePullSecretManager") => Some(ManagerId {
            kind: ManagerKind::Cluster,
            namespace: None,
            name,
        }),
        Some("ImagePullSecretManager") => Some(ManagerId {
            kind: ManagerKind::Namespaced,
            namespace: Some(labels.get(label::MANAGER_NAMESPACE)?.clone()),
            name,
        }),
        _ => None,
    }
}

/// The manager `id` in the caches: a reference to it (for Events) and its status.
fn manager_object(
    managers: &ManagerStores,
    id: &ManagerId,
) -> Option<(ObjectReference, Option<ManagerStatus>)> {
    match id.kind {
        ManagerKind::Cluster => managers
            .cluster
            .state()
            .into_iter()
            .find(|m| m.name_any() == id.name)
            .map(|m| (m.object_ref(&()), m.status.clone())),
        ManagerKind::Namespaced => managers
            .namespaced
            .state()
            .into_iter()
            .find(|m| m.name_any() == id.name && m.namespace() == id.namespace)
            .map(|m| (m.object_ref(&()), m.status.clone())),
    }
}

/// The registry keys the manager's status lists for its Secret `name`.
fn registries_of(managers: &ManagerStores, id: &ManagerId, name: &str) -> Vec<String> {
    manager_object(managers, id)
        .and_then(|(_, status)| status)
        .into_iter()
        .flat_map(|s| s.pull_secrets)
        .find(|p| p.name == name)
        .map(|p| p.registries)
        .unwrap_or_default()
}
