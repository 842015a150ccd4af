//! The histogram families of cheiron's metrics.

use prometheus_client::metrics::{family::Family, histogram::Histogram};

/// A histogram family whose histograms all share one set of buckets.
pub type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
