//! The finalizer outcomes a real apiserver reaches only under races: a reconcile whose view of
//! its manager is stale. A scripted fake API answers each request in turn (a mock, for error
//! paths only; the reconciles themselves are covered against a real kube-apiserver in
//! `tests/controller/`).

use cheiron_runtime::{
    api::ClusterImagePullSecretManager,
    runtime::fake_api::{FakeApi, reply, status},
};
use serde_json::{Value, json};

use super::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const PATH: &str = "/apis/cheiron.anny.co/v1alpha1/clusterimagepullsecretmanagers/company";

/// The manager as a reconcile saw it: at resourceVersion 1, without cheiron's finalizer.
fn seen() -> Result<Arc<ClusterImagePullSecretManager>, serde_json::Error> {
    Ok(Arc::new(serde_json::from_value(json!({
        "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
        "metadata": {"name": "company", "resourceVersion": "1", "uid": "u1"},
        "spec": {"secrets": [{"existingSecretRef": {"name": "pull", "namespace": "src"}}]},
    }))?))
}

/// The manager's metadata as the apiserver has it now.
fn current(resource_version: &str) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": "company", "resourceVersion": resource_version, "uid": "u1",
                     "finalizers": [FINALIZER]},
    })
}

/// Runs [`with_finalizer`] on the stale view against `fake`; the body must not run, since the
/// view has no finalizer yet.
async fn run(
    fake: &FakeApi,
    seen: Arc<ClusterImagePullSecretManager>,
) -> Result<Action, ControllerError> {
    let api: kube::Api<ClusterImagePullSecretManager> = kube::Api::all(fake.client());
    with_finalizer(&api, seen, |_| async {
        panic!("the body ran without the finalizer in place")
    })
    .await
}

/// The apiserver refusing the finalizer patch, as it does when the patch's `test` of the
/// finalizers fails (and as an admission policy would).
fn refused() -> Value {
    status(422, "Invalid")
}

#[tokio::test]
async fn a_finalizer_add_refused_because_the_manager_moved_on_is_not_a_failure() -> TestResult {
    let fake = FakeApi::new(vec![
        reply("PATCH", PATH, 422, refused()),
        reply("GET", PATH, 200, current("2")),
    ]);
    let action = run(&fake, seen()?).await?;
    assert_eq!(action, Action::await_change());
    assert_eq!(fake.left(), 0, "asked: {:?}", fake.seen());
    Ok(())
}

#[tokio::test]
async fn a_finalizer_add_refused_for_a_manager_deleted_meanwhile_is_not_a_failure() -> TestResult {
    let fake = FakeApi::new(vec![
        reply("PATCH", PATH, 422, refused()),
        reply("GET", PATH, 404, status(404, "NotFound")),
    ]);
    assert_eq!(run(&fake, seen()?).await?, Action::await_change());
    assert_eq!(fake.left(), 0, "asked: {:?}", fake.seen());
    Ok(())
}

#[tokio::test]
async fn a_finalizer_add_refused_for_the_manager_as_seen_stays_a_failure() -> TestResult {
    // Same resourceVersion: the view was current, so the refusal is the patch's own (an
    // admission policy), and must be retried with backoff and reported.
    let fake = FakeApi::new(vec![
        reply("PATCH", PATH, 422, refused()),
        reply("GET", PATH, 200, current("1")),
    ]);
    let Err(error) = run(&fake, seen()?).await else {
        return Err("a refusal of the patch itself must stay an error".into());
    };
    assert_eq!(error.kind(), "finalizer");
    assert!(
        matches!(
            &error,
            ControllerError::Finalizer(e)
                if matches!(&**e, finalizer::Error::AddFinalizer(kube::Error::Api(s)) if s.code == 422)
        ),
        "{error:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_finalizer_add_refused_when_the_manager_cannot_be_read_stays_a_failure() -> TestResult {
    let fake = FakeApi::new(vec![
        reply("PATCH", PATH, 422, refused()),
        reply("GET", PATH, 500, status(500, "InternalError")),
    ]);
    let Err(error) = run(&fake, seen()?).await else {
        return Err("nothing says the view was stale: the refusal must stay an error".into());
    };
    assert_eq!(error.kind(), "finalizer");
    Ok(())
}
