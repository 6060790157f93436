//! A kube client that speaks HTTP/2 where the server does.
//!
//! kube's own client offers only HTTP/1.1, where every watch holds a TLS
//! connection of its own: a controller watching twenty kinds on each of a
//! hundred clusters kept two thousand connections open, most of its memory.
//! Over HTTP/2 (which kube-apiserver serves, as does `modelplane apiserver`)
//! one connection per server carries them all, as client-go does; a server
//! that offers only HTTP/1.1 is still spoken to in it.
//!
//! The price: a connection's streams share its flow-control window, so a
//! watch left unread for long stalls every other request on the connection
//! once the window is spent. Its users read every watch in a task of its
//! own, at once (the controller and the simulator do).

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use tower::ServiceBuilder;

/// How often an idle HTTP/2 connection is pinged, and how long an answer may
/// take before the connection (and every watch on it) is given up: a server
/// that stopped answering (a partition that drops packets rather than
/// refusing them) is noticed within ten seconds, and a controller says so
/// in the cluster's status, without waiting for a request to time out. A
/// ping is one small frame: a thousand connections cost 200 a second.
const KEEP_ALIVE: Duration = Duration::from_secs(5);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(4);

/// A client for `config`, as `kube::Client::try_from` builds one (TLS from
/// the kubeconfig, its credentials and headers) but offering HTTP/2.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // An HTTP/2 request is several small writes (headers, then data): with
    // Nagle's algorithm each after the first waits for the server's delayed
    // ACK, some 40 ms.
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls::pki_types::ServerName::try_from(name.clone())
            .map_err(|e| kube::Error::Service(format!("tls-server-name {name:?}: {e}").into()))?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let connector = tls.enable_all_versions().wrap_connector(http);
    let http = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(KEEP_ALIVE)
        .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .http2_adaptive_window(true)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        // The auth layer's errors are boxed; the connection's are made so.
        .map_err(tower::BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, config.default_namespace))
}
