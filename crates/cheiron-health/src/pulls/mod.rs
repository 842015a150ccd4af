//! Pull failures attributed to the manager behind them (docs/credential-health.md): when a
//! kubelet reports that a registry refused a Pod's pull, which of cheiron's credentials it
//! refused, or that the Pod pulled without one. Pure: no Kubernetes types, no I/O; the
//! controller feeds it Events and the Secrets it knows.
//!
//! ```text
//!   Pod Event "Failed" ──► classify ──► Failure { image, refusal }
//!                                             │ + the Pod's imagePullSecrets
//!                                             │ + cheiron's Secrets in its namespace
//!                                             ▼
//!                                         attribute ──► Rejected { manager, Secret, key }…
//!                                                   └─► NoCredential { registry }
//! ```
//!
//! # What is classified
//!
//! Only the message of the kubelet's `Failed` Event for a pull, which
//! `pkg/kubelet/images/image_manager.go` writes as `Failed to pull image %q: %v`: the image as
//! the container names it, then the container runtime's error. That error reaches the Event
//! bare, or after `rpc error: code = … desc = ` (recent kubelets' CRI client,
//! `k8s.io/cri-client` `remote_image.go`, strips the prefix for code Unknown only, which is
//! what containerd and CRI-O return for a refusal). The kubelet's other Events of the same pull
//! (`Error: ErrImagePull`, `Back-off pulling image "…"`, `Error: ImagePullBackOff`) say
//! nothing the `Failed` Event did not, and are not classified. Neither is a message longer than
//! [`classify::MAX_MESSAGE_BYTES`].
//!
//! # What counts as a refusal
//!
//! The registry refused the credential, asked for one, or refused the repository to the
//! caller. The phrases are the runtimes' own, matched without regard to ASCII case and only
//! where they start a word (after whitespace), so that image names and URLs in the message,
//! which never hold whitespace, cannot spell one:
//!
//! - containerd (`core/remotes/docker/resolver.go`, `authorizer.go`,
//!   `core/remotes/errors/errors.go`): `unexpected status from HEAD request to …: 401
//!   Unauthorized` (or `403 Forbidden`), `failed to authorize: failed to fetch anonymous token:
//!   unexpected status from GET request to …: 401 Unauthorized` (also `oauth token`),
//!   `pull access denied, repository does not exist or may require authorization: server
//!   message: insufficient_scope: authorization failed` (or `invalid_token`), `authorization
//!   failed: no basic auth credentials`.
//! - CRI-O through containers/image (`docker/docker_client.go`, `docker/errors.go`,
//!   `docker/distribution_error.go`): `reading manifest … in …: unauthorized: authentication
//!   required`, `requested access to the resource is denied` (or `denied: …`), `unable to
//!   retrieve auth token: invalid username/password: unauthorized: incorrect username or
//!   password` (Docker Hub's words for a wrong password).
//! - dockershim-era kubelets: `Error response from daemon: pull access denied for …,
//!   repository does not exist or may require 'docker login': denied: …`.
//!
//! A [`Refusal::Unauthorized`] says the credential was missing or rejected;
//! [`Refusal::Denied`] that access to the repository was refused. The credential's own
//! phrases (`no basic auth credentials`, `incorrect username or password`, `invalid
//! username/password`, `invalid_token`) decide first, then the denials, then the bare 401
//! phrases: Docker Hub answers a pull of a repository that does not exist exactly as one of a
//! private repository (`insufficient_scope`, or CRI-O's `denied: …` listed before
//! `unauthorized: authentication required`), so such a message is `Denied`, whose wording must
//! say the repository may not exist. containerd wraps several causes in `pull access denied,
//! repository does not exist or may require authorization`; its cause decides
//! (`no basic auth credentials` is `Unauthorized`).
//!
//! Not refusals: not found and `manifest unknown`, DNS, connection and TLS errors, timeouts
//! and cancellations (also `failed to authorize: … i/o timeout`, which reached no registry
//! answer), and rate limits (HTTP 429, Docker Hub's `toomanyrequests`, containers/image's
//! `too many requests to registry`): a rate limit is not a verdict on the credential, even
//! when the message also says `unauthorized`. Docker Hub's pull allowance is the registry
//! check's business ([`crate::registry`]).
//!
//! # How a refusal is attributed
//!
//! [`attribute()`] follows the kubelet: it builds one keyring of all the Pod's pull secrets and
//! offers every credential whose key matches the image (Docker Hub's default key only when no
//! other key matched). If one of cheiron's Secrets among them holds such a key, the registry
//! refused that credential: [`Attribution::Rejected`]. Otherwise the Pod pulled without
//! cheiron's credential: [`Attribution::NoCredential`], and the caller may look for a manager
//! that serves the registry ([`offered_key`]).

pub mod attribute;
pub mod classify;
pub mod watch;

pub use attribute::{Attribution, ManagedSecret, OfferedCredential, attribute, offered_key};
pub use classify::{Failure, MAX_MESSAGE_BYTES, Refusal, classify};
