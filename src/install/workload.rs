//! cheiron's own objects: its Namespace and ServiceAccounts, the Deployments of its
//! [`Workload`]s (the webhook and the leader-elected controller apart, or `cheiron run`), the
//! Services in front of them and their PodDisruptionBudgets.

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
    ADMIN_PORT, CONTROLLER, CredentialProviderSetup, Install, LEASE, MetricsAuth, NAME,
    SERVICE_PORT, SHUTDOWN_DELAY_SECONDS, TERMINATION_GRACE_PERIOD_SECONDS, TLS_DIR, TLS_SECRET,
    Workload,
};

// The grace period outlasts the shutdown delay, with room to drain and release the Lease.
const _: () = assert!(TERMINATION_GRACE_PERIOD_SECONDS >= SHUTDOWN_DELAY_SECONDS + 15);

/// cheiron's namespace, enforcing the restricted Pod Security Standard that its Pods meet;
/// `privileged` when the webhook runs on the node's network, which no other level allows.
pub fn namespace(install: &Install) -> Namespace {
    let mut labels = install.labels("namespace");
    let level = if install.webhook.host_network {
        "privileged"
    } else {
        "restricted"
    };
    for mode in ["enforce", "audit", "warn"] {
        labels.insert(format!("pod-security.kubernetes.io/{mode}"), level.into());
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

/// The Service the apiserver calls (`https` → `--listen`), also exposing the admin port of
/// the Pods that serve the webhook for scraping `/metrics`.
pub fn service(install: &Install) -> Service {
    let component = Workload::Webhook.component();
    Service {
        metadata: install.meta(NAME, component),
        spec: Some(ServiceSpec {
            selector: Some(install.selector(component)),
            ports: Some(vec![
                ServicePort {
                    name: Some("https".to_owned()),
                    port: SERVICE_PORT,
                    target_port: Some(IntOrString::String("https".to_owned())),
                    protocol: Some("TCP".to_owned()),
                    ..ServicePort::default()
                },
                metrics_port(),
            ]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The controller's Service ([`super::DeploymentMode::Split`] only): nothing calls the
/// controller, but Prometheus finds its `/metrics` through it.
pub fn controller_service(install: &Install) -> Service {
    let component = Workload::Controller.component();
    Service {
        metadata: install.meta(CONTROLLER, component),
        spec: Some(ServiceSpec {
            selector: Some(install.selector(component)),
            ports: Some(vec![metrics_port()]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn metrics_port() -> ServicePort {
    ServicePort {
        name: Some("metrics".to_owned()),
        port: ADMIN_PORT,
        target_port: Some(IntOrString::String("admin".to_owned())),
        protocol: Some("TCP".to_owned()),
        ..ServicePort::default()
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

/// A probe of the admin port, over HTTPS when it serves HTTPS (`--admin-tls-cert-dir`; the
/// kubelet does not verify the certificate of a probe).
fn probe(path: &str, period: i32, failures: i32, https: bool) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("admin".to_owned()),
            scheme: Some(if https { "HTTPS" } else { "HTTP" }.to_owned()),
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

/// The arguments of `workload`'s container in `install`: `webhook`, `controller` or `run`, and
/// their flags.
/// No preStop hook: on SIGTERM the webhook itself fails `/readyz` at once and keeps serving
/// for `--shutdown-delay` seconds, so the endpoints are updated before it stops;
/// [`TERMINATION_GRACE_PERIOD_SECONDS`] leaves room for that, the drain and the Lease release.
pub fn container_args(install: &Install, workload: Workload) -> Vec<String> {
    let command = match workload {
        Workload::Webhook => "webhook",
        Workload::Controller => "controller",
        Workload::Combined => "run",
    };
    let mut args = vec![command.to_owned()];
    if workload.serves_webhook() {
        args.push(format!("--listen=0.0.0.0:{}", install.webhook.port));
    }
    args.push(format!("--admin-listen=0.0.0.0:{ADMIN_PORT}"));
    if install.metrics_auth != MetricsAuth::None {
        args.push(format!("--metrics-auth={}", install.metrics_auth));
        // Bearer tokens only over HTTPS, with the webhook's serving certificate.
        args.push(format!("--admin-tls-cert-dir={TLS_DIR}"));
    }
    if workload.serves_webhook() {
        args.push(format!("--tls-cert-dir={TLS_DIR}"));
        args.push(format!("--shutdown-delay={SHUTDOWN_DELAY_SECONDS}"));
    }
    if workload.runs_controller() {
        args.push("--leader-election".to_owned());
        args.push(format!("--leader-election-id={LEASE}"));
    }
    if let (true, Some(fleet)) = (workload.runs_controller(), &install.fleet) {
        args.push("--fleet".to_owned());
        args.extend(
            fleet
                .namespaces_in(&install.namespace)
                .iter()
                .map(|ns| format!("--fleet-namespace={ns}")),
        );
    }
    if let (true, Some(node)) = (workload.runs_controller(), &install.node_agent) {
        // The node agents' report Leases are in their own namespace (docs/node.md).
        args.push(format!(
            "--node-namespace={}",
            node.namespace_of(&install.namespace)
        ));
    }
    if workload.runs_controller() && install.credential_providers.is_some() {
        args.extend(CredentialProviderSetup::args());
    }
    args.push("--log-format=json".to_owned());
    args.push("--log=info".to_owned());
    args
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }
}

/// Two replicas of `workload`, spread over nodes, non-root with a read-only root filesystem,
/// probed on the admin port. Pods that serve the webhook mount the serving certificate from
/// [`TLS_SECRET`], and so does the controller with `--metrics-auth kubernetes` (its admin
/// port serves HTTPS with it); the controller's two replicas are one leader and one warm
/// standby.
pub fn deployment(install: &Install, workload: Workload) -> Deployment {
    let selector = install.selector(workload.component());
    let host_network = workload.serves_webhook() && install.webhook.host_network;
    let (volume_mounts, volumes) = mounts(install, workload);
    let init_containers = install
        .credential_providers
        .as_ref()
        .filter(|_| workload.runs_controller())
        .and_then(|c| c.init_container(install))
        .map(|c| vec![c]);
    Deployment {
        metadata: install.meta(workload.name(), workload.component()),
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
                    labels: Some(install.labels(workload.component())),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(workload.name().to_owned()),
                    enable_service_links: Some(false),
                    host_network: host_network.then_some(true),
                    // On the node's network, cluster DNS only with this policy.
                    dns_policy: host_network.then(|| "ClusterFirstWithHostNet".to_owned()),
                    security_context: Some(install.pod_security_context()),
                    termination_grace_period_seconds: Some(TERMINATION_GRACE_PERIOD_SECONDS),
                    affinity: Some(spread_over_nodes(selector)),
                    init_containers,
                    containers: vec![container(install, workload, volume_mounts)],
                    volumes,
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// The volumes of `workload`'s Pod and where its container mounts them: the serving
/// certificate where it serves HTTPS, the credential providers' plugins and configuration
/// where it runs the controller with them. `None` for both when there are none.
fn mounts(
    install: &Install,
    workload: Workload,
) -> (Option<Vec<VolumeMount>>, Option<Vec<Volume>>) {
    let mut volume_mounts = Vec::new();
    let mut volumes = Vec::new();
    if workload.serves_webhook() || install.metrics_auth == MetricsAuth::Kubernetes {
        volume_mounts.push(VolumeMount {
            name: "tls".to_owned(),
            mount_path: TLS_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        volumes.push(Volume {
            name: "tls".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(TLS_SECRET.to_owned()),
                default_mode: Some(0o440),
                optional: Some(false),
                items: None,
            }),
            ..Volume::default()
        });
    }
    if install.credential_providers.is_some() && workload.runs_controller() {
        volume_mounts.extend(CredentialProviderSetup::volume_mounts());
        volumes.extend(CredentialProviderSetup::volumes());
    }
    if volumes.is_empty() {
        (None, None)
    } else {
        (Some(volume_mounts), Some(volumes))
    }
}

/// `cheiron` with `workload`'s arguments, its ports, probes and resources.
fn container(
    install: &Install,
    workload: Workload,
    volume_mounts: Option<Vec<VolumeMount>>,
) -> Container {
    let admin_https = install.metrics_auth == MetricsAuth::Kubernetes;
    let mut ports = Vec::new();
    if workload.serves_webhook() {
        ports.push(container_port("https", install.webhook.port));
    }
    ports.push(container_port("admin", ADMIN_PORT));
    Container {
        name: NAME.to_owned(),
        image: Some(install.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        command: Some(vec!["cheiron".to_owned()]),
        args: Some(container_args(install, workload)),
        env: Some(vec![
            field_env("CHEIRON_POD_NAME", "metadata.name"),
            field_env("CHEIRON_POD_NAMESPACE", "metadata.namespace"),
        ]),
        ports: Some(ports),
        liveness_probe: Some(probe("/healthz", 10, 3, admin_https)),
        readiness_probe: Some(probe("/readyz", 5, 2, admin_https)),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&[("cpu", "50m"), ("memory", "64Mi")])),
            limits: Some(quantities(&[("memory", "256Mi")])),
            claims: None,
        }),
        security_context: Some(install.container_security_context()),
        volume_mounts,
        ..Container::default()
    }
}

/// Replicas preferably on different nodes, so that one node's loss takes one of them.
fn spread_over_nodes(selector: BTreeMap<String, String>) -> Affinity {
    Affinity {
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
    }
}

/// At most one replica of `workload` down for voluntary disruptions; an unhealthy Pod never
/// blocks a drain.
pub fn pod_disruption_budget(install: &Install, workload: Workload) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: install.meta(workload.name(), workload.component()),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(install.selector(workload.component())),
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
    use crate::install::{DeploymentMode, WEBHOOK_PORT, WebhookNetwork};

    #[test]
    fn on_the_nodes_network_only_the_webhook_pods_move_and_the_namespace_allows_them() {
        let install = Install {
            webhook: WebhookNetwork {
                port: 10250,
                host_network: true,
            },
            ..Install::default()
        };
        for workload in [Workload::Webhook, Workload::Controller, Workload::Combined] {
            let spec = deployment(&install, workload)
                .spec
                .and_then(|s| s.template.spec)
                .unwrap_or_default();
            let serves = workload.serves_webhook();
            assert_eq!(spec.host_network, serves.then_some(true), "{workload:?}");
            assert_eq!(
                spec.dns_policy.as_deref(),
                serves.then_some("ClusterFirstWithHostNet"),
                "{workload:?}"
            );
            let ports: Vec<i32> = spec.containers[0]
                .ports
                .iter()
                .flatten()
                .map(|p| p.container_port)
                .collect();
            assert_eq!(ports.contains(&10250), serves, "{workload:?}");
            assert!(!ports.contains(&WEBHOOK_PORT), "{workload:?}");
            let listen =
                container_args(&install, workload).contains(&"--listen=0.0.0.0:10250".to_owned());
            assert_eq!(listen, serves, "{workload:?}");
        }
        let levels = |install: &Install| {
            namespace(install)
                .metadata
                .labels
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| k.starts_with("pod-security.kubernetes.io/"))
                .map(|(_, v)| v)
                .collect::<Vec<_>>()
        };
        assert_eq!(levels(&install), ["privileged"; 3]);
        assert_eq!(levels(&Install::default()), ["restricted"; 3]);
    }

    const ALL: [Workload; 3] = [Workload::Webhook, Workload::Controller, Workload::Combined];

    fn pod_spec(workload: Workload) -> PodSpec {
        deployment(&Install::default(), workload)
            .spec
            .and_then(|s| s.template.spec)
            .unwrap_or_default()
    }

    #[test]
    fn grace_period_outlasts_the_shutdown_delay_with_room_to_drain() {
        for workload in ALL {
            let spec = pod_spec(workload);
            assert_eq!(
                spec.termination_grace_period_seconds,
                Some(TERMINATION_GRACE_PERIOD_SECONDS)
            );
            let args = spec.containers[0].args.clone().unwrap_or_default();
            assert_eq!(
                args.contains(&format!("--shutdown-delay={SHUTDOWN_DELAY_SECONDS}")),
                workload.serves_webhook(),
                "{workload:?}: {args:?}"
            );
        }
    }

    #[test]
    fn container_args_parse_as_their_cheiron_command() {
        use clap::Parser;
        for metrics_auth in [MetricsAuth::None, MetricsAuth::Kubernetes] {
            let install = Install {
                metrics_auth,
                ..Install::default()
            };
            for workload in ALL {
                let args =
                    std::iter::once("cheiron".to_owned()).chain(container_args(&install, workload));
                let parsed = crate::cli::Cli::try_parse_from(args);
                assert!(parsed.is_ok(), "{metrics_auth} {workload:?}: {parsed:?}");
            }
        }
    }

    #[test]
    fn every_workload_protects_its_metrics_only_when_asked_to() {
        let kubernetes = Install {
            metrics_auth: MetricsAuth::Kubernetes,
            ..Install::default()
        };
        for workload in ALL {
            let flag = |install: &Install| {
                container_args(install, workload)
                    .into_iter()
                    .filter(|a| a.starts_with("--metrics-auth") || a.starts_with("--admin-tls"))
                    .collect::<Vec<_>>()
            };
            assert!(flag(&Install::default()).is_empty(), "{workload:?}");
            assert_eq!(
                flag(&kubernetes),
                [
                    "--metrics-auth=kubernetes".to_owned(),
                    format!("--admin-tls-cert-dir={TLS_DIR}")
                ],
                "{workload:?}"
            );
        }
    }

    #[test]
    fn with_metrics_auth_every_workload_mounts_the_certificate_and_probes_over_https() {
        let kubernetes = Install {
            metrics_auth: MetricsAuth::Kubernetes,
            ..Install::default()
        };
        for (install, https) in [(Install::default(), false), (kubernetes, true)] {
            for workload in ALL {
                let spec = deployment(&install, workload)
                    .spec
                    .and_then(|s| s.template.spec)
                    .unwrap_or_default();
                let container = &spec.containers[0];
                for probe in [&container.liveness_probe, &container.readiness_probe] {
                    let scheme = probe
                        .as_ref()
                        .and_then(|p| p.http_get.as_ref())
                        .and_then(|g| g.scheme.as_deref());
                    let expected = if https { "HTTPS" } else { "HTTP" };
                    assert_eq!(scheme, Some(expected), "{workload:?}");
                }
                let mounted = container
                    .volume_mounts
                    .iter()
                    .flatten()
                    .any(|m| m.name == "tls" && m.mount_path == TLS_DIR);
                assert_eq!(mounted, https || workload.serves_webhook(), "{workload:?}");
            }
        }
    }

    #[test]
    fn only_pods_that_serve_the_webhook_mount_the_certificate_or_open_its_port() {
        for workload in ALL {
            let spec = pod_spec(workload);
            let container = &spec.containers[0];
            let ports: Vec<i32> = container
                .ports
                .iter()
                .flatten()
                .map(|p| p.container_port)
                .collect();
            let mounts_tls = spec.volumes.iter().flatten().any(|v| {
                v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some(TLS_SECRET)
            });
            assert_eq!(mounts_tls, workload.serves_webhook(), "{workload:?}");
            assert_eq!(
                ports.contains(&WEBHOOK_PORT),
                workload.serves_webhook(),
                "{workload:?}"
            );
            assert!(ports.contains(&ADMIN_PORT), "{workload:?}");
        }
    }

    #[test]
    fn each_workload_runs_under_its_own_service_account() {
        for mode in DeploymentMode::ALL {
            let names: Vec<Option<String>> = mode
                .workloads()
                .iter()
                .map(|w| pod_spec(*w).service_account_name)
                .collect();
            let distinct: std::collections::BTreeSet<_> = names.iter().collect();
            assert_eq!(distinct.len(), names.len(), "{mode}: {names:?}");
        }
        assert_eq!(
            pod_spec(Workload::Webhook).service_account_name.as_deref(),
            Some("cheiron-webhook")
        );
        assert_eq!(
            pod_spec(Workload::Controller)
                .service_account_name
                .as_deref(),
            Some("cheiron-controller")
        );
    }

    fn selects(selector: &BTreeMap<String, String>, workload: Workload) -> bool {
        let pod_labels = deployment(&Install::default(), workload)
            .spec
            .and_then(|s| s.template.metadata)
            .and_then(|m| m.labels)
            .unwrap_or_default();
        selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v))
    }

    #[test]
    fn the_service_selects_exactly_the_pods_that_serve_the_webhook() {
        let install = Install::default();
        let service_selector = service(&install)
            .spec
            .and_then(|s| s.selector)
            .unwrap_or_default();
        for workload in ALL {
            assert_eq!(
                selects(&service_selector, workload),
                workload.serves_webhook(),
                "{workload:?}"
            );
        }
        let controller_selector = controller_service(&install)
            .spec
            .and_then(|s| s.selector)
            .unwrap_or_default();
        assert!(selects(&controller_selector, Workload::Controller));
        assert!(!selects(&controller_selector, Workload::Webhook));
    }
}
