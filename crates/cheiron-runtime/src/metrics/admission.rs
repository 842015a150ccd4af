//! The webhook's metrics: admission reviews answered, their time, and bodies refused.

use std::time::Duration;

use cheiron_core::admission::Outcome;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::{Registry, Unit},
};

use super::family::HistogramFamily;

/// Admission latency buckets, in seconds: a review takes microseconds, so they start at 100 µs.
const ADMISSION_BUCKETS: [f64; 15] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Labels of `cheiron_admission_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// `pods`, `serviceaccounts` or `other` (see [`resource_label`]).
    pub resource: &'static str,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'static str,
    /// [`Outcome::as_str`].
    pub outcome: &'static str,
}

/// Labels of `cheiron_admission_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// `pods`, `serviceaccounts` or `other` (see [`resource_label`]).
    pub resource: &'static str,
}

/// Labels of `cheiron_admission_invalid_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvalidRequestLabels {
    /// Why the body was refused, e.g. `not_json` or `too_large`.
    pub reason: &'static str,
}

/// The resource label of an admission request: the resources cheiron handles by name, anything
/// else as `other`, so that a client cannot create unbounded series.
pub fn resource_label(resource: &str) -> &'static str {
    match resource {
        "pods" => "pods",
        "serviceaccounts" => "serviceaccounts",
        _ => "other",
    }
}

/// The webhook's metrics.
#[derive(Clone, Debug)]
pub struct AdmissionMetrics {
    /// `cheiron_admission_requests_total{resource, operation, outcome}`: answered reviews.
    pub requests: Family<AdmissionLabels, Counter>,
    /// `cheiron_admission_duration_seconds{resource}`: time from request to response.
    pub duration: HistogramFamily<ResourceLabels>,
    /// `cheiron_admission_patches_total`: reviews answered with a patch.
    pub patches: Counter,
    /// `cheiron_admission_invalid_requests_total{reason}`: bodies refused with 4xx.
    pub invalid_requests: Family<InvalidRequestLabels, Counter>,
}

impl AdmissionMetrics {
    /// The webhook's metrics, registered in `registry`.
    pub(super) fn registered(registry: &mut Registry) -> Self {
        let admission = Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(ADMISSION_BUCKETS)),
            patches: Counter::default(),
            invalid_requests: Family::default(),
        };
        registry.register(
            "admission_requests",
            "Admission reviews answered, by resource, operation and outcome",
            admission.requests.clone(),
        );
        registry.register_with_unit(
            "admission_duration",
            "Time to answer an admission review",
            Unit::Seconds,
            admission.duration.clone(),
        );
        registry.register(
            "admission_patches",
            "Admission reviews answered with a pull secret patch",
            admission.patches.clone(),
        );
        registry.register(
            "admission_invalid_requests",
            "Admission requests refused because the body is not a usable AdmissionReview",
            admission.invalid_requests.clone(),
        );
        admission
    }

    /// Records one answered review.
    pub fn record(
        &self,
        resource: &str,
        operation: &'static str,
        outcome: Outcome,
        elapsed: Duration,
    ) {
        let resource = resource_label(resource);
        self.requests
            .get_or_create(&AdmissionLabels {
                resource,
                operation,
                outcome: outcome.as_str(),
            })
            .inc();
        self.duration
            .get_or_create(&ResourceLabels { resource })
            .observe(elapsed.as_secs_f64());
        if outcome == Outcome::Patched {
            self.patches.inc();
        }
    }

    /// Records one refused body.
    pub fn record_invalid(&self, reason: &'static str) {
        self.invalid_requests
            .get_or_create(&InvalidRequestLabels { reason })
            .inc();
    }
}
