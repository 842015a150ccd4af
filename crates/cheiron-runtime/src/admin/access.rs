//! Who may read `/metrics` (`--metrics-auth`).
//!
//! With `kubernetes`, a request needs `Authorization: Bearer <token>`. The apiserver
//! authenticates the token (TokenReview) and authorises its user for `get` on the non-resource
//! URL `/metrics` (SubjectAccessReview), as kube-rbac-proxy and controller-runtime's
//! `WithAuthenticationAndAuthorization` do: Prometheus' ServiceAccount gets in once a
//! ClusterRole with `nonResourceURLs: ["/metrics"], verbs: ["get"]` is bound to it. No token or
//! one the apiserver rejects is a 401, a user without that right a 403, and an apiserver that
//! cannot be asked a 503. Decisions are remembered for a short while in a bounded cache keyed
//! by the token's SHA-256; the token itself is neither kept nor logged. `/healthz` and
//! `/readyz` stay open: the kubelet probes them without a token.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures::future::BoxFuture;
use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec, UserInfo},
    authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::{Api, Client, api::PostParams};

/// The non-resource URL and verb a reader must be allowed.
pub const METRICS_PATH: &str = "/metrics";
/// See [`METRICS_PATH`].
pub const METRICS_VERB: &str = "get";

/// Default of `--metrics-auth-cache-size`: decisions remembered at once. A scraper needs one
/// entry per token; when the cache is full, the entry closest to expiry goes, so tokens sprayed
/// by a client (whose refusals live [`REFUSAL_TTL`]) cannot push out an allowed scraper.
pub const DEFAULT_CACHE_SIZE: usize = 256;
/// Default of `--metrics-auth-cache-ttl`: how long an allowed decision is remembered.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(60);
/// Longest a refusal (401, 403) is remembered: a reader just granted access waits no longer.
pub const REFUSAL_TTL: Duration = Duration::from_secs(10);
/// Longest bearer token sent for review; a longer one is a 401 without asking the apiserver.
/// ServiceAccount tokens are about 1 KiB, OIDC ID tokens a few.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// `Retry-After` of the 503 answered when the apiserver cannot review a token.
const RETRY_AFTER: &str = "5";
/// Longest user name quoted in a 403.
const MAX_USER_BYTES: usize = 256;

/// `--metrics-auth`: how `/metrics` is protected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsAuth {
    /// Anyone who reaches the admin port may read it (restrict the port with a NetworkPolicy).
    #[default]
    None,
    /// A bearer token the apiserver authenticates, of a user allowed to `get` `/metrics`.
    Kubernetes,
}

impl MetricsAuth {
    /// The flag and chart value: `none` or `kubernetes`.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricsAuth::None => "none",
            MetricsAuth::Kubernetes => "kubernetes",
        }
    }
}

impl std::fmt::Display for MetricsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a `/metrics` request's credentials come to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Served.
    Allowed,
    /// No bearer token, a malformed `Authorization` header, or a token the apiserver does not
    /// authenticate (401).
    Unauthenticated,
    /// The token's user may not `get` `/metrics` (403).
    Forbidden {
        /// The user the apiserver authenticated.
        user: String,
    },
}

/// The apiserver could not be asked; nothing is cached, the next request asks again.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Creating the TokenReview failed.
    #[error("cannot create a TokenReview")]
    TokenReview(#[source] kube::Error),
    /// Creating the SubjectAccessReview failed.
    #[error("cannot create a SubjectAccessReview")]
    AccessReview(#[source] kube::Error),
}

impl ReviewError {
    /// The error and the apiserver's answer on one line, for the log.
    pub fn line(&self) -> String {
        let (ReviewError::TokenReview(source) | ReviewError::AccessReview(source)) = self;
        format!("{self}: {}", crate::message::api_error(source))
    }
}

/// The two questions put to the apiserver; [`ApiReviewer`] asks them, tests script them.
pub trait Reviewer: Send + Sync + 'static {
    /// The user `token` authenticates as, `None` when the apiserver does not accept it.
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, ReviewError>>;

    /// Whether `user` may `get` the non-resource URL [`METRICS_PATH`].
    fn may_read_metrics<'a>(
        &'a self,
        user: &'a UserInfo,
    ) -> BoxFuture<'a, Result<bool, ReviewError>>;
}

