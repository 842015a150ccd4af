//! A controller test's view of the cluster: the e2e [`Scenario`] (its client, its uniquely
//! named namespaces) plus a hold on the shared controller, and helpers that read what the
//! controller stored: copies, manager status, Events, ServiceAccounts.

use std::{collections::BTreeMap, future::Future, ops::Deref, time::Duration};

use cheiron::api::{ClusterImagePullSecretManager, ImagePullSecretManager, ManagerStatus};
use k8s_openapi::{
    api::{
        core::v1::{LocalObjectReference, Namespace, Secret, ServiceAccount},
        events::v1::Event,
    },
    apimachinery::pkg::apis::meta::v1::Condition,
};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    CHEIRON,
    harness::{
        Admitted, Result, SETTLE, Scenario,
        controller::{
            CheironProcess, SharedController, WithoutSharedController, shared_controller,
            without_shared_controller,
        },
        wait_for,
    },
};

/// Label selecting a test's target namespaces; its value is the scenario id. Cluster managers
/// select on it so that they never reach another test's namespaces.
pub const TARGET_LABEL: &str = "e2e.cheiron.anny.co/target";

enum Hold {
    Shared(SharedController),
    Exclusive(#[allow(dead_code)] WithoutSharedController),
}

/// A [`Scenario`] with the shared controller running (or, for tests starting their own
/// controllers, with no shared controller at all) until it is dropped.
pub struct ControllerScenario {
    scenario: Scenario,
    hold: Hold,
}

impl Deref for ControllerScenario {
    type Target = Scenario;

    fn deref(&self) -> &Scenario {
        &self.scenario
    }
}

/// A manager as the tests refer to it: which kind, where, what name.
#[derive(Clone, Debug)]
pub struct ManagerRef {
    /// `ImagePullSecretManager` or `ClusterImagePullSecretManager`.
    pub kind: String,
    /// The namespace of a namespaced manager.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl std::fmt::Display for ManagerRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

impl ManagerRef {
    /// The reference of a manager as returned by `apply_manager`.
    pub fn of(manager: &DynamicObject) -> Self {
        Self {
            kind: manager
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default(),
            namespace: manager.namespace(),
            name: manager.name_any(),
        }
    }
}

/// The `Ready` condition of a status.
pub fn ready(status: &ManagerStatus) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

/// `status/reason: message` of the `Ready` condition, for messages.
pub fn describe_ready(status: &ManagerStatus) -> String {
    match ready(status) {
        Some(c) => format!("{}/{}: {}", c.status, c.reason, c.message),
        None => "no Ready condition".to_owned(),
    }
}

/// A check that a ServiceAccount's `imagePullSecrets` are exactly `expected`, in order.
pub fn has_pull_secrets(expected: &[&str]) -> impl Fn(&ServiceAccount) -> Result<()> + use<> {
    let expected: Vec<String> = expected.iter().map(|n| (*n).to_owned()).collect();
    move |sa| {
        let names = sa.pull_secret_names();
        if names == expected {
            Ok(())
        } else {
            Err(format!("imagePullSecrets {names:?}, expected {expected:?}").into())
        }
    }
}

impl ControllerScenario {
    /// A scenario with the shared controller running (started if needed).
    pub async fn new(name: &str) -> Result<Self> {
        let scenario = Scenario::new(CHEIRON, name).await?;
        let hold = Hold::Shared(shared_controller().await?);
        Ok(Self { scenario, hold })
    }

    /// A scenario in which no shared controller runs: this waits until no test holds it, stops
    /// it, and the next test asking for it restarts it. The test starts its own controllers
    /// (declared after the scenario, so they are stopped before it lets go).
    pub async fn without_shared_controller(name: &str) -> Result<Self> {
        let scenario = Scenario::new(CHEIRON, name).await?;
        let hold = Hold::Exclusive(without_shared_controller().await?);
        Ok(Self { scenario, hold })
    }

