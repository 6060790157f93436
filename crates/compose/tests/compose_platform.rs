//! ModelService, ModelEndpoint, ModelCache and InferenceGateway compositions
//! for every such upstream manifest (golden), and the weight split's
//! properties. Regenerate with
//! `INSTA_UPDATE=always cargo test -p modelplane-compose --test compose_platform`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use modelplane_api::types::{
    CacheClusterStatus, InferenceCluster, InferenceGateway, ModelCache, ModelCacheStatus,
    ModelEndpoint, ModelService,
};
use modelplane_compose::service::split_weights;
use modelplane_compose::{
    CacheInputs, Composition, EndpointInputs, GatewayInputs, ServiceInputs, Staging, Token,
    compose_inference_gateway, compose_model_cache, compose_model_endpoint, compose_model_service,
};
use proptest::prelude::*;
use serde_json::{Value, json};

fn objects_of_kind(kind: &str) -> Vec<(String, Value)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("readable").flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&upstream(), &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if !text.contains(&format!("kind: {kind}")) {
            continue;
        }
        for object in admit(&text).into_iter().filter(|o| o["kind"] == kind) {
            let rel = file
                .strip_prefix(upstream())
                .expect("under upstream")
                .display()
                .to_string();
            out.push((rel, object));
        }
    }
    out
}

fn render(c: &Composition) -> String {
    assert_kinds_listed(&c.desired);
    let summary = json!({
        "hold": c.hold,
        "status": c.status,
        "conditions": c.conditions,
        "events": c.events,
    });
    let mut text = serde_saphyr::to_string(&summary).expect("YAML");
    text.push_str(&to_yaml(&c.desired));
    text
}

fn snapshot(kind: &str, source: &str, text: &str) {
    let case = source.trim_end_matches(".yaml").replace('/', "-");
    insta::with_settings!({
        snapshot_path => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(kind).join(case),
        prepend_module_to_snapshot => false,
        omit_expression => true,
        description => source.to_string(),
    }, {
        insta::assert_snapshot!("output", text);
    });
}

fn endpoint(
    name: &str,
    labels: &BTreeMap<String, String>,
    url: &str,
    rewrite: Option<&str>,
    backend: bool,
) -> ModelEndpoint {
    let mut e = json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelEndpoint",
        "metadata": { "name": name, "namespace": "ml-team", "labels": labels },
        "spec": { "url": url },
    });
    if let Some(r) = rewrite {
        e["spec"]["rewritePath"] = json!(r);
    }
    if backend {
        e["status"] = json!({ "routing": { "backendName": format!("{name}-backend") } });
    }
    serde_json::from_value(e).expect("endpoint")
}

#[test]
fn every_upstream_model_service_routes_its_endpoints() {
    let services = objects_of_kind("ModelService");
    assert!(services.len() >= 10);
    for (source, object) in services {
        let service: ModelService = serde_json::from_value(object).expect("typed");
        // Two ready replicas per entry and one still waiting for its backend.
        let mut endpoints = Vec::new();
        for (i, entry) in service.spec.endpoints.iter().enumerate() {
            let labels = entry.selector.match_labels.clone().unwrap_or_default();
            for r in 0..2 {
                let name = format!("ep{i}-{r}");
                endpoints.push(endpoint(
                    &name,
                    &labels,
                    &format!("http://gw-{i}.example/ml-team/{name}/v1"),
                    Some(&format!("/ml-team/{name}/")),
                    true,
                ));
            }
            endpoints.push(endpoint(
                &format!("ep{i}-pending"),
                &labels,
                "https://api.example.com/v1",
                None,
                false,
            ));
        }
        let c = compose_model_service(ServiceInputs {
            service: &service,
            endpoints: &endpoints.iter().collect::<Vec<_>>(),
            gateway_address: Some("203.0.113.10"),
            route_accepted: true,
        });
        snapshot("model-service", &source, &render(&c));
    }
}

#[test]
fn every_upstream_model_endpoint_gets_a_backend() {
    for (source, object) in objects_of_kind("ModelEndpoint") {
        let e: ModelEndpoint = serde_json::from_value(object).expect("typed");
        let c = compose_model_endpoint(EndpointInputs {
            endpoint: &e,
            backend_observed: true,
        });
        assert_eq!(c.conditions[0].reason, "BackendConfigured");
        snapshot("model-endpoint", &source, &render(&c));
    }
}

