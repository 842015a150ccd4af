//! The schedule of the checks, against a fake registry answer and paused time.

use std::sync::atomic::{AtomicUsize, Ordering};

use cheiron_core::content::DockerConfig;

use super::*;

/// Answers from a table (by password), counting calls and the most running at once.
#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<(String, String)>>,
    running: AtomicUsize,
    most: AtomicUsize,
    /// Passwords the registry refuses.
    refused: Mutex<HashSet<String>>,
    /// Hosts that do not answer.
    down: Mutex<HashSet<String>>,
    /// How long each check takes.
    delay: Duration,
    /// Docker Hub's allowance, for every accepted Docker Hub check.
    allowance: Option<Allowance>,
}

impl Checker for Fake {
    fn check<'a>(
        &'a self,
        target: &'a Target,
        credential: &'a Credential,
    ) -> BoxFuture<'a, Verdict> {
        async move {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            self.calls
                .lock()
                .expect("calls")
                .push((target.host.clone(), credential.username.clone()));
            tokio::time::sleep(self.delay).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            if self.down.lock().expect("down").contains(&target.host) {
                Verdict::Unreachable {
                    detail: format!("cannot connect to {}", target.host),
                }
            } else if self
                .refused
                .lock()
                .expect("refused")
                .contains(&credential.password)
            {
                Verdict::Rejected {
                    detail: format!("{} answered 401", target.host),
                }
            } else {
                Verdict::Accepted {
                    allowance: self.allowance.filter(|_| target.docker_hub),
                }
            }
        }
        .boxed()
    }
}

impl Fake {
    fn calls(&self) -> usize {
        self.calls.lock().expect("calls").len()
    }
}

fn cluster(name: &str) -> ManagerId {
    ManagerId {
        kind: ManagerKind::Cluster,
        namespace: None,
        name: name.to_owned(),
    }
}

fn namespaced(ns: &str, name: &str) -> ManagerId {
    ManagerId {
        kind: ManagerKind::Namespaced,
        namespace: Some(ns.to_owned()),
        name: name.to_owned(),
    }
}

fn secret(name: &str, registry: &str, user: &str, password: &str) -> DesiredSecret {
    DesiredSecret {
        name: name.to_owned(),
        content: Some(DockerConfig::from_credentials(registry, user, password, None).to_bytes()),
        source: None,
    }
}

fn checks(fake: &Arc<Fake>, options: CheckOptions) -> (Checks, Arc<Mutex<Vec<ManagerId>>>) {
    let checks = Checks::new(options, fake.clone(), None);
    let changed = Arc::new(Mutex::new(Vec::new()));
    let sink = changed.clone();
    checks.on_change(Arc::new(move |id| {
        sink.lock().expect("changed").push(id.clone())
    }));
    tokio::spawn(checks.clone().run());
    (checks, changed)
}

/// Lets the spawned run loop and the checks it started make progress.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// The checks part of what the reconcile gets back.
fn observe(
    checks: &Checks,
    manager: &ManagerId,
    verify: bool,
    secrets: &[DesiredSecret],
) -> Vec<CredentialCheck> {
    checks.observe(manager, verify, secrets).checks
}

fn results(report: &[CredentialCheck]) -> Vec<CheckResult> {
    report.iter().map(|c| c.result).collect()
}

#[tokio::test(start_paused = true)]
async fn a_hundred_managers_sharing_ten_credentials_make_ten_checks_per_period() {
    let fake = Arc::new(Fake::default());
    let (checks, _) = checks(&fake, CheckOptions::default());
    for m in 0..100 {
        let c = m % 10;
        let report = observe(
            &checks,
            &cluster(&format!("m{m}")),
            true,
            &[secret(
                "pull",
                "registry.example.com",
                &format!("user{c}"),
                "pw",
            )],
        );
        assert_eq!(report.len(), 1);
    }
    settle().await;
    assert_eq!(fake.calls(), 10, "one check per distinct credential");
    let report = observe(
        &checks,
        &cluster("m3"),
        true,
        &[secret("pull", "registry.example.com", "user3", "pw")],
    );
    assert_eq!(results(&report), [CheckResult::Accepted]);
    assert!(report[0].checked_at.is_some());
    // Within the interval nothing is asked again; past it (and its spread), each once more.
    tokio::time::sleep(DEFAULT_INTERVAL.mul_f64(0.85)).await;
    settle().await;
    assert_eq!(fake.calls(), 10);
    tokio::time::sleep(DEFAULT_INTERVAL.mul_f64(0.3)).await;
    settle().await;
    assert_eq!(fake.calls(), 20, "every credential once per period");
}

