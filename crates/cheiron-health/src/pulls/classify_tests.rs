//! Real messages, each with where its words come from. The kubelet writes
//! `Failed to pull image %q: %v` (kubernetes `pkg/kubelet/images/image_manager.go`); since the
//! CRI client strips `rpc error: code = Unknown desc = ` from Unknown gRPC errors
//! (kubernetes `staging/src/k8s.io/cri-client/pkg/remote_image.go`), recent kubelets write the
//! runtime's error bare, older ones (and other codes) with that prefix: both are tested.
//!
//! "verbatim": a kubelet Event quoted whole from the issue named. "framed": a runtime error
//! quoted from the issue (a `ctr`, `crictl`, podman or log line), put in the frame the kubelet
//! and that runtime's CRI plugin put it in. "composed": built from the source strings cited.

use super::*;

fn refusal_of(message: &str) -> Option<Refusal> {
    classify(message).map(|failure| failure.refusal)
}

fn assert_refused(message: &str, image: &str, refusal: Refusal) {
    assert_eq!(
        classify(message),
        Some(Failure {
            image: image.to_owned(),
            refusal,
        }),
        "{message}"
    );
}

fn assert_not_refused(message: &str) {
    assert_eq!(classify(message), None, "{message}");
}

// containerd ------------------------------------------------------------------------------
//
// containerd `internal/cri/server/images/image_pull.go`: "failed to pull and unpack image %q";
// `client/pull.go`: "failed to resolve reference %q"; `core/remotes/docker/resolver.go`:
// "failed to authorize: %w", "pull access denied, repository does not exist or may require
// authorization: %w"; `core/remotes/docker/authorizer.go`: "failed to fetch anonymous token",
// "failed to fetch oauth token", "server message: %s: %w" (ErrInvalidAuthorization,
// "authorization failed"), "%w: no basic auth credentials"; `core/remotes/errors/errors.go`:
// "unexpected status from %s request to %s: %s".

#[test]
fn containerd_401_on_the_manifest_head_is_unauthorized() {
    // Composed from the containerd strings above, in the shape of this project's node tests
    // (tests/node: a registry with basic auth on localhost, containerd 2, a kubelet of v1.34;
    // they assert only that the message holds "401 Unauthorized").
    assert_refused(
        "Failed to pull image \"localhost:5000/private/app:1\": failed to pull and unpack image \"localhost:5000/private/app:1\": failed to resolve reference \"localhost:5000/private/app:1\": unexpected status from HEAD request to https://localhost:5000/v2/private/app/manifests/1: 401 Unauthorized",
        "localhost:5000/private/app:1",
        Refusal::Unauthorized,
    );
    // Verbatim, kubernetes/kubernetes#110675 (older containerd: "pulling from host … failed
    // with status code", with the gRPC prefix).
    assert_refused(
        "Failed to pull image \"registry.app.xxx.net/XXXXX/partsgo42:GitActionsNew-2e7e78f7bb157128f1853b0dc06bf7ccd13156d7\": rpc error: code = Unknown desc = failed to pull and unpack image \"registry.app.xxx.net/spm2fog/partsgo42:GitActionsNew-2e7e78f7bb157128f1853b0dc06bf7ccd13156d7\": failed to resolve reference \"registry.app.xxx.net/spm2fog/partsgo42:GitActionsNew-2e7e78f7bb157128f1853b0dc06bf7ccd13156d7\": pulling from host registry.app.xxx.net failed with status code [manifests GitActionsNew-2e7e78f7bb157128f1853b0dc06bf7ccd13156d7]: 401 Unauthorized",
        "registry.app.xxx.net/XXXXX/partsgo42:GitActionsNew-2e7e78f7bb157128f1853b0dc06bf7ccd13156d7",
        Refusal::Unauthorized,
    );
    // Verbatim, kaidotdev/vegeta-controller#1 (containerd 1.4: "unexpected status code
    // [manifests …]").
    assert_refused(
        "Failed to pull image \"docker.pkg.github.com/kaidotdev/vegeta-controller/vegeta-controller:v0.3.0\": rpc error: code = Unknown desc = failed to pull and unpack image \"docker.pkg.github.com/kaidotdev/vegeta-controller/vegeta-controller:v0.3.0\": failed to resolve reference \"docker.pkg.github.com/kaidotdev/vegeta-controller/vegeta-controller:v0.3.0\": unexpected status code [manifests v0.3.0]: 401 Unauthorized",
        "docker.pkg.github.com/kaidotdev/vegeta-controller/vegeta-controller:v0.3.0",
        Refusal::Unauthorized,
    );
}

