//! Platform composition cost (issue 5 target): every platform object of a
//! 100-cluster fleet ≤ 50 ms median — each InferenceCluster in its steady
//! state (cloud cluster running, ServingStack observed), its ServingStack
//! (recipe releases, usages, cluster gateway), each cloud cluster's managed
//! resources, and the providers plan.
//! Baseline, run side by side: converting the 100 clusters to JSON values and
//! back, the least any composition over them must do.

#[cfg(not(feature = "bench-system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeSet;

use criterion::{Criterion, criterion_group, criterion_main};
use modelplane_api::labels;
use modelplane_api::types::{
    CloudClusterStatus, Condition, InferenceClass, InferenceCluster, ServingStack, StackSecret,
};
use modelplane_compose::clouds::{
    AksInputs, EksInputs, GkeInputs, NebiusInputs, VultrInputs, compose_aks_cluster,
    compose_eks_cluster, compose_gke_cluster, compose_nebius_cluster, compose_vultr_cluster,
};
use modelplane_compose::recipes;
use modelplane_compose::{
    ClusterInputs, ProvidersInputs, StackInputs, compose_inference_cluster, compose_providers,
    compose_serving_stack,
};
use serde_json::{Value, json};

const SOURCES: [&str; 6] = ["EKS", "GKE", "AKS", "Nebius", "Vultr", "Existing"];

fn class(source: &str) -> InferenceClass {
    let block = match source {
        "EKS" => {
            json!({ "eks": { "instanceType": "p5en.48xlarge", "accelerator": { "type": "nvidia-h200", "count": 8 } } })
        }
        "GKE" => {
            json!({ "gke": { "machineType": "a3-highgpu-8g", "accelerator": { "type": "nvidia-h100-80gb", "count": 8 } } })
        }
        "AKS" => {
            json!({ "aks": { "vmSize": "Standard_ND96isr_H100_v5", "accelerator": { "type": "nvidia-h100", "count": 8 } } })
        }
        "Nebius" => {
            json!({ "nebius": { "platform": "gpu-h100-sxm", "preset": "8gpu-128vcpu-1600gb", "accelerator": { "type": "nvidia-h100", "count": 8 } } })
        }
        _ => {
            json!({ "vultr": { "plan": "vcg-l40s-16c-180g-48vram", "accelerator": { "type": "nvidia-l40s", "count": 1 } } })
        }
    };
    let mut provisioning = block;
    provisioning["provider"] = json!(if source == "Existing" {
        "Vultr"
    } else {
        source
    });
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClass",
        "metadata": { "name": format!("class-{}", source.to_ascii_lowercase()) },
        "spec": {
            "provisioning": provisioning,
            "devices": [{ "name": "gpu", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": 8,
                          "capacity": { "memory": { "value": "81559Mi" } } }],
        },
    }))
    .expect("class")
}

fn cluster(i: usize) -> InferenceCluster {
    let source = SOURCES[i % SOURCES.len()];
    let settings = match source {
        "EKS" | "GKE" | "Vultr" => json!({ "region": "us-east-1" }),
        "AKS" => json!({ "location": "eastus" }),
        "Nebius" => json!({}),
        _ => json!({ "secretRef": { "name": format!("kc-{i}") } }),
    };
    let class = format!("class-{}", source.to_ascii_lowercase());
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
        "metadata": { "name": format!("cluster-{i:03}") },
        "spec": {
            "stack": if i.is_multiple_of(2) { "Standard" } else { "Dynamo" },
            "cluster": { "source": source, source.to_ascii_lowercase(): settings },
            "nodePools": [
                { "name": "a", "className": class, "nodeCount": 2 },
                { "name": "b", "className": class, "minNodeCount": 0, "maxNodeCount": 8 },
            ],
        },
    }))
    .expect("cluster")
}

fn ready() -> Option<Vec<Condition>> {
    Some(vec![Condition {
        type_: "Ready".into(),
        status: "True".into(),
        ..Condition::default()
    }])
}

fn typed<T: serde::de::DeserializeOwned>(xr: &Value) -> T {
    serde_json::from_value(xr.clone()).expect("xr")
}

