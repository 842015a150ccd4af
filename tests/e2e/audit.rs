//! `cheiron audit` against the live apiserver: a Pod created before its manager existed is a
//! finding (exit 1) with its reason and fix; a Pod admitted after is not; a clean namespace
//! exits 0.

use kube::ResourceExt;

use crate::{
    CHEIRON,
    harness::{Result, Scenario, pod},
};

async fn audit(s: &Scenario, args: &[&str]) -> Result<std::process::Output> {
    CHEIRON.audit(s.cluster()?.admin_kubeconfig(), args).await
}

#[tokio::test]
async fn audit_finds_the_pod_admitted_before_its_manager_and_exits_1() -> Result {
    let s = Scenario::new(CHEIRON, "audit-live").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.default_service_account(&ns).await?;
    let clean = audit(&s, &["-n", &ns]).await?;
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    let early = s.create_pod(&ns, &pod("early-", &[], &[], &[])).await?;
    // Creation timestamps have a one-second resolution.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    s.apply_pod_mode_manager(&ns, "late-pull").await?;
    s.until_new_pod_gets(&ns, &[], &["late-pull"]).await?;

    let out = audit(&s, &["-n", &ns, "-o", "json"]).await?;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let findings = json.as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = findings.iter().filter_map(|f| f["name"].as_str()).collect();
    // Pods admitted after the manager (the probes above) got their Secret: not findings.
    assert_eq!(names, [early.name_any().as_str()]);
    let finding = &findings[0];
    assert_eq!(finding["why"], "admittedBeforeManager");
    assert_eq!(finding["missing"], serde_json::json!(["late-pull"]));
    assert_eq!(
        finding["fix"],
        format!(
            "kubectl delete pod {} -n {ns}, then create it again",
            early.name_any()
        )
    );
    Ok(())
}

#[tokio::test]
async fn audit_pages_through_pods_and_names_the_deployment_behind_a_replica_set() -> Result {
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
    use kube::{Api, api::ListParams};

    let s = Scenario::new(CHEIRON, "audit-pages").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.default_service_account(&ns).await?;
    // Five bare Pods and a Deployment's Pod, all before the manager exists.
    let mut bare = Vec::new();
    for _ in 0..5 {
        bare.push(
            s.create_pod(&ns, &pod("bare-", &[], &[], &[]))
                .await?
                .name_any(),
        );
    }
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "registry.example.com/web:1"}]},
            },
        },
    }))?;
    Api::<Deployment>::namespaced(s.client().clone(), &ns)
        .create(&Default::default(), &deployment)
        .await?;
    // kube-controller-manager creates the ReplicaSet and its Pod.
    let pods: Api<Pod> = Api::namespaced(s.client().clone(), &ns);
    let web = crate::harness::wait_for("the Deployment's Pod", crate::harness::SETTLE, || async {
        pods.list(&ListParams::default().labels("app=web"))
            .await?
            .items
            .into_iter()
            .next()
            .ok_or_else(|| "none yet".into())
    })
    .await?;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    s.apply_pod_mode_manager(&ns, "late-pull").await?;
    s.until_new_pod_gets(&ns, &[], &["late-pull"]).await?;

    // Two objects a request: the six Pods take three pages, and every one is found.
    let out = audit(&s, &["-n", &ns, "-o", "json", "--page-size", "2"]).await?;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let findings = json.as_array().cloned().unwrap_or_default();
    let mut names: Vec<String> = findings
        .iter()
        .filter_map(|f| f["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    let mut expected = bare.clone();
    expected.push(web.name_any());
    expected.sort();
    assert_eq!(names, expected);
    let from_deployment = findings
        .iter()
        .find(|f| f["name"] == web.name_any().as_str())
        .ok_or("no finding for the Deployment's Pod")?;
    assert_eq!(from_deployment["owner"], "Deployment/web");
    assert_eq!(from_deployment["why"], "admittedBeforeManager");
    assert_eq!(
        from_deployment["fix"],
        format!("kubectl rollout restart deployment/web -n {ns}")
    );

    // The table says the same, one row per Pod.
    let table = audit(&s, &["-n", &ns, "--page-size", "1"]).await?;
    assert_eq!(table.status.code(), Some(1));
    let text = String::from_utf8(table.stdout)?;
    assert_eq!(text.lines().count(), 1 + expected.len(), "{text}");
    assert!(
        text.lines().any(|l| l.contains("Deployment/web")
            && l.contains(&format!("kubectl rollout restart deployment/web -n {ns}"))),
        "{text}"
    );
    Ok(())
}

/// Compares `actual` with `tests/data/audit/NAME`, or rewrites it with
/// `CHEIRON_UPDATE_GOLDENS=1`.
fn golden(name: &str, actual: &str) -> Result {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/audit")
        .join(name);
    if std::env::var_os("CHEIRON_UPDATE_GOLDENS").is_some() {
        std::fs::write(&path, actual)?;
    }
    assert_eq!(
        actual,
        std::fs::read_to_string(&path)?,
        "{} differs",
        path.display()
    );
    Ok(())
}

#[tokio::test]
async fn audit_json_and_table_are_the_goldens() -> Result {
    use k8s_openapi::api::core::v1::Pod;

    let s = Scenario::new(CHEIRON, "audit-golden").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    s.default_service_account(&ns).await?;
    for name in ["api", "worker"] {
        let mut p: Pod = pod("x-", &[], &["own-pull"], &[]);
        p.metadata.generate_name = None;
        p.metadata.name = Some(name.to_owned());
        s.create_pod(&ns, &p).await?;
    }
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    for (name, mode, secret) in [
        ("pods", "Pod", "pod-pull"),
        ("accounts", "ServiceAccount", "sa-pull"),
    ] {
        s.apply_copying_manager(&ns, name, mode, secret).await?;
    }
    s.until_new_pod_gets(&ns, &[], &["pod-pull"]).await?;

    // Both Pods predate the managers; no controller runs here, so the default ServiceAccount
    // is not backfilled.
    for (args, file) in [(&["-o", "json"][..], "live.json"), (&[][..], "live.txt")] {
        let mut all = vec!["-n", ns.as_str()];
        all.extend_from_slice(args);
        let out = audit(&s, &all).await?;
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        golden(file, &String::from_utf8(out.stdout)?.replace(&ns, "NS"))?;
    }
    Ok(())
}