#[test]
fn containerd_refused_token_is_unauthorized() {
    // Framed, docker/docs#22787: Docker Hub's token endpoint refusing the credential, the
    // containerd error after that "error from registry: ".
    assert_refused(
        "Failed to pull image \"docker/welcome-to-docker\": failed to pull and unpack image \"docker.io/docker/welcome-to-docker:latest\": failed to resolve reference \"docker.io/docker/welcome-to-docker:latest\": failed to authorize: failed to fetch oauth token: unexpected status from GET request to https://auth.docker.io/token?scope=repository%3Adocker%2Fwelcome-to-docker%3Apull&service=registry.docker.io: 401 Unauthorized",
        "docker/welcome-to-docker",
        Refusal::Unauthorized,
    );
    // Framed, gitpod-io/gitpod#14837 (containerd 1.6: "unexpected status: 401 Unauthorized").
    assert_refused(
        "Failed to pull image \"proxy.replicated.com/proxy/gitpod/busybox:1\": rpc error: code = Unknown desc = failed to pull and unpack image \"proxy.replicated.com/proxy/gitpod/busybox:1\": failed to resolve reference \"proxy.replicated.com/proxy/gitpod/busybox:1\": failed to authorize: failed to fetch oauth token: unexpected status: 401 Unauthorized",
        "proxy.replicated.com/proxy/gitpod/busybox:1",
        Refusal::Unauthorized,
    );
    // Composed: the anonymous token refused (authorizer.go "failed to fetch anonymous token",
    // errors.go's status text); docker-library/tomcat#321 shows the containerd 1.6 form,
    // "failed to fetch anonymous token: unexpected status: 401 …".
    assert_refused(
        "Failed to pull image \"ghcr.io/org/private:1\": failed to pull and unpack image \"ghcr.io/org/private:1\": failed to resolve reference \"ghcr.io/org/private:1\": failed to authorize: failed to fetch anonymous token: unexpected status from GET request to https://ghcr.io/token?scope=repository%3Aorg%2Fprivate%3Apull&service=ghcr.io: 401 Unauthorized",
        "ghcr.io/org/private:1",
        Refusal::Unauthorized,
    );
}

#[test]
fn containerd_insufficient_scope_is_denied() {
    // Framed, hystax/optscale#865 (ctr): the error containerd's resolver wraps in "pull access
    // denied"; Docker Hub says it for a private repository and for one that does not exist alike.
    assert_refused(
        "Failed to pull image \"index.docker.io/hystax/gemini_data_worker:2026030201-public\": failed to pull and unpack image \"docker.io/hystax/gemini_data_worker:2026030201-public\": failed to resolve reference \"docker.io/hystax/gemini_data_worker:2026030201-public\": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed",
        "index.docker.io/hystax/gemini_data_worker:2026030201-public",
        Refusal::Denied,
    );
}

#[test]
fn containerd_no_basic_auth_credentials_is_unauthorized_not_denied() {
    // Framed, the error of containerd/containerd#11103's title (Harbor, no credential sent; the
    // image name is made up): wrapped in "pull access denied" by the resolver, but the cause is
    // the missing credential.
    assert_refused(
        "Failed to pull image \"harbor.example.com/lan/tongduncloud/predixy:1\": failed to pull and unpack image \"harbor.example.com/lan/tongduncloud/predixy:1\": failed to resolve reference \"harbor.example.com/lan/tongduncloud/predixy:1\": pull access denied, repository does not exist or may require authorization: authorization failed: no basic auth credentials",
        "harbor.example.com/lan/tongduncloud/predixy:1",
        Refusal::Unauthorized,
    );
}

