use cheiron_runtime::api::{ClusterImagePullSecretManager, ImagePullSecretManager};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

use super::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// No Secret of cheiron's exists yet.
const NO_SECRETS: &[Arc<SecretMeta>] = &[];

fn cluster(name: &str, created: &str, extra: &str) -> Result<Manager, Box<dyn std::error::Error>> {
    let m: ClusterImagePullSecretManager = serde_saphyr::from_str(&format!(
        "apiVersion: cheiron.anny.co/v1alpha1\nkind: ClusterImagePullSecretManager\nmetadata: {{name: {name}, creationTimestamp: \"{created}\"}}\nspec:\n  secrets: [{{existingSecretRef: {{name: pull, namespace: src}}}}]\n{extra}"
    ))?;
    Ok(Manager::from_cluster(&m)?)
}

/// The plan of `m` (owner `u1`) wanting `pull` to hold `v1` in namespace `one`, the only
/// claimant, over `existing`.
fn plan_v1<S: SecretMetadata>(m: &Manager, existing: &[Arc<S>]) -> Plan {
    plan(
        m,
        &owner("u1"),
        &[want("pull", Some(b"v1"))],
        &ns(&["one"]),
        std::slice::from_ref(m),
        existing,
    )
}

/// `managedFields` of a copy cheiron labelled and `kubectl edit` then changed the data of.
fn data_edited_by_kubectl() -> Vec<ManagedFieldsEntry> {
    managed_fields(&[
        (
            "cheiron",
            serde_json::json!({"f:metadata": {"f:labels": {}}}),
        ),
        (
            "kubectl-edit",
            serde_json::json!({"f:data": {"f:.dockerconfigjson": {}}}),
        ),
    ])
}

fn owner(uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "cheiron.anny.co/v1alpha1".into(),
        kind: "ClusterImagePullSecretManager".into(),
        name: "x".into(),
        uid: uid.into(),
        ..OwnerReference::default()
    }
}

fn want(name: &str, content: Option<&[u8]>) -> DesiredSecret {
    DesiredSecret {
        name: name.into(),
        content: content.map(<[u8]>::to_vec),
        source: None,
    }
}

/// What the Secret cache keeps of `secret`: its metadata.
fn as_meta(secret: Secret) -> Arc<SecretMeta> {
    Arc::new(SecretMeta {
        types: None,
        metadata: secret.metadata,
        _phantom: std::marker::PhantomData,
    })
}

fn ns(names: &[&str]) -> Vec<NamespaceMeta> {
    names.iter().map(|n| NamespaceMeta::named(*n)).collect()
}

/// The Secrets `creates` stand for, as written.
fn built(creates: &[Create]) -> Vec<Secret> {
    creates.iter().map(Create::secret).collect()
}

