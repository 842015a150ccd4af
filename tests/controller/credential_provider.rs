//! Credential-provider plugins (docs/credential-providers.md), with the fake plugin of
//! `tests/support/fake_credential_provider.rs` run by a controller of this test's own: a
//! cluster manager's provider entry is materialised in every target namespace and every copy
//! replaced before its credential expires, with one plugin call per rotation however many
//! namespaces; a failing plugin leaves the copies and reports only once the credential expired;
//! a hanging plugin is killed at the timeout; garbage is reported without being quoted; a
//! namespaced manager is refused; a service-account token with the provider's audience is
//! passed to the plugin. Tenant isolation: plugins hanging for some tenants' managers delay no
//! other tenant's manager and run at most `--credential-provider-max-concurrent` at once; a
//! plugin's stderr reaches the controller's log, never a status or Event.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec},
    core::v1::ServiceAccount,
};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use serde_json::Value;

use crate::{
    harness::{
        Result,
        controller::{CheironProcess, READY_WITHIN},
    },
    scenario::{ControllerScenario, ManagerRef, describe_ready, ready},
};

/// The fake plugin's credential lifetime (`cacheDuration`).
const CACHE_SECONDS: u64 = 6;
/// Target namespaces of the rotating manager.
const NAMESPACES: usize = 3;
/// Rotations watched.
const ROTATIONS: u64 = 3;
/// The plugin timeout given to the controller.
const TIMEOUT_SECONDS: u64 = 3;
const AUDIENCE: &str = "cheiron-e2e-registry";

const FAKE: &str = env!("CARGO_BIN_EXE_cheiron-fake-credential-provider");

struct Plugins {
    dir: PathBuf,
}

impl Plugins {
    fn state(&self, provider: &str) -> PathBuf {
        self.dir.join("state").join(provider)
    }

    fn calls(&self, provider: &str) -> u64 {
        std::fs::read_to_string(self.state(provider).join("calls"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    fn set_mode(&self, provider: &str, mode: &str) -> Result {
        std::fs::create_dir_all(self.state(provider))?;
        std::fs::write(self.state(provider).join("mode"), mode)?;
        Ok(())
    }

    /// A bin dir with the fake plugin under each provider's name, and the config.
    fn install(dir: &Path) -> Result<Self> {
        Self::install_providers(
            dir,
            &[
                (
                    "rotating",
                    "    env: [{name: FAKE_ONLY, value: only-this}]\n".to_owned(),
                ),
                ("hanging", String::new()),
                ("garbage", String::new()),
                (
                    "token",
                    format!(
                        "    tokenAttributes:\n      serviceAccountTokenAudience: {AUDIENCE}\n      cacheType: ServiceAccount\n      requireServiceAccount: true\n"
                    ),
                ),
            ],
        )
    }

    /// [`Plugins::install`] with these providers: `(name, more YAML lines of the provider)`.
    fn install_providers(dir: &Path, list: &[(&str, String)]) -> Result<Self> {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin)?;
        let plugins = Self {
            dir: dir.to_owned(),
        };
        let mut providers = String::new();
        for (name, extra) in list {
            std::fs::copy(FAKE, bin.join(name))?;
            std::fs::create_dir_all(plugins.state(name))?;
            providers.push_str(&format!(
                "  - name: {name}\n    matchImages: [\"{name}.example.com\"]\n    defaultCacheDuration: 1h\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n    args: [--state, {}, --cache-duration, {CACHE_SECONDS}s]\n{extra}",
                plugins.state(name).display()
            ));
        }
        std::fs::write(
            dir.join("config.yaml"),
            format!(
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n{providers}"
            ),
        )?;
        Ok(plugins)
    }
}

/// The username (`user-N`) each copy holds for `registry`, by namespace.
async fn copies(
    s: &ControllerScenario,
    namespaces: &[String],
    name: &str,
    registry: &str,
) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for ns in namespaces {
        let Some(secret) = s.secret(ns, name).await? else {
            continue;
        };
        let data = secret.data.unwrap_or_default();
        let Some(bytes) = data.get(".dockerconfigjson") else {
            continue;
        };
        let config: Value = serde_json::from_slice(&bytes.0)?;
        let user = config["auths"][registry]["username"]
            .as_str()
            .and_then(|u| u.strip_prefix("user-"))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("{ns}/{name} holds no user-N for {registry}: {config}"))?;
        let password = config["auths"][registry]["password"].as_str();
        assert_eq!(password, Some(format!("pass-{user}").as_str()));
        out.insert(ns.clone(), user);
    }
    Ok(out)
}

