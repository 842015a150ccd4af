//! What one registry check takes (a [`Target`] and a [`Credential`]) and answers (a
//! [`Verdict`]).

use cheiron_core::health::Allowance;

/// The registry a credential is checked against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// `host` or `host:port`, as the URL `https://{host}/v2/` takes it (Docker Hub's keys are
    /// checked at `registry-1.docker.io`).
    pub host: String,
    /// Docker Hub: read the pull allowance too ([`Allowance`]).
    pub docker_hub: bool,
}

/// A username and password. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Credential {
    /// The username.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// What a registry said of a credential. The texts name hosts and status codes, never a
/// credential, a token or a response body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The registry (or its token service) accepted the credential.
    Accepted {
        /// Docker Hub's pull allowance for the credential; `None` for other registries.
        allowance: Option<Allowance>,
    },
    /// The registry or its token service refused the credential (401 or 403).
    Rejected {
        /// Who refused it and how, e.g. `the token service auth.example.com answered 401`.
        detail: String,
    },
    /// No answer about the credential: not reachable, a timeout, an error status, a redirect,
    /// a malformed challenge, or a realm the credential must not be sent to.
    Unreachable {
        /// What happened, e.g. `connect to registry.example.com:443 timed out after 10s`.
        detail: String,
    },
}
