use cheiron_core::policy::{ManagerId, ManagerKind};
use cheiron_core::registry::DOCKER_HUB_KEY;

use super::*;

fn cluster(name: &str) -> ManagerId {
    ManagerId {
        kind: ManagerKind::Cluster,
        namespace: None,
        name: name.to_owned(),
    }
}

fn namespaced(ns: &str, name: &str) -> ManagerId {
    ManagerId {
        kind: ManagerKind::Namespaced,
        namespace: Some(ns.to_owned()),
        name: name.to_owned(),
    }
}

fn secret(name: &str, manager: ManagerId, registries: &[&str]) -> ManagedSecret {
    ManagedSecret {
        name: name.to_owned(),
        manager,
        registries: registries.iter().map(|r| (*r).to_owned()).collect(),
    }
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

fn offered(manager: ManagerId, secret: &str, key: &str) -> OfferedCredential {
    OfferedCredential {
        manager,
        secret: secret.to_owned(),
        registry_key: key.to_owned(),
    }
}

fn rejected(attribution: Option<Attribution>) -> Vec<OfferedCredential> {
    match attribution {
        Some(Attribution::Rejected { credentials }) => credentials,
        other => panic!("expected Rejected, got {other:?}"),
    }
}

fn no_credential_registry(attribution: Option<Attribution>) -> Option<String> {
    match attribution {
        Some(Attribution::NoCredential { registry, image }) => {
            assert_eq!(image.domain(), registry);
            Some(registry)
        }
        _ => None,
    }
}

#[test]
fn a_matching_cheiron_secret_is_the_rejected_credential() {
    let managed = [secret("ghcr-creds", cluster("ghcr"), &["ghcr.io"])];
    let credentials = rejected(attribute(
        "ghcr.io/org/app:1",
        &names(&["ghcr-creds"]),
        &managed,
    ));
    assert_eq!(
        credentials,
        vec![offered(cluster("ghcr"), "ghcr-creds", "ghcr.io")]
    );
}

#[test]
fn docker_hub_short_names_match_the_default_key() {
    let managed = [secret("hub", namespaced("team", "hub"), &[DOCKER_HUB_KEY])];
    for image in [
        "nginx",
        "nginx:latest",
        "library/nginx",
        "docker.io/bitnami/redis:7",
    ] {
        let credentials = rejected(attribute(image, &names(&["hub"]), &managed));
        assert_eq!(
            credentials,
            vec![offered(namespaced("team", "hub"), "hub", DOCKER_HUB_KEY)],
            "{image}"
        );
    }
    // docker.io matches Docker Hub images too.
    let managed = [secret("hub", cluster("hub"), &["docker.io"])];
    assert_eq!(
        rejected(attribute("nginx", &names(&["hub"]), &managed)),
        vec![offered(cluster("hub"), "hub", "docker.io")]
    );
}

#[test]
fn of_several_secrets_only_the_one_offered_for_the_image_is_rejected() {
    let managed = [
        secret("hub", cluster("hub"), &[DOCKER_HUB_KEY]),
        secret("ghcr", cluster("ghcr"), &["ghcr.io"]),
        secret(
            "private",
            namespaced("apps", "private"),
            &["reg.example.com:5000"],
        ),
    ];
    let pod = names(&["hub", "ghcr", "private"]);
    assert_eq!(
        rejected(attribute("reg.example.com:5000/team/app:2", &pod, &managed)),
        vec![offered(
            namespaced("apps", "private"),
            "private",
            "reg.example.com:5000"
        )]
    );
    // The port is part of the registry: the same host without it is another one.
    assert_eq!(
        no_credential_registry(attribute("reg.example.com/team/app:2", &pod, &managed)),
        Some("reg.example.com".to_owned())
    );
}

#[test]
fn a_non_cheiron_secret_of_the_pod_plays_no_part() {
    // `by-hand` is not cheiron's: it is not in `managed`, so a refusal with only it offered is
    // a pull without cheiron's credential.
    let managed = [secret("ghcr", cluster("ghcr"), &["ghcr.io"])];
    assert_eq!(
        no_credential_registry(attribute(
            "quay.io/org/app",
            &names(&["by-hand", "ghcr"]),
            &managed
        )),
        Some("quay.io".to_owned())
    );
    assert_eq!(
        rejected(attribute(
            "ghcr.io/org/app",
            &names(&["by-hand", "ghcr"]),
            &managed
        )),
        vec![offered(cluster("ghcr"), "ghcr", "ghcr.io")]
    );
}

#[test]
fn a_cheiron_secret_the_pod_does_not_name_is_not_offered() {
    let managed = [secret("ghcr", cluster("ghcr"), &["ghcr.io"])];
    assert_eq!(
        no_credential_registry(attribute("ghcr.io/org/app", &names(&["other"]), &managed)),
        Some("ghcr.io".to_owned())
    );
    assert_eq!(
        no_credential_registry(attribute("nginx", &[], &managed)),
        Some("docker.io".to_owned())
    );
}

#[test]
fn the_docker_hub_default_key_is_not_offered_when_another_key_matches() {
    // The kubelet falls back to https://index.docker.io/v1/ only when no other key matched:
    // here the path-scoped docker.io/org key does, so only its Secret was refused.
    let managed = [
        secret("hub", cluster("hub"), &[DOCKER_HUB_KEY]),
        secret("hub-org", namespaced("apps", "hub-org"), &["docker.io/org"]),
    ];
    assert_eq!(
        rejected(attribute(
            "org/app:1",
            &names(&["hub", "hub-org"]),
            &managed
        )),
        vec![offered(
            namespaced("apps", "hub-org"),
            "hub-org",
            "docker.io/org"
        )]
    );
    // Another organisation's image falls back to the default key.
    assert_eq!(
        rejected(attribute(
            "other/app:1",
            &names(&["hub", "hub-org"]),
            &managed
        )),
        vec![offered(cluster("hub"), "hub", DOCKER_HUB_KEY)]
    );
}

#[test]
fn every_offered_cheiron_credential_is_listed_most_specific_first() {
    // Two managers serve the registry; the kubelet tried both credentials and both failed.
    let managed = [
        secret("whole", cluster("whole"), &["reg.example.com"]),
        secret(
            "team",
            namespaced("apps", "team"),
            &["reg.example.com/team"],
        ),
        secret("again", cluster("again"), &["https://reg.example.com"]),
    ];
    assert_eq!(
        rejected(attribute(
            "reg.example.com/team/app",
            &names(&["whole", "team", "again", "team"]),
            &managed
        )),
        vec![
            offered(namespaced("apps", "team"), "team", "reg.example.com/team"),
            offered(cluster("whole"), "whole", "reg.example.com"),
            offered(cluster("again"), "again", "https://reg.example.com"),
        ]
    );
}

#[test]
fn wildcard_keys_match_as_the_kubelet_matches_them() {
    let managed = [secret("wild", cluster("wild"), &["*.example.com"])];
    assert_eq!(
        rejected(attribute("a.example.com/app", &names(&["wild"]), &managed)),
        vec![offered(cluster("wild"), "wild", "*.example.com")]
    );
    // One label per `*`: a.b.example.com has a part more.
    assert_eq!(
        no_credential_registry(attribute(
            "a.b.example.com/app",
            &names(&["wild"]),
            &managed
        )),
        Some("a.b.example.com".to_owned())
    );
}

#[test]
fn an_image_that_does_not_parse_is_not_attributed() {
    let managed = [secret("ghcr", cluster("ghcr"), &["ghcr.io"])];
    for image in ["", "ghcr.io/Org/App", "ghcr.io//app", "nginx:"] {
        assert_eq!(
            attribute(image, &names(&["ghcr"]), &managed),
            None,
            "{image}"
        );
    }
}

#[test]
fn a_key_the_kubelet_cannot_read_is_never_offered() {
    // `https://index.docker.io/v1` (no trailing slash) reads as a repository path no image has.
    let managed = [secret(
        "hub",
        cluster("hub"),
        &["https://index.docker.io/v1"],
    )];
    assert_eq!(
        no_credential_registry(attribute("nginx", &names(&["hub"]), &managed)),
        Some("docker.io".to_owned())
    );
}

#[test]
fn offered_key_answers_whether_a_manager_serves_the_image() {
    let image = ImageRef::parse("nginx").unwrap();
    let registries = names(&["ghcr.io", DOCKER_HUB_KEY]);
    assert_eq!(offered_key(&registries, &image), Some(DOCKER_HUB_KEY));
    assert_eq!(offered_key(&names(&["ghcr.io"]), &image), None);
    assert_eq!(offered_key(&[], &image), None);
}
