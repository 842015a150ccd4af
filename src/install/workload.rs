//! cheiron's own objects: its Namespace and ServiceAccount, the Deployment running
//! `cheiron run` (webhook on every replica, leader-elected controller), its Service and its
//! PodDisruptionBudget.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment},
        core::v1::{
            Affinity, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, Namespace,
            ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity, PodSpec, PodTemplateSpec, Probe,
            ResourceRequirements, SecretVolumeSource, Service, ServiceAccount, ServicePort,
            ServiceSpec, Volume, VolumeMount, WeightedPodAffinityTerm,
        },
        policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec},
    },
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{LabelSelector, ObjectMeta},
        util::intstr::IntOrString,
    },
};

use super::installation::{
    ADMIN_PORT, Install, LEASE, NAME, SERVICE_PORT, SHUTDOWN_DELAY_SECONDS,
    TERMINATION_GRACE_PERIOD_SECONDS, TLS_DIR, TLS_SECRET, WEBHOOK_PORT,
};

// The grace period outlasts the shutdown delay, with room to drain and release the Lease.
const _: () = assert!(TERMINATION_GRACE_PERIOD_SECONDS >= SHUTDOWN_DELAY_SECONDS + 15);

/// The component label of the Deployment's Pods (they serve the webhook; the controller runs
/// inside them too).
const COMPONENT: &str = "webhook";

