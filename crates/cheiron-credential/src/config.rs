//! The credential-provider config file: the kubelet's `CredentialProviderConfig`
//! (`kubelet.config.k8s.io/v1`, also `v1beta1` and `v1alpha1`), read and validated as the
//! kubelet reads it (`pkg/credentialprovider/plugin/config.go`): strict (an unknown field is an
//! error), a file or a directory of `.json`/`.yaml`/`.yml` files merged in name order, provider
//! names unique. One cheiron extension: `allowedNamespaces` on a provider (docs/credential-providers.md).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use cheiron_core::{policy::NamespaceGlob, registry::RegistryKey};
use serde::Deserialize;

use super::duration;

/// The config API versions the kubelet reads.
pub const CONFIG_API_VERSIONS: [&str; 3] = [
    "kubelet.config.k8s.io/v1",
    "kubelet.config.k8s.io/v1beta1",
    "kubelet.config.k8s.io/v1alpha1",
];
/// The exec protocol versions a provider may speak.
pub const PROVIDER_API_VERSIONS: [&str; 3] = [
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
];
/// The only protocol version that carries a service-account token.
pub const TOKEN_API_VERSION: &str = "credentialprovider.kubelet.k8s.io/v1";
/// Largest config file read (a config is a few hundred bytes).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Why the config cannot be used: one line naming the file and what is wrong, never an `env`
/// value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file or directory could not be read.
    #[error("cannot read credential provider config {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file is not a `CredentialProviderConfig`.
    #[error("credential provider config {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A provider's plugin is not in the bin dir.
    #[error(
        "credential provider {name}: no executable {path} (put the plugin in --credential-provider-bin-dir)"
    )]
    MissingPlugin {
        /// Provider name.
        name: String,
        /// Where it was looked for.
        path: PathBuf,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    kind: Option<String>,
    api_version: Option<String>,
    #[serde(default)]
    providers: Vec<RawProvider>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProvider {
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<EnvVar>,
    token_attributes: Option<RawTokenAttributes>,
    allowed_namespaces: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTokenAttributes {
    #[serde(default)]
    service_account_token_audience: String,
    #[serde(default)]
    cache_type: String,
    require_service_account: Option<bool>,
    #[serde(default)]
    required_service_account_annotation_keys: Vec<String>,
    #[serde(default)]
    optional_service_account_annotation_keys: Vec<String>,
}

/// An environment variable a provider's plugin gets (the only ones it gets).
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    /// Name.
    pub name: String,
    /// Value (may be a secret: never logged).
    pub value: String,
}

impl std::fmt::Debug for EnvVar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}=<redacted>", self.name)
    }
}

/// KEP-4412: the provider wants a service-account token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenAttributes {
    /// The token's audience.
    pub audience: String,
    /// `ServiceAccount` or `Token` (cheiron mints one token per plugin call either way).
    pub cache_type: String,
    /// Without a ServiceAccount the plugin is not called.
    pub require_service_account: bool,
    /// Annotations the ServiceAccount must carry; passed to the plugin.
    pub required_annotation_keys: Vec<String>,
    /// Annotations passed to the plugin when present.
    pub optional_annotation_keys: Vec<String>,
}

/// One provider of the config.
#[derive(Clone, Debug)]
pub struct Provider {
    /// Name: also the plugin's file name in the bin dir.
    pub name: String,
    /// Images (kubelet registry-key syntax, globs allowed) this provider serves.
    pub match_images: Vec<RegistryKey>,
    /// How long a credential lives when the response does not say.
    pub default_cache_duration: Duration,
    /// `credentialprovider.kubelet.k8s.io/...`, spoken both ways.
    pub api_version: String,
    /// Arguments of the plugin.
    pub args: Vec<String>,
    /// The plugin's whole environment.
    pub env: Vec<EnvVar>,
    /// Service-account token wanted.
    pub token_attributes: Option<TokenAttributes>,
    /// cheiron extension: namespaced managers in these namespaces may use the provider.
    pub allowed_namespaces: Vec<NamespaceGlob>,
}

impl Provider {
    /// True when the provider serves `image` (the kubelet's `isImageAllowed`).
    pub fn matches(&self, image: &cheiron_core::registry::ImageRef) -> bool {
        self.match_images.iter().any(|k| k.matches(image))
    }

