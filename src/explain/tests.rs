//! `explain` agrees with admission: for any object, the managers it calls selected are the
//! managers the webhook's decision acts for, and the Secrets it calls missing are the ones
//! the webhook's patch adds.

use std::{collections::BTreeMap, path::PathBuf};

use proptest::prelude::*;

use super::*;
use crate::{
    admission::{MutationResult, mutate_interpreted},
    policy::{NamespaceMeta, StaticView, SubjectKind, View},
    source::load_paths,
};

/// The golden managers (one per verdict), and namespaces beyond those the file declares.
fn view() -> StaticView {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/explain/managers.yaml");
    let loaded = load_paths(&[path]).unwrap_or_default();
    assert!(
        !loaded.managers.is_empty(),
        "tests/data/explain/managers.yaml did not load"
    );
    let mut namespaces = loaded.namespaces;
    let mut bees = NamespaceMeta::named("bees");
    bees.labels.insert("team", "b");
    let mut hushed = NamespaceMeta::named("hushed");
    hushed.annotations.insert("cheiron.anny.co/ignore", "true");
    namespaces.extend([bees, hushed, NamespaceMeta::named("prod-eu")]);
    StaticView::new(loaded.managers, namespaces)
}

const NAMESPACES: [&str; 9] = [
    "apps",
    "legacy-1",
    "quiet",
    "bees",
    "hushed",
    "prod-eu",
    "other",
    "kube-system",
    "fresh",
];
const IMAGES: [&str; 6] = [
    "quay.io/org/api:1",
    "ghcr.io/o/b@sha256:0000000000000000000000000000000000000000000000000000000000000000",
    "nginx",
    "registry.example.com/x:1",
    "b.example.com/y",
    "Not An Image",
];
const NAMES: [&str; 5] = ["regcred", "quay-pull", "sa-pull", "web-pull", "own"];

fn object() -> impl Strategy<Value = (Interpreted, &'static str)> {
    (
        any::<bool>(),
        prop::sample::select(&["default", "builder", "runner"][..]),
        prop::option::of(prop::sample::select(&["web", "api"][..])),
        prop::option::of(prop::sample::select(
            &[
                ("cheiron.anny.co/ignore", "true"),
                ("cheiron.anny.co/reconcilable", "false"),
                ("cheiron.anny.co/ignore", "no"),
            ][..],
        )),
        prop::sample::subsequence(&IMAGES[..], 0..=3),
        prop::sample::subsequence(&NAMES[..], 0..=2),
        prop::sample::select(&NAMESPACES[..]),
    )
        .prop_map(|(pod, name, app, opt_out, images, existing, namespace)| {
            let kind = if pod {
                SubjectKind::Pod
            } else {
                SubjectKind::ServiceAccount
            };
            let labels: BTreeMap<String, String> = app
                .map(|a| ("app".to_owned(), a.to_owned()))
                .into_iter()
                .collect();
            let annotations: BTreeMap<String, String> = opt_out
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into_iter()
                .collect();
            let object = Interpreted {
                kind,
                name: name.to_owned(),
                has_labels: !labels.is_empty(),
                labels,
                has_annotations: !annotations.is_empty(),
                annotations,
                existing: existing.iter().map(|s| (*s).to_owned()).collect(),
                images: if pod {
                    images.iter().map(|s| (*s).to_owned()).collect()
                } else {
                    Vec::new()
                },
                has_metadata: true,
                has_list_parent: true,
                has_list: true,
            };
            (object, namespace)
        })
}

proptest! {
    #[test]
    fn explain_selects_exactly_the_managers_admission_acts_for((object, namespace) in object()) {
        let view = view();
        let meta = view.namespace(namespace).unwrap_or_else(|| NamespaceMeta::named(namespace));
        let managers = view.managers();
        let explanation = explain(&object, &meta, &managers);
        // The webhook's path: its index's candidates, then the decision.
        let candidates = view.managers_in(&meta);
        let decision = decide(&object.subject(), &meta, candidates.iter().map(|m| &**m));
        let selected: Vec<&str> = explanation
            .managers
            .iter()
            .filter(|m| m.verdict.kind == VerdictKind::Selected)
            .map(|m| m.manager.as_str())
            .collect();
        let acting: Vec<String> = match &decision {
            Decision::Inject { managers, .. } => managers.iter().map(ToString::to_string).collect(),
            Decision::Skip(_) => Vec::new(),
        };
        prop_assert_eq!(selected, acting.iter().map(String::as_str).collect::<Vec<_>>());
        let mutation = mutate_interpreted(&object, namespace, &view);
        match mutation.result {
            MutationResult::Patched => prop_assert_eq!(&mutation.added, &explanation.outcome.missing),
            MutationResult::Unchanged => prop_assert!(explanation.outcome.missing.is_empty() && !explanation.outcome.wanted.is_empty()),
            MutationResult::Skipped(skip) => {
                prop_assert_eq!(Some(skip.as_str()), explanation.outcome.skipped);
                prop_assert!(explanation.outcome.wanted.is_empty());
            }
        }
        // Every manager explain leaves out cannot act here: a namespaced manager elsewhere.
        for m in managers.iter() {
            let listed = explanation.managers.iter().any(|v| v.manager == m.id.to_string());
            prop_assert!(listed || m.id.namespace.as_deref().is_some_and(|ns| ns != namespace));
        }
    }
}

