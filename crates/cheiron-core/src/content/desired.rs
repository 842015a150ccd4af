//! What a manager wants written: one `.dockerconfigjson` per entry (or one merged), computed
//! from its entries and the source Secrets fetched for them. Pure: fetching is the caller's.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::ByteString;

use super::{
    dockerconfig::{DockerConfig, InvalidSource},
    registry_keys::{self, UnusableKey},
};
use crate::{api::PullSecretEntry, registry::canonical_key};

/// A Secret a manager reads: `(namespace, name)`.
pub type SourceKey = (String, String);

/// A source Secret as fetched.
#[derive(Clone, Debug, PartialEq)]
pub enum Fetched {
    /// It does not exist.
    Missing,
    /// Its type and data.
    Present {
        /// `type`.
        secret_type: Option<String>,
        /// `data`.
        data: BTreeMap<String, ByteString>,
    },
}

/// The Secret types a `passwordSecretRef` may read: those made to hold a password or token.
/// A service-account token, a TLS key or a bootstrap token is never read through cheiron.
pub const PASSWORD_SOURCE_TYPES: [&str; 2] = ["Opaque", "kubernetes.io/basic-auth"];

/// The reference of an entry, as (name, namespace it names).
fn reference(entry: &PullSecretEntry) -> Option<(&String, Option<&str>)> {
    match (&entry.existing_secret_ref, &entry.password_secret_ref) {
        (Some(r), _) => Some((&r.name, r.namespace.as_deref())),
        (None, Some(r)) => Some((&r.name, r.namespace.as_deref())),
        (None, None) => None,
    }
}

/// The namespace a namespaced manager's reference names when it is not the manager's own.
/// The CRD schema rejects such a reference, but the CRD may predate that rule (one applied by
/// hand, or with `crds.install=false`) or the object may predate the CRD: the controller
/// refuses it too.
fn foreign_namespace<'e>(
    entry: &'e PullSecretEntry,
    manager_namespace: Option<&str>,
) -> Option<&'e str> {
    let own = manager_namespace?;
    let (_, named) = reference(entry)?;
    named.filter(|n| *n != own)
}

/// The Secret an entry reads: a namespaced manager's own namespace, always; the namespace a
/// cluster manager's reference names. `None` for inline entries and for references a
/// namespaced manager may not follow.
pub fn source_key(entry: &PullSecretEntry, manager_namespace: Option<&str>) -> Option<SourceKey> {
    if foreign_namespace(entry, manager_namespace).is_some() {
        return None;
    }
    let (name, named) = reference(entry)?;
    let namespace = manager_namespace.or(named)?;
    Some((namespace.to_owned(), name.clone()))
}

/// What the credential providers answered for the provider entries, by index in
/// `spec.secrets` (see `controller::provided`).
pub type Provided = HashMap<usize, Result<DockerConfig, Problem>>;

/// What is wrong with one entry's source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A credential-provider entry has no valid credential (copies already written are
    /// kept), or may not use the provider.
    CredentialProvider {
        /// Index in `spec.secrets`.
        entry: usize,
        /// The status reason.
        reason: &'static str,
        /// What is wrong, never a credential or a plugin's output.
        message: String,
    },
    /// The source Secret does not exist (copies already written are kept).
    SourceMissing {
        /// Index in `spec.secrets`.
        entry: usize,
        /// `namespace/name`.
        source: String,
    },
    /// The source Secret exists but cannot be used (never propagated).
    InvalidSource {
        /// Index in `spec.secrets`.
        entry: usize,
        /// `namespace/name`.
        source: String,
        /// What is wrong, never a value.
        message: String,
    },
}

impl Problem {
    /// The status message for this problem.
    pub fn message(&self) -> String {
        match self {
            Problem::CredentialProvider { entry, message, .. } => {
                format!("spec.secrets[{entry}]: {message}")
            }
            Problem::SourceMissing { entry, source } => {
                format!(
                    "spec.secrets[{entry}]: source Secret {source} not found; existing copies are kept"
                )
            }
            Problem::InvalidSource {
                entry,
                source,
                message,
            } => {
                format!("spec.secrets[{entry}]: source Secret {source} is not usable: {message}")
            }
        }
    }
}

/// One Secret a manager writes in every target namespace.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredSecret {
    /// The Secret name.
    pub name: String,
    /// The `.dockerconfigjson` bytes, or `None` when a source problem means the copies must be
    /// left as they are (neither created, updated nor deleted).
    pub content: Option<Vec<u8>>,
    /// The Secret this one is a whole copy of (`existingSecretRef`, not merged). In the
    /// source's own namespace the copy *is* the source: nothing to write, and no conflict.
    pub source: Option<SourceKey>,
}

