//! The webhook's router called in process, with no socket: `cheiron::webhook::router` (and the
//! admin router on the same state, for `/metrics`) built on the managers and namespaces of
//! `cheiron_harness::source` and called with `tower::ServiceExt::oneshot` on the
//! AdmissionReview fixtures of `tests/data/`. What the answers say (patches, opt-outs, refused
//! bodies) is pinned down here; `tests/webhook_tls.rs` covers what needs a real socket: TLS,
//! HTTP/2, hostile connections, load, shutdown, the admin port and the logs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use axum::{
    Router,
    body::{Body, Bytes},
    http::{Method, Request, Response, StatusCode, header},
};
use cheiron::{
    admin::admin_router,
    metrics::Metrics,
    webhook::{self, WebhookState},
};
use cheiron_harness::{
    review::{
        annotated, annotation, assert_allowed_without_patch, fixture, in_namespace, labelled,
        patched, pod_review, pull_secrets, service_account_review, with_uid,
    },
    source::{IGNORE, TestSource},
};
use serde_json::{Value, json};
use tower::ServiceExt;

/// The two routers `cheiron webhook` serves, on one state: a fresh source and fresh metrics.
struct Webhook {
    /// `POST /mutate`, served on the HTTPS port.
    router: Router,
    /// `/healthz`, `/readyz` and `/metrics`, served on the admin port.
    admin: Router,
}

impl Webhook {
    fn new() -> Self {
        let state = WebhookState::new(Arc::new(TestSource::new()), Arc::new(Metrics::new()));
        Self {
            admin: admin_router(state.admin()),
            router: webhook::router(state),
        }
    }

    /// `method path` on the webhook router; a body is sent as JSON, with its length, as the API
    /// server sends it.
    async fn call(&self, method: Method, path: &str, body: Option<Bytes>) -> Response<Body> {
        let request = Request::builder().method(method).uri(path);
        let request = match body {
            Some(body) => request
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::CONTENT_LENGTH, body.len())
                .body(Body::from(body)),
            None => request.body(Body::empty()),
        };
        self.router.clone().oneshot(request.unwrap()).await.unwrap()
    }

    /// Posts `review`, expects 200, returns `response`.
    async fn review(&self, review: &Value) -> Value {
        let body = serde_json::to_vec(review).unwrap();
        let response = self
            .call(Method::POST, "/mutate", Some(Bytes::from(body)))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body: Value = serde_json::from_slice(&body_of(response).await).unwrap();
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(body["kind"], "AdmissionReview");
        body["response"].clone()
    }

    async fn post_raw(&self, body: impl Into<Bytes>) -> (StatusCode, String) {
        let response = self.call(Method::POST, "/mutate", Some(body.into())).await;
        let status = response.status();
        (status, String::from_utf8(body_of(response).await).unwrap())
    }

    async fn metrics(&self) -> String {
        let request = Request::get("/metrics").body(Body::empty()).unwrap();
        let response = self.admin.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        String::from_utf8(body_of(response).await).unwrap()
    }

    /// Asserts that one review was answered with `outcome` for `resource`/`operation`.
    async fn assert_counted(&self, resource: &str, operation: &str, outcome: &str) {
        let metrics = self.metrics().await;
        let line = format!(
            r#"cheiron_admission_requests_total{{resource="{resource}",operation="{operation}",outcome="{outcome}"}} 1"#
        );
        assert!(metrics.contains(&line), "missing {line} in\n{metrics}");
    }
}

async fn body_of(response: Response<Body>) -> Vec<u8> {
    axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec()
}

// ---------------------------------------------------------------------------------------------
// Patching
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn pod_created_by_replicaset_gets_pull_secret_and_reconcile_annotations() {
    let webhook = Webhook::new();
    let review = pod_review();
    assert!(
        review["request"]["object"]["metadata"]
            .get("name")
            .is_none()
    );
    assert!(
        review["request"]["object"]["metadata"]
            .get("namespace")
            .is_none()
    );

    let response = webhook.review(&review).await;
    let pod = patched(&review, &response);

    assert_eq!(pull_secrets(&pod, "/spec/imagePullSecrets"), ["docker-hub"]);
    assert_eq!(annotation(&pod, "cheiron.anny.co/reconciled"), Some("true"));
    assert_eq!(
        annotation(&pod, "cheiron.anny.co/reconcile-with"),
        Some("docker-hub")
    );
    // Nothing else changed: existing annotations and the spec survive.
    assert_eq!(annotation(&pod, "prometheus.io/scrape"), Some("true"));
    assert_eq!(
        pod["spec"]["containers"],
        review["request"]["object"]["spec"]["containers"]
    );
    webhook.assert_counted("pods", "CREATE", "patched").await;
}

