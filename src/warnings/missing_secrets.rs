//! Warning Events on Pods whose pull secrets are still missing after a grace period, so that
//! `kubectl describe pod` explains an `ImagePullBackOff`.
//!
//! The webhook labels a Pod [`label::MISSING_SECRETS`] when it appended a pull secret that did
//! not exist in the namespace at admission, and lists the names in the annotation of the same
//! key (`crates/cheiron-core/src/admission/patch.rs`). The controller's leader watches the metadata of those Pods only (a
//! label selector: the cost follows the Pods affected, not all Pods), and once a Pod is
//! [`DEFAULT_GRACE`] old (`--missing-secret-grace`) reads the metadata of each listed Secret.
//! When one is still missing it publishes one Warning Event, reason [`REASON`], regarding the
//! Pod. Each Pod is checked once (by uid); a deleted Pod is forgotten, and at most
//! [`MAX_TRACKED_PODS`] are remembered. Secrets are read as metadata only: no Secret data is
//! ever read, and the Event names Secrets, never their content.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret};
use kube::{
    Api, Client, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        events::{Event, EventType},
        watcher,
    },
};

use crate::{
    api::{annotation, label},
    runtime::events::EventPublisher,
};

/// How long after a Pod's creation its missing Secrets are checked, unless
/// `--missing-secret-grace` says otherwise: long enough for the controller to materialise a
/// Secret a new manager or namespace wants.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);
/// Most labelled Pods remembered at once; more are not checked (and a warning is logged once)
/// until some are deleted.
pub const MAX_TRACKED_PODS: usize = 10_000;
/// Most Secret names read from one Pod's annotation; the rest are ignored.
pub const MAX_NAMES_PER_POD: usize = 16;
/// Longest Event note, in bytes (the Events API allows 1 KiB).
const MAX_NOTE: usize = 1024;
/// `reason` of the Event.
pub const REASON: &str = "PullSecretMissing";
/// How often due Pods are looked for.
const TICK: Duration = Duration::from_secs(1);
/// How long a check that failed to read a Secret waits before it is tried again.
const RETRY_AFTER: i64 = 5;

/// One labelled Pod waiting for its check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// The Pod's namespace.
    pub namespace: String,
    /// The Pod's name.
    pub name: String,
    /// The Pod's uid.
    pub uid: String,
    /// The Secret names of its annotation.
    pub secrets: Vec<String>,
}

#[derive(Debug)]
enum State {
    /// Checked at this Unix second.
    Waiting(i64, Check),
    /// Checked (an Event published or every Secret found): never again.
    Done,
}

/// The labelled Pods the controller knows of, by uid: pure, fed by the watch and the clock.
#[derive(Debug)]
pub struct Tracker {
    grace: i64,
    max: usize,
    pods: HashMap<String, State>,
    /// The uids of a relist in progress; the others are dropped at its end.
    relisting: Option<HashSet<String>>,
    full_logged: bool,
}

impl Tracker {
    /// A tracker checking Pods `grace` after their creation, remembering at most `max`.
    pub fn new(grace: Duration, max: usize) -> Self {
        Self {
            grace: i64::try_from(grace.as_secs()).unwrap_or(i64::MAX),
            max,
            pods: HashMap::new(),
            relisting: None,
            full_logged: false,
        }
    }

    /// Pods remembered (waiting or done).
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// True when no Pod is remembered.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Applies one watch event; `now` is the Unix second.
    pub fn apply(&mut self, event: watcher::Event<PartialObjectMeta<Pod>>, now: i64) {
        match event {
            watcher::Event::Init => self.relisting = Some(HashSet::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(uid) = pod.uid() {
                    self.relisting
                        .get_or_insert_with(HashSet::new)
                        .insert(uid.clone());
                }
                self.remember(&pod, now);
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.relisting.take() {
                    self.pods.retain(|uid, _| listed.contains(uid));
                }
            }
            watcher::Event::Apply(pod) => self.remember(&pod, now),
            watcher::Event::Delete(pod) => {
                if let Some(uid) = pod.uid() {
                    self.pods.remove(&uid);
                }
            }
        }
    }

