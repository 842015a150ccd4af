//! `--tls-cert-dir`: `tls.crt` and `tls.key`, re-read when the directory changes and
//! periodically.
//!
//! A Kubernetes Secret volume updates by swapping its `..data` symlink, which inotify on the
//! files themselves does not see; so the directory itself is watched, and any change in it
//! triggers a re-read of the pair through its paths, compared byte for byte with the last
//! pair seen. Watching can fail (inotify limits, filesystems without notifications), so the
//! pair is also re-read every [`RELOAD_PERIOD`] whatever happens.

use std::{
    io,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use notify::{
    EventKind, RecommendedWatcher, RecursiveMode, Watcher,
    event::{AccessKind, AccessMode},
};
use tokio::{io::AsyncReadExt, sync::Notify, time::MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{
    key::ServingKey,
    pem::{CERT_FILE, KEY_FILE, PemPair, TlsError},
    resolver::CertResolver,
};

/// How often `--tls-cert-dir` is re-read even when no change was noticed.
pub const RELOAD_PERIOD: Duration = Duration::from_secs(2);
/// How long to let an update of the directory finish after the first change is noticed
/// before reading it: a Secret volume update is a new directory, a symlink and a rename, and
/// an in-place rotation writes two files. Reading in between could see half of it (rejected,
/// and read again on the next change, but logged as a bad pair).
pub const WATCH_SETTLE: Duration = Duration::from_millis(50);

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

    /// Reads both files, following symlinks (a Secret volume's `..data` indirection). Only
    /// regular files of at most 1 MiB are read: a FIFO would block the read
    /// forever (and with it startup, or the reloader), a device could be endless.
    pub async fn read(&self) -> Result<PemPair, TlsError> {
        Ok(PemPair {
            cert: read_pem_file(self.path.join(CERT_FILE)).await?,
            key: read_pem_file(self.path.join(KEY_FILE)).await?,
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

/// Largest `tls.crt` or `tls.key` read. A certificate chain is a few KiB; a larger file is
/// not a PEM pair, and is refused rather than read into memory.
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// Reads `path` if it is a regular file of at most [`MAX_PEM_BYTES`].
///
/// Opened without blocking (opening a FIFO for reading otherwise waits for a writer, in a
/// thread that cannot be cancelled, which also keeps the process from exiting on SIGTERM),
/// and the opened file itself is checked, so a file swapped for a FIFO after a check is
/// refused too.
async fn read_pem_file(path: PathBuf) -> Result<Vec<u8>, TlsError> {
    let refuse = |path: PathBuf, message: String| TlsError::Read {
        path,
        source: io::Error::new(io::ErrorKind::InvalidInput, message),
    };
    let opened = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .await;
    let file = match opened {
        Ok(file) => file,
        Err(source) => return Err(TlsError::Read { path, source }),
    };
    let metadata = match file.metadata().await {
        Ok(metadata) => metadata,
        Err(source) => return Err(TlsError::Read { path, source }),
    };
    if !metadata.is_file() {
        let what = file_type_name(&metadata.file_type());
        return Err(refuse(
            path,
            format!(
                "{what}, not a regular file (tls.crt and tls.key must be files or symlinks to files)"
            ),
        ));
    }
    if metadata.len() > MAX_PEM_BYTES {
        return Err(refuse(
            path,
            format!("larger than {MAX_PEM_BYTES} bytes, not a PEM certificate or key"),
        ));
    }
    let mut contents = Vec::new();
    // A file growing after the check is cut at the bound plus one byte, and refused.
    let read = file
        .take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut contents)
        .await;
    match read {
        Err(source) => Err(TlsError::Read { path, source }),
        Ok(n) if n as u64 > MAX_PEM_BYTES => Err(refuse(
            path,
            format!("larger than {MAX_PEM_BYTES} bytes, not a PEM certificate or key"),
        )),
        Ok(_) => Ok(contents),
    }
}

/// What a file that is not a regular file is, for the error message.
fn file_type_name(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;

    if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
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

    /// Checks whenever the directory changes (after [`WATCH_SETTLE`]) and every `period`,
    /// until `shutdown` is cancelled, logging each swap and each rejected or unreadable pair
    /// (once, until the files change or become readable again). If the directory cannot be
    /// watched, that is logged and the periodic check carries on alone.
    pub async fn run(mut self, period: Duration, shutdown: CancellationToken) {
        let dir = self.dir.path().display().to_string();
        let changed = Arc::new(Notify::new());
        // Dropping the watcher stops it; it lives as long as this loop.
        let _watcher = watch(self.dir.path(), Arc::clone(&changed), period);
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut unreadable = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
                () = changed.notified() => {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(WATCH_SETTLE) => {}
                    }
                }
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

/// Watches `dir` itself, not the files in it (kubelet swaps the `..data` symlink, which a
/// watch on `tls.crt` never sees), and wakes `changed` on every event that may have changed
/// the pair. `None`, logged, if the directory cannot be watched.
fn watch(dir: &Path, changed: Arc<Notify>, period: Duration) -> Option<RecommendedWatcher> {
    let handler = move |event: notify::Result<notify::Event>| match event {
        Ok(event) if !may_change_files(&event.kind) => {}
        Ok(_) => changed.notify_one(),
        Err(error) => {
            // Events may have been lost (queue overflow): read again to be sure.
            tracing::debug!(%error, "certificate directory watch error");
            changed.notify_one();
        }
    };
    let watching = notify::recommended_watcher(handler).and_then(|mut watcher| {
        watcher.watch(dir, RecursiveMode::NonRecursive)?;
        Ok(watcher)
    });
    let shown = dir.display();
    match watching {
        Ok(watcher) => {
            tracing::debug!(dir = %shown, "watching the certificate directory");
            Some(watcher)
        }
        Err(error) => {
            tracing::warn!(dir = %shown, %error, ?period, "cannot watch the certificate directory; re-reading it periodically only");
            None
        }
    }
}

/// Everything but reads: opening and closing a file without writing it (as reading the pair
/// does) must not trigger another read.
fn may_change_files(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
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

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success(), "mkfifo {}", path.display());
    }

    #[tokio::test]
    async fn a_fifo_in_the_cert_dir_is_refused_at_once_instead_of_hanging_startup() {
        let tmp = tempfile::tempdir().unwrap();
        let pair = generated_pair();
        fs::write(tmp.path().join(CERT_FILE), &pair.cert).unwrap();
        mkfifo(&tmp.path().join(KEY_FILE));

        // Without a writer, a blocking open of the FIFO would never return.
        let loaded =
            tokio::time::timeout(Duration::from_secs(5), CertDir::new(tmp.path()).load()).await;
        let error = loaded.expect("load hung on a FIFO").unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("cannot read ")
                && message.contains(KEY_FILE)
                && message.contains("a FIFO (named pipe), not a regular file"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_fifo_swapped_in_on_reload_keeps_the_old_certificate() {
        let tmp = tempfile::tempdir().unwrap();
        write_pair(tmp.path(), &generated_pair());
        let (resolver, mut reloader) = CertDir::new(tmp.path()).load().await.unwrap();
        let before = served_der(&resolver);

        fs::remove_file(tmp.path().join(CERT_FILE)).unwrap();
        mkfifo(&tmp.path().join(CERT_FILE));
        let checked = tokio::time::timeout(Duration::from_secs(5), reloader.check())
            .await
            .expect("reload hung on a FIFO");
        assert!(
            matches!(&checked, Reload::Unreadable(TlsError::Read { path, .. }) if path.ends_with(CERT_FILE)),
            "{checked:?}"
        );
        assert_eq!(served_der(&resolver), before);
    }

    #[tokio::test]
    async fn directories_devices_and_oversized_files_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let pair = generated_pair();
        fs::write(tmp.path().join(KEY_FILE), &pair.key).unwrap();
        let cert = tmp.path().join(CERT_FILE);

        fs::create_dir(&cert).unwrap();
        let message = CertDir::new(tmp.path())
            .read()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("a directory, not a regular file"),
            "{message}"
        );
        fs::remove_dir(&cert).unwrap();

        // An endless device would otherwise be read until memory runs out.
        std::os::unix::fs::symlink("/dev/zero", &cert).unwrap();
        let message = CertDir::new(tmp.path())
            .read()
            .await
            .unwrap_err()
            .to_string();
        assert!(message.contains("a character device"), "{message}");
        fs::remove_file(&cert).unwrap();

        fs::write(&cert, vec![b'x'; MAX_PEM_BYTES as usize + 1]).unwrap();
        let message = CertDir::new(tmp.path())
            .read()
            .await
            .unwrap_err()
            .to_string();
        assert!(message.contains("larger than"), "{message}");
    }

    /// Lays `pair` out as kubelet does a Secret volume: `..<timestamp>/tls.{crt,key}`,
    /// `..data -> ..<timestamp>`, `tls.crt -> ..data/tls.crt`, `tls.key -> ..data/tls.key`.
    #[cfg(unix)]
    fn secret_volume(root: &Path, pair: &PemPair) {
        use std::os::unix::fs::symlink;

        let first = root.join("..2025_01_01_00_00_00.000000001");
        fs::create_dir(&first).unwrap();
        write_pair(&first, pair);
        symlink(first.file_name().unwrap(), root.join("..data")).unwrap();
        symlink("..data/tls.crt", root.join(CERT_FILE)).unwrap();
        symlink("..data/tls.key", root.join(KEY_FILE)).unwrap();
    }

    /// Updates a Secret volume as kubelet does: a new timestamped directory, a `..data_tmp`
    /// symlink to it renamed over `..data` (atomic), the old directory removed.
    #[cfg(unix)]
    fn swap_secret_volume(root: &Path, timestamp: &str, pair: &PemPair) {
        use std::os::unix::fs::symlink;

        let old = fs::read_link(root.join("..data")).unwrap();
        let new = root.join(format!("..{timestamp}"));
        fs::create_dir(&new).unwrap();
        write_pair(&new, pair);
        symlink(new.file_name().unwrap(), root.join("..data_tmp")).unwrap();
        fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        fs::remove_dir_all(root.join(old)).unwrap();
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn secret_volume_data_symlink_swap_is_picked_up() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        secret_volume(root, &generated_pair());
        let (resolver, mut reloader) = CertDir::new(root).load().await.unwrap();
        let before = served_der(&resolver);

        let rotated = generated_pair();
        swap_secret_volume(root, "2025_02_01_00_00_00.000000002", &rotated);

        assert!(matches!(reloader.check().await, Reload::Swapped { .. }));
        let after = served_der(&resolver);
        assert_ne!(after, before);
        let expected = ServingKey::from_pem(&rotated).unwrap();
        assert_eq!(after, expected.end_entity().unwrap().as_ref());
    }

    /// Runs the reloader with a period no test waits for, so only the directory watch can
    /// pick up a change, and returns what it serves once it differs from `before`.
    async fn served_after_change(
        resolver: &CertResolver,
        before: &[u8],
        change: impl FnOnce(),
    ) -> Option<Vec<u8>> {
        let started = tokio::time::Instant::now();
        change();
        while started.elapsed() < Duration::from_secs(5) {
            let now = served_der(resolver);
            if now != before {
                return Some(now);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn directory_watch_serves_a_data_symlink_swap_without_waiting_for_the_period() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        secret_volume(&root, &generated_pair());
        let (resolver, reloader) = CertDir::new(&root).load().await.unwrap();
        let before = served_der(&resolver);
        let stop = CancellationToken::new();
        let running = tokio::spawn(reloader.run(Duration::from_secs(3600), stop.clone()));
        // The first periodic check runs at once; let it pass and the watch be set up.
        tokio::time::sleep(Duration::from_millis(100)).await;

        let rotated = generated_pair();
        let served = served_after_change(&resolver, &before, || {
            swap_secret_volume(&root, "2025_02_01_00_00_00.000000002", &rotated);
        })
        .await;

        let expected = ServingKey::from_pem(&rotated).unwrap();
        assert_eq!(
            served.as_deref(),
            Some(expected.end_entity().unwrap().as_ref())
        );
        stop.cancel();
        running.await.unwrap();
    }

    #[tokio::test]
    async fn directory_watch_serves_files_rewritten_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        write_pair(&root, &generated_pair());
        let (resolver, reloader) = CertDir::new(&root).load().await.unwrap();
        let before = served_der(&resolver);
        let stop = CancellationToken::new();
        let running = tokio::spawn(reloader.run(Duration::from_secs(3600), stop.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;

        let rotated = generated_pair();
        let served = served_after_change(&resolver, &before, || write_pair(&root, &rotated)).await;

        let expected = ServingKey::from_pem(&rotated).unwrap();
        assert_eq!(
            served.as_deref(),
            Some(expected.end_entity().unwrap().as_ref())
        );
        stop.cancel();
        running.await.unwrap();
    }

    #[test]
    fn reading_the_pair_is_not_a_change_but_writing_or_renaming_is() {
        use notify::event::{CreateKind, ModifyKind, RemoveKind, RenameMode};

        assert!(!may_change_files(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!may_change_files(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(may_change_files(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(may_change_files(&EventKind::Create(CreateKind::Any)));
        assert!(may_change_files(&EventKind::Modify(ModifyKind::Name(
            RenameMode::To
        ))));
        assert!(may_change_files(&EventKind::Remove(RemoveKind::Any)));
    }

    #[tokio::test]
    async fn reading_the_pair_does_not_wake_the_watch_but_writing_it_does() {
        let tmp = tempfile::tempdir().unwrap();
        write_pair(tmp.path(), &generated_pair());
        let changed = Arc::new(Notify::new());
        let _watcher = watch(tmp.path(), Arc::clone(&changed), RELOAD_PERIOD).unwrap();
        let woken = || tokio::time::timeout(Duration::from_millis(300), changed.notified());

        // What every check does; if it woke the watch, checks would feed themselves.
        CertDir::new(tmp.path()).read().await.unwrap();
        assert!(woken().await.is_err(), "a read woke the watch");

        write_pair(tmp.path(), &generated_pair());
        assert!(woken().await.is_ok(), "a write did not wake the watch");
    }

    #[test]
    fn a_directory_that_cannot_be_watched_leaves_periodic_rereading() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("missing");
        assert!(watch(&missing, Arc::new(Notify::new()), RELOAD_PERIOD).is_none());
        assert!(watch(tmp.path(), Arc::new(Notify::new()), RELOAD_PERIOD).is_some());
    }

    #[test]
    fn pem_pair_debug_never_shows_the_key() {
        let pair = generated_pair();
        let shown = format!("{pair:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }
}
