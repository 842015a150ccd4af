//! The domain view of a manager: its scope, its selectors and the Secret names it injects,
//! compiled once from the API object so that admission does no parsing.

use std::{collections::BTreeSet, fmt, sync::Arc};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::{
    ResourceExt,
    core::{ParseExpressionError, Selector, SelectorExt},
};

use super::{
    namespace::NamespaceMeta,
    registries,
    registries::{Image, Registries, RegistryList},
    scope::{NamespaceSelector, Scope},
    subject::{Subject, SubjectKind},
};
use crate::api::{
    ClusterImagePullSecretManager, ImagePullSecretManager, Injection, InvalidGlob, ManagerStatus,
    Mode, NamespaceGlob, PullSecretEntry,
};

/// Which of the two kinds a manager is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ManagerKind {
    /// `ImagePullSecretManager`.
    Namespaced,
    /// `ClusterImagePullSecretManager`.
    Cluster,
}

impl ManagerKind {
    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            ManagerKind::Namespaced => "ImagePullSecretManager",
            ManagerKind::Cluster => "ClusterImagePullSecretManager",
        }
    }
}

/// Identifies a manager across both kinds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ManagerId {
    /// Namespaced or cluster.
    pub kind: ManagerKind,
    /// The namespace of a namespaced manager.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl fmt::Display for ManagerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind.as_str(), ns, self.name),
            None => write!(f, "{} {}", self.kind.as_str(), self.name),
        }
    }
}

/// A manager object that cannot be compiled (the CRD schema normally prevents all of these).
#[derive(Debug, thiserror::Error)]
pub enum InvalidManager {
    /// A label selector with an unknown operator or missing values.
    #[error("{manager}: {field}: {source}")]
    Selector {
        /// The manager.
        manager: ManagerId,
        /// The field holding the selector.
        field: &'static str,
        /// What is wrong.
        source: ParseExpressionError,
    },
    /// A namespace glob outside the grammar.
    #[error("{manager}: {source}")]
    Glob {
        /// The manager.
        manager: ManagerId,
        /// What is wrong.
        source: InvalidGlob,
    },
    /// An entry with neither `name` nor `existingSecretRef`.
    #[error("{manager}: secrets[{index}] has neither name nor existingSecretRef")]
    UnnamedEntry {
        /// The manager.
        manager: ManagerId,
        /// Index in `spec.secrets`.
        index: usize,
    },
    /// A namespaced manager without a namespace.
    #[error("ImagePullSecretManager {0} has no namespace")]
    NoNamespace(String),
}

/// A manager, compiled for fast admission decisions.
#[derive(Clone, Debug)]
pub struct Manager {
    /// Which manager this is.
    pub id: ManagerId,
    /// `metadata.creationTimestamp`; the older manager wins a contested Secret name.
    pub created: Option<Time>,
    /// Pod or ServiceAccount.
    pub mode: Mode,
    /// The namespaces it acts on.
    pub scope: Scope,
    /// Which of its Secrets a Pod gets. `MatchingImages` outside mode Pod (the CRD refuses
    /// it, but may predate that rule) is compiled as `All`: a ServiceAccount has no images.
    pub injection: Injection,
    secret_names: Vec<String>,
    /// The registries of each Secret of `secret_names`, in the same order; empty unless
    /// `injection` is `MatchingImages`.
    registries: Vec<Registries>,
    service_account_names: Option<BTreeSet<String>>,
    service_account_selector: Option<Selector>,
    pod_selector: Option<Selector>,
    /// `(namespace, name)` of the Secrets it injects that are their own source (an
    /// `existingSecretRef` injected under its own name in its own namespace): the user's
    /// Secret, not one cheiron writes.
    in_place: Vec<(String, String)>,
    /// Its status has a `Ready` condition that is not `True`.
    not_ready: bool,
}

