//! The patch builder and review envelope on plain JSON, including generated objects.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::{
    api::{ImagePullSecretManager, annotation},
    policy::{Manager, NamespaceMeta, StaticView, SubjectKind},
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn manager(
    namespace: &str,
    mode: &str,
    names: &[String],
) -> Result<Manager, Box<dyn std::error::Error>> {
    let secrets: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "registry": "registry.example.com", "username": "u", "password": "p"}))
        .collect();
    let m: ImagePullSecretManager = serde_json::from_value(json!({
        "apiVersion": "cheiron.anny.co/v1alpha1",
        "kind": "ImagePullSecretManager",
        "metadata": {"name": "m", "namespace": namespace},
        "spec": {"mode": mode, "secrets": secrets},
        "status": {"conditions": [ready_condition()]},
    }))?;
    Ok(Manager::from_namespaced(&m)?)
}

fn ready_condition() -> Value {
    json!({"type": "Ready", "status": "True", "reason": "Synced", "message": "",
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

fn view(mode: &str, names: &[&str]) -> Result<StaticView, Box<dyn std::error::Error>> {
    let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
    Ok(StaticView::new(
        vec![manager("team", mode, &names)?],
        [NamespaceMeta::named("team")],
    ))
}

fn apply(object: &Value, patch: &json_patch::Patch) -> Result<Value, json_patch::PatchError> {
    let mut patched = object.clone();
    json_patch::patch(&mut patched, patch)?;
    Ok(patched)
}

fn pull_secret_names(object: &Value, kind: SubjectKind) -> Vec<Option<String>> {
    let list = match kind {
        SubjectKind::Pod => &object["spec"]["imagePullSecrets"],
        SubjectKind::ServiceAccount => &object["imagePullSecrets"],
    };
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn pod_with_only_generate_name_gets_list_and_annotations_created() -> TestResult {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-5d8f7-", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]},
    });
    let mutation = mutate(&pod, SubjectKind::Pod, "team", &view("Pod", &["b", "a"])?)?;
    assert_eq!(mutation.result, MutationResult::Patched);
    assert_eq!(mutation.added, ["b", "a"]);
    let patched = apply(&pod, &mutation.patch)?;
    assert_eq!(
        patched["spec"]["imagePullSecrets"],
        json!([{"name": "b"}, {"name": "a"}])
    );
    assert_eq!(
        patched["metadata"]["annotations"][annotation::RECONCILED],
        "true"
    );
    assert_eq!(
        patched["metadata"]["annotations"][annotation::RECONCILE_WITH],
        "a,b"
    );
    assert_eq!(patched["spec"]["containers"], pod["spec"]["containers"]);
    Ok(())
}

#[test]
fn existing_entries_stay_first_and_only_missing_names_are_appended() -> TestResult {
    let sa = json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "default", "annotations": {"team": "x"}},
        "imagePullSecrets": [{"name": "theirs"}, {"name": "b"}],
    });
    let mutation = mutate(
        &sa,
        SubjectKind::ServiceAccount,
        "team",
        &view("ServiceAccount", &["a", "b"])?,
    )?;
    let patched = apply(&sa, &mutation.patch)?;
    assert_eq!(
        patched["imagePullSecrets"],
        json!([{"name": "theirs"}, {"name": "b"}, {"name": "a"}])
    );
    assert_eq!(patched["metadata"]["annotations"]["team"], "x");
    assert_eq!(
        patched["metadata"]["annotations"][annotation::RECONCILE_WITH],
        "a"
    );
    Ok(())
}

