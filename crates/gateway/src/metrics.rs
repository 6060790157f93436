//! The gateway's Prometheus metrics, served on `/metrics`: requests by
//! service, endpoint and status; requests in flight; upstream latency to
//! the response head; time to the first body byte; bytes each way;
//! ejections; how long the last table compile took.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a finished request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `namespace/name`, or empty when none matched.
    pub service: String,
    /// `namespace/name` of the endpoint, or empty when none was reached.
    pub endpoint: String,
    /// The status sent to the client.
    pub status: u16,
}

/// Labels by service.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    /// `namespace/name`.
    pub service: String,
}

/// Labels by endpoint.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    /// `namespace/name`.
    pub endpoint: String,
}

/// Histograms of seconds, 100 µs to about 100 s.
#[derive(Clone, Debug)]
pub struct Seconds;

impl MetricConstructor<Histogram> for Seconds {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(0.0001, 2.5, 16))
    }
}

/// One service's metric handles, made when its table is published, so a
/// request updates them without building label sets (no allocation on the
/// hot path).
#[derive(Debug)]
pub struct ServiceMetrics {
    /// Upstream latency to the response head.
    pub upstream_latency: Histogram,
    /// Time to the first body byte.
    pub time_to_first_byte: Histogram,
    /// Request body bytes sent upstream.
    pub request_bytes: Counter,
    /// Response body bytes sent to clients.
    pub response_bytes: Counter,
    /// Retries elsewhere.
    pub retries: Counter,
    /// Requests answered 200, by endpoint id.
    pub ok_by_endpoint: std::collections::HashMap<String, Counter>,
}

impl Metrics {
    /// The handles of service `service` with endpoints `endpoints`.
    pub fn for_service<'e>(
        &self,
        service: &str,
        endpoints: impl Iterator<Item = &'e str>,
    ) -> ServiceMetrics {
        let labels = ServiceLabels {
            service: service.to_string(),
        };
        ServiceMetrics {
            upstream_latency: self.upstream_latency.get_or_create(&labels).clone(),
            time_to_first_byte: self.time_to_first_byte.get_or_create(&labels).clone(),
            request_bytes: self.request_bytes.get_or_create(&labels).clone(),
            response_bytes: self.response_bytes.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
            ok_by_endpoint: endpoints
                .map(|e| {
                    let counter = self
                        .requests
                        .get_or_create(&RequestLabels {
                            service: service.to_string(),
                            endpoint: e.to_string(),
                            status: 200,
                        })
                        .clone();
                    (e.to_string(), counter)
                })
                .collect(),
        }
    }
}

/// Every metric of the gateway.
pub struct Metrics {
    registry: Registry,
    /// Requests answered, by service, endpoint and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Requests being served now.
    pub in_flight: Gauge,
    /// From sending upstream to the response head.
    pub upstream_latency: Family<ServiceLabels, Histogram, Seconds>,
    /// From the request's arrival to the first byte of the response body.
    pub time_to_first_byte: Family<ServiceLabels, Histogram, Seconds>,
    /// Request body bytes sent upstream.
    pub request_bytes: Family<ServiceLabels, Counter>,
    /// Response body bytes sent to clients.
    pub response_bytes: Family<ServiceLabels, Counter>,
    /// Retries on another endpoint after a connect failure.
    pub retries: Family<ServiceLabels, Counter>,
    /// Endpoints taken out after failures.
    pub ejections: Family<EndpointLabels, Counter>,
    /// Failed active health checks.
    pub probe_failures: Family<EndpointLabels, Counter>,
    /// How long the last routing-table compile took.
    pub compile_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("modelplane_gateway"),
            requests: Family::default(),
            in_flight: Gauge::default(),
            upstream_latency: Family::new_with_constructor(Seconds),
            time_to_first_byte: Family::new_with_constructor(Seconds),
            request_bytes: Family::default(),
            response_bytes: Family::default(),
            retries: Family::default(),
            ejections: Family::default(),
            probe_failures: Family::default(),
            compile_seconds: Gauge::default(),
        };
        let r = &mut metrics.registry;
        r.register("requests", "Requests answered", metrics.requests.clone());
        r.register(
            "requests_in_flight",
            "Requests being served",
            metrics.in_flight.clone(),
        );
        r.register(
            "upstream_latency_seconds",
            "Time from sending a request upstream to its response head",
            metrics.upstream_latency.clone(),
        );
        r.register(
            "time_to_first_byte_seconds",
            "Time from a request's arrival to the first byte of its response body",
            metrics.time_to_first_byte.clone(),
        );
        r.register(
            "request_bytes",
            "Request body bytes sent upstream",
            metrics.request_bytes.clone(),
        );
        r.register(
            "response_bytes",
            "Response body bytes sent to clients",
            metrics.response_bytes.clone(),
        );
        r.register(
            "retries",
            "Requests retried on another endpoint after a connect failure",
            metrics.retries.clone(),
        );
        r.register(
            "endpoint_ejections",
            "Endpoints taken out of rotation after failures",
            metrics.ejections.clone(),
        );
        r.register(
            "probe_failures",
            "Failed active health checks",
            metrics.probe_failures.clone(),
        );
        r.register(
            "table_compile_seconds",
            "How long the last routing-table compile took",
            metrics.compile_seconds.clone(),
        );
        metrics
    }
}

impl Metrics {
    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
