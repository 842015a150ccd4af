//! The HTTPS client that runs the handshake (see the module's picture): https only, no
//! redirect followed, every body read capped, the whole check under one deadline.

use std::time::Duration;

use cheiron_core::health::Allowance;
use reqwest::{Response, StatusCode, Url, header};
use tokio::time::Instant;

use super::{
    allowance::{self, ALLOWANCE_PATH, ALLOWANCE_SCOPE},
    challenge::{self, Auth},
    check::{Credential, Target, Verdict},
};

/// How long one check may take in all, from the first connection to the last byte.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest token-service answer read; a larger one is not read further.
pub const MAX_TOKEN_BODY: usize = 64 * 1024;

/// How the client checks.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The deadline of one whole check ([`DEFAULT_CHECK_TIMEOUT`]); past it the check is
    /// [`Verdict::Unreachable`].
    pub timeout: Duration,
    /// PEM certificates trusted besides the built-in web roots (private registries).
    pub ca_bundle: Option<Vec<u8>>,
    /// The cap on a token-service answer ([`MAX_TOKEN_BODY`]).
    pub max_body: usize,
    /// An HTTP proxy (`http://proxy:3128`) every check tunnels through with CONNECT; `None`
    /// honours `HTTPS_PROXY` and `NO_PROXY`. The proxy sees the registry's host, not the
    /// credential (the tunnel is TLS end to end).
    pub proxy: Option<String>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_CHECK_TIMEOUT,
            ca_bundle: None,
            max_body: MAX_TOKEN_BODY,
            proxy: None,
        }
    }
}

/// Why a [`RegistryClient`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The CA bundle holds no PEM certificate.
    #[error("the registry CA bundle holds no PEM certificate")]
    NoCertificate,
    /// A certificate of the CA bundle could not be read or used.
    #[error("the registry CA bundle has a certificate that cannot be used: {0}")]
    BadCertificate(String),
    /// The proxy option is not a proxy URL.
    #[error("the registry proxy is not a URL such as http://proxy:3128")]
    BadProxy,
    /// The HTTPS client could not be set up.
    #[error("cannot set up the registry HTTPS client: {0}")]
    Client(String),
}

/// Checks credentials against registries; cheap to clone, one per process is enough.
#[derive(Clone, Debug)]
pub struct RegistryClient {
    http: reqwest::Client,
    timeout: Duration,
    max_body: usize,
}

/// A step's end other than success: the verdict to give.
type Step<T> = Result<T, Verdict>;

fn unreachable(detail: String) -> Verdict {
    Verdict::Unreachable { detail }
}

impl RegistryClient {
    /// A client with `options`; fails on a CA bundle that is not PEM certificates.
    pub fn new(options: ClientOptions) -> Result<Self, ClientError> {
        let ClientOptions {
            timeout,
            ca_bundle,
            max_body,
            proxy,
        } = options;
        let mut builder = reqwest::Client::builder()
            // A redirect could carry the credential to a host the registry did not name as
            // its realm; a 3xx is reported instead.
            .redirect(reqwest::redirect::Policy::none())
            .https_only(true)
            .user_agent(concat!("cheiron/", env!("CARGO_PKG_VERSION")));
        if let Some(proxy) = proxy {
            // The URL may carry the proxy's own password: never shown.
            let proxy = reqwest::Proxy::https(&proxy).map_err(|_| ClientError::BadProxy)?;
            builder = builder.proxy(proxy);
        }
        let with_bundle = ca_bundle.is_some();
        if let Some(pem) = ca_bundle {
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| ClientError::BadCertificate(e.without_url().to_string()))?;
            if certificates.is_empty() {
                return Err(ClientError::NoCertificate);
            }
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder.build().map_err(|e| {
            let e = e.without_url();
            // A bundle's certificates are only parsed here, when rustls takes them as roots.
            if with_bundle && e.is_builder() {
                ClientError::BadCertificate(innermost(&e))
            } else {
                ClientError::Client(innermost(&e))
            }
        })?;
        Ok(Self {
            http,
            timeout,
            max_body,
        })
    }

    /// Checks `credential` against `target`'s registry; never takes longer than the
    /// configured timeout. The verdict's text names hosts and statuses only.
    pub async fn check(&self, target: &Target, credential: &Credential) -> Verdict {
        let deadline = Instant::now() + self.timeout;
        let verdict =
            match tokio::time::timeout_at(deadline, self.handshake(target, credential, deadline))
                .await
            {
                Ok(Ok(verdict)) | Ok(Err(verdict)) => verdict,
                Err(_) => unreachable(format!(
                    "registry {}: no complete answer within {}",
                    target.host,
                    seconds(self.timeout)
                )),
            };
        let outcome = match &verdict {
            Verdict::Accepted { .. } => "accepted",
            Verdict::Rejected { .. } => "rejected",
            Verdict::Unreachable { .. } => "unreachable",
        };
        tracing::debug!(host = %target.host, outcome, "registry check");
        verdict
    }

