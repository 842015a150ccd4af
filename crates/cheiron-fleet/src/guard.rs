//! What a workload cluster answers is not trusted (docs/fleet.md, "Who can enrol a cluster"):
//! the layer every workload client is built with replaces the body of an error answer with
//! a `Status` of cheiron's own (the HTTP code and its usual reason, nothing the server said),
//! and bounds every other answer (a list, a watch stream) to a number of bytes. So whatever
//! a server behind a kubeconfig's `server:` says never reaches a status, an Event or a log
//! line, and a hostile one cannot make the controller buffer a list without end.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use kube::client::DynBody;
use tower::{BoxError, util::MapResponseLayer};

/// Most bytes of one answer of a workload cluster (a list page, a whole watch stream, which
/// the watcher then resumes) before it fails (`--fleet-max-response-bytes`).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// The layer of a workload cluster's client: see the module.
pub(super) fn layer(
    max_bytes: usize,
) -> MapResponseLayer<impl Fn(Response<Box<DynBody>>) -> Response<Box<DynBody>> + Clone> {
    MapResponseLayer::new(move |response: Response<Box<DynBody>>| guard(response, max_bytes))
}

fn guard(response: Response<Box<DynBody>>, max_bytes: usize) -> Response<Box<DynBody>> {
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        // The server's body is dropped unread.
        let (mut parts, _) = response.into_parts();
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.remove(header::CONTENT_ENCODING);
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let body = Full::new(Bytes::from(refusal(status)))
            .map_err(|never: std::convert::Infallible| -> BoxError { match never {} });
        return Response::from_parts(parts, Box::new(body) as Box<DynBody>);
    }
    response.map(|body| Box::new(Limited::new(body, max_bytes)) as Box<DynBody>)
}

/// The `Status` standing for an error answer: its code, the reason Kubernetes gives that code
/// (what the watcher and cheiron's writes go by), and a message of cheiron's.
fn refusal(status: StatusCode) -> String {
    let code = status.as_u16();
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": describe(status),
        "reason": reason(status),
        "code": code,
    })
    .to_string()
}

/// `403 Forbidden (the workload cluster's answer is not shown)`.
fn describe(status: StatusCode) -> String {
    format!(
        "{} {} (the workload cluster's answer is not shown)",
        status.as_u16(),
        status.canonical_reason().unwrap_or("error")
    )
}

/// Kubernetes' `StatusReason` of an HTTP code.
fn reason(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        504 => "Timeout",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

/// An error of a workload client as one line for a status, an Event or a log: the code of an
/// API error (its message is cheiron's own when it came from [`layer`], but a watch stream's
/// `ERROR` event carries the server's), and for the others their text with every quoted value
/// hidden and its length bounded.
pub(super) fn error_line(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => StatusCode::from_u16(s.code)
            .map(describe)
            .unwrap_or_else(|_| {
                format!(
                    "code {} (the workload cluster's answer is not shown)",
                    s.code
                )
            }),
        other => {
            let mut line = cheiron_runtime::message::without_values(&other.to_string());
            cheiron_runtime::message::truncate(&mut line, MAX_ERROR_LINE);
            line
        }
    }
}

/// The same for a watch of a workload cluster.
pub(super) fn watch_error_line(e: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error;
    match e {
        Error::InitialListFailed(e) => format!("initial list failed: {}", error_line(e)),
        Error::WatchStartFailed(e) => format!("watch start failed: {}", error_line(e)),
        Error::WatchFailed(e) => format!("watch failed: {}", error_line(e)),
        Error::WatchError(s) => format!(
            "watch error: {}",
            StatusCode::from_u16(s.code).map_or_else(|_| format!("code {}", s.code), describe)
        ),
        Error::NoResourceVersion => e.to_string(),
    }
}

/// Longest error line about a workload cluster that is not an API error.
const MAX_ERROR_LINE: usize = 200;

#[cfg(test)]
mod tests {
    use super::*;

    const MARKER: &str = "internal-listener-secret-marker";

    fn answer(status: u16, body: &str) -> Response<Box<DynBody>> {
        let body = Full::new(Bytes::from(body.to_owned()))
            .map_err(|never: std::convert::Infallible| -> BoxError { match never {} });
        let mut response = Response::new(Box::new(body) as Box<DynBody>);
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or_else(|e| panic!("{e}"));
        response
    }

    async fn text(response: Response<Box<DynBody>>) -> Result<String, String> {
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn an_error_answer_keeps_its_code_and_loses_its_body() {
        for (code, body) in [
            (
                403,
                format!("{{\"kind\":\"Status\",\"message\":\"{MARKER}\",\"code\":403}}"),
            ),
            (403, format!("<html>{MARKER}</html>")),
            (500, MARKER.to_owned()),
            (
                410,
                format!("{{\"kind\":\"Status\",\"reason\":\"{MARKER}\",\"code\":410}}"),
            ),
        ] {
            let guarded = guard(answer(code, &body), 1024);
            assert_eq!(guarded.status().as_u16(), code);
            let text = text(guarded).await.unwrap_or_else(|e| panic!("{e}"));
            assert!(!text.contains(MARKER), "{text}");
            let status: kube::core::Status =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            assert_eq!(status.code, code);
            assert!(status.message.starts_with(&code.to_string()), "{status:?}");
        }
        let gone: kube::core::Status =
            serde_json::from_str(&refusal(StatusCode::GONE)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gone.reason, "Expired");
    }

    #[tokio::test]
    async fn an_answer_longer_than_the_bound_fails() {
        let small = guard(answer(200, "{\"items\":[]}"), 1024);
        assert_eq!(text(small).await.as_deref(), Ok("{\"items\":[]}"));
        let big = guard(answer(200, &"x".repeat(2048)), 1024);
        assert!(text(big).await.is_err());
    }

    #[test]
    fn an_error_line_never_quotes_the_server() {
        let api = kube::Error::Api(
            kube::core::Status::failure(MARKER, MARKER)
                .with_code(403)
                .boxed(),
        );
        let line = error_line(&api);
        assert!(line.starts_with("403 Forbidden"), "{line}");
        assert!(!line.contains(MARKER), "{line}");
        let watch = kube::runtime::watcher::Error::WatchError(
            kube::core::Status::failure(MARKER, MARKER)
                .with_code(500)
                .boxed(),
        );
        let line = watch_error_line(&watch);
        assert!(!line.contains(MARKER), "{line}");
        assert!(line.contains("500"), "{line}");
    }
}