/// The fields both kinds share.
struct Common<'a> {
    mode: Mode,
    injection: Injection,
    status: Option<&'a ManagerStatus>,
    secrets: &'a [PullSecretEntry],
    merge_into: Option<&'a str>,
    service_account_names: Option<&'a Vec<String>>,
    service_account_selector: Option<&'a LabelSelector>,
    pod_selector: Option<&'a LabelSelector>,
}

impl Manager {
    /// Compiles an `ImagePullSecretManager`.
    pub fn from_namespaced(m: &ImagePullSecretManager) -> Result<Self, InvalidManager> {
        let namespace = m
            .namespace()
            .ok_or_else(|| InvalidManager::NoNamespace(m.name_any()))?;
        let id = ManagerId {
            kind: ManagerKind::Namespaced,
            namespace: Some(namespace.clone()),
            name: m.name_any(),
        };
        let spec = &m.spec;
        Self::compile(
            id,
            m.metadata.creation_timestamp.clone(),
            Scope::Namespace(namespace),
            Common {
                mode: spec.mode,
                injection: spec.injection,
                status: m.status.as_ref(),
                secrets: &spec.secrets,
                merge_into: spec.merge_into.as_deref(),
                service_account_names: spec.service_account_names.as_ref(),
                service_account_selector: spec.service_account_selector.as_ref(),
                pod_selector: spec.pod_selector.as_ref(),
            },
        )
    }

    /// Compiles a `ClusterImagePullSecretManager` as it acts in the cluster it lives in: in
    /// no namespace at all when `spec.clusters.includeLocal` is false.
    pub fn from_cluster(m: &ClusterImagePullSecretManager) -> Result<Self, InvalidManager> {
        let local = m.spec.clusters.as_ref().is_none_or(|c| c.include_local);
        Self::from_cluster_in(m, local)
    }

    /// Compiles a `ClusterImagePullSecretManager` as it acts in the workload clusters that
    /// `spec.clusters.selector` selects (docs/fleet.md): its scope whatever `includeLocal` says.
    pub fn from_cluster_for_workloads(
        m: &ClusterImagePullSecretManager,
    ) -> Result<Self, InvalidManager> {
        Self::from_cluster_in(m, true)
    }

    /// Compiles a `ClusterImagePullSecretManager` with its scope (`in_scope`) or acting in no
    /// namespace at all (what it is in a workload cluster it does not select).
    pub fn from_cluster_in(
        m: &ClusterImagePullSecretManager,
        in_scope: bool,
    ) -> Result<Self, InvalidManager> {
        let id = ManagerId {
            kind: ManagerKind::Cluster,
            namespace: None,
            name: m.name_any(),
        };
        let spec = &m.spec;
        let globs = |list: &Option<Vec<String>>| -> Result<Vec<NamespaceGlob>, InvalidManager> {
            list.iter()
                .flatten()
                .map(|g| {
                    NamespaceGlob::parse(g).map_err(|source| InvalidManager::Glob {
                        manager: id.clone(),
                        source,
                    })
                })
                .collect()
        };
        selector(
            &id,
            "clusters.selector",
            spec.clusters.as_ref().and_then(|c| c.selector.as_ref()),
        )?;
        let mut exclude = globs(&spec.exclude_namespaces)?;
        if !in_scope {
            // `includeLocal: false`: every namespace is excluded here.
            exclude.push(
                NamespaceGlob::parse("*").map_err(|source| InvalidManager::Glob {
                    manager: id.clone(),
                    source,
                })?,
            );
        }
        let scope = Scope::Cluster {
            selector: selector(&id, "namespaceSelector", spec.namespace_selector.as_ref())?
                .map(NamespaceSelector::from),
            include: globs(&spec.namespaces)?,
            exclude,
        };
        Self::compile(
            id,
            m.metadata.creation_timestamp.clone(),
            scope,
            Common {
                mode: spec.mode,
                injection: spec.injection,
                status: m.status.as_ref(),
                secrets: &spec.secrets,
                merge_into: spec.merge_into.as_deref(),
                service_account_names: spec.service_account_names.as_ref(),
                service_account_selector: spec.service_account_selector.as_ref(),
                pod_selector: spec.pod_selector.as_ref(),
            },
        )
    }