    fn remember(&mut self, pod: &PartialObjectMeta<Pod>, now: i64) {
        let Some(uid) = pod.uid() else { return };
        if self.pods.contains_key(&uid) {
            return;
        }
        if self.pods.len() >= self.max {
            if !self.full_logged {
                self.full_logged = true;
                tracing::warn!(
                    max = self.max,
                    "too many Pods with missing pull secrets to remember; new ones are not checked until some are deleted"
                );
            }
            return;
        }
        let secrets = secret_names(
            pod.annotations()
                .get(annotation::MISSING_SECRETS)
                .map_or("", String::as_str),
        );
        let (Some(namespace), false) = (pod.namespace(), secrets.is_empty()) else {
            // Labelled without names (by hand): nothing to check.
            self.pods.insert(uid, State::Done);
            return;
        };
        let created = pod
            .creation_timestamp()
            .map_or(now, |t| t.0.as_second())
            .min(now);
        let due = created.saturating_add(self.grace);
        let check = Check {
            namespace,
            name: pod.name_any(),
            uid: uid.clone(),
            secrets,
        };
        self.pods.insert(uid, State::Waiting(due, check));
    }

    /// The Pods due at `now`, oldest due first.
    pub fn due(&self, now: i64) -> Vec<Check> {
        let mut due: Vec<(i64, &Check)> = self
            .pods
            .values()
            .filter_map(|s| match s {
                State::Waiting(at, check) if *at <= now => Some((*at, check)),
                _ => None,
            })
            .collect();
        due.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.uid.cmp(&b.1.uid)));
        due.into_iter().map(|(_, c)| c.clone()).collect()
    }

    /// The Pod `uid` was checked: it is never due again (unless deleted and created anew,
    /// which gives it another uid).
    pub fn done(&mut self, uid: &str) {
        if let Some(state) = self.pods.get_mut(uid) {
            *state = State::Done;
        }
    }

    /// The check of `uid` could not be made: try again at `at`.
    pub fn retry_at(&mut self, uid: &str, at: i64) {
        if let Some(State::Waiting(due, _)) = self.pods.get_mut(uid) {
            *due = at;
        }
    }
}

/// The names of a [`annotation::MISSING_SECRETS`] value: comma-separated, trimmed, without
/// empty names or duplicates, only valid Secret names (DNS-1123 subdomains), at most
/// [`MAX_NAMES_PER_POD`].
pub fn secret_names(value: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for name in value.split(',').map(str::trim) {
        if names.len() >= MAX_NAMES_PER_POD {
            break;
        }
        if is_subdomain(name) && !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    names
}

fn is_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// The Event about a Pod whose `missing` Secrets are still missing `grace` after its creation.
pub fn event(check: &Check, missing: &[String], grace: Duration) -> Event {
    let names = missing.join(", ");
    let (noun, verb) = if missing.len() == 1 {
        ("pull secret", "does")
    } else {
        ("pull secrets", "do")
    };
    let mut note = format!(
        "{noun} {names} {verb} not exist in namespace {} {}s after the Pod was created; cheiron \
         referenced it at admission, so image pulls that need it fail. See the status of the \
         managers that inject it (kubectl get imagepullsecretmanagers,clusterimagepullsecretmanagers -A) \
         or run: cheiron explain pod {} -n {}",
        check.namespace,
        grace.as_secs(),
        check.name,
        check.namespace,
    );
    crate::message::truncate(&mut note, MAX_NOTE);
    Event {
        type_: EventType::Warning,
        reason: REASON.to_owned(),
        note: Some(note),
        action: "CheckPullSecrets".to_owned(),
        secondary: None,
    }
}

fn pod_reference(check: &Check) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        namespace: Some(check.namespace.clone()),
        name: Some(check.name.clone()),
        uid: Some(check.uid.clone()),
        ..ObjectReference::default()
    }
}

