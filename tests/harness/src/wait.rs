//! Polling with a deadline, for everything that becomes true eventually (caches, controllers,
//! webhook registrations).

use std::{
    fmt::Display,
    time::{Duration, Instant},
};

use super::Result;

/// How often [`wait_for`] checks.
const INTERVAL: Duration = Duration::from_millis(100);

/// Calls `check` until it returns `Ok`, at most for `timeout`. An `Err` means "not yet"; the
/// last one (say, what was observed instead) ends up in the timeout error.
pub async fn wait_for<T, F, Fut>(what: impl Display, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        if start.elapsed() >= timeout {
            return Err(
                format!("timed out after {timeout:?} waiting for {what}; last: {last}").into(),
            );
        }
        tokio::time::sleep(INTERVAL).await;
    }
}