/// Everything a manager wants, and what stands in the way.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Desired {
    /// The Secrets, in entry order.
    pub secrets: Vec<DesiredSecret>,
    /// Source problems.
    pub problems: Vec<Problem>,
    /// Indexes of entries with an inline password.
    pub inline_passwords: Vec<usize>,
    /// With `mergeInto`: registries present in several entries (the earlier entry won).
    pub shadowed_registries: Vec<ShadowedRegistry>,
    /// Registry keys written (inline) or copied (sources) that the kubelet would never use as
    /// meant; the Secrets are written all the same.
    pub unusable_keys: Vec<UnusableKey>,
}

/// With `mergeInto`: a registry an entry holds that an earlier entry holds too, under the
/// same key or another the kubelet reads as the same registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShadowedRegistry {
    /// The dropped key, as written.
    pub registry: String,
    /// Index in `spec.secrets` of the entry it came from.
    pub entry: usize,
    /// The key that won, as written.
    pub kept: String,
    /// Index in `spec.secrets` of the entry that won.
    pub kept_entry: usize,
}

impl ShadowedRegistry {
    /// `docker.io (spec.secrets[1]) lost to https://index.docker.io/v1/ (spec.secrets[0])`.
    pub fn message(&self) -> String {
        format!(
            "{} (spec.secrets[{}]) lost to {} (spec.secrets[{}])",
            self.registry, self.entry, self.kept, self.kept_entry
        )
    }
}

fn describe((namespace, name): &SourceKey) -> String {
    format!("{namespace}/{name}")
}

/// Resolves one entry to its docker config.
fn resolve(
    index: usize,
    entry: &PullSecretEntry,
    manager_namespace: Option<&str>,
    sources: &HashMap<SourceKey, Fetched>,
    provided: &Provided,
) -> Result<DockerConfig, Problem> {
    if entry.credential_provider.is_some() {
        return provided.get(&index).cloned().unwrap_or_else(|| {
            Err(Problem::CredentialProvider {
                entry: index,
                reason: crate::api::reason::CREDENTIAL_PROVIDER_FAILED,
                message: "no credential provider was asked".to_owned(),
            })
        });
    }
    if let Some(foreign) = foreign_namespace(entry, manager_namespace) {
        return Err(Problem::InvalidSource {
            entry: index,
            source: "spec".to_owned(),
            message: format!(
                "references a Secret in namespace {foreign}: a namespaced manager reads only \
                 its own namespace"
            ),
        });
    }
    let key = source_key(entry, manager_namespace);
    let fetched = |key: &SourceKey| sources.get(key).unwrap_or(&Fetched::Missing);
    match (&entry.existing_secret_ref, key) {
        (Some(_), Some(key)) => match fetched(&key) {
            Fetched::Missing => Err(Problem::SourceMissing {
                entry: index,
                source: describe(&key),
            }),
            Fetched::Present { secret_type, data } => {
                DockerConfig::from_secret(secret_type.as_deref(), data).map_err(
                    |InvalidSource(message)| Problem::InvalidSource {
                        entry: index,
                        source: describe(&key),
                        message,
                    },
                )
            }
        },
        (_, key) => credentials(index, entry, key.as_ref().map(|key| (key, fetched(key)))),
    }
}

/// An entry of a registry, a username and a password, inline or read from the
/// `passwordSecretRef` Secret `source` (its key and what was fetched of it).
fn credentials(
    index: usize,
    entry: &PullSecretEntry,
    source: Option<(&SourceKey, &Fetched)>,
) -> Result<DockerConfig, Problem> {
    let in_spec = |message: &str| Problem::InvalidSource {
        entry: index,
        source: "spec".to_owned(),
        message: message.to_owned(),
    };
    let (Some(registry), Some(username)) = (&entry.registry, &entry.username) else {
        return Err(in_spec("registry and username are required"));
    };
    let password = match (&entry.password, &entry.password_secret_ref, source) {
        (Some(inline), _, _) => inline.clone(),
        (None, Some(r), Some((key, fetched))) => password_from(index, key, &r.key, fetched)?,
        _ => return Err(in_spec("password or passwordSecretRef is required")),
    };
    // Written under the key the kubelet matches: `docker.io` or a slash-less
    // `https://index.docker.io/v1` becomes `https://index.docker.io/v1/`.
    Ok(DockerConfig::from_credentials(
        &canonical_key(registry),
        username,
        &password,
        entry.email.as_deref(),
    ))
}