    fn compile(
        id: ManagerId,
        created: Option<Time>,
        scope: Scope,
        common: Common<'_>,
    ) -> Result<Self, InvalidManager> {
        let not_ready = common.status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status != "True")
        });
        let in_place = if common.merge_into.is_some() {
            Vec::new()
        } else {
            common
                .secrets
                .iter()
                .filter_map(|entry| {
                    let source = entry.existing_secret_ref.as_ref()?;
                    let namespace = source.namespace.as_ref().or(id.namespace.as_ref())?;
                    (entry.target_name() == Some(source.name.as_str()))
                        .then(|| (namespace.clone(), source.name.clone()))
                })
                .collect()
        };
        let secret_names = match common.merge_into {
            Some(merged) => vec![merged.to_owned()],
            None => {
                let mut names: Vec<String> = Vec::with_capacity(common.secrets.len());
                for (index, entry) in common.secrets.iter().enumerate() {
                    let name = entry
                        .target_name()
                        .ok_or_else(|| InvalidManager::UnnamedEntry {
                            manager: id.clone(),
                            index,
                        })?;
                    if !names.iter().any(|n| n == name) {
                        names.push(name.to_owned());
                    }
                }
                names
            }
        };
        let injection = match common.mode {
            Mode::Pod => common.injection,
            Mode::ServiceAccount | Mode::Node => Injection::All,
        };
        let registries = match injection {
            Injection::All => Vec::new(),
            Injection::MatchingImages => registries::of_secrets(
                &secret_names,
                common.secrets,
                common.merge_into,
                common.status,
            ),
        };
        Ok(Self {
            service_account_selector: selector(
                &id,
                "serviceAccountSelector",
                common.service_account_selector,
            )?,
            pod_selector: selector(&id, "podSelector", common.pod_selector)?,
            service_account_names: common
                .service_account_names
                .map(|names| names.iter().cloned().collect()),
            id,
            created,
            mode: common.mode,
            scope,
            injection,
            secret_names,
            registries,
            in_place,
            not_ready,
        })
    }

    /// True when the manager's status has a `Ready` condition that is not `True` (a source is
    /// missing, a name conflicts, writes failed…): some target namespace may lack its Secrets.
    /// False without a status (a manager not reconciled yet, or read from a file).
    pub fn is_not_ready(&self) -> bool {
        self.not_ready
    }

    /// True when the Secret `name` this manager injects into `namespace` is its own source
    /// there (the user's Secret, which cheiron never writes), so cheiron's Secret cache cannot
    /// tell whether it exists.
    pub fn sources_in_place(&self, namespace: &str, name: &str) -> bool {
        self.in_place
            .iter()
            .any(|(ns, n)| ns == namespace && n == name)
    }

    /// The Secret names this manager injects (one per entry, or the `mergeInto` name).
    pub fn secret_names(&self) -> &[String] {
        &self.secret_names
    }

    /// The Secrets this manager wants a Pod pulling `images` to reference: all of them, or
    /// with `injection: MatchingImages`, those holding a registry the kubelet would use for
    /// one of the images (or whose registries are not known).
    pub fn secrets_for<'a>(&'a self, images: &'a [Image]) -> impl Iterator<Item = &'a String> + 'a {
        let matching = self.injection == Injection::MatchingImages;
        self.secret_names
            .iter()
            .enumerate()
            .filter(move |(i, _)| {
                !matching || self.registries.get(*i).is_none_or(|r| r.serve_any(images))
            })
            .map(|(_, name)| name)
    }

    /// The registries of each Secret, in the order of [`Manager::secret_names`]; empty unless
    /// `injection` is `MatchingImages`.
    pub fn registries(&self) -> &[Registries] {
        &self.registries
    }

    /// Shares equal registry lists with other managers: `intern` returns the list to keep.
    pub(super) fn intern_registries(
        &mut self,
        mut intern: impl FnMut(Arc<RegistryList>) -> Arc<RegistryList>,
    ) {
        for registries in &mut self.registries {
            if let Registries::Known(list) = registries {
                *list = intern(list.clone());
            }
        }
    }

    /// True when this manager wants `subject` in `namespace` to reference its Secrets:
    /// the mode fits the kind, the namespace is in scope, and the object's selectors match.
    /// Opt-out annotations are checked by [`super::decide`].
    pub fn applies_to(&self, subject: &Subject<'_>, namespace: &NamespaceMeta) -> bool {
        if self.mode != subject.kind.mode() || !self.scope.contains(namespace) {
            return false;
        }
        match subject.kind {
            SubjectKind::Pod => self
                .pod_selector
                .as_ref()
                .is_none_or(|s| s.matches(subject.labels)),
            SubjectKind::ServiceAccount => {
                self.service_account_names
                    .as_ref()
                    .is_none_or(|names| names.contains(subject.name))
                    && self
                        .service_account_selector
                        .as_ref()
                        .is_none_or(|s| s.matches(subject.labels))
            }
        }
    }

    /// `podSelector`, compiled.
    pub fn pod_selector(&self) -> Option<&Selector> {
        self.pod_selector.as_ref()
    }

    /// `serviceAccountNames`.
    pub fn service_account_names(&self) -> Option<&BTreeSet<String>> {
        self.service_account_names.as_ref()
    }

    /// `serviceAccountSelector`, compiled.
    pub fn service_account_selector(&self) -> Option<&Selector> {
        self.service_account_selector.as_ref()
    }

    /// True when the manager selects every ServiceAccount of the namespaces it acts on: no
    /// `serviceAccountNames`, and no `serviceAccountSelector` narrower than everything.
    pub fn selects_every_service_account(&self) -> bool {
        self.service_account_names.is_none()
            && self
                .service_account_selector
                .as_ref()
                .is_none_or(Selector::selects_all)
    }

    /// Orders managers oldest first (ties broken by kind, namespace and name), the order in
    /// which they claim Secret names.
    pub fn seniority(&self) -> (Option<&Time>, &ManagerId) {
        (self.created.as_ref(), &self.id)
    }
}