#[test]
fn every_verdict_says_why_in_words() {
    let view = view();
    let managers = view.managers();
    let pod = Interpreted {
        kind: SubjectKind::Pod,
        name: "web".into(),
        labels: [("app".to_owned(), "web".to_owned())].into(),
        annotations: Default::default(),
        existing: vec!["own".into()],
        images: vec!["registry.example.com/web:2".into()],
        has_metadata: true,
        has_labels: false,
        has_annotations: false,
        has_list_parent: true,
        has_list: true,
    };
    let apps = view.namespace("apps").unwrap_or_default();
    let e = explain(&pod, &apps, &managers);
    let reasons: Vec<(&str, VerdictKind, &str)> = e
        .managers
        .iter()
        .map(|m| {
            (
                m.manager.as_str(),
                m.verdict.kind,
                m.verdict.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "ClusterImagePullSecretManager everywhere",
                VerdictKind::Selected,
                "selected"
            ),
            (
                "ClusterImagePullSecretManager team-b",
                VerdictKind::NotInScope,
                "not in scope: namespace apps with labels {team=a} does not match namespaceSelector team=b"
            ),
            (
                "ClusterImagePullSecretManager prod-only",
                VerdictKind::NotInScope,
                "not in scope: namespace apps matches none of namespaces [prod-*]"
            ),
            (
                "ClusterImagePullSecretManager service-accounts",
                VerdictKind::WrongMode,
                "wrong mode: mode ServiceAccount acts on ServiceAccounts"
            ),
            (
                "ImagePullSecretManager apps/web-only",
                VerdictKind::Selected,
                "selected"
            ),
            (
                "ImagePullSecretManager apps/matching",
                VerdictKind::NoMatchingImage,
                "no matching image: injection MatchingImages, and none of its Secrets serves one of the Pod's images"
            ),
        ]
    );
    assert_eq!(e.outcome.wanted, ["regcred", "web-pull"]);
    assert_eq!(e.outcome.missing, ["regcred", "web-pull"]);
    let rows: Vec<(&str, bool, bool)> = e
        .secrets
        .iter()
        .map(|r| (r.name.as_str(), r.referenced, r.wanted))
        .collect();
    assert_eq!(
        rows,
        [
            ("own", true, false),
            ("regcred", false, true),
            ("web-pull", false, true)
        ]
    );
}

#[test]
fn a_matching_images_secret_names_the_images_it_serves() {
    let view = view();
    let managers = view.managers();
    let pod = Interpreted {
        kind: SubjectKind::Pod,
        name: "api".into(),
        labels: Default::default(),
        annotations: Default::default(),
        existing: Vec::new(),
        images: vec![
            "quay.io/org/api:1".into(),
            "nginx".into(),
            "quay.io/org/side".into(),
        ],
        has_metadata: true,
        has_labels: false,
        has_annotations: false,
        has_list_parent: true,
        has_list: false,
    };
    let apps = view.namespace("apps").unwrap_or_default();
    let e = explain(&pod, &apps, &managers);
    let quay = e.secrets.iter().find(|r| r.name == "quay-pull");
    assert_eq!(
        quay.and_then(|r| r.serves.clone()),
        Some(vec![
            "quay.io/org/api:1".to_owned(),
            "quay.io/org/side".to_owned()
        ])
    );
    // An All manager's Secret says nothing of images.
    let regcred = e.secrets.iter().find(|r| r.name == "regcred");
    assert_eq!(regcred.map(|r| r.serves.clone()), Some(None));
    assert!(!e.secret_names().contains(&"ghcr-pull".to_owned()));
}