    /// The shared controller (an error in a scenario without one).
    pub fn controller(&self) -> Result<&CheironProcess> {
        match &self.hold {
            Hold::Shared(c) => Ok(c),
            Hold::Exclusive(_) => Err("this scenario runs without the shared controller".into()),
        }
    }

    /// [`wait_for`] with [`SETTLE`], adding the tail of the shared controller's log to a
    /// timeout (and failing at once if it died).
    pub async fn eventually<T, F, Fut>(&self, what: impl std::fmt::Display, check: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.eventually_within(what, SETTLE, check).await
    }

    /// [`Self::eventually`] with another timeout.
    pub async fn eventually_within<T, F, Fut>(
        &self,
        what: impl std::fmt::Display,
        timeout: Duration,
        check: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        match wait_for(what, timeout, check).await {
            Ok(value) => Ok(value),
            Err(e) => match &self.hold {
                Hold::Shared(controller) => {
                    controller.check_running()?;
                    Err(format!("{e}\n{}", controller.log_excerpt(30)).into())
                }
                Hold::Exclusive(_) => Err(e),
            },
        }
    }

    /// Creates a namespace selected by this test's cluster managers ([`TARGET_LABEL`]).
    pub async fn create_target_namespace(
        &self,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Result<String> {
        let mut all = vec![(TARGET_LABEL, self.id())];
        all.extend_from_slice(labels);
        self.create_namespace(&all, annotations).await
    }

    /// A ClusterImagePullSecretManager named `<id>-<name>` selecting this test's target
    /// namespaces, with `spec` (YAML lines under `spec:`, indented two spaces) after the
    /// selector.
    pub fn cluster_manager(&self, name: &str, spec: &str) -> String {
        format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: {}
spec:
  namespaceSelector:
    matchLabels:
      {TARGET_LABEL}: {}
{spec}",
            self.unique_name(name),
            self.id()
        )
    }

    /// Applies a manager written as YAML and returns its reference.
    pub async fn apply(&self, yaml: &str) -> Result<ManagerRef> {
        Ok(ManagerRef::of(&self.apply_manager(yaml).await?))
    }

    fn manager_api(&self, manager: &ManagerRef) -> Api<DynamicObject> {
        let client = self.client().clone();
        match &manager.namespace {
            Some(ns) => Api::namespaced_with(
                client,
                ns,
                &ApiResource::erase::<ImagePullSecretManager>(&()),
            ),
            None => Api::all_with(
                client,
                &ApiResource::erase::<ClusterImagePullSecretManager>(&()),
            ),
        }
    }

    /// The manager as stored, `None` once it is gone.
    pub async fn manager(&self, manager: &ManagerRef) -> Result<Option<DynamicObject>> {
        Ok(self.manager_api(manager).get_opt(&manager.name).await?)
    }

    /// The stored manager and its status (empty when it has none).
    pub async fn manager_status(
        &self,
        manager: &ManagerRef,
    ) -> Result<(DynamicObject, ManagerStatus)> {
        let object = self
            .manager(manager)
            .await?
            .ok_or_else(|| format!("{manager} does not exist"))?;
        let status = match object.data.get("status") {
            Some(s) => serde_json::from_value(s.clone())?,
            None => ManagerStatus::default(),
        };
        Ok((object, status))
    }

    /// Waits until the manager's status describes its current generation with `Ready` reason
    /// `reason`, and returns it.
    pub async fn until_ready_reason(
        &self,
        manager: &ManagerRef,
        reason: &str,
    ) -> Result<ManagerStatus> {
        self.until_status(manager, format!("Ready reason {reason}"), |status| {
            ready(status).is_some_and(|c| c.reason == reason)
        })
        .await
    }

