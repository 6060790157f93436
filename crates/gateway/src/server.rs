//! Accepting connections: HTTP/1.1 with keep-alive, `TCP_NODELAY` (a
//! streamed token must not wait for Nagle), and a graceful shutdown that
//! stops accepting and lets in-flight requests and streams finish.

use std::sync::Arc;
use std::time::Duration;

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
        let gateway = gateway.clone();
        let service = hyper::service::service_fn(move |req| handle(gateway.clone(), req));
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
