//! ModelService → one HTTPRoute on the control-plane gateway that splits
//! traffic across its ModelEndpoints by weight (`behavior.md` §6.2).
//!
//! Data flow: each entry's selector picks endpoints (an endpoint belongs to
//! the first entry that matches it); entries with no routable endpoint drop
//! out; [`split_weights`] turns entry weights into per-endpoint weights that
//! keep every entry's share whatever its endpoint count; the route carries
//! one weighted backend per endpoint.

use modelplane_api::labels;
use modelplane_api::types::{ModelEndpoint, ModelService};
use serde_json::{Value, json};

use crate::endpoint::parse_url;
use crate::{Composition, Condition, Desired, Event, EventType, ReadinessRule, Target};

/// The largest weight Gateway API accepts.
pub const MAX_WEIGHT: u64 = 1_000_000;

/// What composing a ModelService reads.
#[derive(Clone, Copy, Debug)]
pub struct ServiceInputs<'a> {
    /// The service.
    pub service: &'a ModelService,
    /// Every ModelEndpoint (the service selects among them).
    pub endpoints: &'a [&'a ModelEndpoint],
    /// `status.address` of the InferenceGateway `default`, if any.
    pub gateway_address: Option<&'a str>,
    /// Whether the observed route was accepted by the gateway.
    pub route_accepted: bool,
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Per-endpoint weights for groups of `(weight, endpoints)`: every group keeps
/// its share of traffic however many endpoints it has, no endpoint gets 0,
/// the result is reduced by the GCD and scaled into 1..=1,000,000.
pub fn split_weights(groups: &[(u64, usize)]) -> Vec<Vec<u64>> {
    let groups: Vec<(u64, usize)> = groups.iter().copied().filter(|(_, n)| *n > 0).collect();
    if groups.is_empty() {
        return Vec::new();
    }
    let scale = groups
        .iter()
        .map(|(w, n)| (*n as u64).div_ceil((*w).max(1)))
        .max()
        .unwrap_or(1)
        .max(1);
    let mut split: Vec<Vec<u64>> = groups
        .iter()
        .map(|(w, n)| {
            let total = w * scale;
            let (base, rem) = (total / *n as u64, total % *n as u64);
            (0..*n as u64)
                .map(|i| if i < rem { base + 1 } else { base })
                .collect()
        })
        .collect();
    let divisor = split.iter().flatten().copied().fold(0, gcd).max(1);
    for w in split.iter_mut().flatten() {
        *w /= divisor;
    }
    let largest = split.iter().flatten().copied().max().unwrap_or(1);
    if largest > MAX_WEIGHT {
        for w in split.iter_mut().flatten() {
            *w = round_half_even(*w as f64 / largest as f64 * MAX_WEIGHT as f64).max(1);
        }
    }
    split
}

/// Rounds half to even, as Python's `round`.
fn round_half_even(x: f64) -> u64 {
    let floor = x.floor();
    let diff = x - floor;
    let r = if diff > 0.5 || (diff == 0.5 && floor % 2.0 != 0.0) {
        floor + 1.0
    } else {
        floor
    };
    r as u64
}

pub use modelplane_api::routing::group_endpoints;

/// The backend Service name of an endpoint, once its routing is configured.
fn backend(endpoint: &ModelEndpoint) -> Option<&str> {
    endpoint
        .status
        .as_ref()
        .and_then(|s| s.routing.as_ref())
        .and_then(|r| r.backend_name.as_deref())
}