fn provider_entry(name: &str, image: &str) -> String {
    format!("  secrets:\n    - name: {name}\n      credentialProvider:\n        image: {image}\n")
}

/// True while a process runs with `needle` in its command line.
fn process_running(needle: &str) -> bool {
    !processes(needle).is_empty()
}

/// The pids of the processes with `needle` in their command line.
fn processes(needle: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(std::result::Result::ok)
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Kills what is left of the plugins run with `state` (each runs in a process group of its
/// own, out of reach of the harness's clean-up of the controller's group).
fn kill_plugins(state: &str) {
    for pid in processes(state) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
    }
}

/// A controller of its own for `s`, running the plugins of `dir` with a 60 s timeout and the
/// extra `args`.
async fn provider_controller(
    s: &ControllerScenario,
    dir: &Path,
    args: &[&str],
) -> Result<CheironProcess> {
    let config = dir.join("config.yaml").display().to_string();
    let bin = dir.join("bin").display().to_string();
    let mut all = vec![
        "--no-leader-election",
        "--credential-provider-config",
        &config,
        "--credential-provider-bin-dir",
        &bin,
        "--credential-provider-timeout",
        "60",
    ];
    all.extend_from_slice(args);
    let controller = CheironProcess::controller(&s.unique_name("credprov"), &all)?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    Ok(controller)
}

fn namespaced_manager(namespace: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n{spec}"
    )
}

