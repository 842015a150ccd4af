//! The properties the fuzz targets check, as plain functions of one input's bytes.
//!
//! This file is the only copy: each target in `fuzz/fuzz_targets/` includes it with
//! `#[path]`, and `tests/fuzz_corpus.rs` includes it the same way to replay the committed
//! corpora on stable in CI. A violated property panics, which libFuzzer records as a crash
//! and the replay test reports as a failure naming the input file. It lives in a
//! subdirectory so cargo does not build it as a test crate of its own.

use std::{
    collections::BTreeMap,
    sync::{Arc, OnceLock},
};

use cheiron::{
    admission::{self, Outcome, build_patch, interpret},
    api::{
        ClusterImagePullSecretManager, ImagePullSecretManager, annotation, validate_cluster,
        validate_namespaced,
    },
    content::DockerConfig,
    policy::{Manager, NamespaceGlob, NamespaceMeta, StaticView, SubjectKind, View},
    yaml,
};
use k8s_openapi::ByteString;
use serde_json::Value;

const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
const DOCKER_CFG: &str = "kubernetes.io/dockercfg";

/// The managers of the `review` view: one of each kind and mode, with selectors, globs,
/// exclusions, a merge target and `injection: MatchingImages`, so most inputs reach the
/// policy, the image matching and the patch builder.
const VIEW_MANAGERS: &[&str] = &[
    r#"{"apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ImagePullSecretManager",
        "metadata": {"name": "pods", "namespace": "team-a"},
        "spec": {"mode": "Pod", "secrets": [{"existingSecretRef": {"name": "a-pull"}},
                 {"name": "hub", "registry": "docker.io", "username": "u", "password": "p"}]}}"#,
    r#"{"apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ImagePullSecretManager",
        "metadata": {"name": "accounts", "namespace": "team-b"},
        "spec": {"mode": "ServiceAccount", "serviceAccountNames": ["default", "builder"],
                 "secrets": [{"existingSecretRef": {"name": "b-pull"}}]}}"#,
    r#"{"apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
        "metadata": {"name": "company-registry"},
        "spec": {"mode": "ServiceAccount", "namespaceSelector": {"matchLabels": {"tier": "apps"}},
                 "excludeNamespaces": ["scratch"],
                 "secrets": [{"existingSecretRef": {"name": "mirror-pull", "namespace": "cheiron"}}]}}"#,
    r#"{"apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
        "metadata": {"name": "private-pods"},
        "spec": {"mode": "Pod", "namespaces": ["team-*"],
                 "podSelector": {"matchLabels": {"pull": "private"}},
                 "mergeInto": "cluster-pull-secret",
                 "secrets": [{"existingSecretRef": {"name": "mirror-pull", "namespace": "cheiron"}}]}}"#,
    r#"{"apiVersion": "cheiron.anny.co/v1alpha1", "kind": "ClusterImagePullSecretManager",
        "metadata": {"name": "matching-images"},
        "spec": {"mode": "Pod", "injection": "MatchingImages", "namespaces": ["team-*"],
                 "secrets": [{"name": "hub-only", "registry": "docker.io", "username": "u", "password": "p"},
                             {"name": "wild", "registry": "*.example.com:5000", "username": "u", "password": "p"},
                             {"existingSecretRef": {"name": "reported", "namespace": "cheiron"}},
                             {"existingSecretRef": {"name": "unreported", "namespace": "cheiron"}}]},
        "status": {"pullSecrets": [{"name": "reported", "registries": ["ghcr.io/org"]}]}}"#,
];

/// The fixed view the `review` check answers from, built once.
pub fn view() -> &'static StaticView {
    static VIEW: OnceLock<StaticView> = OnceLock::new();
    VIEW.get_or_init(|| {
        let managers = VIEW_MANAGERS
            .iter()
            .filter_map(|text| {
                let value: Value = serde_json::from_str(text).ok()?;
                match value["kind"].as_str()? {
                    "ImagePullSecretManager" => {
                        Manager::from_namespaced(&serde_json::from_value(value).ok()?).ok()
                    }
                    _ => Manager::from_cluster(&serde_json::from_value(value).ok()?).ok(),
                }
            })
            .collect::<Vec<_>>();
        assert_eq!(
            managers.len(),
            VIEW_MANAGERS.len(),
            "a view manager does not compile"
        );
        let namespace = |name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]| {
            let map = |pairs: &[(&str, &str)]| {
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>()
            };
            NamespaceMeta {
                name: name.to_owned(),
                labels: map(labels).into(),
                annotations: map(annotations).into(),
            }
        };
        StaticView::new(
            managers,
            [
                namespace("team-a", &[("tier", "apps")], &[]),
                namespace("team-b", &[("tier", "apps")], &[]),
                namespace("scratch", &[("tier", "apps")], &[]),
                namespace("team-quiet", &[], &[(annotation::IGNORE, "true")]),
            ],
        )
        .with_secrets([("team-a".to_owned(), "a-pull".to_owned())])
    })
}

