//! What the tests build on first use and cache outside the repo, through the repo's scripts:
//! helm (`scripts/helm`) and cheiron's image archive (`scripts/image`). Each is found once per
//! test binary; a failure is kept and given to every caller, saying how to provide the tool.

use std::{
    io::{BufRead, BufReader, Read, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
};

use super::Result;

/// The variable naming an image archive `scripts/image` wrote (CI sets it).
pub const IMAGE_ARCHIVE_ENV: &str = "CHEIRON_IMAGE_ARCHIVE";

/// The repository's root directory.
pub fn repo() -> Result<PathBuf> {
    Ok(Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .ok_or("the harness crate is not two levels below the repository")?
        .to_owned())
}

/// A helm v3 executable from `scripts/helm` (`CHEIRON_HELM`, or built once from the Go module
/// proxy and cached in `~/.cache/cheiron/helm/`). Its progress goes straight to stderr: a
/// first build takes minutes.
pub fn helm() -> Result<PathBuf> {
    static HELM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = HELM.get_or_init(|| {
        let script = repo().map_err(|e| e.to_string())?.join("scripts/helm");
        let mut child = Command::new(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let mut progress = Vec::new();
        if let Some(stderr) = child.stderr.take() {
            for line in BufReader::new(stderr).lines().map_while(std::result::Result::ok) {
                let _ = writeln!(std::io::stderr(), "{line}");
                progress.push(line);
            }
        }
        let mut stdout = String::new();
        if let Some(mut out) = child.stdout.take() {
            out.read_to_string(&mut stdout).map_err(|e| e.to_string())?;
        }
        let status = child.wait().map_err(|e| e.to_string())?;
        let path = PathBuf::from(stdout.trim());
        if !status.success() || stdout.trim().is_empty() {
            return Err(format!(
                "these tests need helm v3, and {} could not provide it ({status}):\n{}\n\
                 Install Go >= 1.26 (scripts/helm then builds helm from the Go module proxy once \
                 and caches it in ~/.cache/cheiron/helm/) or set CHEIRON_HELM to a helm v3 executable.",
                script.display(),
                progress.join("\n")
            ));
        }
        Ok(path)
    });
    found.clone().map_err(Into::into)
}

/// cheiron's image archive: the one [`IMAGE_ARCHIVE_ENV`] names, or, when that is not set, the
/// one `scripts/image` builds (the first run builds static release binaries and crane, about 15
/// minutes here; later runs reuse both), so the README's `cargo test --workspace` passes on a
/// fresh clone.
pub fn image_archive() -> Result<PathBuf> {
    static ARCHIVE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = ARCHIVE.get_or_init(|| {
        if let Some(path) = std::env::var_os(IMAGE_ARCHIVE_ENV).filter(|p| !p.is_empty()) {
            return Ok(PathBuf::from(path));
        }
        let repo = repo().map_err(|e| e.to_string())?;
        let script = repo.join("scripts/image");
        eprintln!(
            "{IMAGE_ARCHIVE_ENV} is not set: building the image with {} (cached after the \
             first run; set {IMAGE_ARCHIVE_ENV} to an archive it wrote to skip this)",
            script.display()
        );
        let output = Command::new(&script)
            .current_dir(&repo)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} failed ({}); its error is above. Fix it, or set {IMAGE_ARCHIVE_ENV} to an \
                 archive scripts/image wrote before (docs/image.md)",
                script.display(),
                output.status
            ));
        }
        let path = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if path.is_empty() {
            return Err(format!("{} printed no archive path", script.display()));
        }
        Ok(PathBuf::from(path))
    });
    found.clone().map_err(Into::into)
}
