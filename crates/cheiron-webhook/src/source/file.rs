//! Static mode: managers and Namespaces read once from YAML or JSON files (`--from`).

use std::{
    fs,
    path::{Path, PathBuf},
};

use cheiron_core::{
    content::registry_keys,
    policy::{Manager, NamespaceMeta, StaticView, View},
};
use cheiron_runtime::{
    admin::Readiness,
    api::{
        ClusterImagePullSecretManager, GROUP, ImagePullSecretManager, PullSecretEntry, VERSION,
        validate_cluster, validate_namespaced,
    },
    decode,
    message::without_values,
    yaml,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use serde::de::DeserializeOwned;

use super::contract::Source;

/// Why `--from` could not be loaded. Each renders as one line naming the file and document.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A directory without any manifest file.
    #[error("{0}: no .yaml, .yml or .json files in this directory")]
    EmptyDirectory(PathBuf),
    /// A document that is not YAML, or not the object its kind says.
    #[error("{path}: document {document}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based document index in the file.
        document: usize,
        /// What is wrong.
        message: String,
    },
    /// A document of another kind.
    #[error(
        "{path}: document {document} is a {kind}, not an ImagePullSecretManager, ClusterImagePullSecretManager or Namespace ({GROUP}/{VERSION})"
    )]
    NotAManager {
        /// The file.
        path: PathBuf,
        /// 1-based document index in the file.
        document: usize,
        /// `apiVersion` and `kind` as found.
        kind: String,
    },
    /// A manager the CRD schema would reject.
    #[error("{path}: document {document}: {kind} {name} is invalid: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based document index in the file.
        document: usize,
        /// The manager's kind.
        kind: &'static str,
        /// The manager's name.
        name: String,
        /// The failed rules.
        message: String,
    },
}

/// Managers and namespaces read from files.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The managers, compiled.
    pub managers: Vec<Manager>,
    /// The namespaces.
    pub namespaces: Vec<NamespaceMeta>,
    /// One line per inline registry key the kubelet would never use as meant
    /// (`UnusableRegistryKey`), naming the manager and the entry.
    pub unusable_keys: Vec<String>,
}

impl Loaded {
    fn note_unusable_keys(
        &mut self,
        who: &str,
        entries: &[PullSecretEntry],
        merge_into: Option<&str>,
    ) {
        let found = registry_keys::inline(entries, merge_into);
        self.unusable_keys.extend(
            found
                .iter()
                .map(|k| format!("{who}: UnusableRegistryKey: {}", k.message())),
        );
    }
}

/// Reads every manager and Namespace in `paths` (files, or directories searched recursively
/// for `.yaml`, `.yml` and `.json` files in name order). Any other document is an error.
pub fn load_paths(paths: &[PathBuf]) -> Result<Loaded, LoadError> {
    let mut loaded = Loaded::default();
    for path in paths {
        for file in manifest_files(path)? {
            load_file(&file, &mut loaded)?;
        }
    }
    Ok(loaded)
}

fn read_error(path: &Path) -> impl FnOnce(std::io::Error) -> LoadError + '_ {
    move |source| LoadError::Read {
        path: path.to_owned(),
        source,
    }
}

fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let meta = fs::metadata(path).map_err(read_error(path))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    let mut dirs = vec![path.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).map_err(read_error(&dir))? {
            let entry = entry.map_err(read_error(&dir))?;
            let p = entry.path();
            if entry.file_type().map_err(read_error(&p))?.is_dir() {
                dirs.push(p);
            } else if p
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
            {
                files.push(p);
            }
        }
    }
    if files.is_empty() {
        return Err(LoadError::EmptyDirectory(path.to_owned()));
    }
    files.sort();
    Ok(files)
}