#[test]
fn containerd_invalid_token_is_unauthorized() {
    // Composed: authorizer.go's "server message: %s: %w" with a bearer challenge's
    // error="invalid_token", wrapped by the resolver.
    assert_refused(
        "Failed to pull image \"ghcr.io/org/app:1\": failed to pull and unpack image \"ghcr.io/org/app:1\": failed to resolve reference \"ghcr.io/org/app:1\": pull access denied, repository does not exist or may require authorization: server message: invalid_token: authorization failed",
        "ghcr.io/org/app:1",
        Refusal::Unauthorized,
    );
}

#[test]
fn forbidden_is_denied() {
    // Framed, berops/claudie#1272 (containerd, a 403 on the manifest HEAD; there the registry
    // blocked an address range, which is why Denied's wording leaves room for more than the
    // credential).
    assert_refused(
        "Failed to pull image \"registry.k8s.io/pause:3.9\": rpc error: code = Unknown desc = failed to pull and unpack image \"registry.k8s.io/pause:3.9\": failed to resolve reference \"registry.k8s.io/pause:3.9\": unexpected status from HEAD request to https://europe-west3-docker.pkg.dev/v2/k8s-artifacts-prod/images/pause/manifests/3.9: 403 Forbidden",
        "registry.k8s.io/pause:3.9",
        Refusal::Denied,
    );
    // Composed: containerd 2's HEAD 403 with the registry's error borrowed from a follow-up
    // GET (`core/remotes/docker/resolver.go`, `pusher.go` withGETErrorBody, `errcode.go`
    // unexpectedResponseErr: errors.Join, one per line).
    assert_refused(
        "Failed to pull image \"myregistry.azurecr.io/app:1\": failed to pull and unpack image \"myregistry.azurecr.io/app:1\": failed to resolve reference \"myregistry.azurecr.io/app:1\": unexpected status from HEAD request to https://myregistry.azurecr.io/v2/app/manifests/1: 403 Forbidden\ndenied: client with IP '203.0.113.7' is not allowed access",
        "myregistry.azurecr.io/app:1",
        Refusal::Denied,
    );
    // Framed, cri-o/cri-o#7007 (crictl over CRI-O; containers/image's wording before "received
    // unexpected HTTP status": "invalid status code from registry %d (%s)").
    assert_refused(
        "Failed to pull image \"registry.company.xyz/namespace/container:1.0\": rpc error: code = Unknown desc = Requesting bearer token: invalid status code from registry 403 (Forbidden)",
        "registry.company.xyz/namespace/container:1.0",
        Refusal::Denied,
    );
}

// CRI-O (containers/image) ------------------------------------------------------------------
//
// containers/image `docker/docker_client.go`: "reading manifest %s in %s: %w";
// `docker/errors.go`: "unable to retrieve auth token: invalid username/password: %s";
// `docker/distribution_error.go` maps a bearer challenge's insufficient_scope to DENIED and a
// 401 to UNAUTHORIZED, printed as "denied: …" and "unauthorized: …" (errcode `Error()`).

#[test]
fn crio_authentication_required_is_unauthorized() {
    // Verbatim, rancher-archives/rke#167 (dockershim; the errcode text CRI-O prints too).
    assert_refused(
        "Failed to pull image \"xxxxxxxxxxxxxxxxxxxx/test-service:latest\": rpc error: code = Unknown desc = unauthorized: authentication required",
        "xxxxxxxxxxxxxxxxxxxx/test-service:latest",
        Refusal::Unauthorized,
    );
    // Composed: containers/image's manifest read with errcode UNAUTHORIZED, default message.
    assert_refused(
        "Failed to pull image \"quay.io/org/private:1\": reading manifest 1 in quay.io/org/private: unauthorized: authentication required",
        "quay.io/org/private:1",
        Refusal::Unauthorized,
    );
}