fn unix_now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

/// Watches the labelled Pods and publishes the Events through `recorder`, until aborted with
/// the controller.
pub async fn watch(client: Client, recorder: Arc<EventPublisher>, grace: Duration) {
    let pods = watcher(
        Api::<PartialObjectMeta<Pod>>::all(client.clone()),
        watcher::Config::default().labels(&label::missing_secrets_selector()),
    )
    .default_backoff()
    .boxed();
    let mut pods = pods.fuse();
    let mut tracker = Tracker::new(grace, MAX_TRACKED_PODS);
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            event = pods.next() => match event {
                Some(Ok(event)) => tracker.apply(event, unix_now()),
                Some(Err(e)) => tracing::debug!(error = %e, "Pod watch (missing pull secrets)"),
                None => return,
            },
            _ = ticks.tick() => {
                for check in tracker.due(unix_now()) {
                    match still_missing(&client, &check).await {
                        Ok(missing) => {
                            if !missing.is_empty() {
                                tracing::info!(
                                    namespace = %check.namespace,
                                    pod = %check.name,
                                    secrets = %missing.join(","),
                                    "pull secrets still missing after the grace period"
                                );
                                let event = event(&check, &missing, grace);
                                if let Err(e) = recorder.publish(&event, &pod_reference(&check)).await {
                                    tracing::debug!(error = %e, "could not publish an Event");
                                }
                            }
                            tracker.done(&check.uid);
                        }
                        Err(e) => {
                            tracing::debug!(error = %crate::message::api_error(&e), namespace = %check.namespace, pod = %check.name, "cannot check pull secrets");
                            tracker.retry_at(&check.uid, unix_now() + RETRY_AFTER);
                        }
                    }
                }
            }
        }
    }
}

