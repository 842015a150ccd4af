//! The plugin answers requests shaped as the kubelet encodes them
//! (`k8s.io/kubelet/pkg/apis/credentialprovider/v1`: `image`, `serviceAccountToken` and
//! `serviceAccountAnnotations` omitted when empty), and its responses decode the way the
//! kubelet decodes them (strict fields, `cacheKeyType`, `cacheDuration` a Go duration).

use cheiron_credential::{duration, exec::parse_response};

use super::*;
use crate::credentials::Login;

const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

fn credentials() -> NodeCredentials {
    let login = |key: &str, user: &str| Login {
        key: key.to_owned(),
        username: user.to_owned(),
        password: format!("{user}-secret"),
    };
    NodeCredentials::new([
        login("https://index.docker.io/v1/", "hub"),
        login("docker.io/team", "team"),
        login("*.example.com", "glob"),
        login("registry.example.net:5000/private", "private"),
    ])
}

/// The request as the kubelet's `encodeRequest` writes it.
fn kubelet_request(image: &str) -> String {
    format!(r#"{{"kind":"CredentialProviderRequest","apiVersion":"{V1}","image":"{image}"}}"#)
}

/// The auth keys and users of an answer, read as the kubelet reads a plugin's response.
fn answered(request: &str) -> Vec<(String, String)> {
    let out = match answer(request.as_bytes(), &credentials(), DEFAULT_CACHE_DURATION) {
        Ok(out) => out,
        Err(e) => panic!("{request}: {e}"),
    };
    let response = match parse_response("cheiron", V1, &out) {
        Ok(r) => r,
        Err(e) => panic!("the kubelet would refuse the answer: {e}"),
    };
    assert_eq!(response.cache_key_type, "Image");
    assert_eq!(response.cache_duration, Some(DEFAULT_CACHE_DURATION));
    response
        .auth
        .into_iter()
        .map(|a| {
            assert_eq!(a.password, format!("{}-secret", a.username));
            (a.pattern, a.username)
        })
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(k, u)| ((*k).to_owned(), (*u).to_owned()))
        .collect()
}

#[test]
fn docker_hub_images_get_the_default_key_in_every_spelling() {
    for image in [
        "nginx",
        "nginx:1.27",
        "library/nginx",
        "docker.io/library/nginx",
        "index.docker.io/library/nginx",
        "someone/app@sha256:0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        assert_eq!(
            answered(&kubelet_request(image)),
            pairs(&[("https://index.docker.io/v1/", "hub")]),
            "{image}"
        );
    }
}

#[test]
fn a_matching_docker_hub_path_key_hides_the_default_key() {
    // The kubelet falls back to index.docker.io only when no other key matched.
    for image in ["team/app", "docker.io/team/app:v1", "docker.io/teamx/app"] {
        assert_eq!(
            answered(&kubelet_request(image)),
            pairs(&[("docker.io/team", "team")]),
            "{image}"
        );
    }
}

#[test]
fn globs_ports_and_paths_match_as_the_kubelet_matches() {
    assert_eq!(
        answered(&kubelet_request("a.example.com/x/y:1")),
        pairs(&[("*.example.com", "glob")])
    );
    assert_eq!(
        answered(&kubelet_request("registry.example.net:5000/private/app")),
        pairs(&[("registry.example.net:5000/private", "private")])
    );
    for image in [
        "a.b.example.com/x",
        "example.com/x",
        "registry.example.net/private/app",
        "registry.example.net:5000/public/app",
        "quay.io/org/app",
    ] {
        assert_eq!(answered(&kubelet_request(image)), [], "{image}");
    }
}

#[test]
fn a_non_matching_image_gets_an_empty_answer_the_kubelet_accepts() -> Result<(), BadRequest> {
    let out = answer(
        kubelet_request("quay.io/org/app").as_bytes(),
        &credentials(),
        DEFAULT_CACHE_DURATION,
    )?;
    let value: serde_json::Value = serde_json::from_slice(&out).unwrap_or_default();
    assert_eq!(
        value,
        serde_json::json!({
            "apiVersion": V1,
            "kind": "CredentialProviderResponse",
            "cacheKeyType": "Image",
            "cacheDuration": "60s",
        })
    );
    assert_eq!(duration::parse("60s").ok(), Some(DEFAULT_CACHE_DURATION));
    Ok(())
}

#[test]
fn a_request_with_a_token_and_annotations_is_answered_and_older_versions_get_their_own() {
    let with_token = format!(
        r#"{{"kind":"CredentialProviderRequest","apiVersion":"{V1}","image":"nginx","serviceAccountToken":"eyJ.token","serviceAccountAnnotations":{{"a":"b"}}}}"#
    );
    assert_eq!(
        answered(&with_token),
        pairs(&[("https://index.docker.io/v1/", "hub")])
    );
    let beta = "credentialprovider.kubelet.k8s.io/v1beta1";
    let request =
        format!(r#"{{"kind":"CredentialProviderRequest","apiVersion":"{beta}","image":"nginx"}}"#);
    let out = answer(request.as_bytes(), &credentials(), DEFAULT_CACHE_DURATION);
    let parsed = out.map(|out| parse_response("cheiron", beta, &out).is_ok());
    assert_eq!(parsed, Ok(true));
}

#[test]
fn bad_requests_are_refused_without_quoting_them() {
    let token = "eyJhbGciOi.secret-token";
    for bad in [
        format!("not json {token}"),
        format!(
            r#"{{"kind":"CredentialProviderRequest","apiVersion":"v1","image":"nginx","serviceAccountToken":"{token}"}}"#
        ),
        format!(
            r#"{{"kind":"Other","apiVersion":"{V1}","image":"nginx","serviceAccountToken":"{token}"}}"#
        ),
        format!(
            r#"{{"kind":"CredentialProviderRequest","apiVersion":"{V1}","image":7,"serviceAccountToken":"{token}"}}"#
        ),
        format!(
            r#"{{"kind":"CredentialProviderRequest","apiVersion":"{V1}","image":"UPPER/Case","serviceAccountToken":"{token}"}}"#
        ),
    ] {
        match answer(bad.as_bytes(), &credentials(), DEFAULT_CACHE_DURATION) {
            Err(e) => assert!(!e.to_string().contains(token), "{e}"),
            Ok(out) => panic!("answered {bad}: {}", out.len()),
        }
    }
    let huge = vec![b' '; MAX_REQUEST_BYTES + 1];
    assert!(answer(&huge, &credentials(), DEFAULT_CACHE_DURATION).is_err());
}
