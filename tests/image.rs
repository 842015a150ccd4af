//! The container image, as `scripts/image` writes it: read from the archive named by
//! `CHEIRON_IMAGE_ARCHIVE`, or, when that is not set, built once by running `scripts/image`
//! (the first run builds static release binaries and crane, about 15 minutes here; later runs
//! reuse both), so the README's `cargo test --workspace` passes on a fresh clone. CI runs
//! `scripts/image` first and exports the variable. A build that fails makes every test fail
//! with the script's error.
//!
//! - the archive: an OCI image layout whose blobs match their digests, plus the Docker
//!   `manifest.json` naming the same config, layer and tag, so `docker load` and `podman load`
//!   both take it;
//! - the config: non-root 65532 (what the chart and the plain manifests run as), the
//!   entrypoint, a PATH that finds the bare command names the chart and manifests use;
//! - the layer: both binaries, executable, no shell;
//! - the binaries: static (no program interpreter, no shared library) and they run outside the
//!   image, printing the Cargo version.
//! - the CA bundle: Debian's roots where Go and rustls look, and a Go program standing in for a
//!   credential-provider plugin, run in the image's files with an empty environment as the
//!   controller runs plugins, trusts them (built with Go from `tests/support/ca_probe/`).

use std::{
    collections::BTreeMap,
    error::Error,
    fs,
    io::Read,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
    thread,
    time::Duration,
};

use cheiron_harness::tools::IMAGE_ARCHIVE_ENV;
use serde_json::Value;

type TestResult = Result<(), Box<dyn Error>>;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const BIN_DIR: &str = "usr/local/bin";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One member of the image layer.
struct Entry {
    kind: tar::EntryType,
    mode: u32,
    uid: u64,
    gid: u64,
    data: Vec<u8>,
}

/// What the archive holds, parsed once for all tests.
struct Image {
    /// Regular files of the archive by path (`oci-layout`, `index.json`, `blobs/sha256/…`).
    files: BTreeMap<String, Vec<u8>>,
    index: Value,
    manifest_digest: String,
    manifest: Value,
    config_digest: String,
    config: Value,
    layer_digest: String,
    /// The uncompressed layer, as a tar.
    layer_tar: Vec<u8>,
    /// Layer members by path, without a leading `./` or `/`, directories without trailing `/`.
    layer: BTreeMap<String, Entry>,
}

fn image() -> Result<&'static Image, String> {
    static IMAGE: OnceLock<Result<Image, String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let path = cheiron_harness::tools::image_archive().map_err(|e| e.to_string())?;
            load(&path).map_err(|e| {
                format!(
                    "cannot read the image archive {} ({IMAGE_ARCHIVE_ENV}): {e}; rebuild it \
                     with scripts/image",
                    path.display()
                )
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn load(path: &Path) -> Result<Image, Box<dyn Error>> {
    let mut files = BTreeMap::new();
    let mut archive = tar::Archive::new(fs::File::open(path)?);
    for member in archive.entries()? {
        let mut member = member?;
        if member.header().entry_type().is_file() {
            let name = member.path()?.to_string_lossy().into_owned();
            let mut data = Vec::new();
            member.read_to_end(&mut data)?;
            files.insert(name.trim_start_matches("./").to_owned(), data);
        }
    }
    let index: Value = serde_json::from_slice(file(&files, "index.json")?)?;
    let manifest_digest = str_at(&index, "/manifests/0/digest")?;
    let manifest: Value = serde_json::from_slice(blob(&files, &manifest_digest)?)?;
    let config_digest = str_at(&manifest, "/config/digest")?;
    let config: Value = serde_json::from_slice(blob(&files, &config_digest)?)?;
    let layer_digest = str_at(&manifest, "/layers/0/digest")?;
    let compressed = blob(&files, &layer_digest)?;
    let mut layer_tar = Vec::new();
    if compressed.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(compressed).read_to_end(&mut layer_tar)?;
    } else {
        layer_tar = compressed.to_vec();
    }
    let mut layer = BTreeMap::new();
    for member in tar::Archive::new(layer_tar.as_slice()).entries()? {
        let mut member = member?;
        let header = member.header();
        let (kind, mode, uid, gid) = (
            header.entry_type(),
            header.mode()?,
            header.uid()?,
            header.gid()?,
        );
        let name = member.path()?.to_string_lossy().into_owned();
        let name = name.trim_start_matches("./").trim_start_matches('/');
        let name = name.trim_end_matches('/').to_owned();
        let mut data = Vec::new();
        member.read_to_end(&mut data)?;
        layer.insert(
            name,
            Entry {
                kind,
                mode,
                uid,
                gid,
                data,
            },
        );
    }
    Ok(Image {
        files,
        index,
        manifest_digest,
        manifest,
        config_digest,
        config,
        layer_digest,
        layer_tar,
        layer,
    })
}

fn file<'a>(files: &'a BTreeMap<String, Vec<u8>>, name: &str) -> Result<&'a [u8], String> {
    files
        .get(name)
        .map(Vec::as_slice)
        .ok_or_else(|| format!("the archive has no {name}"))
}