    async fn handshake(
        &self,
        target: &Target,
        credential: &Credential,
        deadline: Instant,
    ) -> Step<Verdict> {
        let host = &target.host;
        let base = registry_url(host)?;
        let what = format!("registry {host}");
        let answer = self
            .send(self.http.get(base.clone()), &what, deadline)
            .await?;
        let auth = match answer.status() {
            StatusCode::OK => return Ok(Verdict::Accepted { allowance: None }),
            StatusCode::UNAUTHORIZED => challenge::choose(
                answer
                    .headers()
                    .get_all(header::WWW_AUTHENTICATE)
                    .iter()
                    .map(|v| v.as_bytes()),
            )
            .map_err(|e| {
                unreachable(format!(
                    "{what} answered 401 with an unusable challenge: {e}"
                ))
            })?,
            _ => return Err(other_status(&what, &answer)),
        };
        drop(answer);
        match auth {
            Auth::Basic => {
                let request = self
                    .http
                    .get(base)
                    .basic_auth(&credential.username, Some(&credential.password));
                let answer = self.send(request, &what, deadline).await?;
                match answer.status() {
                    StatusCode::OK => Ok(Verdict::Accepted { allowance: None }),
                    status @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                        Ok(Verdict::Rejected {
                            detail: format!(
                                "{what} answered {} to the credential",
                                status.as_u16()
                            ),
                        })
                    }
                    _ => Err(other_status(&what, &answer)),
                }
            }
            Auth::Bearer { realm, service } => {
                let scope = target.docker_hub.then_some(ALLOWANCE_SCOPE);
                let token = match self
                    .token(
                        host,
                        &realm,
                        service.as_deref(),
                        scope,
                        credential,
                        deadline,
                    )
                    .await?
                {
                    Ok(token) => token,
                    Err(rejected) => return Ok(rejected),
                };
                let allowance = if target.docker_hub {
                    self.allowance(&base, &token, deadline).await
                } else {
                    None
                };
                Ok(Verdict::Accepted { allowance })
            }
        }
    }

    /// Asks the token service for a token: `Ok(Ok(token))`, `Ok(Err(Rejected))`, or
    /// `Err(Unreachable)`.
    async fn token(
        &self,
        registry: &str,
        realm: &str,
        service: Option<&str>,
        scope: Option<&str>,
        credential: &Credential,
        deadline: Instant,
    ) -> Step<Result<String, Verdict>> {
        let mut url = Url::parse(realm).map_err(|_| {
            unreachable(format!(
                "registry {registry} names a token realm that is not a URL; the credential was not sent"
            ))
        })?;
        let realm_host = authority(&url);
        if url.scheme() != "https" {
            return Err(unreachable(format!(
                "registry {registry} names a token realm on {realm_host} over {}, not https; the credential was not sent",
                url.scheme()
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(unreachable(format!(
                "registry {registry} names a token realm on {realm_host} with user info; the credential was not sent"
            )));
        }
        url.set_fragment(None);
        // `query_pairs_mut` alone would leave an empty `?`.
        let pairs = [("service", service), ("scope", scope)];
        if pairs.iter().any(|(_, value)| value.is_some()) {
            let mut query = url.query_pairs_mut();
            for (name, value) in pairs {
                if let Some(value) = value {
                    query.append_pair(name, value);
                }
            }
        }
        let what = format!("the token service {realm_host}");
        let request = self
            .http
            .get(url)
            .basic_auth(&credential.username, Some(&credential.password));
        let mut answer = self.send(request, &what, deadline).await?;
        match answer.status() {
            StatusCode::OK => {}
            status @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                return Ok(Err(Verdict::Rejected {
                    detail: format!("{what} answered {} to the credential", status.as_u16()),
                }));
            }
            _ => return Err(other_status(&what, &answer)),
        }
        let body = tokio::time::timeout_at(deadline, self.read_capped(&mut answer, &what))
            .await
            .map_err(|_| {
                unreachable(format!(
                    "{what}: no complete answer within {}",
                    seconds(self.timeout)
                ))
            })??;
        #[derive(serde::Deserialize)]
        struct TokenAnswer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let parsed: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|_| unreachable(format!("{what} answered 200 without a JSON token")))?;
        match parsed.token.or(parsed.access_token) {
            Some(token) if !token.is_empty() => Ok(Ok(token)),
            _ => Err(unreachable(format!("{what} answered 200 without a token"))),
        }
    }

    /// Docker Hub's allowance for the token; `None` when it cannot be read (the check still
    /// stands: the token was granted).
    async fn allowance(&self, base: &Url, token: &str, deadline: Instant) -> Option<Allowance> {
        let url = base.join(ALLOWANCE_PATH).ok()?;
        let request = self.http.head(url).bearer_auth(token);
        let answer = match tokio::time::timeout_at(deadline, request.send()).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) | Err(_) => {
                tracing::debug!(host = %authority(base), "pull allowance not read: no answer");
                return None;
            }
        };
        if answer.status() != StatusCode::OK {
            tracing::debug!(host = %authority(base), status = answer.status().as_u16(), "pull allowance not read");
            return None;
        }
        let headers = answer.headers();
        let allowance = allowance::parse(
            headers.get("ratelimit-limit").map(|v| v.as_bytes()),
            headers.get("ratelimit-remaining").map(|v| v.as_bytes()),
        );
        if allowance.is_none() {
            tracing::debug!(host = %authority(base), "pull allowance headers malformed");
        }
        allowance
    }

    /// Sends `request`; a 3xx or a transport failure is the `Unreachable` verdict.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
        deadline: Instant,
    ) -> Step<Response> {
        let answer = match tokio::time::timeout_at(deadline, request.send()).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return Err(unreachable(format!("{what}: {}", transport(e)))),
            Err(_) => {
                return Err(unreachable(format!(
                    "{what}: no answer within {}",
                    seconds(self.timeout)
                )));
            }
        };
        if answer.status().is_redirection() {
            let to = answer
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| answer.url().join(l).ok())
                .map(|u| authority(&u))
                .unwrap_or_else(|| "an unreadable location".to_owned());
            return Err(unreachable(format!(
                "{what} answered {}, redirected to {to}, not followed",
                answer.status().as_u16()
            )));
        }
        Ok(answer)
    }

    /// The body, chunk by chunk, abandoned past `max_body`.
    async fn read_capped(&self, answer: &mut Response, what: &str) -> Step<Vec<u8>> {
        let too_large = || {
            unreachable(format!(
                "{what} answered more than {} bytes; not read",
                self.max_body
            ))
        };
        if answer
            .content_length()
            .is_some_and(|length| length > self.max_body as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        loop {
            match answer.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > self.max_body {
                        return Err(too_large());
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(body),
                Err(e) => return Err(unreachable(format!("{what}: {}", transport(e)))),
            }
        }
    }
}

