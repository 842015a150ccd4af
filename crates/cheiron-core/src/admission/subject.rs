//! The object of an admission request, read only as far as admission needs: metadata's name,
//! labels and annotations, which parents exist, the pull secret list, and the image of each
//! container. Everything else (the rest of the containers, managedFields, status: most of a
//! 15 KB Pod) is skipped while parsing, which makes reading a review several times faster
//! than building a JSON tree of it.

use std::{borrow::Cow, collections::BTreeMap, fmt, marker::PhantomData};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{DynamicResourceScope, Resource};
use serde::{
    Deserialize, Deserializer, Serialize,
    de::{MapAccess, Visitor, value::MapAccessDeserializer},
};
use serde_json::Value;

use super::images::ContainerImages;
use crate::policy::{Subject, SubjectKind};

/// An object whose metadata or pull secret list has the wrong shape.
#[derive(Debug, thiserror::Error)]
#[error("cannot interpret the {kind} object: {reason}")]
pub struct Uninterpretable {
    /// Pod or ServiceAccount.
    pub kind: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// One entry of an `imagePullSecrets` list; entries without a name are kept as `""`.
#[derive(Deserialize)]
struct Reference {
    #[serde(default)]
    name: Option<String>,
}

type PullSecretList = Option<Vec<Option<Reference>>>;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataHead {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecHead {
    #[serde(default)]
    image_pull_secrets: PullSecretList,
    #[serde(default)]
    containers: ContainerImages,
    #[serde(default)]
    init_containers: ContainerImages,
    #[serde(default)]
    ephemeral_containers: ContainerImages,
}

/// A `T` read from a JSON object only. serde's derive also reads a struct from an array of its
/// fields in order, and an object read that way would be patched at paths that cannot exist
/// (`"metadata": []` would get `/metadata/annotations`, and the patch would not apply).
struct ObjectOnly<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(Fields(PhantomData))
            .map(ObjectOnly)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectHead {
    #[serde(default)]
    metadata: Option<ObjectOnly<MetadataHead>>,
    #[serde(default)]
    spec: Option<ObjectOnly<SpecHead>>,
    #[serde(default)]
    image_pull_secrets: PullSecretList,
}

/// An admitted object of any kind (kind and version come from the request), holding what
/// admission reads of it. `metadata` holds only name, generateName, namespace, labels and
/// annotations.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AdmittedObject {
    metadata: ObjectMeta,
    #[serde(skip)]
    has_metadata: bool,
    #[serde(skip)]
    has_spec: bool,
    #[serde(skip)]
    spec_pull_secrets: Option<Vec<String>>,
    #[serde(skip)]
    pull_secrets: Option<Vec<String>>,
    /// The images of `spec`'s containers, initContainers and ephemeralContainers.
    #[serde(skip)]
    images: Vec<String>,
}

fn names(list: PullSecretList) -> Option<Vec<String>> {
    list.map(|l| {
        l.into_iter()
            .flatten()
            .map(|r| r.name.unwrap_or_default())
            .collect()
    })
}

impl<'de> Deserialize<'de> for AdmittedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let ObjectOnly(head) = ObjectOnly::<ObjectHead>::deserialize(deserializer)?;
        let has_metadata = head.metadata.is_some();
        let metadata = head
            .metadata
            .map(|ObjectOnly(m)| ObjectMeta {
                name: m.name,
                generate_name: m.generate_name,
                namespace: m.namespace,
                labels: m.labels,
                annotations: m.annotations,
                ..ObjectMeta::default()
            })
            .unwrap_or_default();
        let has_spec = head.spec.is_some();
        let (spec_pull_secrets, images) = match head.spec {
            Some(ObjectOnly(spec)) => {
                let mut images = spec.containers.0;
                images.extend(spec.init_containers.0);
                images.extend(spec.ephemeral_containers.0);
                (names(spec.image_pull_secrets), images)
            }
            None => (None, Vec::new()),
        };
        Ok(Self {
            metadata,
            has_metadata,
            has_spec,
            spec_pull_secrets,
            pull_secrets: names(head.image_pull_secrets),
            images,
        })
    }
}

