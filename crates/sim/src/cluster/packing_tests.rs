//! The simulated in-cluster schedulers place what the fleet scheduler
//! promised: over random fleets (one GPU pool; deployments of TP1 to TP8
//! engines, copies, two-pod gangs, placed one after another as the
//! controller would), every pod of every replica the fleet scheduler
//! places binds, whatever order its pods reach kube-scheduler or KAI in.

use std::collections::BTreeMap;

use modelplane_api::types::{Claim, Device, Role};
use modelplane_scheduler::model::{EngineSpec, MemberSpec, Pool, RequestSpec};
use modelplane_scheduler::{Cluster, Deployment, DeviceInterner, ExistingReplica, Options};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::dra::{Hardware, driver_step};
use super::scheduler::{Assumed, default_scheduler, kai_scheduler};
use super::world::{ClusterKind, World, Write};
use crate::cluster::world::Snapshot;
use crate::informer::Change;

/// (replicas, copies, gang, GPUs per pod).
type DeploymentShape = (u32, u32, bool, i64);

#[derive(Clone, Debug)]
struct Fleet {
    nodes: i64,
    gpus: i64,
    deployments: Vec<DeploymentShape>,
}

fn fleet() -> impl Strategy<Value = Fleet> {
    (
        1i64..6,
        prop::sample::select(vec![1i64, 2, 4, 8]),
        prop::collection::vec((1u32..4, 1u32..3, any::<bool>(), 1i64..9), 1..7),
    )
        .prop_map(|(nodes, gpus, deployments)| Fleet {
            nodes,
            gpus,
            deployments,
        })
}

fn gpu_device(count: i64) -> Device {
    Device {
        name: "gpu".into(),
        claim: Some(Claim::Dra),
        driver: "gpu.nvidia.com".into(),
        device_class_name: Some("gpu.nvidia.com".into()),
        count: Some(i32::try_from(count).unwrap_or(0)),
        attributes: None,
        capacity: None,
    }
}

fn deployment(i: usize, (replicas, copies, gang, gpus): DeploymentShape) -> Deployment {
    let request = RequestSpec {
        name: "gpu".into(),
        count: gpus,
        selectors: vec!["device.driver == 'gpu.nvidia.com'".into()],
    };
    let member = |role| MemberSpec {
        role,
        pods: 1,
        requests: vec![request.clone()],
    };
    Deployment {
        namespace: "ml".into(),
        name: format!("d{i}"),
        replicas,
        cluster_selector: BTreeMap::new(),
        tolerations: Vec::new(),
        engines: vec![EngineSpec {
            name: "main".into(),
            copies,
            members: if gang {
                vec![member(Role::Leader), member(Role::Worker)]
            } else {
                vec![member(Role::Standalone)]
            },
        }],
    }
}

/// The GPUs of every pod the fleet scheduler places, deployment after
/// deployment, each seeing the replicas placed before it.
fn promised(fleet: &Fleet) -> Vec<i64> {
    let mut interner = DeviceInterner::default();
    let clusters = vec![Cluster {
        name: "edge".into(),
        labels: BTreeMap::new(),
        taints: Vec::new(),
        ready: true,
        gateway_address: "edge.gw:80".into(),
        pools: vec![Pool {
            name: "gpu".into(),
            nodes: fleet.nodes,
            devices: interner.devices(&[gpu_device(fleet.gpus)]),
        }],
        pools_published: true,
    }];
    let mut existing: Vec<ExistingReplica> = Vec::new();
    let mut pods = Vec::new();
    for (i, shape) in fleet.deployments.iter().enumerate() {
        let d = deployment(i, *shape);
        let Ok(placed) =
            modelplane_scheduler::schedule(&d, &clusters, &existing, Options::default())
        else {
            continue;
        };
        for placement in placed.placements.iter().filter(|p| !p.retained) {
            for (engine, spec) in placement.engines.iter().zip(&d.engines) {
                for member in &engine.members {
                    for request in &member.device_requests {
                        for _ in 0..spec.copies {
                            pods.push(request.count);
                        }
                    }
                }
            }
            existing.push(ExistingReplica::from_placement(&d, placement));
        }
    }
    pods
}

