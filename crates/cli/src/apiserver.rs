//! `modelplane apiserver`: the embedded Kubernetes-compatible API server on
//! its own.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use modelplane_apiserver::{Config, serve};

/// Arguments of `modelplane apiserver`.
#[derive(Args, Debug)]
#[command(after_help = "\
Serves the Kubernetes API subset Modelplane's controllers use, over HTTPS, backed by a \
SQLite file: DIR/state.db holds every object and the change log; DIR/token the bearer \
token and DIR/tls.crt, DIR/tls.key a self-signed certificate (generated on first start); \
DIR/kubeconfig points kubectl and kube-rs at the server with both (secrets mode 0600). \
Every acknowledged write is on disk; a restart keeps everything.

Served so far: discovery, OpenAPI v3 and v2 (kubectl 1.27 to 1.33 apply, diff and \
explain), CRDs (Modelplane's kinds admitted with their CEL rules), the built-in kinds \
(Namespace, ConfigMap, Secret, Event, Lease, Deployment, Pod, …), \
get/list/watch/create/replace/patch/delete, status and scale subresources, Tables with \
printer columns, finalizers and garbage collection, logical clusters; bodies in JSON or, \
for built-in kinds, protobuf (kubectl's generators). See docs/apiserver.md for what is \
not served yet.

Examples:
  modelplane apiserver --data-dir ./mp-data
  modelplane crds | kubectl --kubeconfig ./mp-data/kubeconfig apply -f -
  kubectl --kubeconfig ./mp-data/kubeconfig get modelplane -A")]
pub struct ApiserverArgs {
    /// Directory for the store, the token and the kubeconfig (created if missing).
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Connections open at once (each watch holds one); beyond that new
    /// clients wait until one closes.
    #[arg(long, value_name = "N", default_value_t = modelplane_apiserver::MAX_CONNECTIONS as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
}

/// Serves until Ctrl-C.
pub fn run(args: &ApiserverArgs) -> anyhow::Result<()> {
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "warning: listening on {}, beyond this machine; anyone with the token can change everything",
            args.listen
        );
    }
    // Before anything is touched: a second server on a store in use would
    // split its watches from the first's writes.
    let data_dir = modelplane_apiserver::DataDir::lock(&args.data_dir)?;
    let config = Config {
        data_dir,
        listen: args.listen,
        max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
    };
    let ready = |addr: std::net::SocketAddr, kubeconfig: &std::path::Path| {
        println!(
            "serving on https://{addr}; kubeconfig: {}",
            kubeconfig.display()
        );
    };
    // Ctrl-C or SIGTERM (what a service manager sends) stops accepting,
    // ends the watches and lets requests in flight finish.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(config, ready, crate::logging::terminated()))
        .map_err(|e| anyhow::anyhow!("apiserver: {e}"))
}
