//! `modelplane up`: the whole product in one process — the embedded API
//! server, the simulated fleet, every controller and the fleet gateway fed
//! by watches, under one supervisor.
//!
//! Data flow: the API server starts on the data dir and writes its
//! kubeconfig; the CRDs are installed through it; the simulated fleet, the
//! controllers and the gateway's feed then all talk to it as any client
//! would (the controllers never know the fleet is simulated). Progress is
//! read back from the objects' status, as a user would with kubectl.

mod apply;
mod progress;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use modelplane_supervisor::Supervisor;

/// How logs are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// JSON lines, for machines.
    Json,
}

/// Arguments of `modelplane up`.
#[derive(Args, Debug)]
#[command(after_help = "\
Runs Modelplane end to end on this machine: the embedded Kubernetes-compatible API server \
(state in DIR/state.db, kubeconfig in DIR/kubeconfig), the controllers, the fleet gateway \
and a simulated fleet — clouds that provision clusters, GPU nodes, the in-cluster schedulers \
and engines that stream tokens. Apply InferenceClusters, InferenceClasses and \
ModelDeployments with kubectl as on a real control cluster; Modelplane places, composes and \
serves them. Ctrl-C or SIGTERM stops everything; `up` again on the same data dir resumes \
the same fleet.

Logs go to DIR/modelplane.log (RUST_LOG filters them; default info); progress goes to \
standard output.

Examples:
  modelplane up --example
  modelplane up --data-dir /tmp/mp --profile realistic
  export KUBECONFIG=.modelplane/kubeconfig; kubectl get ic,md,mr -A")]
pub struct UpArgs {
    /// Directory for the state, the kubeconfig and the log (created if missing).
    #[arg(long, value_name = "DIR", default_value = ".modelplane")]
    data_dir: PathBuf,
    /// How fast the simulated clouds, nodes and engines are: `fast` (seconds) or
    /// `realistic` (the real systems' minutes).
    #[arg(long, value_name = "PROFILE", default_value = "fast")]
    profile: String,
    /// Divides every simulated duration by this (2 runs twice as fast).
    #[arg(long, value_name = "FACTOR", default_value_t = 1.0)]
    time_scale: f64,
    /// Where the API server listens; port 0 picks a free one.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where the fleet gateway (OpenAI-compatible) listens.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    gateway_listen: SocketAddr,
    /// Also apply the example fleet (two EKS clusters, one per serving stack,
    /// and two models) once the API server runs.
    #[arg(long)]
    example: bool,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// The example fleet (examples/fleet), built into the binary so `up
/// --example` works from any directory.
const EXAMPLE: &[(&str, &str)] = &[
    (
        "inference-classes.yaml",
        include_str!("../../../../examples/fleet/inference-classes.yaml"),
    ),
    (
        "inference-clusters.yaml",
        include_str!("../../../../examples/fleet/inference-clusters.yaml"),
    ),
    (
        "namespace.yaml",
        include_str!("../../../../examples/fleet/namespace.yaml"),
    ),
    (
        "qwen3-8b.yaml",
        include_str!("../../../../examples/fleet/qwen3-8b.yaml"),
    ),
    (
        "qwen3-coder.yaml",
        include_str!("../../../../examples/fleet/qwen3-coder.yaml"),
    ),
];

/// Runs until Ctrl-C or SIGTERM.
pub fn run(args: &UpArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.time_scale > 0.0 && args.time_scale.is_finite(),
        "--time-scale must be a positive number, not {}",
        args.time_scale
    );
    let profile: modelplane_sim::Profile = args
        .profile
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--profile: {e}"))?;
    let profile = profile.scaled(args.time_scale);
    // Before anything is touched (the log included): a second `up` on a
    // data dir in use is refused, naming the first.
    let data_dir = modelplane_apiserver::DataDir::lock(&args.data_dir)?;
    let log = log_file(&data_dir, args.log_format)?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(up(args, data_dir, profile, &log))
}

/// Logs go to a file (owner-only: requests are logged): standard output is
/// for progress.
fn log_file(dir: &modelplane_apiserver::DataDir, format: LogFormat) -> anyhow::Result<PathBuf> {
    let path = dir.join("modelplane.log");
    let file = dir
        .append("modelplane.log")
        .with_context(|| format!("opening {}", path.display()))?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file));
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
    Ok(path)
}