fn blob_path(digest: &str) -> Result<String, String> {
    let hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| format!("digest {digest} is not sha256"))?;
    Ok(format!("blobs/sha256/{hex}"))
}

fn blob<'a>(files: &'a BTreeMap<String, Vec<u8>>, digest: &str) -> Result<&'a [u8], String> {
    file(files, &blob_path(digest)?)
}

fn str_at(value: &Value, pointer: &str) -> Result<String, String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("no string at {pointer} in {value}"))
}

fn sha256(data: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `amd64`/`arm64`: the platform scripts/image builds for, the one these tests run on.
fn oci_arch() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        "amd64"
    }
}

fn layer_file<'a>(image: &'a Image, path: &str) -> Result<&'a Entry, String> {
    image
        .layer
        .get(path)
        .ok_or_else(|| format!("the image has no /{path}"))
}

/// The version line of a package's Cargo.toml (`[package]` table), e.g. of `certs-tool/`.
fn package_version(manifest: &Path) -> Result<String, Box<dyn Error>> {
    let text = fs::read_to_string(manifest)?;
    let mut in_package = false;
    for line in text.lines() {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(rest) = line.strip_prefix("version = \"") {
            return Ok(rest.trim_end_matches('"').to_owned());
        }
    }
    Err(format!("no [package] version in {}", manifest.display()).into())
}

