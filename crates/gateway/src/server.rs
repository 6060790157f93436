//! Accepting connections: HTTP/1.1 with keep-alive, `TCP_NODELAY` (a
//! streamed token must not wait for Nagle), and a graceful shutdown that
//! stops accepting and lets in-flight requests and streams finish.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::net::TcpListener;

use crate::proxy::{Gateway, handle};

/// Serves `gateway` on `listener` until `shutdown` resolves, then waits up
/// to `drain` for requests in flight.
pub async fn serve(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl std::future::Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()> {
    serve_http1(
        listener,
        move |req| handle(gateway.clone(), req),
        shutdown,
        drain,
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
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of descriptors and the like: back off, keep serving.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let service = hyper::service::service_fn(handler.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(tcp), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    tracing::info!("shutting down: draining requests in flight");
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after {drain:?}; closing them");
    }
    Ok(())
}