/// A cluster of `fleet.nodes` GPU nodes with their ResourceSlices, and a
/// pod (with its claim) per promised pod, created in the order `seed`
/// shuffles them into.
fn cluster_with(fleet: &Fleet, pods: &[i64], seed: u64, scheduler: &str) -> Snapshot {
    let mut s = Snapshot::default();
    for n in 0..fleet.nodes {
        s.change(Change::Apply(
            ClusterKind::Node,
            json!({ "metadata": { "name": format!("node-{n}"), "labels": { "modelplane.ai/pool": "gpu" } },
                "status": { "conditions": [{ "type": "Ready", "status": "True" }] } }),
        ));
    }
    s.change(Change::Apply(
        ClusterKind::Queue,
        json!({ "metadata": { "name": "modelplane" } }),
    ));
    let hardware = BTreeMap::from([(
        "gpu".to_string(),
        Hardware {
            devices: vec![
                json!({ "name": "gpu", "driver": "gpu.nvidia.com", "count": fleet.gpus }),
            ],
            fabric: None,
        },
    )]);
    let published = driver_step(
        &World {
            snapshot: &s,
            timestamp: "t",
        },
        super::dra::NVIDIA,
        &hardware,
    );
    for w in published {
        if let Write::Apply { kind, object, .. } = w {
            s.change(Change::Apply(kind, object));
        }
    }
    // A deterministic shuffle: the order pods reach the scheduler.
    let mut order: Vec<usize> = (0..pods.len()).collect();
    let mut state = seed | 1;
    for i in (1..order.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    for (at, &i) in order.iter().enumerate() {
        let name = format!("p{i}");
        s.change(Change::Apply(
            ClusterKind::Pod,
            json!({ "metadata": { "name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                    "labels": { "kai.scheduler/queue": "modelplane" },
                    "creationTimestamp": format!("2026-01-01T00:{:02}:{:02}Z", at / 60, at % 60) },
                "spec": { "schedulerName": scheduler, "nodeSelector": { "modelplane.ai/pool": "gpu" },
                    "resourceClaims": [{ "name": "devices", "resourceClaimName": format!("{name}-devices") }] } }),
        ));
        s.change(Change::Apply(
            ClusterKind::Claim,
            json!({ "metadata": { "name": format!("{name}-devices"), "namespace": "ml" },
                "spec": { "devices": { "requests": [{ "name": "gpu",
                    "exactly": { "deviceClassName": "gpu.nvidia.com", "count": pods[i] } }] } } }),
        ));
    }
    s
}

fn bound(pass: &super::scheduler::Pass) -> usize {
    pass.assumed.pods.len()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn every_pod_the_fleet_scheduler_places_binds_in_its_cluster(
        fleet in fleet(),
        seed in any::<u64>(),
        kai in any::<bool>(),
    ) {
        let pods = promised(&fleet);
        let scheduler = if kai { "kai-scheduler" } else { "default-scheduler" };
        let snapshot = cluster_with(&fleet, &pods, seed, scheduler);
        let world = World { snapshot: &snapshot, timestamp: "t" };
        let pass = if kai {
            kai_scheduler(&world, &Assumed::default())
        } else {
            default_scheduler(&world, &Assumed::default())
        };
        let unbound: Vec<Value> = pass
            .writes
            .iter()
            .filter_map(|w| match w {
                Write::Event { reason, message, .. } if reason != "Scheduled" => Some(json!(message)),
                _ => None,
            })
            .collect();
        prop_assert_eq!(
            bound(&pass),
            pods.len(),
            "pods of {:?} GPUs on {} nodes of {}: {:?}",
            pods,
            fleet.nodes,
            fleet.gpus,
            unbound
        );
    }
}
