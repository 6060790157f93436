//! HTTP/1.1 over [`accept`](crate::accept): keep-alive, `TCP_NODELAY` on the
//! caller's side, a deadline for the request head and a cap on its size —
//! the gateway's and the simulated engines' listeners.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::net::TcpListener;

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

/// The address a request's connection came from, in its extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

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
    crate::accept(
        listener,
        limits.max_connections,
        shutdown,
        drain,
        |tcp, watcher| {
            let client = tcp.peer_addr().ok().map(ClientAddr);
            let handler = handler.clone();
            let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
                if let Some(client) = client {
                    request.extensions_mut().insert(client);
                }
                handler(request)
            });
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
