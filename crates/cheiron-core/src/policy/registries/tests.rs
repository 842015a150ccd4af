//! `injection: MatchingImages` on plain values: which Secrets a Pod gets for its images, where
//! the registries come from (spec, status, neither), and the interning of equal lists.

use std::collections::BTreeMap;

use super::*;
use crate::{
    api::{ClusterImagePullSecretManager, ImagePullSecretManager},
    policy::{Decision, Manager, ManagerIndex, NamespaceMeta, Skip, Subject, SubjectKind, decide},
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn namespaced(yaml: &str) -> Result<Manager, Box<dyn std::error::Error>> {
    let m: ImagePullSecretManager = serde_saphyr::from_str(yaml)?;
    Ok(Manager::from_namespaced(&m)?)
}

fn cluster(yaml: &str) -> Result<Manager, Box<dyn std::error::Error>> {
    let m: ClusterImagePullSecretManager = serde_saphyr::from_str(yaml)?;
    Ok(Manager::from_cluster(&m)?)
}

/// What a Pod pulling `images` in namespace `team` gets from `managers`.
fn injected_for(images: &[&str], managers: &[&Manager]) -> Decision {
    let empty = BTreeMap::new();
    let images: Vec<String> = images.iter().map(|i| (*i).to_owned()).collect();
    let subject = Subject {
        kind: SubjectKind::Pod,
        name: "",
        labels: &empty,
        annotations: &empty,
        images: &images,
    };
    decide(
        &subject,
        &NamespaceMeta::named("team"),
        managers.iter().copied(),
    )
}

fn names(decision: Decision) -> Vec<String> {
    match decision {
        Decision::Inject { secrets, .. } => secrets,
        Decision::Skip(_) => Vec::new(),
    }
}

/// One inline entry per registry the e2e test also uses, plus a copied Secret whose
/// registries the status reports and one it does not.
const MATCHING: &str = r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {name: matching, namespace: team}
spec:
  mode: Pod
  injection: MatchingImages
  secrets:
    - {name: hub, registry: "https://index.docker.io/v1/", username: u, password: p}
    - {name: ghcr, registry: ghcr.io, username: u, password: p}
    - {name: ported, registry: "registry.example.com:5000", username: u, password: p}
    - {name: wildcard, registry: "*.example.org", username: u, password: p}
    - existingSecretRef: {name: quay}
    - existingSecretRef: {name: unreported}
status:
  pullSecrets:
    - {name: quay, registries: [quay.io]}
    - {name: stale-entry-of-a-removed-secret, registries: [ghcr.io]}
"#;

#[test]
fn matching_images_injects_exactly_the_secrets_whose_registries_serve_an_image() -> TestResult {
    let m = namespaced(MATCHING)?;
    let cases: &[(&[&str], &[&str])] = &[
        // Docker Hub short names, with and without library/, a tag or a digest.
        (&["nginx"], &["hub", "unreported"]),
        (&["library/nginx:1.27"], &["hub", "unreported"]),
        (
            &[
                "docker.io/library/nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            ],
            &["hub", "unreported"],
        ),
        (&["ghcr.io/org/app:2.0"], &["ghcr", "unreported"]),
        (
            &[
                "ghcr.io/org/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            ],
            &["ghcr", "unreported"],
        ),
        (
            &["registry.example.com:5000/team/app:1"],
            &["ported", "unreported"],
        ),
        // The port is part of the registry: the same host on another port is another registry.
        (&["registry.example.com/team/app:1"], &["unreported"]),
        (&["eu.example.org/app"], &["wildcard", "unreported"]),
        // `*` matches one DNS label only, as in the kubelet.
        (&["a.b.example.org/app", "example.org/app"], &["unreported"]),
        (&["quay.io/org/app"], &["quay", "unreported"]),
        // Several containers: the union, in the manager's order.
        (
            &["quay.io/org/app", "nginx", "ghcr.io/x/y"],
            &["hub", "ghcr", "quay", "unreported"],
        ),
    ];
    for (images, expected) in cases {
        assert_eq!(names(injected_for(images, &[&m])), *expected, "{images:?}");
    }
    Ok(())
}

#[test]
fn a_pod_whose_images_match_no_registry_is_left_alone_with_its_own_outcome() -> TestResult {
    let m = namespaced(&MATCHING.replace("    - existingSecretRef: {name: unreported}\n", ""))?;
    assert_eq!(
        injected_for(&["gcr.io/distroless/static", "not a valid image!"], &[&m]),
        Decision::Skip(Skip::NoMatchingImage)
    );
    assert_eq!(
        injected_for(&[], &[&m]),
        Decision::Skip(Skip::NoMatchingImage)
    );
    // Another manager that injects everything still does.
    let all = namespaced(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {name: all, namespace: team}
spec:
  mode: Pod
  secrets: [{existingSecretRef: {name: mirror}}]
",
    )?;
    assert_eq!(
        names(injected_for(&["gcr.io/distroless/static"], &[&m, &all])),
        ["mirror"]
    );
    Ok(())
}

#[test]
fn all_is_the_default_and_injects_whatever_the_images() -> TestResult {
    let m = namespaced(&MATCHING.replace("  injection: MatchingImages\n", ""))?;
    assert_eq!(m.injection, crate::api::Injection::All);
    assert_eq!(
        names(injected_for(&["gcr.io/distroless/static"], &[&m])),
        ["hub", "ghcr", "ported", "wildcard", "quay", "unreported"]
    );
    Ok(())
}

#[test]
fn matching_images_outside_mode_pod_is_compiled_as_all() -> TestResult {
    // The CRD refuses this spec; a CRD predating the rule may not.
    let m = namespaced(&MATCHING.replace("mode: Pod", "mode: ServiceAccount"))?;
    assert_eq!(m.injection, crate::api::Injection::All);
    assert!(m.registries().is_empty());
    Ok(())
}

#[test]
fn a_merged_secret_counts_inline_and_reported_registries_and_is_unknown_until_reported()
-> TestResult {
    let yaml = |status: &str| {
        format!(
            r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata: {{name: merged}}
spec:
  mode: Pod
  injection: MatchingImages
  mergeInto: all-in-one
  secrets:
    - {{name: ghcr, registry: ghcr.io, username: u, password: p}}
    - existingSecretRef: {{name: quay, namespace: cheiron}}
{status}"#
        )
    };
    let unreported = cluster(&yaml(""))?;
    assert_eq!(unreported.registries(), [Registries::Unknown]);
    assert_eq!(
        names(injected_for(&["gcr.io/x"], &[&unreported])),
        ["all-in-one"],
        "not reported yet: injected whatever the images"
    );
    let reported = cluster(&yaml(
        "status:\n  pullSecrets: [{name: all-in-one, registries: [quay.io]}]\n",
    ))?;
    for image in ["quay.io/org/app", "ghcr.io/org/app"] {
        assert_eq!(
            names(injected_for(&[image], &[&reported])),
            ["all-in-one"],
            "{image}"
        );
    }
    assert_eq!(
        injected_for(&["gcr.io/x"], &[&reported]),
        Decision::Skip(Skip::NoMatchingImage)
    );
    Ok(())
}

#[test]
fn a_status_listing_more_than_the_bound_leaves_the_secret_unknown() -> TestResult {
    let registries: Vec<String> = (0..=MAX_REGISTRIES)
        .map(|i| format!("r{i}.example.com"))
        .collect();
    let m = namespaced(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {{name: many, namespace: team}}
spec:
  mode: Pod
  injection: MatchingImages
  secrets: [{{existingSecretRef: {{name: many}}}}]
status:
  pullSecrets: [{{name: many, registries: [{}]}}]
",
        registries.join(", ")
    ))?;
    assert_eq!(m.registries(), [Registries::Unknown]);
    Ok(())
}

proptest::proptest! {
    /// The host comparison that skips most pairs gives what the kubelet's rules give alone.
    #[test]
    fn the_host_prefilter_never_changes_a_match(
        keys in proptest::collection::vec(key(), 1..4),
        images in proptest::collection::vec(image(), 1..4),
    ) {
        let list = RegistryList::parse(keys.iter().map(String::as_str));
        let parsed: Vec<Image> = images.iter().filter_map(|i| Image::parse(i)).collect();
        let references: Vec<crate::registry::ImageRef> = images
            .iter()
            .filter_map(|i| crate::registry::ImageRef::parse(i).ok())
            .collect();
        let brute = keys.iter().any(|k| {
            let key = crate::registry::RegistryKey::parse(k);
            references.iter().any(|r| key.matches(r))
        });
        proptest::prop_assert_eq!(list.serves_any(&parsed), brute, "{:?} {:?}", keys, images);
    }
}

fn host() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let part = prop_oneof![
        "[a-c]{1,2}",
        Just("*".to_owned()),
        Just("a?".to_owned()),
        Just("A".to_owned())
    ];
    let port = prop_oneof![
        Just(String::new()),
        Just(":5000".to_owned()),
        Just(":443".to_owned()),
        Just(":".to_owned())
    ];
    let name = prop_oneof![
        proptest::collection::vec(part, 1..4).prop_map(|p| p.join(".")),
        Just("docker.io".to_owned()),
        Just("index.docker.io".to_owned()),
        Just("registry-1.docker.io".to_owned()),
    ];
    (name, port).prop_map(|(n, p)| n + &p)
}

fn key() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let scheme = prop_oneof![Just(""), Just("https://"), Just("http://")];
    let path = prop_oneof![
        Just(""),
        Just("/"),
        Just("/v1/"),
        Just("/v1"),
        Just("/v2/b"),
        Just("/library"),
        Just("/b")
    ];
    (scheme, host(), path).prop_map(|(s, h, p)| format!("{s}{h}{p}"))
}