    /// Waits until the manager's status describes its current generation and satisfies
    /// `check`, and returns it.
    pub async fn until_status(
        &self,
        manager: &ManagerRef,
        what: impl std::fmt::Display,
        check: impl Fn(&ManagerStatus) -> bool,
    ) -> Result<ManagerStatus> {
        let check = &check;
        self.eventually(format!("{manager}: {what}"), || async move {
            let (object, status) = self.manager_status(manager).await?;
            let generation = object.metadata.generation;
            if status.observed_generation != generation {
                return Err(format!(
                    "observedGeneration {:?}, generation {generation:?}",
                    status.observed_generation
                )
                .into());
            }
            if check(&status) {
                Ok(status)
            } else {
                Err(format!(
                    "status {} (namespaces {:?}, failures {:?})",
                    describe_ready(&status),
                    status.namespaces,
                    status.failures
                )
                .into())
            }
        })
        .await
    }

    /// The Events whose `regarding` is the stored manager (by uid).
    pub async fn events_about_manager(&self, manager: &ManagerRef) -> Result<Vec<Event>> {
        let object = self
            .manager(manager)
            .await?
            .ok_or_else(|| format!("{manager} does not exist"))?;
        // The recorder puts Events about cluster-scoped objects in `default`.
        let namespace = manager.namespace.as_deref().unwrap_or("default");
        self.events_regarding(namespace, object.uid().as_deref())
            .await
    }

    /// The Events in `namespace` whose `regarding.uid` is `uid`.
    pub async fn events_regarding(&self, namespace: &str, uid: Option<&str>) -> Result<Vec<Event>> {
        let events: Api<Event> = Api::namespaced(self.client().clone(), namespace);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| uid.is_some() && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == uid)
            .collect())
    }

    /// Waits until an Event with `reason` regards the manager, and returns it.
    pub async fn until_event_about_manager(
        &self,
        manager: &ManagerRef,
        reason: &str,
    ) -> Result<Event> {
        let (object, _) = self.manager_status(manager).await?;
        let namespace = manager.namespace.as_deref().unwrap_or("default");
        self.until_event(namespace, object.uid().as_deref(), reason, manager)
            .await
    }

    /// Waits until an Event with `reason` regards the object `uid` (`what`, for messages) in
    /// `namespace`, and returns it.
    pub async fn until_event(
        &self,
        namespace: &str,
        uid: Option<&str>,
        reason: &str,
        what: impl std::fmt::Display,
    ) -> Result<Event> {
        self.eventually(format!("an Event {reason} about {what}"), || async {
            let events = self.events_regarding(namespace, uid).await?;
            let reasons: Vec<Option<String>> = events.iter().map(|e| e.reason.clone()).collect();
            events
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
                .ok_or_else(|| format!("Events with reasons {reasons:?}").into())
        })
        .await
    }

    fn secrets(&self, ns: &str) -> Api<Secret> {
        Api::namespaced(self.client().clone(), ns)
    }

    /// Creates a Secret in `ns` and returns it as stored.
    pub async fn create_secret(&self, ns: &str, secret: &Secret) -> Result<Secret> {
        let name = secret.name_any();
        Ok(self
            .secrets(ns)
            .create(&PostParams::default(), secret)
            .await
            .map_err(|e| format!("cannot create Secret {ns}/{name}: {e}"))?)
    }

    /// Replaces the data of Secret `ns/name` with that of `like` (type unchanged).
    pub async fn replace_secret_data(&self, ns: &str, name: &str, like: &Secret) -> Result<Secret> {
        let api = self.secrets(ns);
        let mut current = api.get(name).await?;
        current.data = like.data.clone();
        Ok(api.replace(name, &PostParams::default(), &current).await?)
    }

    /// Deletes Secret `ns/name`.
    pub async fn delete_secret(&self, ns: &str, name: &str) -> Result<()> {
        self.secrets(ns)
            .delete(name, &DeleteParams::default())
            .await?;
        Ok(())
    }

    /// Secret `ns/name`, `None` if it does not exist.
    pub async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>> {
        Ok(self.secrets(ns).get_opt(name).await?)
    }

