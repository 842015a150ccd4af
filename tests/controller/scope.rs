//! Namespaces entering and leaving a manager's scope: a new one gets its Secrets within a
//! second, one that leaves loses exactly what cheiron put there.

use std::time::{Duration, Instant};

use cheiron::api::annotation::{RECONCILE_WITH, RECONCILED};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, ResourceExt, api::PostParams, core::ObjectMeta};

use crate::{
    dockerconfig::secret,
    harness::{Admitted, Result, SCENARIO_LABEL, service_account},
    scenario::{ControllerScenario, TARGET_LABEL, has_pull_secrets},
};

/// New namespaces measured.
const NEW_NAMESPACES: usize = 5;
/// Slower than this fails the test (the target is under a second).
const NEW_NAMESPACE_LIMIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn new_namespace_in_scope_gets_its_secret_within_a_second() -> Result {
    let s = ControllerScenario::new("new-ns").await?;
    let first = s.create_target_namespace(&[], &[]).await?;
    let manager = s
        .apply(&s.cluster_manager(
            "new-ns",
            "  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: alice-password
",
        ))
        .await?;
    s.until_secret(&first, "docker-hub", |_| Ok(())).await?;
    s.until_ready_reason(&manager, "InlineCredentials").await?;

    let namespaces: Api<Namespace> = Api::all(s.client().clone());
    let mut timings = Vec::new();
    for i in 0..NEW_NAMESPACES {
        let name = s.unique_name(&format!("fresh-{i}"));
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(
                    [
                        (SCENARIO_LABEL.to_owned(), s.id().to_owned()),
                        (TARGET_LABEL.to_owned(), s.id().to_owned()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let created = Instant::now();
        namespaces
            .create(&PostParams::default(), &namespace)
            .await?;
        loop {
            if s.secret(&name, "docker-hub").await?.is_some() {
                timings.push(created.elapsed());
                break;
            }
            if created.elapsed() > NEW_NAMESPACE_LIMIT {
                return Err(format!(
                    "namespace {name}: no docker-hub Secret {NEW_NAMESPACE_LIMIT:?} after it was created\n{}",
                    s.controller()?.log_excerpt(30)
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let slowest = timings.iter().max().copied().unwrap_or_default();
    println!("new namespace -> Secret present: {timings:?} (slowest {slowest:?}; target < 1 s)");
    s.until_status(
        &manager,
        format!("{}/{} namespaces", NEW_NAMESPACES + 1, NEW_NAMESPACES + 1),
        |st| st.namespaces == Some(format!("{}/{}", NEW_NAMESPACES + 1, NEW_NAMESPACES + 1)),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn namespace_relabelled_out_of_scope_loses_exactly_cheirons_secrets_and_entries() -> Result {
    let s = ControllerScenario::new("leaves").await?;
    let ns = s.create_target_namespace(&[], &[]).await?;
    let unrelated = s
        .create_secret(&ns, &secret("their-secret", "Opaque", &[("key", "value")]))
        .await?;
    s.create_service_account(&ns, &service_account("builder", &["own-first"], &[]))
        .await?;
    s.default_service_account(&ns).await?;
    let manager = s
        .apply(&s.cluster_manager(
            "leaves",
            "  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: alice-password
",
        ))
        .await?;
    s.until_secret(&ns, "docker-hub", |_| Ok(())).await?;
    for (sa, expected) in [
        ("default", &["docker-hub"][..]),
        ("builder", &["own-first", "docker-hub"]),
    ] {
        s.until_service_account(&ns, sa, has_pull_secrets(expected))
            .await?;
        s.append_pull_secret(&ns, sa, "theirs").await?;
    }

    s.label_namespace(&ns, &[(TARGET_LABEL, None)]).await?;

    s.until_no_secret(&ns, "docker-hub").await?;
    for (sa, expected) in [
        ("default", &["theirs"][..]),
        ("builder", &["own-first", "theirs"]),
    ] {
        let stored = s
            .until_service_account(&ns, sa, has_pull_secrets(expected))
            .await?;
        assert_eq!(
            stored.annotation(RECONCILE_WITH),
            None,
            "{sa}: bookkeeping removed"
        );
        assert_eq!(
            stored.annotation(RECONCILED),
            None,
            "{sa}: bookkeeping removed"
        );
        s.until_event(
            &ns,
            stored.uid().as_deref(),
            "PullSecretsRemoved",
            format!("ServiceAccount {sa}"),
        )
        .await?;
    }
    let still = s
        .secret(&ns, "their-secret")
        .await?
        .ok_or("an unrelated Secret was deleted")?;
    assert_eq!(still.resource_version(), unrelated.resource_version());
    s.until_status(&manager, "0/0 namespaces", |st| {
        st.namespaces.as_deref() == Some("0/0")
    })
    .await?;
    assert!(s.copies_of(&manager).await?.is_empty());
    Ok(())
}
