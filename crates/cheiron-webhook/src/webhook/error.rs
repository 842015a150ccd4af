//! The one place where a request that cannot be answered becomes an HTTP response.

use std::net::SocketAddr;

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use cheiron_core::admission::InvalidReview;
use cheiron_runtime::tls::TlsError;

use super::limits::MAX_BODY_BYTES;

/// Longest message put in an error response body. A serde message may quote the offending
/// input, and a client should get a short answer, not its own megabytes back.
const MAX_MESSAGE_BYTES: usize = 256;

/// `Retry-After` of a 503: bodies in flight are answered in milliseconds, or time out.
const RETRY_AFTER_SECONDS: u8 = 1;
const RETRY_AFTER: &str = "1";

/// A request the webhook or admin server refuses.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The body is larger than [`MAX_BODY_BYTES`] (413).
    #[error("request body exceeds {MAX_BODY_BYTES} bytes")]
    TooLarge,
    /// The body's bytes do not fit in the body budget now (503, with `Retry-After`).
    #[error("too many request bodies in flight; retry in {RETRY_AFTER_SECONDS} s")]
    OverBudget,
    /// The body could not be read, e.g. the connection broke (400).
    #[error("cannot read request body: {0}")]
    UnreadableBody(#[source] axum::Error),
    /// The client did not send the whole body in time (408).
    #[error("request body not received in time")]
    BodyTimeout,
    /// The body is not an AdmissionReview with a request (400).
    #[error(transparent)]
    InvalidReview(#[from] InvalidReview),
    /// The AdmissionReview response could not be serialised (500).
    #[error("cannot encode the AdmissionReview response: {0}")]
    EncodeReview(#[source] serde_json::Error),
}

impl RequestError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            RequestError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            RequestError::UnreadableBody(_) | RequestError::InvalidReview(_) => {
                StatusCode::BAD_REQUEST
            }
            RequestError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            RequestError::OverBudget => StatusCode::SERVICE_UNAVAILABLE,
            RequestError::EncodeReview(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A short fixed name for metrics and logs. Unlike the message, it never quotes
    /// anything the client sent.
    pub fn reason(&self) -> &'static str {
        match self {
            RequestError::TooLarge => "too_large",
            RequestError::UnreadableBody(_) => "unreadable_body",
            RequestError::BodyTimeout => "body_timeout",
            RequestError::OverBudget => "over_budget",
            RequestError::InvalidReview(InvalidReview::NotJson(_)) => "not_json",
            RequestError::InvalidReview(
                InvalidReview::NotAReview(_) | InvalidReview::WrongType,
            ) => "not_a_review",
            RequestError::InvalidReview(InvalidReview::NoRequest) => "no_request",
            RequestError::EncodeReview(_) => "encode_review",
        }
    }
}

impl IntoResponse for RequestError {
    fn into_response(self) -> Response {
        let mut message = self.to_string();
        cheiron_runtime::message::truncate(&mut message, MAX_MESSAGE_BYTES);
        message.push('\n');
        let mut response = (
            self.status(),
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            message,
        )
            .into_response();
        if let RequestError::OverBudget = self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER));
        }
        response
    }
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The serving certificate could not be loaded or generated.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// An address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use axum::body::to_bytes;

    use super::*;

    async fn answer(error: RequestError) -> (StatusCode, String, String) {
        let response = error.into_response();
        let status = response.status();
        let content_type = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (
            status,
            content_type,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    fn not_json() -> InvalidReview {
        InvalidReview::NotJson(
            serde_json::from_slice::<serde_json::Value>(b"\x00garbage").unwrap_err(),
        )
    }

    #[tokio::test]
    async fn too_large_is_413() {
        let (status, content_type, body) = answer(RequestError::TooLarge).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(content_type, "text/plain; charset=utf-8");
        assert_eq!(
            body,
            format!("request body exceeds {MAX_BODY_BYTES} bytes\n")
        );
    }

    #[tokio::test]
    async fn invalid_review_is_400_with_its_message() {
        let (status, _, body) = answer(RequestError::InvalidReview(InvalidReview::NoRequest)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body, "AdmissionReview has no request\n");

        let (status, _, body) = answer(RequestError::InvalidReview(not_json())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.starts_with("body is not JSON: "), "{body}");
    }

    #[tokio::test]
    async fn body_timeout_is_408_and_encoding_failures_are_500() {
        assert_eq!(
            answer(RequestError::BodyTimeout).await.0,
            StatusCode::REQUEST_TIMEOUT
        );
        let encode = serde_json::to_vec(&f64::NAN)
            .and_then(|_| serde_json::from_str::<u8>("x"))
            .unwrap_err();
        assert_eq!(
            answer(RequestError::EncodeReview(encode)).await.0,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[tokio::test]
    async fn long_messages_are_truncated_on_a_char_boundary() {
        // serde quotes the unexpected string, so a huge string would come straight back.
        let quoted = format!("\"{}\"", "é".repeat(10_000));
        let error = serde_json::from_str::<u32>(&quoted).unwrap_err();
        let (status, _, body) = answer(RequestError::InvalidReview(InvalidReview::NotAReview(
            error,
        )))
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body.len() <= MAX_MESSAGE_BYTES + "…\n".len(),
            "{} bytes",
            body.len()
        );
        assert!(body.ends_with("…\n"));
    }

    #[tokio::test]
    async fn over_budget_is_503_with_retry_after() {
        let response = RequestError::OverBudget.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(
            answer(RequestError::OverBudget).await.2,
            "too many request bodies in flight; retry in 1 s\n"
        );
        assert_eq!(RequestError::OverBudget.reason(), "over_budget");
    }

    #[test]
    fn reasons_never_quote_the_request() {
        let error = RequestError::InvalidReview(not_json());
        assert_eq!(error.reason(), "not_json");
    }
}
