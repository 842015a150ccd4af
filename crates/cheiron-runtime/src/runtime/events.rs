//! Publishing Events with a bounded memory. kube-runtime's [`Recorder`] keeps every Event it
//! published for six minutes, to turn a repeat into a series, and scans that cache on each
//! publish: bounded in time, not in number (while the ServiceAccount backfill published one
//! Event per ServiceAccount, it held tens of thousands and the scans were 9 % of the
//! controller's CPU). So the recorder is replaced by a fresh one, its cache dropped, after
//! every [`MAX_CACHED_EVENTS`] publishes: a repeat across that boundary becomes a new Event
//! instead of a series, nothing else changes.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, Recorder, Reporter},
};

/// Publishes between two fresh recorders, so at most this many Events are cached.
pub const MAX_CACHED_EVENTS: usize = 1024;

/// A [`Recorder`] whose cache holds at most `max_cached` Events.
pub struct EventPublisher {
    client: Client,
    reporter: Reporter,
    max_cached: usize,
    current: Mutex<(Recorder, usize)>,
}

impl EventPublisher {
    /// A publisher reporting as `reporter`, dropping its cache every `max_cached` publishes.
    pub fn new(client: Client, reporter: Reporter, max_cached: usize) -> Self {
        let recorder = Recorder::new(client.clone(), reporter.clone());
        Self {
            client,
            reporter,
            max_cached: max_cached.max(1),
            current: Mutex::new((recorder, 0)),
        }
    }

    /// The recorder for the next publish: a fresh one once the current has published
    /// `max_cached` Events.
    fn recorder(&self) -> Recorder {
        let Ok(mut current) = self.current.lock() else {
            return Recorder::new(self.client.clone(), self.reporter.clone());
        };
        if current.1 >= self.max_cached {
            *current = (Recorder::new(self.client.clone(), self.reporter.clone()), 0);
        }
        current.1 += 1;
        current.0.clone()
    }

    /// Publishes `event` about `reference`.
    pub async fn publish(
        &self,
        event: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        self.recorder().publish(event, reference).await
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::events::EventType;
    use serde_json::json;

    use super::*;
    use crate::runtime::fake_api::{FakeApi, reply};

    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/team/events";

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            note: None,
            action: "Test".to_owned(),
            secondary: None,
        }
    }

    fn about(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("ServiceAccount".to_owned()),
            namespace: Some("team".to_owned()),
            name: Some(name.to_owned()),
            ..ObjectReference::default()
        }
    }

    fn created() -> serde_json::Value {
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
               "metadata": {"name": "e", "namespace": "team"}, "eventTime": "2026-01-01T00:00:00.000000Z"})
    }

    fn reporter() -> Reporter {
        Reporter {
            controller: "cheiron-test".to_owned(),
            instance: None,
        }
    }

    #[tokio::test]
    async fn a_repeat_within_the_bound_is_a_series_and_past_it_a_new_event() {
        // Within the bound: the second publish of the same Event patches it into a series
        // (under a generated name, which the script does not know: what counts is the verb).
        let fake = FakeApi::new(vec![reply("POST", EVENTS, 201, created())]);
        let publisher = EventPublisher::new(fake.client(), reporter(), 10);
        for _ in 0..2 {
            let _ = publisher.publish(&event("Added"), &about("a")).await;
        }
        assert_eq!(fake.seen().len(), 2);
        assert!(
            fake.seen()[1].starts_with("PATCH"),
            "a series: {:?}",
            fake.seen()
        );

        // Three Events fill a bound of 3: the recorder after them remembers none, so the
        // repeat is created anew.
        let script = (0..4)
            .map(|_| reply("POST", EVENTS, 201, created()))
            .collect();
        let fake = FakeApi::new(script);
        let publisher = EventPublisher::new(fake.client(), reporter(), 3);
        for name in ["a", "b", "c", "a"] {
            let _ = publisher.publish(&event("Added"), &about(name)).await;
        }
        assert_eq!(fake.left(), 0, "four creates: {:?}", fake.seen());
        assert!(fake.seen().iter().all(|r| r.starts_with("POST")));
    }
}
