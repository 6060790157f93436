//! Builders for scheduler inputs.
#![allow(dead_code)]

use std::collections::BTreeMap;

use modelplane_api::types::{AttributeValue, CapacityValue, Claim, Device, Role, TaintEffect};
use modelplane_scheduler::model::{
    EngineSpec, MemberSpec, Pool, ReplicaEngine, ReplicaMember, RequestSpec, Taint,
};
use modelplane_scheduler::{
    Cluster, Deployment, DeviceInterner, ExistingReplica, Options, Schedule,
};

pub const GPU: &str = "gpu.nvidia.com";

/// A DRA GPU with `count` devices per node and `memory` each.
pub fn gpu(count: i32, memory: &str) -> Device {
    Device {
        name: "gpu".into(),
        claim: Some(Claim::Dra),
        driver: GPU.into(),
        device_class_name: Some(GPU.into()),
        count: Some(count),
        attributes: Some(BTreeMap::from([(
            "architecture".to_string(),
            AttributeValue {
                string: Some("Hopper".into()),
                ..AttributeValue::default()
            },
        )])),
        capacity: Some(BTreeMap::from([(
            "memory".to_string(),
            CapacityValue {
                value: memory.into(),
            },
        )])),
    }
}

/// A Synthetic NIC.
pub fn nic(count: i32) -> Device {
    Device {
        name: "nic".into(),
        claim: Some(Claim::Synthetic),
        driver: "nic.nvidia.com".into(),
        device_class_name: None,
        count: Some(count),
        attributes: None,
        capacity: None,
    }
}

pub struct ClusterBuilder {
    cluster: Cluster,
    pools: Vec<(String, i64, Vec<Device>)>,
}

/// A Ready cluster with a gateway and no pools.
pub fn cluster(name: &str) -> ClusterBuilder {
    ClusterBuilder {
        cluster: Cluster {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            ready: true,
            gateway_address: format!("{name}.gw:80"),
            pools: Vec::new(),
            pools_published: true,
        },
        pools: Vec::new(),
    }
}

impl ClusterBuilder {
    pub fn pool(mut self, name: &str, nodes: i64, devices: Vec<Device>) -> Self {
        self.pools.push((name.into(), nodes, devices));
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.cluster.labels.insert(k.into(), v.into());
        self
    }
    pub fn taint(mut self, key: &str, effect: TaintEffect) -> Self {
        self.cluster.taints.push(Taint {
            key: key.into(),
            value: String::new(),
            effect,
        });
        self
    }
    pub fn not_ready(mut self) -> Self {
        self.cluster.ready = false;
        self
    }
    pub fn no_gateway(mut self) -> Self {
        self.cluster.gateway_address.clear();
        self
    }
    pub fn build(mut self, interner: &mut DeviceInterner) -> Cluster {
        self.cluster.pools = self
            .pools
            .into_iter()
            .map(|(name, nodes, devices)| Pool {
                name,
                nodes,
                devices: interner.devices(&devices),
            })
            .collect();
        self.cluster
    }
}

pub fn clusters(builders: Vec<ClusterBuilder>) -> Vec<Cluster> {
    let mut interner = DeviceInterner::default();
    builders
        .into_iter()
        .map(|b| b.build(&mut interner))
        .collect()
}

pub fn request(name: &str, count: i64, selectors: &[&str]) -> RequestSpec {
    RequestSpec {
        name: name.into(),
        count,
        selectors: selectors.iter().map(|s| s.to_string()).collect(),
    }
}

/// `device.capacity[gpu].memory >= mem`.
pub fn mem_at_least(mem: &str) -> String {
    format!(r#"device.capacity["{GPU}"].memory.compareTo(quantity("{mem}")) >= 0"#)
}

pub fn member(role: Role, pods: u32, requests: Vec<RequestSpec>) -> MemberSpec {
    MemberSpec {
        role,
        pods,
        requests,
    }
}

/// A Standalone member asking for `count` GPUs with at least `mem` each.
pub fn standalone(count: i64, mem: &str) -> MemberSpec {
    member(
        Role::Standalone,
        1,
        vec![request("gpu", count, &[&mem_at_least(mem)])],
    )
}

pub fn engine(name: &str, copies: u32, members: Vec<MemberSpec>) -> EngineSpec {
    EngineSpec {
        name: name.into(),
        copies,
        members,
    }
}

pub fn deployment(name: &str, replicas: u32, engines: Vec<EngineSpec>) -> Deployment {
    Deployment {
        namespace: "ml".into(),
        name: name.into(),
        replicas,
        cluster_selector: BTreeMap::new(),
        tolerations: Vec::new(),
        engines,
    }
}

/// An existing replica of `deployment` in namespace `ml`, one Standalone
/// member per engine pinned to `pool`, claiming devices.
pub fn replica(
    deployment: &str,
    name: &str,
    cluster: &str,
    index: i64,
    engines: &[(&str, &str)],
) -> ExistingReplica {
    ExistingReplica {
        namespace: "ml".into(),
        name: name.into(),
        deployment: Some(deployment.into()),
        index,
        cluster: cluster.into(),
        engines: engines
            .iter()
            .map(|(engine, pool)| ReplicaEngine {
                name: engine.to_string(),
                copies: 1,
                members: vec![ReplicaMember {
                    role: Role::Standalone,
                    pods: 1,
                    pool: pool.to_string(),
                    claims: true,
                    requests: Vec::new(),
                }],
            })
            .collect(),
    }
}

pub fn run(d: &Deployment, c: &[Cluster], r: &[ExistingReplica]) -> Schedule {
    modelplane_scheduler::schedule(d, c, r, Options::default()).expect("a schedule")
}

/// `cluster/index@pool` per placement (first member of each engine).
pub fn places(s: &Schedule) -> Vec<String> {
    s.placements
        .iter()
        .map(|p| {
            let pools: Vec<&str> = p
                .engines
                .iter()
                .map(|e| e.members[0].pool.as_str())
                .collect();
            format!("{}/{}@{}", p.cluster, p.index, pools.join("+"))
        })
        .collect()
}
