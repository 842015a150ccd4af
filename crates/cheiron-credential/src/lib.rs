//! Credential sources: where the registry credentials a manager writes come from. Inline
//! entries and Secret references are resolved by the controller from the manager and the
//! Secrets it reads (`content::desired`); this room adds the third source, the kubelet's
//! credential-provider exec plugins (docs/credential-providers.md), behind one small
//! interface, [`CredentialProviders::lookup`] and [`CredentialProviders::retain`], which the
//! controller reaches through [`entries::resolve`] (a manager's provider entries, as docker
//! configs and statuses):
//!
//! ```text
//!   config (--credential-provider-config, kubelet format)   exec (one plugin run, bounded)
//!            │                                                  ▲ at most N at once
//!   lookup(manager, entry) ──► refresh: one task per (provider, image, ServiceAccount)
//!            ▲   (never waits)    calls the plugin at a fraction of the credential's life,
//!   controller reconcile          keeps the last good answer, backs off on failure, and
//!            └─────────────────── asks the managers that use it to reconcile (notify)
//! ```
//!
//! A credential is fetched once per key however many managers and namespaces use it; the
//! controller writes it everywhere. A lookup reads what the refresh task holds and never waits
//! for a plugin, so a hanging plugin cannot hold the reconcile workers that every tenant's
//! managers share; before the first answer it returns [`Lookup::Pending`], and the answer
//! triggers the managers' reconciles. A plugin's answer is never logged, evented or put in a
//! status: errors describe structure, never stdout, and never stderr (logged only).

pub mod config;
pub mod duration;
pub mod entries;
pub mod exec;
mod refresh;
mod token;

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

pub use config::{ConfigError, Provider, ProviderConfig};
pub use exec::{Auth, DEFAULT_MAX_PLUGIN_OUTPUT, DEFAULT_PLUGIN_TIMEOUT, ExecError, ExecLimits};

/// Most plugin calls (token minting included) running at once, over all providers and keys;
/// more wait their turn. Each is bounded by the plugin timeout.
pub const DEFAULT_MAX_CONCURRENT_PLUGINS: usize = 4;
pub use refresh::{
    FIRST_RETRY, MAX_RETRY, MIN_REFRESH, NO_CACHE_REFRESH, REFRESH_FRACTION, RefreshPolicy,
};

use cheiron_core::{
    policy::{ManagerId, ManagerKind},
    registry::ImageRef,
};
use cheiron_runtime::metrics::Metrics;

/// What a manager entry asks of the providers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The image whose registry credential is wanted.
    pub image: String,
    /// `credentialProvider.serviceAccountName`, for providers with `tokenAttributes`.
    pub service_account_name: Option<String>,
}

/// One shared credential: the plugin is called once per key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Provider name.
    pub provider: String,
    /// The image, as the manager names it.
    pub image: String,
    /// `(namespace, name)` of the ServiceAccount whose token the plugin gets.
    pub service_account: Option<(String, String)>,
}

/// A plugin's credential, as last fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// Registry credentials by pattern.
    pub auth: Vec<Auth>,
    /// When it stops being valid; `None` when the plugin said not to cache it (refreshed
    /// every [`NO_CACHE_REFRESH`]).
    pub expires_at: Option<SystemTime>,
}

impl Credential {
    /// True once `expires_at` has passed.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }
}

/// The answer to a lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A valid credential; `failing` says why the last refresh failed, if it did.
    Ready {
        /// Which provider.
        provider: String,
        /// The credential.
        credential: Credential,
        /// The last refresh failed (the credential is still valid).
        failing: Option<String>,
    },
    /// The plugin has not answered yet (its first call is queued or running); the manager is
    /// told when it does. Existing copies are kept.
    Pending {
        /// Which provider.
        provider: String,
        /// What is awaited.
        message: String,
    },
    /// No valid credential: the plugin failed, or its credential expired while it fails.
    /// Existing copies are kept.
    Failed {
        /// Which provider.
        provider: String,
        /// Why, never a plugin's output.
        message: String,
        /// When the last good credential expired, if there was one.
        expired_at: Option<SystemTime>,
    },
    /// The manager may not use this provider or entry; nothing is called.
    Refused {
        /// Why.
        message: String,
        /// Refused because a namespaced manager may not use the provider.
        namespace_not_allowed: bool,
    },
}

/// The exec credential providers of one controller, shared by all reconciles.
#[derive(Clone)]
pub struct CredentialProviders {
    inner: Arc<Inner>,
}

/// Called with each manager whose credential changed.
pub type Notify = Arc<dyn Fn(&ManagerId) + Send + Sync>;

