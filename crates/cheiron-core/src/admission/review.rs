//! The AdmissionReview envelope: which requests cheiron acts on, and the response it sends.

use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation},
};
use serde_json::Value;

use super::{
    mutate::{MutationResult, mutate_interpreted},
    subject::{AdmittedObject, interpret},
};
use crate::policy::{Skip, SubjectKind, View};

/// A body that is not an AdmissionReview with a request (HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum InvalidReview {
    /// Not JSON at all.
    #[error("body is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// JSON, but not an AdmissionReview.
    #[error("body is not an AdmissionReview: {0}")]
    NotAReview(#[source] serde_json::Error),
    /// An AdmissionReview without `request`.
    #[error("AdmissionReview has no request")]
    NoRequest,
    /// JSON of the right shape whose `apiVersion` and `kind` are not those of an
    /// `admission.k8s.io/v1` `AdmissionReview`. The message does not quote what was sent.
    #[error("body is not an {API_VERSION} {KIND}: wrong apiVersion or kind")]
    WrongType,
}

/// The only `apiVersion` answered (the registration asks for `v1` reviews only).
const API_VERSION: &str = "admission.k8s.io/v1";
/// The `kind` of the body.
const KIND: &str = "AdmissionReview";

/// Refuses an envelope that names another type: the shape alone does not make a body a review.
fn check_type(envelope: &AdmissionReview<AdmittedObject>) -> Result<(), InvalidReview> {
    if envelope.types.api_version == API_VERSION && envelope.types.kind == KIND {
        Ok(())
    } else {
        Err(InvalidReview::WrongType)
    }
}

/// How one review was handled, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A patch was returned.
    Patched,
    /// Managers apply but nothing was missing.
    Unchanged,
    /// Left alone by policy.
    Skipped(Skip),
    /// A kind, operation or subresource cheiron does not mutate.
    NotHandled,
    /// The object could not be read; allowed without a patch, with a warning.
    Uninterpretable,
    /// The namespace could not be looked up; allowed without a patch, with a warning.
    NamespaceUnknown,
    /// `request.namespace` is not a namespace name, so it was not looked up; allowed
    /// without a patch, with a warning.
    NamespaceInvalid,
    /// The namespace was not looked up because too many lookups were made lately; allowed
    /// without a patch, with a warning.
    NamespaceRateLimited,
}

impl Outcome {
    /// Short machine-readable name, used as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Patched => "patched",
            Outcome::Unchanged => "unchanged",
            Outcome::Skipped(skip) => skip.as_str(),
            Outcome::NotHandled => "not_handled",
            Outcome::Uninterpretable => "uninterpretable",
            Outcome::NamespaceUnknown => "namespace_unknown",
            Outcome::NamespaceInvalid => "namespace_invalid",
            Outcome::NamespaceRateLimited => "namespace_rate_limited",
        }
    }
}

/// The answer to one AdmissionReview.
#[derive(Debug)]
pub struct Admission {
    /// The AdmissionReview to send back (always `allowed: true`, `uid` echoed).
    pub review: AdmissionReview<DynamicObject>,
    /// How it was handled.
    pub outcome: Outcome,
    /// `request.resource.resource`, e.g. `pods`.
    pub resource: String,
    /// `request.operation`, e.g. `CREATE`.
    pub operation: &'static str,
    /// `request.namespace`.
    pub namespace: Option<String>,
}

fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// Which kind cheiron mutates for this request, if any.
fn handled_kind(request: &AdmissionRequest<AdmittedObject>) -> Option<SubjectKind> {
    if request
        .sub_resource
        .as_deref()
        .is_some_and(|s| !s.is_empty())
        || !request.kind.group.is_empty()
    {
        return None;
    }
    match (request.kind.kind.as_str(), &request.operation) {
        // Pod imagePullSecrets are immutable after creation.
        ("Pod", Operation::Create) => Some(SubjectKind::Pod),
        ("ServiceAccount", Operation::Create | Operation::Update) => {
            Some(SubjectKind::ServiceAccount)
        }
        _ => None,
    }
}

/// The object of a parsed review: read while parsing (the fast path), or kept as JSON when it
/// did not fit [`AdmittedObject`] and is read again to say what is wrong with it.
#[derive(Debug)]
enum Object {
    Read(Option<Box<AdmittedObject>>),
    Unread(Value),
}

/// A parsed AdmissionReview.
#[derive(Debug)]
pub struct Review {
    request: AdmissionRequest<AdmittedObject>,
    object: Object,
}

