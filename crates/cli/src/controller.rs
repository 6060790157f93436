//! `modelplane controller`: every reconciler, against any Kubernetes API
//! server (the embedded one, or a real control cluster).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

/// Arguments of `modelplane controller`.
#[derive(Args, Debug)]
#[command(after_help = "\
Watches Modelplane's objects on the control plane, composes what each one wants, and \
makes it so: server-side apply as field manager `modelplane` (fields a user adds are \
kept, fields Modelplane sets are restored), pruning of what is no longer wanted — never \
while a composition holds, never because of an error or an unreachable cluster — and \
status with conditions. Workload clusters are reached through the kubeconfig Secret of \
each InferenceCluster (in modelplane-system). One process leads, through the Lease \
modelplane-system/modelplane-controller; others keep their caches warm and take over when \
the leader stops renewing it. A leader that stalls past its lease writes nothing until it \
holds the Lease again.

Examples:
  modelplane controller --kubeconfig ./mp-data/kubeconfig
  modelplane controller            # in a pod: the in-cluster service account")]
pub struct ControllerArgs {
    /// Kubeconfig of the control plane; without it, $KUBECONFIG, ~/.kube/config or the in-cluster service account.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Reconcilers running at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    workers: usize,
    /// Seconds between full resyncs (a world that did not change costs no write).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    resync: u64,
    /// Seconds a ModelReplica no longer wanted (scaled down, moved) keeps
    /// serving the requests it was sent, out of every gateway's routing,
    /// before it is deleted.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    drain_seconds: u64,
    /// Where clients reach the built-in fleet gateway (published as the InferenceGateway's address).
    #[arg(long, value_name = "HOST:PORT")]
    gateway_address: Option<String>,
    /// Run without leader election (only when no other controller can run against this control plane).
    #[arg(long)]
    no_leader_election: bool,
    /// Seconds a leader's Lease (modelplane-system/modelplane-controller) lasts unless renewed; another process takes over after it.
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    lease_duration: u64,
    /// This process's name in the Lease; the host name and a random suffix by default.
    #[arg(long, value_name = "NAME")]
    identity: Option<String>,
    /// Serve /metrics (Prometheus), /healthz and /readyz on this address.
    #[arg(long, value_name = "ADDR")]
    probes_listen: Option<std::net::SocketAddr>,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

/// Runs until Ctrl-C or SIGTERM.
pub fn run(args: &ControllerArgs) -> anyhow::Result<()> {
    crate::logging::init(args.log_json);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = client(args.kubeconfig.as_ref()).await?;
        let version = client
            .apiserver_version()
            .await
            .context("the control plane's API server does not answer")?;
        tracing::info!(server = %version.git_version, "connected to the control plane");
        let config = modelplane_controller::Config {
            workers: args.workers.max(1),
            resync: Duration::from_secs(args.resync.max(1)),
            gateway_address: args.gateway_address.clone(),
            election: (!args.no_leader_election).then(|| modelplane_controller::lease::Election {
                identity: args.identity.clone().unwrap_or_else(identity),
                namespace: modelplane_api::labels::SYSTEM_NAMESPACE.to_string(),
                duration: Duration::from_secs(args.lease_duration.max(3)),
            }),
            probes: args.probes_listen,
            drain: Duration::from_secs(args.drain_seconds),
            ..modelplane_controller::Config::default()
        };
        let control = modelplane_controller::target::Connection::new("control plane", client);
        modelplane_controller::run(config, control, crate::logging::terminated())
            .await
            .context("serving the probes")
    })
}

/// The host name (a pod's name in Kubernetes) and a random suffix.
fn identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "modelplane".into());
    let suffix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ std::process::id())
        .unwrap_or_default();
    format!("{host}-{suffix:08x}")
}

/// A client from the kubeconfig at `path`, else the inferred one.
pub async fn client(path: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    let config = match path {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("using the kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no kubeconfig given, none in $KUBECONFIG or ~/.kube/config, and not in a pod",
        )?,
    };
    modelplane_kubeclient::client(config).context("building the client")
}