/// The patch inside an answer, if any.
fn patch_of(admission: &admission::Admission) -> Option<json_patch::Patch> {
    let bytes = admission.review.response.as_ref()?.patch.as_deref()?;
    let patch = serde_json::from_slice(bytes);
    assert!(
        patch.is_ok(),
        "the response patch is not a JSON patch: {patch:?}"
    );
    patch.ok()
}

/// `review`: any body parses or fails cleanly; a parsed review is answered from [`view`]
/// without panicking, always allowed; a returned patch applies to the request's object; and
/// the same review with the patched object is not patched again.
pub fn review(data: &[u8]) {
    let view: &dyn View = view();
    let Ok(review) = admission::parse(data) else {
        return;
    };
    let answer = review.answer(view);
    let response = answer.review.response.as_ref();
    assert!(
        response.is_some_and(|r| r.allowed),
        "a review was not allowed: {answer:?}"
    );
    let Some(patch) = patch_of(&answer) else {
        assert_ne!(answer.outcome, Outcome::Patched, "patched without a patch");
        return;
    };
    assert_eq!(answer.outcome, Outcome::Patched);
    // parse accepted the body, so it is JSON with a request.
    let Ok(mut body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut object = body["request"]["object"].clone();
    let applied = json_patch::patch(&mut object, &patch);
    assert!(
        applied.is_ok(),
        "the patch does not apply: {applied:?} {patch:?}"
    );
    body["request"]["object"] = object;
    let again = serde_json::to_vec(&body)
        .ok()
        .and_then(|body| admission::parse(&body).ok());
    assert!(again.is_some(), "the patched review no longer parses");
    if let Some(again) = again {
        let answer = again.answer(view);
        assert!(
            patch_of(&answer).is_none(),
            "a patched object is patched again: {:?}",
            answer.outcome
        );
    }
}

/// The kind, wanted names and object of a `patch` input: a first line `P name,name,...` (`S`
/// for a ServiceAccount), then the object as JSON.
fn patch_input(data: &[u8]) -> Option<(SubjectKind, Vec<String>, Value)> {
    let newline = data.iter().position(|b| *b == b'\n')?;
    let (header, object) = (
        std::str::from_utf8(&data[..newline]).ok()?,
        &data[newline + 1..],
    );
    let kind = if header.starts_with('S') {
        SubjectKind::ServiceAccount
    } else {
        SubjectKind::Pod
    };
    let wanted = header
        .get(1..)
        .unwrap_or("")
        .trim_start()
        .split(',')
        .map(str::to_owned)
        .collect();
    Some((kind, wanted, serde_json::from_slice(object).ok()?))
}

/// `patch`: on any object and any wanted names, the builder's patch applies, keeps every
/// existing entry in place and every annotation, references every wanted name after, records
/// what it added, and on its own output builds no patch.
pub fn patch(data: &[u8]) {
    let Some((kind, wanted, object)) = patch_input(data) else {
        return;
    };
    let Ok(before) = interpret(&object, kind) else {
        return;
    };
    let Some(built) = build_patch(&before, &wanted) else {
        for name in &wanted {
            assert!(
                before.existing.contains(name),
                "no patch, yet {name:?} is missing"
            );
        }
        return;
    };
    let mut patched = object.clone();
    let applied = json_patch::patch(&mut patched, &built.patch);
    assert!(
        applied.is_ok(),
        "the patch does not apply: {applied:?} {:?}",
        built.patch
    );
    let after = interpret(&patched, kind);
    assert!(
        after.is_ok(),
        "the patched object cannot be read: {after:?}"
    );
    let Ok(after) = after else { return };
    assert_eq!(
        after.existing.get(..before.existing.len()),
        Some(&before.existing[..]),
        "an existing entry moved or vanished"
    );
    for name in &wanted {
        assert!(after.existing.contains(name), "{name:?} is not referenced");
    }
    for (key, value) in &before.annotations {
        if key != annotation::RECONCILE_WITH {
            assert_eq!(
                after.annotations.get(key),
                Some(value),
                "annotation {key:?} changed"
            );
        }
    }
    assert_eq!(
        after
            .annotations
            .get(annotation::RECONCILED)
            .map(String::as_str),
        Some("true")
    );
    let listed = after.annotations.get(annotation::RECONCILE_WITH);
    for name in built
        .added
        .iter()
        .filter(|n| !n.trim().is_empty() && !n.contains(','))
    {
        assert!(
            listed.is_some_and(|l| l.split(',').any(|l| l.trim() == name.trim())),
            "{name:?} is not in reconcile-with {listed:?}"
        );
    }
    let again = build_patch(&after, &wanted);
    assert!(
        again.is_none(),
        "a patched object is patched again: {again:?}"
    );
}

/// String values (not keys) of at least `min` bytes anywhere in `value`.
fn long_strings<'v>(value: &'v Value, min: usize, out: &mut Vec<&'v str>) {
    match value {
        Value::String(s) if s.len() >= min => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| long_strings(v, min, out)),
        Value::Object(map) => map.values().for_each(|v| long_strings(v, min, out)),
        _ => {}
    }
}

