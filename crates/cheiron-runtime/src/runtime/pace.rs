//! How many API requests the controller keeps in flight, adapted to what the apiserver serves.
//!
//! API Priority and Fairness answers a request beyond its priority level's seats with 429.
//! The kube client retries such a request itself (after the apiserver's `Retry-After`, then
//! with exponential backoff), so a reconcile sees nothing but slowness; yet a controller that
//! keeps writing 16 at a time to a server that serves one gets most of them rejected, sleeps,
//! and tries them all again together. [`paced_client`] puts a limit under the retries instead:
//! every attempt takes a permit, and a 429 halves the number of requests that were in flight
//! (once per burst: the rejections of requests sent before the last decrease say nothing new).
//! A rejection costs the rejected request the apiserver's `Retry-After` (a second), so the limit
//! grows back slowly: by one after [`GROWTH_RUN`] requests served in a row, or `limit` if
//! that is more, up to the bound. Watches are not paced: each holds its connection for minutes
//! and is not what a throttled server rejects.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use http::{Request, Response, StatusCode};
use kube::client::{Body, retry::RetryPolicy};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service, ServiceExt as _, buffer::BufferLayer, retry::RetryLayer};

use super::{connection::client_builder, deadline::DeadlineLayer};

/// Requests (other than watches) the controller has in flight at most: two manager kinds,
/// each reconciling up to `--concurrency` managers that write 16 at a time, with room for
/// reads and Events; at the default `--concurrency 4` the limit starts here and only a
/// throttling apiserver lowers it.
pub const MAX_API_REQUESTS_IN_FLIGHT: usize = 128;

/// Requests served in a row, at least, before the limit grows by one.
pub const GROWTH_RUN: usize = 16;

/// Requests queued for the client's connection before callers wait.
const BUFFER: usize = 1024;

/// A kube client for `config` whose requests are paced by `pace`, retried as the kube client
/// would (429, 503 and 504, honouring `Retry-After`), each attempt taking a permit of `pace`
/// and given up after `deadline` ([`super::API_REQUEST_DEADLINE`] but in tests).
pub fn paced_client(
    mut config: kube::Config,
    pace: Arc<Pace>,
    deadline: Duration,
) -> kube::Result<kube::Client> {
    // The client's own retry would sit under the pace; it goes above it instead.
    config.default_retry = false;
    Ok(client_builder(config)?
        .with_layer(&DeadlineLayer(deadline))
        .with_layer(&BufferLayer::new(BUFFER))
        .with_layer(&PaceLayer(pace))
        .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
        .build())
}

/// Additive increase, multiplicative decrease of a concurrency limit. Pure, so its rules are
/// tested without a clock or a server.
#[derive(Debug)]
struct Aimd {
    limit: usize,
    max: usize,
    served_in_a_row: usize,
    /// Counts decreases: a request remembers the epoch it was sent in.
    epoch: u64,
}

impl Aimd {
    fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            limit: max,
            max,
            served_in_a_row: 0,
            epoch: 0,
        }
    }

    /// A request was served: after [`GROWTH_RUN`] (or `limit`) of them in a row the limit
    /// grows by one.
    fn served(&mut self) -> usize {
        self.served_in_a_row += 1;
        if self.served_in_a_row >= self.limit.max(GROWTH_RUN) && self.limit < self.max {
            self.limit += 1;
            self.served_in_a_row = 0;
        }
        self.limit
    }

    /// A request sent in `epoch` was rejected with 429 while `in_flight` were: halve what was
    /// really in flight (a limit of 128 with 16 requests out says nothing), unless the limit
    /// was lowered since that request was sent.
    fn throttled(&mut self, epoch: u64, in_flight: usize) -> usize {
        self.served_in_a_row = 0;
        if epoch == self.epoch {
            self.limit = (self.limit.min(in_flight) / 2).max(1);
            self.epoch += 1;
        }
        self.limit
    }
}

