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
    io::{self, Read, Write},
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
    write_from(path, &mut &bytes[..], mode, after)
}

/// Replaces `path` with a copy of the file `source`, mode `mode`, atomically, streaming it (a
/// binary is never held in memory whole: an init container installing the plugin has a memory
/// limit); refuses a `path` that is a symbolic link.
pub fn copy(source: &Path, path: &Path, mode: u32) -> io::Result<()> {
    write_from(path, &mut File::open(source)?, mode, &mut |_| Ok(()))
}

/// Whether the files `a` and `b` hold the same bytes, read in blocks; `false` when `b` does not
/// exist.
pub fn same_content(a: &Path, b: &Path) -> io::Result<bool> {
    let mut b = match File::open(b) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut a = File::open(a)?;
    if a.metadata()?.len() != b.metadata()?.len() {
        return Ok(false);
    }
    const BLOCK: usize = 64 * 1024;
    let (mut block_a, mut block_b) = (vec![0; BLOCK], vec![0; BLOCK]);
    loop {
        let n = read_block(&mut a, &mut block_a)?;
        if n != read_block(&mut b, &mut block_b)? || block_a[..n] != block_b[..n] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Fills `block` from `file` as far as it goes; the number of bytes read (less only at the end).
fn read_block(file: &mut File, block: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < block.len() {
        match file.read(&mut block[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// [`write_with`] of what `content` reads.
fn write_from(
    path: &Path,
    content: &mut dyn Read,
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
    io::copy(content, &mut file)?;
    file.flush()?;
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
    fn same_content_compares_every_block_and_the_length() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        // Over two blocks, so the comparison crosses a block boundary.
        let content: Vec<u8> = (0..150_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(&a, &content)?;
        assert!(!same_content(&a, &b)?, "an absent file differs");
        fs::write(&b, &content)?;
        assert!(same_content(&a, &b)?);
        let mut last_changed = content.clone();
        if let Some(last) = last_changed.last_mut() {
            *last ^= 1;
        }
        fs::write(&b, &last_changed)?;
        assert!(!same_content(&a, &b)?, "a byte of the last block differs");
        fs::write(&b, &content[..content.len() - 1])?;
        assert!(!same_content(&a, &b)?, "a shorter file differs");
        fs::write(&b, b"")?;
        fs::write(&a, b"")?;
        assert!(same_content(&a, &b)?, "two empty files are the same");
        Ok(())
    }

    #[test]
    fn copy_replaces_the_target_with_the_whole_source_and_its_mode() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (source, target) = (dir.path().join("cheiron"), dir.path().join("plugin"));
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
        fs::write(&source, &content)?;
        fs::write(&target, b"an older plugin")?;
        copy(&source, &target, 0o755)?;
        assert_eq!(fs::read(&target)?, content);
        assert_eq!(mode_of(&target)?, Some(0o755));
        assert!(!temporary_path(&target).exists());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link)?;
        assert!(copy(&source, &link, 0o755).is_err(), "a link is refused");
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
