//! The negative control: without credentials the registry refuses the pull, so every test that
//! sees a Pod run through cheiron shows cheiron did the work.

use crate::{harness::Result, support::NodeTest};

/// A Pod of the private image without a pull secret gets `ErrImagePull` with `401 Unauthorized`;
/// the same Pod with a hand-written Secret of a registry user runs.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_pull_secret_the_pull_is_refused_and_a_hand_written_secret_runs() -> Result {
    let t = NodeTest::new("negative").await?;
    let ns = t.scenario.create_namespace(&[], &[]).await?;

    t.expect_unauthorized(&ns, "no-secret", &[]).await?;

    let user = t.scenario.unique_name("user");
    let password = t.node.registry.set_user(&user)?;
    t.docker_secret(&ns, "by-hand", &user, &password).await?;
    t.expect_running(&ns, "by-hand", &["by-hand"]).await
}
