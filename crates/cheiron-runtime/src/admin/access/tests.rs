//! The decision on `/metrics` requests against a scripted reviewer, the cache and its bound,
//! and the apiserver calls against the scripted fake API.

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicUsize, Ordering},
};

use serde_json::json;

use super::*;
use crate::runtime::fake_api::{FakeApi, reply, status};

/// Tokens it knows (token → user), users allowed to read `/metrics`, and how often it was
/// asked. `failing` makes every question fail as an unreachable apiserver would.
#[derive(Default)]
struct ScriptedReviewer {
    users: BTreeMap<String, UserInfo>,
    readers: Vec<String>,
    failing: bool,
    authentications: AtomicUsize,
    authorizations: AtomicUsize,
    asked_for: Mutex<Vec<UserInfo>>,
}

impl ScriptedReviewer {
    fn with_user(mut self, token: &str, name: &str, reader: bool) -> Self {
        self.users.insert(
            token.to_owned(),
            UserInfo {
                username: Some(name.to_owned()),
                uid: Some(format!("uid-{name}")),
                groups: Some(vec![
                    "system:serviceaccounts".to_owned(),
                    "system:authenticated".to_owned(),
                ]),
                extra: Some(BTreeMap::from([(
                    "authentication.kubernetes.io/pod-name".to_owned(),
                    vec!["prometheus-0".to_owned()],
                )])),
            },
        );
        if reader {
            self.readers.push(name.to_owned());
        }
        self
    }

    fn calls(&self) -> (usize, usize) {
        (
            self.authentications.load(Ordering::SeqCst),
            self.authorizations.load(Ordering::SeqCst),
        )
    }
}

fn unreachable() -> kube::Error {
    kube::Error::Api(Box::new(
        kube::core::Status::failure("connection refused", "ServiceUnavailable").with_code(503),
    ))
}

impl Reviewer for ScriptedReviewer {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, ReviewError>> {
        Box::pin(async move {
            self.authentications.fetch_add(1, Ordering::SeqCst);
            if self.failing {
                return Err(ReviewError::TokenReview(unreachable()));
            }
            Ok(self.users.get(token).cloned())
        })
    }

    fn may_read_metrics<'a>(
        &'a self,
        user: &'a UserInfo,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(async move {
            self.authorizations.fetch_add(1, Ordering::SeqCst);
            self.asked_for
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(user.clone());
            if self.failing {
                return Err(ReviewError::AccessReview(unreachable()));
            }
            Ok(user
                .username
                .as_ref()
                .is_some_and(|name| self.readers.contains(name)))
        })
    }
}

fn bearer(token: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("Bearer {token}")).unwrap_or(HeaderValue::from_static(""))
}

fn guard(reviewer: &Arc<ScriptedReviewer>, limits: CacheLimits) -> MetricsGuard {
    MetricsGuard::new(reviewer.clone(), limits)
}

fn prometheus() -> Arc<ScriptedReviewer> {
    Arc::new(
        ScriptedReviewer::default()
            .with_user(
                "prometheus-token",
                "system:serviceaccount:monitoring:prometheus",
                true,
            )
            .with_user("app-token", "system:serviceaccount:shop:app", false),
    )
}

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[test]
fn only_a_well_formed_bearer_header_yields_a_token() {
    let token =
        |value: &str| bearer_token(Some(&HeaderValue::from_str(value).ok()?)).map(str::to_owned);
    assert_eq!(token("Bearer abc.def"), Some("abc.def".to_owned()));
    assert_eq!(
        token("bearer abc"),
        Some("abc".to_owned()),
        "the scheme is case-insensitive"
    );
    assert_eq!(token("Bearer   abc  "), Some("abc".to_owned()));
    assert_eq!(bearer_token(None), None);
    for refused in [
        "",
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Token abc",
        "Bearer a b",
        "abc",
    ] {
        assert_eq!(token(refused), None, "{refused:?}");
    }
    let longest = "x".repeat(MAX_TOKEN_BYTES);
    assert_eq!(
        token(&format!("Bearer {longest}")).map(|t| t.len()),
        Some(MAX_TOKEN_BYTES)
    );
    assert_eq!(
        token(&format!("Bearer {longest}x")),
        None,
        "over MAX_TOKEN_BYTES"
    );
}

#[tokio::test]
async fn no_or_malformed_credentials_are_unauthenticated_without_asking_the_apiserver() -> TestResult
{
    let reviewer = prometheus();
    let guard = guard(&reviewer, CacheLimits::default());
    assert_eq!(guard.decide(None).await?, Decision::Unauthenticated);
    let basic = HeaderValue::from_static("Basic cHJvbWV0aGV1czpzZWNyZXQ=");
    assert_eq!(guard.decide(Some(&basic)).await?, Decision::Unauthenticated);
    let huge = bearer(&"x".repeat(MAX_TOKEN_BYTES + 1));
    assert_eq!(guard.decide(Some(&huge)).await?, Decision::Unauthenticated);
    assert_eq!(reviewer.calls(), (0, 0));
    Ok(())
}

