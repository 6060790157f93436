//! `modelplane gateway`: the fleet gateway, routing by ModelServices,
//! ModelEndpoints and Secrets read from files (reloaded when they change).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use modelplane_gateway::state::{Gateway, GatewayConfig};

/// Arguments of `modelplane gateway`.
#[derive(Args, Debug)]
#[command(after_help = "\
Serves one OpenAI-compatible endpoint in front of every ModelEndpoint the ModelServices \
select:
  /<namespace>/<service>/…   the service's endpoints, each request's path below the prefix \
rewritten to the endpoint's rewritePath
  /v1/…                      the service named by the body's `model` (a service name, \
`namespace/name`, or the name of the ModelDeployment behind its endpoints)
  GET /v1/models             what the caller may route to
  /healthz /readyz /metrics  liveness, a loaded routing table, Prometheus metrics

Traffic splits across a service's entries by weight, then goes to the less loaded of two \
random endpoints. Endpoints Modelplane composed (labelled modelplane.ai/deployment) take \
the traffic while any is healthy; the others (external providers) take over when none is. \
A request that could not connect is retried on another endpoint; endpoints that fail \
repeatedly are ejected for a growing time, and /health is probed every few seconds.

API keys: Secrets labelled modelplane.ai/gateway-api-key=true, the key in data `key`; \
the annotation modelplane.ai/services lists what each may use (`ns/name`, `ns/*`, `*`; \
its own namespace when absent). With any such Secret, every request needs \
`Authorization: Bearer KEY`. A ModelEndpoint's spec.auth.secretRef is sent upstream as a \
bearer token. Keys and tokens are never logged.

Examples:
  modelplane gateway --config examples/gateway/ --check
  modelplane gateway --config examples/gateway/ --listen 127.0.0.1:8080
  modelplane gateway --kubeconfig ./mp-data/kubeconfig   # fed by watches
  curl -s localhost:8080/v1/chat/completions -d '{\"model\":\"qwen3-8b\",\"messages\":[]}'")]
pub struct GatewayArgs {
    /// Files or directories of ModelServices, ModelEndpoints and Secrets (YAML or JSON).
    #[arg(long = "config", value_name = "FILE", num_args = 1.., required_unless_present = "kubeconfig", conflicts_with = "kubeconfig")]
    config: Vec<PathBuf>,
    /// Watch the ModelServices, ModelEndpoints and Secrets of this API server instead (the control plane's kubeconfig).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Largest request body, in bytes (413 beyond).
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024 * 1024)]
    max_body: usize,
    /// Time allowed to connect to an engine, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    connect_timeout_ms: u64,
    /// Time allowed for an engine's response head, in seconds (504 beyond).
    /// vLLM sends it when a non-streamed answer is complete, so it is long; a
    /// ModelService may set its own (annotation modelplane.ai/first-byte-timeout).
    #[arg(long, value_name = "SECONDS", default_value_t = 1800)]
    first_byte_timeout: u64,
    /// Longest silence between two chunks of a streamed answer, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    idle_timeout: u64,
    /// Time a client has to send its request head, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    header_read_timeout: u64,
    /// Connections open at once; beyond, new ones wait to be accepted.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_connections: usize,
    /// Seconds between active health checks.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    health_interval: u64,
    /// How often the config files are checked for changes, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    reload_interval_ms: u64,
    /// Worker threads (default: one per core); 1 runs a single-threaded scheduler, the fastest on one core.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Log lines as JSON objects instead of text.
    #[arg(long)]
    log_json: bool,
    /// Print the compiled routing table and exit (1 if anything is left out).
    #[arg(long)]
    check: bool,
}