#[test]
fn archive_is_an_oci_layout_whose_blobs_match_their_digests() -> TestResult {
    let image = image()?;
    let layout: Value = serde_json::from_slice(file(&image.files, "oci-layout")?)?;
    assert_eq!(layout["imageLayoutVersion"], "1.0.0");

    // Every blob is named by its own digest.
    let blobs: Vec<_> = image
        .files
        .iter()
        .filter(|(name, _)| name.starts_with("blobs/"))
        .collect();
    assert_eq!(blobs.len(), 3, "manifest, config and one layer");
    for (name, data) in blobs {
        let hex = name
            .strip_prefix("blobs/sha256/")
            .ok_or_else(|| format!("{name} is not under blobs/sha256/"))?;
        assert_eq!(sha256(data), format!("sha256:{hex}"), "{name}");
    }

    // index.json → manifest → config and layer: digests, sizes and media types agree.
    let manifests = image.index["manifests"]
        .as_array()
        .ok_or("index.json has no manifests")?;
    assert_eq!(manifests.len(), 1, "one image: {}", image.index);
    let descriptors = [
        (&manifests[0], image.manifest_digest.as_str()),
        (&image.manifest["config"], image.config_digest.as_str()),
        (&image.manifest["layers"][0], image.layer_digest.as_str()),
    ];
    for (descriptor, digest) in descriptors {
        let data = blob(&image.files, digest)?;
        assert_eq!(sha256(data), digest);
        assert_eq!(
            descriptor["size"].as_u64(),
            Some(data.len() as u64),
            "{descriptor}"
        );
    }
    assert_eq!(
        manifests[0]["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        image.manifest["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    assert_eq!(
        image.manifest["layers"].as_array().map(Vec::len),
        Some(1),
        "one layer: {}",
        image.manifest
    );

    // The config's diff_id is the digest of the uncompressed layer.
    assert_eq!(
        image.config["rootfs"]["diff_ids"],
        serde_json::json!([sha256(&image.layer_tar)])
    );
    Ok(())
}

#[test]
fn docker_manifest_json_names_the_same_config_layer_and_tag_as_index_json() -> TestResult {
    let image = image()?;
    let docker: Value = serde_json::from_slice(file(&image.files, "manifest.json")?)?;
    let tag = str_at(
        &image.index,
        "/manifests/0/annotations/io.containerd.image.name",
    )?;
    assert!(
        tag.ends_with(&format!(":{VERSION}")),
        "{tag} is not tagged with the Cargo version {VERSION}"
    );
    assert_eq!(
        str_at(
            &image.index,
            "/manifests/0/annotations/org.opencontainers.image.ref.name"
        )?,
        tag
    );
    assert_eq!(
        docker,
        serde_json::json!([{
            "Config": blob_path(&image.config_digest)?,
            "RepoTags": [tag],
            "Layers": [blob_path(&image.layer_digest)?],
        }])
    );
    Ok(())
}

#[test]
fn config_runs_the_cheiron_entrypoint_as_65532_on_linux() -> TestResult {
    let config = &image()?.config;
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], oci_arch());
    let user = str_at(config, "/config/User")?;
    assert!(
        user == "65532:65532" || user == "65532",
        "User is {user:?}, not the non-root 65532"
    );
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/cheiron"])
    );
    assert!(
        config["config"]["Cmd"].is_null(),
        "no default arguments: {}",
        config["config"]
    );
    let labels = &config["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], VERSION);
    assert_eq!(labels["org.opencontainers.image.title"], "cheiron");
    assert_eq!(
        labels["org.opencontainers.image.source"],
        "https://github.com/anny-co/cheiron"
    );
    Ok(())
}

#[test]
fn image_user_is_the_uid_and_gid_the_chart_and_plain_manifests_run_as() -> TestResult {
    let image = image()?;
    let user = str_at(&image.config, "/config/User")?;
    let uid = user.split(':').next().unwrap_or_default();

    let values: Value = serde_saphyr::from_str(&fs::read_to_string(
        repo().join("charts/cheiron/values.yaml"),
    )?)?;
    let pod = &values["podSecurityContext"];
    assert_eq!(pod["runAsNonRoot"], Value::Bool(true));
    assert_eq!(
        pod["runAsUser"].as_u64().map(|u| u.to_string()),
        Some(uid.to_owned())
    );
    if let Some((_, gid)) = user.split_once(':') {
        assert_eq!(
            pod["runAsGroup"].as_u64().map(|g| g.to_string()),
            Some(gid.to_owned())
        );
    }

    let install = fs::read_to_string(repo().join("webhook-config/install.yaml"))?;
    assert!(
        install.contains(&format!("runAsUser: {uid}\n")),
        "webhook-config/install.yaml does not run as {uid}"
    );

    // The user has a name, as tools expect, and its group exists.
    let passwd = String::from_utf8(layer_file(image, "etc/passwd")?.data.clone())?;
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "/etc/passwd has no nonroot 65532:\n{passwd}"
    );
    let group = String::from_utf8(layer_file(image, "etc/group")?.data.clone())?;
    assert!(
        group.lines().any(|l| l.starts_with("nonroot:x:65532:")),
        "/etc/group has no nonroot 65532:\n{group}"
    );
    Ok(())
}