fn load_file(path: &Path, loaded: &mut Loaded) -> Result<(), LoadError> {
    let text = fs::read_to_string(path).map_err(read_error(path))?;
    for document in yaml::documents(&text) {
        let document_number = document.number;
        let parse_error = |message: String| LoadError::Parse {
            path: path.to_owned(),
            document: document_number,
            message,
        };
        let value = document
            .content
            .map_err(|e| parse_error(without_values(&e.to_string())))?;
        let field = |name: &str| {
            value
                .get(name)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_owned()
        };
        let (api_version, kind) = (field("apiVersion"), field("kind"));
        let cheiron = api_version == format!("{GROUP}/{VERSION}");
        let invalid = |kind: &'static str, name: String, message: String| LoadError::Invalid {
            path: path.to_owned(),
            document: document_number,
            kind,
            name,
            message,
        };
        match (cheiron, kind.as_str(), api_version.as_str()) {
            (true, "ImagePullSecretManager", _) => {
                let mut m: ImagePullSecretManager = typed(value, parse_error)?;
                if m.metadata.namespace.is_none() {
                    // As kubectl would place it.
                    m.metadata.namespace = Some("default".to_owned());
                }
                validate_namespaced(&m.spec)
                    .map_err(|e| invalid("ImagePullSecretManager", m.name_any(), e.to_string()))?;
                let compiled = Manager::from_namespaced(&m)
                    .map_err(|e| invalid("ImagePullSecretManager", m.name_any(), e.to_string()))?;
                let who = format!(
                    "ImagePullSecretManager {}/{}",
                    m.namespace().unwrap_or_default(),
                    m.name_any()
                );
                loaded.note_unusable_keys(&who, &m.spec.secrets, m.spec.merge_into.as_deref());
                loaded.managers.push(compiled);
            }
            (true, "ClusterImagePullSecretManager", _) => {
                let m: ClusterImagePullSecretManager = typed(value, parse_error)?;
                validate_cluster(&m.spec).map_err(|e| {
                    invalid("ClusterImagePullSecretManager", m.name_any(), e.to_string())
                })?;
                let compiled = Manager::from_cluster(&m).map_err(|e| {
                    invalid("ClusterImagePullSecretManager", m.name_any(), e.to_string())
                })?;
                let who = format!("ClusterImagePullSecretManager {}", m.name_any());
                loaded.note_unusable_keys(&who, &m.spec.secrets, m.spec.merge_into.as_deref());
                loaded.managers.push(compiled);
            }
            (_, "Namespace", "v1") => {
                let ns: Namespace = typed(value, parse_error)?;
                loaded.namespaces.push(NamespaceMeta {
                    name: ns.name_any(),
                    labels: ns.metadata.labels.into_iter().flatten().collect(),
                    annotations: ns.metadata.annotations.into_iter().flatten().collect(),
                });
            }
            _ => {
                return Err(LoadError::NotAManager {
                    path: path.to_owned(),
                    document: document_number,
                    kind: if kind.is_empty() {
                        "document without a kind".to_owned()
                    } else {
                        format!("{kind} ({api_version})")
                    },
                });
            }
        }
    }
    Ok(())
}

fn typed<T: DeserializeOwned>(
    value: serde_json::Value,
    error: impl FnOnce(String) -> LoadError,
) -> Result<T, LoadError> {
    // The field's path and what is wrong with it, as the apiserver says it; a value that may
    // be a credential is never repeated (see `decode`).
    decode::typed(value).map_err(|e| error(e.to_string()))
}

/// A [`Source`] over files read once at start; always ready.
#[derive(Debug, Default)]
pub struct FileSource {
    view: StaticView,
}

impl FileSource {
    /// Loads `paths` (see [`load_paths`]).
    pub fn load(paths: &[PathBuf]) -> Result<Self, LoadError> {
        let loaded = load_paths(paths)?;
        for warning in &loaded.unusable_keys {
            tracing::warn!("{warning}");
        }
        Ok(Self::from(loaded))
    }
}

impl From<Loaded> for FileSource {
    fn from(loaded: Loaded) -> Self {
        Self {
            view: StaticView::new(loaded.managers, loaded.namespaces),
        }
    }
}

impl Source for FileSource {
    fn view(&self) -> &dyn View {
        &self.view
    }
}

impl Readiness for FileSource {
    fn is_ready(&self) -> bool {
        true
    }
}
