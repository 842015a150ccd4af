//! The kubelet's own vectors (`pkg/credentialprovider/keyring_test.go`) as tables, cheiron's
//! cases for the Docker Hub trap, and properties of matching and canonical keys.

use proptest::prelude::*;

use super::*;

/// The kubelet's `BasicDockerKeyring.Lookup` over `keys`: every key that matches, most specific
/// (reverse-sorted) first, else the default registry key for a Docker Hub image.
fn kubelet_lookup<'a>(keys: &'a [RegistryKey], repository: &str) -> Vec<&'a str> {
    let mut index: Vec<&RegistryKey> = keys
        .iter()
        .filter(|k| k.as_kubelet_reads().is_some())
        .collect();
    index.sort_by(|a, b| b.as_kubelet_reads().cmp(&a.as_kubelet_reads()));
    index.dedup_by(|a, b| a.as_kubelet_reads() == b.as_kubelet_reads());
    let hits: Vec<&str> = index
        .iter()
        .filter(|k| k.glob_matches_lookup(repository))
        .filter_map(|k| k.as_kubelet_reads())
        .collect();
    if !hits.is_empty() {
        return hits;
    }
    index
        .iter()
        .filter(|k| k.matches_lookup(repository))
        .filter_map(|k| k.as_kubelet_reads())
        .collect()
}

fn key(raw: &str) -> RegistryKey {
    RegistryKey::parse(raw)
}

fn image(reference: &str) -> ImageRef {
    match ImageRef::parse(reference) {
        Ok(image) => image,
        Err(e) => unreachable!("test image {reference:?}: {e}"),
    }
}

#[test]
fn urls_match_like_the_kubelet() {
    // TestURLsMatch
    let cases = [
        ("*.kubernetes.io", "prefix.kubernetes.io", true),
        ("prefix.*.io", "prefix.kubernetes.io", true),
        ("prefix.kubernetes.*", "prefix.kubernetes.io", true),
        ("*-good.kubernetes.io", "prefix-good.kubernetes.io", true),
        ("*.kubernetes.io/blah", "prefix.kubernetes.io/blah", true),
        ("prefix.*.io/foo", "prefix.kubernetes.io/foo/bar", true),
        (
            "*.kubernetes.io:1111/blah",
            "prefix.kubernetes.io:1111/blah",
            true,
        ),
        (
            "prefix.*.io:1111/foo",
            "prefix.kubernetes.io:1111/foo/bar",
            true,
        ),
        ("*.kubernetes.io", "kubernetes.io", false),
        ("*.*.kubernetes.io", "prefix.kubernetes.io", false),
        ("*.*.kubernetes.io", "kubernetes.io", false),
        ("*kubernetes.io", "a.kubernetes.io", false),
        ("*kubernetes.io", "kubernetes.io", true),
        ("*.*.*.kubernetes.io", "a.b.c.kubernetes.io", true),
        ("kubernetes.io", "kubernetes.com", false),
        ("k*.io", "quay.io", false),
        (
            "*.kubernetes.io:1234/blah",
            "prefix.kubernetes.io:1111/blah",
            false,
        ),
        (
            "prefix.*.io/foo",
            "prefix.kubernetes.io:1111/foo/bar",
            false,
        ),
    ];
    for (glob, target, expected) in cases {
        assert_eq!(
            key(glob).matches_lookup(target),
            expected,
            "{glob} against {target}"
        );
    }
}

