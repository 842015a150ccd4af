//! The `cheiron-certs` command line (docs/design.md §6). Each `Args::request` destructures every field,
//! so a new flag cannot be silently ignored.

use std::{fmt, net::IpAddr, path::PathBuf};

use clap::{Args, Parser, Subcommand};
use time::OffsetDateTime;

use crate::{
    create::{CreateRequest, Created, create},
    error::{Error, Result},
    generate::{GenerateRequest, Generated, generate},
    names::ServingNames,
    patch::{PatchRequest, Patched, patch},
    pki::Validity,
};

/// Generates cheiron's webhook CA and serving certificate, stores them in a Secret, and
/// patches caBundle.
#[derive(Parser, Debug)]
#[command(name = "cheiron-certs", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write a new CA (ca.crt) and serving certificate (tls.crt, tls.key) to a directory.
    Generate(GenerateArgs),
    /// Make sure a kubernetes.io/tls Secret holds a valid serving certificate (idempotent).
    Create(CreateArgs),
    /// Put the Secret's ca.crt into caBundle of every webhook of a configuration.
    Patch(PatchArgs),
}

/// The Service the certificate is for, and extra names.
#[derive(Args, Debug, Clone)]
pub struct NameArgs {
    /// Name of the Service the API server reaches the webhook through.
    #[arg(long, value_name = "S", env = "CHEIRON_SERVICE")]
    pub service: String,
    /// Namespace of the Service (and of the Secret).
    #[arg(long, value_name = "NS", env = "CHEIRON_NAMESPACE")]
    pub namespace: String,
    /// Extra DNS name in the certificate (repeatable).
    #[arg(
        long = "dns",
        value_name = "NAME",
        env = "CHEIRON_DNS",
        value_delimiter = ','
    )]
    pub dns: Vec<String>,
    /// Extra IP address in the certificate (repeatable).
    #[arg(
        long = "ip",
        value_name = "IP",
        env = "CHEIRON_IP",
        value_delimiter = ','
    )]
    pub ip: Vec<IpAddr>,
}

impl NameArgs {
    fn names(self) -> Result<ServingNames> {
        let Self {
            service,
            namespace,
            dns,
            ip,
        } = self;
        Ok(ServingNames::new(&service, &namespace, &dns, &ip)?)
    }
}

/// Arguments of `cheiron-certs generate`.
#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    #[command(flatten)]
    names: NameArgs,
    /// Directory to write ca.crt, tls.crt and tls.key into (created if missing).
    #[arg(long, value_name = "DIR", env = "CHEIRON_OUT")]
    out: PathBuf,
}

impl GenerateArgs {
    /// The request these arguments make.
    pub fn request(self) -> Result<GenerateRequest> {
        let Self { names, out } = self;
        Ok(GenerateRequest {
            names: names.names()?,
            out,
            validity: Validity::default(),
        })
    }
}

/// Arguments of `cheiron-certs create`.
#[derive(Args, Debug, Clone)]
pub struct CreateArgs {
    #[command(flatten)]
    names: NameArgs,
    /// The kubernetes.io/tls Secret to maintain; its CA goes into NAME-ca.
    #[arg(long, value_name = "NAME", env = "CHEIRON_SECRET_NAME")]
    secret_name: String,
}

impl CreateArgs {
    /// The request these arguments make.
    pub fn request(self) -> Result<CreateRequest> {
        let Self { names, secret_name } = self;
        Ok(CreateRequest {
            names: names.names()?,
            secret_name,
            validity: Validity::default(),
        })
    }
}

/// Arguments of `cheiron-certs patch`.
#[derive(Args, Debug, Clone)]
pub struct PatchArgs {
    /// The MutatingWebhookConfiguration to patch.
    #[arg(long, value_name = "NAME", env = "CHEIRON_WEBHOOK_NAME")]
    webhook_name: String,
    /// The Secret whose ca.crt is injected.
    #[arg(long, value_name = "NAME", env = "CHEIRON_SECRET_NAME")]
    secret_name: String,
    /// Namespace of the Secret.
    #[arg(long, value_name = "NS", env = "CHEIRON_NAMESPACE")]
    namespace: String,
}