fn storage_cluster(name: &str, labels: Value) -> InferenceCluster {
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
        "metadata": { "name": name, "labels": labels },
        "spec": { "cluster": { "source": "Existing", "existing": { "secretRef": { "name": "kc" } } } },
        "status": { "providerConfigRef": { "name": format!("{name}-kc") }, "cache": { "storageClassName": "modelplane-rwx" } },
    }))
    .expect("cluster")
}

#[test]
fn every_upstream_model_cache_stages_on_its_clusters() {
    let caches = objects_of_kind("ModelCache");
    assert!(caches.len() >= 4);
    for (source, object) in caches {
        let cache: ModelCache = serde_json::from_value(object).expect("typed");
        let labels = cache
            .spec
            .cluster_selector
            .clone()
            .and_then(|s| s.match_labels)
            .unwrap_or_default();
        // One cluster staged, one hydrating, one without storage (skipped).
        let clusters = vec![
            storage_cluster("staged", json!(labels)),
            storage_cluster("hydrating", json!(labels)),
            serde_json::from_value(json!({
                "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
                "metadata": { "name": "vultr", "labels": labels },
                "spec": { "cluster": { "source": "Vultr", "vultr": { "region": "ewr" } } },
            }))
            .expect("cluster"),
        ];
        let observed = BTreeMap::from([
            (
                "staged".to_string(),
                Staging {
                    pvc_observed: true,
                    pvc_bound: true,
                    job_complete: true,
                    ..Staging::default()
                },
            ),
            (
                "hydrating".to_string(),
                Staging {
                    pvc_observed: true,
                    pvc_bound: true,
                    job_complete: false,
                    ..Staging::default()
                },
            ),
        ]);
        let token = if cache
            .spec
            .hugging_face
            .as_ref()
            .is_some_and(|h| h.auth_secret.is_some())
        {
            Token::Found("aGZfdG9rZW4=")
        } else {
            Token::NotNeeded
        };
        let c = compose_model_cache(CacheInputs {
            cache: &cache,
            clusters: Some(&clusters),
            token,
            observed: &observed,
            previous: &[],
            was_ready: false,
        });
        assert_eq!(
            c.status.as_ref().map(|s| s["summary"]["ready"].clone()),
            Some(json!("1/2")),
            "{source}"
        );
        snapshot("model-cache", &source, &render(&c));
    }
}

#[test]
fn a_missing_token_is_reported_and_no_job_runs_without_it() {
    let (_, object) = objects_of_kind("ModelCache")
        .into_iter()
        .find(|(_, o)| !o["spec"]["huggingFace"]["authSecret"].is_null())
        .expect("a gated cache");
    let cache: ModelCache = serde_json::from_value(object).expect("typed");
    let labels = cache
        .spec
        .cluster_selector
        .clone()
        .and_then(|s| s.match_labels)
        .unwrap_or_default();
    let clusters = vec![storage_cluster("a", json!(labels))];
    let c = compose_model_cache(CacheInputs {
        cache: &cache,
        clusters: Some(&clusters),
        token: Token::Missing,
        observed: &BTreeMap::new(),
        previous: &[],
        was_ready: false,
    });
    assert_eq!(c.conditions[1].reason, "AuthSecretMissing");
    assert!(
        c.desired
            .iter()
            .all(|d| matches!(d.kind(), "PersistentVolumeClaim" | "Namespace"))
    );
    let c = compose_model_cache(CacheInputs {
        cache: &cache,
        clusters: Some(&clusters),
        token: Token::Unresolved,
        observed: &BTreeMap::new(),
        previous: &[],
        was_ready: false,
    });
    assert!(c.hold);
}

#[test]
fn every_upstream_inference_gateway_composes_its_backend() {
    let gateways = objects_of_kind("InferenceGateway");
    assert!(!gateways.is_empty());
    for (source, object) in gateways {
        let g: InferenceGateway = serde_json::from_value(object).expect("typed");
        let c = compose_inference_gateway(GatewayInputs {
            gateway: &g,
            builtin_address: None,
            traefik_ready: true,
            metallb_ready: true,
            gateway_address: Some("172.18.255.200"),
        });
        snapshot("inference-gateway", &source, &render(&c));
    }
    let default: InferenceGateway = serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceGateway", "metadata": { "name": "default" }, "spec": {},
    }))
    .expect("typed");
    let c = compose_inference_gateway(GatewayInputs {
        gateway: &default,
        builtin_address: Some("127.0.0.1:8080"),
        traefik_ready: false,
        metallb_ready: false,
        gateway_address: None,
    });
    assert!(c.desired.is_empty());
    assert_eq!(c.status, Some(json!({ "address": "127.0.0.1:8080" })));
    assert_eq!(c.conditions[0].reason, "ControllerHealthy");
}

