//! `modelplane providers`: which Crossplane providers run for a fleet, and why.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use modelplane_api::types::GatewayBackend;
use modelplane_compose::providers::{Cloud, cloud_of_group};
use modelplane_compose::{ProvidersInputs, compose_providers, plan_providers};

use crate::fleet::{Fleet, load};

/// Output format of `providers`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The plan as a table.
    #[default]
    Table,
    /// The Providers and DeploymentRuntimeConfigs as YAML.
    Yaml,
}

/// Arguments of `modelplane providers`.
#[derive(Args, Debug)]
#[command(after_help = "\
Every provider package is installed once and never deleted (that would delete its CRDs \
and every managed resource); each runs through its own DeploymentRuntimeConfig with \
replicas 1 while its cloud is in use — an InferenceCluster on it, or managed resources of \
it among the inputs (e.g. `kubectl get managed -o yaml`) — and 0 otherwise. provider-helm \
runs while any cluster exists (serving stacks) or the gateway uses Traefik.

Examples:
  modelplane providers -f examples/
  kubectl get managed -o yaml > managed.yaml; modelplane providers -f fleet/ -f managed.yaml")]
pub struct ProvidersArgs {
    /// Manifest files or directories; `-` reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "PATH", num_args = 1.., required = true)]
    paths: Vec<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// The cloud whose provider serves a managed resource of this apiVersion.
fn cloud_of_api_version(api_version: &str) -> Option<Cloud> {
    cloud_of_group(api_version.split('/').next().unwrap_or_default())
}

/// Runs `providers`; returns the exit code.
pub fn run(args: &ProvidersArgs) -> anyhow::Result<u8> {
    let fleet: Fleet = match load(&args.paths)? {
        Ok(fleet) => fleet,
        Err(code) => return Ok(code),
    };
    // Provider configs name a cloud but are not its managed resources.
    let leftovers: BTreeSet<Cloud> = fleet
        .others
        .iter()
        .filter(|(_, kind)| !kind.ends_with("ProviderConfig") && kind != "ProviderConfigUsage")
        .filter_map(|(api_version, _)| cloud_of_api_version(api_version))
        .collect();
    let traefik = fleet
        .gateway
        .as_ref()
        .is_some_and(|g| g.spec.backend() == GatewayBackend::Traefik);
    let inputs = ProvidersInputs {
        clusters: &fleet.clusters,
        leftovers: &leftovers,
        traefik,
    };
    let text = match args.output {
        Format::Table => {
            let plans = plan_providers(inputs);
            let width = plans.iter().map(|p| p.name.len()).max().unwrap_or(8);
            let mut out = format!("{:<width$}  CLOUD       REPLICAS  WHY\n", "PROVIDER");
            for p in &plans {
                let _ = writeln!(
                    out,
                    "{:<width$}  {:<10}  {:<8}  {}",
                    p.name,
                    p.cloud.to_string(),
                    p.replicas,
                    p.why
                );
            }
            out
        }
        Format::Yaml => compose_providers(inputs)
            .desired
            .iter()
            .map(|d| format!("---\n{}", crate::output::to_yaml(&d.object)))
            .collect(),
    };
    crate::output::emit(&text)?;
    Ok(0)
}
