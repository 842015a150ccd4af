//! ServiceAccount tokens and kubeconfigs that use them: how a test becomes one of cheiron's
//! identities (or a scraper, a tenant) against the real apiserver.

use std::path::Path;

use base64::Engine;
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
};
use kube::{Api, api::PostParams};

/// A token of ServiceAccount `namespace/name` (TokenRequest), valid for an hour.
pub async fn service_account_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> crate::Result<String> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        },
        ..TokenRequest::default()
    };
    Ok(Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await?
        .status
        .map(|s| s.token)
        .ok_or("the TokenRequest returned no token")?)
}

/// Writes to `path` a kubeconfig for the apiserver of `config` (its URL and CA) that
/// authenticates with `token`.
pub fn write_token_kubeconfig(config: &kube::Config, token: &str, path: &Path) -> crate::Result {
    let engine = base64::engine::general_purpose::STANDARD;
    let mut ca = String::new();
    for der in config.root_cert.iter().flatten() {
        ca.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in engine.encode(der).as_bytes().chunks(64) {
            ca.push_str(&String::from_utf8_lossy(line));
            ca.push('\n');
        }
        ca.push_str("-----END CERTIFICATE-----\n");
    }
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\n\
             users:\n- name: u\n  user:\n    token: {token}\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
             current-context: c\n",
            config.cluster_url,
            engine.encode(ca)
        ),
    )?;
    Ok(())
}