#[test]
fn keyring_hits_globs_like_the_kubelet() {
    // TestDockerKeyringForGlob: the lookup is target + "/foo/bar".
    let cases = [
        ("https://hello.kubernetes.io", "hello.kubernetes.io"),
        ("https://*.docker.io", "prefix.docker.io"),
        ("https://prefix.*.io", "prefix.docker.io"),
        ("https://prefix.docker.*", "prefix.docker.io"),
        ("https://*.docker.io/path", "prefix.docker.io/path"),
        ("https://prefix.*.io/path", "prefix.docker.io/path/subpath"),
        ("https://prefix.docker.*/path", "prefix.docker.io/path"),
        ("https://*.docker.io:8888", "prefix.docker.io:8888"),
        ("https://prefix.*.io:8888", "prefix.docker.io:8888"),
        ("https://prefix.docker.*:8888", "prefix.docker.io:8888"),
        (
            "https://*.docker.io/path:1111",
            "prefix.docker.io/path:1111",
        ),
        ("https://*.docker.io/v1/", "prefix.docker.io/path:1111"),
        ("https://*.docker.io/v2/", "prefix.docker.io/path:1111"),
        (
            "https://prefix.docker.*/path:1111",
            "prefix.docker.io/path:1111",
        ),
        ("prefix.docker.io:1111", "prefix.docker.io:1111/path"),
        ("*.docker.io:1111", "prefix.docker.io:1111/path"),
    ];
    for (glob, target) in cases {
        let keys = [key(glob)];
        let lookup = format!("{target}/foo/bar");
        assert_eq!(
            kubelet_lookup(&keys, &lookup).len(),
            1,
            "{glob} should serve {lookup}"
        );
    }
}

#[test]
fn keyring_misses_like_the_kubelet() {
    // TestKeyringMiss and TestKeyringMissWithDockerHubCredentials.
    let cases = [
        ("https://hello.kubernetes.io", "world.mesos.org/foo/bar"),
        ("https://*.docker.com", "prefix.docker.io"),
        ("https://suffix.*.io", "prefix.docker.io"),
        ("https://prefix.docker.c*", "prefix.docker.io"),
        (
            "https://prefix.*.io/path:1111",
            "prefix.docker.io/path/subpath:1111",
        ),
        ("suffix.*.io", "prefix.docker.io"),
    ];
    for (glob, target) in cases {
        let keys = [key(glob)];
        let lookup = format!("{target}/foo/bar");
        assert!(
            kubelet_lookup(&keys, &lookup).is_empty(),
            "{glob} should not serve {lookup}"
        );
    }
    let docker_hub = [key("https://index.docker.io/v1/")];
    assert!(kubelet_lookup(&docker_hub, "world.mesos.org/foo/bar").is_empty());
}

#[test]
fn docker_hub_key_serves_unqualified_and_qualified_names() {
    // TestKeyringHitWith{Unqualified,UnqualifiedLibrary,Qualified}DockerHub.
    let keys = [key("https://index.docker.io/v1/")];
    for lookup in [
        "google/docker-registry",
        "jenkins",
        "index.docker.io/v1//google/docker-registry",
    ] {
        assert_eq!(
            kubelet_lookup(&keys, lookup),
            ["index.docker.io"],
            "{lookup}"
        );
    }
}

#[test]
fn default_registry_match_like_the_kubelet() {
    // TestIsDefaultRegistryMatch, through the default registry key.
    let docker_hub = key("https://index.docker.io/v1/");
    let cases = [
        ("foo/bar", true),
        ("docker.io/foo/bar", true),
        ("index.docker.io/foo/bar", true),
        ("foo", true),
        ("", false),
        ("registry.tld/foo/bar", false),
        ("registry:5000/foo/bar", false),
        ("myhostdocker.io/foo/bar", false),
    ];
    for (repository, expected) in cases {
        assert_eq!(
            docker_hub.matches_lookup(repository),
            expected,
            "{repository:?}"
        );
    }
}

#[test]
fn keyring_orders_specific_paths_first() {
    // TestDockerKeyringLookup
    let keys = [key("bar.example.com/pong"), key("bar.example.com")];
    let cases: [(&str, &[&str]); 7] = [
        ("bar.example.com", &["bar.example.com"]),
        (
            "bar.example.com/pong",
            &["bar.example.com/pong", "bar.example.com"],
        ),
        ("bar.example.com/ping", &["bar.example.com"]),
        (
            "bar.example.com/pongz",
            &["bar.example.com/pong", "bar.example.com"],
        ),
        (
            "bar.example.com/pong/pang",
            &["bar.example.com/pong", "bar.example.com"],
        ),
        ("example.com", &[]),
        ("foo.example.com", &[]),
    ];
    for (lookup, expected) in cases {
        assert_eq!(kubelet_lookup(&keys, lookup), expected, "{lookup}");
    }
}

