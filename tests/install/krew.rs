//! `scripts/krew-manifest`: the krew plugin manifest of `kubectl cheiron`, made from release
//! archives, is a krew `v1alpha2` Plugin that names each archive with its real sha256.

use std::{io::Write, path::Path};

use super::*;

/// A release archive `name` in `dir` holding `members` (name, content) at its top.
fn archive(dir: &Path, name: &str, members: &[(&str, &[u8])]) -> Result<PathBuf> {
    let path = dir.join(name);
    let file = std::fs::File::create(&path)?;
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        file,
        flate2::Compression::default(),
    ));
    for (member, content) in members {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        tar.append_data(&mut header, member, *content)?;
    }
    tar.into_inner()?.finish()?.flush()?;
    Ok(path)
}

fn krew_manifest(args: &[&std::ffi::OsStr]) -> Result<Output> {
    Ok(Command::new(repo().join("scripts/krew-manifest"))
        .args(args)
        .stdin(Stdio::null())
        .output()?)
}

fn sha256_hex(path: &Path) -> Result<String> {
    let digest = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(path)?);
    Ok(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// The keys krew's Plugin type has at each level (krew decodes manifests strictly).
fn assert_only_keys(value: &Value, allowed: &[&str], what: &str) {
    for key in value.as_object().into_iter().flatten().map(|(k, _)| k) {
        assert!(
            allowed.contains(&key.as_str()),
            "{what}: unknown field {key}"
        );
    }
}

#[test]
fn krew_manifest_is_a_v1alpha2_plugin_with_the_sha256_of_each_archive() -> Result {
    let dir = tempfile::tempdir()?;
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let platforms = [
        ("linux", "amd64", "cheiron"),
        ("darwin", "arm64", "cheiron"),
        ("windows", "amd64", "cheiron.exe"),
    ];
    let mut archives = Vec::new();
    for (os, arch, bin) in platforms {
        let content = format!("the {os}/{arch} binary");
        archives.push(archive(
            dir.path(),
            &format!("cheiron-{version}-{os}-{arch}.tar.gz"),
            &[(bin, content.as_bytes())],
        )?);
    }
    let out = dir.path().join("plugins/cheiron.yaml");
    let base = "https://github.com/anny-co/cheiron/releases/download/v0";
    let mut args = vec![
        std::ffi::OsStr::new("--base-url"),
        std::ffi::OsStr::new(base),
        std::ffi::OsStr::new("--output"),
        out.as_os_str(),
    ];
    args.extend(archives.iter().map(|a| a.as_os_str()));
    let output = krew_manifest(&args)?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let manifest: Value = serde_saphyr::from_slice(&std::fs::read(&out)?)?;
    assert_only_keys(
        &manifest,
        &["apiVersion", "kind", "metadata", "spec"],
        "Plugin",
    );
    assert_eq!(
        manifest["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(
        manifest["metadata"],
        serde_json::json!({"name": "cheiron"}),
        "the name kubectl runs it by (kubectl cheiron), and the file's"
    );
    let spec = &manifest["spec"];
    assert_only_keys(
        spec,
        &[
            "version",
            "homepage",
            "shortDescription",
            "description",
            "caveats",
            "platforms",
        ],
        "spec",
    );
    assert_eq!(spec["version"], version.as_str());
    let short = spec["shortDescription"].as_str().unwrap_or_default();
    assert!(!short.is_empty() && short.len() <= 50, "{short}");
    assert!(
        spec["homepage"]
            .as_str()
            .is_some_and(|h| h.starts_with("https://"))
    );
    let listed = spec["platforms"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), platforms.len(), "{listed:?}");
    for ((os, arch, bin), (platform, path)) in platforms.iter().zip(listed.iter().zip(&archives)) {
        let what = format!("{os}/{arch}");
        assert_only_keys(
            platform,
            &["selector", "uri", "sha256", "bin", "files"],
            &what,
        );
        assert_eq!(
            platform["selector"],
            serde_json::json!({"matchLabels": {"os": os, "arch": arch}}),
            "{what}"
        );
        let file = path
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        assert_eq!(platform["uri"], format!("{base}/{file}"), "{what}");
        assert_eq!(platform["sha256"], sha256_hex(path)?, "{what}");
        assert_eq!(platform["bin"], *bin, "{what}");
        assert_eq!(
            platform["files"],
            serde_json::json!([{"from": bin, "to": "."}]),
            "{what}"
        );
    }
    Ok(())
}

#[test]
fn krew_manifest_refuses_archives_it_cannot_vouch_for() -> Result {
    let dir = tempfile::tempdir()?;
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let good = archive(
        dir.path(),
        &format!("cheiron-{version}-linux-amd64.tar.gz"),
        &[("cheiron", b"binary")],
    )?;
    let nested = archive(
        dir.path(),
        &format!("cheiron-{version}-linux-arm64.tar.gz"),
        &[("bin/cheiron", b"binary")],
    )?;
    let misnamed = archive(
        dir.path(),
        "cheiron-linux-amd64.tar.gz",
        &[("cheiron", b"binary")],
    )?;
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    for (args, expected) in [
        (
            vec![os("--base-url"), os("http://example.com"), good.as_os_str()],
            "https URL",
        ),
        (
            vec![
                os("--base-url"),
                os("https://example.com"),
                nested.as_os_str(),
            ],
            "no cheiron at the top",
        ),
        (
            vec![
                os("--base-url"),
                os("https://example.com"),
                misnamed.as_os_str(),
            ],
            "expected cheiron-v",
        ),
        (
            vec![
                os("--base-url"),
                os("https://example.com"),
                good.as_os_str(),
                good.as_os_str(),
            ],
            "a second archive for linux/amd64",
        ),
        (
            vec![
                os("--base-url"),
                os("https://example.com"),
                os("--version"),
                os("0.1.0"),
                good.as_os_str(),
            ],
            "leading v",
        ),
        (
            vec![os("--base-url"), os("https://example.com")],
            "no archive given",
        ),
    ] {
        let output = krew_manifest(&args)?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            output.stdout.is_empty(),
            "{args:?}: no manifest on a refusal"
        );
    }
    Ok(())
}