#[test]
fn path_finds_the_command_names_the_chart_and_plain_manifests_run() -> TestResult {
    let image = image()?;
    let env = image.config["config"]["Env"]
        .as_array()
        .ok_or("the config sets no Env")?;
    let path = env
        .iter()
        .filter_map(Value::as_str)
        .find_map(|e| e.strip_prefix("PATH="))
        .ok_or("the config sets no PATH")?;

    // `command: [name]` in the chart templates and `command:\n- name` in the plain manifests.
    let mut commands = Vec::new();
    for dir in [
        "charts/cheiron/templates",
        "charts/cheiron/templates/tests",
        "webhook-config",
    ] {
        for file in fs::read_dir(repo().join(dir))? {
            let path = file?.path();
            if path.is_dir() {
                continue;
            }
            let text = fs::read_to_string(path)?;
            let mut lines = text.lines().map(str::trim);
            while let Some(line) = lines.next() {
                if let Some(list) = line.strip_prefix("command: [") {
                    commands.push(list.trim_end_matches(']').to_owned());
                } else if line == "command:" {
                    let next = lines.next().unwrap_or_default();
                    // A command taken from values (`{{ … }}`) runs an image the operator
                    // names (the credential-provider plugins' init container), not cheiron's.
                    if !next.starts_with("{{") {
                        commands.push(next.trim_start_matches("- ").to_owned());
                    }
                }
            }
        }
    }
    commands.sort();
    commands.dedup();
    assert_eq!(commands, ["cheiron", "cheiron-certs"]);

    for command in &commands {
        let found = path.split(':').find_map(|dir| {
            let candidate = format!("{}/{command}", dir.trim_matches('/'));
            image.layer.get(&candidate).map(|_| candidate)
        });
        assert_eq!(
            found,
            Some(format!("{BIN_DIR}/{command}")),
            "PATH={path} does not find {command} in {BIN_DIR}"
        );
    }
    Ok(())
}

#[test]
fn both_binaries_are_in_the_layer_as_executable_files_owned_by_root() -> TestResult {
    let image = image()?;
    for name in ["cheiron", "cheiron-certs"] {
        let entry = layer_file(image, &format!("{BIN_DIR}/{name}"))?;
        assert!(
            entry.kind.is_file(),
            "/{BIN_DIR}/{name} is not a regular file"
        );
        assert_eq!(
            entry.mode & 0o7777,
            0o755,
            "/{BIN_DIR}/{name} mode {:o}",
            entry.mode
        );
        assert_eq!((entry.uid, entry.gid), (0, 0), "/{BIN_DIR}/{name} owner");
        assert!(!entry.data.is_empty());
    }
    Ok(())
}

#[test]
fn layer_has_no_shell_and_a_world_writable_sticky_tmp() -> TestResult {
    let image = image()?;
    for shell in ["bin/sh", "usr/bin/sh", "bin/bash", "bin/busybox"] {
        assert!(!image.layer.contains_key(shell), "the image has /{shell}");
    }
    let shells: Vec<_> = image
        .layer
        .keys()
        .filter(|path| {
            let name = path.rsplit('/').next().unwrap_or_default();
            ["sh", "ash", "bash", "dash", "busybox"].contains(&name)
        })
        .collect();
    assert!(shells.is_empty(), "shells in the image: {shells:?}");
    let tmp = layer_file(image, "tmp")?;
    assert!(tmp.kind.is_dir());
    assert_eq!(tmp.mode & 0o7777, 0o1777);
    Ok(())
}