fn names(secrets: &[Secret]) -> Vec<String> {
    secrets
        .iter()
        .map(|s| {
            format!(
                "{}/{}",
                s.metadata.namespace.as_deref().unwrap_or(""),
                s.metadata.name.as_deref().unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn creates_share_one_secret_per_entry_and_build_what_the_plan_would_have_held() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let names: Vec<String> = (0..100).map(|i| format!("ns-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let p = plan(
        &m,
        &owner("u1"),
        &[want("pull", Some(b"{}"))],
        &ns(&refs),
        std::slice::from_ref(&m),
        NO_SECRETS,
    );
    assert_eq!(p.creates.len(), 100);
    // One Secret for all 100 namespaces, not 100 of them.
    assert!(
        p.creates
            .iter()
            .all(|c| Arc::ptr_eq(&c.template, &p.creates[0].template))
    );
    for c in &p.creates {
        assert_eq!(
            c.secret(),
            secret(&c.namespace, "pull", b"{}", &m.id, &owner("u1"))
        );
    }
    Ok(())
}

#[test]
fn creates_the_secret_in_every_target_namespace_with_labels_and_owner() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "  excludeNamespaces: [skip]\n")?;
    let mut namespaces = ns(&["one", "two", "skip", "kube-system"]);
    namespaces.push(NamespaceMeta {
        name: "opted".into(),
        labels: [("cheiron.anny.co/ignore", "true")].into(),
        ..NamespaceMeta::default()
    });
    let p = plan(
        &m,
        &owner("u1"),
        &[want("pull", Some(b"{}"))],
        &namespaces,
        std::slice::from_ref(&m),
        NO_SECRETS,
    );
    assert_eq!(p.targets, ["one", "two"]);
    assert_eq!(names(&built(&p.creates)), ["one/pull", "two/pull"]);
    let s = &p.creates[0].secret();
    assert_eq!(s.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    let labels = s.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("cheiron")
    );
    assert_eq!(
        labels
            .get("cheiron.anny.co/manager-name")
            .map(String::as_str),
        Some("a")
    );
    assert_eq!(
        s.metadata
            .owner_references
            .as_ref()
            .map(|o| o[0].uid.as_str()),
        Some("u1")
    );
    Ok(())
}

#[test]
fn up_to_date_copies_are_not_written_again() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let current = as_meta(secret("one", "pull", b"v1", &m.id, &owner("u1")));
    let p = plan_v1(&m, &[current]);
    assert!(p.creates.is_empty() && p.updates.is_empty() && p.deletes.is_empty());
    assert_eq!(p.unchanged, 1);
    Ok(())
}

#[test]
fn rotated_content_updates_the_copy_and_keeps_what_others_added() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let mut current = secret("one", "pull", b"v1", &m.id, &owner("u1"));
    current.metadata.resource_version = Some("42".into());
    current
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("team".into(), "x".into());
    let p = plan(
        &m,
        &owner("u1"),
        &[want("pull", Some(b"v2"))],
        &ns(&["one"]),
        std::slice::from_ref(&m),
        &[as_meta(current)],
    );
    assert_eq!(p.updates.len(), 1);
    let u = &p.updates[0];
    assert_eq!(
        u.metadata.resource_version.as_deref(),
        Some("42"),
        "precondition kept"
    );
    assert_eq!(
        u.data
            .as_ref()
            .and_then(|d| d.get(".dockerconfigjson"))
            .map(|b| b.0.as_slice()),
        Some(&b"v2"[..])
    );
    assert_eq!(
        u.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("team"))
            .map(String::as_str),
        Some("x")
    );
    Ok(())
}

#[test]
fn the_older_manager_wins_a_contested_name_and_takes_over_its_copy() -> TestResult {
    let older = cluster("older", "2026-01-01T00:00:00Z", "")?;
    let younger = cluster("younger", "2026-06-01T00:00:00Z", "")?;
    let claimants = [older.clone(), younger.clone()];
    let copy_of_younger = as_meta(secret("one", "pull", b"y", &younger.id, &owner("u2")));
    let p = plan(
        &younger,
        &owner("u2"),
        &[want("pull", Some(b"y"))],
        &ns(&["one"]),
        &claimants,
        std::slice::from_ref(&copy_of_younger),
    );
    assert!(p.creates.is_empty() && p.updates.is_empty() && p.deletes.is_empty());
    assert_eq!(p.lost.len(), 1);
    assert_eq!(p.lost[0].winner, older.id);
    let p = plan(
        &older,
        &owner("u1"),
        &[want("pull", Some(b"o"))],
        &ns(&["one"]),
        &claimants,
        &[copy_of_younger],
    );
    assert_eq!(names(&p.updates), ["one/pull"]);
    assert_eq!(
        p.updates[0]
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("cheiron.anny.co/manager-name"))
            .map(String::as_str),
        Some("older")
    );
    Ok(())
}