#[tokio::test]
async fn provider_credentials_are_fetched_once_per_rotation_kept_fresh_everywhere_and_failures_reported()
-> Result {
    let s = ControllerScenario::without_shared_controller("credprov").await?;
    let dir = std::env::temp_dir().join(format!("cheiron-credprov-{}", s.id()));
    let plugins = Plugins::install(&dir)?;
    let own = s.create_namespace(&[], &[]).await?;
    let config = dir.join("config.yaml");
    let bin = dir.join("bin");
    let timeout = TIMEOUT_SECONDS.to_string();
    let controller = CheironProcess::controller(
        &s.unique_name("credprov"),
        &[
            "--no-leader-election",
            "--resync",
            "15",
            "--pod-namespace",
            &own,
            "--credential-provider-config",
            &config.display().to_string(),
            "--credential-provider-bin-dir",
            &bin.display().to_string(),
            "--credential-provider-timeout",
            &timeout,
        ],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let mut targets = Vec::new();
    for _ in 0..NAMESPACES {
        targets.push(s.create_target_namespace(&[], &[]).await?);
    }
    let registry = "rotating.example.com";

    // Materialised everywhere, from one call.
    let rotating = s
        .apply(&s.cluster_manager(
            "rotating",
            &provider_entry("rot-pull", "rotating.example.com/team/app"),
        ))
        .await?;
    s.eventually("every target namespace holds a credential", || async {
        let held = copies(&s, &targets, "rot-pull", registry).await?;
        if held.len() == NAMESPACES {
            Ok(())
        } else {
            Err(format!("copies {held:?}").into())
        }
    })
    .await?;
    let status = s.until_ready_reason(&rotating, "Synced").await?;
    let expires = status
        .credentials
        .first()
        .and_then(|c| c.expires_at.clone())
        .ok_or("status.credentials[0].expiresAt is set")?;
    assert!(
        expires.0 > k8s_openapi::jiff::Timestamp::now(),
        "{expires:?}"
    );
    let env = std::fs::read_to_string(plugins.state("rotating").join("env"))?;
    assert_eq!(
        env.trim(),
        "FAKE_ONLY",
        "the plugin gets only the environment its config names"
    );

    // Rotations: every copy holds a credential issued less than CACHE_SECONDS ago, at every
    // look, and each credential number comes from one call.
    let mut first_seen: BTreeMap<u64, Instant> = BTreeMap::new();
    let mut written: BTreeSet<u64> = BTreeSet::new();
    let started = Instant::now();
    let start_calls = plugins.calls("rotating");
    let deadline = Duration::from_secs(CACHE_SECONDS * (ROTATIONS + 2));
    while plugins.calls("rotating") < start_calls + ROTATIONS
        || written.len() < ROTATIONS as usize + 1
    {
        if started.elapsed() > deadline {
            return Err(format!(
                "fewer than {ROTATIONS} rotations in {deadline:?}: calls {}, written {written:?}\n{}",
                plugins.calls("rotating"),
                controller.log_excerpt(30)
            )
            .into());
        }
        let calls = plugins.calls("rotating");
        first_seen.entry(calls).or_insert_with(Instant::now);
        for (ns, n) in copies(&s, &targets, "rot-pull", registry).await? {
            written.insert(n);
            let issued = first_seen.get(&n).copied().unwrap_or(started);
            assert!(
                issued.elapsed() < Duration::from_secs(CACHE_SECONDS),
                "{ns} holds credential {n}, issued {:?} ago, past its {CACHE_SECONDS}s life",
                issued.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let calls = plugins.calls("rotating");
    let newest = written.iter().max().copied().unwrap_or(0);
    assert!(
        calls <= newest + 1,
        "one plugin call per rotation, not per namespace: {calls} calls for credentials up to {newest} in {NAMESPACES} namespaces"
    );
    let expiry = controller
        .metric("cheiron_credential_expiry_timestamp_seconds")
        .await?;
    assert!(
        expiry > k8s_openapi::jiff::Timestamp::now().as_second() as f64,
        "expiry metric {expiry}"
    );

    // Failure: the copies stay; Ready turns False only once the credential expired.
    plugins.set_mode("rotating", "fail")?;
    let failed_at = Instant::now();
    let status = s
        .until_ready_reason(&rotating, "CredentialProviderFailed")
        .await?;
    let message = describe_ready(&status);
    assert!(
        failed_at.elapsed() >= Duration::from_secs(2),
        "reported {:?} after the first failure, before the last credential expired: {message}",
        failed_at.elapsed()
    );
    assert!(
        message.contains(
            "plugin rotating exited with status 1; its stderr is in the controller's log"
        ) && message.contains("existing copies are kept")
            && !message.contains("STDERR-CANARY"),
        "{message}"
    );
    let kept = copies(&s, &targets, "rot-pull", registry).await?;
    assert_eq!(kept.len(), NAMESPACES, "the last copies are kept: {kept:?}");
    plugins.set_mode("rotating", "ok")?;
    s.until_ready_reason(&rotating, "Synced").await?;

    // A hanging plugin is killed at the timeout.
    plugins.set_mode("hanging", "hang")?;
    let hanging = s
        .apply(&s.cluster_manager(
            "hanging",
            &provider_entry("hang-pull", "hanging.example.com/app"),
        ))
        .await?;
    let status = s
        .until_ready_reason(&hanging, "CredentialProviderFailed")
        .await?;
    let message = describe_ready(&status);
    assert!(
        message.contains(&format!(
            "did not answer within {TIMEOUT_SECONDS}s and was killed"
        )),
        "{message}"
    );
    let hanging_state = plugins.state("hanging").display().to_string();
    s.eventually("the hanging plugin is gone", || async {
        if process_running(&hanging_state) {
            Err("a hanging plugin still runs".into())
        } else {
            Ok(())
        }
    })
    .await?;

    // Garbage is reported, never quoted.
    plugins.set_mode("garbage", "garbage")?;
    let garbage = s
        .apply(&s.cluster_manager(
            "garbage",
            &provider_entry("garbage-pull", "garbage.example.com/app"),
        ))
        .await?;
    let status = s
        .until_ready_reason(&garbage, "CredentialProviderFailed")
        .await?;
    let message = describe_ready(&status);
    assert!(
        message.contains("not a CredentialProviderResponse: not JSON"),
        "{message}"
    );
    let (object, _) = s.manager_status(&garbage).await?;
    let events = serde_json::to_string(&s.events_about_manager(&garbage).await?)?;
    let log = std::fs::read_to_string(controller.log())?;
    for (what, text) in [
        ("the status", serde_json::to_string(&object)?),
        ("the Events", events),
        ("the log", log.clone()),
    ] {
        assert!(
            !text.contains("GARBAGE-CANARY"),
            "{what} quotes the plugin's output"
        );
    }
    assert!(!log.contains("pass-"), "the log holds a credential");

    // A namespaced manager may not use a provider the config does not open to its namespace.
    let tenant = &targets[0];
    let namespaced = s
        .apply(&format!(
            "apiVersion: cheiron.anny.co/v1alpha1\nkind: ImagePullSecretManager\nmetadata:\n  name: tenant\n  namespace: {tenant}\nspec:\n{}",
            provider_entry("tenant-pull", "rotating.example.com/app")
        ))
        .await?;
    let status = s
        .until_ready_reason(&namespaced, "CredentialProviderNotAllowed")
        .await?;
    assert_eq!(ready(&status).map(|c| c.status.as_str()), Some("False"));
    assert!(describe_ready(&status).contains("allowedNamespaces"));
    assert!(s.secret(tenant, "tenant-pull").await?.is_none());

    // KEP-4412: the plugin gets a token of the named ServiceAccount, for its audience.
    let accounts: Api<ServiceAccount> = Api::namespaced(s.client().clone(), &own);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("puller".into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    accounts.create(&PostParams::default(), &account).await?;
    let token_manager = s
        .apply(&s.cluster_manager(
            "token",
            &format!(
                "{}        serviceAccountName: puller\n",
                provider_entry("token-pull", "token.example.com/app")
            ),
        ))
        .await?;
    s.until_ready_reason(&token_manager, "Synced").await?;
    let request: Value = serde_json::from_str(&std::fs::read_to_string(
        plugins.state("token").join("request.json"),
    )?)?;
    let token = request["serviceAccountToken"]
        .as_str()
        .ok_or("the plugin got a serviceAccountToken")?;
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: Some(vec![AUDIENCE.to_owned()]),
        },
        ..TokenReview::default()
    };
    let reviewed = Api::<TokenReview>::all(s.client().clone())
        .create(&PostParams::default(), &review)
        .await?;
    let result = reviewed.status.ok_or("TokenReview has a status")?;
    assert_eq!(result.authenticated, Some(true), "{:?}", result.error);
    assert_eq!(result.audiences, Some(vec![AUDIENCE.to_owned()]));
    assert_eq!(
        result.user.and_then(|u| u.username).as_deref(),
        Some(format!("system:serviceaccount:{own}:puller").as_str())
    );
    for m in [&rotating, &hanging, &garbage, &token_manager, &namespaced] {
        s.delete(m).await?;
    }
    drop(controller);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Namespaced managers with a hanging plugin: more than the controller's 4 reconcile workers.
const HANGING_TENANTS: usize = 6;
/// `--credential-provider-max-concurrent` in the isolation test.
const MAX_CONCURRENT: usize = 2;
/// How soon another tenant's plain manager must get its Secret while the plugins hang. Far
/// under the plugin's 60 s timeout (before the fix each reconcile of a hanging tenant held a
/// worker that long), and far over the tens of milliseconds it takes on an idle machine.
const UNAFFECTED_WITHIN: Duration = Duration::from_secs(5);

#[tokio::test]
async fn hanging_plugins_of_some_tenants_do_not_delay_another_tenants_manager() -> Result {
    let s = ControllerScenario::without_shared_controller("credhang").await?;
    let dir = std::env::temp_dir().join(format!("cheiron-credhang-{}", s.id()));
    let mut tenants = Vec::new();
    for _ in 0..HANGING_TENANTS {
        tenants.push(s.create_namespace(&[], &[]).await?);
    }
    let other = s.create_namespace(&[], &[]).await?;
    let allowed = format!("    allowedNamespaces: [{}]\n", tenants.join(", "));
    let plugins = Plugins::install_providers(&dir, &[("hanging", allowed)])?;
    plugins.set_mode("hanging", "hang")?;
    let state = plugins.state("hanging").display().to_string();
    let max = MAX_CONCURRENT.to_string();
    let controller =
        provider_controller(&s, &dir, &["--credential-provider-max-concurrent", &max]).await?;

    // Each tenant's manager wants its own key, so each would start a plugin of its own.
    let mut hanging = Vec::new();
    for (i, tenant) in tenants.iter().enumerate() {
        hanging.push(
            s.apply(&namespaced_manager(
                tenant,
                "hangs",
                &provider_entry("hang-pull", &format!("hanging.example.com/app-{i}")),
            ))
            .await?,
        );
    }
    s.eventually("the hanging plugins run", || async {
        if plugins.calls("hanging") >= 1 {
            Ok(())
        } else {
            Err("no plugin call yet".into())
        }
    })
    .await?;

    // Meanwhile another tenant's plain manager is reconciled at once.
    let applied = Instant::now();
    s.apply(&namespaced_manager(
        &other,
        "plain",
        "  secrets:\n    - name: plain-pull\n      registry: registry.example.com\n      username: bot\n      password: bot-password\n",
    ))
    .await?;
    let got = s
        .eventually_within(
            format!("{other}/plain-pull within {UNAFFECTED_WITHIN:?}"),
            UNAFFECTED_WITHIN,
            || async {
                match s.secret(&other, "plain-pull").await? {
                    Some(_) => Ok(applied.elapsed()),
                    None => Err("no Secret yet".into()),
                }
            },
        )
        .await
        .map_err(|e| format!("{e}\n{}", controller.log_excerpt(30)))?;
    eprintln!("the other tenant's Secret came {got:?} after its manager was applied");

    // The hanging tenants are told they wait, without holding anything.
    for m in &hanging {
        let status = s.until_ready_reason(m, "CredentialPending").await?;
        assert!(
            describe_ready(&status).contains("waiting for the first answer of plugin hanging"),
            "{}",
            describe_ready(&status)
        );
    }
    // At most --credential-provider-max-concurrent plugins run; the other keys wait their turn.
    for _ in 0..10 {
        let running = processes(&state).len();
        assert!(
            running <= MAX_CONCURRENT,
            "{running} plugins run at once, more than --credential-provider-max-concurrent {MAX_CONCURRENT}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        plugins.calls("hanging"),
        MAX_CONCURRENT as u64,
        "only the plugin calls that got a turn started"
    );

    drop(controller);
    kill_plugins(&state);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test]
async fn a_failing_plugins_stderr_reaches_the_log_but_no_condition_or_event() -> Result {
    let s = ControllerScenario::without_shared_controller("credstderr").await?;
    let dir = std::env::temp_dir().join(format!("cheiron-credstderr-{}", s.id()));
    let tenant = s.create_namespace(&[], &[]).await?;
    let allowed = format!("    allowedNamespaces: [{tenant}]\n");
    let plugins = Plugins::install_providers(&dir, &[("failing", allowed)])?;
    plugins.set_mode("failing", "fail")?;
    let controller = provider_controller(&s, &dir, &[]).await?;

    // A tenant's manager: its status and Events are the tenant's to read.
    let manager = s
        .apply(&namespaced_manager(
            &tenant,
            "fails",
            &provider_entry("fail-pull", "failing.example.com/app"),
        ))
        .await?;
    let status = s
        .until_ready_reason(&manager, "CredentialProviderFailed")
        .await?;
    let message = describe_ready(&status);
    assert!(
        message
            .contains("plugin failing exited with status 1; its stderr is in the controller's log"),
        "{message}"
    );
    s.until_event_about_manager(&manager, "CredentialProviderFailed")
        .await?;
    let (object, _) = s.manager_status(&manager).await?;
    let events = serde_json::to_string(&s.events_about_manager(&manager).await?)?;
    for (what, text) in [
        ("the status", serde_json::to_string(&object)?),
        ("the Events", events),
    ] {
        assert!(
            !text.contains("STDERR-CANARY"),
            "{what} quotes the plugin's stderr: {text}"
        );
    }
    s.eventually("the plugin's stderr is in the controller's log", || async {
        let log = std::fs::read_to_string(controller.log())?;
        if log.contains("STDERR-CANARY") {
            Ok(())
        } else {
            Err("not yet".into())
        }
    })
    .await?;
    drop(controller);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

impl ControllerScenario {
    async fn delete(&self, manager: &ManagerRef) -> Result {
        if let Some(object) = self.manager(manager).await? {
            self.delete_manager(&object).await?;
        }
        Ok(())
    }
}