proptest! {
    #[test]
    fn weight_shares_match_the_requested_ones_within_rounding(groups in prop::collection::vec((1u64..=1_000_000, 1usize..10), 1..5)) {
        let split = split_weights(&groups);
        let total: u64 = split.iter().flatten().sum();
        let requested: u64 = groups.iter().map(|(w, _)| w).sum();
        let endpoints: usize = groups.iter().map(|(_, n)| n).sum();
        for ((w, n), ws) in groups.iter().zip(&split) {
            prop_assert_eq!(ws.len(), *n);
            prop_assert!(ws.iter().all(|x| (1..=1_000_000).contains(x)));
            prop_assert!(ws.iter().max().unwrap_or(&0) - ws.iter().min().unwrap_or(&0) <= 1 || total > 1_000_000);
            let share = ws.iter().sum::<u64>() as f64 / total as f64;
            let want = *w as f64 / requested as f64;
            // Each endpoint weight may round by one unit (and is at least 1).
            let tolerance = (endpoints as f64 + 1.0) / total as f64;
            prop_assert!((share - want).abs() <= tolerance, "share {share} want {want} tolerance {tolerance} {groups:?} {split:?}");
        }
    }
}

#[test]
fn a_failed_download_says_why_and_keeps_saying_it_once_its_pod_is_gone() {
    let (_, object) = objects_of_kind("ModelCache")
        .into_iter()
        .find(|(_, o)| !o["spec"]["huggingFace"]["authSecret"].is_null())
        .expect("a gated cache");
    let cache: ModelCache = serde_json::from_value(object).expect("typed");
    let labels = cache
        .spec
        .cluster_selector
        .clone()
        .and_then(|s| s.match_labels)
        .unwrap_or_default();
    let clusters = vec![storage_cluster("a", json!(labels))];
    let log = "Traceback (most recent call last):\nhuggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/models/r\nInvalid credentials in Authorization header\n";
    let staging = |job_failed, failure: Option<&str>| {
        BTreeMap::from([(
            "a".to_string(),
            Staging {
                pvc_observed: true,
                pvc_bound: true,
                job_failed,
                failure: failure.map(str::to_string),
                ..Staging::default()
            },
        )])
    };
    let compose = |observed: &BTreeMap<String, Staging>, previous: &[CacheClusterStatus]| {
        compose_model_cache(CacheInputs {
            cache: &cache,
            clusters: Some(&clusters),
            token: Token::Found("bm90LWEtdG9rZW4="),
            observed,
            previous,
            was_ready: false,
        })
    };
    let said = "a: huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/models/r Invalid credentials in Authorization header";
    // While the Job retries: Hydrating, with what the last try said.
    let retrying = compose(&staging(false, Some(log)), &[]);
    assert_eq!(retrying.conditions[1].reason, "Hydrating");
    assert_eq!(
        retrying.conditions[1].message,
        format!("retrying on {said}")
    );
    // The Job failed and deleted its pod: the status still says why.
    let failed = compose(&staging(true, Some(log)), &[]);
    let previous: ModelCacheStatus =
        serde_json::from_value(failed.status.clone().expect("a status")).expect("typed");
    let gone = compose(
        &staging(true, None),
        previous.clusters.as_deref().unwrap_or_default(),
    );
    for c in [&failed, &gone] {
        assert_eq!(c.conditions[1].reason, "Failed");
        assert!(
            c.conditions[1]
                .message
                .ends_with(&format!("failed on {said}")),
            "{}",
            c.conditions[1].message
        );
        assert!(c.events.iter().any(|e| e.reason == "HydrationFailed"));
    }
    assert!(
        !serde_json::to_string(&gone.status)
            .unwrap_or_default()
            .contains("not-a-token")
    );
}