#[test]
fn creation_time_decides_not_the_name() -> TestResult {
    // "a" sorts before "b", but "b" is older: "b" wins.
    let b_first = cluster("b", "2026-01-01T00:00:00Z", "")?;
    let a_later = cluster("a", "2026-02-01T00:00:00Z", "")?;
    let mut claimants = [a_later.clone(), b_first.clone()];
    claimants.sort_by(|x, y| x.seniority().cmp(&y.seniority()));
    let p = plan(
        &a_later,
        &owner("ua"),
        &[want("pull", Some(b"a"))],
        &ns(&["one"]),
        &claimants,
        NO_SECRETS,
    );
    assert!(p.creates.is_empty());
    assert_eq!(p.lost.first().map(|l| l.winner.name.as_str()), Some("b"));
    let p = plan(
        &b_first,
        &owner("ub"),
        &[want("pull", Some(b"b"))],
        &ns(&["one"]),
        &claimants,
        NO_SECRETS,
    );
    assert_eq!(names(&built(&p.creates)), ["one/pull"]);
    Ok(())
}

#[test]
fn source_problems_hold_copies_as_they_are() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let current = as_meta(secret("one", "pull", b"v1", &m.id, &owner("u1")));
    let p = plan(
        &m,
        &owner("u1"),
        &[want("pull", None)],
        &ns(&["one", "two"]),
        std::slice::from_ref(&m),
        &[current],
    );
    assert!(p.creates.is_empty() && p.updates.is_empty() && p.deletes.is_empty());
    assert_eq!(p.held.len(), 2);
    Ok(())
}

#[test]
fn copies_in_namespaces_that_left_scope_and_of_removed_entries_are_deleted() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "  excludeNamespaces: [left]\n")?;
    let other = cluster("other", "2026-01-01T00:00:00Z", "")?;
    let existing = vec![
        as_meta(secret("left", "pull", b"v", &m.id, &owner("u1"))),
        as_meta(secret("stay", "old-entry", b"v", &m.id, &owner("u1"))),
        as_meta(secret("stay", "pull", b"v", &m.id, &owner("u1"))),
        as_meta(secret("left", "theirs", b"v", &other.id, &owner("u9"))),
    ];
    let p = plan(
        &m,
        &owner("u1"),
        &[want("pull", Some(b"v"))],
        &ns(&["left", "stay"]),
        std::slice::from_ref(&m),
        &existing,
    );
    let deleted: Vec<(String, String, bool)> = p
        .deletes
        .iter()
        .map(|d| (d.namespace.clone(), d.name.clone(), d.namespace_left))
        .collect();
    assert_eq!(
        deleted,
        [
            ("left".into(), "pull".into(), true),
            ("stay".into(), "old-entry".into(), false)
        ]
    );
    Ok(())
}

#[test]
fn namespaced_managers_target_only_their_own_namespace() -> TestResult {
    let m: ImagePullSecretManager = serde_saphyr::from_str(
        "apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\nmetadata: {name: n, namespace: team}\nspec:\n  secrets: [{existingSecretRef: {name: pull}}]\n",
    )?;
    let m = Manager::from_namespaced(&m)?;
    let p = plan(
        &m,
        &owner("u"),
        &[want("pull", Some(b"v"))],
        &ns(&["team", "other"]),
        std::slice::from_ref(&m),
        NO_SECRETS,
    );
    assert_eq!(names(&built(&p.creates)), ["team/pull"]);
    assert_eq!(
        p.creates[0]
            .template
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("cheiron.anny.co/manager-namespace"))
            .map(String::as_str),
        Some("team")
    );
    Ok(())
}

#[test]
fn secrets_with_the_managed_by_label_but_no_manager_labels_are_never_taken_over() -> TestResult {
    // What cheiron-certs writes: managed-by=cheiron, no manager labels.
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let mut tls = Secret::default();
    tls.metadata.name = Some("pull".into());
    tls.metadata.namespace = Some("one".into());
    tls.metadata.labels = Some(BTreeMap::from([(
        "app.kubernetes.io/managed-by".into(),
        "cheiron".into(),
    )]));
    let tls = as_meta(tls);
    assert!(!is_managed(&tls.metadata));
    let p = plan(
        &m,
        &owner("u1"),
        &[want("pull", Some(b"v"))],
        &ns(&["one"]),
        std::slice::from_ref(&m),
        &[tls],
    );
    assert!(p.updates.is_empty() && p.deletes.is_empty());
    // A create is planned; it fails on the existing name and is reported as a conflict.
    assert_eq!(names(&built(&p.creates)), ["one/pull"]);
    Ok(())
}

