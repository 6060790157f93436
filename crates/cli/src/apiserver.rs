//! `modelplane apiserver`: the embedded Kubernetes-compatible API server on
//! its own.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use modelplane_apiserver::serve::{Config, run as serve};

/// Arguments of `modelplane apiserver`.
#[derive(Args, Debug)]
#[command(after_help = "\
Serves the Kubernetes API subset Modelplane's controllers use, over HTTPS, backed by a \
SQLite file: DIR/state.db holds every object and the change log; DIR/token the bearer \
token and DIR/tls.crt, DIR/tls.key a self-signed certificate (generated on first start); \
DIR/kubeconfig points kubectl and kube-rs at the server with both (secrets mode 0600). \
Every acknowledged write is on disk; a restart keeps everything.

Served so far: discovery and the built-in kinds (Namespace, ConfigMap, Secret, Event, \
Lease, Deployment, Pod, …) with get, list, watch, create, replace, merge patch, delete \
and the status subresource, JSON only. Not yet: OpenAPI (so use `kubectl create -f \
--validate=false` rather than `apply`), CRDs, finalizers and garbage collection.

Examples:
  modelplane apiserver --data-dir ./mp-data
  kubectl --kubeconfig ./mp-data/kubeconfig get configmaps")]
pub struct ApiserverArgs {
    /// Directory for the store, the token and the kubeconfig (created if missing).
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
}

/// Serves until Ctrl-C.
pub fn run(args: &ApiserverArgs) -> anyhow::Result<()> {
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "warning: listening on {}, beyond this machine; anyone with the token can change everything",
            args.listen
        );
    }
    let config = Config {
        data_dir: args.data_dir.clone(),
        listen: args.listen,
    };
    serve(config, |addr, kubeconfig| {
        println!(
            "serving on https://{addr}; kubeconfig: {}",
            kubeconfig.display()
        );
    })
    .map_err(|e| anyhow::anyhow!("apiserver: {e}"))
}