/// The names of `check` with no Secret in its namespace, read as metadata.
async fn still_missing(client: &Client, check: &Check) -> Result<Vec<String>, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &check.namespace);
    let mut missing = Vec::new();
    for name in &check.secrets {
        if secrets.get_metadata_opt(name).await?.is_none() {
            missing.push(name.clone());
        }
    }
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;

    fn pod(uid: &str, created: i64, names: Option<&str>) -> PartialObjectMeta<Pod> {
        let mut annotations = serde_json::Map::new();
        if let Some(names) = names {
            annotations.insert(annotation::MISSING_SECRETS.to_owned(), json!(names));
        }
        let mut pod: PartialObjectMeta<Pod> = serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": format!("pod-{uid}"), "namespace": "team", "uid": uid,
                         "labels": {label::MISSING_SECRETS: "true"},
                         "annotations": annotations},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        pod.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created).unwrap_or_default(),
        ));
        pod
    }

    #[test]
    fn a_pod_is_due_once_its_grace_has_passed_and_only_once() {
        let mut t = Tracker::new(Duration::from_secs(60), 10);
        t.apply(watcher::Event::Apply(pod("a", 1000, Some("x,y"))), 1001);
        assert!(t.due(1059).is_empty(), "not before the grace");
        let due = t.due(1060);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].secrets, ["x", "y"]);
        assert_eq!(
            (due[0].namespace.as_str(), due[0].name.as_str()),
            ("team", "pod-a")
        );
        t.done("a");
        assert!(t.due(5000).is_empty(), "checked once");
        // The watch sends the Pod again (a status change): it stays checked.
        t.apply(watcher::Event::Apply(pod("a", 1000, Some("x,y"))), 2000);
        assert!(t.due(5000).is_empty());
    }

    #[test]
    fn the_grace_counts_from_creation_so_a_restarted_controller_checks_old_pods_at_once() {
        let mut t = Tracker::new(Duration::from_secs(60), 10);
        t.apply(watcher::Event::InitApply(pod("old", 100, Some("x"))), 1000);
        assert_eq!(t.due(1000).len(), 1);
    }

    #[test]
    fn deleted_pods_and_pods_gone_at_a_relist_are_forgotten() {
        let mut t = Tracker::new(Duration::from_secs(1), 10);
        t.apply(watcher::Event::Apply(pod("a", 0, Some("x"))), 0);
        t.apply(watcher::Event::Apply(pod("b", 0, Some("x"))), 0);
        t.done("b");
        t.apply(watcher::Event::Delete(pod("a", 0, Some("x"))), 0);
        assert_eq!(t.len(), 1);
        // A relist that no longer lists b drops it, checked or not.
        t.apply(watcher::Event::Init, 5);
        t.apply(watcher::Event::InitApply(pod("c", 0, Some("x"))), 5);
        t.apply(watcher::Event::InitDone, 5);
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.due(5).iter().map(|c| c.uid.as_str()).collect::<Vec<_>>(),
            ["c"]
        );
    }

    #[test]
    fn at_most_max_pods_are_remembered() {
        let mut t = Tracker::new(Duration::ZERO, 2);
        for uid in ["a", "b", "c"] {
            t.apply(watcher::Event::Apply(pod(uid, 0, Some("x"))), 0);
        }
        assert_eq!(t.len(), 2);
        t.apply(watcher::Event::Delete(pod("a", 0, Some("x"))), 0);
        t.apply(watcher::Event::Apply(pod("c", 0, Some("x"))), 0);
        assert_eq!(t.len(), 2, "room again after a deletion");
    }

    #[test]
    fn a_failed_check_is_retried_later() {
        let mut t = Tracker::new(Duration::ZERO, 2);
        t.apply(watcher::Event::Apply(pod("a", 0, Some("x"))), 0);
        t.retry_at("a", 5);
        assert!(t.due(4).is_empty());
        assert_eq!(t.due(5).len(), 1);
    }

    #[test]
    fn labelled_pods_without_valid_names_are_never_due() {
        let mut t = Tracker::new(Duration::ZERO, 10);
        t.apply(watcher::Event::Apply(pod("a", 0, None)), 0);
        t.apply(
            watcher::Event::Apply(pod("b", 0, Some(" , ,Bad_Name,../x"))),
            0,
        );
        assert!(t.due(100).is_empty());
    }

    #[test]
    fn names_are_trimmed_deduplicated_validated_and_bounded() {
        assert_eq!(secret_names(" a , b,a,,c.d "), ["a", "b", "c.d"]);
        assert!(secret_names("UPPER,-x,x-,a..b,a/b").is_empty());
        let many: Vec<String> = (0..40).map(|i| format!("s{i}")).collect();
        assert_eq!(secret_names(&many.join(",")).len(), MAX_NAMES_PER_POD);
    }

    #[test]
    fn the_event_is_a_warning_about_the_pod_naming_only_the_missing_secrets() {
        let check = Check {
            namespace: "team".into(),
            name: "web".into(),
            uid: "u".into(),
            secrets: vec!["a".into(), "b".into()],
        };
        let e = event(&check, &["b".to_owned()], Duration::from_secs(60));
        assert_eq!(e.type_, EventType::Warning);
        assert_eq!(e.reason, REASON);
        let note = e.note.unwrap_or_default();
        assert!(
            note.starts_with("pull secret b does not exist in namespace team 60s"),
            "{note}"
        );
        assert!(note.len() <= MAX_NOTE + '…'.len_utf8());
        let reference = pod_reference(&check);
        assert_eq!(reference.kind.as_deref(), Some("Pod"));
        assert_eq!(reference.uid.as_deref(), Some("u"));
        let long: Vec<String> = (0..16)
            .map(|i| format!("{i}-{}", "x".repeat(200)))
            .collect();
        let note = event(&check, &long, Duration::from_secs(1))
            .note
            .unwrap_or_default();
        assert!(note.len() <= MAX_NOTE + '…'.len_utf8(), "{}", note.len());
    }
}