#[test]
fn a_look_alike_with_all_of_cheirons_labels_but_no_owner_reference_is_never_written_or_deleted()
-> TestResult {
    // A user's Secret carrying every label cheiron puts on its copies, naming the manager: in a
    // target namespace under the name the manager wants, and under another name.
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let look_alike = |ns: &str, name: &str| {
        let mut s = secret(ns, name, b"user", &m.id, &owner("u1"));
        s.metadata.owner_references = None;
        as_meta(s)
    };
    let existing = [look_alike("one", "pull"), look_alike("one", "other")];
    assert!(!is_managed(&existing[0].metadata));
    let p = plan(
        &m,
        &owner("u1"),
        &[want("pull", Some(b"v"))],
        &ns(&["one"]),
        std::slice::from_ref(&m),
        &existing,
    );
    assert!(
        p.updates.is_empty(),
        "never updated: {:?}",
        names(&p.updates)
    );
    assert!(p.deletes.is_empty(), "never deleted: {:?}", p.deletes);
    // The create fails on the existing name and is reported as a conflict.
    assert_eq!(names(&built(&p.creates)), ["one/pull"]);
    Ok(())
}

#[test]
fn a_secret_labelled_for_the_manager_but_owned_by_another_object_is_not_deleted() -> TestResult {
    // Same labels, an ownerReference to a manager object with another uid (a manager deleted
    // and created again under the same name): the garbage collector removes it, not cheiron.
    let m = cluster("a", "2026-01-01T00:00:00Z", "  excludeNamespaces: [left]\n")?;
    let existing = [as_meta(secret(
        "left",
        "pull",
        b"v",
        &m.id,
        &owner("old-uid"),
    ))];
    let p = plan(
        &m,
        &owner("u1"),
        &[want("pull", Some(b"v"))],
        &ns(&["left", "stay"]),
        std::slice::from_ref(&m),
        &existing,
    );
    assert!(p.deletes.is_empty(), "{:?}", p.deletes);
    assert!(belongs_to(&existing[0].metadata, &m.id, "old-uid"));
    assert!(!belongs_to(&existing[0].metadata, &m.id, "u1"));
    Ok(())
}

#[test]
fn a_source_serving_its_own_namespace_is_in_step_and_neither_written_nor_a_conflict() -> TestResult
{
    // The original Cheiron README's manager: existingSecretRef {name: gitlab-registry} in a
    // namespaced manager, so target = source in the manager's own namespace.
    let m: ImagePullSecretManager = serde_saphyr::from_str(
        "apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\n\
         metadata: {name: m, namespace: team, creationTimestamp: \"2026-01-01T00:00:00Z\"}\n\
         spec:\n  secrets: [{existingSecretRef: {name: gitlab-registry}}]\n",
    )?;
    let m = Manager::from_namespaced(&m)?;
    let own_source = DesiredSecret {
        name: "gitlab-registry".into(),
        content: Some(b"{}".to_vec()),
        source: Some(("team".into(), "gitlab-registry".into())),
    };
    let p = plan(
        &m,
        &owner("u1"),
        &[own_source],
        &ns(&["team", "other"]),
        std::slice::from_ref(&m),
        NO_SECRETS,
    );
    assert_eq!(p.targets, ["team"]);
    assert!(p.creates.is_empty(), "{:?}", names(&built(&p.creates)));
    assert!(p.updates.is_empty() && p.deletes.is_empty() && p.lost.is_empty());
    assert_eq!(p.unchanged, 1, "counted as in step");
    Ok(())
}

#[test]
fn a_copy_of_a_source_from_another_namespace_is_still_created() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let elsewhere = DesiredSecret {
        name: "pull".into(),
        content: Some(b"{}".to_vec()),
        source: Some(("src".into(), "pull".into())),
    };
    let p = plan(
        &m,
        &owner("u1"),
        &[elsewhere],
        &ns(&["src", "one"]),
        std::slice::from_ref(&m),
        NO_SECRETS,
    );
    assert_eq!(
        names(&built(&p.creates)),
        ["one/pull"],
        "not into the source's own namespace"
    );
    assert_eq!(p.unchanged, 1);
    Ok(())
}

