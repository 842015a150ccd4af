//! `--tls-cert-dir`: `tls.crt` and `tls.key`, re-read periodically.
//!
//! A Kubernetes Secret volume updates by swapping its `..data` symlink, which inotify on the
//! files themselves does not see; so the pair is simply read again through its paths every
//! [`RELOAD_PERIOD`] and compared byte for byte with the last pair seen.

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::{CertResolver, ServingKey, TlsError};

/// The certificate chain file in `--tls-cert-dir` (the `kubernetes.io/tls` Secret key).
pub const CERT_FILE: &str = "tls.crt";
/// The private key file in `--tls-cert-dir` (the `kubernetes.io/tls` Secret key).
pub const KEY_FILE: &str = "tls.key";
/// How often `--tls-cert-dir` is re-read.
pub const RELOAD_PERIOD: Duration = Duration::from_secs(2);

/// The contents of `tls.crt` and `tls.key`. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct PemPair {
    /// PEM certificate chain, end-entity first.
    pub cert: Vec<u8>,
    /// PEM private key.
    pub key: Vec<u8>,
}

impl fmt::Debug for PemPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PemPair")
            .field("cert", &format_args!("{} bytes", self.cert.len()))
            .field("key", &"<redacted>")
            .finish()
    }
}

/// A directory holding `tls.crt` and `tls.key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertDir {
    path: PathBuf,
}

impl CertDir {
    /// The directory at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads both files, following symlinks (a Secret volume's `..data` indirection).
    pub async fn read(&self) -> Result<PemPair, TlsError> {
        let read = |file: &'static str| {
            let path = self.path.join(file);
            async move {
                tokio::fs::read(&path)
                    .await
                    .map_err(|source| TlsError::Read { path, source })
            }
        };
        Ok(PemPair {
            cert: read(CERT_FILE).await?,
            key: read(KEY_FILE).await?,
        })
    }

    /// Reads and validates the pair: a resolver serving it, and a [`Reloader`] that swaps in
    /// later changes.
    pub async fn load(self) -> Result<(Arc<CertResolver>, Reloader), TlsError> {
        let pair = self.read().await?;
        let resolver = Arc::new(CertResolver::new(ServingKey::from_pem(&pair)?));
        let reloader = Reloader {
            dir: self,
            resolver: Arc::clone(&resolver),
            last: pair,
        };
        Ok((resolver, reloader))
    }
}

/// What one reload check did.
#[derive(Debug)]
pub enum Reload {
    /// The files are byte for byte what was seen last.
    Unchanged,
    /// A new valid pair is now served.
    Swapped {
        /// `notAfter` of the new certificate, in seconds since the Unix epoch.
        not_after: i64,
    },
    /// The files changed but do not form a valid pair; the current key is kept.
    Rejected(TlsError),
    /// The files could not be read; the current key is kept.
    Unreadable(TlsError),
}

/// Swaps changed, valid pairs from a [`CertDir`] into a [`CertResolver`]. It remembers the
/// last pair it saw, valid or not, so a bad pair is reported once, not on every check.
#[derive(Debug)]
pub struct Reloader {
    dir: CertDir,
    resolver: Arc<CertResolver>,
    last: PemPair,
}

impl Reloader {
    /// Serves `pair` if it differs from the last pair seen and is valid.
    pub fn apply(&mut self, pair: PemPair) -> Reload {
        if pair == self.last {
            return Reload::Unchanged;
        }
        let result = ServingKey::from_pem(&pair);
        self.last = pair;
        match result {
            Ok(key) => {
                let not_after = key.not_after();
                self.resolver.swap(key);
                Reload::Swapped { not_after }
            }
            Err(e) => Reload::Rejected(e),
        }
    }

    /// Reads the directory once and applies what it holds.
    pub async fn check(&mut self) -> Reload {
        match self.dir.read().await {
            Ok(pair) => self.apply(pair),
            Err(e) => Reload::Unreadable(e),
        }
    }

