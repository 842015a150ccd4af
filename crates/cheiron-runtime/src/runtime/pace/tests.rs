use std::{
    convert::Infallible,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, stream};
use http::{Request, Response, StatusCode};
use kube::client::{Body, retry::RetryPolicy};
use tokio::sync::Notify;
use tower::{BoxError, Layer, Service, ServiceExt, retry::RetryLayer, service_fn};

use super::{Aimd, GROWTH_RUN, Pace, PaceLayer};

#[test]
fn a_rejection_halves_what_was_in_flight_not_the_idle_limit() {
    let mut aimd = Aimd::new(128);
    assert_eq!(aimd.throttled(0, 16), 8);
}

#[test]
fn rejections_of_requests_sent_before_a_decrease_do_not_lower_it_again() {
    let mut aimd = Aimd::new(16);
    assert_eq!(aimd.throttled(0, 16), 8);
    assert_eq!(aimd.throttled(0, 15), 8, "the same burst");
    assert_eq!(aimd.throttled(1, 8), 4, "sent after the decrease");
}

#[test]
fn the_limit_never_falls_below_one() {
    let mut aimd = Aimd::new(4);
    for _ in 0..10 {
        let epoch = aimd.epoch;
        aimd.throttled(epoch, 4);
    }
    assert_eq!(aimd.limit, 1);
}

#[test]
fn a_limit_grows_by_one_after_a_run_served_and_stops_at_the_bound() {
    let mut aimd = Aimd::new(3);
    aimd.throttled(0, 3);
    assert_eq!(aimd.limit, 1);
    for _ in 1..GROWTH_RUN {
        assert_eq!(aimd.served(), 1);
    }
    assert_eq!(aimd.served(), 2, "a run served at a limit of one");
    aimd.throttled(1, 2);
    assert_eq!(aimd.limit, 1, "a rejection breaks the run");
    for _ in 0..10 * GROWTH_RUN {
        aimd.served();
    }
    assert_eq!(aimd.limit, 3);
}

/// An apiserver with one seat that rejects (429) what it cannot serve at once, like a priority
/// level of API Priority and Fairness with `limitResponse: Reject`.
#[derive(Default)]
struct OneSeat {
    busy: AtomicUsize,
    served: AtomicUsize,
    rejected: AtomicUsize,
}

impl OneSeat {
    async fn handle(&self) -> Response<String> {
        if self.busy.fetch_add(1, Ordering::SeqCst) > 0 {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            self.rejected.fetch_add(1, Ordering::SeqCst);
            return status(StatusCode::TOO_MANY_REQUESTS);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.busy.fetch_sub(1, Ordering::SeqCst);
        self.served.fetch_add(1, Ordering::SeqCst);
        status(StatusCode::OK)
    }
}

fn status(code: StatusCode) -> Response<String> {
    let mut response = Response::new(String::new());
    *response.status_mut() = code;
    response
}

fn request(uri: &str) -> Request<Body> {
    let mut request = Request::new(Body::empty());
    *request.uri_mut() = uri.parse().expect("a valid URI");
    request
}

#[tokio::test]
async fn against_one_seat_every_write_is_served_and_few_are_rejected() {
    let seat = Arc::new(OneSeat::default());
    let server = {
        let seat = seat.clone();
        service_fn(move |_: Request<Body>| {
            let seat = seat.clone();
            async move { Ok::<_, BoxError>(seat.handle().await) }
        })
    };
    let pace = Arc::new(Pace::new(128));
    // The controller's stack: the kube client's retries above the pace.
    let client =
        RetryLayer::new(RetryPolicy::server_retry()).layer(PaceLayer(pace.clone()).layer(server));
    let writes = 400;
    let all = stream::iter(0..writes)
        .map(|_| {
            let client = client.clone();
            async move {
                client
                    .oneshot(request("/api/v1/namespaces/a/secrets"))
                    .await
                    .map(|r| r.status())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
        })
        // A reconcile writes 16 at a time.
        .buffer_unordered(16)
        .collect::<Vec<StatusCode>>();
    // Paced, about half a second; unpaced, the retries back off for minutes.
    let statuses = tokio::time::timeout(Duration::from_secs(30), all)
        .await
        .expect("400 writes against one seat within 30 s");
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(seat.served.load(Ordering::SeqCst), writes);
    // Unpaced, the 15 writes beyond the seat are rejected again at each of their retries:
    // thousands of rejections for 400 writes. Paced, the first bursts are.
    let rejected = seat.rejected.load(Ordering::SeqCst);
    assert!(
        rejected < writes / 4,
        "{rejected} rejections for {writes} writes: the pace did not adapt"
    );
    assert!(pace.limit() <= 4, "limit {} against one seat", pace.limit());
}

#[tokio::test]
async fn a_watch_neither_waits_for_nor_holds_a_permit() {
    let release = Arc::new(Notify::new());
    let server = {
        let release = release.clone();
        service_fn(move |request: Request<Body>| {
            let release = release.clone();
            async move {
                if !request.uri().to_string().contains("watch=true") {
                    release.notified().await;
                }
                Ok::<_, Infallible>(status(StatusCode::OK))
            }
        })
    };
    let pace = Arc::new(Pace::new(1));
    let mut client = PaceLayer(pace.clone()).layer(server);
    let get = tokio::spawn(
        client
            .ready()
            .await
            .expect("ready")
            .call(request("/api/v1/namespaces/a/secrets/s")),
    );
    while pace.in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    let watch = client.ready().await.expect("ready").call(request(
        "/api/v1/namespaces?watch=true&resourceVersion=1&timeoutSeconds=290",
    ));
    let watched = tokio::time::timeout(Duration::from_secs(5), watch).await;
    assert!(
        matches!(watched, Ok(Ok(ref r)) if r.status() == StatusCode::OK),
        "the watch waited behind a GET holding the only permit"
    );
    assert_eq!(pace.in_flight(), 1, "only the GET holds a permit");
    release.notify_one();
    let got = get.await.expect("the GET task");
    assert!(got.is_ok());
    assert_eq!(pace.in_flight(), 0);
}

#[tokio::test]
async fn shrinking_below_the_permits_held_takes_them_back_as_they_return() {
    let pace = Arc::new(Pace::new(8));
    let held: Vec<_> = futures::future::join_all((0..8).map(|_| pace.acquire())).await;
    pace.observe(StatusCode::TOO_MANY_REQUESTS, 0);
    assert_eq!(pace.limit(), 4);
    drop(held);
    assert_eq!(pace.permits.available_permits(), 4);
    assert_eq!(pace.in_flight(), 0);
}