#[test]
fn scheme_and_version_path_match_the_bare_host() {
    // TestIssue3797
    let keys = [key("https://quay.io/v1/")];
    for lookup in ["quay.io", "quay.io/foo", "quay.io/foo/bar"] {
        assert_eq!(kubelet_lookup(&keys, lookup), ["quay.io"], "{lookup}");
    }
}

#[test]
fn reads_keys_as_the_kubelet_does() {
    let cases = [
        ("https://index.docker.io/v1/", Some("index.docker.io")),
        ("https://index.docker.io/v1", Some("index.docker.io/v1")),
        ("index.docker.io/v2/", Some("index.docker.io")),
        ("docker.io", Some("docker.io")),
        (
            "http://registry.local:5000/v2/team",
            Some("registry.local:5000/team"),
        ),
        ("ghcr.io/", Some("ghcr.io")),
        ("https://user@ghcr.io", Some("ghcr.io")),
        ("ghcr io", None),
        ("ghcr.io:https", None),
    ];
    for (raw, expected) in cases {
        assert_eq!(key(raw).as_kubelet_reads(), expected, "{raw}");
    }
}

#[test]
fn matches_the_images_users_write() {
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let pinned = format!("registry.example.com:5000/app@{digest}");
    let cases: [(&str, &str, bool); 20] = [
        (DOCKER_HUB_KEY, "nginx", true),
        (DOCKER_HUB_KEY, "library/nginx:1.27", true),
        (DOCKER_HUB_KEY, "bitnami/redis", true),
        (DOCKER_HUB_KEY, "docker.io/bitnami/redis", true),
        (DOCKER_HUB_KEY, "ghcr.io/org/app", false),
        ("docker.io", "nginx", true),
        ("index.docker.io", "nginx", true),
        ("https://index.docker.io/v1", "nginx", false),
        ("https://index.docker.io/v1", "docker.io/v1/app", false),
        ("registry-1.docker.io", "nginx", false),
        (
            "registry-1.docker.io",
            "registry-1.docker.io/library/nginx",
            true,
        ),
        ("ghcr.io", "ghcr.io/org/app:v1", true),
        ("ghcr.io/org", "ghcr.io/org/app", true),
        ("ghcr.io/org", "ghcr.io/other/app", false),
        ("registry.example.com:5000", &pinned, true),
        ("registry.example.com", &pinned, false),
        (
            "registry.example.com:5000",
            "registry.example.com/app",
            false,
        ),
        ("*.example.com", "eu.example.com/app", true),
        ("*.example.com", "example.com/app", false),
        ("*.example.com", "a.eu.example.com/app", false),
    ];
    for (raw, reference, expected) in cases {
        assert_eq!(
            key(raw).matches(&image(reference)),
            expected,
            "{raw} against {reference}"
        );
    }
}