/// cheiron's namespace, enforcing the restricted Pod Security Standard that its Pods meet.
pub fn namespace(install: &Install) -> Namespace {
    let mut labels = install.labels("namespace");
    for mode in ["enforce", "audit", "warn"] {
        labels.insert(
            format!("pod-security.kubernetes.io/{mode}"),
            "restricted".into(),
        );
    }
    Namespace {
        metadata: ObjectMeta {
            name: Some(install.namespace.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// A ServiceAccount in cheiron's namespace.
pub fn service_account(install: &Install, name: &str, component: &str) -> ServiceAccount {
    ServiceAccount {
        metadata: install.meta(name, component),
        ..ServiceAccount::default()
    }
}

/// The Service the apiserver calls (`https` → `--listen`), also exposing the admin port for
/// scraping `/metrics`.
pub fn service(install: &Install) -> Service {
    Service {
        metadata: install.meta(NAME, COMPONENT),
        spec: Some(ServiceSpec {
            selector: Some(install.selector(COMPONENT)),
            ports: Some(vec![
                ServicePort {
                    name: Some("https".to_owned()),
                    port: SERVICE_PORT,
                    target_port: Some(IntOrString::String("https".to_owned())),
                    protocol: Some("TCP".to_owned()),
                    ..ServicePort::default()
                },
                ServicePort {
                    name: Some("metrics".to_owned()),
                    port: ADMIN_PORT,
                    target_port: Some(IntOrString::String("admin".to_owned())),
                    protocol: Some("TCP".to_owned()),
                    ..ServicePort::default()
                },
            ]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".to_owned()),
                field_path: path.to_owned(),
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("admin".to_owned()),
            scheme: Some("HTTP".to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// The arguments of `cheiron run` in the Deployment. No preStop hook: on SIGTERM cheiron
/// itself fails `/readyz` at once and keeps serving for `--shutdown-delay` seconds, so the
/// endpoints are updated before it stops; [`TERMINATION_GRACE_PERIOD_SECONDS`] leaves room for
/// that, the drain and the Lease release.
pub fn run_args() -> Vec<String> {
    vec![
        "run".to_owned(),
        format!("--listen=0.0.0.0:{WEBHOOK_PORT}"),
        format!("--admin-listen=0.0.0.0:{ADMIN_PORT}"),
        format!("--tls-cert-dir={TLS_DIR}"),
        format!("--shutdown-delay={SHUTDOWN_DELAY_SECONDS}"),
        "--leader-election".to_owned(),
        format!("--leader-election-id={LEASE}"),
        "--log-format=json".to_owned(),
        "--log=info".to_owned(),
    ]
}

/// Two replicas of `cheiron run`, spread over nodes, non-root with a read-only root filesystem,
/// probed on the admin port, the serving certificate mounted from [`TLS_SECRET`].
pub fn deployment(install: &Install) -> Deployment {
    let selector = install.selector(COMPONENT);
    let container = Container {
        name: NAME.to_owned(),
        image: Some(install.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec!["cheiron".to_owned()]),
        args: Some(run_args()),
        env: Some(vec![
            field_env("CHEIRON_POD_NAME", "metadata.name"),
            field_env("CHEIRON_POD_NAMESPACE", "metadata.namespace"),
        ]),
        ports: Some(vec![
            ContainerPort {
                name: Some("https".to_owned()),
                container_port: WEBHOOK_PORT,
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("admin".to_owned()),
                container_port: ADMIN_PORT,
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            },
        ]),
        liveness_probe: Some(probe("/healthz", 10, 3)),
        readiness_probe: Some(probe("/readyz", 5, 2)),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&[("cpu", "50m"), ("memory", "64Mi")])),
            limits: Some(quantities(&[("memory", "256Mi")])),
            claims: None,
        }),
        security_context: Some(install.container_security_context()),
        volume_mounts: Some(vec![VolumeMount {
            name: "tls".to_owned(),
            mount_path: TLS_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    Deployment {
        metadata: install.meta(NAME, COMPONENT),
        spec: Some(DeploymentSpec {
            replicas: Some(2),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                match_expressions: None,
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(install.labels(COMPONENT)),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(NAME.to_owned()),
                    enable_service_links: Some(false),
                    security_context: Some(install.pod_security_context()),
                    termination_grace_period_seconds: Some(TERMINATION_GRACE_PERIOD_SECONDS),
                    affinity: Some(Affinity {
                        pod_anti_affinity: Some(PodAntiAffinity {
                            preferred_during_scheduling_ignored_during_execution: Some(vec![
                                WeightedPodAffinityTerm {
                                    weight: 100,
                                    pod_affinity_term: PodAffinityTerm {
                                        topology_key: "kubernetes.io/hostname".to_owned(),
                                        label_selector: Some(LabelSelector {
                                            match_labels: Some(selector),
                                            match_expressions: None,
                                        }),
                                        ..PodAffinityTerm::default()
                                    },
                                },
                            ]),
                            required_during_scheduling_ignored_during_execution: None,
                        }),
                        ..Affinity::default()
                    }),
                    containers: vec![container],
                    volumes: Some(vec![Volume {
                        name: "tls".to_owned(),
                        secret: Some(SecretVolumeSource {
                            secret_name: Some(TLS_SECRET.to_owned()),
                            default_mode: Some(0o440),
                            optional: Some(false),
                            items: None,
                        }),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// At most one replica down for voluntary disruptions; an unhealthy Pod never blocks a drain.
pub fn pod_disruption_budget(install: &Install) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: install.meta(NAME, COMPONENT),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(install.selector(COMPONENT)),
                match_expressions: None,
            }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_owned()),
            min_available: None,
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_period_outlasts_the_shutdown_delay_with_room_to_drain() {
        let spec = deployment(&Install::default())
            .spec
            .and_then(|s| s.template.spec)
            .unwrap_or_default();
        assert_eq!(
            spec.termination_grace_period_seconds,
            Some(TERMINATION_GRACE_PERIOD_SECONDS)
        );
        let args = spec.containers[0].args.clone().unwrap_or_default();
        assert!(args.contains(&format!("--shutdown-delay={SHUTDOWN_DELAY_SECONDS}")));
    }

    #[test]
    fn run_args_parse_as_cheiron_run() {
        use clap::Parser;
        let args = std::iter::once("cheiron".to_owned()).chain(run_args());
        assert!(crate::cli::Cli::try_parse_from(args).is_ok());
    }

    #[test]
    fn the_service_selects_only_the_deployment_pods() {
        let install = Install::default();
        let service_selector = service(&install)
            .spec
            .and_then(|s| s.selector)
            .unwrap_or_default();
        assert_eq!(
            service_selector
                .get("app.kubernetes.io/component")
                .map(String::as_str),
            Some(COMPONENT)
        );
        let pod_labels = deployment(&install)
            .spec
            .and_then(|s| s.template.metadata)
            .and_then(|m| m.labels)
            .unwrap_or_default();
        for (key, value) in &service_selector {
            assert_eq!(pod_labels.get(key), Some(value));
        }
    }
}
