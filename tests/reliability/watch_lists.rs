//! How the webhook lists: by the apiserver's streaming lists (WatchList) where it serves them,
//! in pages where it does not, and either way it injects what the managers say.

use cheiron::install::FailurePolicy;

use crate::{
    fault_cluster::{FaultCluster, TARGET_LABEL, serial},
    harness::{ControlPlaneOptions, Result},
};

/// The kinds the webhook watches; each logs its first list.
const WATCHED: [&str; 4] = [
    "ImagePullSecretManager",
    "ClusterImagePullSecretManager",
    "Namespace",
    "Secret",
];

/// The strategy each watched kind's "first list in" line names, from the webhook's log.
fn first_lists(log: &str) -> Vec<(String, String)> {
    log.lines()
        .filter(|l| l.contains("first list in"))
        .filter_map(|l| {
            let field = |name: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{name}=")))
                    .map(str::to_owned)
            };
            Some((field("kind")?, field("strategy")?))
        })
        .collect()
}

/// Starts a registered webhook on `cluster`, checks the strategy of every watch's first list,
/// then that a ServiceAccount created in a selected namespace gets the manager's Secret.
async fn lists_then_injects(cluster: &FaultCluster, strategy: &str) -> Result<String> {
    let webhook = cluster
        .start_registered_webhook("watch-lists", FailurePolicy::Fail)
        .await?;
    let log = std::fs::read_to_string(webhook.log())?;
    let mut lists = first_lists(&log);
    lists.sort();
    let mut expected: Vec<(String, String)> = WATCHED
        .iter()
        .map(|kind| ((*kind).to_owned(), strategy.to_owned()))
        .collect();
    expected.sort();
    assert_eq!(lists, expected, "{}", webhook.log_excerpt(40));

    let scenario = cluster.scenario();
    let ns = scenario
        .create_namespace(&[(TARGET_LABEL, scenario.id())], &[])
        .await?;
    scenario
        .apply_manager(&cluster.service_account_manager("lists", "lists-pull", "p4ss"))
        .await?;
    scenario
        .until_new_service_account_gets(&ns, "probe", &["lists-pull"])
        .await
        .map_err(|e| format!("{e}\n{}", webhook.log_excerpt(30)))?;
    Ok(log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_lists_by_streaming_where_the_apiserver_serves_it() -> Result {
    let _serial = serial().await;
    let cluster = FaultCluster::start("streaming-lists", ControlPlaneOptions::default()).await?;
    let log = lists_then_injects(&cluster, "Streaming").await?;
    assert!(
        !log.contains("does not serve streaming lists"),
        "a 1.34 apiserver serves streaming lists"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_apiserver_without_streaming_lists_the_webhook_lists_in_pages_and_injects() -> Result
{
    let _serial = serial().await;
    let cluster = FaultCluster::start(
        "paged-lists",
        ControlPlaneOptions {
            apiserver_args: vec!["--feature-gates=WatchList=false".to_owned()],
            ..ControlPlaneOptions::default()
        },
    )
    .await?;
    let log = lists_then_injects(&cluster, "Paged").await?;
    let fallbacks = log
        .lines()
        .filter(|l| l.contains("does not serve streaming lists"))
        .count();
    assert_eq!(
        fallbacks,
        WATCHED.len(),
        "each watch says once that it lists in pages"
    );
    Ok(())
}
