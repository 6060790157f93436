//! How Modelplane's servers accept connections (the API server's and the
//! gateway's): TCP connection → a slot under the cap → the server's own
//! handler (TLS, HTTP), watched for graceful shutdown.
//!
//! - At most `max_connections` are open at once: at the cap the loop stops
//!   accepting until one closes, so new clients wait in the kernel's backlog
//!   instead of exhausting descriptors.
//! - A failed accept (out of descriptors, a connection reset before it was
//!   taken) backs off and the loop goes on; it never ends the server.
//! - On shutdown the loop stops accepting, tells every connection to finish
//!   the request it is serving and close, and waits up to `drain` for them;
//!   whatever is left is closed when the loop returns (the connections are
//!   its own tasks, so dropping the loop closes them too).

pub mod http1;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::graceful::GracefulShutdown;
pub use hyper_util::server::graceful::Watcher;
use tokio::net::{TcpListener, TcpStream};

/// How long a failed accept waits before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Accepts on `listener` until `shutdown` resolves, handing each connection
/// to `serve` with the [`Watcher`] it wraps its HTTP connection in; then
/// drains for up to `drain`.
pub async fn accept<S, F>(
    listener: TcpListener,
    max_connections: usize,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    serve: S,
) where
    S: Fn(TcpStream, Watcher) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(max_connections.max(1)));
    tokio::pin!(shutdown);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let connection = serve(tcp, graceful.watcher());
        connections.spawn(async move {
            connection.await;
            drop(slot);
        });
    }
    drop(listener);
    tracing::info!("shutting down: draining requests in flight");
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after {drain:?}; closing them");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connection that answers one byte with one byte, and closes.
    async fn echo_once(mut tcp: TcpStream) {
        let mut byte = [0u8; 1];
        if tcp.read_exact(&mut byte).await.is_ok() {
            let _ = tcp.write_all(&byte).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_the_cap_a_new_client_waits_until_one_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = accept(
            listener,
            1,
            async move {
                let _ = stopped.await;
            },
            Duration::from_secs(1),
            |tcp, _watcher| echo_once(tcp),
        );
        let clients = async move {
            let mut first = TcpStream::connect(addr).await.expect("first");
            let mut second = TcpStream::connect(addr)
                .await
                .expect("second, in the backlog");
            second
                .write_all(b"b")
                .await
                .expect("written to the backlog");
            let mut byte = [0u8; 1];
            let waited =
                tokio::time::timeout(Duration::from_millis(300), second.read_exact(&mut byte))
                    .await;
            assert!(
                waited.is_err(),
                "the second is not served while the first holds the slot"
            );
            first.write_all(b"a").await.expect("first writes");
            first.read_exact(&mut byte).await.expect("first served");
            drop(first);
            tokio::time::timeout(Duration::from_secs(5), second.read_exact(&mut byte))
                .await
                .expect("served once the first closed")
                .expect("read");
            assert_eq!(&byte, b"b");
            let _ = stop.send(());
        };
        tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(server, clients)
        })
        .await
        .expect("the server stops once told to");
    }
}