fn managed_fields(entries: &[(&str, serde_json::Value)]) -> Vec<ManagedFieldsEntry> {
    entries
        .iter()
        .map(|(manager, fields)| ManagedFieldsEntry {
            manager: Some((*manager).to_owned()),
            operation: Some("Update".to_owned()),
            fields_type: Some("FieldsV1".to_owned()),
            fields_v1: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                fields.clone(),
            )),
            ..ManagedFieldsEntry::default()
        })
        .collect()
}

#[test]
fn the_cache_keeps_of_managed_fields_only_who_owns_the_data() {
    let mut meta = ObjectMeta {
        managed_fields: Some(managed_fields(&[
            (
                "cheiron",
                serde_json::json!({"f:data": {".": {}, "f:.dockerconfigjson": {}}, "f:type": {}}),
            ),
            (
                "kube-controller-manager",
                serde_json::json!({"f:metadata": {"f:ownerReferences": {}}}),
            ),
        ])),
        ..ObjectMeta::default()
    };
    keep_data_owners(&mut meta);
    let kept = meta.managed_fields.unwrap_or_default();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].manager.as_deref(), Some("cheiron"));
    assert_eq!(
        kept[0].fields_v1, None,
        "the field sets themselves are dropped"
    );
}

#[test]
fn a_copy_whose_data_someone_else_wrote_is_written_again() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let mut edited = secret("one", "pull", b"v1", &m.id, &owner("u1"));
    // The content-hash annotation still says v1, but `kubectl edit` changed the data.
    edited.metadata.managed_fields = Some(data_edited_by_kubectl());
    keep_data_owners(&mut edited.metadata);
    let p = plan_v1(&m, &[as_meta(edited)]);
    assert_eq!(names(&p.updates), ["one/pull"], "drift is repaired");
    assert_eq!(p.unchanged, 0);
    Ok(())
}

