//! Each manager entry becomes one `kubernetes.io/dockerconfigjson` Secret in every target
//! namespace, whatever its source: inline credentials, a password read from a Secret, a copied
//! dockerconfigjson, a converted legacy dockercfg, or several merged into one.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use serde_json::json;

use crate::{
    dockerconfig::{dockerconfigjson_secret, holds, registry_entry, secret},
    harness::Result,
    scenario::{ControllerScenario, ManagerRef, describe_ready},
};

/// Asserts the labels and the single ownerReference cheiron puts on every copy.
async fn assert_owned_by(s: &ControllerScenario, copy: &Secret, manager: &ManagerRef) -> Result {
    let (object, _) = s.manager_status(manager).await?;
    let where_ = format!(
        "Secret {}/{}",
        copy.namespace().unwrap_or_default(),
        copy.name_any()
    );
    let mut expected = std::collections::BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "cheiron".to_owned(),
        ),
        (
            "cheiron.anny.co/manager-kind".to_owned(),
            manager.kind.clone(),
        ),
        (
            "cheiron.anny.co/manager-name".to_owned(),
            manager.name.clone(),
        ),
    ]);
    if let Some(ns) = &manager.namespace {
        expected.insert("cheiron.anny.co/manager-namespace".to_owned(), ns.clone());
    }
    assert_eq!(copy.labels(), &expected, "{where_}: labels");
    let owners = copy.owner_references();
    assert_eq!(owners.len(), 1, "{where_}: ownerReferences {owners:?}");
    let owner = &owners[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            Some(owner.uid.as_str()),
            owner.controller,
        ),
        (
            "cheiron.anny.co/v1alpha1",
            manager.kind.as_str(),
            manager.name.as_str(),
            object.uid().as_deref(),
            Some(true),
        ),
        "{where_}: ownerReference"
    );
    Ok(())
}

#[tokio::test]
async fn cluster_manager_with_inline_credentials_writes_the_exact_dockerconfigjson_into_each_target_namespace()
-> Result {
    let s = ControllerScenario::new("inline").await?;
    let targets = [
        s.create_target_namespace(&[], &[]).await?,
        s.create_target_namespace(&[], &[]).await?,
    ];
    let outside = s.create_namespace(&[], &[]).await?;
    let manager = s
        .apply(&s.cluster_manager(
            "inline",
            "  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: s3cr3t-inline
      email: alice@example.com
",
        ))
        .await?;

    let expected = json!({"https://index.docker.io/v1/":
        registry_entry("alice", "s3cr3t-inline", Some("alice@example.com"))});
    for ns in &targets {
        let copy = s.until_secret(ns, "docker-hub", |_| Ok(())).await?;
        holds(&copy, &expected).map_err(|e| format!("{ns}/docker-hub: {e}"))?;
        assert_owned_by(&s, &copy, &manager).await?;
    }
    let status = s.until_ready_reason(&manager, "InlineCredentials").await?;
    assert_eq!(status.namespaces.as_deref(), Some("2/2"), "{status:?}");
    assert_eq!(
        s.secret(&outside, "docker-hub")
            .await?
            .map(|c| c.labels().clone()),
        None,
        "a namespace the selector does not match gets nothing"
    );
    let copies = s.copies_of(&manager).await?;
    assert_eq!(copies.len(), 2, "one copy per target namespace");
    Ok(())
}

#[tokio::test]
async fn namespaced_manager_writes_only_into_its_own_namespace() -> Result {
    let s = ControllerScenario::new("own-ns").await?;
    let own = s.create_namespace(&[], &[]).await?;
    let neighbour = s.create_namespace(&[], &[]).await?;
    let manager = s
        .apply(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: team
  namespace: {own}
spec:
  secrets:
    - name: team-pull
      registry: registry.example.com
      username: team-bot
      password: team-password
"
        ))
        .await?;

    let copy = s.until_secret(&own, "team-pull", |_| Ok(())).await?;
    holds(
        &copy,
        &json!({"registry.example.com": registry_entry("team-bot", "team-password", None)}),
    )?;
    assert_owned_by(&s, &copy, &manager).await?;
    let status = s.until_ready_reason(&manager, "InlineCredentials").await?;
    assert_eq!(
        status.namespaces.as_deref(),
        Some("1/1"),
        "{}",
        describe_ready(&status)
    );
    assert_eq!(
        s.secret(&neighbour, "team-pull")
            .await?
            .map(|c| c.name_any()),
        None
    );
    let everywhere: Vec<String> = s
        .copies_of(&manager)
        .await?
        .iter()
        .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()))
        .collect();
    assert_eq!(everywhere, [format!("{own}/team-pull")]);
    Ok(())
}