/// A cloud cluster XR's managed resources, running; returns how many.
fn compose_cloud(xr: &Value) -> usize {
    let composition = match xr["kind"].as_str().unwrap_or_default() {
        "EKSCluster" => compose_eks_cluster(EksInputs {
            cluster: &typed(xr),
            control_plane_ready: true,
            file_system_id: Some("fs-1"),
        }),
        "GKECluster" => compose_gke_cluster(GkeInputs {
            cluster: &typed(xr),
            project: Some("p"),
            control_plane_ready: true,
        }),
        "AKSCluster" => compose_aks_cluster(AksInputs {
            cluster: &typed(xr),
            control_plane_ready: true,
        }),
        "NebiusCluster" => compose_nebius_cluster(NebiusInputs {
            cluster: &typed(xr),
            project: Some("p"),
            credentials: None,
            control_plane_ready: true,
        }),
        "VultrCluster" => compose_vultr_cluster(VultrInputs {
            cluster: &typed(xr),
            control_plane_ready: true,
        }),
        _ => return 0,
    };
    composition.desired.len()
}

/// Every platform object of the fleet; returns how many.
fn compose_platform(clusters: &[InferenceCluster], classes: &[InferenceClass]) -> usize {
    let mut objects = 0;
    for cluster in clusters {
        let name = cluster.metadata.name.as_deref().unwrap_or_default();
        let running = CloudClusterStatus {
            secrets: Some(vec![StackSecret {
                type_: "Kubeconfig".into(),
                name: format!("{name}-kubeconfig"),
                key: "kubeconfig".into(),
                namespace: None,
            }]),
            cache: None,
            conditions: ready(),
        };
        let inputs = |serving_stack| ClusterInputs {
            cluster,
            classes,
            hosted_replicas: 1,
            cloud_cluster: Some(&running),
            serving_stack,
        };
        // The ServingStack as the previous pass composed it, observed Ready.
        let first = compose_inference_cluster(inputs(None));
        if let Some(xr) = first.desired.iter().find(|d| d.kind().ends_with("Cluster")) {
            objects += compose_cloud(&xr.object);
        }
        let mut ss: ServingStack = first
            .desired
            .iter()
            .find(|d| d.kind() == "ServingStack")
            .map(|d| serde_json::from_value(d.object.clone()).expect("serving stack"))
            .expect("a serving stack");
        ss.status = Some(modelplane_api::types::ServingStackStatus {
            gateway: None,
            conditions: ready(),
        });
        objects += compose_inference_cluster(inputs(Some(&ss))).desired.len();
        let recipe_name = &ss.metadata.labels.as_ref().expect("labels")[labels::RECIPE];
        let recipe = recipes::all()
            .iter()
            .find(|r| &r.name == recipe_name)
            .expect("recipe");
        objects += compose_serving_stack(StackInputs {
            serving_stack: &ss,
            recipe,
            provider_configs_observed: true,
            gateway_address: Some("203.0.113.10"),
        })
        .desired
        .len();
    }
    objects
        + compose_providers(ProvidersInputs {
            clusters,
            leftovers: &BTreeSet::new(),
            traefik: false,
        })
        .desired
        .len()
}

fn bench(c: &mut Criterion) {
    let classes: Vec<InferenceClass> = SOURCES.iter().map(|s| class(s)).collect();
    let clusters: Vec<InferenceCluster> = (0..100).map(cluster).collect();
    let objects = compose_platform(&clusters, &classes);
    assert!(objects > 100 * 20, "{objects} objects");
    let mut group = c.benchmark_group("platform_100_clusters");
    group.sample_size(20);
    group.bench_function("compose", |b| {
        b.iter(|| compose_platform(&clusters, &classes))
    });
    group.bench_function("baseline_json_roundtrip", |b| {
        b.iter(|| {
            clusters
                .iter()
                .map(|c| {
                    let v: Value = serde_json::to_value(c).expect("json");
                    serde_json::from_value::<InferenceCluster>(v).expect("typed")
                })
                .count()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