#[tokio::test]
async fn response_echoes_the_request_uid() {
    let webhook = Webhook::new();
    for uid in ["705ab4f5-6393-11e8-b7cc-42010a800002", "another-uid-0001"] {
        let review = with_uid(pod_review(), uid);
        let response = webhook.review(&review).await;
        assert_eq!(response["uid"], uid);
    }
}

#[tokio::test]
async fn patched_pod_reviewed_again_gets_no_patch() {
    let webhook = Webhook::new();
    let review = pod_review();
    let pod = patched(&review, &webhook.review(&review).await);

    let mut again = review.clone();
    again["request"]["object"] = pod;
    let response = webhook.review(&again).await;

    assert_allowed_without_patch(&again, &response);
    webhook.assert_counted("pods", "CREATE", "unchanged").await;
}

#[tokio::test]
async fn service_account_created_in_scope_of_cluster_manager_gets_its_pull_secrets() {
    let webhook = Webhook::new();
    let review = service_account_review();
    let account = patched(&review, &webhook.review(&review).await);

    assert_eq!(
        pull_secrets(&account, "/imagePullSecrets"),
        ["ghcr", "gitlab-registry"]
    );
    assert_eq!(
        annotation(&account, "cheiron.anny.co/reconciled"),
        Some("true")
    );
    assert_eq!(
        annotation(&account, "cheiron.anny.co/reconcile-with"),
        Some("ghcr,gitlab-registry")
    );
    assert_eq!(
        annotation(&account, "meta.helm.sh/release-name"),
        Some("builder")
    );
}

#[tokio::test]
async fn service_account_update_appends_after_existing_pull_secrets() {
    let webhook = Webhook::new();
    let review = fixture("serviceaccount-update.json");
    let account = patched(&review, &webhook.review(&review).await);

    assert_eq!(
        pull_secrets(&account, "/imagePullSecrets"),
        ["legacy-registry", "ghcr", "gitlab-registry"]
    );
    assert_eq!(
        annotation(&account, "cheiron.anny.co/reconcile-with"),
        Some("ghcr,gitlab-registry")
    );
    webhook
        .assert_counted("serviceaccounts", "UPDATE", "patched")
        .await;
}

#[tokio::test]
async fn namespaced_and_cluster_managers_both_inject_oldest_first() {
    let webhook = Webhook::new();
    let review = in_namespace(service_account_review(), "team-a");
    let account = patched(&review, &webhook.review(&review).await);

    assert_eq!(
        pull_secrets(&account, "/imagePullSecrets"),
        ["team-a-registry", "ghcr", "gitlab-registry"]
    );
    assert_eq!(
        annotation(&account, "cheiron.anny.co/reconcile-with"),
        Some("ghcr,gitlab-registry,team-a-registry")
    );
}

#[tokio::test]
async fn merge_into_injects_the_one_merged_secret() {
    let webhook = Webhook::new();
    let review = labelled(in_namespace(pod_review(), "team-m"), "pulls", "private");
    let pod = patched(&review, &webhook.review(&review).await);

    assert_eq!(
        pull_secrets(&pod, "/spec/imagePullSecrets"),
        ["cluster-pull-secret"]
    );
    assert_eq!(
        annotation(&pod, "cheiron.anny.co/reconcile-with"),
        Some("cluster-pull-secret")
    );
}

#[tokio::test]
async fn dry_run_review_is_patched_like_a_real_one() {
    let webhook = Webhook::new();
    let review = fixture("serviceaccount-create-dry-run.json");
    assert_eq!(review["request"]["dryRun"], true);
    let response = webhook.review(&review).await;
    assert_eq!(response["uid"], review["request"]["uid"]);
    let account = patched(&review, &response);
    assert_eq!(
        pull_secrets(&account, "/imagePullSecrets"),
        ["ghcr", "gitlab-registry"]
    );
}

// ---------------------------------------------------------------------------------------------
// Left alone
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn pod_annotated_ignore_is_admitted_without_patch() {
    let webhook = Webhook::new();
    let review = annotated(pod_review(), IGNORE, "true");
    assert_allowed_without_patch(&review, &webhook.review(&review).await);
    webhook
        .assert_counted("pods", "CREATE", "object_opted_out")
        .await;
}

#[tokio::test]
async fn pod_annotated_not_reconcilable_is_admitted_without_patch() {
    let webhook = Webhook::new();
    let review = annotated(pod_review(), "cheiron.anny.co/reconcilable", "false");
    assert_allowed_without_patch(&review, &webhook.review(&review).await);
    webhook
        .assert_counted("pods", "CREATE", "object_opted_out")
        .await;
}

