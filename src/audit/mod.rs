//! `cheiron audit`: which Pods and ServiceAccounts lack the pull secrets policy says they
//! should have, why, and what fixes them. The judgement ([`lacking`]) is pure and is the
//! webhook's own decision ([`crate::policy::decide`]) applied to an object as it is now; the
//! controller's `cheiron_audit_findings` gauge counts with the same function. Pods whose pull
//! a registry refused are findings too ([`pulls`]).

use serde::Serialize;

use crate::{
    admission::Interpreted,
    policy::{Decision, Manager, NamespaceMeta, decide},
};

/// What policy wants of an object that the object does not have.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lacking {
    /// Every Secret policy says the object should reference, in the webhook's order.
    pub wanted: Vec<String>,
    /// Those of `wanted` the object does not reference.
    pub missing: Vec<String>,
    /// The managers that want them (`Kind ns/name`), oldest first.
    pub managers: Vec<String>,
}

/// What `object` in `namespace` lacks, judged by the webhook's decision over `managers`
/// (oldest first); `None` when it has all policy wants, or policy wants nothing of it.
pub fn lacking<'m>(
    object: &Interpreted,
    namespace: &NamespaceMeta,
    managers: impl IntoIterator<Item = &'m Manager>,
) -> Option<Lacking> {
    let Decision::Inject { secrets, managers } = decide(&object.subject(), namespace, managers)
    else {
        return None;
    };
    let missing: Vec<String> = secrets
        .iter()
        .filter(|name| !object.existing.contains(name))
        .cloned()
        .collect();
    (!missing.is_empty()).then(|| Lacking {
        wanted: secrets,
        missing,
        managers: managers.iter().map(ToString::to_string).collect(),
    })
}

pub mod cluster;
pub mod gauge;
pub mod pulls;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
/// Why an object lacks what policy wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Why {
    /// Created before every manager that wants something of it.
    AdmittedBeforeManager,
    /// cheiron's webhook is not registered in the cluster.
    WebhookAbsent,
    /// Created before the MutatingWebhookConfiguration that registers cheiron's webhook.
    AdmittedBeforeWebhook,
    /// A ServiceAccount the controller has not backfilled (it is not running, or its patch
    /// failed: see the manager's status).
    NotBackfilled,
    /// Admitted while the webhook did not answer (failurePolicy Ignore) or while the object
    /// or its namespace opted out.
    AdmittedWithoutWebhook,
    /// The registry refused the credential of a manager's Secret the Pod holds
    /// (docs/credential-health.md).
    PullRejected,
    /// A registry refused the Pod's pull, and a manager serves that registry, but the Pod holds
    /// none of its Secrets.
    NoCredential,
}

impl Why {
    /// The reason in words.
    pub fn words(self) -> &'static str {
        match self {
            Why::AdmittedBeforeManager => "admitted before the manager existed",
            Why::WebhookAbsent => {
                "the webhook is not registered (no MutatingWebhookConfiguration names inject.cheiron.anny.co)"
            }
            Why::AdmittedBeforeWebhook => "admitted before the webhook was registered",
            Why::NotBackfilled => {
                "not backfilled by the controller yet (is it running? see the manager's status)"
            }
            Why::AdmittedWithoutWebhook => {
                "admitted while the webhook did not answer, or while the object or its namespace opted out"
            }
            Why::PullRejected => "the registry refused the credential cheiron distributes",
            Why::NoCredential => {
                "the registry refused a pull without cheiron's credential, which a manager serves for it"
            }
        }
    }
}

/// One object lacking what policy wants.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// `Pod` or `ServiceAccount`.
    pub kind: &'static str,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `Kind/name` of the workload that owns it (through its ReplicaSet), if any.
    pub owner: Option<String>,
    /// What it lacks.
    #[serde(flatten)]
    pub lacking: Lacking,
    /// Why.
    pub why: Why,
    /// The reason in words.
    pub reason: &'static str,
    /// The command that fixes it.
    pub fix: String,
    /// The refused pull, for `pullRejected` and `noCredential`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull: Option<pulls::RefusedPull>,
}