#[tokio::test]
async fn password_secret_ref_is_read_from_its_key_without_the_trailing_newline() -> Result {
    let s = ControllerScenario::new("password-ref").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let target = s.create_target_namespace(&[], &[]).await?;
    s.create_secret(
        &sources,
        &secret("ghcr-token", "Opaque", &[("token", "t0ken-1\n")]),
    )
    .await?;
    let manager = s
        .apply(&s.cluster_manager(
            "password-ref",
            &format!(
                "  secrets:
    - name: ghcr
      registry: ghcr.io
      username: bob
      passwordSecretRef:
        name: ghcr-token
        key: token
        namespace: {sources}
"
            ),
        ))
        .await?;

    let copy = s.until_secret(&target, "ghcr", |_| Ok(())).await?;
    holds(
        &copy,
        &json!({"ghcr.io": registry_entry("bob", "t0ken-1", None)}),
    )?;
    assert_owned_by(&s, &copy, &manager).await?;
    let status = s.until_ready_reason(&manager, "Synced").await?;
    assert_eq!(status.namespaces.as_deref(), Some("1/1"));
    Ok(())
}

#[tokio::test]
async fn existing_dockerconfigjson_secret_is_copied_under_its_own_name() -> Result {
    let s = ControllerScenario::new("existing-ref").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let target = s.create_target_namespace(&[], &[]).await?;
    let auths = json!({
        "registry.gitlab.com": registry_entry("carol", "glpat-xyz", Some("carol@example.com")),
        "quay.io": {"auth": "cXVheTpyb2JvdA=="},
    });
    s.create_secret(
        &sources,
        &dockerconfigjson_secret("gitlab-registry", &auths),
    )
    .await?;
    let manager = s
        .apply(&s.cluster_manager(
            "existing-ref",
            &format!(
                "  secrets:
    - existingSecretRef:
        name: gitlab-registry
        namespace: {sources}
"
            ),
        ))
        .await?;

    let copy = s
        .until_secret(&target, "gitlab-registry", |_| Ok(()))
        .await?;
    holds(&copy, &auths)?;
    assert_owned_by(&s, &copy, &manager).await?;
    s.until_ready_reason(&manager, "Synced").await?;
    Ok(())
}

#[tokio::test]
async fn legacy_dockercfg_source_is_converted_to_dockerconfigjson() -> Result {
    let s = ControllerScenario::new("dockercfg").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let target = s.create_target_namespace(&[], &[]).await?;
    let auths = json!({"quay.io": registry_entry("legacy", "old-password", Some("l@example.com"))});
    s.create_secret(
        &sources,
        &secret(
            "legacy-pull",
            "kubernetes.io/dockercfg",
            &[(".dockercfg", &auths.to_string())],
        ),
    )
    .await?;
    let manager = s
        .apply(&s.cluster_manager(
            "dockercfg",
            &format!(
                "  secrets:
    - existingSecretRef:
        name: legacy-pull
        namespace: {sources}
"
            ),
        ))
        .await?;

    let copy = s.until_secret(&target, "legacy-pull", |_| Ok(())).await?;
    holds(&copy, &auths).map_err(|e| format!("converted copy: {e}"))?;
    assert_owned_by(&s, &copy, &manager).await?;
    s.until_ready_reason(&manager, "Synced").await?;
    Ok(())
}

#[tokio::test]
async fn merge_into_writes_one_secret_where_the_earlier_entry_wins_a_registry_and_status_says_so()
-> Result {
    let s = ControllerScenario::new("merge").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    let target = s.create_target_namespace(&[], &[]).await?;
    s.create_secret(
        &sources,
        &secret("hub-token", "Opaque", &[("token", "first-token")]),
    )
    .await?;
    let mirror = json!({
        "docker.io": registry_entry("second", "second-password", None),
        "quay.io": registry_entry("quay-bot", "quay-password", None),
    });
    s.create_secret(&sources, &dockerconfigjson_secret("mirror", &mirror))
        .await?;
    let manager = s
        .apply(&s.cluster_manager(
            "merge",
            &format!(
                "  mergeInto: merged-pull
  secrets:
    - name: hub
      registry: docker.io
      username: first
      passwordSecretRef:
        name: hub-token
        key: token
        namespace: {sources}
    - existingSecretRef:
        name: mirror
        namespace: {sources}
"
            ),
        ))
        .await?;

    let copy = s.until_secret(&target, "merged-pull", |_| Ok(())).await?;
    // The inline docker.io is written as https://index.docker.io/v1/, and the source's
    // docker.io is the same registry for the kubelet: the first entry wins.
    holds(
        &copy,
        &json!({
            "https://index.docker.io/v1/": registry_entry("first", "first-token", None),
            "quay.io": registry_entry("quay-bot", "quay-password", None),
        }),
    )
    .map_err(|e| format!("merged copy (Docker Hub must come from the first entry): {e}"))?;
    assert_owned_by(&s, &copy, &manager).await?;
    let status = s.until_ready_reason(&manager, "Synced").await?;
    let message = describe_ready(&status);
    assert!(
        message.contains("earlier entry wins")
            && message.contains(
                "docker.io (spec.secrets[1]) lost to https://index.docker.io/v1/ (spec.secrets[0])"
            ),
        "the status names the shadowed registry and the one that won: {message}"
    );
    let names: Vec<String> = s
        .copies_of(&manager)
        .await?
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(names, ["merged-pull"], "only the merged Secret is written");
    Ok(())
}
