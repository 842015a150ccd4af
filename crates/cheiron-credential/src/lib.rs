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
mod lookup;
mod refresh;
mod token;

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{Arc, Mutex, Weak},
    time::SystemTime,
};

pub use config::{ConfigError, Provider, ProviderConfig};
pub use exec::{Auth, DEFAULT_MAX_PLUGIN_OUTPUT, DEFAULT_PLUGIN_TIMEOUT, ExecError, ExecLimits};
pub use lookup::{Credential, Key, Lookup, Wanted};

/// Most plugin calls (token minting included) running at once, over all providers and keys;
/// more wait their turn. Each is bounded by the plugin timeout.
pub const DEFAULT_MAX_CONCURRENT_PLUGINS: usize = 4;
use refresh::{Calls, Host};
pub use refresh::{
    FIRST_RETRY, MAX_RETRY, MIN_REFRESH, NO_CACHE_REFRESH, REFRESH_FRACTION, RefreshPolicy,
};

use cheiron_core::{
    policy::{ManagerId, ManagerKind},
    registry::ImageRef,
};
use cheiron_runtime::metrics::Metrics;

/// The exec credential providers of one controller, shared by all reconciles.
#[derive(Clone)]
pub struct CredentialProviders {
    inner: Arc<Inner>,
}

/// Called with each manager whose credential changed.
pub type Notify = Arc<dyn Fn(&ManagerId) + Send + Sync>;

struct Inner {
    config: ProviderConfig,
    /// The namespace of the ServiceAccounts cluster managers name.
    own_namespace: Option<String>,
    /// What the refresh tasks call plugins with.
    calls: Calls,
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
                own_namespace,
                calls: Calls {
                    bin_dir,
                    limits,
                    policy,
                    running: Arc::new(tokio::sync::Semaphore::new(max_concurrent.max(1))),
                    client,
                    metrics,
                },
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
        self.inner.expiry_changed();
    }

    /// The slot of `key`, started if new, with `manager` subscribed.
    fn slot(&self, key: &Key, provider: &Provider, manager: &ManagerId) -> Arc<refresh::Slot> {
        let start = || {
            let host: Weak<dyn Host> = Arc::downgrade(&self.inner) as Weak<Inner>;
            refresh::Slot::start(host, key.clone(), provider.clone(), manager)
        };
        let Ok(mut slots) = self.inner.slots.lock() else {
            // A poisoned lock: a slot of its own, not shared.
            return start();
        };
        let slot = slots.entry(key.clone()).or_insert_with(start).clone();
        slot.subscribe(manager);
        slot
    }
}

impl Host for Inner {
    fn calls(&self) -> &Calls {
        &self.calls
    }

    fn notify(&self, managers: &[ManagerId]) {
        let notify = self.notify.lock().ok().and_then(|n| n.clone());
        if let Some(notify) = notify {
            for m in managers {
                notify(m);
            }
        }
    }

    /// Sets `cheiron_credential_expiry_timestamp_seconds{provider}` to the soonest expiry of
    /// each provider's current credentials.
    fn expiry_changed(&self) {
        let Some(metrics) = &self.calls.metrics else {
            return;
        };
        let slots: Vec<Arc<refresh::Slot>> = match self.slots.lock() {
            Ok(slots) => slots.values().cloned().collect(),
            Err(_) => return,
        };
        let mut soonest: BTreeMap<String, Option<SystemTime>> = self
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
