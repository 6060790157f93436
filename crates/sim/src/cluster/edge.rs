//! The edge data plane's routing: the cluster's HTTPRoutes, as Envoy
//! Gateway with the Inference Extension serves them — a `PathPrefix` rule
//! rewritten to `/` whose backend is an InferencePool reaches the Ready pods
//! the pool selects, on its target port. Compiled into the routing objects
//! of a modelplane-gateway (a ModelService per route prefix, a ModelEndpoint
//! per ready pod), so the cluster gateway is the fleet gateway's own code.
//! Pure.

use modelplane_api::types::{ModelEndpoint, ModelService};
use modelplane_gateway::config::Objects;
use serde_json::{Value, json};

use super::world::{ClusterKind, World, deleting, name, namespace, pod_ready};

/// The label tying an edge endpoint to its route's service.
const ROUTE_LABEL: &str = "sim.modelplane.ai/route";

fn selects(selector: &Value, pod: &Value) -> bool {
    selector["matchLabels"]
        .as_object()
        .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| pod["metadata"]["labels"][k] == *v))
}

/// The routing objects of every HTTPRoute rule with an InferencePool backend.
pub fn objects(world: &World<'_>) -> Objects {
    let mut out = Objects::default();
    for route in world.all(ClusterKind::HttpRoute) {
        let ns = namespace(route);
        for rule in route["spec"]["rules"].as_array().into_iter().flatten() {
            let Some(prefix) = rule["matches"][0]["path"]["value"].as_str() else {
                continue;
            };
            let mut parts = prefix.trim_matches('/').splitn(2, '/');
            let (Some(svc_ns), Some(svc_name)) = (parts.next(), parts.next()) else {
                continue;
            };
            let rewrite = rule["filters"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|f| f["urlRewrite"]["path"]["replacePrefixMatch"].as_str());
            let route_id = format!("{ns}.{}", name(route));
            let service = json!({
                "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelService",
                "metadata": { "name": svc_name, "namespace": svc_ns },
                "spec": { "endpoints": [{ "selector": { "matchLabels": { ROUTE_LABEL: route_id } } }] },
            });
            if let Ok(s) = serde_json::from_value::<ModelService>(service) {
                out.services.push(s);
            }
            for backend in rule["backendRefs"].as_array().into_iter().flatten() {
                if backend["kind"] != "InferencePool" {
                    continue;
                }
                let Some(pool) = world.get(
                    ClusterKind::InferencePool,
                    ns,
                    backend["name"].as_str().unwrap_or_default(),
                ) else {
                    continue;
                };
                let port = pool["spec"]["targetPorts"][0]["number"]
                    .as_u64()
                    .unwrap_or(8000);
                for pod in world.all(ClusterKind::Pod).filter(|p| {
                    namespace(p) == ns
                        && pod_ready(p)
                        && !deleting(p)
                        && selects(&pool["spec"]["selector"], p)
                }) {
                    let Some(ip) = pod["status"]["podIP"].as_str() else {
                        continue;
                    };
                    let mut spec = json!({ "url": format!("http://{ip}:{port}") });
                    if let Some(rewrite) = rewrite {
                        spec["rewritePath"] = json!(rewrite);
                    }
                    let endpoint = json!({
                        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
                        "metadata": { "name": name(pod), "namespace": svc_ns, "labels": { ROUTE_LABEL: route_id } },
                        "spec": spec,
                    });
                    if let Ok(e) = serde_json::from_value::<ModelEndpoint>(endpoint) {
                        out.endpoints.push(e);
                    }
                }
            }
        }
    }
    out
}

/// What of `objects` routing depends on, to publish only on a change.
pub fn fingerprint(objects: &Objects) -> String {
    let services: Vec<String> = objects
        .services
        .iter()
        .map(|s| format!("{:?}/{:?}", s.metadata.namespace, s.metadata.name))
        .collect();
    let endpoints: Vec<String> = objects
        .endpoints
        .iter()
        .map(|e| {
            format!(
                "{:?}/{:?}={}",
                e.metadata.namespace, e.metadata.name, e.spec.url
            )
        })
        .collect();
    format!("{services:?}{endpoints:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::world::Snapshot;
    use crate::informer::Change;

    #[test]
    fn a_route_to_an_inference_pool_reaches_its_ready_pods() {
        let mut s = Snapshot::default();
        s.change(Change::Apply(ClusterKind::HttpRoute, json!({ "metadata": { "name": "r", "namespace": "ml" }, "spec": { "rules": [{
            "matches": [{ "path": { "type": "PathPrefix", "value": "/ml/r/" } }],
            "filters": [{ "type": "URLRewrite", "urlRewrite": { "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/" } } }],
            "backendRefs": [{ "group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "pool" }] }] } })));
        s.change(Change::Apply(ClusterKind::InferencePool, json!({ "metadata": { "name": "pool", "namespace": "ml" },
            "spec": { "selector": { "matchLabels": { "serving": "r" } }, "targetPorts": [{ "number": 8000 }] } })));
        for (pod, ready) in [("a", true), ("b", false)] {
            s.change(Change::Apply(ClusterKind::Pod, json!({ "metadata": { "name": pod, "namespace": "ml", "labels": { "serving": "r" } },
                "status": { "podIP": "127.1.0.9", "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }] } })));
        }
        let objects = objects(&World {
            snapshot: &s,
            timestamp: "t",
        });
        assert_eq!(objects.services.len(), 1);
        assert_eq!(objects.endpoints.len(), 1, "only the ready pod");
        assert_eq!(objects.endpoints[0].spec.url, "http://127.1.0.9:8000");
        assert_eq!(objects.endpoints[0].spec.rewrite_path.as_deref(), Some("/"));
    }
}