#[test]
fn crio_rejected_password_is_unauthorized() {
    // Framed, yandex-cloud/k8s-csi-s3#81 (the kubelet's log line of the same CRI-O pull).
    assert_refused(
        "Failed to pull image \"cr.yandex/crp9ftr22d26age3hulg/yandex-cloud/csi-s3/csi-node-driver-registrar:v1.2.0\": rpc error: code = Unknown desc = unable to retrieve auth token: invalid username/password: unauthorized: Password is invalid - must be OAuth token. Read more: https://cloud.yandex.ru/docs/container-registry/operations/authentication#oauth ; requestId = 4a9419d9-a14a-451b-b8a1-61b02e4fe2fe",
        "cr.yandex/crp9ftr22d26age3hulg/yandex-cloud/csi-s3/csi-node-driver-registrar:v1.2.0",
        Refusal::Unauthorized,
    );
    // Framed, lvgl/lvgl_pro#142 (podman): Docker Hub's token endpoint, a wrong password.
    assert_refused(
        "Failed to pull image \"docker.io/lvglio/emscripten-sdl2:0.2.0\": initializing source docker://lvglio/emscripten-sdl2:0.2.0: unable to retrieve auth token: invalid username/password: unauthorized: incorrect username or password",
        "docker.io/lvglio/emscripten-sdl2:0.2.0",
        Refusal::Unauthorized,
    );
}

#[test]
fn crio_docker_hub_denied_then_unauthorized_is_denied() {
    // Verbatim, thoth-station/thoth-application#2053 (CRI-O, Docker Hub, a repository that
    // does not exist): both errors, DENIED first (errcode `Errors` prints one per line).
    assert_refused(
        "Failed to pull image \"solver-rhel-8-py38\": rpc error: code = Unknown desc = Error reading manifest latest in docker.io/library/solver-rhel-8-py38: errors:\ndenied: requested access to the resource is denied\nunauthorized: authentication required\n",
        "solver-rhel-8-py38",
        Refusal::Denied,
    );
    // Composed: containers/image's newer wording, DENIED alone.
    assert_refused(
        "Failed to pull image \"org/private\": reading manifest latest in docker.io/org/private: requested access to the resource is denied",
        "org/private",
        Refusal::Denied,
    );
}

#[test]
fn dockershim_pull_access_denied_is_denied() {
    // Verbatim, octarinesec/octarine-operator#15 (kubelet with dockershim).
    assert_refused(
        "Failed to pull image \"octarinesec/guardrails-enforcer:20.7\": rpc error: code = Unknown desc = Error response from daemon: pull access denied for octarinesec/guardrails-enforcer, repository does not exist or may require 'docker login': denied: requested access to the resource is denied",
        "octarinesec/guardrails-enforcer:20.7",
        Refusal::Denied,
    );
    // Verbatim, dotnet/docs#13401: the kubelet's aggregate of two refused attempts.
    assert_refused(
        "Failed to pull image \"ugsampleacr.azurecr.io/mssampleaksapplication:v1\": [rpc error: code = Unknown desc = Error response from daemon: Get https://ugsampleacr.azurecr.io/v2/mssampleaksapplication/manifests/v1: unauthorized: authentication required, rpc error: code = Unknown desc = Error response from daemon: Get https://ugsampleacr.azurecr.io/v2/mssampleaksapplication/manifests/v1: unauthorized: authentication required]",
        "ugsampleacr.azurecr.io/mssampleaksapplication:v1",
        Refusal::Unauthorized,
    );
}

// Not refusals ------------------------------------------------------------------------------

#[test]
fn not_found_is_not_a_refusal() {
    // Composed: containerd resolver.go "%s: %w" with errdefs.ErrNotFound, which its CRI
    // plugin returns as gRPC NotFound (so the kubelet keeps the prefix).
    assert_not_refused(
        "Failed to pull image \"nginx:doesnotexist\": rpc error: code = NotFound desc = failed to pull and unpack image \"docker.io/library/nginx:doesnotexist\": failed to resolve reference \"docker.io/library/nginx:doesnotexist\": docker.io/library/nginx:doesnotexist: not found",
    );
    // Framed, cri-o/cri-o#4388 (crictl over CRI-O, "manifest unknown").
    assert_not_refused(
        "Failed to pull image \"registry.mydomain/image\": rpc error: code = Unknown desc = Error reading manifest latest in registry.mydomain/image: manifest unknown: manifest unknown",
    );
}