#[test]
fn annotation_keys_are_escaped_in_patch_paths() -> TestResult {
    let sa = json!({"metadata": {"name": "default", "annotations": {}}});
    let mutation = mutate(
        &sa,
        SubjectKind::ServiceAccount,
        "team",
        &view("ServiceAccount", &["a"])?,
    )?;
    let paths: Vec<String> = serde_json::to_value(&mutation.patch)?
        .as_array()
        .map(|ops| {
            ops.iter()
                .filter_map(|op| op["path"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        paths,
        [
            "/imagePullSecrets",
            "/metadata/annotations/cheiron.anny.co~1reconcile-with",
            "/metadata/annotations/cheiron.anny.co~1reconciled",
        ]
    );
    Ok(())
}

#[test]
fn reconcile_with_unions_the_previous_value_sorted() {
    let added = ["c".to_owned(), "a".to_owned()];
    assert_eq!(reconcile_with(Some("b, a,,d"), &added), "a,b,c,d");
    assert_eq!(reconcile_with(None, &added), "a,c");
}

#[test]
fn object_already_referencing_everything_is_unchanged() -> TestResult {
    let sa = json!({"metadata": {"name": "default"}, "imagePullSecrets": [{"name": "a"}]});
    let mutation = mutate(
        &sa,
        SubjectKind::ServiceAccount,
        "team",
        &view("ServiceAccount", &["a"])?,
    )?;
    assert_eq!(mutation.result, MutationResult::Unchanged);
    assert!(mutation.patch.0.is_empty());
    Ok(())
}

#[test]
fn missing_secrets_draw_a_warning_but_are_still_referenced() -> TestResult {
    let view = view("ServiceAccount", &["present", "absent"])?
        .with_secrets([("team".to_owned(), "present".to_owned())]);
    let sa = json!({"metadata": {"name": "default"}});
    let mutation = mutate(&sa, SubjectKind::ServiceAccount, "team", &view)?;
    assert_eq!(mutation.added, ["present", "absent"]);
    assert_eq!(mutation.warnings.len(), 1);
    assert!(
        mutation.warnings[0].contains("team/absent"),
        "{:?}",
        mutation.warnings
    );
    Ok(())
}

/// A Pod view in which only `team/present` exists.
fn pod_view_with_present() -> Result<StaticView, Box<dyn std::error::Error>> {
    Ok(view("Pod", &["present", "absent", "gone"])?
        .with_secrets([("team".to_owned(), "present".to_owned())]))
}

#[test]
fn a_pod_referencing_missing_secrets_is_labelled_and_keeps_its_own_labels() -> TestResult {
    let pod = json!({
        "metadata": {
            "name": "web",
            "labels": {"app": "web", "app.kubernetes.io/name": "shop"},
            "annotations": {"team.example.com/owner": "alice"},
        },
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    });
    let mutation = mutate(&pod, SubjectKind::Pod, "team", &pod_view_with_present()?)?;
    assert_eq!(mutation.result, MutationResult::Patched);
    // One operation per key: the existing maps are never replaced.
    let paths: Vec<String> = mutation
        .patch
        .0
        .iter()
        .map(|op| op.path().to_string())
        .collect();
    assert!(
        paths.contains(&"/metadata/labels/cheiron.anny.co~1missing-secrets".to_owned()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"/metadata/annotations/cheiron.anny.co~1missing-secrets".to_owned()),
        "{paths:?}"
    );
    assert!(
        !paths
            .iter()
            .any(|p| p == "/metadata/labels" || p == "/metadata/annotations")
    );
    let patched = apply(&pod, &mutation.patch)?;
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app": "web", "app.kubernetes.io/name": "shop", "cheiron.anny.co/missing-secrets": "true"})
    );
    let annotations = &patched["metadata"]["annotations"];
    assert_eq!(annotations["team.example.com/owner"], "alice");
    assert_eq!(
        annotations["cheiron.anny.co/missing-secrets"],
        "absent,gone"
    );
    // Applied to its own output, the webhook has nothing more to add.
    let again = mutate(
        &patched,
        SubjectKind::Pod,
        "team",
        &pod_view_with_present()?,
    )?;
    assert_eq!(again.result, MutationResult::Unchanged);
    Ok(())
}

#[test]
fn a_pod_without_labels_or_metadata_gets_the_label_map_created() -> TestResult {
    for pod in [
        json!({"metadata": {"generateName": "web-"}, "spec": {}}),
        json!({"metadata": {"generateName": "web-", "annotations": {"a": "b"}}}),
        json!({"spec": {"containers": []}}),
    ] {
        let mutation = mutate(&pod, SubjectKind::Pod, "team", &pod_view_with_present()?)?;
        let patched = apply(&pod, &mutation.patch)?;
        assert_eq!(
            patched["metadata"]["labels"],
            json!({"cheiron.anny.co/missing-secrets": "true"}),
            "{pod}"
        );
        assert_eq!(
            patched["metadata"]["annotations"]["cheiron.anny.co/missing-secrets"],
            "absent,gone"
        );
        if pod["metadata"]["annotations"]["a"] == "b" {
            assert_eq!(patched["metadata"]["annotations"]["a"], "b");
        }
    }
    Ok(())
}

#[test]
fn no_label_when_every_secret_exists_or_is_unknown_under_ready_managers_or_for_a_service_account()
-> TestResult {
    let pod = json!({"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {}});
    let all_present =
        view("Pod", &["present"])?.with_secrets([("team".to_owned(), "present".to_owned())]);
    let untracked = view("Pod", &["absent"])?;
    for view in [all_present, untracked] {
        let mutation = mutate(&pod, SubjectKind::Pod, "team", &view)?;
        assert_eq!(mutation.result, MutationResult::Patched);
        let patched = apply(&pod, &mutation.patch)?;
        assert_eq!(patched["metadata"]["labels"], json!({"app": "web"}));
        assert!(
            patched["metadata"]["annotations"]
                .get("cheiron.anny.co/missing-secrets")
                .is_none()
        );
    }
    let sa = json!({"metadata": {"name": "default", "labels": {"app": "web"}}});
    let view = view("ServiceAccount", &["absent"])?.with_secrets([]);
    let mutation = mutate(&sa, SubjectKind::ServiceAccount, "team", &view)?;
    assert_eq!(mutation.warnings.len(), 1, "still warned about");
    let patched = apply(&sa, &mutation.patch)?;
    assert_eq!(patched["metadata"]["labels"], json!({"app": "web"}));
    Ok(())
}

#[test]
fn a_secret_that_is_its_own_source_is_checked_only_while_its_manager_is_not_ready() -> TestResult {
    // `existingSecretRef` injected under its own name in its own namespace: the user's Secret,
    // which cheiron's cache of its own Secrets does not hold. No warning about it; the Pod is
    // marked for the controller's check only while the manager is not Ready (SourceMissing).
    let manager = |status: Value| -> Result<Manager, Box<dyn std::error::Error>> {
        let m: ImagePullSecretManager = serde_json::from_value(json!({
            "apiVersion": "cheiron.anny.co/v1alpha1",
            "kind": "ImagePullSecretManager",
            "metadata": {"name": "m", "namespace": "team"},
            "spec": {"mode": "Pod", "secrets": [
                {"existingSecretRef": {"name": "own"}},
                {"name": "copy", "existingSecretRef": {"name": "own"}},
            ]},
            "status": status,
        }))?;
        Ok(Manager::from_namespaced(&m)?)
    };
    let not_ready = json!({"conditions": [{"type": "Ready", "status": "False",
        "reason": "SourceMissing", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    let pod = json!({"metadata": {"name": "web"}, "spec": {}});
    for (status, marked) in [
        (not_ready, "copy,own"),
        (json!({}), "copy"),
        (json!({"conditions": [ready_condition()]}), "copy"),
    ] {
        let view = StaticView::new(vec![manager(status)?], [NamespaceMeta::named("team")])
            .with_secrets([]);
        let mutation = mutate(&pod, SubjectKind::Pod, "team", &view)?;
        assert_eq!(mutation.added, ["own", "copy"]);
        assert_eq!(mutation.warnings.len(), 1, "{:?}", mutation.warnings);
        assert!(mutation.warnings[0].contains("team/copy"));
        let patched = apply(&pod, &mutation.patch)?;
        assert_eq!(
            patched["metadata"]["annotations"]["cheiron.anny.co/missing-secrets"],
            marked
        );
    }
    Ok(())
}

#[test]
fn without_a_secret_cache_a_pod_is_marked_only_for_managers_not_ready() -> TestResult {
    // The split install's webhook cannot list Secrets: no warning, and a mark only when a
    // manager that injects the name says it is not Ready (the test helper's are Ready).
    let pod = json!({"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {}});
    let ready = view("Pod", &["a"])?;
    let mutation = mutate(&pod, SubjectKind::Pod, "team", &ready)?;
    assert!(mutation.warnings.is_empty());
    let patched = apply(&pod, &mutation.patch)?;
    assert_eq!(patched["metadata"]["labels"], json!({"app": "web"}));

    let m: ImagePullSecretManager = serde_json::from_value(json!({
        "apiVersion": "cheiron.anny.co/v1alpha1",
        "kind": "ImagePullSecretManager",
        "metadata": {"name": "m", "namespace": "team"},
        "spec": {"mode": "Pod", "secrets": [{"name": "a", "existingSecretRef": {"name": "src"}}]},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "SourceMissing",
                   "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    }))?;
    let not_ready = StaticView::new(
        vec![Manager::from_namespaced(&m)?],
        [NamespaceMeta::named("team")],
    );
    let mutation = mutate(&pod, SubjectKind::Pod, "team", &not_ready)?;
    assert!(mutation.warnings.is_empty());
    let patched = apply(&pod, &mutation.patch)?;
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app": "web", "cheiron.anny.co/missing-secrets": "true"})
    );
    assert_eq!(
        patched["metadata"]["annotations"]["cheiron.anny.co/missing-secrets"],
        "a"
    );
    Ok(())
}

#[test]
fn malformed_objects_are_uninterpretable() -> TestResult {
    let v = view("ServiceAccount", &["a"])?;
    let pod = view("Pod", &["a"])?;
    assert!(
        mutate(
            &json!({"metadata": {}, "spec": []}),
            SubjectKind::Pod,
            "team",
            &pod
        )
        .is_err()
    );
    for bad in [
        json!(42),
        json!({"metadata": {"labels": "not-a-map"}}),
        json!({"metadata": {}, "imagePullSecrets": "x"}),
        json!({"metadata": {}, "imagePullSecrets": [{"name": 7}]}),
        // serde would read a struct from an array of its fields; a patch to such an object
        // could not apply (found by the fuzz smoke run).
        json!([]),
        json!({"metadata": []}),
        json!({"metadata": ["name"]}),
        json!({"metadata": {}, "spec": []}),
    ] {
        assert!(
            mutate(&bad, SubjectKind::ServiceAccount, "team", &v).is_err(),
            "{bad}"
        );
    }
    Ok(())
}

fn review_body(kind: &str, resource: &str, operation: &str, object: Value) -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "7f0b2c1e-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": resource},
            "namespace": "team",
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": object,
            "oldObject": null,
            "dryRun": false,
        }
    })
    .to_string()
    .into_bytes()
}

#[test]
fn review_echoes_uid_allows_and_patches_pod_create() -> TestResult {
    let body = review_body(
        "Pod",
        "pods",
        "CREATE",
        json!({"metadata": {"generateName": "x-"}, "spec": {}}),
    );
    let admission = review(&body, &view("Pod", &["a"])?)?;
    assert_eq!(admission.outcome, Outcome::Patched);
    let response = serde_json::to_value(&admission.review)?;
    assert_eq!(
        response["response"]["uid"],
        "7f0b2c1e-0000-4000-8000-000000000001"
    );
    assert_eq!(response["response"]["allowed"], true);
    assert_eq!(response["response"]["patchType"], "JSONPatch");
    assert_eq!(response["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(response["kind"], "AdmissionReview");
    Ok(())
}

#[test]
fn review_takes_the_namespace_from_the_request_not_the_object() -> TestResult {
    let mut body: Value = serde_json::from_slice(&review_body(
        "ServiceAccount",
        "serviceaccounts",
        "CREATE",
        json!({"metadata": {"name": "x", "namespace": "elsewhere"}}),
    ))?;
    body["request"]["namespace"] = json!("team");
    let parsed = parse(&serde_json::to_vec(&body)?)?;
    assert_eq!(parsed.namespace_needed(), Some("team"));
    let admission = parsed.answer(&view("ServiceAccount", &["a"])?);
    assert_eq!(admission.namespace.as_deref(), Some("team"));
    assert_eq!(admission.outcome, Outcome::Patched);
    Ok(())
}

#[test]
fn a_namespace_that_cannot_be_looked_up_is_admitted_unchanged_with_a_warning() -> TestResult {
    let body = review_body(
        "ServiceAccount",
        "serviceaccounts",
        "CREATE",
        json!({"metadata": {"name": "x"}}),
    );
    let admission =
        parse(&body)?.admit_unchanged("namespace unknown".into(), Outcome::NamespaceUnknown);
    let response = serde_json::to_value(&admission.review)?;
    assert_eq!(response["response"]["allowed"], true);
    assert!(response["response"].get("patch").is_none());
    assert_eq!(response["response"]["warnings"][0], "namespace unknown");
    Ok(())
}

#[test]
fn only_handled_requests_need_their_namespace() -> TestResult {
    let delete = parse(&review_body("Pod", "pods", "DELETE", Value::Null))?;
    assert_eq!(delete.namespace_needed(), None);
    let other = parse(&review_body("ConfigMap", "configmaps", "CREATE", json!({})))?;
    assert_eq!(other.namespace_needed(), None);
    Ok(())
}

#[test]
fn review_leaves_pod_updates_deletes_and_other_kinds_alone() -> TestResult {
    let v = view("Pod", &["a"])?;
    let pod = json!({"metadata": {"name": "x"}, "spec": {}});
    for body in [
        review_body("Pod", "pods", "UPDATE", pod.clone()),
        review_body("Pod", "pods", "DELETE", Value::Null),
        review_body(
            "ConfigMap",
            "configmaps",
            "CREATE",
            json!({"metadata": {"name": "x"}}),
        ),
    ] {
        let admission = review(&body, &v)?;
        assert_eq!(admission.outcome, Outcome::NotHandled);
        let response = serde_json::to_value(&admission.review)?;
        assert_eq!(response["response"]["allowed"], true);
        assert!(response["response"].get("patch").is_none());
    }
    Ok(())
}

#[test]
fn review_admits_uninterpretable_objects_with_a_warning() -> TestResult {
    let body = review_body(
        "ServiceAccount",
        "serviceaccounts",
        "CREATE",
        json!({"metadata": "nope"}),
    );
    let admission = review(&body, &view("ServiceAccount", &["a"])?)?;
    assert_eq!(admission.outcome, Outcome::Uninterpretable);
    let response = serde_json::to_value(&admission.review)?;
    assert_eq!(response["response"]["allowed"], true);
    assert!(
        response["response"]["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("metadata"))
    );
    Ok(())
}

#[test]
fn bodies_that_are_not_reviews_are_rejected() -> TestResult {
    let v = view("Pod", &["a"])?;
    assert!(matches!(
        review(b"\x00\xffnot json", &v),
        Err(InvalidReview::NotJson(_))
    ));
    assert!(matches!(
        review(b"[1,2]", &v),
        Err(InvalidReview::NotAReview(_))
    ));
    assert!(matches!(
        review(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            &v
        ),
        Err(InvalidReview::NoRequest)
    ));
    Ok(())
}

#[test]
fn a_review_shaped_body_of_another_kind_or_version_is_rejected() -> TestResult {
    let v = view("Pod", &["a"])?;
    let pod = json!({"metadata": {"generateName": "x-"}, "spec": {}});
    for (api_version, kind) in [
        ("admission.k8s.io/v1", "NotAReview"),
        ("admission.k8s.io/v1beta1", "AdmissionReview"),
        ("v1", "Pod"),
        ("", ""),
    ] {
        let mut body: Value =
            serde_json::from_slice(&review_body("Pod", "pods", "CREATE", pod.clone()))?;
        body["apiVersion"] = json!(api_version);
        body["kind"] = json!(kind);
        let result = review(&serde_json::to_vec(&body)?, &v);
        assert!(
            matches!(result, Err(InvalidReview::WrongType)),
            "{api_version} {kind}: {result:?}"
        );
        // The slow path (an object of an odd shape) checks the type as well.
        body["request"]["object"] = json!({"metadata": "nope"});
        let result = review(&serde_json::to_vec(&body)?, &v);
        assert!(
            matches!(result, Err(InvalidReview::WrongType)),
            "{api_version} {kind}, odd object: {result:?}"
        );
    }
    // The message says what is wrong without quoting the body.
    assert_eq!(
        InvalidReview::WrongType.to_string(),
        "body is not an admission.k8s.io/v1 AdmissionReview: wrong apiVersion or kind"
    );
    Ok(())
}

const NAMES: [&str; 6] = ["a", "b", "docker-hub", "ghcr", "x.y", "z-1"];

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(NAMES.to_vec()).prop_map(str::to_owned)
}

prop_compose! {
    fn object(kind: SubjectKind)(
        existing in prop::option::of(prop::collection::vec(prop_oneof![
            name().prop_map(|n| json!({"name": n})),
            Just(json!({})),
        ], 0..5)),
        annotations in prop::option::of(prop::collection::btree_map(
            prop_oneof![Just(annotation::RECONCILE_WITH.to_owned()), Just("app/x".to_owned()), Just("a~b/c".to_owned())],
            prop_oneof![Just("b,ghcr".to_owned()), Just(String::new()), Just("v".to_owned())],
            0..3,
        )),
        with_spec in any::<bool>(),
    ) -> Value {
        let mut metadata = json!({"generateName": "p-"});
        if let Some(a) = annotations {
            metadata["annotations"] = json!(a);
        }
        let mut object = json!({"metadata": metadata});
        match (kind, existing) {
            (SubjectKind::Pod, existing) => {
                if with_spec || existing.is_some() {
                    object["spec"] = json!({"containers": [{"name": "c", "image": "i"}]});
                }
                if let Some(e) = existing {
                    object["spec"]["imagePullSecrets"] = Value::Array(e);
                }
            }
            (SubjectKind::ServiceAccount, Some(e)) => object["imagePullSecrets"] = Value::Array(e),
            (SubjectKind::ServiceAccount, None) => {}
        }
        object
    }
}

fn kind() -> impl Strategy<Value = SubjectKind> {
    prop_oneof![Just(SubjectKind::Pod), Just(SubjectKind::ServiceAccount)]
}

fn unique(names: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

proptest! {
    #[test]
    fn patch_applies_keeps_existing_entries_and_is_idempotent(
        (kind, object) in kind().prop_flat_map(|k| (Just(k), object(k))),
        wanted in prop::collection::vec(name(), 1..5).prop_map(unique),
    ) {
        let mode = match kind { SubjectKind::Pod => "Pod", SubjectKind::ServiceAccount => "ServiceAccount" };
        let names: Vec<&str> = wanted.iter().map(String::as_str).collect();
        let view = view(mode, &names).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mutation = mutate(&object, kind, "team", &view).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let patched = apply(&object, &mutation.patch).map_err(|e| TestCaseError::fail(e.to_string()))?;

        let before = pull_secret_names(&object, kind);
        let after = pull_secret_names(&patched, kind);
        // Every existing entry survives, in place, and new ones come after.
        prop_assert_eq!(&after[..before.len()], &before[..]);
        // Every wanted name is referenced, and nothing cheiron added is duplicated.
        for n in &wanted {
            prop_assert!(after.contains(&Some(n.clone())));
        }
        let appended = &after[before.len()..];
        for (i, n) in appended.iter().enumerate() {
            prop_assert!(!before.contains(n) && !appended[..i].contains(n));
        }
        // Annotations: all previous ones kept; reconcile-with lists what was added.
        if let Some(previous) = object["metadata"]["annotations"].as_object() {
            for (k, v) in previous {
                if k != annotation::RECONCILE_WITH {
                    prop_assert_eq!(&patched["metadata"]["annotations"][k], v);
                }
            }
        }
        if mutation.result == MutationResult::Patched {
            prop_assert_eq!(&patched["metadata"]["annotations"][annotation::RECONCILED], "true");
            let listed = patched["metadata"]["annotations"][annotation::RECONCILE_WITH].as_str().unwrap_or("").to_owned();
            for n in &mutation.added {
                prop_assert!(listed.split(',').any(|l| l == n));
            }
        } else {
            prop_assert_eq!(&patched, &object);
        }
        // Idempotent: the webhook applied to its own output returns no patch.
        let again = mutate(&patched, kind, "team", &view).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(again.result, MutationResult::Unchanged);
        prop_assert!(again.patch.0.is_empty());
    }
}

#[test]
fn the_fast_parse_and_the_json_path_give_the_same_patch() -> TestResult {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/pod-create-replicaset.json"
    );
    let mut body: Value = serde_json::from_slice(&std::fs::read(path)?)?;
    body["request"]["namespace"] = json!("team");
    let object = body["request"]["object"].clone();
    let v = view("Pod", &["a", "b"])?;
    let fast = parse(&serde_json::to_vec(&body)?)?.answer(&v);
    let slow = mutate(&object, SubjectKind::Pod, "team", &v)?;
    assert_eq!(fast.outcome, Outcome::Patched);
    let fast_patch: json_patch::Patch = serde_json::from_slice(
        fast.review
            .response
            .as_ref()
            .and_then(|r| r.patch.as_deref())
            .ok_or("no patch")?,
    )?;
    assert_eq!(fast_patch, slow.patch);
    Ok(())
}

#[test]
fn matching_images_reads_every_container_list_and_warns_only_about_matched_missing_secrets()
-> TestResult {
    let m: ImagePullSecretManager = serde_json::from_value(json!({
        "apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ImagePullSecretManager",
        "metadata": {"name": "m", "namespace": "team"},
        "spec": {"mode": "Pod", "injection": "MatchingImages", "secrets": [
            {"name": "hub", "registry": "docker.io", "username": "u", "password": "p"},
            {"name": "ghcr", "registry": "ghcr.io", "username": "u", "password": "p"},
            {"name": "quay", "registry": "quay.io", "username": "u", "password": "p"},
            {"name": "gcr", "registry": "gcr.io", "username": "u", "password": "p"},
        ]},
    }))?;
    // "hub" exists in the namespace; "ghcr" and "quay" do not, "gcr" serves no image here.
    let view = StaticView::new(
        vec![Manager::from_namespaced(&m)?],
        [NamespaceMeta::named("team")],
    )
    .with_secrets([("team".to_owned(), "hub".to_owned())]);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-"},
        "spec": {
            "containers": [{"name": "web", "image": "nginx:1.27", "env": [{"name": "A", "value": "b"}]}],
            "initContainers": [{"name": "init", "image": "ghcr.io/org/init@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}],
            "ephemeralContainers": [{"name": "debug", "image": "quay.io/org/debug"}],
        },
    });
    let mutation = mutate(&pod, SubjectKind::Pod, "team", &view)?;
    assert_eq!(mutation.added, ["hub", "ghcr", "quay"]);
    assert_eq!(mutation.warnings.len(), 2, "{:?}", mutation.warnings);
    assert!(mutation.warnings[0].contains("team/ghcr does not exist yet"));
    assert!(mutation.warnings[1].contains("team/quay does not exist yet"));

    let elsewhere = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-"},
        "spec": {"containers": [{"name": "web", "image": "registry.example.com/app"}]},
    });
    let mutation = mutate(&elsewhere, SubjectKind::Pod, "team", &view)?;
    assert_eq!(
        mutation.result,
        MutationResult::Skipped(crate::policy::Skip::NoMatchingImage)
    );
    assert!(mutation.patch.0.is_empty() && mutation.warnings.is_empty());
    Ok(())
}
