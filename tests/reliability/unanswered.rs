//! A connection to the apiserver that stops answering (its packets lost, the connection left
//! open): a request sent over it is given up at its deadline instead of waiting for an answer
//! that does not come, and once the path is back the next request goes out and is answered.
//! Both clients cheiron builds are tried: the bounded one of the webhook, the node agent and
//! the CLI, and the controller's paced one. And a controller whose reconcile, or a node agent
//! whose report, the apiserver does not answer still stops soon after SIGTERM. And a watch
//! whose connection lost its apiserver end without a word learns it from its TCP keep-alive
//! and resumes.

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use cheiron::node::report::lease_name;
use cheiron_runtime::runtime::{
    API_REQUEST_DEADLINE, bounded_client,
    connection::DEAD_AFTER,
    pace::{Pace, paced_client},
};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{Namespace, Node},
};
use kube::{
    Api, Client, ResourceExt as _,
    api::{ObjectMeta, PostParams},
    config::Kubeconfig,
    runtime::{WatchStreamExt as _, watcher},
};

use crate::{
    fault_cluster::{FaultCluster, serial},
    harness::{
        ControlPlaneOptions, Result,
        controller::{CheironProcess, READY_WITHIN},
        partition::Partition,
        wait_for,
    },
};

/// The deadline of the clients under test (cheiron's is 70 s: the apiserver's own 60 s and
/// room for the answer).
const DEADLINE: Duration = Duration::from_secs(3);

