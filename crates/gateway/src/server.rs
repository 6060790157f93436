//! Accepting connections: HTTP/1.1 with keep-alive, `TCP_NODELAY` (a
//! streamed token must not wait for Nagle), and a graceful shutdown that
//! stops accepting and lets in-flight requests and streams finish.
//!
//! Limits keep slow or hostile clients from holding the gateway: a client
//! must send its request head within [`ListenerLimits::header_read_timeout`]
//! (or the connection closes), heads larger than
//! [`ListenerLimits::max_header_bytes`] get 431, and at most
//! [`ListenerLimits::max_connections`] are open at once — beyond that the
//! gateway stops accepting until one closes, so new clients wait in the
//! kernel's backlog instead of exhausting descriptors.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

pub use modelplane_listener::http1::{ListenerLimits, serve_http1};

use crate::proxy::handle;
use crate::state::Gateway;

/// Serves `gateway` on `listener` until `shutdown` resolves, then waits up
/// to `drain` for requests in flight.
pub async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl std::future::Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()> {
    let limits = gateway.config().listener;
    serve_http1(
        listener,
        move |req| handle(gateway.clone(), req),
        shutdown,
        drain,
        limits,
    )
    .await
}