/// Asks the apiserver: `create` on `tokenreviews.authentication.k8s.io` and
/// `subjectaccessreviews.authorization.k8s.io`, the RBAC of `--metrics-auth kubernetes`.
pub struct ApiReviewer {
    tokens: Api<TokenReview>,
    access: Api<SubjectAccessReview>,
}

impl ApiReviewer {
    /// Reviews with `client`'s identity.
    pub fn new(client: Client) -> Self {
        Self {
            tokens: Api::all(client.clone()),
            access: Api::all(client),
        }
    }
}

impl Reviewer for ApiReviewer {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, ReviewError>> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_owned()),
                    audiences: None,
                },
                ..TokenReview::default()
            };
            let answered = self
                .tokens
                .create(&PostParams::default(), &review)
                .await
                .map_err(ReviewError::TokenReview)?;
            Ok(answered
                .status
                .filter(|s| s.authenticated == Some(true))
                .and_then(|s| s.user))
        })
    }

    fn may_read_metrics<'a>(
        &'a self,
        user: &'a UserInfo,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(async move {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: user.username.clone(),
                    uid: user.uid.clone(),
                    groups: user.groups.clone(),
                    extra: user.extra.clone(),
                    non_resource_attributes: Some(NonResourceAttributes {
                        path: Some(METRICS_PATH.to_owned()),
                        verb: Some(METRICS_VERB.to_owned()),
                    }),
                    resource_attributes: None,
                },
                ..SubjectAccessReview::default()
            };
            let answered = self
                .access
                .create(&PostParams::default(), &review)
                .await
                .map_err(ReviewError::AccessReview)?;
            Ok(answered.status.is_some_and(|s| s.allowed))
        })
    }
}

/// The bound and lifetime of remembered decisions (`--metrics-auth-cache-size`,
/// `--metrics-auth-cache-ttl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLimits {
    /// Most decisions remembered at once (at least 1).
    pub size: usize,
    /// How long an allowed decision is remembered; refusals at most [`REFUSAL_TTL`]. Zero
    /// remembers nothing.
    pub ttl: Duration,
}

impl Default for CacheLimits {
    fn default() -> Self {
        Self {
            size: DEFAULT_CACHE_SIZE,
            ttl: DEFAULT_CACHE_TTL,
        }
    }
}

/// Decides `/metrics` requests under `--metrics-auth kubernetes`.
pub struct MetricsGuard {
    reviewer: Arc<dyn Reviewer>,
    cache: Mutex<DecisionCache>,
}

impl MetricsGuard {
    /// A guard asking `reviewer`, remembering decisions within `limits`.
    pub fn new(reviewer: Arc<dyn Reviewer>, limits: CacheLimits) -> Self {
        Self {
            reviewer,
            cache: Mutex::new(DecisionCache::new(limits)),
        }
    }

    /// The decision on a request carrying `authorization`.
    pub async fn decide(
        &self,
        authorization: Option<&HeaderValue>,
    ) -> Result<Decision, ReviewError> {
        self.decide_at(authorization, Instant::now()).await
    }

    async fn decide_at(
        &self,
        authorization: Option<&HeaderValue>,
        now: Instant,
    ) -> Result<Decision, ReviewError> {
        let Some(token) = bearer_token(authorization) else {
            return Ok(Decision::Unauthenticated);
        };
        let key = fingerprint(token);
        if let Some(known) = self.cache().get(&key, now) {
            return Ok(known);
        }
        let decision = match self.reviewer.authenticate(token).await? {
            None => Decision::Unauthenticated,
            Some(user) => {
                if self.reviewer.may_read_metrics(&user).await? {
                    Decision::Allowed
                } else {
                    Decision::Forbidden {
                        user: user.username.unwrap_or_default(),
                    }
                }
            }
        };
        self.cache().insert(key, decision.clone(), now);
        Ok(decision)
    }

    /// Decisions remembered now (tests).
    #[cfg(test)]
    fn cached(&self) -> usize {
        self.cache().entries.len()
    }

    // A panic elsewhere cannot leave the map half-written: take it as it is.
    fn cache(&self) -> std::sync::MutexGuard<'_, DecisionCache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The token of `Authorization: Bearer <token>` (scheme in any case), if the header is one and
/// the token is no longer than [`MAX_TOKEN_BYTES`].
fn bearer_token(authorization: Option<&HeaderValue>) -> Option<&str> {
    let value = authorization?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    let well_formed = scheme.eq_ignore_ascii_case("bearer")
        && !token.is_empty()
        && token.len() <= MAX_TOKEN_BYTES
        && !token.contains(char::is_whitespace);
    well_formed.then_some(token)
}

type Fingerprint = [u8; 32];

fn fingerprint(token: &str) -> Fingerprint {
    let mut key = [0; 32];
    key.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref());
    key
}

