//! `cheiron-certs generate`: a new CA and serving certificate as files, for a webhook run
//! outside the cluster or a Secret made by hand (`ca.crt`, `tls.crt`, `tls.key`).

use std::{
    fmt,
    fs::{self, OpenOptions},
    io::Write,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use time::OffsetDateTime;

use crate::{
    decision::date,
    error::{Error, Result},
    names::ServingNames,
    pki::{Ca, Validity},
    secret::{CA_KEY, CERT_KEY, KEY_KEY},
};

/// What `generate` is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerateRequest {
    /// The names to issue for.
    pub names: ServingNames,
    /// The directory to write into (created if missing).
    pub out: PathBuf,
    /// Validity of the CA and the certificate.
    pub validity: Validity,
}

/// What `generate` wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    /// The directory.
    pub dir: PathBuf,
    /// `notAfter` of the serving certificate (Unix seconds).
    pub not_after: i64,
}

impl fmt::Display for Generated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wrote {CA_KEY}, {CERT_KEY} and {KEY_KEY} to {} (valid until {})",
            self.dir.display(),
            date(self.not_after)
        )
    }
}

/// Issues a new CA and a serving certificate signed by it, and writes `ca.crt`, `tls.crt`
/// (mode 0644) and `tls.key` (mode 0600, never readable by others, even briefly).
pub fn generate(request: &GenerateRequest, now: OffsetDateTime) -> Result<Generated> {
    let GenerateRequest {
        names,
        out,
        validity,
    } = request;
    let ca = Ca::generate(now, validity.ca)?;
    let serving = ca.issue(names, now, validity.serving)?;
    fs::create_dir_all(out).map_err(|source| Error::Write {
        path: out.clone(),
        source,
    })?;
    write(&out.join(CA_KEY), ca.cert_pem().as_bytes(), 0o644)?;
    // The key before the certificate: a webhook watching the directory sees a new
    // certificate only once its key is in place.
    write(&out.join(KEY_KEY), serving.key_pem.as_bytes(), 0o600)?;
    write(&out.join(CERT_KEY), serving.cert_pem.as_bytes(), 0o644)?;
    Ok(Generated {
        dir: out.clone(),
        not_after: serving.not_after.unix_timestamp(),
    })
}

fn write(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    let error = |source| Error::Write {
        path: path.to_owned(),
        source,
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(error)?;
    // `mode` applies only to a new file; an existing one gets it here.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(error)?;
    file.write_all(contents).map_err(error)?;
    file.sync_all().map_err(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{CertificateInfo, certificates_from_pem, key_matches};

    #[test]
    fn writes_a_ca_and_a_matching_pair_with_a_private_key_file() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("certs");
        let names = ServingNames::new("cheiron", "cheiron-system", &[], &[]).unwrap();
        // An existing world-readable key file is tightened too.
        fs::create_dir(&out).unwrap();
        fs::write(out.join(KEY_KEY), "old").unwrap();
        fs::set_permissions(out.join(KEY_KEY), fs::Permissions::from_mode(0o644)).unwrap();

        let generated = generate(
            &GenerateRequest {
                names: names.clone(),
                out: out.clone(),
                validity: Validity::default(),
            },
            OffsetDateTime::now_utc(),
        )
        .unwrap();

        let mode = |file: &str| fs::metadata(out.join(file)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(KEY_KEY), 0o600);
        assert_eq!(mode(CERT_KEY), 0o644);
        assert_eq!(mode(CA_KEY), 0o644);
        let leaf = CertificateInfo::first_from_pem(&fs::read(out.join(CERT_KEY)).unwrap()).unwrap();
        let ca_der = certificates_from_pem(&fs::read(out.join(CA_KEY)).unwrap()).unwrap();
        let ca = CertificateInfo::from_der(&ca_der[0]).unwrap();
        assert!(leaf.is_signed_by(&ca));
        key_matches(&leaf, &fs::read(out.join(KEY_KEY)).unwrap()).unwrap();
        assert_eq!(leaf.sans, names.san_set());
        assert_eq!(generated.not_after, leaf.not_after);
    }

    #[test]
    fn unwritable_directory_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("a-file");
        fs::write(&file, "").unwrap();
        let error = generate(
            &GenerateRequest {
                names: ServingNames::new("cheiron", "ns", &[], &[]).unwrap(),
                out: file.join("sub"),
                validity: Validity::default(),
            },
            OffsetDateTime::now_utc(),
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with(&format!("cannot write {}", file.join("sub").display())),
            "{error}"
        );
    }
}
