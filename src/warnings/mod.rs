//! Warnings for whoever looks at a workload: Events on objects that cheiron's admission could
//! not make whole, so `kubectl describe` says why an image cannot be pulled. Started by the
//! controller's leader (`src/cli/controller.rs`), beside the controller, never inside it.

pub mod missing_secrets;
