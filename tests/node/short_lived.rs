//! Short-lived credentials through a credential-provider plugin of the controller
//! (docs/credential-providers.md): the node cluster's controller runs the fake plugin
//! `short-lived`, which issues `user-N`/`pass-N` on its Nth call, each for six seconds. The
//! registry stops taking a credential once the next one is in place, as a registry of
//! short-lived tokens does; cheiron's copy follows each rotation before the old one is revoked,
//! and plain Pods keep pulling.

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::{
    harness::{
        Result, SETTLE,
        node::{SHORT_LIVED, SHORT_LIVED_SECONDS},
        wait_for,
    },
    support::{NodeTest, TARGET_LABEL},
};

/// The copy the manager writes.
const COPY: &str = "short-lived-pull";
/// Rotations watched.
const ROTATIONS: u64 = 2;

/// The `N` of the `user-N` the copy in `ns` holds for the registry, once it is above `above`.
async fn until_copy_above(t: &NodeTest, ns: &str, above: u64) -> Result<u64> {
    let api = Api::<Secret>::namespaced(t.client().clone(), ns);
    let registry = t.node.registry.host.clone();
    let within = SETTLE + std::time::Duration::from_secs(2 * SHORT_LIVED_SECONDS);
    wait_for(
        format_args!("{ns}/{COPY} to hold a credential after user-{above}"),
        within,
        || async {
            let secret = api.get_opt(COPY).await?.ok_or("no copy yet")?;
            let data = secret
                .data
                .and_then(|mut d| d.remove(".dockerconfigjson"))
                .ok_or("no .dockerconfigjson")?;
            let config: serde_json::Value = serde_json::from_slice(&data.0)?;
            let auth = config["auths"][&registry]["auth"]
                .as_str()
                .ok_or("no auth for the registry")?;
            let decoded = base64::engine::general_purpose::STANDARD.decode(auth)?;
            let user = String::from_utf8(decoded)?
                .split(':')
                .next()
                .unwrap_or_default()
                .to_owned();
            let n: u64 = user
                .strip_prefix("user-")
                .and_then(|n| n.parse().ok())
                .ok_or("not a user-N")?;
            if n > above {
                Ok(n)
            } else {
                Err(format!("still user-{n}").into())
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn short_lived_provider_credentials_keep_plain_pods_pulling_across_rotations() -> Result {
    let t = NodeTest::new("short-lived").await?;
    let registry = &t.node.registry;
    // The registry knows the credentials the plugin will issue next.
    let first = t.node.short_lived.calls() + 1;
    for n in first..first + ROTATIONS + 4 {
        registry.set_password(&format!("user-{n}"), &format!("pass-{n}"))?;
    }
    t.scenario
        .apply_cluster_manager(
            &t.scenario.unique_name("short-lived"),
            &format!(
                "  mode: ServiceAccount
  namespaceSelector:
    matchLabels:
      {TARGET_LABEL}: {id}
  secrets:
    - name: {COPY}
      credentialProvider:
        image: {image}
",
                id = t.scenario.id(),
                image = t.node.image,
            ),
        )
        .await?;
    let ns = t.target_namespace().await?;
    let mut current = until_copy_above(&t, &ns, first - 1).await?;
    t.until_default_service_account_has(&ns, COPY).await?;
    t.expect_running(&ns, "first", &[]).await?;

    for round in 1..=ROTATIONS {
        let next = until_copy_above(&t, &ns, current).await?;
        // The old credential expires: the registry refuses it.
        let old_user = format!("user-{current}");
        registry.remove_user(&old_user)?;
        let old = format!("old-{round}");
        t.docker_secret(&ns, &old, &old_user, &format!("pass-{current}"))
            .await?;
        t.expect_unauthorized(&ns, &format!("expired-{round}"), &[&old])
            .await?;
        // cheiron's copy already holds the new one.
        t.expect_running(&ns, &format!("rotated-{round}"), &[])
            .await?;
        current = next;
    }
    assert!(
        t.node.short_lived.calls() >= first + ROTATIONS,
        "{SHORT_LIVED} was called {} times",
        t.node.short_lived.calls()
    );
    Ok(())
}
