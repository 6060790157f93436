//! The API server's Prometheus metrics, served on `/metrics` (with the
//! token, as kube-apiserver serves its own) under kube-apiserver's names:
//! `apiserver_request_total` by verb, resource, subresource and code, and
//! `apiserver_watch_events_total` by event type and resource — the record
//! of what the server answered, an in-stream 410 (`ERROR`) included.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of an answered request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `APPLY` or
    /// `DELETE`, as kube-apiserver counts them.
    pub verb: &'static str,
    /// The resource's plural name.
    pub resource: String,
    /// `status`, `scale`, `log` or empty.
    pub subresource: &'static str,
    /// The HTTP status answered.
    pub code: u16,
}

/// Labels of a sent watch event.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchEventLabels {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub r#type: String,
    /// The resource's plural name.
    pub resource: String,
}

/// Every counter, shared by the clusters of one store.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    watch_events: Family<WatchEventLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let watch_events = Family::<WatchEventLabels, Counter>::default();
        registry.register(
            "apiserver_request",
            "Requests answered, by verb, resource, subresource and HTTP code",
            requests.clone(),
        );
        registry.register(
            "apiserver_watch_events",
            "Watch events sent, by type and resource",
            watch_events.clone(),
        );
        Metrics {
            registry,
            requests,
            watch_events,
        }
    }
}

impl Metrics {
    /// Counts an answered request.
    pub fn request(&self, labels: RequestLabels) {
        self.requests.get_or_create(&labels).inc();
    }

    /// Counts a watch event sent: `line` is the event as sent.
    pub fn watch_event(&self, line: &[u8], resource: &str) {
        self.watch_events
            .get_or_create(&WatchEventLabels {
                r#type: event_type(line).to_string(),
                resource: resource.to_string(),
            })
            .inc();
    }

    /// The Prometheus text.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// The `type` of a watch event line, which every line starts with
/// (`{"type":"ADDED",…`).
fn event_type(line: &[u8]) -> &str {
    line.strip_prefix(br#"{"type":""#)
        .and_then(|rest| rest.iter().position(|b| *b == b'"').map(|end| &rest[..end]))
        .and_then(|t| std::str::from_utf8(t).ok())
        .unwrap_or("UNKNOWN")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_line_is_counted_by_its_type() {
        let metrics = Metrics::default();
        metrics.watch_event(br#"{"type":"ERROR","object":{}}"#, "configmaps");
        metrics.watch_event(b"garbage", "configmaps");
        let text = metrics.encode();
        assert!(
            text.contains(r#"apiserver_watch_events_total{type="ERROR",resource="configmaps"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"type="UNKNOWN""#), "{text}");
    }
}
