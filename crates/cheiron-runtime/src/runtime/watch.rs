//! Watches that get their lists from the apiserver's streaming lists where it serves them,
//! and from paged lists where it does not.
//!
//! A paged list (the watcher's default: `GET ?limit=500`, page after page, then a watch) of
//! 100 000 Namespaces is 200 requests, each answered and decoded before the next is asked
//! for. A streaming list (WatchList, KEP-3157: one watch with `sendInitialEvents=true`, on by
//! default since Kubernetes 1.32) is one request that the apiserver answers from its watch
//! cache, object after object, ending with a bookmark; the watcher applies each object as it
//! arrives. An apiserver that does not serve it (an older one, or one with the `WatchList`
//! feature gate off) refuses the parameter with 400 or 422: the watch then lists in pages for
//! the rest of its life, and says so once in the log. Each watch logs its first list: the
//! strategy, the objects and how long it took.

use std::{fmt::Debug, time::Instant};

use futures::{StreamExt, stream, stream::BoxStream};
use kube::{
    Api, Resource,
    runtime::{WatchStreamExt, watcher},
};
use serde::de::DeserializeOwned;

/// How a watch gets its first list, and each list after it lost its place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum InitialList {
    /// A streaming list (`sendInitialEvents=true`), or paged lists where the apiserver
    /// refuses it.
    #[default]
    Streaming,
    /// Paged lists of 500 objects, as every watch did before streaming lists.
    Paged,
}

impl InitialList {
    /// `config` with this strategy.
    fn apply(self, config: &watcher::Config) -> watcher::Config {
        match self {
            Self::Streaming => config.clone().streaming_lists(),
            Self::Paged => watcher::Config {
                initial_list_strategy: watcher::InitialListStrategy::ListWatch,
                ..config.clone()
            },
        }
    }
}

/// The events of one watch, errors included (they are retried with the watcher's default
/// backoff).
pub type WatchStream<K> = BoxStream<'static, watcher::Result<watcher::Event<K>>>;

/// Watches `api` with `config`, listing as `initial` says (falling back to pages). An
/// `Api<PartialObjectMeta<K>>` watches metadata only: the apiserver then sends neither the
/// objects' spec nor, for Secrets, their data.
pub fn watch<K>(api: Api<K>, config: watcher::Config, initial: InitialList) -> WatchStream<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    follow(K::kind(&()).into_owned(), config, initial, move |config| {
        watcher(api.clone(), config).default_backoff().boxed()
    })
}

/// Whether `error` is an apiserver refusing a streaming list's parameters.
fn streaming_refused(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
            if status.code == 400 || status.code == 422
    )
}

/// The events of the watch `start` opens, started again with paged lists when the apiserver
/// refuses the streaming list (that error is not passed on).
fn follow<K: Send + 'static>(
    kind: String,
    config: watcher::Config,
    initial: InitialList,
    start: impl Fn(watcher::Config) -> WatchStream<K> + Send + 'static,
) -> WatchStream<K> {
    struct State<K, F> {
        kind: String,
        config: watcher::Config,
        strategy: InitialList,
        events: WatchStream<K>,
        start: F,
        started: Instant,
        /// Objects of the list in progress; `None` once the first list is in.
        first_list: Option<usize>,
    }
    let events = start(initial.apply(&config));
    let state = State {
        kind,
        config,
        strategy: initial,
        events,
        start,
        started: Instant::now(),
        first_list: Some(0),
    };
    stream::unfold(state, |mut s| async move {
        loop {
            let event = s.events.next().await?;
            if let Some(objects) = &mut s.first_list {
                match &event {
                    Ok(watcher::Event::Init) => *objects = 0,
                    Ok(watcher::Event::InitApply(_)) => *objects += 1,
                    Ok(watcher::Event::InitDone) => {
                        tracing::info!(
                            kind = %s.kind,
                            strategy = ?s.strategy,
                            objects = *objects,
                            seconds = s.started.elapsed().as_secs_f64(),
                            "first list in"
                        );
                        s.first_list = None;
                    }
                    _ => {}
                }
            }
            if s.strategy == InitialList::Streaming
                && let Err(e) = &event
                && streaming_refused(e)
            {
                tracing::info!(
                    kind = %s.kind,
                    error = %crate::message::watch_error(e),
                    "the apiserver does not serve streaming lists (WatchList); listing in pages"
                );
                s.strategy = InitialList::Paged;
                s.events = (s.start)(InitialList::Paged.apply(&s.config));
                continue;
            }
            return Some((event, s));
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use kube::core::Status;

    use super::*;

    fn refused(code: u16) -> watcher::Error {
        let mut status = Status::failure("sendInitialEvents is forbidden", "Invalid");
        status.code = code;
        watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(status)))
    }

    type Events = Vec<watcher::Result<watcher::Event<u8>>>;

    /// The events of a watch listing as `initial` says, whose streaming list fails with
    /// `streaming` and whose paged list is complete with one object; and the strategies the
    /// watch asked for, in order.
    async fn run(
        initial: InitialList,
        streaming: fn() -> watcher::Error,
    ) -> (Events, Vec<watcher::InitialListStrategy>) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let recorded = asked.clone();
        let start = move |config: watcher::Config| -> WatchStream<u8> {
            let strategy = config.initial_list_strategy.clone();
            if let Ok(mut asked) = recorded.lock() {
                asked.push(strategy.clone());
            }
            match strategy {
                watcher::InitialListStrategy::StreamingList => {
                    stream::iter([Err(streaming())]).boxed()
                }
                watcher::InitialListStrategy::ListWatch => stream::iter([
                    Ok(watcher::Event::Init),
                    Ok(watcher::Event::InitApply(7)),
                    Ok(watcher::Event::InitDone),
                ])
                .boxed(),
            }
        };
        let events = follow(
            "Namespace".into(),
            watcher::Config::default(),
            initial,
            start,
        )
        .collect()
        .await;
        let asked = asked.lock().map(|a| a.clone()).unwrap_or_default();
        (events, asked)
    }

    fn listed(events: &Events) -> bool {
        matches!(
            events.as_slice(),
            [
                Ok(watcher::Event::Init),
                Ok(watcher::Event::InitApply(7)),
                Ok(watcher::Event::InitDone)
            ]
        )
    }

    #[tokio::test]
    async fn a_refused_streaming_list_falls_back_to_pages_without_passing_the_error_on() {
        for refusal in [|| refused(400), || refused(422)] {
            let (events, asked) = run(InitialList::Streaming, refusal).await;
            assert!(listed(&events), "{events:?}");
            assert_eq!(
                asked,
                [
                    watcher::InitialListStrategy::StreamingList,
                    watcher::InitialListStrategy::ListWatch
                ]
            );
        }
    }

    #[tokio::test]
    async fn other_errors_of_a_streaming_list_are_passed_on_and_it_keeps_streaming() {
        let (events, asked) = run(InitialList::Streaming, || refused(403)).await;
        assert!(
            matches!(events.as_slice(), [Err(e)] if !streaming_refused(e)),
            "{events:?}"
        );
        assert_eq!(asked, [watcher::InitialListStrategy::StreamingList]);
    }

    #[tokio::test]
    async fn paged_lists_are_asked_for_as_such() {
        let (events, asked) = run(InitialList::Paged, || refused(422)).await;
        assert!(listed(&events), "{events:?}");
        assert_eq!(asked, [watcher::InitialListStrategy::ListWatch]);
    }
}
