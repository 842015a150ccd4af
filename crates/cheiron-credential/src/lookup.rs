//! What a manager asks of the providers ([`Wanted`]), the key one credential is shared under,
//! the credential, and what a lookup of it answers: plain values.

use std::time::{Duration, SystemTime};

use crate::exec::Auth;

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
    /// every [`NO_CACHE_REFRESH`](crate::NO_CACHE_REFRESH)).
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

/// `d` rounded to whole seconds, for messages.
pub(crate) fn seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_millis() >= 500)
}
