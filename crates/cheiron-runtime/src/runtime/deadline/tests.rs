use std::time::Duration;

use bytes::Bytes;
use futures::stream;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full, StreamBody};
use kube::client::{Body, DynBody};
use tower::{BoxError, Layer, ServiceExt as _, service_fn};

use super::DeadlineLayer;

const LIMIT: Duration = Duration::from_millis(200);
/// Longer than any answer here takes, shorter than a hung test.
const PATIENCE: Duration = Duration::from_secs(10);

fn request(uri: &str) -> Request<Body> {
    Request::get(uri)
        .body(Body::empty())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn whole(text: &'static str) -> Box<DynBody> {
    Box::new(Full::new(Bytes::from_static(text.as_bytes())).map_err(|never| match never {}))
}

/// A body whose first bytes come and whose end never does.
fn endless() -> Box<DynBody> {
    let first = stream::iter([Ok::<_, BoxError>(http_body::Frame::data(
        Bytes::from_static(b"{\"items\":["),
    ))]);
    Box::new(StreamBody::new(futures::StreamExt::chain(
        first,
        stream::pending(),
    )))
}

async fn text(answer: Response<Box<DynBody>>) -> String {
    let bytes = answer
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::test]
async fn a_request_never_answered_fails_at_its_deadline_naming_only_method_and_path() {
    let silent = service_fn(|_: Request<Body>| std::future::pending::<Result<_, BoxError>>());
    let bounded = DeadlineLayer(LIMIT).layer(silent);
    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(
        PATIENCE,
        bounded.oneshot(request(
            "/api/v1/namespaces/team/secrets/pull?fieldManager=cheiron",
        )),
    )
    .await
    .unwrap_or_else(|_| panic!("not given up within {PATIENCE:?}"));
    let Err(error) = outcome else {
        panic!("a request never answered succeeded")
    };
    assert!(started.elapsed() >= LIMIT, "given up early");
    let line = error.to_string();
    assert!(
        line.contains("GET /api/v1/namespaces/team/secrets/pull within 200ms"),
        "{line}"
    );
    assert!(!line.contains("fieldManager"), "the query is named: {line}");
}

#[tokio::test]
async fn an_answer_whose_body_stops_coming_fails_at_the_deadline() {
    let stalls =
        service_fn(|_: Request<Body>| async { Ok::<_, BoxError>(Response::new(endless())) });
    let bounded = DeadlineLayer(LIMIT).layer(stalls);
    let outcome = tokio::time::timeout(PATIENCE, bounded.oneshot(request("/api/v1/namespaces")))
        .await
        .unwrap_or_else(|_| panic!("not given up within {PATIENCE:?}"));
    assert!(outcome.is_err(), "a body that never ended was handed on");
}

#[tokio::test]
async fn an_answer_in_time_is_handed_on_whole() {
    let answers = service_fn(|_: Request<Body>| async {
        let mut answer = Response::new(whole("{\"kind\":\"Namespace\"}"));
        *answer.status_mut() = http::StatusCode::CREATED;
        Ok::<_, BoxError>(answer)
    });
    let bounded = DeadlineLayer(LIMIT).layer(answers);
    let answer = bounded
        .oneshot(request("/api/v1/namespaces"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer.status(), http::StatusCode::CREATED);
    assert_eq!(text(answer).await, "{\"kind\":\"Namespace\"}");
}

#[tokio::test]
async fn a_watch_is_not_bounded() {
    // Its answer comes at once and its body streams for as long as the watch lasts.
    let watches =
        service_fn(|_: Request<Body>| async { Ok::<_, BoxError>(Response::new(endless())) });
    let bounded = DeadlineLayer(LIMIT).layer(watches);
    let answer = bounded
        .oneshot(request(
            "/api/v1/secrets?watch=true&resourceVersion=7&timeoutSeconds=290",
        ))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut body = answer.into_body();
    let first = body
        .frame()
        .await
        .and_then(Result::ok)
        .and_then(|frame| frame.into_data().ok());
    assert_eq!(first.as_deref(), Some(&b"{\"items\":["[..]));
    // Five deadlines later the stream is still open, neither ended nor failed.
    assert!(
        tokio::time::timeout(LIMIT * 5, body.frame()).await.is_err(),
        "the watch's stream was ended"
    );
}