/// Where cheiron's webhook stands in the cluster, as far as audit can see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registration {
    /// No MutatingWebhookConfiguration has the webhook.
    Absent,
    /// Registered, by a configuration created at this time (the oldest, if several).
    Since(Option<Time>),
    /// Audit may not list the configurations: the webhook is not blamed.
    Unknown,
}

/// Why a Pod created at `created` lacks what `wanting` (the creation times of the managers
/// that want something of it) want.
pub fn why_pod(created: Option<&Time>, wanting: &[Option<Time>], webhook: &Registration) -> Why {
    let before_all = created.is_some_and(|c| {
        wanting
            .iter()
            .all(|m| m.as_ref().is_some_and(|m| c.0 < m.0))
    });
    if before_all {
        Why::AdmittedBeforeManager
    } else {
        match webhook {
            Registration::Absent => Why::WebhookAbsent,
            Registration::Since(Some(since)) if created.is_some_and(|c| c.0 < since.0) => {
                Why::AdmittedBeforeWebhook
            }
            Registration::Since(_) | Registration::Unknown => Why::AdmittedWithoutWebhook,
        }
    }
}

/// The command that gives a Pod what it lacks: restart its workload, or recreate it.
pub fn pod_fix(namespace: &str, name: &str, owner: Option<&str>) -> String {
    match owner {
        Some(owner)
            if ["Deployment/", "StatefulSet/", "DaemonSet/"]
                .iter()
                .any(|k| owner.starts_with(k)) =>
        {
            format!(
                "kubectl rollout restart {} -n {namespace}",
                owner.to_ascii_lowercase_kind()
            )
        }
        Some(owner) => {
            format!("kubectl delete pod {name} -n {namespace}  # {owner} creates it again")
        }
        None => format!("kubectl delete pod {name} -n {namespace}, then create it again"),
    }
}

trait LowerKind {
    fn to_ascii_lowercase_kind(&self) -> String;
}

impl LowerKind for str {
    /// `Deployment/web` as kubectl takes it: `deployment/web`.
    fn to_ascii_lowercase_kind(&self) -> String {
        match self.split_once('/') {
            Some((kind, name)) => format!("{}/{name}", kind.to_ascii_lowercase()),
            None => self.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Option<Time> {
        Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap_or_default(),
        ))
    }

    #[test]
    fn a_pod_older_than_every_wanting_manager_was_admitted_before_it() {
        let since = |t| Registration::Since(at(t));
        assert_eq!(
            why_pod(at(10).as_ref(), &[at(20), at(30)], &since(0)),
            Why::AdmittedBeforeManager
        );
        assert_eq!(
            why_pod(at(25).as_ref(), &[at(20), at(30)], &since(0)),
            Why::AdmittedWithoutWebhook
        );
        assert_eq!(
            why_pod(at(25).as_ref(), &[at(20)], &Registration::Absent),
            Why::WebhookAbsent
        );
        assert_eq!(
            why_pod(at(25).as_ref(), &[at(20)], &since(40)),
            Why::AdmittedBeforeWebhook
        );
        assert_eq!(
            why_pod(at(25).as_ref(), &[at(20)], &Registration::Unknown),
            Why::AdmittedWithoutWebhook
        );
        assert_eq!(
            why_pod(None, &[at(20)], &since(40)),
            Why::AdmittedWithoutWebhook
        );
    }

    #[test]
    fn the_fix_restarts_the_workload_or_recreates_a_bare_pod() {
        assert_eq!(
            pod_fix("apps", "web-1", Some("Deployment/web")),
            "kubectl rollout restart deployment/web -n apps"
        );
        assert_eq!(
            pod_fix("apps", "db-0", Some("StatefulSet/db")),
            "kubectl rollout restart statefulset/db -n apps"
        );
        assert_eq!(
            pod_fix("apps", "job-x", Some("Job/job")),
            "kubectl delete pod job-x -n apps  # Job/job creates it again"
        );
        assert_eq!(
            pod_fix("apps", "bare", None),
            "kubectl delete pod bare -n apps, then create it again"
        );
    }
}
