//! Composition cost (issue 4 targets): one Leader+Worker replica ≤ 50 µs;
//! 100 deployments × 10 replicas on a 100-cluster fleet ≤ 200 ms.
//! Baselines: the fleet pass without the per-replica composition
//! (scheduling and ModelReplica objects only), and the whole bench built with
//! `--features bench-system-allocator` (glibc's allocator instead of the
//! binary's mimalloc).

use std::collections::{BTreeMap, BTreeSet};

/// The allocator the `modelplane` binary uses.
#[cfg(not(feature = "bench-system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use modelplane_api::types::{InferenceCluster, ModelDeployment, ModelReplica, Stack};
use modelplane_compose::{
    CacheLookup, DeploymentInputs, ReplicaInputs, compose_model_deployment, compose_model_replica,
};
use modelplane_scheduler::{Cluster, DeviceInterner, ExistingReplica};
use serde_json::json;

fn cluster(name: &str, stack: Stack) -> InferenceCluster {
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
        "metadata": { "name": name },
        "spec": { "stack": stack, "cluster": { "source": "Existing", "existing": { "secretRef": { "name": "kc" } } } },
        "status": {
            "conditions": [{ "type": "Ready", "status": "True" }],
            "gateway": { "address": format!("{name}.example") },
            "gpuPools": [{ "name": "h200", "nodes": 64, "devices": [{
                "name": "gpu", "claim": "DRA", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": 8,
                "capacity": { "memory": { "value": "143771Mi" } } }] }],
        },
    }))
    .expect("cluster")
}

fn gang(name: &str, replicas: i32) -> ModelDeployment {
    let member = |role: &str| {
        json!({
            "role": role,
            "nodeSelector": { "devices": [{ "name": "gpu", "count": 8, "selectors": [
                { "cel": "device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"120Gi\")) >= 0" },
                { "cel": "device.driver == \"gpu.nvidia.com\"" }] }] },
            "template": { "spec": { "containers": [{ "name": "engine", "image": "vllm/vllm-openai:v0.23.0",
                "command": ["/bin/sh", "-c"], "args": ["exec vllm serve /mnt/models --nnodes=2 --node-rank=$(MODELPLANE_RANK)"] }] } },
        })
    };
    let mut worker = member("Worker");
    worker["worker"] = json!({ "nodes": 1 });
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
        "metadata": { "name": name, "namespace": "ml" },
        "spec": { "replicas": replicas, "template": { "spec": {
            "modelCacheRef": { "name": "weights" },
            "engines": [{ "name": "main", "members": [member("Leader"), worker] }] } } },
    }))
    .expect("deployment")
}

fn first_replica(md: &ModelDeployment, clusters: &[Cluster]) -> ModelReplica {
    let c = compose_model_deployment(DeploymentInputs {
        deployment: md,
        cache: CacheLookup::NotReferenced,
        clusters: Some(clusters),
        replicas: &[],
        ready: &BTreeSet::new(),
        routed: &BTreeSet::new(),
    });
    serde_json::from_value(c.desired[0].object.clone()).expect("replica")
}

fn bench(c: &mut Criterion) {
    let observed = BTreeMap::new();
    let mut interner = DeviceInterner::default();
    for stack in [Stack::Standard, Stack::Dynamo] {
        let ic = cluster("one", stack);
        let views = vec![Cluster::from_resource(&ic, &mut interner)];
        let replica = first_replica(&gang("big", 1), &views);
        c.bench_function(&format!("compose_replica/leader_worker_{stack:?}"), |b| {
            b.iter(|| {
                compose_model_replica(ReplicaInputs {
                    replica: &replica,
                    cluster: Some(&ic),
                    observed: &observed,
                })
            })
        });
    }

    let clusters: Vec<InferenceCluster> = (0..100)
        .map(|i| {
            cluster(
                &format!("c{i:03}"),
                if i % 2 == 0 {
                    Stack::Standard
                } else {
                    Stack::Dynamo
                },
            )
        })
        .collect();
    let views: Vec<Cluster> = clusters
        .iter()
        .map(|c| Cluster::from_resource(c, &mut interner))
        .collect();
    let by_name: BTreeMap<&str, &InferenceCluster> = clusters
        .iter()
        .map(|c| (c.metadata.name.as_deref().unwrap_or_default(), c))
        .collect();
    let deployments: Vec<ModelDeployment> = (0..100)
        .map(|i| gang(&format!("model-{i:03}"), 10))
        .collect();
    let fleet_pass = |compose_replicas: bool| {
        let mut replicas: Vec<ExistingReplica> = Vec::new();
        let mut objects = 0usize;
        for md in &deployments {
            let composed = compose_model_deployment(DeploymentInputs {
                deployment: md,
                cache: CacheLookup::NotReferenced,
                clusters: Some(&views),
                replicas: &replicas,
                ready: &BTreeSet::new(),
                routed: &BTreeSet::new(),
            });
            for d in &composed.desired {
                let replica: ModelReplica =
                    serde_json::from_value(d.object.clone()).expect("replica");
                replicas.push(ExistingReplica::from_resource(&replica));
                if compose_replicas {
                    let cluster = by_name.get(replica.spec.cluster_name.as_str()).copied();
                    objects += compose_model_replica(ReplicaInputs {
                        replica: &replica,
                        cluster,
                        observed: &observed,
                    })
                    .desired
                    .len();
                }
                objects += 1;
            }
        }
        objects
    };
    assert_eq!(fleet_pass(false), 1000);
    let mut group = c.benchmark_group("render_100x10_on_100_clusters");
    group.sample_size(10);
    group.bench_function("full", |b| b.iter(|| fleet_pass(true)));
    group.bench_function("replicas_only", |b| b.iter(|| fleet_pass(false)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