#[test]
fn names_the_problem_of_unusable_keys() {
    let problem = |raw: &str| key(raw).problem();
    assert_eq!(
        problem("https://index.docker.io/v1"),
        Some(KeyProblem::VersionWithoutSlash {
            read_as: "index.docker.io/v1".to_owned(),
            fix: DOCKER_HUB_KEY.to_owned(),
        })
    );
    assert_eq!(
        problem("https://ghcr.io/v2"),
        Some(KeyProblem::VersionWithoutSlash {
            read_as: "ghcr.io/v2".to_owned(),
            fix: "ghcr.io".to_owned(),
        })
    );
    assert_eq!(
        problem("https://index.docker.io/v1/bitnami"),
        Some(KeyProblem::DockerHubPath {
            read_as: "index.docker.io/bitnami".to_owned(),
            fix: "docker.io/bitnami".to_owned(),
        })
    );
    assert_eq!(
        problem("registry-1.docker.io"),
        Some(KeyProblem::DockerHubApiHost)
    );
    assert_eq!(problem(""), Some(KeyProblem::EmptyHost));
    assert_eq!(problem("https://"), Some(KeyProblem::EmptyHost));
    assert_eq!(problem(":5000"), Some(KeyProblem::EmptyHost));
    assert!(matches!(
        problem("oci://ghcr.io"),
        Some(KeyProblem::Scheme { .. })
    ));
    assert!(matches!(
        problem("HTTPS://ghcr.io"),
        Some(KeyProblem::Scheme { .. })
    ));
    assert!(matches!(
        problem("ghcr io"),
        Some(KeyProblem::Ignored { .. })
    ));
    assert_eq!(
        problem("GHCR.io"),
        Some(KeyProblem::Uppercase {
            read_as: "GHCR.io".to_owned(),
            fix: "ghcr.io".to_owned(),
        })
    );
    assert!(matches!(
        problem("ghcr.io/a b"),
        Some(KeyProblem::PathNeverMatches { .. })
    ));
    for usable in [
        DOCKER_HUB_KEY,
        "https://index.docker.io/v2/",
        "docker.io",
        "index.docker.io",
        "docker.io/bitnami",
        "ghcr.io",
        "https://ghcr.io",
        "http://registry.local:5000/v2/",
        "*.example.com",
        "quay.io/org/",
    ] {
        assert_eq!(problem(usable), None, "{usable}");
    }
}

#[test]
fn problems_read_as_one_line_that_says_what_to_write() {
    let message = key("https://index.docker.io/v1")
        .problem()
        .map(|p| p.to_string());
    assert_eq!(
        message.as_deref(),
        Some(
            "the kubelet strips /v1/ and /v2/ only with the trailing slash, so it reads \"index.docker.io/v1\", a repository path no image has; write \"https://index.docker.io/v1/\""
        )
    );
}

#[test]
fn canonical_keys_for_inline_registries() {
    let cases = [
        ("https://index.docker.io/v1/", DOCKER_HUB_KEY),
        ("https://index.docker.io/v1", DOCKER_HUB_KEY),
        ("index.docker.io", DOCKER_HUB_KEY),
        ("docker.io", DOCKER_HUB_KEY),
        ("https://docker.io/v2/", DOCKER_HUB_KEY),
        ("registry-1.docker.io", DOCKER_HUB_KEY),
        ("Docker.IO", DOCKER_HUB_KEY),
        ("docker.io/bitnami", "docker.io/bitnami"),
        ("index.docker.io/v1/bitnami", "docker.io/bitnami"),
        ("ghcr.io", "ghcr.io"),
        ("https://ghcr.io/", "ghcr.io"),
        ("https://ghcr.io/v2", "ghcr.io"),
        (
            "http://registry.local:5000/v2/team",
            "registry.local:5000/team",
        ),
        ("*.example.com", "*.example.com"),
        (" quay.io ", "quay.io"),
        ("ghcr io", "ghcr io"),
        ("oci://ghcr.io", "oci://ghcr.io"),
    ];
    for (raw, expected) in cases {
        assert_eq!(canonical_key(raw), expected, "{raw}");
    }
}

#[test]
fn same_registry_compares_what_the_kubelet_reads() {
    let cases = [
        ("docker.io", DOCKER_HUB_KEY, true),
        ("index.docker.io", DOCKER_HUB_KEY, true),
        ("https://index.docker.io/v2/", DOCKER_HUB_KEY, true),
        ("https://index.docker.io/v1", DOCKER_HUB_KEY, false),
        ("registry-1.docker.io", DOCKER_HUB_KEY, false),
        ("docker.io/bitnami", "docker.io", false),
        ("ghcr.io", "https://ghcr.io/", true),
        ("ghcr.io", "http://ghcr.io/v2/", true),
        ("ghcr.io", "quay.io", false),
        ("ghcr io", "ghcr io", true),
        ("ghcr io", "ghcr.io", false),
    ];
    for (a, b, expected) in cases {
        assert_eq!(same_registry(a, b), expected, "{a} vs {b}");
        assert_eq!(same_registry(b, a), expected, "{b} vs {a}");
    }
}