/// The password under `field` of the `passwordSecretRef` Secret `key`: text, without a
/// trailing newline, from a Secret of a type that holds passwords.
fn password_from(
    index: usize,
    key: &SourceKey,
    field: &str,
    fetched: &Fetched,
) -> Result<String, Problem> {
    let invalid = |message: String| Problem::InvalidSource {
        entry: index,
        source: describe(key),
        message,
    };
    let Fetched::Present { secret_type, data } = fetched else {
        return Err(Problem::SourceMissing {
            entry: index,
            source: describe(key),
        });
    };
    let secret_type = secret_type.as_deref().unwrap_or("Opaque");
    if !PASSWORD_SOURCE_TYPES.contains(&secret_type) {
        return Err(invalid(format!(
            "is of type {secret_type}; passwordSecretRef reads only {}",
            PASSWORD_SOURCE_TYPES.join(" or ")
        )));
    }
    let bytes = data
        .get(field)
        .ok_or_else(|| invalid(format!("has no key {field:?}")))?;
    Ok(String::from_utf8(bytes.0.clone())
        .map_err(|_| invalid(format!("key {field:?} is not UTF-8 text")))?
        .trim_end_matches(['\n', '\r'])
        .to_owned())
}

/// Computes what a manager wants from its entries and the fetched sources (no provider
/// entries answered: see [`desired_with`]).
#[cfg(test)]
pub fn desired(
    entries: &[PullSecretEntry],
    merge_into: Option<&str>,
    manager_namespace: Option<&str>,
    sources: &HashMap<SourceKey, Fetched>,
) -> Desired {
    desired_with(
        entries,
        merge_into,
        manager_namespace,
        sources,
        &Provided::new(),
    )
}

