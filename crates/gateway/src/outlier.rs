//! Outlier detection and health, in one room: which endpoints are in
//! rotation. Envoy's outlier detection is the model.
//!
//! - **Passive**: a request that fails (connect error, lost connection, 5xx
//!   other than 503, timeout) counts against its endpoint; after
//!   [`GatewayConfig::eject_after`] in a row it is ejected for a backoff that
//!   doubles with each ejection in a row, up to `max_ejection`. A success
//!   resets the count. 503 and 429 are an engine saying it is busy:
//!   backpressure, never a failure.
//! - **Cap**: at most [`GatewayConfig::max_ejected_percent`] of a group's
//!   endpoints are ejected at once (at least one may always be), so a
//!   cascade under load cannot empty a group.
//! - **Active**: a health check that fails
//!   [`GatewayConfig::probe_failures_to_eject`] times in a row takes the
//!   endpoint out until one passes; one slow probe does not.
//! - **Panic**: when no endpoint of a service is in rotation, selection
//!   ignores health ([`crate::select::pick`]) rather than refuse every
//!   request: a request is better tried than refused.
//!
//! [`GatewayConfig::eject_after`]: crate::state::GatewayConfig::eject_after
//! [`GatewayConfig::max_ejected_percent`]: crate::state::GatewayConfig::max_ejected_percent
//! [`GatewayConfig::probe_failures_to_eject`]: crate::state::GatewayConfig::probe_failures_to_eject

use std::sync::atomic::Ordering;

use crate::metrics::EndpointLabels;
use crate::state::Gateway;
use crate::table::{Endpoint, Service};

/// How many of `size` endpoints may be ejected at once under `percent`.
pub fn ejection_allowance(size: usize, percent: u32) -> usize {
    (size * percent as usize / 100).max(1)
}

/// The endpoints of the group of `service` that holds `endpoint`.
fn peers<'s>(service: &'s Service, endpoint: &Endpoint) -> &'s [std::sync::Arc<Endpoint>] {
    service
        .self_hosted
        .iter()
        .chain(&service.external)
        .find(|g| g.endpoints.iter().any(|e| std::ptr::eq(&**e, endpoint)))
        .map_or(&[][..], |g| &g.endpoints[..])
}

impl Gateway {
    /// Counts a failure against `endpoint` of `service`, ejecting it after
    /// enough in a row unless its group has as many out as it may.
    pub(crate) fn failed(&self, service: &Service, endpoint: &Endpoint) {
        let config = self.config();
        let state = &endpoint.state;
        let failures = state.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures < config.eject_after {
            return;
        }
        let now = self.now_ms();
        let group = peers(service, endpoint);
        let out = group
            .iter()
            .filter(|e| e.state.ejected_until.load(Ordering::Relaxed) > now)
            .count();
        if out >= ejection_allowance(group.len(), config.max_ejected_percent) {
            tracing::debug!(endpoint = %endpoint.id, "not ejected: {out} of {} already out", group.len());
            return;
        }
        state.failures.store(0, Ordering::Relaxed);
        let ejections = state.ejections.fetch_add(1, Ordering::Relaxed).min(16);
        let length = config
            .base_ejection
            .saturating_mul(1 << ejections)
            .min(config.max_ejection);
        state
            .ejected_until
            .store(now + length.as_millis() as u64, Ordering::Relaxed);
        self.metrics()
            .ejections
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.id.clone(),
            })
            .inc();
        tracing::warn!(endpoint = %endpoint.id, seconds = length.as_secs_f64(), "endpoint ejected after {failures} failures in a row");
    }

    /// Clears `endpoint`'s failure count.
    pub(crate) fn succeeded(&self, endpoint: &Endpoint) {
        let state = &endpoint.state;
        if state.failures.load(Ordering::Relaxed) != 0 {
            state.failures.store(0, Ordering::Relaxed);
        }
        if state.ejections.load(Ordering::Relaxed) != 0 {
            state.ejections.store(0, Ordering::Relaxed);
        }
    }

    /// Records an active health check of `endpoint`; returns whether it is
    /// in rotation now. It leaves after enough failures in a row and comes
    /// back with the first pass.
    pub(crate) fn probed(&self, endpoint: &Endpoint, ok: bool) -> bool {
        let state = &endpoint.state;
        let in_rotation = if ok {
            state.probe_failures.store(0, Ordering::Relaxed);
            true
        } else {
            let failures = state.probe_failures.fetch_add(1, Ordering::Relaxed) + 1;
            failures < self.config().probe_failures_to_eject
        };
        let was = state.probe_ok.swap(in_rotation, Ordering::Relaxed);
        if was != in_rotation {
            if in_rotation {
                tracing::info!(endpoint = %endpoint.id, "health check passes again");
            } else {
                tracing::warn!(endpoint = %endpoint.id, "health checks failed: out of rotation");
            }
        }
        in_rotation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(id: &str) -> Endpoint {
        Endpoint {
            id: id.into(),
            scheme: http::uri::Scheme::HTTP,
            authority: "127.0.0.1:1".parse().expect("authority"),
            rewrite: None,
            bearer: None,
            served_model: None,
            external: false,
            state: std::sync::Arc::new(crate::table::EndpointState::default()),
        }
    }

    #[test]
    fn one_failed_probe_does_not_take_an_endpoint_out_several_in_a_row_do() {
        let gateway = Gateway::new(crate::state::GatewayConfig::default()).expect("gateway");
        let e = endpoint("ml/e");
        assert!(gateway.probed(&e, false), "one slow probe");
        assert!(gateway.probed(&e, false), "two");
        assert!(!gateway.probed(&e, false), "three in a row: out");
        assert!(gateway.probed(&e, true), "the first pass brings it back");
        assert!(gateway.probed(&e, false), "and the count starts again");
    }

    #[test]
    fn at_least_one_and_at_most_the_share_may_be_out() {
        assert_eq!(ejection_allowance(1, 50), 1);
        assert_eq!(ejection_allowance(2, 50), 1);
        assert_eq!(ejection_allowance(4, 50), 2);
        assert_eq!(ejection_allowance(10, 10), 1);
        assert_eq!(ejection_allowance(10, 100), 10);
    }
}
