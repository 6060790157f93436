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

/// The parts of an endpoint URL that carry traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `http`, `https`, …
    pub scheme: String,
    /// Host, lower-cased, without IPv6 brackets.
    pub host: String,
    /// Port: explicit, else 443 for https, else 80.
    pub port: u16,
    /// The path (and query), possibly empty.
    pub path: String,
}

/// Parses `scheme://host[:port][/path]` as the original (Python `urlparse`):
/// an explicit port `0` or no port falls back to the scheme's default.
pub fn parse_url(url: &str) -> Option<Url> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = if let Some(stripped) = authority.strip_prefix('[') {
        let (host, after) = stripped.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let scheme = scheme.to_ascii_lowercase();
    let default = if scheme == "https" { 443 } else { 80 };
    let port = match port {
        None | Some("") => default,
        Some(p) => match p.parse::<u32>() {
            Ok(0) => default,
            Ok(n) if n <= 65535 => n as u16,
            _ => return None,
        },
    };
    Some(Url {
        scheme,
        host: host.to_ascii_lowercase(),
        port,
        path: path.to_string(),
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_like_python_urlparse() {
        let u = parse_url("https://api.together.xyz/v1").expect("valid");
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("api.together.xyz", 443, "/v1")
        );
        assert_eq!(
            parse_url("http://10.0.0.1:8080").map(|u| u.port),
            Some(8080)
        );
        assert_eq!(
            parse_url("http://Gateway.Example:0/x").map(|u| (u.host, u.port)),
            Some(("gateway.example".into(), 80))
        );
        assert_eq!(
            parse_url("http://[::1]:9000/").map(|u| (u.host, u.port)),
            Some(("::1".into(), 9000))
        );
        assert_eq!(parse_url("grpc://h").map(|u| u.port), Some(80));
        for bad in ["no-scheme", "http://", "http://h:70000", "http://h:port"] {
            assert_eq!(parse_url(bad), None, "{bad}");
        }
    }
}
