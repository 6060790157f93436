//! One full `schedule()` over a large fleet (issue 3's target: ≤ 20 ms median).
//!
//! Fleet: 1,000 clusters × 8 GPU pools, two device kinds per pool (a DRA GPU
//! and a Synthetic NIC); pool k of every cluster uses class k, as a fleet
//! built from a handful of InferenceClasses does. 10,000 existing replicas of
//! 1,000 other deployments occupy nodes. The deployment placed is a
//! 10-replica Leader+Worker gang with two CEL selectors per member.
//! Baseline side by side: the same pass without explanations, and a
//! 10-replica Standalone deployment.

use std::collections::BTreeMap;

use criterion::{Criterion, criterion_group, criterion_main};
use modelplane_api::types::{AttributeValue, CapacityValue, Claim, Device, Role};
use modelplane_scheduler::model::{
    EngineSpec, MemberSpec, Pool, ReplicaEngine, ReplicaMember, RequestSpec,
};
use modelplane_scheduler::{
    Cluster, Deployment, DeviceInterner, ExistingReplica, Options, schedule,
};

fn device(
    name: &str,
    claim: Claim,
    driver: &str,
    count: i32,
    memory_gi: u32,
    arch: &str,
) -> Device {
    Device {
        name: name.into(),
        claim: Some(claim),
        driver: driver.into(),
        device_class_name: (claim == Claim::Dra).then(|| driver.to_string()),
        count: Some(count),
        attributes: Some(BTreeMap::from([
            (
                "architecture".to_string(),
                AttributeValue {
                    string: Some(arch.into()),
                    ..Default::default()
                },
            ),
            (
                "cudaComputeCapability".to_string(),
                AttributeValue {
                    version: Some("9.0.0".into()),
                    ..Default::default()
                },
            ),
        ])),
        capacity: Some(BTreeMap::from([(
            "memory".to_string(),
            CapacityValue {
                value: format!("{memory_gi}Gi"),
            },
        )])),
    }
}

fn fleet() -> Vec<Cluster> {
    let mut interner = DeviceInterner::default();
    (0..1000)
        .map(|c| Cluster {
            name: format!("cluster-{c:04}"),
            labels: BTreeMap::from([("region".to_string(), format!("r{}", c % 10))]),
            taints: Vec::new(),
            ready: true,
            gateway_address: format!("gw-{c}:80"),
            pools_published: true,
            pools: (0..8)
                .map(|k| Pool {
                    name: format!("pool-{k}"),
                    nodes: 4,
                    devices: interner.devices(&[
                        device(
                            "gpu",
                            Claim::Dra,
                            "gpu.nvidia.com",
                            8,
                            40 + 20 * k,
                            if k < 4 { "Ampere" } else { "Hopper" },
                        ),
                        device("nic", Claim::Synthetic, "nic.nvidia.com", 8, 0, "ib"),
                    ]),
                })
                .collect(),
        })
        .collect()
}

fn others() -> Vec<ExistingReplica> {
    (0..10_000)
        .map(|i| ExistingReplica {
            namespace: "other".into(),
            name: format!("d{:04}-{:02}", i / 10, i % 10),
            deployment: Some(format!("d{:04}", i / 10)),
            index: 0,
            cluster: format!("cluster-{:04}", (i * 7) % 1000),
            engines: vec![ReplicaEngine {
                name: "main".into(),
                copies: 1,
                members: vec![ReplicaMember {
                    role: Role::Standalone,
                    pods: 1,
                    pool: format!("pool-{}", i % 8),
                    claims: true,
                    requests: Vec::new(),
                }],
            }],
        })
        .collect()
}

fn gang() -> Deployment {
    let selectors = vec![
        r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("100Gi")) >= 0"#.to_string(),
        r#"device.attributes["gpu.nvidia.com"].architecture == "Hopper""#.to_string(),
    ];
    let member = |role, pods| MemberSpec {
        role,
        pods,
        requests: vec![RequestSpec {
            name: "gpu".into(),
            count: 8,
            selectors: selectors.clone(),
        }],
    };
    Deployment {
        namespace: "ml".into(),
        name: "big".into(),
        replicas: 10,
        cluster_selector: BTreeMap::new(),
        tolerations: Vec::new(),
        engines: vec![EngineSpec {
            name: "main".into(),
            copies: 1,
            members: vec![member(Role::Leader, 1), member(Role::Worker, 1)],
        }],
    }
}

fn standalone() -> Deployment {
    let mut d = gang();
    d.engines[0].members.truncate(1);
    d.engines[0].members[0].role = Role::Standalone;
    d
}

fn bench(c: &mut Criterion) {
    let clusters = fleet();
    let replicas = others();
    let gang = gang();
    let placed = schedule(&gang, &clusters, &replicas, Options::default()).expect("schedule");
    assert_eq!(placed.placements.len(), 10);
    let mut group = c.benchmark_group("schedule_1000_clusters");
    group.sample_size(30);
    group.bench_function("gang_10_replicas_explained", |b| {
        b.iter(|| schedule(&gang, &clusters, &replicas, Options::default()))
    });
    group.bench_function("gang_10_replicas_no_explanations", |b| {
        b.iter(|| {
            schedule(
                &gang,
                &clusters,
                &replicas,
                Options {
                    fill: true,
                    explain: modelplane_scheduler::Explain::Never,
                },
            )
        })
    });
    let single = standalone();
    group.bench_function("standalone_10_replicas_no_explanations", |b| {
        b.iter(|| {
            schedule(
                &single,
                &clusters,
                &replicas,
                Options {
                    fill: true,
                    explain: modelplane_scheduler::Explain::Never,
                },
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