impl Resource for AdmittedObject {
    type DynamicType = ();
    type Scope = DynamicResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl AdmittedObject {
    /// What admission needs of this object, read as a `kind`.
    pub fn interpret(&self, kind: SubjectKind) -> Interpreted {
        let (has_parent, list, images) = match kind {
            SubjectKind::Pod => (self.has_spec, &self.spec_pull_secrets, &self.images[..]),
            SubjectKind::ServiceAccount => (true, &self.pull_secrets, &[][..]),
        };
        Interpreted {
            kind,
            name: self.metadata.name.clone().unwrap_or_default(),
            labels: self.metadata.labels.clone().unwrap_or_default(),
            annotations: self.metadata.annotations.clone().unwrap_or_default(),
            existing: list.clone().unwrap_or_default(),
            images: images.to_vec(),
            has_metadata: self.has_metadata,
            has_labels: self.metadata.labels.is_some(),
            has_annotations: self.metadata.annotations.is_some(),
            has_list_parent: has_parent,
            has_list: list.is_some(),
        }
    }
}

/// The fields of an admitted object the policy and patch builder read, and which of the
/// parents a patch appends to exist.
#[derive(Clone, Debug)]
pub struct Interpreted {
    /// Pod or ServiceAccount.
    pub kind: SubjectKind,
    /// `metadata.name`, empty when only `generateName` is set.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// The names already in the pull secret list, in order.
    pub existing: Vec<String>,
    /// A Pod's images: its containers', then initContainers', then ephemeralContainers'.
    /// Empty for a ServiceAccount.
    pub images: Vec<String>,
    /// `metadata` is an object.
    pub has_metadata: bool,
    /// `metadata.labels` is an object.
    pub has_labels: bool,
    /// `metadata.annotations` is an object.
    pub has_annotations: bool,
    /// The list's parent exists (`spec` of a Pod; always for a ServiceAccount).
    pub has_list_parent: bool,
    /// The pull secret list is an array.
    pub has_list: bool,
}

impl Interpreted {
    /// The policy's view of this object.
    pub fn subject(&self) -> Subject<'_> {
        Subject {
            kind: self.kind,
            name: &self.name,
            labels: &self.labels,
            annotations: &self.annotations,
            images: &self.images,
        }
    }
}

/// The tokens of the pull secret list's JSON Pointer for `kind`.
pub(super) fn list_tokens(kind: SubjectKind) -> &'static [&'static str] {
    match kind {
        SubjectKind::Pod => &["spec", "imagePullSecrets"],
        SubjectKind::ServiceAccount => &["imagePullSecrets"],
    }
}

/// Reads `object` (a Pod or ServiceAccount as JSON) as a `kind`.
pub fn interpret(object: &Value, kind: SubjectKind) -> Result<Interpreted, Uninterpretable> {
    if !object.is_object() {
        return Err(Uninterpretable {
            kind: kind.as_str(),
            reason: "not a JSON object".into(),
        });
    }
    AdmittedObject::deserialize(object)
        .map(|o| o.interpret(kind))
        .map_err(|e| Uninterpretable {
            kind: kind.as_str(),
            reason: diagnose(object).unwrap_or_else(|| e.to_string()),
        })
}

/// Names the part of `object` that does not have the expected shape.
fn diagnose(object: &Value) -> Option<String> {
    fn shape<'a, T: Deserialize<'a>>(object: &'a Value, key: &str) -> Option<String> {
        let part = object.get(key).filter(|v| !v.is_null())?;
        T::deserialize(part).err().map(|e| format!("{key}: {e}"))
    }
    shape::<MetadataHead>(object, "metadata")
        .or_else(|| shape::<SpecHead>(object, "spec"))
        .or_else(|| shape::<PullSecretList>(object, "imagePullSecrets"))
}
