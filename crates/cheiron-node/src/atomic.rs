//! Writing a host file so that a reader (the kubelet, `cheiron credential-provider`) sees the
//! old content or the new one, never a part: a temporary file beside the target, written,
//! fsynced, given its mode, renamed over the target, and the directory fsynced. A crash at any
//! step leaves the target as it was (or, after the rename, as it should be); the temporary file
//! it may leave is replaced by the next write.
//!
//! A target that is a symbolic link is refused: the rename would replace the link with a regular
//! file (leaving whatever it pointed to as it was, and the new content where the link was).

use std::{
    fs::{self, File, OpenOptions, Permissions},
    io::{self, Write},
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

/// Mode of the files cheiron writes on a node: owner read and write only.
pub const PRIVATE_MODE: u32 = 0o600;

/// The steps of [`write()`], in order; tests stop a write after one of them to simulate a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The temporary file exists (empty).
    Created,
    /// The content is written to the temporary file, not yet synced.
    Written,
    /// The temporary file is on disk with its mode.
    Synced,
    /// The temporary file has replaced the target; the directory is not yet synced.
    Renamed,
}

/// The temporary file beside `path` (one per target: one writer per file).
pub fn temporary_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.cheiron-tmp"))
}

/// True when `path` is a symbolic link (not followed); `false` when it does not exist.
pub fn is_link(path: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.file_type().is_symlink()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The error [`write()`] returns for a target that is a symbolic link.
fn link_refused() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "a symbolic link; refusing to replace it (name the file itself)",
    )
}

/// Replaces `path` with `bytes`, mode `mode`, atomically; refuses a `path` that is a symbolic
/// link.
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_with(path, bytes, mode, &mut |_| Ok(()))
}

/// [`write()`], calling `after` after each [`Step`]; an error from `after` stops the write there,
/// as a crash would.
pub fn write_with(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    after: &mut dyn FnMut(Step) -> io::Result<()>,
) -> io::Result<()> {
    if is_link(path)? {
        return Err(link_refused());
    }
    let temporary = temporary_path(path);
    match fs::remove_file(&temporary) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temporary)?;
    after(Step::Created)?;
    file.write_all(bytes)?;
    after(Step::Written)?;
    // The umask may have narrowed `mode` at creation; set it exactly.
    file.set_permissions(Permissions::from_mode(mode))?;
    file.sync_all()?;
    drop(file);
    after(Step::Synced)?;
    fs::rename(&temporary, path)?;
    after(Step::Renamed)?;
    sync_directory(path)
}

/// Removes `path` (absent is fine) and syncs its directory.
pub fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => sync_directory(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Reads `path`; `None` when it does not exist.
pub fn read(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The permission bits of `path`, `None` when it does not exist.
pub fn mode_of(path: &Path) -> io::Result<Option<u32>> {
    match fs::metadata(path) {
        Ok(m) => Ok(Some(m.permissions().mode() & 0o7777)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn sync_directory(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPS: [Step; 4] = [Step::Created, Step::Written, Step::Synced, Step::Renamed];

    fn crash_at(stop: Step) -> impl FnMut(Step) -> io::Result<()> {
        move |step| {
            if step == stop {
                Err(io::Error::other("simulated crash"))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn a_crash_at_any_step_leaves_the_old_or_the_new_file_whole() -> io::Result<()> {
        for stop in STEPS {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("config.json");
            fs::write(&path, b"old content")?;
            let crashed = write_with(&path, b"new content", PRIVATE_MODE, &mut crash_at(stop));
            assert!(crashed.is_err(), "{stop:?}");
            let seen = fs::read(&path)?;
            if stop == Step::Renamed {
                assert_eq!(seen, b"new content", "{stop:?}");
            } else {
                assert_eq!(seen, b"old content", "{stop:?}");
            }
            // The next write succeeds and leaves nothing behind.
            write(&path, b"next content", PRIVATE_MODE)?;
            assert_eq!(fs::read(&path)?, b"next content");
            assert!(!temporary_path(&path).exists(), "{stop:?}");
            let names: Vec<_> = fs::read_dir(dir.path())?.collect::<Result<_, _>>()?;
            assert_eq!(names.len(), 1, "{stop:?}");
        }
        Ok(())
    }

    #[test]
    fn a_crash_before_the_first_rename_leaves_no_target() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("credentials.json");
        let crashed = write_with(&path, b"x", PRIVATE_MODE, &mut crash_at(Step::Synced));
        assert!(crashed.is_err());
        assert!(!path.exists());
        Ok(())
    }

    #[test]
    fn the_file_gets_exactly_its_mode_whatever_the_umask() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("credentials.json");
        fs::write(&path, b"old")?;
        fs::set_permissions(&path, Permissions::from_mode(0o644))?;
        write(&path, b"new", PRIVATE_MODE)?;
        assert_eq!(mode_of(&path)?, Some(0o600));
        write(&path, b"newer", 0o640)?;
        assert_eq!(mode_of(&path)?, Some(0o640));
        Ok(())
    }

    #[test]
    fn a_symbolic_link_is_never_replaced_nor_followed() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("elsewhere");
        fs::write(&target, b"the target")?;
        fs::set_permissions(&target, Permissions::from_mode(0o644))?;
        let link = dir.path().join("config.json");
        std::os::unix::fs::symlink(&target, &link)?;
        let refused = write(&link, b"secret", PRIVATE_MODE);
        assert_eq!(
            refused.map_err(|e| e.kind()),
            Err(io::ErrorKind::InvalidInput)
        );
        assert!(is_link(&link)?);
        assert_eq!(fs::read(&target)?, b"the target");
        assert_eq!(mode_of(&target)?, Some(0o644));
        assert!(!temporary_path(&link).exists());
        Ok(())
    }

    #[test]
    fn removing_an_absent_file_is_not_an_error() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("gone");
        remove(&path)?;
        fs::write(&path, b"x")?;
        remove(&path)?;
        assert!(!path.exists());
        Ok(())
    }
}
