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

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::net::TcpListener;

use crate::proxy::{Gateway, handle};

/// What the listener allows a client.
#[derive(Clone, Copy, Debug)]
pub struct ListenerLimits {
    /// Time a client has to send its whole request head.
    pub header_read_timeout: Duration,
    /// Largest request head (request line and headers); at least 8 KiB.
    pub max_header_bytes: usize,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 64 * 1024,
            max_connections: 10_000,
        }
    }
}

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

/// Serves `handler` over HTTP/1.1 on `listener` (the gateway's and the fake
/// engines' accept loop) until `shutdown`, then drains for up to `drain`.
pub async fn serve_http1<H, F, B>(
    listener: TcpListener,
    handler: H,
    shutdown: impl std::future::Future<Output = ()>,
    drain: Duration,
    limits: ListenerLimits,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192));
    modelplane_listener::accept(
        listener,
        limits.max_connections,
        shutdown,
        drain,
        |tcp, watcher| {
            let service = hyper::service::service_fn(handler.clone());
            let connection = http1.serve_connection(hyper_util::rt::TokioIo::new(tcp), service);
            let connection = watcher.watch(connection);
            async move {
                let _ = connection.await;
            }
        },
    )
    .await;
    Ok(())
}