struct Inner {
    config: ProviderConfig,
    bin_dir: PathBuf,
    limits: ExecLimits,
    policy: RefreshPolicy,
    /// The namespace of the ServiceAccounts cluster managers name.
    own_namespace: Option<String>,
    /// Permits for plugin calls: `max_concurrent` of them.
    running: Arc<tokio::sync::Semaphore>,
    client: Option<kube::Client>,
    metrics: Option<Arc<Metrics>>,
    notify: Mutex<Option<Notify>>,
    slots: Mutex<HashMap<Key, Arc<refresh::Slot>>>,
    wanted: Mutex<HashMap<ManagerId, Vec<Key>>>,
}

impl std::fmt::Debug for CredentialProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialProviders")
            .field("providers", &self.inner.config.providers.len())
            .finish()
    }
}

/// How a controller runs its providers.
#[derive(Clone, Debug)]
pub struct ProviderSettings {
    /// The providers (none: every provider entry is refused with a message saying how to
    /// configure them).
    pub config: ProviderConfig,
    /// Where the plugins are.
    pub bin_dir: PathBuf,
    /// Bounds of each run.
    pub limits: ExecLimits,
    /// When to refresh.
    pub policy: RefreshPolicy,
    /// The namespace of the ServiceAccounts cluster managers name (cheiron's own).
    pub own_namespace: Option<String>,
    /// Most plugin calls at once (at least one).
    pub max_concurrent: usize,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self {
            config: ProviderConfig::default(),
            bin_dir: PathBuf::new(),
            limits: ExecLimits::default(),
            policy: RefreshPolicy::default(),
            own_namespace: None,
            max_concurrent: DEFAULT_MAX_CONCURRENT_PLUGINS,
        }
    }
}

impl CredentialProviders {
    /// Providers from `settings`; `client` mints service-account tokens.
    pub fn new(
        settings: ProviderSettings,
        client: Option<kube::Client>,
        metrics: Option<Arc<Metrics>>,
    ) -> Self {
        let ProviderSettings {
            config,
            bin_dir,
            limits,
            policy,
            own_namespace,
            max_concurrent,
        } = settings;
        Self {
            inner: Arc::new(Inner {
                config,
                bin_dir,
                limits,
                policy,
                own_namespace,
                running: Arc::new(tokio::sync::Semaphore::new(max_concurrent.max(1))),
                client,
                metrics,
                notify: Mutex::new(None),
                slots: Mutex::default(),
                wanted: Mutex::default(),
            }),
        }
    }

    /// Sets who is told when a credential changes (the controller's reconcile trigger).
    pub fn on_change(&self, notify: Notify) {
        if let Ok(mut slot) = self.inner.notify.lock() {
            *slot = Some(notify);
        }
    }

    /// True when no provider is configured.
    pub fn is_empty(&self) -> bool {
        self.inner.config.providers.is_empty()
    }

    /// Resolves `wanted` for `manager` (in `manager_namespace` for a namespaced one): picks
    /// the provider, checks the manager may use it, and returns the shared credential as it is
    /// now. Never waits for a plugin: the first lookup of a key starts its refresh and returns
    /// [`Lookup::Pending`]; `manager` is told (through [`CredentialProviders::on_change`]) when
    /// the answer comes. Returns the key the manager now uses, to pass to
    /// [`CredentialProviders::retain`].
    pub fn lookup(&self, manager: &ManagerId, wanted: &Wanted) -> (Option<Key>, Lookup) {
        let refused = |message: String| {
            (
                None,
                Lookup::Refused {
                    message,
                    namespace_not_allowed: false,
                },
            )
        };
        if self.inner.config.providers.is_empty() {
            return refused(
                "no credential provider is configured: start the controller with \
                 --credential-provider-config and --credential-provider-bin-dir"
                    .to_owned(),
            );
        }
        let image = match ImageRef::parse(&wanted.image) {
            Ok(image) => image,
            Err(e) => {
                return refused(format!(
                    "image {:?} is not an image reference: {e}",
                    wanted.image
                ));
            }
        };
        let Some(provider) = self.inner.config.provider_for(&image) else {
            return refused(format!(
                "no credential provider's matchImages matches image {}",
                wanted.image
            ));
        };
        if manager.kind == ManagerKind::Namespaced {
            let namespace = manager.namespace.as_deref().unwrap_or_default();
            if !provider.allows_namespace(namespace) {
                let message = format!(
                    "credential provider {} is not allowed for namespaced managers in namespace \
                     {namespace}: its credential is cheiron's, not the namespace's; an \
                     administrator may list the namespace in the provider's allowedNamespaces",
                    provider.name
                );
                return (
                    None,
                    Lookup::Refused {
                        message,
                        namespace_not_allowed: true,
                    },
                );
            }
        }
        let service_account = match (&provider.token_attributes, &wanted.service_account_name) {
            (None, Some(_)) => {
                return refused(format!(
                    "credential provider {} takes no service-account token (no tokenAttributes); \
                     remove serviceAccountName",
                    provider.name
                ));
            }
            (Some(t), None) if t.require_service_account => {
                return refused(format!(
                    "credential provider {} requires a service-account token: set \
                     credentialProvider.serviceAccountName",
                    provider.name
                ));
            }
            (Some(_), Some(name)) => {
                let namespace = match manager.kind {
                    ManagerKind::Namespaced => manager.namespace.clone(),
                    ManagerKind::Cluster => self.inner.own_namespace.clone(),
                };
                let Some(namespace) = namespace else {
                    return refused(
                        "cheiron does not know its own namespace for the ServiceAccount: set \
                         --pod-namespace"
                            .to_owned(),
                    );
                };
                Some((namespace, name.clone()))
            }
            _ => None,
        };
        let key = Key {
            provider: provider.name.clone(),
            image: wanted.image.clone(),
            service_account,
        };
        let slot = self.slot(&key, provider, manager);
        (Some(key), slot.lookup(SystemTime::now()))
    }

