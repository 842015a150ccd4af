//! `status.pullSecrets`: the controller reports the registries each Secret holds, as the
//! kubelet reads them, so that the webhook can serve `injection: MatchingImages` without
//! reading Secret data; a rotation that changes a source's registries changes the report.

use cheiron::api::PullSecretRegistries;
use serde_json::json;

use crate::{
    dockerconfig::{dockerconfigjson_secret, registry_entry},
    harness::Result,
    scenario::ControllerScenario,
};

fn listed(status: &[PullSecretRegistries]) -> Vec<(String, Vec<String>)> {
    status
        .iter()
        .map(|p| (p.name.clone(), p.registries.clone()))
        .collect()
}

fn expected(pairs: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    pairs
        .iter()
        .map(|(name, registries)| {
            (
                (*name).to_owned(),
                registries.iter().map(|r| (*r).to_owned()).collect(),
            )
        })
        .collect()
}

#[tokio::test]
async fn status_lists_the_registries_of_each_secret_and_follows_a_rotation() -> Result {
    let s = ControllerScenario::new("pull-secret-registries").await?;
    let sources = s.create_namespace(&[], &[]).await?;
    s.create_target_namespace(&[], &[]).await?;
    s.create_secret(
        &sources,
        &dockerconfigjson_secret(
            "mirror",
            &json!({
                "quay.io": registry_entry("robot", "s3cr3t-token", None),
                "https://registry.example.com:5000/v2/": registry_entry("ci", "pw", None),
            }),
        ),
    )
    .await?;
    let manager = s
        .apply(&s.cluster_manager(
            "matching",
            &format!(
                "  mode: Pod
  injection: MatchingImages
  secrets:
    - name: ghcr
      registry: ghcr.io
      username: bob
      password: example-password
    - existingSecretRef:
        name: mirror
        namespace: {sources}
"
            ),
        ))
        .await?;

    let want = expected(&[
        ("ghcr", &["ghcr.io"]),
        // In the order of the copy's keys: `https://registry…` sorts before `quay.io`.
        ("mirror", &["registry.example.com:5000", "quay.io"]),
    ]);
    let status = s
        .until_status(&manager, format!("pullSecrets {want:?}"), |status| {
            listed(&status.pull_secrets) == want
        })
        .await?;
    let text = serde_json::to_string(&status)?;
    for credential in ["s3cr3t-token", "robot", "example-password"] {
        assert!(!text.contains(credential), "{credential} in {text}");
    }

    s.replace_secret_data(
        &sources,
        "mirror",
        &dockerconfigjson_secret(
            "mirror",
            &json!({"https://index.docker.io/v1/": registry_entry("robot", "pw", None)}),
        ),
    )
    .await?;
    let rotated = expected(&[("ghcr", &["ghcr.io"]), ("mirror", &["index.docker.io"])]);
    s.until_status(&manager, format!("pullSecrets {rotated:?}"), |status| {
        listed(&status.pull_secrets) == rotated
    })
    .await?;
    Ok(())
}
