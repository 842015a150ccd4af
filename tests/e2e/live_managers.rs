//! Managers created or changed while the webhook runs take effect within seconds, without a
//! restart: the webhook watches them.

use std::time::{Duration, Instant};

use cheiron::api::annotation::{RECONCILE_WITH, RECONCILED};
use k8s_openapi::api::core::v1::ServiceAccount;

use crate::{
    CHEIRON,
    harness::{Admitted, Result, Scenario, service_account, wait_for},
};

/// "Within seconds".
const HONOURED_WITHIN: Duration = Duration::from_secs(10);

/// Creates ServiceAccounts (for real, `generateName: after-`) until one is stored with
/// exactly `expected`, and returns it.
async fn first_service_account_with(
    s: &Scenario,
    ns: &str,
    expected: &[&str],
) -> Result<ServiceAccount> {
    let mut template = service_account("unused", &[], &[]);
    template.metadata.name = None;
    template.metadata.generate_name = Some("after-".to_owned());
    wait_for(
        format!("a new ServiceAccount in {ns} to be stored with {expected:?}"),
        HONOURED_WITHIN,
        || async {
            let sa = s.create_service_account(ns, &template).await?;
            if sa.pull_secret_names() == expected {
                Ok(sa)
            } else {
                Err(format!("stored with {:?}", sa.pull_secret_names()).into())
            }
        },
    )
    .await
}

fn manager(ns: &str, secrets: &[&str]) -> String {
    let entries: String = secrets
        .iter()
        .map(|name| format!("    - existingSecretRef:\n        name: {name}\n"))
        .collect();
    format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: live
  namespace: {ns}
spec:
  secrets:
{entries}"
    )
}

#[tokio::test]
async fn manager_created_or_changed_while_the_webhook_runs_is_honoured_within_seconds() -> Result {
    let s = Scenario::new(CHEIRON, "live").await?;
    let ns = s.create_namespace(&[], &[]).await?;
    let before = s
        .create_service_account(&ns, &service_account("before", &[], &[]))
        .await?;
    assert_eq!(
        before.pull_secret_names(),
        Vec::<String>::new(),
        "no manager yet"
    );
    assert_eq!(before.annotation(RECONCILED), None);

    let created = Instant::now();
    s.apply_manager(&manager(&ns, &["first-pull"])).await?;
    let after = first_service_account_with(&s, &ns, &["first-pull"]).await?;
    eprintln!("new manager honoured after {:?}", created.elapsed());
    assert_eq!(after.annotation(RECONCILE_WITH), Some("first-pull"));

    let changed = Instant::now();
    s.apply_manager(&manager(&ns, &["second-pull", "third-pull"]))
        .await?;
    let after_change = first_service_account_with(&s, &ns, &["second-pull", "third-pull"]).await?;
    eprintln!("changed manager honoured after {:?}", changed.elapsed());
    assert_eq!(
        after_change.annotation(RECONCILE_WITH),
        Some("second-pull,third-pull")
    );
    Ok(())
}
