//! `injection: MatchingImages` on the real apiserver: each Pod gets exactly the Secrets whose
//! registries the kubelet would use for one of its images, whichever container lists the
//! image and however the reference is written; a Pod that pulls from none gets nothing.

use cheiron::api::{
    ImagePullSecretManager,
    annotation::{RECONCILE_WITH, RECONCILED},
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::{
    Api,
    api::{Patch, PatchParams},
    core::ObjectMeta,
};
use serde_json::json;

use crate::{
    CHEIRON,
    harness::{Admitted, Result, Scenario},
};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A Pod as a controller creates it, pulling `images` in its containers and `init` in its
/// initContainers.
fn pod_pulling(generate_name: &str, images: &[&str], init: &[&str]) -> Pod {
    let containers = |images: &[&str], prefix: &str| -> Vec<Container> {
        images
            .iter()
            .enumerate()
            .map(|(i, image)| Container {
                name: format!("{prefix}{i}"),
                image: Some((*image).to_owned()),
                ..Container::default()
            })
            .collect()
    };
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: containers(images, "app-"),
            init_containers: (!init.is_empty()).then(|| containers(init, "init-")),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// A Pod to create, and the Secrets it must come out with, in order.
struct Case<'a> {
    name: &'a str,
    images: &'a [&'a str],
    init: &'a [&'a str],
    expected: &'a [&'a str],
}

impl<'a> Case<'a> {
    fn new(
        name: &'a str,
        images: &'a [&'a str],
        init: &'a [&'a str],
        expected: &'a [&'a str],
    ) -> Self {
        Self {
            name,
            images,
            init,
            expected,
        }
    }
}

#[tokio::test]
async fn matching_images_gives_each_pod_exactly_the_secrets_of_the_registries_it_pulls_from()
-> Result {
    let s = Scenario::new(CHEIRON, "matching-images").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.apply_manager(&format!(
        r#"
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: matching
  namespace: {ns}
spec:
  mode: Pod
  injection: MatchingImages
  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: example-password
    - name: ghcr
      registry: ghcr.io
      username: bob
      password: example-password
    - name: ported
      registry: registry.example.com:5000
      username: carol
      password: example-password
    - name: wildcard
      registry: "*.example.com"
      username: dave
      password: example-password
    - existingSecretRef:
        name: quay
"#
    ))
    .await?;
    // No controller runs in these tests: report the copied Secret's registries as it would.
    Api::<ImagePullSecretManager>::namespaced(s.client().clone(), &ns)
        .patch_status(
            "matching",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"pullSecrets": [
                {"name": "quay", "registries": ["quay.io"]},
            ]}})),
        )
        .await?;
    // The harness's probe pulls registry.example.com/team/app:1.0, which only the wildcard
    // serves; "quay" goes with it until the webhook has seen the status.
    s.until_new_pod_gets(&ns, &[], &["wildcard"]).await?;

    let digest_pinned = [format!("ghcr.io/org/app@{DIGEST}")];
    let hub_digest = [format!("docker.io/library/busybox@{DIGEST}")];
    let (digest_pinned, hub_digest) = (
        digest_pinned.each_ref().map(String::as_str),
        hub_digest.each_ref().map(String::as_str),
    );
    let cases = [
        Case::new("short-name-", &["nginx"], &[], &["docker-hub"]),
        Case::new(
            "library-init-",
            &["gcr.io/distroless/static:nonroot"],
            &["library/nginx:1.27"],
            &["docker-hub"],
        ),
        Case::new("hub-digest-", &hub_digest, &[], &["docker-hub"]),
        Case::new("ghcr-", &["ghcr.io/org/app:2.0"], &[], &["ghcr"]),
        Case::new("digest-", &digest_pinned, &[], &["ghcr"]),
        Case::new(
            "port-",
            &["registry.example.com:5000/team/app:1.0"],
            &[],
            &["ported"],
        ),
        Case::new(
            "wildcard-",
            &["eu.example.com/team/app"],
            &[],
            &["wildcard"],
        ),
        Case::new("copied-", &["quay.io/org/app:3"], &[], &["quay"]),
        Case::new(
            "several-",
            &["quay.io/org/app:3", "ghcr.io/org/side:1"],
            &["busybox"],
            &["docker-hub", "ghcr", "quay"],
        ),
    ];
    for case in &cases {
        let created = s
            .create_pod(&ns, &pod_pulling(case.name, case.images, case.init))
            .await?;
        assert_eq!(created.pull_secret_names(), case.expected, "{}", case.name);
        let mut sorted = case.expected.to_vec();
        sorted.sort_unstable();
        assert_eq!(
            created.annotation(RECONCILE_WITH),
            Some(sorted.join(",").as_str()),
            "{}",
            case.name
        );
    }

    let unmatched = s
        .create_pod(
            &ns,
            &pod_pulling(
                "unmatched-",
                &["gcr.io/distroless/static:nonroot", "example.com/app"],
                &["registry.example.com:5001/tool"],
            ),
        )
        .await?;
    assert_eq!(
        unmatched.pull_secret_names(),
        Vec::<String>::new(),
        "a Pod pulling from no registry of the manager gets no reference"
    );
    assert_eq!(unmatched.annotation(RECONCILED), None);
    Ok(())
}

#[tokio::test]
async fn matching_images_in_service_account_mode_is_refused_by_the_crd() -> Result {
    let s = Scenario::new(CHEIRON, "matching-images-sa").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let refused = s
        .apply_manager(&format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: accounts
  namespace: {ns}
spec:
  injection: MatchingImages
  secrets:
    - existingSecretRef:
        name: pull
"
        ))
        .await;
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains(cheiron::api::rules::MATCHING_IMAGES_NEEDS_POD_MODE),
        "{message:?}"
    );
    Ok(())
}
