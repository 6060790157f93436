//! Serving over TCP: the data directory (store, token, kubeconfig), bearer
//! token authentication, and graceful shutdown.
//!
//! `DIR/state.db` is the store; `DIR/token` the bearer token and
//! `DIR/tls.crt`/`DIR/tls.key` a self-signed certificate, generated on first
//! start; `DIR/kubeconfig` points kubectl and kube-rs at the server with
//! that token, trusting that certificate. Secrets are written with mode
//! 0600. TLS is not optional with a token: client-go (kubectl) never sends
//! bearer tokens over plain HTTP.
//!
//! Shutdown stops accepting connections; requests in flight end with the
//! process.

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Store;
use crate::clusters::Clusters;
use crate::codec::base64;
use crate::data_dir::DataDir;
use crate::kubeconfig::kubeconfig;

/// How to serve.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the store, token and kubeconfig live, owned by this process.
    pub data_dir: DataDir,
    /// Address to listen on (loopback unless told otherwise).
    pub listen: SocketAddr,
    /// Connections open at once; beyond that new clients wait in the
    /// kernel's backlog until one closes.
    pub max_connections: usize,
}

/// Connections the API server holds open at once unless told otherwise:
/// every controller watch is one, so room for a large fleet's.
pub const MAX_CONNECTIONS: usize = 4096;

/// How long requests in flight have to finish once the server is told to
/// stop (watches end at once).
const DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Writes `contents` to `path` readable by the owner only.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()
}

/// The token in `DIR/token`, generated on first start.
fn token(dir: &Path) -> std::io::Result<String> {
    let path = dir.join("token");
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => Ok(token.trim().to_string()),
        _ => {
            let token = format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            write_private(&path, &token)?;
            Ok(token)
        }
    }
}

async fn authenticate(token: std::sync::Arc<String>, request: Request, next: Next) -> Response {
    if crate::http::PUBLIC_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if crate::auth::tokens::constant_time_eq(given.as_bytes(), token.as_bytes()) {
        return next.run(request).await;
    }
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
    });
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The server's certificate and key (PEM), generated on first start for
/// `localhost`, `127.0.0.1`, `::1` and the listen address.
fn certificate(dir: &Path, listen: SocketAddr) -> std::io::Result<(String, String)> {
    let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
    if let (Ok(cert), Ok(key)) = (
        std::fs::read_to_string(&cert_path),
        std::fs::read_to_string(&key_path),
    ) {
        return Ok((cert, key));
    }
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if !listen.ip().is_unspecified() && !listen.ip().is_loopback() {
        names.push(listen.ip().to_string());
    }
    let generated = rcgen::generate_simple_self_signed(names).map_err(std::io::Error::other)?;
    let (cert, key) = (generated.cert.pem(), generated.signing_key.serialize_pem());
    write_private(&key_path, &key)?;
    write_private(&cert_path, &cert)?;
    Ok((cert, key))
}

fn tls_config(cert: &str, key: &str) -> std::io::Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(std::io::Error::other)?;
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(std::io::Error::other)?;
    let mut config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(std::io::Error::other)?;
    // HTTP/2 as kube-apiserver offers it: a client's watches share one
    // connection instead of holding one each.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Serves until `shutdown` resolves; `ready` gets the bound address once
/// the kubeconfig is written. Logical clusters are served under
/// `/clusters/<name>/` (see [`Clusters`](crate::Clusters)).
pub async fn serve(
    config: Config,
    ready: impl FnOnce(SocketAddr, &Path),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_clusters(config, |addr, path, _| ready(addr, path), shutdown).await
}

/// [`serve`], handing `ready` the clusters too, so the process embedding
/// the server can create logical clusters with a library call.
pub async fn serve_clusters(
    config: Config,
    ready: impl FnOnce(SocketAddr, &Path, &std::sync::Arc<Clusters>),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let dir = &config.data_dir;
    // Created owner-only before SQLite opens it: its WAL and shared memory
    // files take the store's mode.
    dir.append("state.db")?;
    let store = Store::open(&dir.join("state.db")).map_err(|e| {
        std::io::Error::other(format!("opening {}: {e}", dir.join("state.db").display()))
    })?;
    let token = std::sync::Arc::new(token(dir.path())?);
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let (cert, key) = certificate(dir.path(), addr)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(tls_config(&cert, &key)?));
    let path = config.data_dir.join("kubeconfig");
    write_private(
        &path,
        &kubeconfig(&format!("https://{addr}"), &base64(cert.as_bytes()), &token),
    )?;
    let clusters = Clusters::open(store);
    clusters.set_endpoint(&format!("https://{addr}"), &base64(cert.as_bytes()), &token);
    let embedded = Embedded::start(clusters.clone()).await?;
    let app = embedded
        .router()
        .layer(axum::middleware::from_fn(move |req, next| {
            authenticate(token.clone(), req, next)
        }));
    ready(addr, &path, &clusters);
    let requests = clusters.root().tasks().clone();
    let shutdown = async move {
        shutdown.await;
        // Watches stream until their task stops: end them, so the drain
        // waits only for requests that finish.
        requests.shutdown().await;
    };
    modelplane_listener::accept(
        listener,
        config.max_connections,
        shutdown,
        DRAIN,
        |tcp, watcher| {
            let (acceptor, app) = (acceptor.clone(), app.clone());
            async move {
                // A failed or stalled handshake concerns that client only.
                let Ok(Ok(tls)) =
                    tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let mut builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                builder
                    .http1()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT);
                builder
                    .http2()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .max_concurrent_streams(MAX_STREAMS);
                let connection =
                    builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service);
                let _ = watcher.watch(connection).await;
            }
        },
    )
    .await;
    embedded.shutdown().await;
    Ok(())
}

