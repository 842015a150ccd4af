use std::{path::PathBuf, time::Duration};

use super::*;

/// A bin dir of test `test` holding the shell script `plugin` as the plugin of provider
/// `name` (for images of `<name>.example.com`), and the providers running it with
/// `max_concurrent` and `policy`. The script runs in the bin dir.
fn scripted(
    test: &str,
    name: &str,
    plugin: &str,
    max_concurrent: usize,
    policy: RefreshPolicy,
) -> Result<(CredentialProviders, PathBuf), String> {
    let dir = std::env::temp_dir().join(format!("cheiron-cred-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    install_test_plugin(&dir.join(name), plugin).map_err(|e| e.to_string())?;
    let config = ProviderConfig::parse(&format!(
        r#"
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: {name}
    matchImages: ["{name}.example.com"]
    defaultCacheDuration: "1h"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
"#
    ))?;
    let providers = CredentialProviders::new(
        ProviderSettings {
            config,
            bin_dir: dir.clone(),
            max_concurrent,
            policy,
            ..ProviderSettings::default()
        },
        None,
        None,
    );
    Ok((providers, dir))
}

/// The plugin `gated`, which answers only once the file `release` exists in its dir.
fn gated(test: &str, max_concurrent: usize) -> Result<(CredentialProviders, PathBuf), String> {
    scripted(
        test,
        "gated",
        r#"#!/bin/sh
cat >/dev/null
while [ ! -e release ]; do sleep 0.05; done
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"1h","auth":{"gated.example.com":{"username":"u","password":"p"}}}'
"#,
        max_concurrent,
        RefreshPolicy::default(),
    )
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
    let mut tell = notices(&providers);
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

/// A plugin that counts its calls in the file `calls` of its dir, answers with `cacheDuration`
/// `life` for the calls up to `good` (all when `None`), and fails after them, saying so on
/// stderr only.
fn counting(name: &str, life: &str, good: Option<u32>) -> String {
    let good = good.map_or_else(|| "1000000".to_owned(), |g| g.to_string());
    format!(
        r#"#!/bin/sh
cat >/dev/null
n=$(cat calls 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > calls
if [ "$n" -gt {good} ]; then echo "the registry refused secret-stderr" >&2; exit 1; fi
printf '{{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"{life}","auth":{{"{name}.example.com":{{"username":"u","password":"p"}}}}}}'
"#
    )
}

/// How often the plugin of `dir` has been called.
fn calls(dir: &std::path::Path) -> u32 {
    std::fs::read_to_string(dir.join("calls"))
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The managers `providers` tell of a change, in order.
fn notices(providers: &CredentialProviders) -> tokio::sync::mpsc::UnboundedReceiver<ManagerId> {
    let (told, tell) = tokio::sync::mpsc::unbounded_channel();
    providers.on_change(Arc::new(move |id: &ManagerId| {
        let _ = told.send(id.clone());
    }));
    tell
}

/// Waits for notifications to `manager` until what it then looks up is a state `reached`
/// takes something from: a manager looks again only when told, so every state it reaches
/// must come with a notice.
async fn told_until<T>(
    tell: &mut tokio::sync::mpsc::UnboundedReceiver<ManagerId>,
    providers: &CredentialProviders,
    manager: &ManagerId,
    image: &str,
    what: &str,
    reached: impl Fn(Lookup) -> Option<T>,
) -> Result<T, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let id = tokio::time::timeout_at(deadline, tell.recv())
            .await
            .map_err(|_| {
                format!(
                    "{manager:?} was never told of {what}; it looks up {:?}",
                    providers.lookup(manager, &wanted(image)).1
                )
            })?;
        if id.as_ref() != Some(manager) {
            continue;
        }
        if let Some(state) = reached(providers.lookup(manager, &wanted(image)).1) {
            return Ok(state);
        }
    }
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_last_good_credential_until_it_expires() -> Result<(), String> {
    // Good once, for 3 s (refreshed after 1.5 s), then failing; the retry after a minute, so
    // only the wake at the expiry can tell the manager of it within the test.
    let (providers, dir) = scripted(
        "keeps",
        "flaky",
        &counting("flaky", "3s", Some(1)),
        DEFAULT_MAX_CONCURRENT_PLUGINS,
        RefreshPolicy {
            first_retry: Duration::from_secs(60),
            ..RefreshPolicy::default()
        },
    )?;
    let mut tell = notices(&providers);
    let team = manager("team");
    let image = "flaky.example.com/app";
    let (key, _) = providers.lookup(&team, &wanted(image));
    providers.retain(&team, key.into_iter().collect());

    let credential = told_until(
        &mut tell,
        &providers,
        &team,
        image,
        "the first answer",
        |l| match l {
            Lookup::Ready {
                credential,
                failing: None,
                ..
            } => Some(credential),
            _ => None,
        },
    )
    .await?;
    let expires_at = credential
        .expires_at
        .ok_or("a 3 s credential has an expiry")?;

    // The refresh fails: the good credential stays, with why the refresh failed.
    let (kept, why) = told_until(
        &mut tell,
        &providers,
        &team,
        image,
        "the failed refresh",
        |l| match l {
            Lookup::Ready {
                credential,
                failing: Some(why),
                ..
            } => Some((credential, why)),
            _ => None,
        },
    )
    .await?;
    assert_eq!(kept, credential, "the last good credential is kept");
    assert!(SystemTime::now() < expires_at, "still valid while failing");
    assert!(
        !why.contains("secret-stderr"),
        "a plugin's stderr stays out: {why}"
    );

    // At the expiry the manager is told, though no call succeeded or changed.
    let (message, expired_at) = told_until(
        &mut tell,
        &providers,
        &team,
        image,
        "the expiry",
        |l| match l {
            Lookup::Failed {
                message,
                expired_at,
                ..
            } => Some((message, expired_at)),
            _ => None,
        },
    )
    .await?;
    assert_eq!(expired_at, Some(expires_at));
    assert!(
        message.contains("the last good credential expired") && message.contains("kept"),
        "{message}"
    );
    assert!(!message.contains("secret-stderr"), "{message}");
    assert_eq!(
        calls(&dir),
        2,
        "one good call, one failed refresh, no retry yet"
    );
    providers.retain(&team, Vec::new());
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[tokio::test]
async fn a_failing_plugin_is_retried_with_growing_waits() -> Result<(), String> {
    let (providers, dir) = scripted(
        "backoff",
        "broken",
        &counting("broken", "1h", Some(0)),
        DEFAULT_MAX_CONCURRENT_PLUGINS,
        RefreshPolicy {
            first_retry: Duration::from_millis(100),
            max_retry: Duration::from_secs(60),
            ..RefreshPolicy::default()
        },
    )?;
    let team = manager("team");
    let (key, _) = providers.lookup(&team, &wanted("broken.example.com/app"));
    providers.retain(&team, key.into_iter().collect());
    // Calls at 0, 0.1, 0.3, 0.7, 1.5 s, then 3.1 s: five within 2.5 s (a fixed 100 ms retry
    // would make about 25).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let made = calls(&dir);
    let lookup = providers.lookup(&team, &wanted("broken.example.com/app")).1;
    providers.retain(&team, Vec::new());
    assert!(
        (3..=6).contains(&made),
        "{made} calls in 2.5 s with retries doubling from 100 ms"
    );
    // Never answered: failed, with no expiry to report.
    assert!(
        matches!(&lookup, Lookup::Failed { expired_at: None, message, .. }
            if !message.contains("secret-stderr")),
        "{lookup:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

#[tokio::test]
async fn a_credential_no_manager_uses_is_no_longer_refreshed() -> Result<(), String> {
    // A 1 s credential: refreshed every second (the floor) while used.
    let (providers, dir) = scripted(
        "unused",
        "brief",
        &counting("brief", "1s", None),
        DEFAULT_MAX_CONCURRENT_PLUGINS,
        RefreshPolicy::default(),
    )?;
    let team = manager("team");
    let (key, _) = providers.lookup(&team, &wanted("brief.example.com/app"));
    providers.retain(&team, key.into_iter().collect());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while calls(&dir) < 2 {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("refreshed {} times in 20 s", calls(&dir)));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    providers.retain(&team, Vec::new());
    // A call running at that moment may still land.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = calls(&dir);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        calls(&dir),
        stopped,
        "the plugin was called after no manager used it"
    );
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