/// Serves until Ctrl-C or SIGTERM, then drains requests in flight.
pub fn run(args: &GatewayArgs) -> anyhow::Result<()> {
    crate::logging::init(args.log_json);
    let config = GatewayConfig {
        max_body: args.max_body,
        connect_timeout: Duration::from_millis(args.connect_timeout_ms),
        first_byte_timeout: Duration::from_secs(args.first_byte_timeout),
        idle_timeout: Duration::from_secs(args.idle_timeout),
        listener: modelplane_gateway::server::ListenerLimits {
            header_read_timeout: Duration::from_secs(args.header_read_timeout.max(1)),
            max_connections: args.max_connections.max(1),
            ..modelplane_gateway::server::ListenerLimits::default()
        },
        health_interval: Duration::from_secs(args.health_interval.max(1)),
        ..GatewayConfig::default()
    };
    if let Some(kubeconfig) = &args.kubeconfig {
        if args.check {
            anyhow::bail!(
                "--check reads --config files; with --kubeconfig the table is what the watches hold"
            );
        }
        return serve(args, config, Feed::Watch(kubeconfig.clone()));
    }
    let objects = modelplane_gateway::config::load(&args.config).context("loading --config")?;
    if args.check {
        let table = objects.compile(None);
        print!("{}", serde_saphyr::to_string(&table.describe())?);
        if !table.skipped.is_empty() {
            anyhow::bail!(
                "{} object(s) left out of the routing table",
                table.skipped.len()
            );
        }
        return Ok(());
    }
    serve(args, config, Feed::Files(objects))
}

/// Where the routing table comes from.
enum Feed {
    /// Files, loaded and then polled for changes.
    Files(modelplane_gateway::config::Objects),
    /// An API server's watches, through this kubeconfig.
    Watch(PathBuf),
}

fn serve(args: &GatewayArgs, config: GatewayConfig, feed: Feed) -> anyhow::Result<()> {
    // One thread: a single-threaded scheduler, no work stealing to pay for.
    let mut runtime = match args.threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(threads) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(threads.max(1));
            builder
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    runtime.enable_all().build()?.block_on(async {
        let gateway = Gateway::new(config).context("building the upstream client")?;
        let client = match &feed {
            Feed::Files(objects) => {
                for reason in modelplane_gateway::config::publish(&gateway, objects) {
                    tracing::warn!("left out: {reason}");
                }
                None
            }
            Feed::Watch(path) => Some(crate::controller::client(Some(path)).await?),
        };
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        warn_if_exposed(args.listen, gateway.table().requires_keys() || client.is_some());
        let table = gateway.table();
        match &client {
            None => println!(
                "gateway on http://{}: {} services, {} endpoints, {}",
                listener.local_addr()?,
                table.services().len(),
                table.endpoints().len(),
                if table.requires_keys() {
                    "API keys required"
                } else {
                    "no API keys"
                }
            ),
            Some(_) => println!(
                "gateway on http://{}: routing by the ModelServices, ModelEndpoints and Secrets the API server holds (watched)",
                listener.local_addr()?
            ),
        }
        // The config or feed watch and the health checks stop with the gateway.
        let tasks = modelplane_supervisor::Supervisor::default();
        let wait = || tasks.stopping();
        match client {
            None => tasks.spawn(
                "gateway-config",
                modelplane_gateway::config::watch(
                    gateway.clone(),
                    args.config.clone(),
                    Duration::from_millis(args.reload_interval_ms.max(50)),
                    wait(),
                ),
            ),
            Some(client) => tasks.spawn(
                "gateway-feed",
                modelplane_gateway::feed::watch(gateway.clone(), client, wait()),
            ),
        }
        tasks.spawn("gateway-health", modelplane_gateway::health::run(gateway.clone(), wait()));
        let address = listener.local_addr()?;
        tasks.spawn_front("gateway-server", |draining| async move {
            modelplane_gateway::server::serve(listener, gateway, draining, Duration::from_secs(30))
                .await
                .map_err(|e| format!("the gateway on {address} stopped: {e}"))
        });
        let failed = tokio::select! {
            () = crate::logging::terminated() => None,
            why = tasks.failure() => Some(why),
        };
        // In-flight requests and streams finish (up to 30 s), then the rest.
        tasks.shutdown().await;
        match failed {
            Some(why) => Err(anyhow::anyhow!("{why}")),
            None => Ok(()),
        }
    })
}

/// Says so when the gateway listens beyond this machine, as the API server
/// does: every model it routes to is reachable from there, and without API
/// keys by anyone.
pub fn warn_if_exposed(listen: SocketAddr, keys_possible: bool) {
    if listen.ip().is_loopback() {
        return;
    }
    let who = if keys_possible {
        "anyone with an API key (or anyone, for services without keys)"
    } else {
        "anyone (no API keys are configured)"
    };
    eprintln!(
        "warning: the gateway listens on {listen}, beyond this machine; {who} who reaches it can use every model it routes to"
    );
}
