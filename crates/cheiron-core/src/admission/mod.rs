//! Admission, without I/O: an AdmissionReview body and a [`View`](crate::policy::View) in,
//! the AdmissionReview response out. The HTTP server and `cheiron mutate` are thin shells
//! around this module.

mod images;
mod mutate;
mod patch;
mod review;
mod subject;

#[cfg(test)]
mod tests;

pub use mutate::{Mutation, MutationResult, mutate, mutate_interpreted};
pub use patch::{PullSecretPatch, build_patch, mark_missing, reconcile_with};
pub use review::{Admission, InvalidReview, Outcome, Review, parse, review};
pub use subject::{AdmittedObject, Interpreted, Uninterpretable, interpret};
