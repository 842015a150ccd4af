//! The policy the AdmissionReview fixtures of [`crate::review`] are judged against: four
//! managers of both kinds and modes, seven namespaces, served as a [`Source`] whose readiness
//! the test controls. The webhook tests, in process and over TLS, start from it.

use std::sync::atomic::{AtomicBool, Ordering};

use cheiron::{
    admin::Readiness,
    api::{ClusterImagePullSecretManager, ImagePullSecretManager},
    policy::{Manager, NamespaceMeta, StaticView, View},
    source::Source,
};

/// The inline password of two managers below: it must never reach a log line.
pub const INLINE_PASSWORD: &str = "hunter2-inline-pw-7f3a9c";

/// Pod mode, `team-a` only. The oldest manager.
pub const TEAM_A_PODS: &str = r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: team-a-pods
  namespace: team-a
  creationTimestamp: "2024-01-01T00:00:00Z"
spec:
  mode: Pod
  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: hunter2-inline-pw-7f3a9c
"#;

/// ServiceAccount mode, `team-a` only.
const TEAM_A_SERVICE_ACCOUNTS: &str = r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: team-a-service-accounts
  namespace: team-a
  creationTimestamp: "2024-01-02T00:00:00Z"
spec:
  secrets:
    - existingSecretRef: {name: team-a-registry}
"#;

/// ServiceAccount mode, every `team-*` namespace but `team-scratch`.
const REGISTRY_MIRROR: &str = r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: registry-mirror
  creationTimestamp: "2024-02-01T00:00:00Z"
spec:
  mode: ServiceAccount
  namespaces: ["team-*"]
  excludeNamespaces: ["team-scratch"]
  secrets:
    - name: ghcr
      registry: ghcr.io
      username: bob
      passwordSecretRef: {name: ghcr-token, key: token, namespace: cheiron}
    - existingSecretRef: {name: gitlab-registry, namespace: cheiron}
"#;

/// Pod mode, namespaces labelled `registry=private`, Pods labelled `pulls=private`, merged.
pub const PRIVATE_PODS: &str = r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: private-pods
  creationTimestamp: "2024-03-01T00:00:00Z"
spec:
  mode: Pod
  namespaceSelector:
    matchLabels: {registry: private}
  podSelector:
    matchLabels: {pulls: private}
  mergeInto: cluster-pull-secret
  secrets:
    - name: quay
      registry: quay.io
      username: carol
      password: hunter2-inline-pw-7f3a9c
    - existingSecretRef: {name: harbor, namespace: cheiron}
"#;

/// The opt-out label and annotation, on namespaces and objects.
pub const IGNORE: &str = "cheiron.anny.co/ignore";

/// A source of the managers and namespaces above whose readiness the test controls.
pub struct TestSource {
    view: StaticView,
    /// What [`Readiness::is_ready`] answers; true from the start.
    pub ready: AtomicBool,
}

impl TestSource {
    /// Ready, with every manager and namespace above. A manager that does not parse is a bug
    /// of this module, which this reports by panicking.
    pub fn new() -> Self {
        Self {
            view: view(),
            ready: AtomicBool::new(true),
        }
    }
}

impl Default for TestSource {
    fn default() -> Self {
        Self::new()
    }
}

impl Source for TestSource {
    fn view(&self) -> &dyn View {
        &self.view
    }
}

impl Readiness for TestSource {
    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

// The constants above are known to parse; a failure here is a bug of this module.
#[allow(clippy::unwrap_used)]
fn managers() -> Vec<Manager> {
    let namespaced = |yaml: &str| {
        let manager: ImagePullSecretManager = serde_saphyr::from_str(yaml).unwrap();
        Manager::from_namespaced(&manager).unwrap()
    };
    let cluster = |yaml: &str| {
        let manager: ClusterImagePullSecretManager = serde_saphyr::from_str(yaml).unwrap();
        Manager::from_cluster(&manager).unwrap()
    };
    vec![
        cluster(PRIVATE_PODS),
        cluster(REGISTRY_MIRROR),
        namespaced(TEAM_A_SERVICE_ACCOUNTS),
        namespaced(TEAM_A_PODS),
    ]
}

fn namespace(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> NamespaceMeta {
    let map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    NamespaceMeta {
        name: name.to_owned(),
        labels: map(labels),
        annotations: map(annotations),
    }
}

fn view() -> StaticView {
    StaticView::new(
        managers(),
        [
            namespace("team-a", &[], &[]),
            namespace("team-b", &[], &[]),
            namespace("team-m", &[("registry", "private")], &[]),
            namespace("team-quiet", &[(IGNORE, "true")], &[]),
            namespace("team-hushed", &[], &[(IGNORE, "true")]),
            namespace("team-scratch", &[], &[]),
            namespace("elsewhere", &[], &[]),
        ],
    )
}