/// `ET_EXEC`/`ET_DYN` ELF for this machine with no `PT_INTERP` and, when it has a dynamic
/// section (static-pie), no `DT_NEEDED`: the kernel runs it without a loader or libc.
fn assert_static_elf(name: &str, elf: &[u8]) -> TestResult {
    let u16_at = |at: usize| -> Result<u64, String> {
        let bytes = elf
            .get(at..at + 2)
            .ok_or_else(|| format!("{name}: truncated ELF"))?;
        Ok(u64::from(u16::from_le_bytes([bytes[0], bytes[1]])))
    };
    let u32_at = |at: usize| -> Result<u64, String> {
        let bytes: [u8; 4] = elf
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("{name}: truncated ELF"))?;
        Ok(u64::from(u32::from_le_bytes(bytes)))
    };
    let u64_at = |at: usize| -> Result<u64, String> {
        let bytes: [u8; 8] = elf
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("{name}: truncated ELF"))?;
        Ok(u64::from_le_bytes(bytes))
    };
    let index = |value: u64| usize::try_from(value).map_err(|e| format!("{name}: {e}"));

    assert_eq!(elf.get(..4), Some(&b"\x7fELF"[..]), "{name} is not ELF");
    assert_eq!(elf[4], 2, "{name}: not ELF64");
    assert_eq!(elf[5], 1, "{name}: not little-endian");
    let (exec, dyn_) = (2, 3);
    let kind = u16_at(16)?;
    assert!(
        kind == exec || kind == dyn_,
        "{name}: ELF type {kind} is not an executable"
    );
    let machine = if cfg!(target_arch = "aarch64") {
        0xb7
    } else {
        0x3e
    };
    assert_eq!(u16_at(18)?, machine, "{name}: built for another machine");

    let (ph_offset, ph_size, ph_count) = (index(u64_at(32)?)?, index(u16_at(54)?)?, u16_at(56)?);
    let (pt_dynamic, pt_interp, dt_null, dt_needed) = (2, 3, 0, 1);
    let mut dynamic = None;
    for i in 0..index(ph_count)? {
        let header = ph_offset + i * ph_size;
        let kind = u32_at(header)?;
        assert_ne!(
            kind, pt_interp,
            "{name} has a program interpreter: dynamically linked"
        );
        if kind == pt_dynamic {
            dynamic = Some((index(u64_at(header + 8)?)?, index(u64_at(header + 32)?)?));
        }
    }
    if let Some((offset, size)) = dynamic {
        for entry in (offset..offset + size).step_by(16) {
            let tag = u64_at(entry)?;
            if tag == dt_null {
                break;
            }
            assert_ne!(tag, dt_needed, "{name} needs a shared library");
        }
    }
    Ok(())
}

/// Copies `/usr/local/bin/<name>` out of the layer, with its mode from the layer, and runs it
/// with `args` and an empty environment.
fn run_from_layer(name: &str, args: &[&str]) -> Result<Output, Box<dyn Error>> {
    let entry = layer_file(image()?, &format!("{BIN_DIR}/{name}"))?;
    let dir = tempfile::tempdir()?;
    let path: PathBuf = dir.path().join(name);
    fs::write(&path, &entry.data)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(entry.mode & 0o7777))?;
    // Another test thread may fork while the file is still open for writing here, and the
    // child holds it until it execs: ETXTBSY, for a moment. Retry.
    let mut attempt = 0;
    loop {
        match Command::new(&path).args(args).env_clear().output() {
            Err(e) if e.raw_os_error() == Some(26) && attempt < 50 => {
                attempt += 1;
                thread::sleep(Duration::from_millis(20));
            }
            result => return Ok(result?),
        }
    }
}

fn assert_static_and_prints_version(name: &str, version: &str) -> TestResult {
    let entry = layer_file(image()?, &format!("{BIN_DIR}/{name}"))?;
    assert_static_elf(name, &entry.data)?;
    let out = run_from_layer(name, &["--version"])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} --version: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // cheiron adds the commit it was built from (build.rs): `cheiron 0.1.0 (commit 0123…)`.
    let line = stdout.trim();
    let commit = line
        .strip_prefix(&format!("{name} {version}"))
        .ok_or_else(|| format!("{name} --version printed {line:?}"))?;
    if name == "cheiron" {
        let hash = commit
            .strip_prefix(" (commit ")
            .and_then(|c| c.strip_suffix(')'))
            .ok_or_else(|| format!("no commit in {line:?}"))?;
        assert!(
            hash == "unknown" || (hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit())),
            "{line:?}"
        );
    } else {
        assert_eq!(commit, "", "{line:?}");
    }
    Ok(())
}

#[test]
fn cheiron_in_the_image_is_static_and_prints_the_cargo_version() -> TestResult {
    assert_static_and_prints_version("cheiron", VERSION)
}

