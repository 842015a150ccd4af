//! The controllers: a new namespace → its pull Secret present, and the rotation of the source
//! copied to 1 000 namespaces, cheiron's controller (a cluster manager in mode Pod, which only
//! writes the Secrets) against Kyverno's `sync-secrets` generate policy (`synchronize: true`,
//! run by its background controller). Both start from a source in `peers-sources`; one watch on
//! every Secret times both.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt, api::PostParams, runtime::watcher};
use serde_json::{Value, json};
use tokio::sync::Notify;

use cheiron_harness::Result;

use crate::{
    args::Args,
    servers::Server,
    setup::{
        Bench, GENERATE, KYVERNO_SEES, SOURCES, apply_yaml, create_namespace, create_pull_secret,
        pull_secret,
    },
};

const LATENCY_NAMESPACES: usize = 100;
const ROTATION_NAMESPACES: usize = 1_000;
const ROTATION_ROUNDS: usize = 3;
const WAIT: Duration = Duration::from_secs(600);

/// Per namespace: the password of the last pull Secret seen there, and when it was first seen.
#[derive(Default)]
struct Seen {
    by_namespace: Mutex<HashMap<String, (String, Instant)>>,
    changed: Notify,
}

fn password(secret: &Secret) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(".dockerconfigjson")?;
    let config: Value = serde_json::from_slice(&bytes.0).ok()?;
    config["auths"]["registry.example.com"]["password"]
        .as_str()
        .map(str::to_owned)
}

impl Seen {
    async fn watch(self: Arc<Self>, client: Client) {
        let api: Api<Secret> = Api::all(client);
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = event {
                let (Some(ns), Some(pw)) = (s.namespace(), password(&s)) else {
                    continue;
                };
                if !(ns.starts_with("gc-") || ns.starts_with("gk-")) {
                    continue;
                }
                if let Ok(mut map) = self.by_namespace.lock() {
                    let entry = map
                        .entry(ns)
                        .or_insert_with(|| (String::new(), Instant::now()));
                    if entry.0 != pw {
                        *entry = (pw, Instant::now());
                    }
                }
                self.changed.notify_waiters();
            }
        }
    }

    /// Those of `namespaces` holding `version` now.
    fn holding(&self, namespaces: &[String], version: &str) -> Result<Vec<String>> {
        let map = self.by_namespace.lock().map_err(|_| "poisoned")?;
        Ok(namespaces
            .iter()
            .filter(|n| map.get(*n).is_some_and(|(v, _)| v == version))
            .cloned()
            .collect())
    }

    /// When each of `namespaces` first held `version`; an error after [`WAIT`]. `servers`
    /// are checked while waiting (and Kyverno's restarted if they exited).
    async fn until(
        &self,
        namespaces: &[String],
        version: &str,
        servers: &mut [Server],
    ) -> Result<Vec<Instant>> {
        let deadline = Instant::now() + WAIT;
        loop {
            for s in servers.iter_mut() {
                s.check_running()?;
            }
            let notified = self.changed.notified();
            let (found, missing) = {
                let map = self.by_namespace.lock().map_err(|_| "poisoned")?;
                let found: Vec<Instant> = namespaces
                    .iter()
                    .filter_map(|n| map.get(n).filter(|(v, _)| v == version).map(|(_, at)| *at))
                    .collect();
                let missing = namespaces.len() - found.len();
                (found, missing)
            };
            if missing == 0 {
                return Ok(found);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{missing}/{} namespaces lack version {version} after {WAIT:?}",
                    namespaces.len()
                )
                .into());
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
        }
    }
}

fn labels(who: &str) -> Vec<(&'static str, &'static str)> {
    if who == "kyverno" {
        vec![(GENERATE, "kyverno"), (KYVERNO_SEES, "true")]
    } else {
        vec![(GENERATE, "cheiron")]
    }
}

fn source(who: &str) -> String {
    format!("pull-{who}")
}