/// The managers that act, compiled and oldest first: those not being deleted (a manager
/// being deleted injects nothing and claims nothing: its finalizer is removing what it added,
/// and acting for it again would undo that). Managers that do not compile (the CRD schema
/// should have rejected them) are returned apart for the caller to report.
pub fn live_managers<'a>(
    namespaced: impl IntoIterator<Item = &'a ImagePullSecretManager>,
    cluster: impl IntoIterator<Item = &'a ClusterImagePullSecretManager>,
) -> (Vec<Manager>, Vec<InvalidManager>) {
    let namespaced = namespaced
        .into_iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .map(Manager::from_namespaced);
    let cluster = cluster
        .into_iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .map(Manager::from_cluster);
    let (mut live, mut invalid) = (Vec::new(), Vec::new());
    for compiled in namespaced.chain(cluster) {
        match compiled {
            Ok(m) => live.push(m),
            Err(e) => invalid.push(e),
        }
    }
    live.sort_by(|a, b| a.seniority().cmp(&b.seniority()));
    (live, invalid)
}

fn selector(
    manager: &ManagerId,
    field: &'static str,
    selector: Option<&LabelSelector>,
) -> Result<Option<Selector>, InvalidManager> {
    selector
        .cloned()
        .map(Selector::try_from)
        .transpose()
        .map_err(|source| InvalidManager::Selector {
            manager: manager.clone(),
            field,
            source,
        })
}
