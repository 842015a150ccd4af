//! `cheiron run`: one process serves the webhook and runs the (leader-elected) controller.

use std::collections::BTreeMap;

use cheiron::install::{WebhookClient, WebhookRegistration};
use k8s_openapi::api::{
    admissionregistration::v1::MutatingWebhookConfiguration, coordination::v1::Lease,
};
use kube::{Api, api::PostParams};

use crate::{
    harness::{
        Admitted, Result,
        controller::{CheironProcess, READY_WITHIN},
        register, service_account,
    },
    scenario::ControllerScenario,
};

#[tokio::test]
async fn cheiron_run_serves_the_webhook_and_runs_the_controller_in_one_process() -> Result {
    let s = ControllerScenario::without_shared_controller("run").await?;
    let cluster = s.cluster()?;
    let lease_ns = s.create_namespace(&[], &[]).await?;
    let lease = s.unique_name("lease");
    let run = CheironProcess::run(
        &s.unique_name("run"),
        &[
            "--leader-election-namespace",
            &lease_ns,
            "--leader-election-id",
            &lease,
            "--lease-duration",
            "4",
        ],
    )?;
    run.wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;

    // Registered next to the shared webhook, for this test's namespaces only. The apiserver
    // calls mutating webhooks in the order of their configurations' names: this one first.
    let only_here = ("e2e.cheiron.anny.co/run", s.id());
    let mut registration = WebhookRegistration::new(
        format!("cheiron-0-{}", s.id()),
        WebhookClient::Url(run.webhook_url().ok_or("no webhook URL")?),
        "cheiron-system",
    );
    registration.ca_bundle = Some(cluster.webhook_ca_pem().as_bytes().to_vec());
    let mut configuration = registration.configuration();
    for webhook in configuration.webhooks.iter_mut().flatten() {
        if let Some(selector) = webhook.namespace_selector.as_mut() {
            selector.match_labels = Some(BTreeMap::from([(
                only_here.0.to_owned(),
                only_here.1.to_owned(),
            )]));
        }
    }
    register(s.client(), &configuration).await?;

    let ns = s.create_namespace(&[only_here], &[]).await?;
    s.apply(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ImagePullSecretManager
metadata:
  name: run
  namespace: {ns}
spec:
  secrets:
    - name: docker-hub
      registry: https://index.docker.io/v1/
      username: alice
      password: alice-password
"
    ))
    .await?;

    // The controller part: no other controller runs, so the copy is this process's work.
    s.until_secret(&ns, "docker-hub", |_| Ok(()))
        .await
        .map_err(|e| format!("{e}\n{}", run.log_excerpt(30)))?;
    // The counters move once the whole batch of writes has returned, a moment after the copy
    // is visible to a watch: wait for them rather than read them once.
    for counter in [
        "cheiron_reconcile_runs_total",
        "cheiron_secrets_written_total",
    ] {
        s.eventually(
            format!("{counter} to count this process's work"),
            || async {
                match run.metric(counter).await? {
                    value if value > 0.0 => Ok(()),
                    value => Err(format!("{counter} is {value}").into()),
                }
            },
        )
        .await?;
    }
    let leases: Api<Lease> = Api::namespaced(s.client().clone(), &lease_ns);
    let holder = leases
        .get(&lease)
        .await?
        .spec
        .and_then(|spec| spec.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.starts_with(&format!("{}-", run.name())),
        "the controller part is leader-elected: Lease held by {holder:?}"
    );

    // The webhook part: wait until the apiserver calls it (dry-run probes), then create for real.
    let probe = service_account("probe", &[], &[]);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(s.client().clone(), &ns);
    s.eventually("the apiserver to call the cheiron run webhook", || async {
        api.create(&dry_run, &probe).await?;
        let patched = run.metric("cheiron_admission_patches_total").await?;
        if patched > 0.0 {
            Ok(())
        } else {
            Err("no patch from cheiron run yet".into())
        }
    })
    .await?;
    let patches_before = run.metric("cheiron_admission_patches_total").await?;
    let sa = s
        .create_service_account(&ns, &service_account("app", &["own"], &[]))
        .await?;
    assert_eq!(sa.pull_secret_names(), ["own", "docker-hub"]);
    let patches_after = run.metric("cheiron_admission_patches_total").await?;
    assert!(
        patches_after > patches_before,
        "the ServiceAccount was patched by cheiron run ({patches_before} -> {patches_after} patches)"
    );

    Api::<MutatingWebhookConfiguration>::all(s.client().clone())
        .delete(&registration.name, &Default::default())
        .await?;
    let exit = run.stop();
    assert!(
        exit.is_some_and(|e| e.success()),
        "cheiron run exits cleanly on SIGTERM: {exit:?}\n{}",
        run.log_excerpt(20)
    );
    Ok(())
}
