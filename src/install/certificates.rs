//! The `cheiron-certs` Job of the plain manifests: `create` stores the serving certificate in
//! [`TLS_SECRET`] and its CA in `<TLS_SECRET>-ca` (idempotent: valid ones are kept), then
//! `patch` writes the CA into the MutatingWebhookConfiguration's `caBundle`. `create` runs as an init container so that
//! `patch` starts only after it succeeded.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        batch::v1::{Job, JobSpec},
        core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements},
    },
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ObjectMeta},
};

use super::installation::{CERTIFICATES, Install, NAME, TLS_SECRET};

const COMPONENT: &str = "certificates";

/// Seconds a finished Job is kept: long enough to read its logs, short enough that applying
/// the manifests again (an upgrade changes the image, and a Job's template is immutable)
/// creates a fresh Job instead of failing.
pub const JOB_TTL_SECONDS: i32 = 600;

/// `cheiron-certs create` arguments.
pub fn create_args(namespace: &str) -> Vec<String> {
    vec![
        "create".to_owned(),
        format!("--service={NAME}"),
        format!("--namespace={namespace}"),
        format!("--secret-name={TLS_SECRET}"),
    ]
}

/// `cheiron-certs patch` arguments.
pub fn patch_args(namespace: &str) -> Vec<String> {
    vec![
        "patch".to_owned(),
        format!("--webhook-name={NAME}"),
        format!("--secret-name={TLS_SECRET}"),
        format!("--namespace={namespace}"),
    ]
}

/// The Job.
pub fn job(install: &Install) -> Job {
    let container = |name: &str, args: Vec<String>| Container {
        name: name.to_owned(),
        image: Some(install.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec!["cheiron-certs".to_owned()]),
        args: Some(args),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("10m".to_owned())),
                ("memory".to_owned(), Quantity("32Mi".to_owned())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity("64Mi".to_owned()),
            )])),
            claims: None,
        }),
        security_context: Some(install.container_security_context()),
        ..Container::default()
    };
    Job {
        metadata: install.meta(CERTIFICATES, COMPONENT),
        spec: Some(JobSpec {
            backoff_limit: Some(6),
            ttl_seconds_after_finished: Some(JOB_TTL_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(install.labels(COMPONENT)),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(CERTIFICATES.to_owned()),
                    restart_policy: Some("OnFailure".to_owned()),
                    enable_service_links: Some(false),
                    security_context: Some(install.pod_security_context()),
                    init_containers: Some(vec![container(
                        "create",
                        create_args(&install.namespace),
                    )]),
                    containers: vec![container("patch", patch_args(&install.namespace))],
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_runs_before_patch_with_the_same_secret() {
        let spec = job(&Install::default())
            .spec
            .and_then(|s| s.template.spec)
            .unwrap_or_default();
        let init = spec.init_containers.unwrap_or_default();
        assert_eq!(init.len(), 1);
        assert_eq!(init[0].args.as_ref().map(|a| a[0].as_str()), Some("create"));
        assert_eq!(
            spec.containers[0].args.as_ref().map(|a| a[0].as_str()),
            Some("patch")
        );
        for args in [create_args("ns"), patch_args("ns")] {
            assert!(args.contains(&format!("--secret-name={TLS_SECRET}")));
            assert!(args.contains(&"--namespace=ns".to_owned()));
        }
    }
}