/// `dockerconfig`: the bytes as the data of a `kubernetes.io/dockerconfigjson` and of a
/// `kubernetes.io/dockercfg` Secret. A config read round-trips through `to_bytes`; an error
/// never quotes a credential. Registry names may appear in messages (they are not secret), so
/// a value that is also a key is not held against it.
pub fn dockerconfig(data: &[u8]) {
    for (secret_type, key) in [
        (DOCKER_CONFIG_JSON, ".dockerconfigjson"),
        (DOCKER_CFG, ".dockercfg"),
    ] {
        let secrets = BTreeMap::from([(key.to_owned(), ByteString(data.to_vec()))]);
        match DockerConfig::from_secret(Some(secret_type), &secrets) {
            Ok(config) => {
                let bytes = config.to_bytes();
                let encoded =
                    BTreeMap::from([(".dockerconfigjson".to_owned(), ByteString(bytes.clone()))]);
                let again = DockerConfig::from_secret(Some(DOCKER_CONFIG_JSON), &encoded);
                assert!(again.is_ok(), "to_bytes is not read back: {again:?}");
                let again = again.map(|c| c.to_bytes()).unwrap_or_default();
                // Equal up to float rounding: serde_json (without `float_roundtrip`) may read
                // a printed float back one ULP off, e.g. 1e30 as 9.999999999999999e29.
                let same = serde_json::from_slice::<Value>(&bytes)
                    .and_then(|a| Ok((a, serde_json::from_slice::<Value>(&again)?)))
                    .is_ok_and(|(a, b)| nearly_equal(&a, &b));
                assert!(
                    same,
                    "to_bytes does not round-trip: {bytes:?} then {again:?}"
                );
                let registries: Vec<_> = config.registries().collect();
                assert!(
                    registries.windows(2).all(|w| w[0] < w[1]),
                    "registries not in key order"
                );
                let (merged, shadowed) = DockerConfig::merge([&config, &config]);
                assert_eq!(merged, config, "merging a config with itself changes it");
                assert_eq!(shadowed.len(), registries.len());
            }
            Err(e) => {
                let message = e.to_string();
                let Ok(value) = serde_json::from_slice::<Value>(data) else {
                    assert!(
                        message.starts_with(&format!("{key} is not JSON (line ")),
                        "a syntax error says more than where: {message}"
                    );
                    continue;
                };
                let mut keys = Vec::new();
                collect_keys(&value, &mut keys);
                let mut values = Vec::new();
                long_strings(&value, 8, &mut values);
                for v in values {
                    let is_key = keys.iter().any(|k| k.contains(v));
                    assert!(
                        is_key || !message.contains(v),
                        "the error quotes a value: {message}"
                    );
                }
            }
        }
    }
}

