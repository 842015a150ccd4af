//! `cheiron credential-provider`: the kubelet's credential-provider exec plugin, answering
//! from the node-local credentials file the node agent keeps (docs/node.md).

use std::{
    io::{Read, Write},
    path::PathBuf,
    time::Duration,
};

use anyhow::Context;
use clap::Args;

use crate::{
    credential::duration,
    node::{
        atomic,
        credentials::NodeCredentials,
        provider::{self, MAX_REQUEST_BYTES},
    },
};

/// Arguments of `cheiron credential-provider`.
#[derive(Args, Debug)]
pub struct CredentialProviderArgs {
    /// The node-local credentials file `cheiron node-agent` writes; absent means no
    /// credentials (an empty answer).
    #[arg(long, value_name = "PATH", env = "CHEIRON_CREDENTIALS_FILE")]
    credentials_file: PathBuf,
    /// How long the kubelet may cache an answer (a Go duration: `60s`, `5m`).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration, env = "CHEIRON_CACHE_DURATION")]
    cache_duration: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    duration::parse(text).map_err(|e| e.to_string())
}

impl CredentialProviderArgs {
    /// Reads one request from `input`, writes one response to `output`.
    pub fn run(self, input: &mut impl Read, output: &mut impl Write) -> anyhow::Result<()> {
        let Self {
            credentials_file,
            cache_duration,
        } = self;
        let mut request = Vec::new();
        input
            .take(MAX_REQUEST_BYTES as u64 + 1)
            .read_to_end(&mut request)
            .context("reading the request from standard input")?;
        let credentials = match atomic::read(&credentials_file)
            .with_context(|| format!("reading {}", credentials_file.display()))?
        {
            Some(bytes) => NodeCredentials::parse(&bytes)
                .with_context(|| format!("reading {}", credentials_file.display()))?,
            None => NodeCredentials::default(),
        };
        let response = provider::answer(&request, &credentials, cache_duration)?;
        output.write_all(&response)?;
        output.flush()?;
        Ok(())
    }
}
