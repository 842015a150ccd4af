//! Building the objects tests create, and reading what admission did to them.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Container, LocalObjectReference, Pod, PodSpec, ServiceAccount},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// `key=value` pairs as a label or annotation map (`None` when empty).
pub fn string_map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    (!pairs.is_empty()).then(|| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    })
}

fn references(names: &[&str]) -> Option<Vec<LocalObjectReference>> {
    (!names.is_empty()).then(|| {
        names
            .iter()
            .map(|n| LocalObjectReference {
                name: (*n).to_owned(),
            })
            .collect()
    })
}

/// A ServiceAccount with its own pull secrets (in this order) and annotations.
pub fn service_account(
    name: &str,
    own_pull_secrets: &[&str],
    annotations: &[(&str, &str)],
) -> ServiceAccount {
    ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            annotations: string_map(annotations),
            ..ObjectMeta::default()
        },
        image_pull_secrets: references(own_pull_secrets),
        ..ServiceAccount::default()
    }
}

/// A Pod as a controller creates it: only `generateName`, no name, no namespace.
pub fn pod(
    generate_name: &str,
    labels: &[(&str, &str)],
    own_pull_secrets: &[&str],
    annotations: &[(&str, &str)],
) -> Pod {
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name.to_owned()),
            labels: string_map(labels),
            annotations: string_map(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".to_owned(),
                image: Some("registry.example.com/team/app:1.0".to_owned()),
                ..Container::default()
            }],
            image_pull_secrets: references(own_pull_secrets),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// What admission left on an object.
pub trait Admitted {
    /// `imagePullSecrets` names, in order.
    fn pull_secret_names(&self) -> Vec<String>;
    /// The object's metadata.
    fn meta(&self) -> &ObjectMeta;
    /// One annotation.
    fn annotation(&self, key: &str) -> Option<&str> {
        self.meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }
}

fn names(references: Option<&Vec<LocalObjectReference>>) -> Vec<String> {
    references
        .map(|r| r.iter().map(|r| r.name.clone()).collect())
        .unwrap_or_default()
}

impl Admitted for ServiceAccount {
    fn pull_secret_names(&self) -> Vec<String> {
        names(self.image_pull_secrets.as_ref())
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl Admitted for Pod {
    fn pull_secret_names(&self) -> Vec<String> {
        names(
            self.spec
                .as_ref()
                .and_then(|s| s.image_pull_secrets.as_ref()),
        )
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

/// Server-side applies `object` (any kind the cluster serves) as `field_manager`, forcing
/// conflicts, as a dry run unless `persist`; an error names the object's kind and name.
pub async fn apply_object(
    client: &kube::Client,
    object: &serde_json::Value,
    field_manager: &str,
    persist: bool,
) -> crate::Result {
    use kube::{
        Api, ResourceExt,
        api::{DynamicObject, GroupVersionKind, Patch, PatchParams},
        discovery::{Scope, pinned_kind},
    };
    let object: DynamicObject = serde_json::from_value(object.clone())?;
    let types = object.types.clone().unwrap_or_default();
    let gvk = GroupVersionKind::try_from(&types)?;
    let (resource, capabilities) = pinned_kind(client, &gvk)
        .await
        .map_err(|e| format!("{} {}: not served: {e}", types.kind, object.name_any()))?;
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object.metadata.namespace.as_deref().unwrap_or("default"),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let mut params = PatchParams::apply(field_manager).force();
    if !persist {
        params = params.dry_run();
    }
    api.patch(&object.name_any(), &params, &Patch::Apply(&object))
        .await
        .map_err(|e| format!("{} {}: {e}", types.kind, object.name_any()))?;
    Ok(())
}

/// Creates ClusterRole `name` with `rules` and a ClusterRoleBinding of the same name that
/// grants it to `subject`.
pub async fn grant_cluster_role(
    client: &kube::Client,
    name: &str,
    rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>,
    subject: k8s_openapi::api::rbac::v1::Subject,
) -> crate::Result {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef};
    use kube::{Api, api::PostParams};
    let metadata = ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    };
    let role = ClusterRole {
        metadata: metadata.clone(),
        rules: Some(rules),
        aggregation_rule: None,
    };
    let binding = ClusterRoleBinding {
        metadata,
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: name.to_owned(),
        },
        subjects: Some(vec![subject]),
    };
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}