    /// Forgets the keys `manager` no longer uses; a key nobody uses stops refreshing.
    pub fn retain(&self, manager: &ManagerId, keys: Vec<Key>) {
        let Ok(mut wanted) = self.inner.wanted.lock() else {
            return;
        };
        let old = if keys.is_empty() {
            wanted.remove(manager).unwrap_or_default()
        } else {
            wanted
                .insert(manager.clone(), keys.clone())
                .unwrap_or_default()
        };
        let dropped: Vec<Key> = old.into_iter().filter(|k| !keys.contains(k)).collect();
        let still_used = |k: &Key| wanted.values().any(|ks| ks.contains(k));
        let Ok(mut slots) = self.inner.slots.lock() else {
            return;
        };
        for key in dropped {
            if let Some(slot) = slots.get(&key) {
                slot.unsubscribe(manager);
                if !still_used(&key) {
                    slot.stop();
                    slots.remove(&key);
                }
            }
        }
        drop(slots);
        self.update_expiry_metric();
    }

    /// The slot of `key`, started if new, with `manager` subscribed.
    fn slot(&self, key: &Key, provider: &Provider, manager: &ManagerId) -> Arc<refresh::Slot> {
        let start = || refresh::Slot::start(self.clone(), key.clone(), provider.clone(), manager);
        let Ok(mut slots) = self.inner.slots.lock() else {
            // A poisoned lock: a slot of its own, not shared.
            return start();
        };
        let slot = slots.entry(key.clone()).or_insert_with(start).clone();
        slot.subscribe(manager);
        slot
    }

    fn notify(&self, managers: &[ManagerId]) {
        let notify = self.inner.notify.lock().ok().and_then(|n| n.clone());
        if let Some(notify) = notify {
            for m in managers {
                notify(m);
            }
        }
    }

    /// Sets `cheiron_credential_expiry_timestamp_seconds{provider}` to the soonest expiry of
    /// each provider's current credentials.
    fn update_expiry_metric(&self) {
        let Some(metrics) = &self.inner.metrics else {
            return;
        };
        let slots: Vec<Arc<refresh::Slot>> = match self.inner.slots.lock() {
            Ok(slots) => slots.values().cloned().collect(),
            Err(_) => return,
        };
        let mut soonest: BTreeMap<String, Option<SystemTime>> = self
            .inner
            .config
            .providers
            .iter()
            .map(|p| (p.name.clone(), None))
            .collect();
        for slot in slots {
            if let Some(expires) = slot.expires_at() {
                let entry = soonest.entry(slot.provider().to_owned()).or_default();
                *entry = Some(entry.map_or(expires, |e| e.min(expires)));
            }
        }
        for (provider, expires) in soonest {
            let seconds = expires
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            metrics.credentials.set_expiry(&provider, seconds);
        }
    }
}

/// `d` rounded to whole seconds, for messages.
fn seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_millis() >= 500)
}

#[cfg(test)]
mod tests;

/// Puts the shell script `text` at `path`, executable, for a test to run as a plugin. The
/// file is written by a `cp` child process, never opened for writing by this one: a child
/// another test thread forks at that moment would inherit the descriptor until its exec, and
/// running the script meanwhile fails with ETXTBSY ("Text file busy").
#[cfg(test)]
pub(crate) fn install_test_plugin(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let source = path.with_extension("source");
    std::fs::write(&source, text)?;
    let copied = std::process::Command::new("cp")
        .arg(&source)
        .arg(path)
        .status()?;
    if !copied.success() {
        return Err(std::io::Error::other(format!(
            "cp {source:?} {path:?}: {copied}"
        )));
    }
    let chmod = std::process::Command::new("chmod")
        .arg("0755")
        .arg(path)
        .status()?;
    if !chmod.success() {
        return Err(std::io::Error::other(format!("chmod {path:?}: {chmod}")));
    }
    Ok(())
}