/// `https://{host}/v2/` for a `host` or `host:port` that is nothing more.
fn registry_url(host: &str) -> Step<Url> {
    let not_a_host = || {
        unreachable(format!(
            "{:?} is not a registry host (host or host:port)",
            host.chars().take(100).collect::<String>()
        ))
    };
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
    if host.is_empty() || !host.chars().all(allowed) {
        return Err(not_a_host());
    }
    let url = Url::parse(&format!("https://{host}/v2/")).map_err(|_| not_a_host())?;
    if url.host_str().is_none() || url.path() != "/v2/" || !url.username().is_empty() {
        return Err(not_a_host());
    }
    Ok(url)
}

/// `host` or `host:port` of a URL, for texts.
fn authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or("?");
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

fn other_status(what: &str, answer: &Response) -> Verdict {
    let status = answer.status();
    unreachable(format!(
        "{what} answered {}{}",
        status.as_u16(),
        status
            .canonical_reason()
            .map(|r| format!(" {r}"))
            .unwrap_or_default()
    ))
}

/// A transport failure in a few words: what failed and its root cause (an I/O or TLS error;
/// never a URL, whose query the token service may read).
fn transport(e: reqwest::Error) -> String {
    let step = if e.is_connect() {
        "cannot connect"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "the answer broke off"
    } else {
        "the request failed"
    };
    format!("{step}: {}", innermost(&e.without_url()))
}

fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last: &(dyn std::error::Error + 'static) = e;
    while let Some(source) = last.source() {
        last = source;
    }
    last.to_string().chars().take(200).collect()
}

fn seconds(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_named_limits() {
        let options = ClientOptions::default();
        assert_eq!(options.timeout, DEFAULT_CHECK_TIMEOUT);
        assert_eq!(options.timeout, Duration::from_secs(10));
        assert_eq!(options.max_body, MAX_TOKEN_BODY);
        assert_eq!(options.max_body, 65536);
        assert!(options.ca_bundle.is_none() && options.proxy.is_none());
    }

    #[test]
    fn registry_hosts_with_port_and_ipv6_make_the_v2_url() {
        for (host, url) in [
            ("registry.example.com", "https://registry.example.com/v2/"),
            (
                "Registry.Example.com:5000",
                "https://registry.example.com:5000/v2/",
            ),
            ("127.0.0.1:5000", "https://127.0.0.1:5000/v2/"),
            ("[::1]:5000", "https://[::1]:5000/v2/"),
        ] {
            assert_eq!(registry_url(host).map(String::from), Ok(url.to_owned()));
        }
    }

    #[test]
    fn anything_more_than_a_host_is_not_a_registry_host() {
        for host in [
            "",
            "https://registry.example.com",
            "registry.example.com/v2",
            "user@registry.example.com",
            "registry.example.com:port",
            "registry.example.com:99999",
            "[::1",
            "registry example.com",
            "registry.example.com\n",
            "registry.example.com\\x",
            "régistry.example.com",
        ] {
            assert!(
                matches!(registry_url(host), Err(Verdict::Unreachable { detail }) if detail.contains("not a registry host")),
                "{host:?}"
            );
        }
    }

    #[test]
    fn durations_are_written_in_seconds_or_milliseconds() {
        assert_eq!(seconds(Duration::from_secs(10)), "10s");
        assert_eq!(seconds(Duration::from_millis(500)), "500ms");
        assert_eq!(seconds(Duration::from_millis(1500)), "1500ms");
    }
}
