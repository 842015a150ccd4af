//! What every long-running part of cheiron needs, whatever it does: the admin server
//! (`/healthz`, `/readyz`, `/metrics`), the metrics, the serving certificate, telemetry,
//! the kube helpers (bounded Events, paced requests, leader election), the API with its
//! start-up check, bounded messages, YAML and the typed reading of its documents. Nothing here
//! knows how a pull Secret is made.

pub mod admin;
pub mod api;
pub mod decode;
pub mod message;
pub mod metrics;
pub mod runtime;
pub mod telemetry;
pub mod tls;
pub mod yaml;
