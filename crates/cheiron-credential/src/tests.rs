use std::{path::PathBuf, time::Duration};

use super::*;

/// A bin dir holding the script `gated` as a plugin, which answers only once the file
/// `release` exists in that dir, and the providers running it with `max_concurrent`.
fn gated(name: &str, max_concurrent: usize) -> Result<(CredentialProviders, PathBuf), String> {
    let dir = std::env::temp_dir().join(format!("cheiron-cred-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let plugin = dir.join("gated");
    install_test_plugin(
        &plugin,
        r#"#!/bin/sh
cat >/dev/null
while [ ! -e release ]; do sleep 0.05; done
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"1h","auth":{"gated.example.com":{"username":"u","password":"p"}}}'
"#,
    )
    .map_err(|e| e.to_string())?;
    let config = ProviderConfig::parse(
        r#"
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: gated
    matchImages: ["gated.example.com"]
    defaultCacheDuration: "1h"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
"#,
    )?;
    let providers = CredentialProviders::new(
        ProviderSettings {
            config,
            bin_dir: dir.clone(),
            max_concurrent,
            ..ProviderSettings::default()
        },
        None,
        None,
    );
    Ok((providers, dir))
}

fn manager(name: &str) -> ManagerId {
    ManagerId {
        kind: ManagerKind::Cluster,
        namespace: None,
        name: name.to_owned(),
    }
}

fn wanted(image: &str) -> Wanted {
    Wanted {
        image: image.to_owned(),
        service_account_name: None,
    }
}

#[tokio::test]
async fn a_lookup_never_waits_for_the_plugin_and_the_answer_triggers_the_manager()
-> Result<(), String> {
    let (providers, dir) = gated("pending", DEFAULT_MAX_CONCURRENT_PLUGINS)?;
    let (told, mut tell) = tokio::sync::mpsc::unbounded_channel();
    providers.on_change(Arc::new(move |id: &ManagerId| {
        let _ = told.send(id.clone());
    }));
    let team = manager("team");
    let (key, lookup) = providers.lookup(&team, &wanted("gated.example.com/app"));
    assert!(key.is_some());
    assert!(
        matches!(&lookup, Lookup::Pending { provider, message }
            if provider == "gated" && message.contains("waiting for the first answer of plugin gated")),
        "{lookup:?}"
    );
    // Still pending while the plugin runs, however often the manager looks.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        providers.lookup(&team, &wanted("gated.example.com/app")).1,
        Lookup::Pending { .. }
    ));
    std::fs::write(dir.join("release"), "").map_err(|e| e.to_string())?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let id = tokio::time::timeout_at(deadline, tell.recv())
            .await
            .map_err(|_| "the manager was never told of the answer".to_owned())?;
        assert_eq!(id.as_ref(), Some(&team));
        if let Lookup::Ready { credential, .. } =
            providers.lookup(&team, &wanted("gated.example.com/app")).1
        {
            assert_eq!(credential.auth.len(), 1);
            break;
        }
    }
    providers.retain(&team, Vec::new());
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// The plugins of `dir` running now (their command line names the plugin's path).
fn running(dir: &std::path::Path) -> usize {
    let needle = dir.join("gated").display().to_string();
    std::fs::read_dir("/proc").map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
            })
            .count()
    })
}

#[tokio::test]
async fn plugin_calls_beyond_max_concurrent_wait_their_turn() -> Result<(), String> {
    let (providers, dir) = gated("concurrent", 2)?;
    let team = manager("team");
    let keys: Vec<Key> = (0..5)
        .filter_map(|i| {
            providers
                .lookup(&team, &wanted(&format!("gated.example.com/app-{i}")))
                .0
        })
        .collect();
    assert_eq!(keys.len(), 5);
    providers.retain(&team, keys.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while running(&dir) < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..10 {
        let now = running(&dir);
        assert_eq!(now, 2, "{now} plugins run with max_concurrent 2");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Released, every key gets its answer in turn.
    std::fs::write(dir.join("release"), "").map_err(|e| e.to_string())?;
    for i in 0..5 {
        let image = format!("gated.example.com/app-{i}");
        while !matches!(
            providers.lookup(&team, &wanted(&image)).1,
            Lookup::Ready { .. }
        ) {
            if tokio::time::Instant::now() > deadline {
                return Err(format!("{image} never answered"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    providers.retain(&team, Vec::new());
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