#[test]
fn image_names_that_spell_a_refusal_do_not_make_one() {
    // A tag `denied` and a repository `unauthorized` in a not-found message: the phrases must
    // start after whitespace, which no image name or URL holds.
    assert_not_refused(
        "Failed to pull image \"reg.example.com/app:denied\": failed to pull and unpack image \"reg.example.com/app:denied\": failed to resolve reference \"reg.example.com/app:denied\": reg.example.com/app:denied: not found",
    );
    assert_not_refused(
        "Failed to pull image \"reg.example.com/unauthorized/insufficient_scope:401\": failed to pull and unpack image \"reg.example.com/unauthorized/insufficient_scope:401\": failed to resolve reference \"reg.example.com/unauthorized/insufficient_scope:401\": reg.example.com/unauthorized/insufficient_scope:401: not found",
    );
}

#[test]
fn network_and_tls_failures_are_not_refusals() {
    // Framed, ciiiii/cloudflare-docker-proxy#62 (containerd's log of the PullImage error, its
    // `%!A(MISSING)` logging artefacts undone): "failed to authorize" with a timeout reaching
    // the token endpoint is no refusal.
    assert_not_refused(
        "Failed to pull image \"docker.io/redis:latest\": rpc error: code = DeadlineExceeded desc = failed to pull and unpack image \"docker.io/library/redis:latest\": failed to resolve reference \"docker.io/library/redis:latest\": failed to authorize: failed to fetch anonymous token: Get \"https://auth.docker.io/token?scope=repository%3Alibrary%2Fredis%3Apull&service=registry.docker.io\": dial tcp 108.160.165.48:443: i/o timeout",
    );
    // Composed: Go's resolver and x509 errors through containerd's resolver.
    assert_not_refused(
        "Failed to pull image \"reg.example.com/app:1\": failed to pull and unpack image \"reg.example.com/app:1\": failed to resolve reference \"reg.example.com/app:1\": failed to do request: Head \"https://reg.example.com/v2/app/manifests/1\": dial tcp: lookup reg.example.com on 10.96.0.10:53: no such host",
    );
    assert_not_refused(
        "Failed to pull image \"reg.example.com/app:1\": failed to pull and unpack image \"reg.example.com/app:1\": failed to resolve reference \"reg.example.com/app:1\": failed to do request: Head \"https://reg.example.com/v2/app/manifests/1\": tls: failed to verify certificate: x509: certificate signed by unknown authority",
    );
    // Verbatim, kubernetes/kubernetes#131521 (context canceled while fetching a blob).
    assert_not_refused(
        "Failed to pull image \"private_registery.mydomain/idrac_to_kafka:20250428T1620\": rpc error: code = Canceled desc = failed to pull and unpack image \"private_registery.mydomain/idrac_to_kafka:20250428T1620\": failed to copy: httpReadSeeker: failed open: failed to do request: Get \"https://private_registery.mydomain/v2/csg/idrac_to_kafka/blobs/sha256:d0157ca575c725b6dbdc6c7b843b8614963fda6ca619af9932bfbbb39c450c5a\": context canceled",
    );
}

#[test]
fn rate_limits_are_not_refusals() {
    // Verbatim, namespacelabs/foundation#846 (containerd, Docker Hub's 429; the issue cuts
    // the server message, completed from docker/docs#21908): it says "authenticating" and
    // nothing else of a refusal.
    assert_not_refused(
        "Failed to pull image \"index.docker.io/jaegertracing/all-in-one@sha256:8d0bff43db3ce5c528cb6f957520511d263d7cceee012696e4afdc9087919bb9\": rpc error: code = Unknown desc = failed to pull and unpack image \"docker.io/jaegertracing/all-in-one@sha256:8d0bff43db3ce5c528cb6f957520511d263d7cceee012696e4afdc9087919bb9\": failed to copy: httpReadSeeker: failed open: unexpected status code https://registry-1.docker.io/v2/jaegertracing/all-in-one/manifests/sha256:8d0bff43db3ce5c528cb6f957520511d263d7cceee012696e4afdc9087919bb9: 429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate limit. You may increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit",
    );
    // Framed, AliyunContainerService/image-syncer#160 (containers/image).
    assert_not_refused(
        "Failed to pull image \"nginx:1.13\": reading manifest 1.13 in docker.io/library/nginx: toomanyrequests: You have reached your pull rate limit. You may increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit",
    );
    // Composed: containers/image `docker/errors.go` ErrTooManyRequests, beside a 401 phrase.
    assert_not_refused(
        "Failed to pull image \"nginx\": too many requests to registry; unauthorized: authentication required",
    );
}