pub async fn run(bench: &mut Bench, _args: &Args) -> Result<Value> {
    for s in &mut bench.servers {
        s.check_running()?;
    }
    let client = bench.client.clone();
    let mut who = vec!["cheiron"];
    if bench.kyverno {
        who.push("kyverno");
    }
    create_pull_secret(&client, SOURCES, &source("cheiron"), "v1").await?;
    apply_yaml(
        &client,
        &format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: generate
spec:
  mode: Pod
  namespaceSelector:
    matchLabels:
      {GENERATE}: cheiron
  secrets:
    - existingSecretRef:
        name: pull-cheiron
        namespace: {SOURCES}
"
        ),
    )
    .await?;
    let seen = Arc::new(Seen::default());
    let watch = tokio::spawn(seen.clone().watch(client.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut out = serde_json::Map::new();
    // Rotation first, so the latency runs find 1 000 copies already there.
    let mut rotation_namespaces = HashMap::new();
    for w in &who {
        let prefix = if *w == "kyverno" { "gk" } else { "gc" };
        let names: Vec<String> = (0..ROTATION_NAMESPACES)
            .map(|i| format!("{prefix}-r-{i}"))
            .collect();
        let created = Instant::now();
        stream::iter(names.iter())
            .map(|n| {
                let client = client.clone();
                let l = labels(w);
                async move { create_namespace(&client, n, &l).await }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<_>>()
            .await?;
        let all = match seen.until(&names, "v1", &mut bench.servers).await {
            Ok(all) => all,
            Err(e) => {
                // A finding about that controller, not the end of the bench: its rotation is
                // timed over the namespaces it did fill, and its new-namespace latency as usual.
                eprintln!("[peers] controller {w}: fill: {e}");
                out.insert(format!("{w}_fill_error"), json!(e.to_string()));
                let filled = seen.holding(&names, "v1")?;
                out.insert(format!("{w}_filled"), json!(filled.len()));
                if !filled.is_empty() {
                    rotation_namespaces.insert(*w, filled);
                }
                continue;
            }
        };
        let last = all.iter().max().copied().unwrap_or(created);
        let fill = last.saturating_duration_since(created);
        eprintln!(
            "[peers] controller {w}: {ROTATION_NAMESPACES} namespaces created and filled in {fill:.1?}"
        );
        out.insert(
            format!("{w}_fill_{ROTATION_NAMESPACES}_s"),
            json!(fill.as_secs_f64()),
        );
        rotation_namespaces.insert(*w, names);
    }
    who.retain(|w| rotation_namespaces.contains_key(w));
    let mut rotations: HashMap<&str, Vec<f64>> = HashMap::new();
    for round in 0..ROTATION_ROUNDS {
        for w in &who {
            let version = format!("rot-{round}");
            let secrets: Api<Secret> = Api::namespaced(client.clone(), SOURCES);
            let mut current = secrets.get(&source(w)).await?;
            current.data = pull_secret(&source(w), &version).data;
            let sent = Instant::now();
            secrets
                .replace(&source(w), &PostParams::default(), &current)
                .await?;
            let result = seen
                .until(&rotation_namespaces[w], &version, &mut bench.servers)
                .await;
            match result {
                Ok(all) => {
                    let took = all
                        .iter()
                        .max()
                        .map(|l| l.saturating_duration_since(sent))
                        .unwrap_or_default();
                    eprintln!(
                        "[peers] controller {w}: rotation round {round} to {} namespaces in {took:.2?}",
                        rotation_namespaces[w].len()
                    );
                    rotations
                        .entry(w)
                        .or_default()
                        .push(took.as_secs_f64() * 1000.0);
                }
                Err(e) => {
                    eprintln!("[peers] controller {w}: rotation round {round}: {e}");
                    out.insert(format!("{w}_rotation_error"), json!(e.to_string()));
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    for (w, mut r) in rotations {
        r.sort_by(f64::total_cmp);
        out.insert(
            format!("{w}_rotation_ms"),
            json!({"median": r.get(r.len() / 2), "runs": r}),
        );
    }

    let mut latencies: HashMap<&str, Vec<Duration>> = HashMap::new();
    for i in 0..LATENCY_NAMESPACES {
        for w in &who {
            let prefix = if *w == "kyverno" { "gk" } else { "gc" };
            let ns = format!("{prefix}-l-{i}");
            let sent = Instant::now();
            create_namespace(&client, &ns, &labels(w)).await?;
            let at = seen
                .until(std::slice::from_ref(&ns), "rot-2", &mut bench.servers)
                .await;
            let at = match at {
                Ok(at) => at,
                // A source whose rotation did not finish: the copy holds whatever it holds.
                Err(_) => {
                    seen.until(std::slice::from_ref(&ns), "v1", &mut bench.servers)
                        .await?
                }
            };
            latencies
                .entry(w)
                .or_default()
                .push(at[0].saturating_duration_since(sent));
        }
        if (i + 1) % 25 == 0 {
            eprintln!(
                "[peers] controller: {}/{LATENCY_NAMESPACES} new namespaces",
                i + 1
            );
        }
    }
    for (w, mut l) in latencies {
        l.sort();
        let (p50, p99) = (
            crate::setup::quantile_ms(&l, 0.5),
            crate::setup::quantile_ms(&l, 0.99),
        );
        eprintln!(
            "[peers] controller {w}: new namespace → Secret present p50 {p50:.1} ms p99 {p99:.1} ms"
        );
        out.insert(
            format!("{w}_new_namespace_ms"),
            json!({"p50": p50, "p99": p99, "max": crate::setup::quantile_ms(&l, 1.0)}),
        );
    }
    watch.abort();
    Ok(Value::Object(out))
}
