//! Watches that say when cheiron has converged: every expected Secret exists and every
//! ServiceAccount of the measured set has every expected entry.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::{
    Api, Client, ResourceExt,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use tokio::sync::oneshot;

use cheiron_harness::Result;

use crate::objects::{Shape, cluster_secret, index_of};

/// Watches of cheiron's Secrets and of the ServiceAccounts that note when every expected
/// Secret exists and every ServiceAccount of the measured set has every expected entry.
pub struct Convergence {
    done: oneshot::Receiver<Instant>,
    watch: tokio::task::JoinHandle<()>,
}

impl Convergence {
    pub async fn start(client: &Client, n: usize, shape: Shape) -> Result<Self> {
        let expected = move |i: usize| -> Vec<String> {
            shape
                .managers_of_namespace(i)
                .into_iter()
                .map(cluster_secret)
                .collect()
        };
        let secrets_expected: usize = (0..n).map(|i| expected(i).len()).sum();
        let accounts_expected = n * shape.accounts;
        let secrets: Api<PartialObjectMeta<Secret>> = Api::all(client.clone());
        let accounts: Api<ServiceAccount> = Api::all(client.clone());
        let secret_events = watcher(
            secrets,
            watcher::Config::default()
                .labels("app.kubernetes.io/managed-by=cheiron,cheiron.anny.co/manager-kind"),
        )
        .default_backoff()
        .map(|e| e.map(Either::Secret))
        .boxed();
        let account_events = watcher(accounts, watcher::Config::default())
            .default_backoff()
            .map(|e| e.map(Either::Account))
            .boxed();
        let mut events = stream::select(secret_events, account_events);
        let (synced_tx, synced) = oneshot::channel::<()>();
        let (done_tx, done) = oneshot::channel::<Instant>();
        let watch = tokio::spawn(async move {
            let (mut synced_tx, mut done_tx) = (Some(synced_tx), Some(done_tx));
            let mut present: HashSet<(String, String)> = HashSet::new();
            let mut complete: HashSet<(String, String)> = HashSet::new();
            let mut lists_done = 0;
            let mut last_report = Instant::now();
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(e) => e,
                    Err(e) => {
                        eprintln!("[scale]   watch error (retrying): {e}");
                        continue;
                    }
                };
                let (object, deleted) = match event {
                    Either::Secret(watcher::Event::InitDone)
                    | Either::Account(watcher::Event::InitDone) => {
                        lists_done += 1;
                        if lists_done == 2
                            && let Some(tx) = synced_tx.take()
                        {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    Either::Secret(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                        (Either::Secret(s), false)
                    }
                    Either::Secret(watcher::Event::Delete(s)) => (Either::Secret(s), true),
                    Either::Account(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                        (Either::Account(s), false)
                    }
                    Either::Account(watcher::Event::Delete(s)) => (Either::Account(s), true),
                    _ => continue,
                };
                match object {
                    Either::Secret(s) => {
                        let ns = s.namespace().unwrap_or_default();
                        let wanted =
                            index_of(&ns).is_some_and(|i| expected(i).contains(&s.name_any()));
                        if wanted && !deleted {
                            present.insert((ns, s.name_any()));
                        } else {
                            present.remove(&(ns, s.name_any()));
                        }
                    }
                    Either::Account(sa) => {
                        let ns = sa.namespace().unwrap_or_default();
                        let Some(i) = index_of(&ns) else { continue };
                        let has: HashSet<&str> = sa
                            .image_pull_secrets
                            .iter()
                            .flatten()
                            .map(|r| r.name.as_str())
                            .collect();
                        let key = (ns.clone(), sa.name_any());
                        if !deleted && expected(i).iter().all(|e| has.contains(e.as_str())) {
                            complete.insert(key);
                        } else {
                            complete.remove(&key);
                        }
                    }
                }
                if last_report.elapsed() > Duration::from_secs(15) {
                    eprintln!(
                        "[scale]   {}/{secrets_expected} Secrets, {}/{accounts_expected} ServiceAccounts",
                        present.len(),
                        complete.len()
                    );
                    last_report = Instant::now();
                }
                if present.len() == secrets_expected
                    && complete.len() == accounts_expected
                    && let Some(tx) = done_tx.take()
                {
                    let _ = tx.send(Instant::now());
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(600), synced)
            .await
            .map_err(|_| "the convergence watches did not sync within 600 s")??;
        Ok(Self { done, watch })
    }

    pub async fn done(self, within: Duration) -> Result<Instant> {
        let at = tokio::time::timeout(within, self.done)
            .await
            .map_err(|_| format!("not converged within {within:?}"))??;
        self.watch.abort();
        Ok(at)
    }
}

enum Either<S, A> {
    Secret(S),
    Account(A),
}