#[tokio::test(start_paused = true)]
async fn a_rotated_credential_is_checked_at_once_and_its_managers_are_told() {
    let fake = Arc::new(Fake::default());
    fake.refused
        .lock()
        .expect("refused")
        .insert("old".to_owned());
    let (checks, changed) = checks(&fake, CheckOptions::default());
    let id = cluster("hub");
    let report = observe(
        &checks,
        &id,
        true,
        &[secret("pull", "ghcr.io", "bot", "old")],
    );
    assert_eq!(results(&report), [CheckResult::Pending]);
    settle().await;
    assert_eq!(
        changed.lock().expect("changed").as_slice(),
        std::slice::from_ref(&id)
    );
    let report = observe(
        &checks,
        &id,
        true,
        &[secret("pull", "ghcr.io", "bot", "old")],
    );
    assert_eq!(results(&report), [CheckResult::Rejected]);
    assert_eq!(report[0].message.as_deref(), Some("ghcr.io answered 401"));

    // The source is fixed: the new credential is checked without waiting for the period.
    let report = observe(
        &checks,
        &id,
        true,
        &[secret("pull", "ghcr.io", "bot", "new")],
    );
    assert_eq!(results(&report), [CheckResult::Pending]);
    settle().await;
    assert_eq!(fake.calls(), 2);
    assert_eq!(changed.lock().expect("changed").len(), 2);
    let report = observe(
        &checks,
        &id,
        true,
        &[secret("pull", "ghcr.io", "bot", "new")],
    );
    assert_eq!(results(&report), [CheckResult::Accepted]);
}