#[test]
fn kubelet_summaries_and_back_off_are_not_classified() {
    // The kubelet's other Events of a failed pull (verbatim, octarinesec/octarine-operator#15),
    // and the waiting message of v1.31+ (image_manager.go "%s: %s" of the previous error),
    // which repeats the cause the `Failed to pull image` Event already carried.
    for message in [
        "Error: ErrImagePull",
        "Error: ImagePullBackOff",
        "Back-off pulling image \"octarinesec/guardrails-enforcer:20.7\"",
        "Back-off pulling image \"reg.example.com/app:1\": ErrImagePull: unexpected status from HEAD request to https://reg.example.com/v2/app/manifests/1: 401 Unauthorized",
        "Pulling image \"reg.example.com/app:1\"",
    ] {
        assert_not_refused(message);
    }
}

#[test]
fn malformed_messages_are_not_classified() {
    for message in [
        "",
        "Failed to pull image",
        "Failed to pull image \"\": 401 Unauthorized",
        "Failed to pull image \"reg.example.com/app:1\" 401 Unauthorized",
        "failed to pull image \"reg.example.com/app:1\": 401 Unauthorized",
        " Failed to pull image \"reg.example.com/app:1\": 401 Unauthorized",
        "Failed to pull image \"reg\\\"x\": 401 Unauthorized",
    ] {
        assert_not_refused(message);
    }
}

#[test]
fn phrases_match_regardless_of_case() {
    // Framed, enix/kube-image-keeper#276: go-containerregistry prints the errcode in capitals.
    assert_eq!(
        refusal_of(
            "Failed to pull image \"org/app\": GET https://index.docker.io/v2/org/app/manifests/latest: UNAUTHORIZED: authentication required; [map[Action:pull Class: Name:org/app Type:repository]]"
        ),
        Some(Refusal::Unauthorized)
    );
    assert_eq!(
        refusal_of(
            "Failed to pull image \"org/app\": DENIED: requested access to the resource is denied"
        ),
        Some(Refusal::Denied)
    );
}

#[test]
fn messages_over_the_limit_are_ignored() {
    let head = "Failed to pull image \"reg.example.com/app:1\": unexpected status from HEAD request to https://reg.example.com/v2/app/manifests/1: 401 Unauthorized";
    let at_limit = format!("{head}{}", " ".repeat(MAX_MESSAGE_BYTES - head.len()));
    assert_eq!(at_limit.len(), MAX_MESSAGE_BYTES);
    assert_eq!(refusal_of(&at_limit), Some(Refusal::Unauthorized));
    let over = format!("{at_limit} ");
    assert_eq!(classify(&over), None);
}

#[test]
fn refusals_read_as_short_phrases() {
    assert_eq!(Refusal::Unauthorized.to_string(), "unauthorized");
    assert_eq!(Refusal::Denied.to_string(), "access denied");
}

#[test]
fn phrases_are_lower_case_and_not_empty() {
    for phrase in [RATE_LIMITED, REJECTED_CREDENTIAL, DENIED, UNAUTHORIZED].concat() {
        assert!(!phrase.is_empty());
        assert_eq!(phrase, phrase.to_ascii_lowercase());
    }
}

#[test]
fn a_phrase_matches_at_the_start_or_after_any_whitespace() {
    assert!(contains_phrase("denied: x", "denied: "));
    assert!(contains_phrase("errors:\ndenied: x", "denied: "));
    assert!(contains_phrase("a\tDenied: x", "denied: "));
    assert!(!contains_phrase("app:denied: x", "denied: "));
    assert!(!contains_phrase("deni", "denied: "));
}
