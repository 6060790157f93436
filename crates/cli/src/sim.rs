//! `modelplane sim`: the simulated fleet against a control plane — clouds
//! answering the managed resources Modelplane composes, workload clusters
//! as logical clusters of the API server, their nodes and controllers.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

/// Arguments of `modelplane sim`.
#[derive(Args, Debug)]
#[command(after_help = "\
Stands in for Crossplane, its providers and the clouds: installs the CRDs of every \
Crossplane kind Modelplane composes, answers each managed resource as its provider would \
(Synced, then Ready after the profile's provisioning time, once everything it refers to is \
Ready, and only while its provider's DeploymentRuntimeConfig runs it), creates a workload \
cluster for each cloud cluster (a logical cluster of the control plane's API server, \
reached through the kubeconfig its connection Secret carries), registers the nodes of each \
node pool, and installs Helm releases into workload clusters: their CRDs and the \
simulated controller that comes with them. The control plane must be served by \
`modelplane apiserver` (workload clusters are its logical clusters).

Examples:
  modelplane sim --kubeconfig ./mp-data/kubeconfig
  modelplane sim --kubeconfig ./mp-data/kubeconfig --profile realistic --time-scale 60")]
pub struct SimArgs {
    /// Kubeconfig of the control plane (the embedded API server's root cluster).
    #[arg(long, value_name = "PATH")]
    kubeconfig: PathBuf,
    /// How long provisioning, installs, image pulls and weight loads take.
    #[arg(long, value_name = "NAME", default_value = "fast", value_parser = ["fast", "realistic"])]
    profile: String,
    /// Divide every duration of the profile by this.
    #[arg(long, value_name = "FACTOR", default_value_t = 1.0)]
    time_scale: f64,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

/// Runs until Ctrl-C or SIGTERM.
pub fn run(args: &SimArgs) -> anyhow::Result<()> {
    crate::logging::init(args.log_json);
    anyhow::ensure!(
        args.time_scale > 0.0 && args.time_scale.is_finite(),
        "--time-scale must be a positive number, not {}",
        args.time_scale
    );
    let profile: modelplane_sim::Profile = args
        .profile
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    let profile = profile.scaled(args.time_scale);
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading the kubeconfig {}", args.kubeconfig.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let supervisor = modelplane_supervisor::Supervisor::default();
        modelplane_sim::start(kubeconfig, profile.clone(), &supervisor)
            .await
            .context("connecting to the control plane")?;
        tracing::info!(profile = %profile, time_scale = profile.time_scale, "simulated fleet running");
        crate::logging::terminated().await;
        supervisor.shutdown().await;
        Ok(())
    })
}