#[tokio::test]
async fn a_token_the_apiserver_rejects_is_unauthenticated_and_never_authorised() -> TestResult {
    let reviewer = prometheus();
    let guard = guard(&reviewer, CacheLimits::default());
    assert_eq!(
        guard.decide(Some(&bearer("garbage"))).await?,
        Decision::Unauthenticated
    );
    assert_eq!(reviewer.calls(), (1, 0));
    Ok(())
}

#[tokio::test]
async fn a_reader_is_allowed_and_its_whole_identity_is_authorised_for_get_metrics() -> TestResult {
    let reviewer = prometheus();
    let guard = guard(&reviewer, CacheLimits::default());
    assert_eq!(
        guard.decide(Some(&bearer("prometheus-token"))).await?,
        Decision::Allowed
    );
    let asked = reviewer
        .asked_for
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0], reviewer.users["prometheus-token"],
        "user, uid, groups and extra"
    );
    Ok(())
}

#[tokio::test]
async fn an_authenticated_user_without_the_right_is_forbidden_by_name() -> TestResult {
    let reviewer = prometheus();
    let guard = guard(&reviewer, CacheLimits::default());
    assert_eq!(
        guard.decide(Some(&bearer("app-token"))).await?,
        Decision::Forbidden {
            user: "system:serviceaccount:shop:app".to_owned()
        }
    );
    assert_eq!(reviewer.calls(), (1, 1));
    Ok(())
}

#[tokio::test]
async fn decisions_are_remembered_for_their_ttl_and_refusals_for_ten_seconds_at_most() -> TestResult
{
    let reviewer = prometheus();
    let ttl = Duration::from_secs(60);
    let guard = guard(&reviewer, CacheLimits { size: 16, ttl });
    let start = Instant::now();
    let (allowed, forbidden) = (bearer("prometheus-token"), bearer("app-token"));
    for _ in 0..3 {
        guard.decide_at(Some(&allowed), start).await?;
        guard.decide_at(Some(&forbidden), start).await?;
    }
    assert_eq!(reviewer.calls(), (2, 2), "asked once per token");

    let later = start + REFUSAL_TTL;
    guard.decide_at(Some(&allowed), later).await?;
    guard.decide_at(Some(&forbidden), later).await?;
    assert_eq!(
        reviewer.calls(),
        (3, 3),
        "the refusal expired, the allowance did not"
    );

    guard.decide_at(Some(&allowed), start + ttl).await?;
    assert_eq!(
        reviewer.calls(),
        (4, 4),
        "the allowance expired after the ttl"
    );
    Ok(())
}

#[tokio::test]
async fn a_zero_ttl_asks_the_apiserver_every_time() -> TestResult {
    let reviewer = prometheus();
    let guard = guard(
        &reviewer,
        CacheLimits {
            size: 16,
            ttl: Duration::ZERO,
        },
    );
    for _ in 0..3 {
        assert_eq!(
            guard.decide(Some(&bearer("prometheus-token"))).await?,
            Decision::Allowed
        );
    }
    assert_eq!(reviewer.calls(), (3, 3));
    assert_eq!(guard.cached(), 0);
    Ok(())
}

#[tokio::test]
async fn an_apiserver_that_cannot_answer_is_an_error_and_nothing_is_remembered() {
    let reviewer = Arc::new(ScriptedReviewer {
        failing: true,
        ..ScriptedReviewer::default()
    });
    let guard = guard(&reviewer, CacheLimits::default());
    for _ in 0..2 {
        let error = guard.decide(Some(&bearer("any"))).await.err();
        assert!(
            matches!(error, Some(ReviewError::TokenReview(_))),
            "{error:?}"
        );
    }
    assert_eq!(reviewer.calls(), (2, 0));
    assert_eq!(guard.cached(), 0);
}

#[tokio::test]
async fn a_client_spraying_tokens_cannot_grow_the_cache_or_evict_an_allowed_scraper() -> TestResult
{
    let reviewer = prometheus();
    let size = 8;
    let guard = guard(
        &reviewer,
        CacheLimits {
            size,
            ttl: DEFAULT_CACHE_TTL,
        },
    );
    let start = Instant::now();
    let scraper = bearer("prometheus-token");
    assert_eq!(
        guard.decide_at(Some(&scraper), start).await?,
        Decision::Allowed
    );
    for i in 0..1000 {
        let now = start + Duration::from_millis(i);
        let sprayed = bearer(&format!("sprayed-{i}"));
        assert_eq!(
            guard.decide_at(Some(&sprayed), now).await?,
            Decision::Unauthenticated
        );
        assert!(guard.cached() <= size, "{} entries", guard.cached());
    }
    assert_eq!(guard.cached(), size);
    let before = reviewer.calls();
    assert_eq!(
        guard
            .decide_at(Some(&scraper), start + Duration::from_secs(1))
            .await?,
        Decision::Allowed
    );
    assert_eq!(
        reviewer.calls(),
        before,
        "the scraper's decision was still remembered"
    );
    Ok(())
}

