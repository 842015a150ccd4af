//! The committed generated files are what the program generates.

use cheiron::install::Install;

use super::*;

#[test]
fn webhook_config_is_what_cheiron_manifests_generates() -> Result {
    let dir = repo().join("webhook-config");
    let files = Install::default().files()?;
    let mut stale = Vec::new();
    for file in &files {
        let committed = std::fs::read_to_string(dir.join(file.name)).unwrap_or_default();
        if committed != file.contents {
            stale.push(file.name);
        }
    }
    let generated: Vec<&str> = files.iter().map(|f| f.name).collect();
    let mut strays = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if !generated.contains(&name.as_str()) {
            strays.push(name);
        }
    }
    assert!(
        stale.is_empty() && strays.is_empty(),
        "webhook-config/ has drifted from the generator (stale or missing: {stale:?}; \
             not generated: {strays:?}). Regenerate with `cargo run -- manifests --out webhook-config` \
             and commit the result; never edit these files by hand."
    );
    Ok(())
}

#[test]
fn chart_crds_are_what_cheiron_crds_prints() -> Result {
    let path = repo().join("charts/cheiron/files/crds.yaml");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == cheiron::api::crds_yaml()?,
        "{} has drifted from the CRD types. Regenerate with \
             `cargo run -- crds > charts/cheiron/files/crds.yaml`.",
        path.display()
    );
    Ok(())
}

#[test]
fn chart_and_app_versions_are_the_crate_version() -> Result {
    let chart: Value =
        serde_saphyr::from_slice(&std::fs::read(repo().join("charts/cheiron/Chart.yaml"))?)?;
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        chart["version"], version,
        "charts/cheiron/Chart.yaml version"
    );
    assert_eq!(
        chart["appVersion"], version,
        "charts/cheiron/Chart.yaml appVersion"
    );
    Ok(())
}
