//! `POST /mutate`: reads the AdmissionReview, answers it with the pure [`admission::review`],
//! records metrics and one debug line. Never logs the object.

use std::time::Instant;

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, header},
    middleware,
    response::{IntoResponse, Response},
    routing::post,
};
use base64::{Engine, prelude::BASE64_STANDARD};
use cheiron_core::{
    admission::{self, Admission, Outcome, Review},
    policy::WithNamespace,
};
use cheiron_runtime::admin::close_when_shutting_down;
use futures::{FutureExt, StreamExt};
use kube::core::{DynamicObject, admission::AdmissionReview};
use serde_json::Value;

use super::{
    budget::{BodyBudget, Reservation},
    error::RequestError,
    limits::MAX_BODY_BYTES,
    state::WebhookState,
};
use crate::source::{
    LookupDecision, NAMESPACE_LIST_WAIT, NAMESPACE_LOOKUP_TIMEOUT, NamespaceLookup,
};

/// Most bytes of an oversized body read and discarded before answering 413, so that a
/// client still sending sees the answer instead of a reset connection. Discarded bytes are
/// not kept, so they take nothing from the body budget.
const MAX_DISCARDED_BYTES: usize = 2 * MAX_BODY_BYTES;

/// The HTTPS router: `POST /mutate`.
pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .layer(middleware::from_fn_with_state(
            state.shutdown().clone(),
            close_when_shutting_down,
        ))
        .with_state(state)
}

async fn mutate(
    State(state): State<WebhookState>,
    request: Request,
) -> Result<Response, RequestError> {
    let started = Instant::now();
    let result = answer(&state, request, started).await;
    if let Err(error) = &result {
        state.metrics().admission.record_invalid(error.reason());
        tracing::debug!(reason = error.reason(), status = %error.status(), "admission request refused");
    }
    result
}

async fn answer(
    state: &WebhookState,
    request: Request,
    started: Instant,
) -> Result<Response, RequestError> {
    let (parts, body) = request.into_parts();
    let limits = &state.requests;
    // The reservation lives as long as the body and what is parsed from it.
    let (body, _reservation) = tokio::time::timeout(
        limits.body_timeout,
        read_body(&parts.headers, body, &limits.budget),
    )
    .await
    .map_err(|_| RequestError::BodyTimeout)??;
    let review = admission::parse(&body)?;
    let view = state.source.view();
    let missing = review
        .namespace_needed()
        .filter(|ns| view.namespace(ns).is_none())
        .map(str::to_owned);
    let admission = match missing {
        None => review.answer(view),
        Some(ns) => answer_missing(state, review, &ns, started).await,
    };
    let encoded = encode_review(&admission.review).map_err(RequestError::EncodeReview)?;
    state.metrics().admission.record(
        &admission.resource,
        admission.operation,
        admission.outcome,
        started.elapsed(),
    );
    log_review(&admission);
    Ok(([(header::CONTENT_TYPE, "application/json")], encoded).into_response())
}