    /// Checks every `period` until `shutdown` is cancelled, logging each swap and each
    /// rejected or unreadable pair (once, until the files change or become readable again).
    pub async fn run(mut self, period: Duration, shutdown: CancellationToken) {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut unreadable = false;
        let dir = self.dir.path().display().to_string();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            match self.check().await {
                Reload::Unchanged => unreadable = false,
                Reload::Swapped { not_after } => {
                    unreadable = false;
                    tracing::info!(%dir, not_after, "serving certificate reloaded");
                }
                Reload::Rejected(error) => {
                    unreadable = false;
                    tracing::warn!(%dir, %error, "new serving certificate rejected; keeping the current one");
                }
                Reload::Unreadable(error) => {
                    if !unreadable {
                        tracing::warn!(%dir, %error, "cannot read the serving certificate; keeping the current one");
                    }
                    unreadable = true;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::fs;

    use super::*;

    fn generated_pair() -> PemPair {
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        PemPair {
            cert: generated.cert.pem().into_bytes(),
            key: generated.signing_key.serialize_pem().into_bytes(),
        }
    }

    fn write_pair(dir: &Path, pair: &PemPair) {
        fs::write(dir.join(CERT_FILE), &pair.cert).unwrap();
        fs::write(dir.join(KEY_FILE), &pair.key).unwrap();
    }

    fn served_der(resolver: &CertResolver) -> Vec<u8> {
        resolver.current().end_entity().unwrap().as_ref().to_vec()
    }

    #[tokio::test]
    async fn unchanged_files_are_not_reloaded() {
        let tmp = tempfile::tempdir().unwrap();
        write_pair(tmp.path(), &generated_pair());
        let (_, mut reloader) = CertDir::new(tmp.path()).load().await.unwrap();
        assert!(matches!(reloader.check().await, Reload::Unchanged));
    }

    #[tokio::test]
    async fn valid_new_pair_is_swapped_in() {
        let tmp = tempfile::tempdir().unwrap();
        write_pair(tmp.path(), &generated_pair());
        let (resolver, mut reloader) = CertDir::new(tmp.path()).load().await.unwrap();
        let before = served_der(&resolver);

        write_pair(tmp.path(), &generated_pair());
        let reload = reloader.check().await;

        assert!(matches!(reload, Reload::Swapped { .. }), "{reload:?}");
        assert_ne!(served_der(&resolver), before);
    }

    #[tokio::test]
    async fn invalid_new_pair_is_rejected_and_old_key_kept() {
        let tmp = tempfile::tempdir().unwrap();
        write_pair(tmp.path(), &generated_pair());
        let (resolver, mut reloader) = CertDir::new(tmp.path()).load().await.unwrap();
        let before = served_der(&resolver);

        // A certificate with somebody else's key: both files parse, the pair does not match.
        let mismatched = PemPair {
            cert: generated_pair().cert,
            key: generated_pair().key,
        };
        write_pair(tmp.path(), &mismatched);
        let reload = reloader.check().await;
        assert!(
            matches!(reload, Reload::Rejected(TlsError::Pair(_))),
            "{reload:?}"
        );
        assert_eq!(served_der(&resolver), before);

        // Reported once: the same bad files are not rejected again.
        assert!(matches!(reloader.check().await, Reload::Unchanged));

        fs::write(tmp.path().join(CERT_FILE), b"garbage").unwrap();
        assert!(matches!(
            reloader.check().await,
            Reload::Rejected(TlsError::NoCertificate)
        ));
        assert_eq!(served_der(&resolver), before);
    }

    #[tokio::test]
    async fn missing_files_keep_old_key() {
        let tmp = tempfile::tempdir().unwrap();
        write_pair(tmp.path(), &generated_pair());
        let (resolver, mut reloader) = CertDir::new(tmp.path()).load().await.unwrap();
        let before = served_der(&resolver);

        fs::remove_file(tmp.path().join(KEY_FILE)).unwrap();
        assert!(matches!(
            reloader.check().await,
            Reload::Unreadable(TlsError::Read { .. })
        ));
        assert_eq!(served_der(&resolver), before);
    }

    /// The layout kubelet gives a Secret volume: `tls.crt -> ..data/tls.crt`,
    /// `..data -> ..<timestamp>`, updated by atomically renaming a new `..data` symlink.
    #[cfg(unix)]
    #[tokio::test]
    async fn secret_volume_data_symlink_swap_is_picked_up() {
        use std::os::unix::fs::symlink;

        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let first = root.join("..2025_01_01_00_00_00.000000001");
        fs::create_dir(&first).unwrap();
        write_pair(&first, &generated_pair());
        symlink(first.file_name().unwrap(), root.join("..data")).unwrap();
        symlink("..data/tls.crt", root.join(CERT_FILE)).unwrap();
        symlink("..data/tls.key", root.join(KEY_FILE)).unwrap();
        let (resolver, mut reloader) = CertDir::new(root).load().await.unwrap();
        let before = served_der(&resolver);

        let second = root.join("..2025_02_01_00_00_00.000000002");
        fs::create_dir(&second).unwrap();
        let rotated = generated_pair();
        write_pair(&second, &rotated);
        symlink(second.file_name().unwrap(), root.join("..data_tmp")).unwrap();
        fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        fs::remove_dir_all(&first).unwrap();

        assert!(matches!(reloader.check().await, Reload::Swapped { .. }));
        let after = served_der(&resolver);
        assert_ne!(after, before);
        let expected = ServingKey::from_pem(&rotated).unwrap();
        assert_eq!(after, expected.end_entity().unwrap().as_ref());
    }

    #[test]
    fn pem_pair_debug_never_shows_the_key() {
        let pair = generated_pair();
        let shown = format!("{pair:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }
}