async fn up(
    args: &UpArgs,
    data_dir: modelplane_apiserver::DataDir,
    profile: modelplane_sim::Profile,
    log: &Path,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    // Every listener is bound before the API server writes its kubeconfig:
    // an `up` that cannot start leaves the one a user has untouched.
    let gateway_listener = tokio::net::TcpListener::bind(args.gateway_listen)
        .await
        .with_context(|| format!("the gateway cannot listen on {}", args.gateway_listen))?;
    let gateway_address = gateway_listener.local_addr()?;
    crate::gateway::warn_if_exposed(args.gateway_listen, true);
    // A part that stops on its own (the API server, the controllers, the
    // gateway) is critical: it stops the whole process with its error,
    // rather than leaving it half up.
    let supervisor = Supervisor::default();
    let kubeconfig = start_apiserver(args, data_dir, &supervisor).await?;
    let client = crate::controller::client(Some(&kubeconfig)).await?;
    apply::install(&client).await?;
    progress::step(started, "API server up, CRDs installed");

    let raw = kube::config::Kubeconfig::read_from(&kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    modelplane_sim::start(raw, profile.clone(), &supervisor)
        .await
        .context("starting the simulated fleet")?;
    start_controllers(&supervisor, &client, gateway_address);
    let gateway = start_gateway(&supervisor, &client)?;
    progress::step(
        started,
        &format!("simulated fleet ({profile} profile), controllers and gateway running"),
    );
    if args.example {
        // Once per control plane: a restart keeps what the user changed
        // since (a scale, a deployment deleted).
        match apply::example_applied(&client).await? {
            Some(at) => progress::step(
                started,
                &format!(
                    "example fleet applied at {at} already, not again (ConfigMap {}/{} records it; delete it to apply the example again)",
                    modelplane_api::labels::SYSTEM_NAMESPACE,
                    apply::RECORD
                ),
            ),
            None => {
                let applied = apply::manifests(&client, EXAMPLE).await?;
                apply::record_example_applied(&client).await?;
                progress::step(
                    started,
                    &format!("example fleet applied ({applied} objects)"),
                );
            }
        }
    }
    print!("{}", next_steps(&kubeconfig, gateway_address, log));
    supervisor.spawn(
        "progress",
        progress::follow(client.clone(), gateway.clone(), started),
    );

    supervisor.spawn_front("gateway-server", |draining| async move {
        modelplane_gateway::server::serve(
            gateway_listener,
            gateway,
            draining,
            Duration::from_secs(10),
        )
        .await
        .map_err(|e| format!("the gateway on {gateway_address} stopped: {e}"))
    });

    let failed = tokio::select! {
        () = crate::logging::terminated() => None,
        why = supervisor.failure() => Some(why),
    };
    if let Some(why) = failed {
        println!("error: {why}; stopping");
        supervisor.shutdown().await;
        anyhow::bail!("{why}");
    }
    println!("stopping: draining the gateway, then the controllers, the fleet and the API server");
    supervisor.shutdown().await;
    println!(
        "stopped; `modelplane up --data-dir {}` resumes this fleet",
        args.data_dir.display()
    );
    Ok(())
}

/// Starts the API server on the data dir; returns its kubeconfig's path.
async fn start_apiserver(
    args: &UpArgs,
    data_dir: modelplane_apiserver::DataDir,
    supervisor: &Supervisor,
) -> anyhow::Result<PathBuf> {
    let (ready, bound) = tokio::sync::oneshot::channel();
    let config = modelplane_apiserver::Config {
        data_dir,
        listen: args.listen,
        max_connections: modelplane_apiserver::MAX_CONNECTIONS,
    };
    let listen = args.listen;
    let stopping = supervisor.stopping();
    supervisor.spawn_critical("apiserver", async move {
        let served = modelplane_apiserver::serve(
            config,
            move |_, path| {
                let _ = ready.send(path.to_path_buf());
            },
            stopping,
        )
        .await;
        Err(match served {
            Err(e) => format!("the API server on {listen} stopped: {e}"),
            Ok(()) => format!("the API server on {listen} stopped"),
        })
    });
    match bound.await {
        Ok(path) => Ok(path),
        // It ended before it was ready: its reason is the failure.
        Err(_) => Err(anyhow::anyhow!("{}", supervisor.failure().await)),
    }
}

fn start_controllers(supervisor: &Supervisor, client: &kube::Client, gateway: SocketAddr) {
    let config = modelplane_controller::Config {
        gateway_address: Some(gateway.to_string()),
        // One process: nothing to elect.
        election: None,
        // Long enough for a gateway to stop routing to a replica going
        // away and for the requests it was sent to finish.
        drain: Duration::from_secs(10),
        // A reconcile mostly waits for its writes, here answered by the
        // same process: eight at once brought a 1,000-replica fleet up in
        // 0.94 of the time four took, by the medians, the runs
        // overlapping (bench/RESULTS.md); sixteen, one run, brought its
        // clusters Ready later.
        workers: 8,
        ..modelplane_controller::Config::default()
    };
    let control = modelplane_controller::target::Connection::new("control plane", client.clone());
    let stopping = supervisor.stopping();
    supervisor.spawn_critical("controllers", async move {
        Err(
            match modelplane_controller::run(config, control, stopping).await {
                Err(e) => format!("the controllers stopped: {e}"),
                Ok(()) => "the controllers stopped".into(),
            },
        )
    });
}

fn start_gateway(
    supervisor: &Supervisor,
    client: &kube::Client,
) -> anyhow::Result<std::sync::Arc<modelplane_gateway::state::Gateway>> {
    let gateway = modelplane_gateway::state::Gateway::new(Default::default())
        .context("building the gateway's upstream client")?;
    supervisor.spawn(
        "gateway-feed",
        modelplane_gateway::feed::watch(gateway.clone(), client.clone(), supervisor.stopping()),
    );
    supervisor.spawn(
        "gateway-health",
        modelplane_gateway::health::run(gateway.clone(), supervisor.stopping()),
    );
    Ok(gateway)
}

fn next_steps(kubeconfig: &Path, gateway: SocketAddr, log: &Path) -> String {
    let kubeconfig = std::path::absolute(kubeconfig).unwrap_or_else(|_| kubeconfig.to_path_buf());
    format!(
        "
Modelplane is up. In another shell:

  export KUBECONFIG={kubeconfig}
  kubectl get ic,md,mr -A
  curl -sN http://{gateway}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{{\"model\":\"qwen3-8b\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"Hello\"}}]}}'

Gateway: http://{gateway}/v1 (OpenAI-compatible; also http://{gateway}/<namespace>/<service>/v1)
Logs:    {log}
Ctrl-C stops everything.

",
        kubeconfig = kubeconfig.display(),
        log = log.display(),
    )
}
