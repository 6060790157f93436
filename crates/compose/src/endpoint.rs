//! ModelEndpoint → a selectorless Service and an EndpointSlice on the
//! control plane pointing at the endpoint's host and port (`behavior.md` §6.1),
//! the backend a Gateway API route (the Traefik gateway) sends traffic to.
//! The built-in gateway reads ModelEndpoints directly, including
//! `spec.auth.secretRef` (DECISIONS §B D4), which is not composed into anything.

use std::net::IpAddr;

use modelplane_api::names::child_name;
use modelplane_api::types::ModelEndpoint;
use serde_json::json;

use crate::{Composition, Condition, Desired, Event, EventType, ReadinessRule, Target};

pub use modelplane_api::routing::{Url, parse_url};

/// The name of an endpoint's backend Service (and its EndpointSlice).
pub fn backend_name(endpoint: &str) -> String {
    child_name(&[endpoint, "backend"])
}

/// What composing a ModelEndpoint reads.
#[derive(Clone, Copy, Debug)]
pub struct EndpointInputs<'a> {
    /// The endpoint.
    pub endpoint: &'a ModelEndpoint,
    /// Whether its Service and EndpointSlice are observed on the control plane.
    pub backend_observed: bool,
}

/// Composes a ModelEndpoint.
pub fn compose_model_endpoint(inputs: EndpointInputs<'_>) -> Composition {
    let endpoint = inputs.endpoint;
    let name = endpoint.metadata.name.clone().unwrap_or_default();
    let namespace = endpoint.metadata.namespace.clone().unwrap_or_default();
    let mut out = Composition::default();
    let Some(url) = parse_url(&endpoint.spec.url) else {
        let message = format!("Invalid spec.url: {}", endpoint.spec.url);
        out.conditions.push(Condition::new(
            "RoutingReady",
            false,
            "InvalidURL",
            message.clone(),
        ));
        out.events.push(Event {
            type_: EventType::Warning,
            reason: "InvalidURL".into(),
            message,
        });
        return out;
    };
    let address_type = match url.host.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => "IPv4",
        Ok(IpAddr::V6(_)) => "IPv6",
        Err(_) => "FQDN",
    };
    let service = backend_name(&name);
    out.desired.push(Desired {
        target: Target::ControlPlane,
        object: json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": { "name": service, "namespace": namespace },
            "spec": { "ports": [{ "port": url.port, "protocol": "TCP" }] },
        }),
        ready_when: ReadinessRule::Created,
    });
    out.desired.push(Desired {
        target: Target::ControlPlane,
        object: json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": service,
                "namespace": namespace,
                "labels": { "kubernetes.io/service-name": service },
            },
            "addressType": address_type,
            "ports": [{ "name": "", "port": url.port, "protocol": "TCP" }],
            "endpoints": [{ "addresses": [url.host], "conditions": { "ready": true } }],
        }),
        ready_when: ReadinessRule::Created,
    });
    if inputs.backend_observed {
        out.status = Some(json!({ "routing": { "backendName": service } }));
        out.conditions.push(Condition::new(
            "RoutingReady",
            true,
            "BackendConfigured",
            "",
        ));
    } else {
        out.status = Some(json!({}));
        out.conditions.push(Condition::new(
            "RoutingReady",
            false,
            "WaitingForBackend",
            "",
        ));
    }
    out
}