/// Answers a review whose namespace is not in the view. A namespace created a moment ago
/// may not have reached the cache: ask the source rather than treat it as unlabelled, which
/// could miss its opt-out; but only for a namespace name, not one found missing a moment
/// ago, and not more often than the rate allows (`LookupGuard`).
///
/// Right after start the webhook is ready before its first list of namespaces is in (at
/// 100 000 namespaces it takes seconds). Meanwhile a lookup the rate refuses still goes
/// ahead, [`LISTING_LOOKUPS_IN_FLIGHT`](crate::source::LISTING_LOOKUPS_IN_FLIGHT) at a time,
/// and a namespace that could not be looked up is waited for, until that list is in, at most
/// [`NAMESPACE_LIST_WAIT`] after the review arrived. Afterwards the wait ends at once.
async fn answer_missing(
    state: &WebhookState,
    review: Review,
    ns: &str,
    started: Instant,
) -> Admission {
    let lookups = &state.requests.lookups;
    let mut decision = lookups.decide(ns, Instant::now());
    let listing = state.source.namespaces_listed().now_or_never().is_none();
    // While the list is coming in, a lookup the rate refused may still go ahead, a bounded
    // number at a time: waiting for the list could take longer than the API server waits.
    let permit = match decision {
        LookupDecision::RateLimited if listing => {
            let wait =
                NAMESPACE_LOOKUP_TIMEOUT.min(NAMESPACE_LIST_WAIT.saturating_sub(started.elapsed()));
            let permit = tokio::time::timeout(wait, state.requests.listing_lookups.acquire())
                .await
                .ok()
                .and_then(Result::ok);
            if permit.is_some() {
                decision = LookupDecision::Allowed;
            }
            permit
        }
        _ => None,
    };
    match decision {
        LookupDecision::Allowed => {
            let lookup = state.source.lookup_namespace(ns).await;
            lookups.record(ns, &lookup, Instant::now());
            let view = state.source.view();
            match lookup {
                NamespaceLookup::Found(meta) => {
                    return review.answer(&WithNamespace::new(view, meta));
                }
                NamespaceLookup::Untracked => return review.answer(view),
                NamespaceLookup::Unknown => {}
            }
        }
        // The name is the client's, of any length: not repeated in the warning.
        LookupDecision::InvalidName => {
            return review.admit_unchanged(
                "cheiron: request.namespace is not a valid namespace name; admitted unchanged"
                    .to_owned(),
                Outcome::NamespaceInvalid,
            );
        }
        LookupDecision::RecentlyMissing | LookupDecision::RateLimited => {}
    }
    drop(permit);
    let wait = NAMESPACE_LIST_WAIT.saturating_sub(started.elapsed());
    if tokio::time::timeout(wait, state.source.namespaces_listed())
        .await
        .is_ok()
    {
        let view = state.source.view();
        if view.namespace(ns).is_some() {
            return review.answer(view);
        }
    }
    match decision {
        LookupDecision::RateLimited => review.admit_unchanged(
            format!("cheiron: namespace {ns} is not cached yet and too many namespaces were looked up lately; admitted unchanged"),
            Outcome::NamespaceRateLimited,
        ),
        _ => review.admit_unchanged(unknown_namespace(ns), Outcome::NamespaceUnknown),
    }
}

fn unknown_namespace(ns: &str) -> String {
    format!("cheiron: namespace {ns} could not be looked up; admitted unchanged")
}

/// Serialises the answer. The API's `response.patch` is `[]byte`, which is a base64 string in
/// JSON; kube-core serialises its `Vec<u8>` as an array of numbers instead (kube-rs/kube#1781),
/// so the patch is re-encoded here. The response holds no object, so this is cheap.
fn encode_review(review: &AdmissionReview<DynamicObject>) -> Result<Vec<u8>, serde_json::Error> {
    let mut value = serde_json::to_value(review)?;
    let patch = review.response.as_ref().and_then(|r| r.patch.as_deref());
    if let (Some(patch), Some(field)) = (patch, value.pointer_mut("/response/patch")) {
        *field = Value::String(BASE64_STANDARD.encode(patch));
    }
    serde_json::to_vec(&value)
}

/// Buffers the body, up to [`MAX_BODY_BYTES`], holding its bytes in `budget`: all of an
/// announced `Content-Length` before reading, or each growth of the buffer before it
/// happens. A body that does not fit is refused at once (503), never waited for.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    budget: &BodyBudget,
) -> Result<(Bytes, Reservation), RequestError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut chunks = body.into_data_stream();
    if announced.is_some_and(|n| n > MAX_BODY_BYTES) {
        discard(chunks).await;
        return Err(RequestError::TooLarge);
    }
    let announced = announced.unwrap_or(0);
    let mut reservation = budget.reserve(announced).ok_or(RequestError::OverBudget)?;
    // Reserved, so allocated in full: no copies while growing. The pages are only touched
    // as bytes arrive.
    let mut buffer = Vec::with_capacity(announced);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(RequestError::UnreadableBody)?;
        let needed = buffer.len().saturating_add(chunk.len());
        if needed > MAX_BODY_BYTES {
            discard(chunks).await;
            return Err(RequestError::TooLarge);
        }
        if needed > buffer.capacity() {
            // Without a length (or past it), grow by doubling, reserving each growth first.
            let target = needed
                .max(buffer.capacity().saturating_mul(2))
                .min(MAX_BODY_BYTES);
            if !reservation.grow(target - buffer.capacity()) {
                return Err(RequestError::OverBudget);
            }
            buffer.reserve_exact(target - buffer.len());
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok((Bytes::from(buffer), reservation))
}

