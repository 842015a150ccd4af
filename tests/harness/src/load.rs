//! Pod-create load through the apiserver, as a busy cluster produces it, and a tally of what
//! admission did to every Pod: injected, admitted without the secret, or refused.
//!
//! Creates are dry runs (`?dryRun=All`): the apiserver runs the whole admission chain, webhook
//! included (cheiron declares `sideEffects: None`), and answers with the object it would store,
//! but nothing accumulates in etcd however long the load runs.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::PostParams};
use tokio::task::JoinHandle;

use super::{Admitted, Result, pod};

/// What happened to one Pod create.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Admitted with the expected pull secret.
    Injected,
    /// Admitted without it: a webhook that failed under `failurePolicy: Ignore`.
    Missing,
    /// Refused by the apiserver (with `failurePolicy: Fail`, a webhook that did not answer).
    Refused(String),
}

/// One create: when it was sent (since the load started), how long it took, what happened.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When the create was sent, from the start of the load.
    pub at: Duration,
    /// Until the apiserver answered.
    pub took: Duration,
    /// What admission did.
    pub outcome: Outcome,
}

/// Every create of a [`PodLoad`], in the order they finished.
#[derive(Debug, Default)]
pub struct Tally {
    /// All samples.
    pub samples: Vec<Sample>,
}

impl Tally {
    /// Creates admitted with the secret.
    pub fn injected(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Injected))
    }

    /// Creates admitted without it.
    pub fn missing(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Missing))
    }

    /// Creates refused.
    pub fn refused(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Refused(_)))
    }

    /// Creates that did not end with the secret (missing or refused).
    pub fn failed(&self) -> impl Iterator<Item = &Sample> {
        self.samples
            .iter()
            .filter(|s| !matches!(s.outcome, Outcome::Injected))
    }

    /// The `q` quantile (0..=1) of the create latency.
    pub fn latency_quantile(&self, q: f64) -> Duration {
        let mut took: Vec<Duration> = self.samples.iter().map(|s| s.took).collect();
        took.sort();
        if took.is_empty() {
            return Duration::ZERO;
        }
        let index = ((took.len() - 1) as f64 * q).round() as usize;
        took[index.min(took.len() - 1)]
    }

    /// A one-line summary for test messages and figures.
    pub fn summary(&self) -> String {
        let first_failures: Vec<String> = self
            .failed()
            .take(3)
            .map(|s| format!("at {:.1?}: {:?}", s.at, s.outcome))
            .collect();
        format!(
            "{} creates: {} injected, {} admitted without the secret, {} refused; latency p50 {:.1?}, p99 {:.1?}{}",
            self.samples.len(),
            self.injected(),
            self.missing(),
            self.refused(),
            self.latency_quantile(0.5),
            self.latency_quantile(0.99),
            if first_failures.is_empty() {
                String::new()
            } else {
                format!("; first failures: {}", first_failures.join("; "))
            }
        )
    }

    fn count(&self, matches: impl Fn(&Outcome) -> bool) -> usize {
        self.samples.iter().filter(|s| matches(&s.outcome)).count()
    }
}

/// Workers creating Pods in one namespace until stopped.
pub struct PodLoad {
    started: Instant,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<Vec<Sample>>>,
}

impl PodLoad {
    /// Starts `workers` workers, each creating a Pod every `interval` (or as fast as the
    /// apiserver answers, if slower), expecting `secret` in every admitted Pod.
    pub fn start(
        client: &Client,
        namespace: &str,
        secret: &str,
        workers: usize,
        interval: Duration,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let workers = (0..workers)
            .map(|worker| {
                let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
                let stop = stop.clone();
                let secret = secret.to_owned();
                tokio::spawn(async move {
                    let params = PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    };
                    let body = pod(&format!("load-{worker}-"), &[], &[], &[]);
                    let mut ticks = tokio::time::interval(interval);
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    let mut samples = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        ticks.tick().await;
                        let sent = Instant::now();
                        let outcome = match pods.create(&params, &body).await {
                            Ok(created) if created.pull_secret_names().contains(&secret) => {
                                Outcome::Injected
                            }
                            Ok(_) => Outcome::Missing,
                            Err(e) => Outcome::Refused(e.to_string()),
                        };
                        samples.push(Sample {
                            at: sent - start,
                            took: sent.elapsed(),
                            outcome,
                        });
                    }
                    samples
                })
            })
            .collect();
        Self {
            started: start,
            stop,
            workers,
        }
    }

    /// Time since the load started (what [`Sample::at`] counts from).
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops the workers (each finishes its create in flight) and returns every sample.
    pub async fn stop(self) -> Result<Tally> {
        self.stop.store(true, Ordering::Relaxed);
        let mut samples = Vec::new();
        for worker in self.workers {
            samples.extend(worker.await?);
        }
        samples.sort_by_key(|s| s.at);
        Ok(Tally { samples })
    }
}