#[test]
fn the_content_hash_is_the_hex_sha256_of_the_content() {
    assert_eq!(
        content_hash(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn only_managers_naming_one_of_the_secrets_are_rivals() -> TestResult {
    let a = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let b = cluster("b", "2026-01-02T00:00:00Z", "")?;
    let c = cluster("c", "2026-01-03T00:00:00Z", "  mergeInto: merged\n")?;
    let all = [a.clone(), b.clone(), c.clone()];
    assert_eq!(rivals(&a.id, ["pull"], &all), std::slice::from_ref(&b.id));
    // A name `a` no longer uses (one of the Secrets it lets go) reaches who names it now.
    assert_eq!(
        rivals(&a.id, ["pull", "merged"], &all),
        [b.id, c.id.clone()]
    );
    assert!(
        rivals(&c.id, ["merged"], &all).is_empty(),
        "no one else names it"
    );
    Ok(())
}

#[test]
fn the_quick_ownership_checks_agree_with_the_labelled_owner() {
    let namespaced = ManagerId {
        kind: ManagerKind::Namespaced,
        namespace: Some("team".to_owned()),
        name: "a".to_owned(),
    };
    let cluster = ManagerId {
        kind: ManagerKind::Cluster,
        namespace: None,
        name: "a".to_owned(),
    };
    let mut metas: Vec<ObjectMeta> = [&namespaced, &cluster]
        .iter()
        .map(|id| secret("team", "pull", b"v", id, &owner("u1")).metadata)
        .collect();
    let mut odd = metas[0].clone();
    odd.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(label::MANAGER_KIND.to_owned(), "Other".to_owned());
    let mut nameless = metas[1].clone();
    nameless
        .labels
        .get_or_insert_with(BTreeMap::new)
        .remove(label::MANAGER_NAME);
    let mut stray_namespace = metas[1].clone();
    stray_namespace
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(label::MANAGER_NAMESPACE.to_owned(), "team".to_owned());
    metas.extend([odd, nameless, stray_namespace, ObjectMeta::default()]);
    for meta in &metas {
        let owner = labelled_owner(meta);
        assert_eq!(meta.names_a_manager(), owner.is_some(), "{meta:?}");
        for id in [&namespaced, &cluster] {
            assert_eq!(
                meta.labelled_for(id),
                owner.as_ref() == Some(id),
                "{meta:?}"
            );
        }
    }
}

/// The controller's record of `secret` at `resource_version`, as its cache holds it after the
/// watch brought it, and after `checked` if cheiron wrote or read that version.
fn as_record(
    mut secret: Secret,
    resource_version: &str,
    checked: bool,
) -> Result<Arc<crate::secrets::SecretRecord>, Box<dyn std::error::Error>> {
    use kube::runtime::watcher;

    use crate::secrets::SecretCache;
    secret.metadata.resource_version = Some(resource_version.to_owned());
    let (namespace, name) = (
        secret.metadata.namespace.clone().unwrap_or_default(),
        secret.metadata.name.clone().unwrap_or_default(),
    );
    let cache = SecretCache::default();
    cache.apply(&watcher::Event::Apply(SecretMeta::clone(&as_meta(secret))));
    if checked {
        cache.checked(&namespace, &name, resource_version);
    }
    Ok(cache.all().pop().ok_or("not kept")?)
}

#[test]
fn a_copy_cheiron_has_not_read_at_its_version_is_read_before_anything_is_written() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let copy = || secret("one", "pull", b"v1", &m.id, &owner("u1"));
    let planned = |record| plan_v1(&m, &[record]);
    // Changed by someone (or never seen by this controller): labels, owner and hash as wanted,
    // and `managedFields` naming only cheiron, yet the data may be anything.
    let p = planned(as_record(copy(), "8", false)?);
    assert_eq!(
        p.checks,
        [Check {
            namespace: "one".into(),
            name: "pull".into(),
            desired: 0
        }]
    );
    assert!(p.updates.is_empty() && p.creates.is_empty());
    assert_eq!(p.unchanged, 0);
    // At the version cheiron wrote or read: in step, nothing read, nothing written.
    let p = planned(as_record(copy(), "8", true)?);
    assert!(p.checks.is_empty() && p.updates.is_empty());
    assert_eq!(p.unchanged, 1);
    Ok(())
}

#[test]
fn a_record_of_a_copy_another_field_manager_wrote_is_written_again_without_a_read() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let mut edited = secret("one", "pull", b"v1", &m.id, &owner("u1"));
    edited.metadata.managed_fields = Some(data_edited_by_kubectl());
    let record = as_record(edited.clone(), "9", false)?;
    assert!(
        record.data_written_by_others(),
        "the record says what managedFields say"
    );
    let p = plan_v1(&m, &[record]);
    assert_eq!(names(&p.updates), ["one/pull"], "drift is repaired");
    assert_eq!((p.repairs, p.unchanged, p.checks.len()), (1, 0, 0));
    // Once cheiron has written it (a field manager applying the same value may co-own the
    // data for good), the version it wrote is in step: no write at every resync.
    let p = plan_v1(&m, &[as_record(edited, "10", true)?]);
    assert!(p.updates.is_empty() && p.checks.is_empty());
    assert_eq!(p.unchanged, 1);
    Ok(())
}

#[test]
fn a_copy_holds_the_content_only_with_exactly_that_one_key() -> TestResult {
    let m = cluster("a", "2026-01-01T00:00:00Z", "")?;
    let copy = secret("one", "pull", b"v1", &m.id, &owner("u1"));
    assert!(holds_exactly(&copy, b"v1"));
    assert!(!holds_exactly(&copy, b"v2"));
    let mut extra = copy.clone();
    extra
        .data
        .get_or_insert_with(BTreeMap::new)
        .insert("extra".into(), ByteString(b"x".to_vec()));
    assert!(!holds_exactly(&extra, b"v1"), "a key someone added");
    let mut opaque = copy;
    opaque.type_ = Some("Opaque".into());
    assert!(!holds_exactly(&opaque, b"v1"));
    Ok(())
}