    /// Waits until Secret `ns/name` exists and passes `check`, and returns it.
    pub async fn until_secret(
        &self,
        ns: &str,
        name: &str,
        check: impl Fn(&Secret) -> Result<()>,
    ) -> Result<Secret> {
        let check = &check;
        self.eventually(format!("Secret {ns}/{name}"), || async move {
            let secret = self.secret(ns, name).await?.ok_or("it does not exist")?;
            check(&secret)?;
            Ok(secret)
        })
        .await
    }

    /// Waits until Secret `ns/name` is gone.
    pub async fn until_no_secret(&self, ns: &str, name: &str) -> Result<()> {
        self.eventually(format!("Secret {ns}/{name} to be deleted"), || async {
            match self.secret(ns, name).await? {
                None => Ok(()),
                Some(s) => Err(format!("still there, labels {:?}", s.labels()).into()),
            }
        })
        .await
    }

    /// Every Secret in the cluster labelled as written for `manager`.
    pub async fn copies_of(&self, manager: &ManagerRef) -> Result<Vec<Secret>> {
        let mut selector = format!(
            "app.kubernetes.io/managed-by=cheiron,cheiron.anny.co/manager-kind={},cheiron.anny.co/manager-name={}",
            manager.kind, manager.name
        );
        if let Some(ns) = &manager.namespace {
            selector.push_str(&format!(",cheiron.anny.co/manager-namespace={ns}"));
        }
        let all: Api<Secret> = Api::all(self.client().clone());
        Ok(all
            .list(&ListParams::default().labels(&selector))
            .await?
            .items)
    }

    fn service_accounts(&self, ns: &str) -> Api<ServiceAccount> {
        Api::namespaced(self.client().clone(), ns)
    }

    /// ServiceAccount `ns/name` as stored.
    pub async fn service_account(&self, ns: &str, name: &str) -> Result<ServiceAccount> {
        Ok(self.service_accounts(ns).get(name).await?)
    }

    /// Waits until ServiceAccount `ns/name` passes `check`, and returns it.
    pub async fn until_service_account(
        &self,
        ns: &str,
        name: &str,
        check: impl Fn(&ServiceAccount) -> Result<()>,
    ) -> Result<ServiceAccount> {
        let check = &check;
        self.eventually(format!("ServiceAccount {ns}/{name}"), || async move {
            let sa = self.service_account(ns, name).await?;
            check(&sa)?;
            Ok(sa)
        })
        .await
    }

    /// Another writer (not cheiron) appends `entry` to the ServiceAccount's imagePullSecrets,
    /// with the resourceVersion as precondition (retried on conflict).
    pub async fn append_pull_secret(
        &self,
        ns: &str,
        name: &str,
        entry: &str,
    ) -> Result<ServiceAccount> {
        let api = self.service_accounts(ns);
        self.eventually(
            format!("appending {entry} to ServiceAccount {ns}/{name}"),
            || async {
                let mut sa = api.get(name).await?;
                sa.image_pull_secrets
                    .get_or_insert_with(Vec::new)
                    .push(LocalObjectReference {
                        name: entry.to_owned(),
                    });
                sa.metadata.managed_fields = None;
                let params = PatchParams {
                    field_manager: Some("another-writer".to_owned()),
                    ..PatchParams::default()
                };
                let patch = json!({
                    "metadata": {"resourceVersion": sa.metadata.resource_version},
                    "imagePullSecrets": sa.image_pull_secrets,
                });
                Ok(api.patch(name, &params, &Patch::Merge(&patch)).await?)
            },
        )
        .await
    }

    /// Sets (`Some`) or removes (`None`) labels of namespace `ns`.
    pub async fn label_namespace(&self, ns: &str, labels: &[(&str, Option<&str>)]) -> Result<()> {
        let labels: BTreeMap<&str, Option<&str>> = labels.iter().copied().collect();
        Api::<Namespace>::all(self.client().clone())
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"labels": labels}})),
            )
            .await?;
        Ok(())
    }
}