/// Decisions by token fingerprint, each until it expires, at most [`CacheLimits::size`].
struct DecisionCache {
    entries: HashMap<Fingerprint, (Decision, Instant)>,
    limits: CacheLimits,
}

impl DecisionCache {
    fn new(limits: CacheLimits) -> Self {
        Self {
            entries: HashMap::new(),
            limits,
        }
    }

    fn get(&mut self, key: &Fingerprint, now: Instant) -> Option<Decision> {
        match self.entries.get(key) {
            Some((decision, expires)) if *expires > now => Some(decision.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&mut self, key: Fingerprint, decision: Decision, now: Instant) {
        let ttl = match decision {
            Decision::Allowed => self.limits.ttl,
            Decision::Unauthenticated | Decision::Forbidden { .. } => {
                self.limits.ttl.min(REFUSAL_TTL)
            }
        };
        if ttl.is_zero() || self.limits.size == 0 {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.limits.size {
            self.entries.retain(|_, (_, expires)| *expires > now);
            if self.entries.len() >= self.limits.size {
                let soonest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(key, _)| *key);
                if let Some(soonest) = soonest {
                    self.entries.remove(&soonest);
                }
            }
        }
        self.entries.insert(key, (decision, now + ttl));
    }
}

/// Who may read `/metrics` where it is served: anyone, or who a [`MetricsGuard`] lets in.
#[derive(Clone, Default)]
pub enum MetricsAccess {
    /// `--metrics-auth none`.
    #[default]
    Open,
    /// `--metrics-auth kubernetes`.
    Reviewed(Arc<MetricsGuard>),
}

impl MetricsAccess {
    /// `--metrics-auth kubernetes` with `client`'s identity reviewing tokens.
    pub fn kubernetes(client: Client, limits: CacheLimits) -> Self {
        MetricsAccess::Reviewed(Arc::new(MetricsGuard::new(
            Arc::new(ApiReviewer::new(client)),
            limits,
        )))
    }

    /// `None` to serve the request, or the refusal to answer it with.
    pub async fn refusal(&self, authorization: Option<&HeaderValue>) -> Option<Response> {
        let MetricsAccess::Reviewed(guard) = self else {
            return None;
        };
        match guard.decide(authorization).await {
            Ok(Decision::Allowed) => None,
            Ok(refused) => {
                tracing::debug!(decision = ?refused, "/metrics refused");
                Some(refused_response(&refused))
            }
            Err(error) => {
                tracing::warn!(error = %error.line(), "cannot decide a /metrics request");
                Some(unavailable_response())
            }
        }
    }
}

impl std::fmt::Debug for MetricsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MetricsAccess::Open => "Open",
            MetricsAccess::Reviewed(_) => "Reviewed",
        })
    }
}

/// Equal when both are open or share one guard.
impl PartialEq for MetricsAccess {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (MetricsAccess::Open, MetricsAccess::Open) => true,
            (MetricsAccess::Reviewed(a), MetricsAccess::Reviewed(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// The one place where a refused `/metrics` request becomes an HTTP response.
fn refused_response(decision: &Decision) -> Response {
    match decision {
        Decision::Allowed => StatusCode::OK.into_response(),
        Decision::Unauthenticated => (
            StatusCode::UNAUTHORIZED,
            [
                (header::WWW_AUTHENTICATE, "Bearer realm=\"cheiron\""),
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            ],
            "/metrics needs a bearer token that the Kubernetes apiserver accepts\n",
        )
            .into_response(),
        Decision::Forbidden { user } => {
            let mut user = user.clone();
            crate::message::truncate(&mut user, MAX_USER_BYTES);
            (
                StatusCode::FORBIDDEN,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                format!(
                    "user {user:?} may not {METRICS_VERB} {METRICS_PATH} (RBAC: nonResourceURLs \
                     [\"{METRICS_PATH}\"], verbs [\"{METRICS_VERB}\"])\n"
                ),
            )
                .into_response()
        }
    }
}

fn unavailable_response() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (header::RETRY_AFTER, RETRY_AFTER),
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
        ],
        "cannot review the token with the Kubernetes apiserver now; retry later\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests;