/// The two clients cheiron builds, from `kubeconfig`, each request bounded by `deadline`: the
/// bounded one of the webhook, the node agent and the CLI, and the controller's paced one.
async fn both_clients(
    kubeconfig: &Path,
    deadline: Duration,
) -> Result<[(&'static str, Client); 2]> {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok([
        ("bounded", bounded_client(config.clone(), deadline)?),
        (
            "paced",
            paced_client(config, Arc::new(Pace::new(16)), deadline)?,
        ),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_an_apiserver_that_stops_answering_is_given_up_at_its_deadline() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("unanswered", ControlPlaneOptions::default()).await?;
    let (partition, kubeconfig) = cluster.partitioned("partitioned").await?;
    let clients = both_clients(&kubeconfig, DEADLINE).await?;
    for (kind, client) in clients {
        let namespaces: Api<Namespace> = Api::all(client);
        // A connection is open and answering.
        namespaces.get("default").await?;

        partition.cut();
        let sent = Instant::now();
        let outcome = tokio::time::timeout(DEADLINE * 5, namespaces.get("default")).await;
        let waited = sent.elapsed();
        partition.heal();
        let error = match outcome {
            Err(_) => {
                return Err(format!(
                    "{kind} client: still waiting for an answer {waited:?} after the request \
                     was sent over the cut connection (deadline {DEADLINE:?})"
                )
                .into());
            }
            Ok(Ok(_)) => return Err(format!("{kind} client: answered while cut").into()),
            Ok(Err(e)) => e,
        };
        let line = error.to_string();
        assert!(
            line.contains("did not answer GET /api/v1/namespaces/default within 3s"),
            "{kind} client: {line}"
        );
        assert!(
            waited >= DEADLINE,
            "{kind} client: given up after {waited:?}"
        );
        eprintln!("{kind} client: given up {waited:?} after it was sent: {line}");

        // Healed: the next request goes out (over a new connection) and is answered.
        let answered = Instant::now();
        namespaces.get("default").await?;
        eprintln!(
            "{kind} client: the next request answered in {:?}",
            answered.elapsed()
        );
    }
    Ok(())
}

/// A watch of Namespaces through the forwarder, its initial list done and an event seen over
/// it; then the forwarder's end of its connection vanishes (reset, the reset lost) and a
/// Namespace is created. With TCP keep-alive the watch hears of it from its first probe's
/// reset and resumes over a new connection within [`DEAD_AFTER`]; without, it would sit on
/// the dead connection until kube-runtime's idle bound (295 s after its last event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_apiserver_end_vanished_resumes_within_the_keep_alive_bound() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("vanished", ControlPlaneOptions::default()).await?;
    let (partition, kubeconfig) = cluster.partitioned("vanishing").await?;
    let clients = both_clients(&kubeconfig, API_REQUEST_DEADLINE).await?;
    let namespaces: Api<Namespace> = Api::all(cluster.client().clone());
    let create = |name: String| {
        let namespaces = namespaces.clone();
        async move {
            let namespace = Namespace {
                metadata: ObjectMeta {
                    name: Some(name),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            namespaces.create(&PostParams::default(), &namespace).await
        }
    };
    for (kind, client) in clients {
        let mut events = watcher(Api::<Namespace>::all(client), watcher::Config::default())
            .default_backoff()
            .boxed();
        // The watch itself is open and idle: its list done, an event came over it, and nothing
        // is in flight.
        let live = format!("live-{kind}");
        tokio::time::timeout(READY_WITHIN, async {
            while let Some(event) = events.try_next().await? {
                match event {
                    watcher::Event::InitDone => {
                        create(live.clone()).await?;
                    }
                    watcher::Event::Apply(ns) if ns.name_any() == live => return Ok(()),
                    _ => {}
                }
            }
            Err::<(), Box<dyn std::error::Error + Send + Sync>>("the watch ended".into())
        })
        .await
        .map_err(|_| format!("{kind} client: {live} not watched within {READY_WITHIN:?}"))??;
        tokio::time::sleep(Duration::from_secs(1)).await;

        partition.vanish().await?;
        let name = format!("vanished-{kind}");
        create(name.clone()).await?;
        let created = Instant::now();
        let bound = DEAD_AFTER + Duration::from_secs(10);
        let mut errors = 0;
        let seen = tokio::time::timeout(bound, async {
            loop {
                match events.next().await {
                    Some(Ok(watcher::Event::Apply(ns) | watcher::Event::InitApply(ns)))
                        if ns.name_any() == name =>
                    {
                        return true;
                    }
                    Some(Err(_)) => errors += 1,
                    Some(Ok(_)) => {}
                    None => return false,
                }
            }
        })
        .await;
        let waited = created.elapsed();
        match seen {
            Ok(true) => {}
            Ok(false) => return Err(format!("{kind} client: the watch ended").into()),
            Err(_) => {
                return Err(format!(
                    "{kind} client: Namespace {name} not seen {waited:?} after it was created: \
                     the watch still waits on the connection whose other end vanished"
                )
                .into());
            }
        }
        eprintln!(
            "{kind} client: the watch saw {name} {waited:?} after it was created \
             ({errors} watch errors on the way)"
        );
        assert!(
            errors > 0,
            "{kind} client: the watch resumed without an error"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_agent_whose_report_gets_no_answer_stops_at_once_on_sigterm() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("agent-unanswered", ControlPlaneOptions::default()).await?;
    let s = cluster.scenario();
    let node = s.unique_name("node");
    let pool = s.unique_name("pool");
    Api::<Node>::all(cluster.client().clone())
        .create(
            &PostParams::default(),
            &Node {
                metadata: ObjectMeta {
                    name: Some(node.clone()),
                    labels: Some([("pool".to_owned(), pool.clone())].into()),
                    ..ObjectMeta::default()
                },
                ..Node::default()
            },
        )
        .await?;
    let controller = CheironProcess::controller_on(&cluster.host(), "controller", &[])?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    s.apply_manager(&format!(
        "
apiVersion: cheiron.anny.co/v1alpha1
kind: ClusterImagePullSecretManager
metadata:
  name: nodes
spec:
  mode: Node
  nodeSelector:
    matchLabels:
      pool: {pool}
  secrets:
    - name: node-pull
      registry: registry.example.com
      username: reliability
      password: node
"
    ))
    .await?;

    // The agent reaches the apiserver only through the partition, and writes its node's
    // credentials into this test's directory.
    let (partition, kubeconfig) = cluster.partitioned("agent").await?;
    let credentials = cluster.dir.join("node-credentials.json");
    let credentials_arg = credentials.display().to_string();
    let agent = CheironProcess::node_agent_on(
        &cluster.host_as(&kubeconfig),
        "node-agent",
        &[
            "--node-name",
            &node,
            "--credentials-file",
            &credentials_arg,
            "--resync",
            "1s",
        ],
    )?;
    agent
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let leases: Api<Lease> = Api::namespaced(cluster.client().clone(), "default");
    wait_for(
        "the agent to write its node's credentials and report them",
        Duration::from_secs(60),
        || async {
            if !credentials.is_file() {
                return Err("no credentials file yet".into());
            }
            match leases.get_opt(&lease_name(&node)).await? {
                Some(_) => Ok(()),
                None => Err("no report Lease yet".into()),
            }
        },
    )
    .await?;

    // Cut off, the agent's next sync fails to write the file (a directory stands in its
    // place): its report changes, and the apiserver never answers it.
    partition.cut();
    std::fs::remove_file(&credentials)?;
    std::fs::create_dir(&credentials)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stopped = stop_cut_off(
        &agent,
        &partition,
        Duration::from_secs(20),
        "its report's answer",
    )
    .await?;
    eprintln!("the cut-off node agent exited cleanly {stopped:?} after SIGTERM");
    assert!(
        stopped < Duration::from_secs(5),
        "the cut-off node agent took {stopped:?} to exit on SIGTERM"
    );
    Ok(())
}

/// How long the controller gives the reconciles in progress after SIGTERM (`WORK_GRACE` in
/// `src/cli/controller.rs`).
const WORK_GRACE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_cut_off_mid_reconcile_stops_within_its_grace_on_sigterm() -> Result {
    let _serial = serial().await;
    let cluster =
        FaultCluster::start("reconcile-unanswered", ControlPlaneOptions::default()).await?;
    let namespaces = cluster.create_target_namespaces(300).await?;
    let (partition, kubeconfig) = cluster.partitioned("controller").await?;
    let controller = CheironProcess::controller_on(
        &cluster.host_as(&kubeconfig),
        "controller",
        &["--no-leader-election"],
    )?;
    controller
        .wait_for_admin_status("/readyz", 200, READY_WITHIN)
        .await?;
    let written = cluster
        .apply_manager_until_writing("cut-off", "pull", "p4ss")
        .await?;
    // Its writes in flight now get no answer.
    partition.cut();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let at_cut = cluster.managed_secret_count("pull").await?;
    assert!(
        at_cut < namespaces.len(),
        "the reconcile had finished before the cut ({at_cut} Secrets)"
    );
    let stopped = stop_cut_off(
        &controller,
        &partition,
        Duration::from_secs(30),
        "its reconcile",
    )
    .await?;
    eprintln!(
        "the controller, cut off {written} to {at_cut} Secrets into the reconcile, exited \
         cleanly {stopped:?} after SIGTERM"
    );
    assert!(
        stopped < WORK_GRACE + Duration::from_secs(5),
        "the cut-off controller took {stopped:?} to exit on SIGTERM (grace {WORK_GRACE:?})"
    );
    Ok(())
}

/// Sends `process` SIGTERM while `partition` is cut, waits up to `patience` for it to exit,
/// heals the partition, and returns how long the exit took, once it was a clean one.
/// `waiting_for` says what a process that does not exit is likely waiting for.
async fn stop_cut_off(
    process: &CheironProcess,
    partition: &Partition,
    patience: Duration,
    waiting_for: &str,
) -> Result<Duration> {
    process.check_running()?;
    let stopping = Instant::now();
    process.terminate();
    let exit = wait_for(
        format!("the cut-off {} to exit on SIGTERM", process.name()),
        patience,
        || async { process.exited().ok_or_else(|| "still running".into()) },
    )
    .await;
    let stopped = stopping.elapsed();
    partition.heal();
    let exit = exit.map_err(|e| {
        format!(
            "{e}; it waited for {waiting_for}\n{}",
            process.log_excerpt(20)
        )
    })?;
    assert!(
        exit.success(),
        "the cut-off {} exits cleanly on SIGTERM: {exit}\n{}",
        process.name(),
        process.log_excerpt(20)
    );
    Ok(stopped)
}