/// Reads and drops the rest of an oversized body, up to [`MAX_DISCARDED_BYTES`].
async fn discard(mut chunks: axum::body::BodyDataStream) {
    let mut discarded = 0usize;
    while discarded <= MAX_DISCARDED_BYTES {
        match chunks.next().await {
            Some(Ok(chunk)) => discarded = discarded.saturating_add(chunk.len()),
            Some(Err(_)) | None => return,
        }
    }
}

/// The one debug line per review: identifiers and the outcome, never the object.
fn log_review(admission: &Admission) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let uid = admission
        .review
        .response
        .as_ref()
        .map_or("", |response| response.uid.as_str());
    // An invalid name is the client's, of any length: not logged.
    let namespace = match admission.outcome {
        Outcome::NamespaceInvalid => "<invalid>",
        _ => admission.namespace.as_deref().unwrap_or(""),
    };
    tracing::debug!(
        uid,
        resource = %admission.resource,
        operation = admission.operation,
        namespace,
        outcome = admission.outcome.as_str(),
        "admission review answered"
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::sync::Arc;

    use axum::http::StatusCode;
    use cheiron_core::policy::{StaticView, View};
    use cheiron_runtime::{admin::Readiness, metrics::Metrics};
    use tower::ServiceExt;

    use super::*;
    use crate::{source::Source, webhook::Limits};

    struct Empty(StaticView);

    impl Source for Empty {
        fn view(&self) -> &dyn View {
            &self.0
        }
    }

    impl Readiness for Empty {
        fn is_ready(&self) -> bool {
            true
        }
    }

    fn state() -> WebhookState {
        WebhookState::new(
            Arc::new(Empty(StaticView::default())),
            Arc::new(Metrics::new()),
        )
    }

    async fn post(state: WebhookState, body: impl Into<Body>) -> (StatusCode, String) {
        let request = Request::post("/mutate").body(body.into()).unwrap();
        let response = router(state).oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn garbage_is_400_and_counted() {
        let state = state();
        let (status, body) = post(state.clone(), "\u{0}garbage").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.starts_with("body is not JSON"), "{body}");
        let metrics = state.metrics().encode().unwrap();
        assert!(
            metrics.contains(r#"cheiron_admission_invalid_requests_total{reason="not_json"} 1"#),
            "{metrics}"
        );
    }

    #[tokio::test]
    async fn body_over_the_limit_is_413_even_without_content_length() {
        // A streamed body has no Content-Length: the limit is enforced while reading.
        let chunks = futures::stream::iter(
            (0..4)
                .map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; MAX_BODY_BYTES / 3 + 1]))),
        );
        let (status, _) = post(state(), Body::from_stream(chunks)).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[tokio::test]
    async fn body_at_the_limit_is_read() {
        let mut body = vec![b' '; MAX_BODY_BYTES];
        body[0] = b'{';
        body[MAX_BODY_BYTES - 1] = b'}';
        let (status, body) = post(state(), body).await;
        // Read in full, then refused as a review without a request.
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.starts_with("body is not an AdmissionReview"), "{body}");
    }

    fn pod_review(namespace: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u1", "namespace": namespace, "operation": "CREATE", "userInfo": {},
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "object": {"metadata": {"generateName": "x-"}, "spec": {}},
            }
        }))
        .unwrap()
    }

    fn with_budget(bytes: usize) -> WebhookState {
        state().with_limits(&Limits {
            body_budget: bytes,
            ..Limits::default()
        })
    }

    /// A request announcing `length` bytes and sending none of them.
    fn withheld(length: usize) -> Request {
        let never = futures::stream::pending::<Result<Bytes, std::io::Error>>();
        Request::post("/mutate")
            .header(header::CONTENT_LENGTH, length)
            .body(Body::from_stream(never))
            .unwrap()
    }

    #[tokio::test]
    async fn a_review_of_another_kind_is_400() {
        let mut review: Value = serde_json::from_slice(&pod_review("team")).unwrap();
        review["kind"] = Value::from("NotAReview");
        let state = state();
        let (status, body) = post(state.clone(), serde_json::to_vec(&review).unwrap()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body.starts_with("body is not an admission.k8s.io/v1 AdmissionReview"),
            "{body}"
        );
        let metrics = state.metrics().encode().unwrap();
        assert!(
            metrics
                .contains(r#"cheiron_admission_invalid_requests_total{reason="not_a_review"} 1"#),
            "{metrics}"
        );
    }

    #[tokio::test]
    async fn an_announced_body_over_the_budget_is_503_before_a_byte_is_read() {
        let state = with_budget(1024 * 1024);
        let response = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            router(state.clone()).oneshot(withheld(2 * 1024 * 1024)),
        )
        .await
        .expect("the server waited for the body")
        .unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let metrics = state.metrics().encode().unwrap();
        assert!(
            metrics.contains(r#"cheiron_admission_invalid_requests_total{reason="over_budget"} 1"#),
            "{metrics}"
        );
        assert!(
            metrics.contains("cheiron_body_budget_used_bytes 0"),
            "{metrics}"
        );
    }

    #[tokio::test]
    async fn a_streamed_body_is_refused_when_growing_it_would_pass_the_budget() {
        let state = with_budget(1024 * 1024);
        let chunks = futures::stream::iter(
            (0..8).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 256 * 1024]))),
        );
        let (status, body) = post(state, Body::from_stream(chunks)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "too many request bodies in flight; retry in 1 s\n");
    }

    #[tokio::test]
    async fn small_reviews_are_answered_while_large_bodies_hold_the_budget() {
        const MIB: usize = 1024 * 1024;
        let state = with_budget(8 * MIB);
        // Withheld bodies take all the budget large bodies may have (7 of 8 MiB)...
        let holding: Vec<_> = [3 * MIB, 3 * MIB, MIB]
            .into_iter()
            .map(|length| tokio::spawn(router(state.clone()).oneshot(withheld(length))))
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let metrics = state.metrics().encode().unwrap();
        assert!(
            metrics.contains(&format!("cheiron_body_budget_used_bytes {}", 7 * MIB)),
            "{metrics}"
        );
        // ...so a third is refused, and a review still fits in the part kept for small ones.
        let another = router(state.clone()).oneshot(withheld(MIB));
        assert_eq!(
            another.await.unwrap().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let (status, _) = post(state.clone(), pod_review("team")).await;
        assert_eq!(status, StatusCode::OK);
        for task in holding {
            task.abort();
        }
    }

    /// State answering from `source`, allowing one namespace lookup a second, `burst` at once.
    fn with_lookups(source: Arc<dyn Source>, burst: u32) -> WebhookState {
        WebhookState::new(source, Arc::new(Metrics::new())).with_limits(&Limits {
            namespace_lookups: crate::source::LookupLimits {
                rate_per_second: 1,
                burst,
                ..crate::source::LookupLimits::default()
            },
            ..Limits::default()
        })
    }

    /// A source whose live lookups find nothing, counting them.
    #[derive(Default)]
    struct Missing {
        view: StaticView,
        lookups: std::sync::atomic::AtomicUsize,
    }

    impl Source for Missing {
        fn view(&self) -> &dyn View {
            &self.view
        }

        fn lookup_namespace<'a>(
            &'a self,
            _name: &'a str,
        ) -> futures::future::BoxFuture<'a, NamespaceLookup> {
            self.lookups
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(std::future::ready(NamespaceLookup::Unknown))
        }
    }

    impl Readiness for Missing {
        fn is_ready(&self) -> bool {
            true
        }
    }

    async fn review_warning(state: &WebhookState, namespace: &str) -> String {
        let (status, body) = post(state.clone(), pod_review(namespace)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["response"]["allowed"], true);
        assert!(body["response"].get("patch").is_none(), "{body}");
        body["response"]["warnings"][0].as_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn a_namespace_that_is_not_a_name_is_never_looked_up() {
        let source = Arc::new(Missing::default());
        let state = WebhookState::new(source.clone(), Arc::new(Metrics::new()));
        for namespace in ["kube-system/secrets/db-password", "team?watch=true", "Team"] {
            let warning = review_warning(&state, namespace).await;
            assert_eq!(
                warning,
                "cheiron: request.namespace is not a valid namespace name; admitted unchanged"
            );
        }
        assert_eq!(source.lookups.load(std::sync::atomic::Ordering::SeqCst), 0);
        let metrics = state.metrics().encode().unwrap();
        assert!(
            metrics.contains(r#"cheiron_admission_requests_total{resource="pods",operation="CREATE",outcome="namespace_invalid"} 3"#),
            "{metrics}"
        );
    }

    #[tokio::test]
    async fn a_missing_namespace_is_looked_up_once_and_misses_are_rate_limited() {
        let source = Arc::new(Missing::default());
        let state = with_lookups(source.clone(), 2);
        let lookups = || source.lookups.load(std::sync::atomic::Ordering::SeqCst);
        for _ in 0..3 {
            let warning = review_warning(&state, "gone").await;
            assert!(warning.contains("could not be looked up"), "{warning}");
        }
        assert_eq!(lookups(), 1, "the miss was not remembered");
        review_warning(&state, "gone-too").await;
        let warning = review_warning(&state, "gone-three").await;
        assert!(
            warning.contains("too many namespaces were looked up lately"),
            "{warning}"
        );
        assert_eq!(lookups(), 2);
        let metrics = state.metrics().encode().unwrap();
        assert!(
            metrics.contains(r#"outcome="namespace_rate_limited"} 1"#),
            "{metrics}"
        );
    }

    /// A source still taking in its first list of namespaces, whose lookups cannot tell; its
    /// one manager injects into namespaces labelled `tier: apps`.
    struct Listing {
        view: Arriving,
        listed: tokio::sync::watch::Sender<bool>,
        lookups: std::sync::atomic::AtomicUsize,
        /// Lookups never answer.
        hang: bool,
    }

    struct Arriving {
        managers: StaticView,
        namespaces: std::sync::OnceLock<Vec<cheiron_core::policy::NamespaceMeta>>,
    }

    impl View for Arriving {
        fn managers_in(
            &self,
            namespace: &cheiron_core::policy::NamespaceMeta,
        ) -> Vec<Arc<cheiron_core::policy::Manager>> {
            self.managers.managers_in(namespace)
        }

        fn namespace(&self, name: &str) -> Option<cheiron_core::policy::NamespaceMeta> {
            self.namespaces
                .get()?
                .iter()
                .find(|n| n.name == name)
                .cloned()
        }

        fn secret_exists(&self, _namespace: &str, _name: &str) -> Option<bool> {
            None
        }
    }

    impl Listing {
        fn new() -> Self {
            let manager: cheiron_runtime::api::ClusterImagePullSecretManager =
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
                    "metadata": {"name": "apps"},
                    "spec": {"mode": "Pod", "namespaceSelector": {"matchLabels": {"tier": "apps"}},
                             "secrets": [{"existingSecretRef": {"name": "pull", "namespace": "cheiron"}}]},
                }))
                .unwrap();
            let manager = cheiron_core::policy::Manager::from_cluster(&manager).unwrap();
            Self {
                view: Arriving {
                    managers: StaticView::new(vec![manager], []),
                    namespaces: std::sync::OnceLock::new(),
                },
                listed: tokio::sync::watch::Sender::new(false),
                lookups: std::sync::atomic::AtomicUsize::new(0),
                hang: false,
            }
        }

        /// The list comes in: these namespaces, labelled `tier: apps`.
        fn list(&self, names: &[&str]) {
            let namespaces = names
                .iter()
                .map(|name| cheiron_core::policy::NamespaceMeta {
                    labels: [("tier".to_owned(), "apps".to_owned())].into(),
                    ..cheiron_core::policy::NamespaceMeta::named(*name)
                })
                .collect();
            let _ = self.view.namespaces.set(namespaces);
            self.listed.send_replace(true);
        }
    }

    impl Source for Listing {
        fn view(&self) -> &dyn View {
            &self.view
        }

        fn lookup_namespace<'a>(
            &'a self,
            _name: &'a str,
        ) -> futures::future::BoxFuture<'a, NamespaceLookup> {
            self.lookups
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if self.hang {
                return Box::pin(futures::future::pending());
            }
            Box::pin(std::future::ready(NamespaceLookup::Unknown))
        }

        fn namespaces_listed(&self) -> futures::future::BoxFuture<'_, ()> {
            let mut listed = self.listed.subscribe();
            Box::pin(async move {
                let _ = listed.wait_for(|listed| *listed).await;
            })
        }
    }

    impl Readiness for Listing {
        fn is_ready(&self) -> bool {
            true
        }
    }

    #[tokio::test]
    async fn before_the_namespace_list_is_in_a_namespace_that_cannot_be_looked_up_is_waited_for() {
        let source = Arc::new(Listing::new());
        // One lookup, then the rate refuses the others.
        let state = with_lookups(source.clone(), 1);
        let looked_up = tokio::spawn(post(state.clone(), pod_review("looked-up")));
        let rate_limited = tokio::spawn(post(state.clone(), pod_review("rate-limited")));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!looked_up.is_finished() && !rate_limited.is_finished());
        source.list(&["looked-up", "rate-limited"]);
        for answer in [looked_up, rate_limited] {
            let (status, body) = answer.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            let body: Value = serde_json::from_str(&body).unwrap();
            assert!(
                body["response"]["patch"].is_string(),
                "answered from the listed namespace's labels: {body}"
            );
        }
        assert_eq!(
            source.lookups.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "while the list is coming in, the rate does not hold a lookup back"
        );
        let metrics = state.metrics().encode().unwrap();
        assert!(metrics.contains(r#"outcome="patched"} 2"#), "{metrics}");
        // Listed: the rate holds again.
        let warning = review_warning(&state, "elsewhere").await;
        assert!(
            warning.contains("too many namespaces were looked up lately"),
            "{warning}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn lookups_past_the_rate_while_listing_are_bounded_in_flight() {
        let source = Arc::new(Listing {
            hang: true,
            ..Listing::new()
        });
        let state = with_lookups(source.clone(), 1);
        let reviews: Vec<_> = (0..crate::source::LISTING_LOOKUPS_IN_FLIGHT + 5)
            .map(|k| tokio::spawn(post(state.clone(), pod_review(&format!("ns-{k}")))))
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(
            source.lookups.load(std::sync::atomic::Ordering::SeqCst),
            1 + crate::source::LISTING_LOOKUPS_IN_FLIGHT,
            "the rate's one, then the bound"
        );
        for review in reviews {
            review.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_namespace_list_that_does_not_come_is_waited_for_no_longer_than_the_limit() {
        let source = Arc::new(Listing::new());
        let state = WebhookState::new(source.clone(), Arc::new(Metrics::new()));
        let started = tokio::time::Instant::now();
        let warning = review_warning(&state, "team").await;
        let waited = started.elapsed();
        assert!(warning.contains("could not be looked up"), "{warning}");
        assert!(
            waited <= NAMESPACE_LIST_WAIT
                && waited + std::time::Duration::from_secs(1) > NAMESPACE_LIST_WAIT,
            "waited {waited:?}"
        );
        // Once the list is in, a namespace it lacks is not waited for again.
        source.list(&["other"]);
        let started = tokio::time::Instant::now();
        review_warning(&state, "gone").await;
        assert!(started.elapsed() < std::time::Duration::from_millis(100));
    }

    #[test]
    fn patch_is_encoded_as_base64() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1",
            "kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
            "operation":"CREATE","userInfo":{},"object":null}}"#;
        let admission = admission::review(body, &StaticView::default()).unwrap();
        let mut review = admission.review;
        let patch = json_patch::Patch(vec![json_patch::PatchOperation::Test(
            json_patch::TestOperation {
                path: json_patch::jsonptr::PointerBuf::from_tokens(["a"]),
                value: Value::from(1),
            },
        )]);
        review.response = Some(review.response.unwrap().with_patch(patch).unwrap());

        let encoded: Value = serde_json::from_slice(&encode_review(&review).unwrap()).unwrap();
        let text = encoded["response"]["patch"].as_str().unwrap();
        let decoded: Value =
            serde_json::from_slice(&BASE64_STANDARD.decode(text).unwrap()).unwrap();
        assert_eq!(
            decoded,
            serde_json::json!([{"op": "test", "path": "/a", "value": 1}])
        );
        assert_eq!(encoded["response"]["patchType"], "JSONPatch");
        assert_eq!(encoded["response"]["uid"], "u1");
    }
}