#[tokio::test]
async fn open_access_refuses_nothing_and_reviewed_access_answers_401_403_and_503() -> TestResult {
    use axum::body::to_bytes;

    assert!(MetricsAccess::Open.refusal(None).await.is_none());

    let access = MetricsAccess::Reviewed(Arc::new(guard(&prometheus(), CacheLimits::default())));
    assert!(
        access
            .refusal(Some(&bearer("prometheus-token")))
            .await
            .is_none()
    );

    let unauthenticated = access.refusal(None).await.ok_or("no refusal")?;
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        unauthenticated.headers()[header::WWW_AUTHENTICATE],
        "Bearer realm=\"cheiron\""
    );

    let forbidden = access
        .refusal(Some(&bearer("app-token")))
        .await
        .ok_or("no refusal")?;
    assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
    let body = to_bytes(forbidden.into_body(), 1 << 16).await?;
    assert_eq!(
        std::str::from_utf8(&body)?,
        "user \"system:serviceaccount:shop:app\" may not get /metrics (RBAC: nonResourceURLs \
         [\"/metrics\"], verbs [\"get\"])\n"
    );

    let failing = MetricsAccess::Reviewed(Arc::new(guard(
        &Arc::new(ScriptedReviewer {
            failing: true,
            ..ScriptedReviewer::default()
        }),
        CacheLimits::default(),
    )));
    let unavailable = failing
        .refusal(Some(&bearer("any")))
        .await
        .ok_or("no refusal")?;
    assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(unavailable.headers()[header::RETRY_AFTER], RETRY_AFTER);
    Ok(())
}

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

fn token_review(authenticated: bool) -> serde_json::Value {
    json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {},
        "status": if authenticated {
            json!({"authenticated": true, "user": {
                "username": "system:serviceaccount:monitoring:prometheus",
                "groups": ["system:serviceaccounts", "system:authenticated"]}})
        } else {
            json!({"authenticated": false, "error": "invalid bearer token"})
        }
    })
}

fn access_review(allowed: bool) -> serde_json::Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {}, "status": {"allowed": allowed}
    })
}

fn api_guard(fake: &FakeApi) -> MetricsGuard {
    MetricsGuard::new(
        Arc::new(ApiReviewer::new(fake.client())),
        CacheLimits::default(),
    )
}

#[tokio::test]
async fn the_apiserver_is_asked_with_a_token_review_then_a_subject_access_review() -> TestResult {
    let fake = FakeApi::new(vec![
        reply("POST", TOKEN_REVIEWS, 201, token_review(true)),
        reply("POST", ACCESS_REVIEWS, 201, access_review(true)),
        reply("POST", TOKEN_REVIEWS, 201, token_review(true)),
        reply("POST", ACCESS_REVIEWS, 201, access_review(false)),
        reply("POST", TOKEN_REVIEWS, 201, token_review(false)),
    ]);
    let guard = api_guard(&fake);
    assert_eq!(guard.decide(Some(&bearer("one"))).await?, Decision::Allowed);
    assert_eq!(
        guard.decide(Some(&bearer("two"))).await?,
        Decision::Forbidden {
            user: "system:serviceaccount:monitoring:prometheus".to_owned()
        }
    );
    assert_eq!(
        guard.decide(Some(&bearer("three"))).await?,
        Decision::Unauthenticated
    );
    assert_eq!(fake.left(), 0, "{:?}", fake.seen());
    Ok(())
}

#[tokio::test]
async fn an_identity_without_rbac_for_reviews_is_an_error_not_a_refusal() {
    let fake = FakeApi::new(vec![
        reply("POST", TOKEN_REVIEWS, 403, status(403, "Forbidden")),
        reply("POST", TOKEN_REVIEWS, 201, token_review(true)),
        reply("POST", ACCESS_REVIEWS, 403, status(403, "Forbidden")),
    ]);
    let guard = api_guard(&fake);
    let first = guard.decide(Some(&bearer("one"))).await.err();
    assert!(
        matches!(first, Some(ReviewError::TokenReview(_))),
        "{first:?}"
    );
    let second = guard.decide(Some(&bearer("one"))).await.err();
    assert!(
        matches!(second, Some(ReviewError::AccessReview(_))),
        "{second:?}"
    );
    if let Some(error) = second {
        assert!(
            error
                .line()
                .starts_with("cannot create a SubjectAccessReview: fake apiserver says Forbidden"),
            "{}",
            error.line()
        );
    }
}
