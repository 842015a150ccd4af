//! Which kubelet Event messages say a registry refused a pull, and for which image.

use std::fmt;

/// Messages longer than this are not read at all. A failed pull's message is a few hundred
/// bytes (the longest in the tests, a rate limit on an image by digest, is about 720);
/// anything past 4 KiB is not one the kubelet wrote for a refusal, and reading it would only
/// cost time on hostile input.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// How the kubelet's image manager (`pkg/kubelet/images/image_manager.go`) starts the message
/// of its `Failed` Event for a failed pull: `Failed to pull image %q: %v`.
const FAILED_TO_PULL: &str = "Failed to pull image \"";

/// A pull the registry refused: the image, as the kubelet's message names it, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The image as the Pod's container spec names it (the kubelet quotes it as written,
    /// sometimes with `:latest` added); not validated here.
    pub image: String,
    /// How the registry refused.
    pub refusal: Refusal,
}

/// How a registry refused a pull.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The registry wants a valid credential: none was sent, or it rejected the one sent
    /// (HTTP 401, `unauthorized`, `authentication required`, `no basic auth credentials`,
    /// `incorrect username or password`, `invalid_token`).
    Unauthorized,
    /// The registry refused access to the repository (HTTP 403, `denied`,
    /// `insufficient_scope`, containerd's `pull access denied`): the credential, or the
    /// anonymous caller, may not pull it. Registries answer the same for a repository that
    /// does not exist, so the image name may be wrong instead.
    Denied,
}

impl Refusal {
    /// A short phrase for an Event or a log line.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Unauthorized => "unauthorized",
            Refusal::Denied => "access denied",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Phrases of a rate limit (HTTP 429, Docker Hub's `toomanyrequests`): never a refusal of the
/// credential, whatever else the message says.
const RATE_LIMITED: &[&str] = &["too many requests", "toomanyrequests"];

/// Phrases that say the credential itself was missing or rejected; they win over
/// [`DENIED`] (containerd wraps `no basic auth credentials` in `pull access denied`).
const REJECTED_CREDENTIAL: &[&str] = &[
    "no basic auth credentials",
    "incorrect username or password",
    "invalid username/password",
    "invalid_token: ",
];

/// Phrases of a refused repository access.
const DENIED: &[&str] = &[
    "insufficient_scope: ",
    "requested access to the resource is denied",
    "denied: ",
    "pull access denied",
    "403 forbidden",
    "403 (forbidden)",
];

/// Phrases of an authentication demand, checked last: Docker Hub and CRI-O list
/// `denied: …` before `unauthorized: authentication required` for one refusal.
const UNAUTHORIZED: &[&str] = &[
    "401 unauthorized",
    "401 (unauthorized)",
    "unauthorized: ",
    "authentication required",
    "authorization failed",
];

/// Reads the message of a kubelet `Failed` Event and returns the failure when it is a pull the
/// registry refused (see the module documentation for the phrases and their sources).
///
/// `None` for anything else: other failures of a pull (not found, DNS, timeouts, TLS, rate
/// limits), the kubelet's `Error: ErrImagePull` and `Back-off pulling image …` messages (they
/// repeat a failure its `Failed to pull image` Event already reported), and any message longer
/// than [`MAX_MESSAGE_BYTES`]. Never allocates more than the image name.
pub fn classify(message: &str) -> Option<Failure> {
    if message.len() > MAX_MESSAGE_BYTES {
        return None;
    }
    let rest = message.strip_prefix(FAILED_TO_PULL)?;
    // Go's %q of a valid image reference is the reference in quotes: no quote, no escape.
    let (image, cause) = rest.split_once("\": ")?;
    if image.is_empty() || image.contains(['"', '\\']) {
        return None;
    }
    let refusal = refusal(cause)?;
    Some(Failure {
        image: image.to_owned(),
        refusal,
    })
}

/// The refusal a pull error's text states, if any.
fn refusal(cause: &str) -> Option<Refusal> {
    let says = |phrases: &[&str]| phrases.iter().any(|phrase| contains_phrase(cause, phrase));
    if says(RATE_LIMITED) {
        None
    } else if says(REJECTED_CREDENTIAL) {
        Some(Refusal::Unauthorized)
    } else if says(DENIED) {
        Some(Refusal::Denied)
    } else if says(UNAUTHORIZED) {
        Some(Refusal::Unauthorized)
    } else {
        None
    }
}

/// True when `phrase` (lower case) occurs in `text`, ignoring ASCII case, at the start of
/// `text` or right after whitespace. The boundary keeps image names and URLs, which never hold
/// whitespace, from matching: `reg/app:denied: not found` is not `denied: `.
fn contains_phrase(text: &str, phrase: &str) -> bool {
    let (text, phrase) = (text.as_bytes(), phrase.as_bytes());
    let mut previous: Option<u8> = None;
    for (start, window) in text.windows(phrase.len()).enumerate() {
        let at_boundary = previous.is_none_or(|b| b.is_ascii_whitespace());
        if at_boundary && window.eq_ignore_ascii_case(phrase) {
            return true;
        }
        previous = text.get(start).copied();
    }
    false
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