impl PatchArgs {
    /// The request these arguments make.
    pub fn request(self) -> PatchRequest {
        let Self {
            webhook_name,
            secret_name,
            namespace,
        } = self;
        PatchRequest {
            webhook_name,
            secret_name,
            namespace,
        }
    }
}

/// What a command did, printed as one line on success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `generate`.
    Generated(Generated),
    /// `create`.
    Created(Created),
    /// `patch`.
    Patched(Patched),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Generated(generated) => generated.fmt(f),
            Outcome::Created(created) => created.fmt(f),
            Outcome::Patched(patched) => patched.fmt(f),
        }
    }
}

impl Cli {
    /// Runs the chosen command; `create` and `patch` use the kubeconfig (`KUBECONFIG`,
    /// `~/.kube/config`) or, in a Pod, its ServiceAccount.
    pub async fn run(self) -> Result<Outcome> {
        let Self { command } = self;
        match command {
            Command::Generate(args) => {
                generate(&args.request()?, OffsetDateTime::now_utc()).map(Outcome::Generated)
            }
            Command::Create(args) => {
                let request = args.request()?;
                create(&connect().await?, &request)
                    .await
                    .map(Outcome::Created)
            }
            Command::Patch(args) => patch(&connect().await?, &args.request())
                .await
                .map(Outcome::Patched),
        }
    }
}

async fn connect() -> Result<kube::Client> {
    kube::Client::try_default().await.map_err(Error::Connect)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Command {
        let cli = Cli::try_parse_from(std::iter::once("cheiron-certs").chain(args.iter().copied()))
            .unwrap();
        cli.command
    }

    #[test]
    fn generate_takes_repeated_dns_and_ip_flags() {
        let Command::Generate(args) = parse(&[
            "generate",
            "--service",
            "cheiron",
            "--namespace",
            "cheiron-system",
            "--dns",
            "a.example",
            "--dns",
            "b.example",
            "--ip",
            "127.0.0.1",
            "--ip",
            "::1",
            "--out",
            "/tmp/x",
        ]) else {
            panic!("not generate");
        };
        let request = args.request().unwrap();
        assert_eq!(request.out, PathBuf::from("/tmp/x"));
        assert_eq!(request.validity, Validity::default());
        let expected = ServingNames::new(
            "cheiron",
            "cheiron-system",
            &["a.example".to_owned(), "b.example".to_owned()],
            &["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
        )
        .unwrap();
        assert_eq!(request.names, expected);
    }

    #[test]
    fn create_and_patch_take_the_spec_flags() {
        let Command::Create(args) = parse(&[
            "create",
            "--service",
            "cheiron",
            "--namespace",
            "ns",
            "--secret-name",
            "cheiron-tls",
        ]) else {
            panic!("not create");
        };
        let request = args.request().unwrap();
        assert_eq!(request.secret_name, "cheiron-tls");
        assert_eq!(request.names.namespace(), "ns");

        let Command::Patch(args) = parse(&[
            "patch",
            "--webhook-name",
            "cheiron",
            "--secret-name",
            "cheiron-tls",
            "--namespace",
            "ns",
        ]) else {
            panic!("not patch");
        };
        assert_eq!(
            args.request(),
            PatchRequest {
                webhook_name: "cheiron".to_owned(),
                secret_name: "cheiron-tls".to_owned(),
                namespace: "ns".to_owned(),
            }
        );
    }

    #[test]
    fn invalid_ip_is_rejected_by_the_parser() {
        let error = Cli::try_parse_from([
            "cheiron-certs",
            "generate",
            "--service",
            "s",
            "--namespace",
            "n",
            "--ip",
            "nope",
            "--out",
            "d",
        ])
        .unwrap_err();
        assert!(error.to_string().contains("--ip"), "{error}");
    }
}
