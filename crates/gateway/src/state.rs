//! The gateway's state: its configuration, the routing table requests read
//! (swapped whole on publish, so a request routes on one table start to
//! end), the upstream client whose connections every request and health
//! check shares, and the metrics.

use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use modelplane_listener::http1::ListenerLimits;

use crate::body::UpstreamBody;
use crate::metrics::{Metrics, ServiceMetrics};
use crate::table::{Service, Table};

/// How the gateway treats requests and engines.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Largest request body.
    pub max_body: usize,
    /// Time allowed to connect to an engine.
    pub connect_timeout: Duration,
    /// Time allowed for an engine's response head: vLLM sends it only when a
    /// non-streamed answer is complete, so it is long; a service may set its
    /// own ([`crate::table::FIRST_BYTE_TIMEOUT_ANNOTATION`]).
    pub first_byte_timeout: Duration,
    /// Longest silence between two chunks of an answer being streamed.
    pub idle_timeout: Duration,
    /// Endpoints tried per request (only what provably was not processed).
    pub max_attempts: usize,
    /// A `/<namespace>/<service>/…` body of at most this many bytes (by its
    /// Content-Length) is read whole before it is sent, so a busy or
    /// unreachable endpoint's request can still go to another; a larger or
    /// unsized one streams through and is sent once.
    pub retry_buffer: usize,
    /// Failures in a row that eject an endpoint.
    pub eject_after: u32,
    /// Most of a group's endpoints ejected at once, in percent (at least one
    /// may always be); Envoy's `max_ejection_percent`.
    pub max_ejected_percent: u32,
    /// Failed active health checks in a row that take an endpoint out.
    pub probe_failures_to_eject: u32,
    /// First ejection's length; each next one doubles, up to `max_ejection`.
    pub base_ejection: Duration,
    /// Longest ejection.
    pub max_ejection: Duration,
    /// Time between active health checks of each composed endpoint.
    pub health_interval: Duration,
    /// Time allowed for one health check.
    pub health_timeout: Duration,
    /// What the listener allows a client.
    pub listener: ListenerLimits,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            max_body: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(2),
            first_byte_timeout: Duration::from_secs(30 * 60),
            idle_timeout: Duration::from_secs(5 * 60),
            max_attempts: 3,
            retry_buffer: 1024 * 1024,
            eject_after: 3,
            max_ejected_percent: 50,
            probe_failures_to_eject: 3,
            base_ejection: Duration::from_secs(1),
            max_ejection: Duration::from_secs(30),
            health_interval: Duration::from_secs(5),
            health_timeout: Duration::from_secs(1),
            listener: ListenerLimits::default(),
        }
    }
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// The gateway: the current table, the upstream client, the metrics.
pub struct Gateway {
    pub(crate) table: RwLock<Arc<Table>>,
    pub(crate) loaded: std::sync::atomic::AtomicBool,
    pub(crate) publishes: std::sync::atomic::AtomicU64,
    pub(crate) client: Client<Connector, UpstreamBody>,
    pub(crate) metrics: Metrics,
    pub(crate) config: GatewayConfig,
    pub(crate) epoch: Instant,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// A gateway with an empty table (not ready until [`Gateway::publish`]).
    pub fn new(config: GatewayConfig) -> std::io::Result<Arc<Gateway>> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout));
        http.enforce_http(false);
        let https = https_or_http(http)?;
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(4096)
            .build(https);
        Ok(Arc::new(Gateway {
            table: RwLock::new(Arc::new(Table::default())),
            loaded: std::sync::atomic::AtomicBool::new(false),
            publishes: std::sync::atomic::AtomicU64::new(0),
            client,
            metrics: Metrics::default(),
            config,
            epoch: Instant::now(),
        }))
    }

    /// The table requests read now.
    pub fn table(&self) -> Arc<Table> {
        self.table.read().map(|t| t.clone()).unwrap_or_default()
    }

    /// Swaps in a new table; requests already routed keep the old one.
    pub fn publish(&self, table: Table, compile_time: Duration) {
        self.metrics.compile_seconds.set(compile_time.as_secs_f64());
        for service in table.services() {
            self.service_metrics(service);
        }
        if let Ok(mut current) = self.table.write() {
            *current = Arc::new(table);
        }
        self.loaded.store(true, Ordering::Release);
        self.publishes.fetch_add(1, Ordering::Relaxed);
    }

    /// How many tables have been published.
    pub fn publishes(&self) -> u64 {
        self.publishes.load(Ordering::Relaxed)
    }

    /// Its metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Its configuration.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// Milliseconds on the gateway's clock.
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The service's metric handles: made at publish time; made now for a
    /// service served from a table that was never published (tests).
    pub(crate) fn service_metrics(&self, service: &Service) -> Arc<ServiceMetrics> {
        service
            .metrics
            .get_or_init(|| {
                let endpoints = service.self_hosted.iter().chain(&service.external);
                let ids = endpoints
                    .flat_map(|g| g.endpoints.iter())
                    .map(|e| e.id.as_str());
                Arc::new(self.metrics.for_service(&service.id, ids))
            })
            .clone()
    }

    /// The upstream client (health checks share its connections).
    pub(crate) fn client(&self) -> &Client<Connector, UpstreamBody> {
        &self.client
    }
}

/// A connector for `http` and `https` endpoints, trusting the system's
/// roots. Without a system trust store plain HTTP still works and HTTPS
/// endpoints fail their handshakes, visibly, in their errors.
fn https_or_http(http: HttpConnector) -> std::io::Result<Connector> {
    let provider = || Arc::new(rustls::crypto::ring::default_provider());
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider())
    {
        Ok(builder) => builder,
        Err(e) => {
            tracing::warn!("no system root certificates ({e}): HTTPS endpoints cannot be verified");
            let config = rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(std::io::Error::other)?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    Ok(builder.https_or_http().enable_http1().wrap_connector(http))
}