fn image() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let prefix = prop_oneof![Just(String::new()), host().prop_map(|h| format!("{h}/"))];
    let path = prop_oneof![
        Just("nginx"),
        Just("library/nginx"),
        Just("b/app"),
        Just("v1/x")
    ];
    let suffix = prop_oneof![
        Just(""),
        Just(":1.0"),
        Just("@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
    ];
    (prefix, path, suffix).prop_map(|(h, p, s)| format!("{h}{p}{s}"))
}

#[test]
fn registry_lists_as_the_kubelet_reads_them_parse_back_to_themselves() {
    for raw in [
        "https://index.docker.io/v1/",
        "docker.io",
        "https://index.docker.io/v1",
        "ghcr.io",
        "registry.example.com:5000",
        "*.example.org",
        "https://registry.example.com/v2/team",
    ] {
        let once = RegistryList::parse([raw]);
        let read: Vec<&str> = once.as_kubelet_reads().collect();
        let twice = RegistryList::parse(read.iter().copied());
        assert_eq!(once, twice, "{raw} read as {read:?}");
    }
}

#[test]
fn the_index_holds_one_copy_of_equal_registry_lists_and_frees_it_with_the_last_manager()
-> TestResult {
    let manager = |name: &str, registry: &str| {
        namespaced(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {{name: {name}, namespace: team}}
spec:
  mode: Pod
  injection: MatchingImages
  secrets: [{{name: pull, registry: {registry}, username: u, password: p}}]
"
        ))
    };
    let mut index = ManagerIndex::default();
    for i in 0..100 {
        index.apply(manager(&format!("m{i}"), "ghcr.io")?);
    }
    index.apply(manager("other", "quay.io")?);
    assert_eq!((index.len(), index.registry_lists()), (101, 2));
    let all = index.all();
    let lists: Vec<&Arc<RegistryList>> = all
        .iter()
        .filter_map(|m| match m.registries().first() {
            Some(Registries::Known(list)) if m.id.name != "other" => Some(list),
            _ => None,
        })
        .collect();
    assert_eq!(lists.len(), 100);
    assert!(
        lists.iter().all(|l| Arc::ptr_eq(l, lists[0])),
        "one shared copy"
    );
    drop(lists);
    drop(all);
    index.retain(|id| id.name != "other");
    assert_eq!((index.len(), index.registry_lists()), (100, 1));
    index.retain(|id| id.name == "m7");
    assert_eq!((index.len(), index.registry_lists()), (1, 1));
    index.retain(|_| false);
    assert_eq!(index.registry_lists(), 0);
    Ok(())
}

#[test]
fn an_inline_registry_is_matched_as_the_controller_writes_it() -> TestResult {
    // Written as https://index.docker.io/v1/ (the slash-less key would match no image).
    let m = namespaced(
        r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata: {name: original, namespace: team}
spec:
  mode: Pod
  injection: MatchingImages
  secrets:
    - {name: hub, registry: "https://index.docker.io/v1", username: u, password: p}
    - {name: ghcr, registry: "https://ghcr.io/v2", username: u, password: p}
"#,
    )?;
    assert_eq!(names(injected_for(&["nginx"], &[&m])), ["hub"]);
    assert_eq!(names(injected_for(&["ghcr.io/org/app"], &[&m])), ["ghcr"]);
    Ok(())
}
