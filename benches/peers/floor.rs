//! The floor: a do-nothing admission webhook on cheiron's TLS stack (rustls with cheiron's
//! `server_config`, tokio-rustls, hyper-util's HTTP/1 + HTTP/2 server, axum, tokio). It reads
//! the review's `uid` and answers `allowed: true` with no patch: what any webhook costs
//! through the apiserver, before it does any work.
//!
//! With a Secret name (`peers --serve-floor ADDR CERT_DIR NAME`) it is the *patching floor*:
//! it answers every review with the same constant JSON patch, adding `imagePullSecrets: [NAME]`,
//! without reading the object. That is what any webhook that mutates costs through the
//! apiserver (which applies the patch, decodes the result and re-runs defaulting), before it
//! does any work of its own; the gap between the two floors is the apiserver's, not the
//! webhook's.
//!
//! The bench runs it as a process of its own, like the other servers, so its RSS and its
//! scheduling are its own.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use axum::{
    Router, body::Bytes, extract::State, http::header, response::IntoResponse, routing::post,
};
use base64::{Engine, prelude::BASE64_STANDARD};
use cheiron::tls::{CertDir, server_config};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
    service::TowerToHyperService,
};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use cheiron_harness::Result;

#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    request: Request<'a>,
}

#[derive(Deserialize)]
struct Request<'a> {
    uid: &'a str,
}

/// `allowed: true` for the review's uid, with `patch` (base64 of a JSON patch) when there is one.
async fn mutate(State(patch): State<Option<Arc<str>>>, body: Bytes) -> axum::response::Response {
    let Ok(review) = serde_json::from_slice::<Review<'_>>(&body) else {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            "not an AdmissionReview",
        )
            .into_response();
    };
    let mut response = serde_json::json!({"uid": review.request.uid, "allowed": true});
    if let Some(patch) = patch {
        response["patchType"] = "JSONPatch".into();
        response["patch"] = patch.as_ref().into();
    }
    let answer = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}

/// Serves `POST /mutate` on `addr` with `tls.crt`/`tls.key` of `cert_dir` until killed; with
/// `pull_secret`, every answer adds it to the Pod's `imagePullSecrets`.
pub fn serve(addr: SocketAddr, cert_dir: PathBuf, pull_secret: Option<String>) -> Result {
    let patch: Option<Arc<str>> = pull_secret.map(|name| {
        let patch = serde_json::json!([{
            "op": "add",
            "path": "/spec/imagePullSecrets",
            "value": [{"name": name}],
        }]);
        BASE64_STANDARD.encode(patch.to_string()).into()
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (resolver, _reloader) = CertDir::new(cert_dir).load().await?;
        let acceptor = TlsAcceptor::from(Arc::new(server_config(resolver)?));
        let app = Router::new()
            .route("/mutate", post(mutate))
            .with_state(patch);
        let listener = TcpListener::bind(addr).await?;
        eprintln!("floor: serving https://{addr}/mutate");
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                    .await;
            });
        }
    })
}