/// JSON equality with floats compared to a relative 1e-12.
fn nearly_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x != y => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| nearly_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| nearly_equal(v, w)))
        }
        _ => a == b,
    }
}

fn collect_keys<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| collect_keys(v, out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            out.push(k);
            collect_keys(v, out);
        }),
        _ => {}
    }
}

/// A shell glob on characters (`*` any run, `?` one character), the reference `glob` checks
/// the compiled matcher against.
fn reference_match(glob: &[char], text: &[char]) -> bool {
    // matched[j]: glob[..i] matches text[..j].
    let mut matched = vec![false; text.len() + 1];
    matched[0] = true;
    for g in glob {
        let mut next = vec![false; text.len() + 1];
        for j in 0..=text.len() {
            next[j] = match g {
                '*' => matched[j] || (j > 0 && next[j - 1]),
                '?' => j > 0 && matched[j - 1],
                c => j > 0 && matched[j - 1] && text[j - 1] == *c,
            };
        }
        matched = next;
    }
    matched[text.len()]
}

/// `glob`: the first line is compiled as a namespace glob, the other lines are matched. A
/// glob compiles exactly when it is in the grammar, and matches exactly what a reference
/// shell-glob matcher matches.
pub fn glob(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let source = lines.next().unwrap_or("");
    let in_grammar = !source.is_empty()
        && source.len() <= 63
        && source
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-*?".contains(&b))
        && !source.starts_with('-')
        && !source.ends_with('-');
    let glob = NamespaceGlob::parse(source);
    assert_eq!(glob.is_ok(), in_grammar, "{source:?}: {glob:?}");
    let Ok(glob) = glob else { return };
    assert_eq!(glob.as_str(), source);
    assert_eq!(glob.is_literal(), !source.contains(['*', '?']));
    let pattern: Vec<char> = source.chars().collect();
    // The glob with every `*` empty and every `?` an `a` is a name it matches.
    let example: String = source.replace('*', "").replace('?', "a");
    for namespace in lines.chain([source, example.as_str()]) {
        let expected = reference_match(&pattern, &namespace.chars().collect::<Vec<_>>());
        assert_eq!(
            glob.matches(namespace),
            expected,
            "{source:?} against {namespace:?}"
        );
    }
    assert!(
        glob.matches(&example),
        "{source:?} does not match {example:?}"
    );
}

/// `manager`: the bytes as a JSON or YAML manager of either kind, read as the file loader reads
/// YAML, validated and compiled. Nothing panics; a compiled manager answers questions.
pub fn manager(data: &[u8]) {
    let mut namespaced: Vec<ImagePullSecretManager> = Vec::new();
    let mut cluster: Vec<ClusterImagePullSecretManager> = Vec::new();
    namespaced.extend(serde_json::from_slice(data).ok());
    cluster.extend(serde_json::from_slice(data).ok());
    if let Ok(text) = std::str::from_utf8(data) {
        for document in yaml::documents(text).into_iter().take(8) {
            let Ok(value) = document.content else {
                break;
            };
            namespaced.extend(serde_json::from_value(value.clone()).ok());
            cluster.extend(serde_json::from_value(value).ok());
        }
    }
    let mut compiled = Vec::new();
    for mut m in namespaced {
        let _ = validate_namespaced(&m.spec).map_err(|e| e.to_string());
        m.metadata
            .namespace
            .get_or_insert_with(|| "default".to_owned());
        compiled.extend(Manager::from_namespaced(&m).map_err(|e| e.to_string()).ok());
    }
    for m in cluster {
        let _ = validate_cluster(&m.spec).map_err(|e| e.to_string());
        compiled.extend(Manager::from_cluster(&m).map_err(|e| e.to_string()).ok());
    }
    if compiled.is_empty() {
        return;
    }
    let view = StaticView::new(compiled, view().namespace("team-a"));
    let managers: Arc<[Manager]> = view.managers();
    for m in managers.iter() {
        let _ = m.secret_names();
        let _ = m.seniority();
    }
    let pod =
        serde_json::json!({"metadata": {"name": "p", "labels": {"pull": "private"}}, "spec": {}});
    for kind in [SubjectKind::Pod, SubjectKind::ServiceAccount] {
        let mutation = admission::mutate(&pod, kind, "team-a", &view);
        assert!(
            mutation.is_ok(),
            "a plain object cannot be read: {mutation:?}"
        );
    }
}
