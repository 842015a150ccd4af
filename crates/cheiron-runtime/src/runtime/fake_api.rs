//! A scripted stand-in for the Kubernetes API, for unit tests of error paths only (the happy
//! paths and the races themselves are tested against a real kube-apiserver in `tests/`): it
//! answers each request with the next scripted reply, records what it was asked, and answers
//! a request it does not expect with a 500 that names it.

use std::{
    collections::VecDeque,
    convert::Infallible,
    sync::{Arc, Mutex},
};

use axum::http::{Request, Response};
use kube::Client;
use serde_json::{Value, json};

/// One scripted answer: the request it expects and what it answers.
pub struct Reply {
    method: &'static str,
    path: String,
    status: u16,
    body: Value,
}

pub fn reply(method: &'static str, path: &str, status: u16, body: Value) -> Reply {
    Reply {
        method,
        path: path.to_owned(),
        status,
        body,
    }
}

/// A `metav1.Status` as the apiserver sends it with an error code.
pub fn status(code: u16, reason: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("fake apiserver says {reason}"), "reason": reason, "code": code,
    })
}

/// Answers requests from a script, in order, and records what it was asked. A request the
/// script does not expect gets a 500 that names it, so the test fails saying so.
#[derive(Clone, Default)]
pub struct FakeApi {
    script: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl FakeApi {
    pub fn new(script: Vec<Reply>) -> Self {
        Self {
            script: Arc::new(Mutex::new(script.into())),
            seen: Arc::default(),
        }
    }

    pub fn client(&self) -> Client {
        let fake = self.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let fake = fake.clone();
            async move { Ok::<_, Infallible>(fake.answer(&request)) }
        });
        Client::new(service, "default")
    }

    fn answer(&self, request: &Request<kube::client::Body>) -> Response<kube::client::Body> {
        let asked = format!("{} {}", request.method(), request.uri().path());
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(asked.clone());
        }
        let next = self.script.lock().ok().and_then(|mut s| s.pop_front());
        let (code, body) = match next {
            Some(r) if r.method == request.method().as_str() && r.path == request.uri().path() => {
                (r.status, r.body)
            }
            Some(r) => (
                500,
                status(
                    500,
                    &format!(
                        "unexpected {asked}; the script expected {} {}",
                        r.method, r.path
                    ),
                ),
            ),
            None => (
                500,
                status(500, &format!("unexpected {asked}; the script is done")),
            ),
        };
        let mut response = Response::new(kube::client::Body::from(body.to_string().into_bytes()));
        *response.status_mut() = axum::http::StatusCode::from_u16(code)
            .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        response
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn left(&self) -> usize {
        self.script.lock().map(|s| s.len()).unwrap_or_default()
    }
}