    /// True when a namespaced manager in `namespace` may use the provider.
    pub fn allows_namespace(&self, namespace: &str) -> bool {
        self.allowed_namespaces.iter().any(|g| g.matches(namespace))
    }
}

/// The providers of a config, in file and list order.
#[derive(Clone, Debug, Default)]
pub struct ProviderConfig {
    /// The providers.
    pub providers: Vec<Provider>,
}

impl ProviderConfig {
    /// Reads `path` (a file, or a directory of `.json`, `.yaml` and `.yml` files merged in
    /// name order) and checks that each provider's plugin is an executable file in `bin_dir`.
    pub fn load(path: &Path, bin_dir: &Path) -> Result<Self, ConfigError> {
        let read_err = |path: &Path| {
            let path = path.to_owned();
            move |source| ConfigError::Read { path, source }
        };
        let files = if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(read_err(path))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.is_file()
                        && matches!(
                            p.extension().and_then(|e| e.to_str()),
                            Some("json" | "yaml" | "yml")
                        )
                })
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    message: "no .json, .yaml or .yml file in the directory".to_owned(),
                });
            }
            files
        } else {
            vec![path.to_owned()]
        };
        let mut config = Self::default();
        for file in files {
            let size = std::fs::metadata(&file).map_err(read_err(&file))?.len();
            if size > MAX_CONFIG_BYTES {
                return Err(ConfigError::Invalid {
                    path: file,
                    message: format!("larger than {MAX_CONFIG_BYTES} bytes"),
                });
            }
            let text = std::fs::read_to_string(&file).map_err(read_err(&file))?;
            let parsed = Self::parse(&text).map_err(|message| ConfigError::Invalid {
                path: file.clone(),
                message,
            })?;
            for provider in parsed.providers {
                if config.providers.iter().any(|p| p.name == provider.name) {
                    return Err(ConfigError::Invalid {
                        path: file,
                        message: format!("duplicate provider name {:?}", provider.name),
                    });
                }
                config.providers.push(provider);
            }
        }
        for provider in &config.providers {
            let plugin = bin_dir.join(&provider.name);
            if !is_executable(&plugin) {
                return Err(ConfigError::MissingPlugin {
                    name: provider.name.clone(),
                    path: plugin,
                });
            }
        }
        Ok(config)
    }

    /// Parses and validates one file's text (YAML or JSON). The error names every rule broken,
    /// `; `-separated, never a value of `env`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let documents = cheiron_runtime::yaml::documents(text);
        let value = match documents.as_slice() {
            [] => return Err("empty".to_owned()),
            [one] => match &one.content {
                Ok(v) => v.clone(),
                Err(e) => return Err(cheiron_runtime::message::without_values(&e.to_string())),
            },
            _ => return Err("holds several YAML documents; write one".to_owned()),
        };
        let raw: RawConfig = serde_json::from_value(value).map_err(|e| {
            format!(
                "not a CredentialProviderConfig: {}",
                cheiron_runtime::message::without_values(&e.to_string())
            )
        })?;
        validate(raw)
    }

    /// The first provider that serves `image`, as the kubelet would try them.
    pub fn provider_for(&self, image: &cheiron_core::registry::ImageRef) -> Option<&Provider> {
        self.providers.iter().find(|p| p.matches(image))
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

/// A provider's `tokenAttributes` (its `apiVersion` is `api_version`), each fault told to `fail`.
fn token_attributes(
    t: RawTokenAttributes,
    api_version: &str,
    fail: &mut impl FnMut(String),
) -> TokenAttributes {
    if t.service_account_token_audience.is_empty() {
        fail("tokenAttributes.serviceAccountTokenAudience is required".into());
    }
    if t.require_service_account.is_none() {
        fail("tokenAttributes.requireServiceAccount is required".into());
    }
    if api_version != TOKEN_API_VERSION {
        fail(format!(
            "tokenAttributes is only supported for {TOKEN_API_VERSION}"
        ));
    }
    if t.require_service_account == Some(false)
        && !t.required_service_account_annotation_keys.is_empty()
    {
        fail("tokenAttributes: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set".into());
    }
    for key in t
        .required_service_account_annotation_keys
        .iter()
        .chain(&t.optional_service_account_annotation_keys)
    {
        if !is_qualified_name(&key.to_lowercase()) {
            fail(format!(
                "tokenAttributes: {key:?} is not a valid annotation key"
            ));
        }
        if t.required_service_account_annotation_keys.contains(key)
            && t.optional_service_account_annotation_keys.contains(key)
        {
            fail(format!(
                "tokenAttributes: annotation key {key:?} cannot be both required and optional"
            ));
        }
    }
    if !matches!(t.cache_type.as_str(), "ServiceAccount" | "Token") {
        fail("tokenAttributes.cacheType must be ServiceAccount or Token".into());
    }
    TokenAttributes {
        audience: t.service_account_token_audience,
        cache_type: t.cache_type,
        require_service_account: t.require_service_account.unwrap_or(true),
        required_annotation_keys: t.required_service_account_annotation_keys,
        optional_annotation_keys: t.optional_service_account_annotation_keys,
    }
}

/// One provider of the config, checked: each problem goes to `fail` (the provider is then
/// not used); `earlier` are the providers before it, whose names it must not repeat.
fn provider(p: RawProvider, earlier: &[Provider], fail: &mut impl FnMut(String)) -> Provider {
    if p.name.is_empty()
        || p.name.contains('/')
        || p.name.contains(' ')
        || p.name == "."
        || p.name == ".."
    {
        fail("name must be a file name: not empty, no '/' or space, not '.' or '..'".into());
    }
    if earlier.iter().any(|q| q.name == p.name) {
        fail(format!("duplicate provider name {:?}", p.name));
    }
    if !PROVIDER_API_VERSIONS.contains(&p.api_version.as_str()) {
        fail(format!(
            "apiVersion must be one of {}",
            PROVIDER_API_VERSIONS.join(", ")
        ));
    }
    if p.match_images.is_empty() {
        fail("matchImages: at least 1 item in matchImages is required".into());
    }
    let match_images: Vec<RegistryKey> = p
        .match_images
        .iter()
        .map(|m| RegistryKey::parse(m))
        .collect();
    for key in &match_images {
        if key.as_kubelet_reads().is_none() {
            fail(format!(
                "matchImages: {:?} is not a valid match image",
                key.raw()
            ));
        }
    }
    let default_cache_duration = match p.default_cache_duration.as_deref() {
        None => {
            fail("defaultCacheDuration is required".into());
            Duration::ZERO
        }
        Some(d) => duration::parse(d).unwrap_or_else(|e| {
            fail(format!("defaultCacheDuration: {e}"));
            Duration::ZERO
        }),
    };
    let token_attributes = p
        .token_attributes
        .map(|t| token_attributes(t, &p.api_version, fail));
    let mut allowed_namespaces = Vec::new();
    for glob in p.allowed_namespaces.unwrap_or_default() {
        match NamespaceGlob::parse(&glob) {
            Ok(g) => allowed_namespaces.push(g),
            Err(_) => fail(format!(
                "allowedNamespaces: {glob:?} is not a namespace name or glob"
            )),
        }
    }
    for var in &p.env {
        if var.name.is_empty() || var.name.contains('=') || var.name.contains('\0') {
            fail(format!("env: {:?} is not a variable name", var.name));
        }
    }
    Provider {
        name: p.name,
        match_images,
        default_cache_duration,
        api_version: p.api_version,
        args: p.args,
        env: p.env,
        token_attributes,
        allowed_namespaces,
    }
}

fn validate(raw: RawConfig) -> Result<ProviderConfig, String> {
    let mut errors: Vec<String> = Vec::new();
    if raw.kind.as_deref() != Some("CredentialProviderConfig") {
        errors.push("kind must be CredentialProviderConfig".to_owned());
    }
    match raw.api_version.as_deref() {
        Some(v) if CONFIG_API_VERSIONS.contains(&v) => {}
        _ => errors.push(format!(
            "apiVersion must be one of {}",
            CONFIG_API_VERSIONS.join(", ")
        )),
    }
    if raw.providers.is_empty() {
        errors.push("providers: at least 1 item in plugins is required".to_owned());
    }
    let mut providers: Vec<Provider> = Vec::new();
    for (i, p) in raw.providers.into_iter().enumerate() {
        let mut fail = |m: String| errors.push(format!("providers[{i}]: {m}"));
        let provider = provider(p, &providers, &mut fail);
        providers.push(provider);
    }
    if errors.is_empty() {
        Ok(ProviderConfig { providers })
    } else {
        Err(errors.join("; "))
    }
}

#[cfg(test)]
mod tests;