#[test]
fn cheiron_certs_in_the_image_is_static_and_prints_its_cargo_version() -> TestResult {
    let version = package_version(&repo().join("certs-tool/Cargo.toml"))?;
    assert_static_and_prints_version("cheiron-certs", &version)
}

const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";

/// The PEM certificate blocks of `bundle`, each as its PEM text.
fn pem_certificates(bundle: &str) -> Vec<&str> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut blocks = Vec::new();
    let mut rest = bundle;
    while let Some(start) = rest.find(BEGIN) {
        let Some(end) = rest[start..].find(END) else {
            break;
        };
        blocks.push(&rest[start..start + end + END.len()]);
        rest = &rest[start + end + END.len()..];
    }
    blocks
}

#[test]
fn the_layer_carries_the_system_ca_bundle_where_go_and_rustls_look_for_it() -> TestResult {
    use base64::Engine;
    let entry = layer_file(image()?, CA_BUNDLE)?;
    assert!(entry.kind.is_file(), "/{CA_BUNDLE} is not a regular file");
    assert_eq!(
        entry.mode & 0o7777,
        0o644,
        "/{CA_BUNDLE} mode {:o}",
        entry.mode
    );
    assert_eq!((entry.uid, entry.gid), (0, 0), "/{CA_BUNDLE} owner");
    let bundle = String::from_utf8(entry.data.clone())?;
    let blocks = pem_certificates(&bundle);
    assert!(!blocks.is_empty(), "/{CA_BUNDLE} holds no certificate");
    for block in blocks {
        let body: String = block.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD.decode(body)?;
        assert_eq!(der.first(), Some(&0x30), "a certificate is a DER SEQUENCE");
    }
    Ok(())
}

/// Builds `tests/support/ca_probe` (a static Go program) into `dir`.
fn build_ca_probe(dir: &Path) -> Result<PathBuf, Box<dyn Error>> {
    let out = dir.join("ca_probe");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/ca_probe/main.go");
    let built = Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg(&source)
        .env("CGO_ENABLED", "0")
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .env("GOFLAGS", "")
        .output()
        .map_err(|e| {
            format!("this test builds tests/support/ca_probe with Go, and `go` did not run ({e}): install Go")
        })?;
    if !built.status.success() {
        return Err(format!(
            "go build tests/support/ca_probe failed: {}",
            String::from_utf8_lossy(&built.stderr)
        )
        .into());
    }
    Ok(out)
}

/// Runs the probe in a root directory holding the image's `/etc/ssl` and nothing else of this
/// machine (`unshare --map-root-user --root`), with an empty environment, as the controller
/// runs a plugin; it verifies the certificate `cert` (PEM).
fn probe_in(root: &Path, cert: &str) -> Result<Output, Box<dyn Error>> {
    let build = tempfile::tempdir()?;
    let probe = build_ca_probe(build.path())?;
    fs::copy(&probe, root.join("ca_probe"))?;
    fs::write(root.join("cert.pem"), cert)?;
    Ok(Command::new("unshare")
        .args(["--map-root-user", "--root"])
        .arg(root)
        .args(["/ca_probe", "/cert.pem"])
        .env_clear()
        .output()?)
}

#[test]
fn a_go_plugin_run_in_the_image_with_an_empty_environment_trusts_the_bundles_roots() -> TestResult {
    let entry = layer_file(image()?, CA_BUNDLE)?;
    let bundle = String::from_utf8(entry.data.clone())?;
    let root_cert = *pem_certificates(&bundle)
        .first()
        .ok_or("the image's CA bundle holds no certificate")?;

    let with = tempfile::tempdir()?;
    let certs = with.path().join("etc/ssl/certs");
    fs::create_dir_all(&certs)?;
    fs::write(certs.join("ca-certificates.crt"), &entry.data)?;
    let out = probe_in(with.path(), root_cert)?;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "verified",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The control: the same run without the image's bundle finds no root.
    let without = tempfile::tempdir()?;
    let out = probe_in(without.path(), root_cert)?;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && said.contains("not verified"),
        "without the bundle: {said}"
    );
    Ok(())
}
