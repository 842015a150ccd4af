//! A bound on every API request but a watch, from the moment it is sent until the last byte
//! of its answer (docs/reliability.md, "A connection that stops answering").
//!
//! kube's client sets no read timeout (a long-lived exec session would trip one): a request
//! sent over a connection whose packets are lost, or whose apiserver died without a word,
//! waits for an answer as long as the connection stays open, which can be forever. TCP
//! keep-alive ([`super::connection`]) finds neither an apiserver that is alive but does not
//! answer nor a path that loses a request's unacknowledged bytes. The reconcile, the status
//! write or the CLI command behind the request waits with it. The apiserver itself answers
//! every request that is not a watch within its `--request-timeout` (60 s unless its operator
//! changed it), with `504` when its own work took too long; [`API_REQUEST_DEADLINE`] leaves
//! it room for that and then gives the request up, closing its connection, so the caller's
//! retry goes out over a new one. Watches hold their connection open by design;
//! kube-runtime's watcher bounds how long one may stay silent on its own, and keep-alive
//! finds a dead one sooner.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use http::{Request, Response};
use http_body_util::{BodyExt as _, Full};
use kube::client::{Body, DynBody};
use tower::{BoxError, Layer, Service};

use super::{connection::client_builder, pace::is_watch};

/// How long an API request other than a watch may take, answer included: the apiserver's
/// default `--request-timeout` (60 s) and 10 s for the answer to travel.
pub const API_REQUEST_DEADLINE: Duration = Duration::from_secs(70);

/// A kube client for `config` whose requests are each given up after `deadline`
/// ([`API_REQUEST_DEADLINE`] but in tests): how every part of cheiron that talks to a cluster
/// builds its client (the controller's adds its pace, [`super::pace::paced_client`]).
pub fn bounded_client(config: kube::Config, deadline: Duration) -> kube::Result<kube::Client> {
    Ok(client_builder(config)?
        .with_layer(&DeadlineLayer(deadline))
        .build())
}

/// Bounds the requests of the service it wraps (see the module).
#[derive(Clone, Copy, Debug)]
pub struct DeadlineLayer(pub Duration);

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline {
            inner,
            limit: self.0,
        }
    }
}

/// A service whose requests (watches excepted) fail with [`Unanswered`] when their answer is
/// not all in within the limit. The answer's body is read here, within the bound, and handed
/// on whole.
#[derive(Clone, Debug)]
pub struct Deadline<S> {
    inner: S,
    limit: Duration,
}

/// A request given up at its deadline. Names the method and the path, never the query or
/// anything of the body.
#[derive(Debug, thiserror::Error)]
#[error(
    "the apiserver did not answer {method} {path} within {limit:?}; the request is given up and its connection closed"
)]
pub struct Unanswered {
    method: http::Method,
    path: String,
    limit: Duration,
}

type Answer = Response<Box<DynBody>>;

impl<S> Service<Request<Body>> for Deadline<S>
where
    S: Service<Request<Body>, Response = Answer, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if is_watch(&request) {
            return Box::pin(self.inner.call(request));
        }
        let unanswered = Unanswered {
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            limit: self.limit,
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let whole = async {
                let (parts, body) = answer.await?.into_parts();
                let bytes = body.collect().await?.to_bytes();
                let body = Full::new(bytes).map_err(|never| -> BoxError { match never {} });
                Ok(Response::from_parts(parts, Box::new(body) as Box<DynBody>))
            };
            match tokio::time::timeout(unanswered.limit, whole).await {
                Ok(answer) => answer,
                // Dropping the request's future closes its connection: it is not pooled again.
                Err(_) => Err(Box::new(unanswered) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests;