/// The server without its listener: every cluster of a store, with the
/// server's own work running beside them (garbage collection, namespace
/// and CRD deletions resumed, logical clusters' deletions followed,
/// compaction), and the router serving them all. [`serve`] puts TLS and
/// the token in front of it; tests call the router in process.
pub struct Embedded {
    /// Every cluster it serves.
    pub clusters: std::sync::Arc<Clusters>,
    tasks: modelplane_supervisor::Supervisor,
}

impl Embedded {
    /// Resumes what `clusters`' store left under way and starts the
    /// server's own work.
    pub async fn start(clusters: std::sync::Arc<Clusters>) -> std::io::Result<Embedded> {
        let resumed = {
            let c = clusters.clone();
            tokio::task::spawn_blocking(move || c.resume())
                .await
                .map_err(std::io::Error::other)?
                .map_err(|e| std::io::Error::other(format!("reading the logical clusters: {e}")))?
        };
        // The server's own work and its connections stop with it.
        let tasks = modelplane_supervisor::Supervisor::default();
        for server in std::iter::once(clusters.root().clone()).chain(resumed) {
            tasks.spawn("gc-resume", crate::gc::resume(server.clone()));
            tasks.spawn(
                "namespaces-resume",
                crate::namespaces::resume(server.store().clone(), server.tasks().clone()),
            );
            tasks.spawn(
                "crd-deletions-resume",
                crate::http::resume_crd_deletions(server),
            );
        }
        tasks.spawn("cluster-deletions", clusters.clone().follow_deletions());
        tasks.spawn("gc-sweep", crate::gc::sweep(clusters.root().clone()));
        tasks.spawn("compaction", compact_periodically(clusters.clone()));
        Ok(Embedded { clusters, tasks })
    }

    /// The Kubernetes REST surface of every cluster: the root at `/`, each
    /// logical cluster under `/clusters/<name>/`. No authentication.
    pub fn router(&self) -> axum::Router {
        crate::http::clusters_router(self.clusters.clone())
    }

    /// Stops the server's work, and what requests left running (every
    /// cluster of the store shares one owner).
    pub async fn shutdown(self) {
        self.tasks.shutdown().await;
        self.clusters.root().tasks().shutdown().await;
    }
}

/// Time a client has to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Requests at once on one HTTP/2 connection, kube-apiserver's default
/// (`--http2-max-streams-per-connection`): a controller's every watch of
/// one server shares a connection.
const MAX_STREAMS: u32 = 1000;
/// Time a client has to send a request's head.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
async fn compact_periodically(clusters: std::sync::Arc<Clusters>) {
    use crate::compaction::{COMPACT_EVERY, RETENTION, Retention};
    let server = clusters.root().clone();
    let start = std::time::Instant::now();
    let mut retention = Retention::new(RETENTION);
    let mut tick = tokio::time::interval(COMPACT_EVERY);
    loop {
        tick.tick().await;
        let s = server.clone();
        let Ok(Ok(revision)) = tokio::task::spawn_blocking(move || s.store().revision()).await
        else {
            continue;
        };
        if let Some(rev) = retention.observe(start.elapsed(), revision) {
            let s = server.clone();
            let _ = tokio::task::spawn_blocking(move || s.store().compact(rev)).await;
        }
        // Dependents whose owners are gone (a collection cut short) go too.
        for cluster in clusters.all() {
            crate::gc::sweep(cluster).await;
        }
    }
}

/// Runs [`serve`] on its own runtime until Ctrl-C.
pub fn run(config: Config, ready: impl FnOnce(SocketAddr, &Path)) -> std::io::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(config, ready, async {
            let _ = tokio::signal::ctrl_c().await;
        }))
}
