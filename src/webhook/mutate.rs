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
use bytes::BytesMut;
use futures::StreamExt;
use kube::core::{DynamicObject, admission::AdmissionReview};
use serde_json::Value;

use super::{BODY_TIMEOUT, MAX_BODY_BYTES, RequestError, WebhookState};
use crate::{
    admin::close_when_shutting_down,
    admission::{self, Admission, Outcome},
    policy::WithNamespace,
    source::NamespaceLookup,
};

/// Most bytes of an oversized body read and discarded before answering 413, so that a
/// client still sending sees the answer instead of a reset connection.
const MAX_DISCARDED_BYTES: usize = 2 * MAX_BODY_BYTES;

/// Largest buffer allocated up front from `Content-Length`; a client cannot make the
/// server reserve megabytes per connection by announcing a body it never sends.
const MAX_PREALLOCATED_BYTES: usize = 256 * 1024;

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
    let body = tokio::time::timeout(BODY_TIMEOUT, read_body(&parts.headers, body))
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
        // A namespace created a moment ago may not have reached the cache: ask the source
        // rather than treat it as unlabelled, which could miss its opt-out.
        Some(ns) => match state.source.lookup_namespace(&ns).await {
            NamespaceLookup::Found(meta) => review.answer(&WithNamespace::new(view, meta)),
            NamespaceLookup::Untracked => review.answer(view),
            NamespaceLookup::Unknown => review.admit_unchanged(
                format!("cheiron: namespace {ns} could not be looked up; admitted unchanged"),
                Outcome::NamespaceUnknown,
            ),
        },
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

/// Buffers the body, up to [`MAX_BODY_BYTES`].
async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, RequestError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut chunks = body.into_data_stream();
    if announced.is_some_and(|n| n > MAX_BODY_BYTES) {
        discard(chunks).await;
        return Err(RequestError::TooLarge);
    }
    let mut buffer = BytesMut::with_capacity(announced.unwrap_or(0).min(MAX_PREALLOCATED_BYTES));
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(RequestError::UnreadableBody)?;
        if buffer.len().saturating_add(chunk.len()) > MAX_BODY_BYTES {
            discard(chunks).await;
            return Err(RequestError::TooLarge);
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer.freeze())
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
    tracing::debug!(
        uid,
        resource = %admission.resource,
        operation = admission.operation,
        namespace = admission.namespace.as_deref().unwrap_or(""),
        outcome = admission.outcome.as_str(),
        "admission review answered"
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::sync::Arc;

    use axum::http::StatusCode;
    use tower::ServiceExt;

    use super::*;
    use crate::{
        admin::Readiness,
        metrics::Metrics,
        policy::{StaticView, View},
        source::Source,
    };

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
