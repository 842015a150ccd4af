//! A soak with churn: for `CHEIRON_SOAK_SECONDS` (default 120; `docs/reliability.md` records a
//! 600-second run) namespaces come and go, a manager's scope and password are edited, its
//! source Secret is rotated, and a foreign writer keeps editing the same ServiceAccounts.
//! Afterwards the cluster must be exactly what the rules say, the foreign writer's entries and
//! a foreign Secret in a target's place must be untouched, and the controller's memory flat.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use base64::{Engine, engine::general_purpose::STANDARD};
use cheiron::install::FailurePolicy;
use k8s_openapi::{
    ByteString,
    api::core::v1::{LocalObjectReference, Namespace, Secret, ServiceAccount},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::Value;

use crate::{
    fault_cluster::{
        CONVERGE, FaultCluster, TARGET_LABEL, create_secret, mib, pull_secret, serial,
    },
    harness::{
        Admitted, ControlPlaneOptions, Result,
        controller::{CheironProcess, READY_WITHIN},
        wait_for,
    },
};

/// Namespaces in scope at any time.
const NAMESPACES: usize = 30;
/// One round of churn every this often.
const ROUND: Duration = Duration::from_secs(5);
/// The label manager `b` selects when it is narrowed.
const TIER_B: &str = "reliability.cheiron.anny.co/tier-b";

fn soak_duration() -> Result<Duration> {
    match std::env::var("CHEIRON_SOAK_SECONDS") {
        Ok(s) => Ok(Duration::from_secs(s.parse().map_err(|e| {
            format!("CHEIRON_SOAK_SECONDS={s:?} is not a number of seconds: {e}")
        })?)),
        Err(_) => Ok(Duration::from_secs(120)),
    }
}

fn docker_config(password: &str) -> Vec<u8> {
    let auth = STANDARD.encode(format!("soak:{password}"));
    format!(r#"{{"auths":{{"registry.example.com":{{"auth":"{auth}"}}}}}}"#).into_bytes()
}

/// The `auth` of `registry.example.com` in a dockerconfigjson Secret.
fn auth_of(secret: &Secret) -> Option<String> {
    let bytes = &secret.data.as_ref()?.get(".dockerconfigjson")?.0;
    let config: Value = serde_json::from_slice(bytes).ok()?;
    config["auths"]["registry.example.com"]["auth"]
        .as_str()
        .map(str::to_owned)
}

struct Soak<'a> {
    cluster: &'a FaultCluster,
    client: Client,
    id: String,
    sources_ns: String,
    /// Namespaces in scope now; those with `tier-b` are in `tier_b`.
    live: Vec<String>,
    tier_b: BTreeSet<String>,
    /// The namespace holding a foreign `pull-a` where cheiron would put its own.
    conflict_ns: String,
    /// What the foreign writer last left on each ServiceAccount (`ns/name`).
    foreign_entries: BTreeMap<String, Vec<String>>,
    source_generation: u32,
    b_generation: u32,
    b_narrowed: bool,
    round: u32,
}

impl Soak<'_> {
    fn manager_a(&self) -> String {
        format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: soak-a
spec:
  namespaceSelector:
    matchLabels:
      {TARGET_LABEL}: {id}
  secrets:
    - existingSecretRef:
        name: registry-source
        namespace: {sources}
      name: pull-a
",
            id = self.id,
            sources = self.sources_ns
        )
    }

    fn manager_b(&self) -> String {
        let narrowed = if self.b_narrowed {
            format!("\n      {TIER_B}: \"true\"")
        } else {
            String::new()
        };
        format!(
            "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: soak-b
spec:
  namespaceSelector:
    matchLabels:
      {TARGET_LABEL}: {id}{narrowed}
  secrets:
    - name: pull-b
      registry: registry.example.com
      username: soak
      password: b-{generation}
",
            id = self.id,
            generation = self.b_generation
        )
    }

    async fn create_target(&mut self) -> Result<()> {
        let tier_b = self.round.is_multiple_of(2);
        let mut labels = vec![(TARGET_LABEL, self.id.as_str())];
        if tier_b {
            labels.push((TIER_B, "true"));
        }
        let ns = self
            .cluster
            .scenario()
            .create_namespace(&labels, &[])
            .await?;
        if tier_b {
            self.tier_b.insert(ns.clone());
        }
        self.live.push(ns);
        Ok(())
    }

    async fn delete_oldest_target(&mut self) -> Result<()> {
        // The conflict namespace stays for the final check.
        let Some(index) = self.live.iter().position(|n| *n != self.conflict_ns) else {
            return Ok(());
        };
        let ns = self.live.remove(index);
        self.tier_b.remove(&ns);
        self.foreign_entries
            .retain(|k, _| !k.starts_with(&format!("{ns}/")));
        Api::<Namespace>::all(self.client.clone())
            .delete(&ns, &DeleteParams::default())
            .await?;
        Ok(())
    }

    async fn rotate_source(&mut self) -> Result<()> {
        self.source_generation += 1;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.sources_ns);
        let patch = serde_json::json!({"data": {".dockerconfigjson":
            STANDARD.encode(docker_config(&format!("a-{}", self.source_generation)))}});
        secrets
            .patch(
                "registry-source",
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(())
    }

    async fn edit_manager_b(&mut self) -> Result<()> {
        self.b_generation += 1;
        self.b_narrowed = !self.b_narrowed;
        self.cluster
            .scenario()
            .apply_manager(&self.manager_b())
            .await?;
        Ok(())
    }

    /// The foreign writer: read-modify-write (with the resourceVersion read, retried on
    /// conflict) of the `default` ServiceAccount of a few namespaces, setting its own entry.
    async fn foreign_write(&mut self) -> Result<()> {
        let picks: Vec<String> = self
            .live
            .iter()
            .skip(self.round as usize % 3)
            .step_by(3)
            .take(4)
            .cloned()
            .collect();
        for ns in picks {
            let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &ns);
            let entry = format!("foreign-{}", self.round);
            for _attempt in 0..10 {
                let Some(mut sa) = api.get_opt("default").await? else {
                    break;
                };
                let mut list = sa.image_pull_secrets.take().unwrap_or_default();
                list.retain(|r| !r.name.starts_with("foreign-"));
                list.push(LocalObjectReference {
                    name: entry.clone(),
                });
                sa.image_pull_secrets = Some(list);
                match api.replace("default", &PostParams::default(), &sa).await {
                    Ok(_) => {
                        self.foreign_entries
                            .insert(format!("{ns}/default"), vec![entry.clone()]);
                        break;
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    async fn churn(&mut self) -> Result<()> {
        self.round += 1;
        self.create_target().await?;
        self.delete_oldest_target().await?;
        self.foreign_write().await?;
        if self.round.is_multiple_of(2) {
            self.rotate_source().await?;
        }
        if self.round.is_multiple_of(3) {
            self.edit_manager_b().await?;
        }
        Ok(())
    }

    /// Everything the rules say, checked against the cluster; `Err` names the first mismatch.
    async fn check(&self) -> Result<()> {
        let source_auth = STANDARD.encode(format!("soak:a-{}", self.source_generation));
        let b_auth = STANDARD.encode(format!("soak:b-{}", self.b_generation));
        let secrets: Api<Secret> = Api::all(self.client.clone());
        let mut held: BTreeMap<(String, String), Secret> = BTreeMap::new();
        for secret in secrets.list(&ListParams::default()).await?.items {
            let ns = secret.namespace().unwrap_or_default();
            if self.live.contains(&ns) {
                held.insert((ns, secret.name_any()), secret);
            }
        }
        for ns in &self.live {
            let b_covers = !self.b_narrowed || self.tier_b.contains(ns);
            if *ns != self.conflict_ns {
                let a = held
                    .get(&(ns.clone(), "pull-a".to_owned()))
                    .ok_or_else(|| format!("{ns}: no pull-a"))?;
                if auth_of(a) != Some(source_auth.clone()) {
                    return Err(format!("{ns}/pull-a holds an old source").into());
                }
            }
            match (held.get(&(ns.clone(), "pull-b".to_owned())), b_covers) {
                (Some(b), true) if auth_of(b) == Some(b_auth.clone()) => {}
                (Some(_), true) => return Err(format!("{ns}/pull-b has an old password").into()),
                (None, true) => return Err(format!("{ns}: no pull-b").into()),
                (Some(_), false) => {
                    return Err(format!("{ns}/pull-b remains out of scope").into());
                }
                (None, false) => {}
            }
            let service_accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
            for sa in service_accounts.list(&ListParams::default()).await?.items {
                let key = format!("{ns}/{}", sa.name_any());
                let names = sa.pull_secret_names();
                let foreign = self.foreign_entries.get(&key).cloned().unwrap_or_default();
                let cheirons: BTreeSet<&str> = names
                    .iter()
                    .map(String::as_str)
                    .filter(|n| n.starts_with("pull-"))
                    .collect();
                let mut want: BTreeSet<&str> = BTreeSet::new();
                if *ns != self.conflict_ns {
                    want.insert("pull-a");
                }
                if b_covers {
                    want.insert("pull-b");
                }
                if *ns == self.conflict_ns {
                    // cheiron does not own this namespace's pull-a; whether it lists it is
                    // not what this check is about.
                    want.extend(cheirons.iter().filter(|n| **n == "pull-a"));
                }
                if cheirons != want {
                    return Err(
                        format!("{key}: cheiron's entries {cheirons:?}, want {want:?}").into(),
                    );
                }
                for f in &foreign {
                    if !names.contains(f) {
                        return Err(format!("{key}: lost the foreign entry {f}: {names:?}").into());
                    }
                }
                let duplicates = names.len() != names.iter().collect::<BTreeSet<_>>().len();
                if duplicates {
                    return Err(format!("{key}: duplicate entries {names:?}").into());
                }
            }
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_churn_soak_the_cluster_is_what_the_rules_say_and_memory_is_flat() -> Result {
    let _serial = serial().await;
    let duration = soak_duration()?;
    let cluster = FaultCluster::start("soak", ControlPlaneOptions::default()).await?;
    let client = cluster.client().clone();
    let s = cluster.scenario();

    let sources_ns = s.create_namespace(&[], &[]).await?;
    let mut source = pull_secret("registry-source", &[], 0);
    source.data = Some(BTreeMap::from([(
        ".dockerconfigjson".to_owned(),
        ByteString(docker_config("a-0")),
    )]));
    create_secret(&client, &sources_ns, &source).await?;

    let webhook = cluster
        .start_registered_webhook("webhook", FailurePolicy::Ignore)
        .await?;
    let controller = CheironProcess::controller_on(
        &cluster.host(),
        "controller",
        &["--no-leader-election", "--resync", "30"],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;

    let mut soak = Soak {
        cluster: &cluster,
        client: client.clone(),
        id: s.id().to_owned(),
        sources_ns,
        live: Vec::new(),
        tier_b: BTreeSet::new(),
        conflict_ns: String::new(),
        foreign_entries: BTreeMap::new(),
        source_generation: 0,
        b_generation: 0,
        b_narrowed: false,
        round: 0,
    };
    for _ in 0..NAMESPACES {
        soak.round += 1;
        soak.create_target().await?;
    }
    // A user's own Secret where cheiron would put pull-a: cheiron must leave it alone.
    soak.conflict_ns = soak.live[0].clone();
    let foreign = create_secret(&client, &soak.conflict_ns, &pull_secret("pull-a", &[], 0)).await?;
    s.apply_manager(&soak.manager_a()).await?;
    s.apply_manager(&soak.manager_b()).await?;
    wait_for("the initial state", CONVERGE, || soak.check()).await?;

    let started = Instant::now();
    let mut rss = Vec::new();
    while started.elapsed() < duration {
        soak.churn().await?;
        controller.check_running()?;
        webhook.check_running()?;
        rss.push((started.elapsed(), controller.rss_bytes()?));
        tokio::time::sleep(ROUND).await;
    }
    let converged = Instant::now();
    wait_for("the state after the churn", CONVERGE, || soak.check())
        .await
        .map_err(|e| format!("{e}\n{}", controller.log_excerpt(30)))?;
    let converged = converged.elapsed();

    let still = Api::<Secret>::namespaced(client.clone(), &soak.conflict_ns)
        .get("pull-a")
        .await?;
    assert_eq!(
        still.resource_version(),
        foreign.resource_version(),
        "the foreign Secret in pull-a's place was never changed"
    );

    // Flat: the last third of the run holds no more than the first third after warm-up, plus
    // allocator noise.
    let third = rss.len() / 3;
    let early = rss[..third.max(1)]
        .iter()
        .map(|(_, r)| *r)
        .max()
        .unwrap_or(0);
    let late = rss[rss.len() - third.max(1)..]
        .iter()
        .map(|(_, r)| *r)
        .max()
        .unwrap_or(0);
    eprintln!(
        "soak {duration:?}, {} rounds: converged {converged:.1?} after the churn stopped; \
         controller RSS first third max {:.1} MiB, last third max {:.1} MiB; samples {:?}",
        soak.round,
        mib(early),
        mib(late),
        rss.iter()
            .map(|(t, r)| format!("{}s:{:.1}", t.as_secs(), mib(*r)))
            .collect::<Vec<_>>()
    );
    let slack = early / 10 + 4 * 1024 * 1024;
    assert!(
        late <= early + slack,
        "controller memory grew during the soak: {:.1} MiB early, {:.1} MiB late",
        mib(early),
        mib(late)
    );
    Ok(())
}