fn host_label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?"
}

fn registry_host() -> impl Strategy<Value = String> {
    // At least one dot, so the first component of an image is read as a domain.
    (prop::collection::vec(host_label(), 1..3), "[a-z]{2,6}")
        .prop_map(|(labels, tld)| format!("{}.{tld}", labels.join(".")))
        .prop_filter("not a Docker Hub host", |h| !h.ends_with("docker.io"))
}

fn repository_path() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-z0-9]{1,6}([._-][a-z0-9]{1,6})?", 1..4).prop_map(|c| c.join("/"))
}

fn port() -> impl Strategy<Value = Option<u16>> {
    prop::option::of(1u16..=65535)
}

fn with_port(host: &str, port: Option<u16>) -> String {
    port.map_or_else(|| host.to_owned(), |p| format!("{host}:{p}"))
}

proptest! {
    #[test]
    fn any_string_is_read_without_panicking(raw in "\\PC{0,40}") {
        let key = RegistryKey::parse(&raw);
        let _ = key.problem().map(|p| p.to_string());
        let _ = canonical_key(&raw);
        let _ = ImageRef::parse(&raw);
    }

    #[test]
    fn a_host_key_in_any_spelling_matches_its_images(
        host in registry_host(),
        port in port(),
        path in repository_path(),
        scheme in prop::sample::select(vec!["", "https://", "http://"]),
        suffix in prop::sample::select(vec!["", "/", "/v1/", "/v2/"]),
        tag in prop::option::of("[a-z0-9][a-z0-9._-]{0,10}"),
    ) {
        let registry = with_port(&host, port);
        let key = RegistryKey::parse(&format!("{scheme}{registry}{suffix}"));
        let reference = match &tag {
            Some(tag) => format!("{registry}/{path}:{tag}"),
            None => format!("{registry}/{path}"),
        };
        let image = ImageRef::parse(&reference);
        prop_assert!(image.is_ok(), "{reference}");
        if let Ok(image) = image {
            prop_assert!(key.matches(&image));
            prop_assert_eq!(key.problem(), None);
            prop_assert_eq!(key.as_kubelet_reads(), Some(registry.as_str()));
            // Another port or another registry never matches.
            let other_port = ImageRef::parse(&format!("{}/{path}", with_port(&host, Some(port.map_or(1, |p| p.wrapping_add(1).max(1))))));
            if let Ok(other) = other_port {
                prop_assert!(!key.matches(&other));
            }
            let docker_hub = ImageRef::parse(&path);
            if let Ok(docker_hub) = docker_hub {
                prop_assert!(!key.matches(&docker_hub));
            }
        }
    }

    #[test]
    fn a_version_path_without_slash_never_matches_and_is_reported(
        host in registry_host(),
        path in repository_path(),
        version in prop::sample::select(vec!["/v1", "/v2"]),
    ) {
        let key = RegistryKey::parse(&format!("https://{host}{version}"));
        let reported = matches!(key.problem(), Some(KeyProblem::VersionWithoutSlash { .. }));
        prop_assert!(reported);
        // Only a repository whose path starts with the version would match.
        if let Ok(image) = ImageRef::parse(&format!("{host}/x{path}")) {
            prop_assert!(!key.matches(&image));
        }
        let canonical = RegistryKey::parse(&canonical_key(key.raw()));
        prop_assert_eq!(canonical.problem(), None);
    }

    #[test]
    fn every_docker_hub_spelling_serves_every_docker_hub_name(
        name in "[a-z0-9]{1,8}([._-][a-z0-9]{1,8})?",
        org in prop::option::of("[a-z0-9]{2,8}"),
        alias in prop::sample::select(vec![
            "docker.io", "index.docker.io", "registry-1.docker.io",
            "https://index.docker.io/v1/", "https://index.docker.io/v1", "https://docker.io/v2/",
        ]),
    ) {
        let canonical = RegistryKey::parse(&canonical_key(alias));
        prop_assert_eq!(canonical.raw(), DOCKER_HUB_KEY);
        prop_assert!(canonical.same_registry(&RegistryKey::parse("docker.io")));
        let short = match &org {
            Some(org) => format!("{org}/{name}"),
            None => name.clone(),
        };
        for reference in [short.clone(), format!("docker.io/{short}"), format!("index.docker.io/{short}")] {
            if let Ok(image) = ImageRef::parse(&reference) {
                prop_assert!(canonical.matches(&image), "{}", reference);
            }
        }
    }

    #[test]
    fn canonical_keys_are_stable(
        host in registry_host(),
        port in port(),
        path in prop::option::of(repository_path()),
        scheme in prop::sample::select(vec!["", "https://", "http://"]),
        suffix in prop::sample::select(vec!["", "/", "/v1", "/v1/", "/v2/"]),
    ) {
        let raw = match &path {
            Some(path) => {
                let base = format!("{scheme}{}{suffix}", with_port(&host, port));
                let separator = if base.ends_with('/') { "" } else { "/" };
                format!("{base}{separator}{path}")
            }
            None => format!("{scheme}{}{suffix}", with_port(&host, port)),
        };
        let canonical = canonical_key(&raw);
        prop_assert_eq!(canonical_key(&canonical), canonical.clone());
        prop_assert_eq!(RegistryKey::parse(&canonical).problem(), None, "{} → {}", raw, canonical);
    }

    #[test]
    fn images_print_as_they_parse(
        host in prop::option::of(registry_host()),
        port in port(),
        path in repository_path(),
        tag in prop::option::of("[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,20}"),
        digest in prop::option::of("[a-f0-9]{64}"),
    ) {
        let mut reference = match &host {
            Some(host) => format!("{}/{path}", with_port(host, port)),
            None => path.clone(),
        };
        if let Some(tag) = &tag {
            reference = format!("{reference}:{tag}");
        }
        if let Some(digest) = &digest {
            reference = format!("{reference}@sha256:{digest}");
        }
        let parsed = ImageRef::parse(&reference);
        prop_assert!(parsed.is_ok(), "{}", reference);
        if let Ok(parsed) = parsed {
            prop_assert_eq!(parsed.tag(), tag.as_deref());
            let again = ImageRef::parse(&parsed.to_string());
            prop_assert_eq!(again.as_ref().ok(), Some(&parsed));
        }
    }
}

