//! The Pod every configuration admits and the review the throughput phase sends: the
//! webhook benchmark's ~15 KB ReplicaSet Pod, shared by the phases and the canary.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use cheiron_harness::Result;

/// The ~15 KB Pod of the webhook benchmark's review (`tests/data/pod-create-replicaset.json`,
/// its first container's environment grown), as a client creates it: no owner, the namespace's
/// `default` ServiceAccount.
pub fn pod() -> Result<Pod> {
    Ok(serde_json::from_value(pod_json()?)?)
}

fn pod_json() -> Result<Value> {
    let review = review_json()?;
    let mut pod = review["request"]["object"].clone();
    let meta = pod["metadata"]
        .as_object_mut()
        .ok_or("fixture Pod without metadata")?;
    meta.remove("ownerReferences");
    meta.remove("managedFields");
    meta.remove("creationTimestamp");
    pod.as_object_mut()
        .ok_or("fixture Pod not an object")?
        .remove("status");
    pod["spec"]["serviceAccountName"] = "default".into();
    pod["spec"]["serviceAccount"] = "default".into();
    Ok(pod)
}

/// The webhook benchmark's review: the ReplicaSet Pod fixture with its first container's
/// environment grown until the review is 15 KB.
pub fn review_json() -> Result<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/pod-create-replicaset.json"
    );
    let mut review: Value = serde_json::from_slice(&std::fs::read(path)?)?;
    let mut i = 0;
    while serde_json::to_vec(&review)?.len() < 15 * 1024 {
        let env = review["request"]["object"]["spec"]["containers"][0]["env"]
            .as_array_mut()
            .ok_or("fixture container has no env list")?;
        env.push(json!({"name": format!("SETTING_{i}"), "value": format!("value-of-setting-number-{i}")}));
        i += 1;
    }
    Ok(review)
}

/// Whether admission gave the Pod a pull secret.
pub fn mutated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .is_some_and(|r| !r.is_empty())
}