/// The shared limit: a semaphore with `limit` permits. Shrinking forgets free permits at once
/// and owes the rest, paid by permits forgotten as they come back.
#[derive(Debug)]
pub struct Pace {
    permits: Arc<Semaphore>,
    state: Mutex<PaceState>,
}

#[derive(Debug)]
struct PaceState {
    aimd: Aimd,
    /// Permits to forget when they are returned.
    owed: usize,
    /// Permits held.
    in_flight: usize,
}

impl Pace {
    /// A pace starting (and staying, unless throttled) at `max` requests in flight.
    pub fn new(max: usize) -> Self {
        let aimd = Aimd::new(max);
        Self {
            permits: Arc::new(Semaphore::new(aimd.limit)),
            state: Mutex::new(PaceState {
                aimd,
                owed: 0,
                in_flight: 0,
            }),
        }
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.state().aimd.limit
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PaceState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn acquire(self: &Arc<Self>) -> Permit {
        // The semaphore is never closed, so acquiring cannot fail; `None` would only pass.
        let permit = self.permits.clone().acquire_owned().await.ok();
        let epoch = {
            let mut state = self.state();
            state.in_flight += 1;
            state.aimd.epoch
        };
        Permit {
            permit,
            epoch,
            pace: self.clone(),
        }
    }

    /// The number of requests holding a permit.
    pub fn in_flight(&self) -> usize {
        self.state().in_flight
    }

    /// Adjusts the limit to the answer to a request sent in `epoch`.
    fn observe(&self, status: StatusCode, epoch: u64) {
        let mut state = self.state();
        let before = state.aimd.limit;
        let after = if status == StatusCode::TOO_MANY_REQUESTS {
            let in_flight = state.in_flight;
            state.aimd.throttled(epoch, in_flight)
        } else {
            state.aimd.served()
        };
        if after > before {
            let grow = after - before;
            let repaid = grow.min(state.owed);
            state.owed -= repaid;
            self.permits.add_permits(grow - repaid);
        } else if after < before {
            let shrink = before - after;
            let forgotten = self.permits.forget_permits(shrink);
            state.owed += shrink - forgotten;
            tracing::debug!(
                limit = after,
                "the apiserver throttles: fewer requests in flight"
            );
        }
    }
}

/// A permit of [`Pace`], forgotten instead of returned while the pace owes permits.
struct Permit {
    permit: Option<OwnedSemaphorePermit>,
    /// The epoch of the pace when the permit was taken.
    epoch: u64,
    pace: Arc<Pace>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.pace.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.owed > 0
            && let Some(permit) = self.permit.take()
        {
            state.owed -= 1;
            permit.forget();
        }
    }
}

/// Paces the requests of the service it wraps by a shared [`Pace`].
#[derive(Clone, Debug)]
pub struct PaceLayer(pub Arc<Pace>);

impl<S> Layer<S> for PaceLayer {
    type Service = Paced<S>;

    fn layer(&self, inner: S) -> Paced<S> {
        Paced {
            inner,
            pace: self.0.clone(),
        }
    }
}

/// A service whose requests (watches excepted) each hold a permit of a [`Pace`] while in
/// flight, and whose responses adjust it.
#[derive(Clone, Debug)]
pub struct Paced<S> {
    inner: S,
    pace: Arc<Pace>,
}

/// A watch holds its connection open: it neither waits for nor holds a permit, and no
/// deadline bounds it ([`super::deadline`]).
pub(crate) fn is_watch<B>(request: &Request<B>) -> bool {
    request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

impl<S, B> Service<Request<Body>> for Paced<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness of the inner service is awaited in `call`, after the permit.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let pace = self.pace.clone();
        Box::pin(async move {
            let permit = if is_watch(&request) {
                None
            } else {
                Some(pace.acquire().await)
            };
            let response = inner.oneshot(request).await;
            if let (Some(permit), Ok(response)) = (&permit, &response) {
                pace.observe(response.status(), permit.epoch);
            }
            drop(permit);
            response
        })
    }
}

#[cfg(test)]
mod tests;