#[test]
fn offered_for_is_the_kubelet_lookup_of_the_image_name() {
    // The kubelet looks up the repository of the parsed image (`docker.io/library/nginx` for
    // `nginx`); `offered_for` takes the image and must answer the same keys in the same order.
    let keys = [
        key("bar.example.com"),
        key("bar.example.com/pong"),
        key("https://index.docker.io/v1/"),
        key("*.example.org"),
        key("docker.io/team"),
        key("https://bar.example.com/v2/"),
    ];
    for reference in [
        "nginx",
        "library/nginx:1.27",
        "team/app",
        "docker.io/other/app@sha256:0000000000000000000000000000000000000000000000000000000000000000",
        "bar.example.com/pong/x:1",
        "bar.example.com/ping",
        "a.example.org/x",
        "a.b.example.org/x",
        "quay.io/x/y",
    ] {
        let image = image(reference);
        let offered: Vec<&str> = offered_for(&keys, &image)
            .into_iter()
            .filter_map(RegistryKey::as_kubelet_reads)
            .collect();
        assert_eq!(offered, kubelet_lookup(&keys, image.name()), "{reference}");
    }
    let docker_hub = offered_for(&keys, &image("nginx"));
    assert_eq!(
        docker_hub.iter().map(|k| k.raw()).collect::<Vec<_>>(),
        ["https://index.docker.io/v1/"],
        "a Docker Hub short name gets the default key when no other key matches"
    );
    let team = offered_for(&keys, &image("team/app"));
    assert_eq!(
        team.iter().map(|k| k.raw()).collect::<Vec<_>>(),
        ["docker.io/team"],
        "a matching docker.io key hides the default key"
    );
}
