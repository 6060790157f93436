//! The network path from outside to a simulated cluster's API: a TCP proxy
//! whose address the cluster's kubeconfig (its connection Secret) names.
//! While the cluster is `Unreachable`, it refuses new connections and cuts
//! the open ones — as a partition would — while the cluster itself (its
//! simulated controllers, which reach the API directly) keeps running.

use std::sync::Arc;

use modelplane_supervisor::Scope;
use tokio::net::{TcpListener, TcpStream};

use crate::faults::Faults;

/// Resolves once cluster `cluster` is cut off.
async fn cut(faults: &Faults, cluster: &str) {
    loop {
        let changed = faults.changed.notified();
        if faults.unreachable(cluster) {
            return;
        }
        changed.await;
    }
}

/// Proxies every connection accepted on `listener` to `upstream` until the scope stops.
pub async fn run(
    listener: TcpListener,
    upstream: String,
    cluster: String,
    faults: Arc<Faults>,
    scope: Scope,
) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        if faults.unreachable(&cluster) {
            drop(inbound);
            continue;
        }
        let (upstream, cluster, faults) = (upstream.clone(), cluster.clone(), faults.clone());
        scope.spawn("sim-api-proxy", async move {
            let Ok(mut outbound) = TcpStream::connect(&upstream).await else {
                return;
            };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                () = cut(&faults, &cluster) => {}
            }
        });
    }
}
