//! The controller's Prometheus metrics, served with the health probes on
//! `/metrics`, `/healthz` and `/readyz`: reconciles, errors and durations
//! by kind, the queue's depth, objects applied and pruned, workload
//! clusters connected, and whether this process leads.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// Labels of one reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// What was reconciled: `ModelReplica`, …, `orphans`, `connect`.
    pub kind: String,
    /// `ok` or `error`.
    pub result: String,
}

/// Labels of one failure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// What was reconciled.
    pub kind: String,
    /// Why (`not_served`, `conflict`, `unreachable`, …).
    pub reason: String,
}

/// Labels by kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// What was reconciled.
    pub kind: String,
}

/// Labels by target.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    /// `control-plane` or `cluster`.
    pub target: String,
}

/// Reconcile durations, 100 µs to about 100 s.
#[derive(Clone, Debug)]
pub struct Seconds;

impl MetricConstructor<Histogram> for Seconds {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(0.0001, 2.5, 16))
    }
}

/// Every metric.
pub struct Metrics {
    registry: Registry,
    /// Reconciles by kind and result.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// Failures by kind and reason.
    pub errors: Family<ErrorLabels, Counter>,
    /// Reconcile durations by kind.
    pub durations: Family<KindLabels, Histogram, Seconds>,
    /// Work waiting.
    pub queue_depth: Gauge,
    /// Objects applied, by target.
    pub applied: Family<TargetLabels, Counter>,
    /// Objects deleted because no longer wanted or orphaned, by target.
    pub pruned: Family<TargetLabels, Counter>,
    /// Workload clusters with a connection.
    pub clusters_connected: Gauge,
    /// 1 while this process leads.
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("modelplane_controller");
        let metrics = Metrics {
            reconciles: Family::default(),
            errors: Family::default(),
            durations: Family::new_with_constructor(Seconds),
            queue_depth: Gauge::default(),
            applied: Family::default(),
            pruned: Family::default(),
            clusters_connected: Gauge::default(),
            leader: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "reconciles",
            "Reconciles by kind and result",
            metrics.reconciles.clone(),
        );
        registry.register(
            "errors",
            "Failed writes and passes by kind and reason",
            metrics.errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "How long a reconcile took, by kind",
            metrics.durations.clone(),
        );
        registry.register(
            "queue_depth",
            "Work waiting in the queue",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "objects_applied",
            "Objects applied, by target",
            metrics.applied.clone(),
        );
        registry.register(
            "objects_pruned",
            "Objects deleted because no longer wanted or orphaned, by target",
            metrics.pruned.clone(),
        );
        registry.register(
            "workload_clusters_connected",
            "Workload clusters with a connection",
            metrics.clusters_connected.clone(),
        );
        registry.register(
            "leader",
            "1 while this process leads",
            metrics.leader.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }
}

impl Metrics {
    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Counts one reconcile of `kind`.
    pub fn reconciled(&self, kind: &str, took: Duration, errors: &[&'static str]) {
        let result = if errors.is_empty() { "ok" } else { "error" };
        self.reconciles
            .get_or_create(&ReconcileLabels {
                kind: kind.into(),
                result: result.into(),
            })
            .inc();
        self.durations
            .get_or_create(&KindLabels { kind: kind.into() })
            .observe(took.as_secs_f64());
        for reason in errors {
            self.errors
                .get_or_create(&ErrorLabels {
                    kind: kind.into(),
                    reason: (*reason).into(),
                })
                .inc();
        }
    }
}

fn target_label(target: &modelplane_compose::Target) -> TargetLabels {
    TargetLabels {
        target: match target {
            modelplane_compose::Target::ControlPlane => "control-plane",
            modelplane_compose::Target::Cluster(_) => "cluster",
        }
        .into(),
    }
}

impl Metrics {
    /// Counts an object applied on `target`.
    pub fn applied_on(&self, target: &modelplane_compose::Target) {
        self.applied.get_or_create(&target_label(target)).inc();
    }

    /// Counts an object deleted on `target`.
    pub fn pruned_on(&self, target: &modelplane_compose::Target) {
        self.pruned.get_or_create(&target_label(target)).inc();
    }
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

/// Serves `/metrics`, `/healthz` (the process runs) and `/readyz` (its
/// index has read the control plane) on `listener` until the task ends.
pub async fn serve(listener: TcpListener, shared: Arc<crate::Shared>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while connections.try_join_next().is_some() {}
        let shared = shared.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let shared = shared.clone();
            async move { Ok::<_, Infallible>(answer(&shared, request.uri().path())) }
        });
        // Owned by this task's set: they end with it.
        connections.spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                .await;
        });
    }
}

fn answer(shared: &crate::Shared, path: &str) -> Response<Full<Bytes>> {
    match path {
        "/metrics" => {
            shared
                .metrics
                .queue_depth
                .set(i64::try_from(shared.queue.depth()).unwrap_or(i64::MAX));
            text(
                StatusCode::OK,
                shared.metrics.encode(),
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
        }
        "/healthz" | "/livez" => text(StatusCode::OK, "ok".into(), "text/plain; charset=utf-8"),
        "/readyz" => {
            let unlisted = shared
                .index
                .read()
                .map(|i| i.unlisted())
                .unwrap_or_default();
            if unlisted.is_empty() {
                return text(StatusCode::OK, "ok".into(), "text/plain; charset=utf-8");
            }
            let errors = shared
                .watch_errors
                .lock()
                .map(|e| e.clone())
                .unwrap_or_default();
            let kinds: Vec<String> = unlisted
                .iter()
                .map(|kind| {
                    let name = kind.type_meta().1;
                    match errors.get(kind) {
                        Some(why) => format!("{name} ({why})"),
                        None => name.to_string(),
                    }
                })
                .collect();
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the control plane's lists are not read yet: {}",
                    kinds.join(", ")
                ),
                "text/plain; charset=utf-8",
            )
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found".into(),
            "text/plain; charset=utf-8",
        ),
    }
}