/// Parses an AdmissionReview body. Only a body that is not an `admission.k8s.io/v1`
/// AdmissionReview with a request fails.
///
/// The common case is one pass that skips everything admission does not read. If the object
/// has an unexpected shape, the envelope is parsed again without it, so an odd object yields a
/// warning rather than an error.
pub fn parse(body: &[u8]) -> Result<Review, InvalidReview> {
    if let Ok(envelope) = serde_json::from_slice::<AdmissionReview<AdmittedObject>>(body) {
        check_type(&envelope)?;
        let mut request: AdmissionRequest<AdmittedObject> =
            envelope.try_into().map_err(|_| InvalidReview::NoRequest)?;
        let object = request.object.take();
        return Ok(Review {
            request,
            object: Object::Read(object.map(Box::new)),
        });
    }
    let mut value: Value = serde_json::from_slice(body).map_err(InvalidReview::NotJson)?;
    let object = value
        .get_mut("request")
        .and_then(|r| r.get_mut("object"))
        .map(Value::take)
        .unwrap_or(Value::Null);
    if let Some(old) = value
        .get_mut("request")
        .and_then(|r| r.get_mut("oldObject"))
    {
        // Not read, and may be as odd as `object`.
        *old = Value::Null;
    }
    let envelope: AdmissionReview<AdmittedObject> =
        serde_json::from_value(value).map_err(InvalidReview::NotAReview)?;
    check_type(&envelope)?;
    let request: AdmissionRequest<AdmittedObject> =
        envelope.try_into().map_err(|_| InvalidReview::NoRequest)?;
    Ok(Review {
        request,
        object: Object::Unread(object),
    })
}

impl Review {
    /// The namespace whose labels and annotations answering this review needs, if any: the
    /// request's namespace for the kinds and operations cheiron mutates.
    pub fn namespace_needed(&self) -> Option<&str> {
        handled_kind(&self.request)?;
        self.request.namespace.as_deref()
    }

    fn finish(&self, response: AdmissionResponse, outcome: Outcome) -> Admission {
        Admission {
            review: response.into_review(),
            outcome,
            resource: self.request.resource.resource.clone(),
            operation: operation_name(&self.request.operation),
            namespace: self.request.namespace.clone(),
        }
    }

    /// Allows the request unchanged with `warning` (e.g. its namespace cannot be looked up).
    pub fn admit_unchanged(self, warning: String, outcome: Outcome) -> Admission {
        let mut response = AdmissionResponse::from(&self.request);
        response.warnings = Some(vec![warning]);
        self.finish(response, outcome)
    }

    /// Answers the review from `view`. Always allowed; `uid` echoed.
    pub fn answer(self, view: &dyn View) -> Admission {
        let mut response = AdmissionResponse::from(&self.request);
        let (Some(kind), Some(namespace)) = (
            handled_kind(&self.request),
            self.request.namespace.as_deref(),
        ) else {
            return self.finish(response, Outcome::NotHandled);
        };
        let interpreted = match &self.object {
            Object::Read(Some(object)) => Ok(object.interpret(kind)),
            Object::Read(None) => interpret(&Value::Null, kind),
            Object::Unread(value) => interpret(value, kind),
        };
        let mutation = match interpreted {
            Ok(interpreted) => mutate_interpreted(&interpreted, namespace, view),
            Err(e) => {
                response.warnings = Some(vec![format!("cheiron: {e}; admitted unchanged")]);
                return self.finish(response, Outcome::Uninterpretable);
            }
        };
        if !mutation.warnings.is_empty() {
            response.warnings = Some(mutation.warnings);
        }
        let outcome = match mutation.result {
            MutationResult::Patched => match response.clone().with_patch(mutation.patch) {
                Ok(patched) => {
                    response = patched;
                    Outcome::Patched
                }
                Err(e) => {
                    // Serialising a patch of strings cannot fail; admit unchanged if it ever does.
                    response.warnings = Some(vec![format!("cheiron: could not encode patch: {e}")]);
                    Outcome::Uninterpretable
                }
            },
            MutationResult::Unchanged => Outcome::Unchanged,
            MutationResult::Skipped(skip) => Outcome::Skipped(skip),
        };
        self.finish(response, outcome)
    }
}

/// Answers one AdmissionReview body from `view` ([`parse`], then [`Review::answer`]).
pub fn review(body: &[u8], view: &dyn View) -> Result<Admission, InvalidReview> {
    Ok(parse(body)?.answer(view))
}