/// Composes a ModelService.
pub fn compose_model_service(inputs: ServiceInputs<'_>) -> Composition {
    let service = inputs.service;
    let namespace = service.metadata.namespace.clone().unwrap_or_default();
    let name = service.metadata.name.clone().unwrap_or_default();
    let mut out = Composition::default();
    let groups = group_endpoints(service, inputs.endpoints.iter().copied());
    let matched: usize = groups.iter().map(Vec::len).sum();
    if matched == 0 {
        let message = "No ModelEndpoints matched the configured selectors";
        out.conditions.push(Condition::new(
            "EndpointsResolved",
            false,
            "NoEndpoints",
            message,
        ));
        out.events.push(Event {
            type_: EventType::Warning,
            reason: "NoEndpoints".into(),
            message: message.into(),
        });
        return out;
    }
    let waiting = groups
        .iter()
        .flatten()
        .filter(|e| backend(e).is_none())
        .count();
    let mut message = format!("Matched {matched} endpoint(s)");
    if waiting > 0 {
        message.push_str(&format!("; {waiting} waiting for Backend"));
    }
    out.conditions.push(Condition::new(
        "EndpointsResolved",
        true,
        "Resolved",
        message,
    ));

    let ready: Vec<(u64, Vec<&ModelEndpoint>)> = service
        .spec
        .endpoints
        .iter()
        .zip(&groups)
        .map(|(entry, eps)| {
            let weight = u64::try_from(entry.weight()).unwrap_or(1);
            (
                weight,
                eps.iter()
                    .copied()
                    .filter(|e| backend(e).is_some())
                    .collect(),
            )
        })
        .filter(|(_, eps): &(u64, Vec<&ModelEndpoint>)| !eps.is_empty())
        .collect();
    let weights = split_weights(
        &ready
            .iter()
            .map(|(w, eps)| (*w, eps.len()))
            .collect::<Vec<_>>(),
    );
    let backend_refs: Vec<Value> = ready
        .iter()
        .zip(&weights)
        .flat_map(|((_, eps), ws)| eps.iter().zip(ws))
        .map(|(e, w)| {
            let port = parse_url(&e.spec.url).map(|u| u.port).unwrap_or(80);
            let mut r = json!({ "name": backend(e), "port": port, "weight": w });
            if let Some(rewrite) = &e.spec.rewrite_path {
                r["filters"] = json!([{ "type": "URLRewrite", "urlRewrite": { "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": rewrite } } }]);
            }
            r
        })
        .collect();
    let mut rule = json!({ "matches": [{ "path": { "type": "PathPrefix", "value": format!("/{namespace}/{name}/") } }] });
    if !backend_refs.is_empty() {
        rule["backendRefs"] = Value::Array(backend_refs);
    }
    out.desired.push(Desired {
        target: Target::ControlPlane,
        object: json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": { "name": name, "namespace": namespace },
            "spec": {
                "parentRefs": [{ "name": "modelplane", "namespace": labels::SYSTEM_NAMESPACE }],
                "rules": [rule],
            },
        }),
        ready_when: ReadinessRule::Created,
    });
    if let Some(address) = inputs.gateway_address.filter(|a| !a.is_empty()) {
        out.status = Some(json!({ "address": format!("http://{address}/{namespace}/{name}") }));
    }
    let routable = matched > waiting;
    out.conditions.push(if inputs.route_accepted && routable {
        Condition::new("RoutingReady", true, "RouteConfigured", "")
    } else {
        Condition::new("RoutingReady", false, "Configuring", "")
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_reproduce_the_worked_examples() {
        let flat = |groups: &[(u64, usize)]| split_weights(groups).concat();
        assert_eq!(flat(&[(80, 3)]), [27, 27, 26]);
        assert_eq!(flat(&[(1, 5)]), [1, 1, 1, 1, 1]);
        assert_eq!(flat(&[(95, 2), (5, 1)]), [48, 47, 5]);
        assert_eq!(flat(&[(2, 1), (2, 1)]), [1, 1]);
        assert_eq!(flat(&[(1, 2), (3, 1)]), [1, 1, 6]);
        assert_eq!(flat(&[(80, 3), (20, 1)]), [27, 27, 26, 20]);
        assert_eq!(flat(&[(1_000_000, 1), (1, 2)]), [1_000_000, 1, 1]);
        assert_eq!(
            flat(&[(1_000_000, 3), (1, 2)]),
            [666_667, 666_667, 666_666, 1, 1]
        );
    }

    #[test]
    fn python_rounding_is_half_to_even() {
        assert_eq!(round_half_even(0.5), 0);
        assert_eq!(round_half_even(1.5), 2);
        assert_eq!(round_half_even(2.5), 2);
        assert_eq!(round_half_even(2.6), 3);
    }
}