#[tokio::test(start_paused = true)]
async fn a_revoked_credential_is_found_by_the_periodic_check() {
    let fake = Arc::new(Fake::default());
    let options = CheckOptions {
        interval: Duration::from_secs(60),
        ..CheckOptions::default()
    };
    let (checks, changed) = checks(&fake, options);
    let id = cluster("c");
    let secrets = [secret("pull", "ghcr.io", "bot", "pw")];
    observe(&checks, &id, true, &secrets);
    settle().await;
    assert_eq!(
        results(&observe(&checks, &id, true, &secrets)),
        [CheckResult::Accepted]
    );
    fake.refused
        .lock()
        .expect("refused")
        .insert("pw".to_owned());
    tokio::time::sleep(Duration::from_secs(70)).await;
    settle().await;
    assert_eq!(
        results(&observe(&checks, &id, true, &secrets)),
        [CheckResult::Rejected]
    );
    assert_eq!(changed.lock().expect("changed").len(), 2);
    // Checked again with the same result: no reconcile is asked for.
    tokio::time::sleep(Duration::from_secs(70)).await;
    settle().await;
    assert_eq!(fake.calls(), 3);
    assert_eq!(changed.lock().expect("changed").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn verify_off_checks_nothing_unless_every_manager_is_checked() {
    let fake = Arc::new(Fake::default());
    let (checks, _) = checks(&fake, CheckOptions::default());
    let secrets = [secret("pull", "ghcr.io", "bot", "pw")];
    assert!(observe(&checks, &cluster("c"), false, &secrets).is_empty());
    settle().await;
    assert_eq!(fake.calls(), 0);

    let all = CheckOptions {
        all_managers: true,
        ..CheckOptions::default()
    };
    let (checks, _) = self::checks(&fake, all);
    assert_eq!(observe(&checks, &cluster("c"), false, &secrets).len(), 1);
    settle().await;
    assert_eq!(fake.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_tenant_cannot_make_the_controller_probe_hosts_of_its_choosing() {
    let fake = Arc::new(Fake::default());
    let (checks, _) = checks(&fake, CheckOptions::default());
    let tenant = namespaced("team-a", "pulls");
    let report = observe(
        &checks,
        &tenant,
        true,
        &[secret("pull", "10.0.0.1:6443", "u", "p")],
    );
    assert_eq!(results(&report), [CheckResult::Unchecked]);
    assert!(
        report[0]
            .message
            .as_deref()
            .is_some_and(|m| m.contains("--registry-check-hosts")),
        "{report:?}"
    );
    settle().await;
    assert_eq!(fake.calls(), 0, "no request for a tenant's host");

    let listed = CheckOptions {
        hosts: vec!["*.example.com".to_owned()],
        ..CheckOptions::default()
    };
    let (checks, _) = self::checks(&fake, listed);
    let report = observe(
        &checks,
        &tenant,
        true,
        &[
            secret("listed", "registry.example.com", "u", "p"),
            secret("other", "10.0.0.1:6443", "u", "p"),
        ],
    );
    assert_eq!(
        results(&report),
        [CheckResult::Pending, CheckResult::Unchecked]
    );
    // The list binds cluster managers too.
    let report = observe(
        &checks,
        &cluster("c"),
        true,
        &[secret("other", "10.0.0.1:6443", "u", "p")],
    );
    assert_eq!(results(&report), [CheckResult::Unchecked]);
    settle().await;
    assert_eq!(fake.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn wildcard_keys_are_unchecked_and_docker_hub_is_checked_at_its_api_host() {
    let fake = Arc::new(Fake::default());
    let (checks, _) = checks(&fake, CheckOptions::default());
    let report = observe(
        &checks,
        &cluster("c"),
        true,
        &[
            secret("glob", "*.example.com", "u", "p"),
            secret("hub", "docker.io", "u", "p"),
        ],
    );
    assert_eq!(
        results(&report),
        [CheckResult::Unchecked, CheckResult::Pending]
    );
    settle().await;
    assert_eq!(
        fake.calls.lock().expect("calls").as_slice(),
        [("registry-1.docker.io".to_owned(), "u".to_owned())]
    );
}

#[tokio::test(start_paused = true)]
async fn no_more_checks_run_at_once_than_the_concurrency() {
    let fake = Arc::new(Fake {
        delay: Duration::from_secs(1),
        ..Fake::default()
    });
    let options = CheckOptions {
        concurrency: 3,
        ..CheckOptions::default()
    };
    let (checks, _) = checks(&fake, options);
    for n in 0..12 {
        observe(
            &checks,
            &cluster(&format!("m{n}")),
            true,
            &[secret("pull", "ghcr.io", &format!("u{n}"), "p")],
        );
    }
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        settle().await;
    }
    assert_eq!(fake.calls(), 12);
    assert_eq!(fake.most.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_registry_backs_off_and_is_never_called_a_rejection() {
    let fake = Arc::new(Fake::default());
    fake.down.lock().expect("down").insert("ghcr.io".to_owned());
    let (checks, _) = checks(&fake, CheckOptions::default());
    let id = cluster("c");
    let secrets = [
        secret("a", "ghcr.io", "u1", "p"),
        secret("b", "ghcr.io", "u2", "p"),
    ];
    observe(&checks, &id, true, &secrets);
    settle().await;
    assert_eq!(fake.calls(), 2);
    assert_eq!(
        results(&observe(&checks, &id, true, &secrets)),
        [CheckResult::Unreachable, CheckResult::Unreachable]
    );
    // Not before the first retry; then each failure doubles the wait.
    tokio::time::sleep(FIRST_RETRY - Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(fake.calls(), 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    settle().await;
    let after_first_retry = fake.calls();
    assert!(after_first_retry > 2, "retried after {FIRST_RETRY:?}");
    tokio::time::sleep(FIRST_RETRY * 2 - Duration::from_secs(2)).await;
    settle().await;
    assert_eq!(fake.calls(), after_first_retry, "the wait doubled");
    // The registry is back: the next retry finds the credentials accepted.
    fake.down.lock().expect("down").clear();
    tokio::time::sleep(FIRST_RETRY * 8).await;
    settle().await;
    assert_eq!(
        results(&observe(&checks, &id, true, &secrets)),
        [CheckResult::Accepted, CheckResult::Accepted]
    );
}

#[tokio::test(start_paused = true)]
async fn a_forgotten_manager_s_credentials_are_no_longer_checked() {
    let fake = Arc::new(Fake::default());
    let options = CheckOptions {
        interval: Duration::from_secs(60),
        ..CheckOptions::default()
    };
    let (checks, _) = checks(&fake, options);
    observe(
        &checks,
        &cluster("c"),
        true,
        &[secret("pull", "ghcr.io", "u", "p")],
    );
    settle().await;
    assert_eq!(fake.calls(), 1);
    checks.forget(&cluster("c"));
    tokio::time::sleep(Duration::from_secs(600)).await;
    settle().await;
    assert_eq!(fake.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_gauges_count_rejections_per_kind_and_show_docker_hub_s_allowance() {
    let fake = Arc::new(Fake {
        allowance: Some(Allowance::Limited {
            limit: 100,
            remaining: 7,
            window: Some(Duration::from_secs(21_600)),
        }),
        ..Fake::default()
    });
    fake.refused
        .lock()
        .expect("refused")
        .insert("bad".to_owned());
    let metrics = Arc::new(Metrics::new());
    let checks = Checks::new(CheckOptions::default(), fake.clone(), Some(metrics.clone()));
    tokio::spawn(checks.clone().run());
    let hub = [secret("dockerhub", "https://index.docker.io/v1/", "u", "p")];
    let bad = [secret("pull", "ghcr.io", "u", "bad")];
    observe(&checks, &cluster("hub"), true, &hub);
    observe(&checks, &cluster("a"), true, &bad);
    observe(&checks, &cluster("b"), true, &bad);
    settle().await;
    observe(&checks, &cluster("hub"), true, &hub);
    observe(&checks, &cluster("a"), true, &bad);
    observe(&checks, &cluster("b"), true, &bad);
    let text = metrics.encode().expect("encoded");
    for line in [
        "cheiron_credential_rejected{manager_kind=\"ClusterImagePullSecretManager\"} 2",
        "cheiron_credential_rejected{manager_kind=\"ImagePullSecretManager\"} 0",
        "cheiron_registry_pulls_remaining{registry=\"https://index.docker.io/v1/\",entry=\"hub/dockerhub\"} 7",
        "cheiron_registry_pulls_limit{registry=\"https://index.docker.io/v1/\",entry=\"hub/dockerhub\"} 100",
        "cheiron_registry_check_total{result=\"rejected\"} 1",
        "cheiron_registry_check_total{result=\"accepted\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    checks.forget(&cluster("a"));
    checks.forget(&cluster("hub"));
    let text = metrics.encode().expect("encoded");
    assert!(
        text.contains(
            "cheiron_credential_rejected{manager_kind=\"ClusterImagePullSecretManager\"} 1"
        ),
        "{text}"
    );
    assert!(
        !text.contains("hub/dockerhub"),
        "a forgotten manager's series stay: {text}"
    );
}

fn refused(pod: &str, registry: &str) -> PullFailure {
    PullFailure {
        namespace: "team".to_owned(),
        pod: pod.to_owned(),
        image: format!("{registry}/app:1"),
        secret: "pull".to_owned(),
        registry: registry.to_owned(),
        since: Time(Timestamp::UNIX_EPOCH),
    }
}

#[tokio::test(start_paused = true)]
async fn refused_pulls_are_listed_for_an_hour_and_warned_once_per_registry_and_window() {
    let fake = Arc::new(Fake::default());
    let (checks, changed) = checks(&fake, CheckOptions::default());
    let id = cluster("c");
    assert_eq!(checks.observe(&id, false, &[]).pull_failures, None);
    assert!(
        checks.pull_refused(&id, refused("a", "ghcr.io")),
        "the first one warns"
    );
    assert!(
        !checks.pull_refused(&id, refused("b", "ghcr.io")),
        "the same registry waits"
    );
    assert!(
        checks.pull_refused(&id, refused("c", "quay.io")),
        "another registry warns"
    );
    assert_eq!(
        changed.lock().expect("changed").len(),
        3,
        "each asks for a reconcile"
    );
    for n in 0..10 {
        checks.pull_refused(&id, refused(&format!("p{n}"), "ghcr.io"));
    }
    // Reported whether or not the manager's credentials are checked.
    let report = checks
        .observe(&id, false, &[])
        .pull_failures
        .expect("failures");
    assert_eq!(report.count, 13);
    assert_eq!(report.recent.len(), PULL_FAILURES_LISTED);
    assert_eq!(report.recent[0].pod, "p9", "newest first");
    assert!(
        checks
            .observe(&cluster("other"), true, &[])
            .pull_failures
            .is_none()
    );

    tokio::time::sleep(PULL_FAILURE_EVENT_WINDOW).await;
    assert!(
        checks.pull_refused(&id, refused("d", "ghcr.io")),
        "a new window warns again"
    );
    tokio::time::sleep(PULL_FAILURE_WINDOW - PULL_FAILURE_EVENT_WINDOW).await;
    let report = checks
        .observe(&id, true, &[])
        .pull_failures
        .expect("failures");
    assert_eq!(report.count, 1, "only the last hour counts");
    tokio::time::sleep(PULL_FAILURE_WINDOW).await;
    assert_eq!(checks.observe(&id, true, &[]).pull_failures, None);
    checks.pull_refused(&id, refused("e", "ghcr.io"));
    checks.forget(&id);
    assert_eq!(checks.observe(&id, true, &[]).pull_failures, None);
}
