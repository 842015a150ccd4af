//! Build script: the git commit the `cheiron` binary is built from, for `cheiron version` and
//! `--version` (`CHEIRON_GIT_COMMIT`). A build outside a git checkout (a source tarball, a
//! vendored copy) says `unknown`, unless the variable of that name is set for the build.

use std::{path::Path, process::Command};

fn main() {
    println!("cargo:rerun-if-env-changed=CHEIRON_GIT_COMMIT");
    let commit = std::env::var("CHEIRON_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=CHEIRON_GIT_COMMIT={}", commit.trim());
}

/// `git rev-parse --short=12 HEAD`, and the files whose change moves it, for cargo to watch.
fn git_commit() -> Option<String> {
    let git_dir = git(&["rev-parse", "--git-dir"])?;
    let common_dir = git(&["rev-parse", "--git-common-dir"]).unwrap_or_else(|| git_dir.clone());
    let mut watched = vec![Path::new(&git_dir).join("HEAD")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(Path::new(&common_dir).join(branch));
    }
    watched.push(Path::new(&common_dir).join("packed-refs"));
    // Only files that exist: cargo reruns a script whose watched path is missing every time.
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}

/// The trimmed standard output of a successful `git ARGS`.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}
