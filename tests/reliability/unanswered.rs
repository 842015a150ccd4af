//! A connection to the apiserver that stops answering (its packets lost, the connection left
//! open): a request sent over it is given up at its deadline instead of waiting for an answer
//! that does not come, and once the path is back the next request goes out and is answered.
//! Both clients cheiron builds are tried: the bounded one of the webhook, the node agent and
//! the CLI, and the controller's paced one.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use cheiron_runtime::runtime::{
    bounded_client,
    pace::{Pace, paced_client},
};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, config::Kubeconfig};

use crate::{
    fault_cluster::{FaultCluster, serial},
    harness::{ControlPlaneOptions, Result},
};

/// The deadline of the clients under test (cheiron's is 70 s: the apiserver's own 60 s and
/// room for the answer).
const DEADLINE: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_an_apiserver_that_stops_answering_is_given_up_at_its_deadline() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("unanswered", ControlPlaneOptions::default()).await?;
    let (partition, kubeconfig) = cluster.partitioned("partitioned").await?;
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let clients = [
        ("bounded", bounded_client(config.clone(), DEADLINE)?),
        (
            "paced",
            paced_client(config, Arc::new(Pace::new(16)), DEADLINE)?,
        ),
    ];
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