#[tokio::test]
async fn service_account_annotated_ignore_is_admitted_without_patch() {
    let webhook = Webhook::new();
    let review = annotated(service_account_review(), IGNORE, "true");
    assert_allowed_without_patch(&review, &webhook.review(&review).await);
    webhook
        .assert_counted("serviceaccounts", "CREATE", "object_opted_out")
        .await;
}

#[tokio::test]
async fn namespace_labelled_ignore_is_admitted_without_patch() {
    let webhook = Webhook::new();
    let review = in_namespace(service_account_review(), "team-quiet");
    assert_allowed_without_patch(&review, &webhook.review(&review).await);
    webhook
        .assert_counted("serviceaccounts", "CREATE", "namespace_opted_out")
        .await;
}

#[tokio::test]
async fn namespace_annotated_ignore_is_admitted_without_patch() {
    let webhook = Webhook::new();
    let review = in_namespace(service_account_review(), "team-hushed");
    assert_allowed_without_patch(&review, &webhook.review(&review).await);
    webhook
        .assert_counted("serviceaccounts", "CREATE", "namespace_opted_out")
        .await;
}

#[tokio::test]
async fn namespace_out_of_every_scope_is_admitted_without_patch() {
    let webhook = Webhook::new();
    // Excluded by glob, not matched by glob, and a namespace the view has never seen.
    for namespace in ["team-scratch", "elsewhere", "not-in-view"] {
        let review = in_namespace(service_account_review(), namespace);
        assert_allowed_without_patch(&review, &webhook.review(&review).await);
    }
    // Pods in a namespace only a ServiceAccount-mode manager covers.
    let review = in_namespace(pod_review(), "team-b");
    assert_allowed_without_patch(&review, &webhook.review(&review).await);

    let metrics = webhook.metrics().await;
    assert!(metrics.contains(
        r#"cheiron_admission_requests_total{resource="serviceaccounts",operation="CREATE",outcome="no_manager"} 3"#
    ));
    webhook.assert_counted("pods", "CREATE", "no_manager").await;
}

#[tokio::test]
async fn pod_not_matching_pod_selector_is_admitted_without_patch() {
    let webhook = Webhook::new();
    // team-m is selected by namespace label, but the Pod lacks `pulls: private`.
    let review = in_namespace(pod_review(), "team-m");
    assert_allowed_without_patch(&review, &webhook.review(&review).await);
    webhook.assert_counted("pods", "CREATE", "no_manager").await;
}

#[tokio::test]
async fn delete_with_null_object_is_allowed_without_patch() {
    let webhook = Webhook::new();
    let review = fixture("pod-delete.json");
    assert!(review["request"]["object"].is_null());
    assert_allowed_without_patch(&review, &webhook.review(&review).await);
    webhook
        .assert_counted("pods", "DELETE", "not_handled")
        .await;
}

#[tokio::test]
async fn unrelated_kind_is_allowed_without_patch() {
    let webhook = Webhook::new();
    let review = fixture("configmap-create.json");
    assert_allowed_without_patch(&review, &webhook.review(&review).await);
    webhook
        .assert_counted("other", "CREATE", "not_handled")
        .await;
}

#[tokio::test]
async fn pod_that_cannot_be_interpreted_is_allowed_with_a_warning() {
    let webhook = Webhook::new();
    let mut review = pod_review();
    review["request"]["object"]["spec"] = json!("not an object");
    let response = webhook.review(&review).await;

    assert_allowed_without_patch(&review, &response);
    let warnings = response["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].as_str().unwrap().starts_with("cheiron: "),
        "{warnings:?}"
    );
    webhook
        .assert_counted("pods", "CREATE", "uninterpretable")
        .await;
}

// ---------------------------------------------------------------------------------------------
// Bodies that are no AdmissionReview
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn json_that_is_not_a_review_gets_400() {
    let webhook = Webhook::new();
    for body in [
        r#"{"hello": "world"}"#,
        "[1, 2, 3]",
        r#"{"apiVersion": "v1", "kind": "Pod", "request": 7}"#,
    ] {
        let (status, text) = webhook.post_raw(body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            text.starts_with("body is not an AdmissionReview"),
            "{body}: {text}"
        );
    }
}

#[tokio::test]
async fn review_without_request_gets_400() {
    let webhook = Webhook::new();
    let (status, text) = webhook
        .post_raw(r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(text, "AdmissionReview has no request\n");
    let metrics = webhook.metrics().await;
    assert!(metrics.contains(r#"cheiron_admission_invalid_requests_total{reason="no_request"} 1"#));
}

// ---------------------------------------------------------------------------------------------
// Routes
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn only_post_mutate_is_served_on_the_webhook_port() {
    let webhook = Webhook::new();
    let get = webhook.call(Method::GET, "/mutate", None).await;
    assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);
    let other = webhook.call(Method::POST, "/validate", None).await;
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
}