/// Computes what a manager wants from its entries, the fetched sources and what the
/// credential providers answered.
pub fn desired_with(
    entries: &[PullSecretEntry],
    merge_into: Option<&str>,
    manager_namespace: Option<&str>,
    sources: &HashMap<SourceKey, Fetched>,
    provided: &Provided,
) -> Desired {
    let mut out = Desired {
        inline_passwords: entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.password.is_some())
            .map(|(i, _)| i)
            .collect(),
        ..Desired::default()
    };
    let resolved: Vec<(&PullSecretEntry, Result<DockerConfig, Problem>)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e, resolve(i, e, manager_namespace, sources, provided)))
        .collect();
    match merge_into {
        Some(merged_name) => {
            let mut configs = Vec::new();
            for (index, (_, result)) in resolved.iter().enumerate() {
                match result {
                    Ok(config) => {
                        out.unusable_keys.extend(registry_keys::in_config(
                            index,
                            merged_name,
                            config,
                        ));
                        configs.push((index, config));
                    }
                    Err(problem) => out.problems.push(problem.clone()),
                }
            }
            // A merged copy missing some registries would silently drop credentials: keep the
            // existing copy until every source resolves.
            let content = out.problems.is_empty().then(|| {
                let (merged, shadowed) = DockerConfig::merge(configs.iter().map(|(_, c)| *c));
                let entry = |position: usize| configs.get(position).map_or(0, |(i, _)| *i);
                out.shadowed_registries = shadowed
                    .into_iter()
                    .map(|s| ShadowedRegistry {
                        entry: entry(s.config),
                        kept_entry: entry(s.kept_config),
                        registry: s.registry,
                        kept: s.kept,
                    })
                    .collect();
                merged.to_bytes()
            });
            out.secrets.push(DesiredSecret {
                name: merged_name.to_owned(),
                content,
                source: None,
            });
        }
        None => {
            for (index, (entry, result)) in resolved.into_iter().enumerate() {
                let Some(name) = entry.target_name() else {
                    continue;
                };
                let source = entry
                    .existing_secret_ref
                    .as_ref()
                    .and_then(|_| source_key(entry, manager_namespace));
                let content = match result {
                    Ok(config) => {
                        out.unusable_keys
                            .extend(registry_keys::in_config(index, name, &config));
                        Some(config.to_bytes())
                    }
                    Err(problem) => {
                        out.problems.push(problem);
                        None
                    }
                };
                out.secrets.push(DesiredSecret {
                    name: name.to_owned(),
                    content,
                    source,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::api::{SecretKeyRef, SecretRef};

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn inline(name: &str, registry: &str) -> PullSecretEntry {
        PullSecretEntry {
            name: Some(name.into()),
            registry: Some(registry.into()),
            username: Some("u".into()),
            password: Some("p".into()),
            ..PullSecretEntry::default()
        }
    }

    fn reference(name: &str) -> PullSecretEntry {
        PullSecretEntry {
            existing_secret_ref: Some(SecretRef {
                name: name.into(),
                namespace: None,
            }),
            ..PullSecretEntry::default()
        }
    }

    fn dockerconfig(registry: &str) -> Fetched {
        let body = json!({"auths": {registry: {"auth": "eDp5"}}}).to_string();
        Fetched::Present {
            secret_type: Some("kubernetes.io/dockerconfigjson".into()),
            data: BTreeMap::from([(".dockerconfigjson".into(), ByteString(body.into_bytes()))]),
        }
    }

    fn registries(content: &Option<Vec<u8>>) -> Result<Vec<String>, serde_json::Error> {
        let value: Value = serde_json::from_slice(content.as_deref().unwrap_or(b"{}"))?;
        Ok(value["auths"]
            .as_object()
            .map(|a| a.keys().cloned().collect())
            .unwrap_or_default())
    }

    #[test]
    fn each_entry_becomes_one_secret_and_inline_passwords_are_flagged() -> TestResult {
        let sources = HashMap::from([(
            ("team".into(), "gitlab".into()),
            dockerconfig("registry.gitlab.com"),
        )]);
        let d = desired(
            &[inline("hub", "docker.io"), reference("gitlab")],
            None,
            Some("team"),
            &sources,
        );
        assert_eq!(
            d.secrets
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["hub", "gitlab"]
        );
        assert_eq!(
            registries(&d.secrets[0].content)?,
            ["https://index.docker.io/v1/"],
            "an inline registry is written in the form the kubelet matches"
        );
        assert_eq!(registries(&d.secrets[1].content)?, ["registry.gitlab.com"]);
        assert_eq!(d.inline_passwords, [0]);
        assert!(d.problems.is_empty());
        Ok(())
    }

    #[test]
    fn password_secret_ref_reads_the_key_and_trims_a_trailing_newline() -> TestResult {
        let entry = PullSecretEntry {
            name: Some("ghcr".into()),
            registry: Some("ghcr.io".into()),
            username: Some("bob".into()),
            password_secret_ref: Some(SecretKeyRef {
                name: "ghcr-token".into(),
                key: "token".into(),
                namespace: Some("cheiron".into()),
            }),
            ..PullSecretEntry::default()
        };
        let token = Fetched::Present {
            secret_type: Some("Opaque".into()),
            data: BTreeMap::from([("token".into(), ByteString(b"t0ken\n".to_vec()))]),
        };
        let sources = HashMap::from([(("cheiron".into(), "ghcr-token".into()), token)]);
        let d = desired(std::slice::from_ref(&entry), None, None, &sources);
        let value: Value =
            serde_json::from_slice(d.secrets[0].content.as_deref().unwrap_or_default())?;
        assert_eq!(value["auths"]["ghcr.io"]["password"], "t0ken");
        // A missing key is an invalid source.
        let empty = HashMap::from([(
            ("cheiron".into(), "ghcr-token".into()),
            Fetched::Present {
                secret_type: None,
                data: BTreeMap::new(),
            },
        )]);
        let d = desired(&[entry], None, None, &empty);
        assert!(
            matches!(&d.problems[0], Problem::InvalidSource { message, .. } if message.contains("no key \"token\""))
        );
        assert_eq!(d.secrets[0].content, None);
        Ok(())
    }

    #[test]
    fn missing_and_invalid_sources_keep_copies_as_they_are() {
        let invalid = Fetched::Present {
            secret_type: Some("Opaque".into()),
            data: BTreeMap::new(),
        };
        let sources = HashMap::from([(("team".into(), "bad".into()), invalid)]);
        let d = desired(
            &[reference("gone"), reference("bad")],
            None,
            Some("team"),
            &sources,
        );
        assert_eq!(
            d.secrets.iter().map(|s| &s.content).collect::<Vec<_>>(),
            [&None, &None]
        );
        assert!(matches!(
            d.problems[0],
            Problem::SourceMissing { entry: 0, .. }
        ));
        assert!(matches!(
            d.problems[1],
            Problem::InvalidSource { entry: 1, .. }
        ));
        assert!(d.problems[0].message().contains("team/gone not found"));
    }

    #[test]
    fn a_namespaced_manager_never_reads_another_namespace_whatever_its_reference_says() {
        // A tenant's manager saved under an old CRD without the CEL rule, naming kube-system.
        let foreign = PullSecretEntry {
            existing_secret_ref: Some(SecretRef {
                name: "db-password".into(),
                namespace: Some("kube-system".into()),
            }),
            ..PullSecretEntry::default()
        };
        let token = PullSecretEntry {
            name: Some("t".into()),
            registry: Some("ghcr.io".into()),
            username: Some("u".into()),
            password_secret_ref: Some(SecretKeyRef {
                name: "db-password".into(),
                key: "password".into(),
                namespace: Some("kube-system".into()),
            }),
            ..PullSecretEntry::default()
        };
        assert_eq!(
            source_key(&foreign, Some("team")),
            None,
            "never fetched or watched"
        );
        assert_eq!(
            source_key(&token, Some("team")),
            None,
            "never fetched or watched"
        );
        // Even if the Secret were fetched, it is not used.
        let sources = HashMap::from([(
            ("kube-system".into(), "db-password".into()),
            dockerconfig("stolen.example"),
        )]);
        let d = desired(&[foreign, token], None, Some("team"), &sources);
        assert_eq!(d.secrets[0].content, None);
        assert!(
            d.problems.iter().all(|p| matches!(p, Problem::InvalidSource { message, .. }
                if message.contains("namespace kube-system") && message.contains("only its own namespace"))),
            "{:?}",
            d.problems
        );
        assert_eq!(d.problems.len(), 2);
        // Its own namespace, named explicitly, is fine.
        let own = PullSecretEntry {
            existing_secret_ref: Some(SecretRef {
                name: "pull".into(),
                namespace: Some("team".into()),
            }),
            ..PullSecretEntry::default()
        };
        assert_eq!(
            source_key(&own, Some("team")),
            Some(("team".into(), "pull".into()))
        );
    }

    #[test]
    fn password_secret_ref_refuses_secret_types_that_do_not_hold_passwords() {
        let entry = PullSecretEntry {
            name: Some("t".into()),
            registry: Some("ghcr.io".into()),
            username: Some("u".into()),
            password_secret_ref: Some(SecretKeyRef {
                name: "s".into(),
                key: "token".into(),
                namespace: Some("kube-system".into()),
            }),
            ..PullSecretEntry::default()
        };
        for (secret_type, accepted) in [
            (Some("kubernetes.io/service-account-token"), false),
            (Some("kubernetes.io/tls"), false),
            (Some("bootstrap.kubernetes.io/token"), false),
            (Some("Opaque"), true),
            (Some("kubernetes.io/basic-auth"), true),
            (None, true),
        ] {
            let sources = HashMap::from([(
                ("kube-system".into(), "s".into()),
                Fetched::Present {
                    secret_type: secret_type.map(str::to_owned),
                    data: BTreeMap::from([("token".into(), ByteString(b"x".to_vec()))]),
                },
            )]);
            let d = desired(std::slice::from_ref(&entry), None, None, &sources);
            assert_eq!(d.secrets[0].content.is_some(), accepted, "{secret_type:?}");
            if !accepted {
                assert!(
                    matches!(&d.problems[0], Problem::InvalidSource { message, .. } if message.contains("passwordSecretRef reads only")),
                    "{:?}",
                    d.problems
                );
            }
        }
    }

    #[test]
    fn an_unusable_password_source_or_spec_is_named_in_the_problem() {
        let entry = |password_secret_ref| PullSecretEntry {
            name: Some("t".into()),
            registry: Some("ghcr.io".into()),
            username: Some("u".into()),
            password_secret_ref,
            ..PullSecretEntry::default()
        };
        let by_ref = entry(Some(SecretKeyRef {
            name: "s".into(),
            key: "token".into(),
            namespace: Some("kube-system".into()),
        }));
        let holding = |key: &str, value: &[u8]| {
            HashMap::from([(
                ("kube-system".into(), "s".into()),
                Fetched::Present {
                    secret_type: None,
                    data: BTreeMap::from([(key.into(), ByteString(value.to_vec()))]),
                },
            )])
        };
        let problem = |entry: &PullSecretEntry, sources: &HashMap<SourceKey, Fetched>| {
            let d = desired(std::slice::from_ref(entry), None, None, sources);
            assert_eq!(d.secrets[0].content, None, "{:?}", d.problems);
            d.problems[0].clone()
        };
        let invalid = |problem: Problem, source: &str, text: &str| {
            assert!(
                matches!(&problem, Problem::InvalidSource { source: s, message, .. } if s == source && message.contains(text)),
                "{problem:?} should name {source} and say {text:?}"
            );
        };
        invalid(
            problem(&by_ref, &holding("other", b"x")),
            "kube-system/s",
            "has no key \"token\"",
        );
        invalid(
            problem(&by_ref, &holding("token", &[0xff, 0xfe])),
            "kube-system/s",
            "key \"token\" is not UTF-8 text",
        );
        assert!(matches!(
            problem(&by_ref, &HashMap::new()),
            Problem::SourceMissing { source, .. } if source == "kube-system/s"
        ));
        invalid(
            problem(&entry(None), &HashMap::new()),
            "spec",
            "password or passwordSecretRef is required",
        );
        let no_user = PullSecretEntry {
            username: None,
            ..by_ref.clone()
        };
        invalid(
            problem(&no_user, &holding("token", b"x")),
            "spec",
            "registry and username are required",
        );
    }

    #[test]
    fn a_whole_copy_records_its_source_and_a_merge_does_not() {
        let sources =
            HashMap::from([(("team".into(), "gitlab".into()), dockerconfig("r.example"))]);
        let d = desired(&[reference("gitlab")], None, Some("team"), &sources);
        assert_eq!(d.secrets[0].source, Some(("team".into(), "gitlab".into())));
        let merged = desired(&[reference("gitlab")], Some("m"), Some("team"), &sources);
        assert_eq!(merged.secrets[0].source, None);
    }

    #[test]
    fn merge_into_writes_one_secret_and_the_earlier_registry_wins() -> TestResult {
        let sources = HashMap::from([(
            ("team".into(), "hub-copy".into()),
            dockerconfig("docker.io"),
        )]);
        let d = desired(
            &[
                inline("hub", "docker.io"),
                reference("hub-copy"),
                inline("q", "quay.io"),
            ],
            Some("merged"),
            Some("team"),
            &sources,
        );
        assert_eq!(d.secrets.len(), 1);
        assert_eq!(d.secrets[0].name, "merged");
        assert_eq!(
            registries(&d.secrets[0].content)?,
            ["https://index.docker.io/v1/", "quay.io"]
        );
        assert_eq!(
            d.shadowed_registries
                .iter()
                .map(ShadowedRegistry::message)
                .collect::<Vec<_>>(),
            ["docker.io (spec.secrets[1]) lost to https://index.docker.io/v1/ (spec.secrets[0])"]
        );
        let value: Value =
            serde_json::from_slice(d.secrets[0].content.as_deref().unwrap_or_default())?;
        assert_eq!(
            value["auths"]["https://index.docker.io/v1/"]["username"], "u",
            "the inline entry came first"
        );
        Ok(())
    }

    #[test]
    fn merge_into_is_held_back_while_any_source_is_missing() {
        let d = desired(
            &[inline("hub", "docker.io"), reference("gone")],
            Some("merged"),
            Some("team"),
            &HashMap::new(),
        );
        assert_eq!(d.secrets[0].content, None);
        assert_eq!(d.problems.len(), 1);
    }

    #[test]
    fn unusable_keys_are_reported_and_their_secrets_still_written() -> TestResult {
        let sources = HashMap::from([(
            ("team".into(), "legacy".into()),
            dockerconfig("https://index.docker.io/v1"),
        )]);
        let entries = [
            inline("hub", "https://index.docker.io/v1"),
            reference("legacy"),
            inline("odd", "oci://registry.example.com"),
        ];
        let d = desired(&entries, None, Some("team"), &sources);
        assert!(d.secrets.iter().all(|s| s.content.is_some()));
        // The source is copied as it is, never rewritten.
        assert_eq!(
            registries(&d.secrets[1].content)?,
            ["https://index.docker.io/v1"]
        );
        let reported: Vec<(usize, &str, &str)> = d
            .unusable_keys
            .iter()
            .map(|u| (u.entry, u.secret.as_str(), u.key.as_str()))
            .collect();
        assert_eq!(
            reported,
            [
                (1, "legacy", "https://index.docker.io/v1"),
                (2, "odd", "oci://registry.example.com")
            ],
            "the inline Docker Hub entry is written canonically, so it is usable"
        );
        let merged = desired(&entries, Some("all"), Some("team"), &sources);
        assert_eq!(merged.unusable_keys.len(), 2);
        assert!(merged.unusable_keys.iter().all(|u| u.secret == "all"));
        Ok(())
    }
}
