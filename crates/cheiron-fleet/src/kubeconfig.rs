//! A workload cluster's kubeconfig, as read from its Secret: turned into a client
//! configuration only when it carries everything inline and, unless allowed, verifies TLS
//! (docs/fleet.md, "Who can enrol a cluster").

use std::time::Duration;

use cheiron_runtime::api::fleet::KUBECONFIG_KEY;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// How long the connection to a workload cluster may take before it counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The client configuration of a kubeconfig read from a Secret. Only what the kubeconfig
/// itself carries is used: credentials and certificates inline. A kubeconfig naming a file,
/// an exec plugin or an auth provider is refused, since whoever may write the Secret would
/// otherwise make cheiron run a command or send a file of its own Pod (its ServiceAccount
/// token) to a server of their choosing. A cluster skipping TLS verification, naming a server
/// that is not `https://` or a proxy is refused unless `allow_insecure` (`--fleet-allow-insecure`;
/// a proxy always). Errors never quote the kubeconfig.
pub(crate) async fn client_config(
    text: &str,
    allow_insecure: bool,
) -> Result<kube::Config, String> {
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|_| {
        format!("key {KUBECONFIG_KEY} of its kubeconfig Secret is not a kubeconfig")
    })?;
    refuse_outside_references(&kubeconfig)?;
    refuse_insecure(&kubeconfig, allow_insecure)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|_| {
                "its kubeconfig has no usable current context, cluster and user".to_owned()
            })?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Ok(config)
}

fn refuse_insecure(kubeconfig: &Kubeconfig, allow_insecure: bool) -> Result<(), String> {
    for named in &kubeconfig.clusters {
        let Some(cluster) = &named.cluster else {
            continue;
        };
        let name = &named.name;
        if cluster.proxy_url.is_some() {
            return Err(format!(
                "refused: its kubeconfig's cluster {name} uses proxy-url, which cheiron does not follow (docs/fleet.md)"
            ));
        }
        if allow_insecure {
            continue;
        }
        if cluster.insecure_skip_tls_verify == Some(true) {
            return Err(format!(
                "refused: its kubeconfig's cluster {name} sets insecure-skip-tls-verify; allowed only with --fleet-allow-insecure (docs/fleet.md)"
            ));
        }
        let https = cluster
            .server
            .as_deref()
            .is_some_and(|s| s.trim().to_ascii_lowercase().starts_with("https://"));
        if !https {
            return Err(format!(
                "refused: its kubeconfig's cluster {name} has a server that is not https://; allowed only with --fleet-allow-insecure (docs/fleet.md)"
            ));
        }
    }
    Ok(())
}

fn refuse_outside_references(kubeconfig: &Kubeconfig) -> Result<(), String> {
    for user in &kubeconfig.auth_infos {
        let Some(auth) = &user.auth_info else {
            continue;
        };
        let refused = [
            ("exec", auth.exec.is_some()),
            ("auth-provider", auth.auth_provider.is_some()),
            ("tokenFile", auth.token_file.is_some()),
            ("client-certificate", auth.client_certificate.is_some()),
            ("client-key", auth.client_key.is_some()),
        ];
        if let Some((field, _)) = refused.iter().find(|(_, set)| *set) {
            return Err(format!(
                "its kubeconfig's user {} uses {field}: only inline credentials are accepted (docs/fleet.md)",
                user.name
            ));
        }
    }
    for cluster in &kubeconfig.clusters {
        if cluster
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return Err(format!(
                "its kubeconfig's cluster {} uses certificate-authority (a file): only certificate-authority-data is accepted (docs/fleet.md)",
                cluster.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INLINE: &str = "apiVersion: v1
kind: Config
clusters:
- name: w
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: the-token-value
contexts:
- name: w
  context: {cluster: w, user: u}
current-context: w
";

    #[tokio::test]
    async fn an_inline_kubeconfig_gives_a_client_configuration() {
        let config = client_config(INLINE, true).await;
        assert!(config.is_ok(), "{:?}", config.err());
    }

    #[tokio::test]
    async fn a_kubeconfig_that_runs_a_command_or_reads_a_file_is_refused() {
        for (field, replacement) in [
            (
                "exec",
                "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'cat /var/run/secrets/kubernetes.io/serviceaccount/token']}",
            ),
            (
                "tokenFile",
                "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
            ),
            (
                "client-certificate",
                "client-certificate: /etc/ssl/cert.pem",
            ),
            ("client-key", "client-key: /etc/ssl/key.pem"),
            ("auth-provider", "auth-provider: {name: oidc, config: {}}"),
        ] {
            let text = INLINE.replace("token: the-token-value", replacement);
            let err = client_config(&text, true).await.err();
            assert!(
                err.as_deref().is_some_and(|e| e.contains(field)),
                "{field}: {err:?}"
            );
        }
        let text = INLINE.replace(
            "insecure-skip-tls-verify: true",
            "certificate-authority: /etc/ssl/ca.pem",
        );
        let err = client_config(&text, true).await.err();
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("certificate-authority")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn an_error_never_quotes_the_kubeconfig() {
        for text in [
            "the-token-value: [",
            "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: the-token-value\n",
            "not: a\nkubeconfig: the-token-value\n",
        ] {
            let err = client_config(text, true).await.err().unwrap_or_default();
            assert!(!err.is_empty(), "{text}: accepted");
            assert!(!err.contains("the-token-value"), "{err}");
        }
    }

    #[tokio::test]
    async fn an_insecure_or_plain_http_kubeconfig_is_refused_unless_allowed() {
        let plain = INLINE
            .replace("https://127.0.0.1:6443", "http://127.0.0.1:6443")
            .replace("    insecure-skip-tls-verify: true\n", "");
        let verified = INLINE.replace(
            "insecure-skip-tls-verify: true",
            "certificate-authority-data: bm90LWEtY2VydA==",
        );
        for (text, field) in [
            (INLINE, "insecure-skip-tls-verify"),
            (plain.as_str(), "https://"),
        ] {
            let err = client_config(text, false).await.err().unwrap_or_default();
            assert!(
                err.starts_with("refused:")
                    && err.contains(field)
                    && err.contains("--fleet-allow-insecure"),
                "{err}"
            );
            assert!(!err.contains("127.0.0.1"), "the server is quoted: {err}");
        }
        assert!(client_config(INLINE, true).await.is_ok());
        assert!(client_config(&plain, true).await.is_ok());
        // https with a CA is what is accepted by default (the CA is checked when connecting).
        let err = client_config(&verified, false)
            .await
            .err()
            .unwrap_or_default();
        assert!(!err.starts_with("refused:"), "{err}");
        // A proxy is never followed.
        let proxied = INLINE.replace(
            "    insecure-skip-tls-verify: true",
            "    insecure-skip-tls-verify: true\n    proxy-url: http://10.0.0.1:3128",
        );
        let err = client_config(&proxied, true)
            .await
            .err()
            .unwrap_or_default();
        assert!(err.contains("proxy-url"), "{err}");
    }
}
