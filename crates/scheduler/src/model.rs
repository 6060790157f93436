//! The scheduler's inputs: small domain structs built once from API objects
//! (`from_resource`), keeping only what placement reads.
//!
//! Pool devices are interned: pools built from the same InferenceClass share
//! one `Arc` per device, so a selector is evaluated once per distinct device
//! in the whole fleet, however many clusters publish it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use modelplane_api::labels;
use modelplane_api::types::{
    Claim, Device, InferenceCluster, ModelDeployment, ModelReplica, Role, TaintEffect,
    TolerationOperator,
};
use modelplane_cel::dra::DeviceActivation;

/// The deployment being placed.
#[derive(Clone, Debug, PartialEq)]
pub struct Deployment {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Desired replicas.
    pub replicas: u32,
    /// Labels a cluster must carry (deployment and cache selectors merged).
    pub cluster_selector: BTreeMap<String, String>,
    /// Tolerated cluster taints.
    pub tolerations: Vec<Toleration>,
    /// Engines, in order.
    pub engines: Vec<EngineSpec>,
}

/// An engine of the deployment.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineSpec {
    /// Name.
    pub name: String,
    /// Copies inside one replica.
    pub copies: u32,
    /// Members, in order.
    pub members: Vec<MemberSpec>,
}

/// A member of an engine.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberSpec {
    /// Role.
    pub role: Role,
    /// Pods of this member: `worker.nodes` for a Worker with a worker block, else 1.
    pub pods: u32,
    /// Device requests (empty without a nodeSelector).
    pub requests: Vec<RequestSpec>,
}

/// A device request: a count and CEL selectors.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSpec {
    /// Request name.
    pub name: String,
    /// Devices per node.
    pub count: i64,
    /// Non-empty CEL selector texts.
    pub selectors: Vec<String>,
}

/// A toleration of a cluster taint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toleration {
    /// Key; empty matches every key with `Exists`.
    pub key: String,
    /// `Exists` or `Equal`.
    pub operator: TolerationOperator,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

/// A cluster taint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// Effect.
    pub effect: TaintEffect,
}

/// A candidate cluster as the scheduler sees it.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// Name.
    pub name: String,
    /// Labels (matched by the cluster selector).
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// `Ready=True`.
    pub ready: bool,
    /// `status.gateway.address`, possibly empty.
    pub gateway_address: String,
    /// GPU pools, in published order.
    pub pools: Vec<Pool>,
    /// The cluster published `status.gpuPools` (possibly empty). False when
    /// its status is missing or unreadable: its pools are unknown, not gone.
    pub pools_published: bool,
}

/// A GPU pool.
#[derive(Clone, Debug)]
pub struct Pool {
    /// Name.
    pub name: String,
    /// Nodes the pool offers (null or negative read as 0).
    pub nodes: i64,
    /// Devices per node, in published order (interned).
    pub devices: Arc<[Arc<PoolDevice>]>,
}

/// One kind of device of a pool.
#[derive(Debug)]
pub struct PoolDevice {
    /// Name.
    pub name: String,
    /// DRA or Synthetic.
    pub claim: Claim,
    /// DeviceClass (empty when unset).
    pub device_class_name: String,
    /// Devices per node (a published 0 stays 0; negative is 0).
    pub count: i64,
    /// The `device` variable for selectors.
    pub activation: DeviceActivation,
    /// The device as published, for explanations.
    pub source: Device,
}

/// The fleet's existing ModelReplicas as a pass reads them: a deployment's
/// own (to retain), and every one (charged on the pools, only when a pass
/// places or explains). A controller keeps them indexed by deployment, so
/// a pass that places nothing reads only its own.
pub trait Existing: std::fmt::Debug {
    /// The replicas of `deployment` in `namespace`, in any order.
    fn of_deployment(&self, namespace: &str, deployment: &str) -> Vec<&ExistingReplica>;
    /// Every replica of the fleet, in any order.
    fn each(&self) -> Box<dyn Iterator<Item = &ExistingReplica> + '_>;
}

impl Existing for [ExistingReplica] {
    fn of_deployment(&self, namespace: &str, deployment: &str) -> Vec<&ExistingReplica> {
        self.iter()
            .filter(|r| r.namespace == namespace && r.deployment.as_deref() == Some(deployment))
            .collect()
    }

    fn each(&self) -> Box<dyn Iterator<Item = &ExistingReplica> + '_> {
        Box::new(self.iter())
    }
}

impl<const N: usize> Existing for [ExistingReplica; N] {
    fn of_deployment(&self, namespace: &str, deployment: &str) -> Vec<&ExistingReplica> {
        self.as_slice().of_deployment(namespace, deployment)
    }

    fn each(&self) -> Box<dyn Iterator<Item = &ExistingReplica> + '_> {
        self.as_slice().each()
    }
}

impl Existing for Vec<ExistingReplica> {
    fn of_deployment(&self, namespace: &str, deployment: &str) -> Vec<&ExistingReplica> {
        self.as_slice().of_deployment(namespace, deployment)
    }

    fn each(&self) -> Box<dyn Iterator<Item = &ExistingReplica> + '_> {
        self.as_slice().each()
    }
}

/// An existing ModelReplica of any deployment.
#[derive(Clone, Debug, PartialEq)]
pub struct ExistingReplica {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `modelplane.ai/deployment` label.
    pub deployment: Option<String>,
    /// `modelplane.ai/replica-index` label, read as Python's `int()`; 0 when missing or bad.
    pub index: i64,
    /// `spec.clusterName`.
    pub cluster: String,
    /// Engines as stamped.
    pub engines: Vec<ReplicaEngine>,
}

/// An engine of an existing replica.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaEngine {
    /// Name.
    pub name: String,
    /// Copies.
    pub copies: u32,
    /// Members, in order.
    pub members: Vec<ReplicaMember>,
}

/// A member of an existing replica.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaMember {
    /// Role.
    pub role: Role,
    /// Pods (`worker.nodes` for a Worker with a worker block, else 1).
    pub pods: u32,
    /// Pinned pool.
    pub pool: String,
    /// Whether the member carries device requests (and so is charged).
    pub claims: bool,
    /// Its device requests: DeviceClass and devices per pod.
    pub requests: Vec<(String, i64)>,
}

impl ReplicaMember {
    /// What one of its pods takes of a node of `pool`: each request's
    /// devices, of the pool's first DRA device of its DeviceClass; `None`
    /// when the pool offers none of a class, or none is stamped (it is
    /// charged a whole node).
    pub fn demand(&self, pool: &Pool) -> Option<Vec<(usize, i64)>> {
        if self.requests.is_empty() {
            // Charged, but with no requests stamped: a whole node.
            return None;
        }
        self.requests
            .iter()
            .map(|(class, count)| {
                let device = pool.devices.iter().position(|d| {
                    d.claim == modelplane_api::types::Claim::Dra && d.device_class_name == *class
                })?;
                Some((device, *count))
            })
            .collect()
    }
}

/// Shares identical pool devices across the fleet.
#[derive(Debug, Default)]
pub struct DeviceInterner {
    devices: HashMap<String, Arc<PoolDevice>>,
    lists: HashMap<Vec<usize>, Arc<[Arc<PoolDevice>]>>,
}

impl DeviceInterner {
    /// The shared device equal to `device`.
    pub fn device(&mut self, device: &Device) -> Arc<PoolDevice> {
        let key = serde_key(device);
        self.devices
            .entry(key)
            .or_insert_with(|| {
                Arc::new(PoolDevice {
                    name: device.name.clone(),
                    claim: device.claim(),
                    device_class_name: device.device_class_name.clone().unwrap_or_default(),
                    count: i64::from(device.count.unwrap_or(0).max(0)),
                    activation: DeviceActivation::new(device),
                    source: device.clone(),
                })
            })
            .clone()
    }

    /// The shared device list equal to `devices`.
    pub fn devices(&mut self, devices: &[Device]) -> Arc<[Arc<PoolDevice>]> {
        let shared: Vec<Arc<PoolDevice>> = devices.iter().map(|d| self.device(d)).collect();
        let key: Vec<usize> = shared.iter().map(|d| Arc::as_ptr(d) as usize).collect();
        self.lists
            .entry(key)
            .or_insert_with(|| shared.into())
            .clone()
    }
}

/// A stable identity for a device's content.
fn serde_key(device: &Device) -> String {
    // Debug output of the typed device is canonical: maps are BTreeMaps.
    format!("{device:?}")
}

impl Cluster {
    /// Builds the scheduler's view of an InferenceCluster from its status.
    pub fn from_resource(cluster: &InferenceCluster, interner: &mut DeviceInterner) -> Cluster {
        let status = cluster.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let pools = status
            .gpu_pools
            .iter()
            .flatten()
            .map(|p| Pool {
                name: p.name.clone(),
                nodes: i64::from(p.nodes.unwrap_or(0).max(0)),
                devices: interner.devices(p.devices.as_deref().unwrap_or_default()),
            })
            .collect();
        Cluster {
            name: cluster.metadata.name.clone().unwrap_or_default(),
            labels: cluster.metadata.labels.clone().unwrap_or_default(),
            taints: cluster
                .spec
                .taints
                .iter()
                .flatten()
                .map(|t| Taint {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect,
                })
                .collect(),
            ready,
            gateway_address: status.gateway.and_then(|g| g.address).unwrap_or_default(),
            pools,
            pools_published: status.gpu_pools.is_some(),
        }
    }
}

fn pods(role: Role, worker_nodes: Option<i32>) -> u32 {
    match (role, worker_nodes) {
        (Role::Worker, Some(n)) => u32::try_from(n).unwrap_or(0),
        _ => 1,
    }
}

impl Deployment {
    /// Builds the scheduler's view of a ModelDeployment. `cache_selector`
    /// holds the referenced ModelCache's `matchLabels`, merged over the
    /// deployment's (the cache's value wins on a shared key, as the original).
    pub fn from_resource(
        deployment: &ModelDeployment,
        cache_selector: Option<&BTreeMap<String, String>>,
    ) -> Deployment {
        let spec = &deployment.spec.template.spec;
        let mut cluster_selector = spec
            .cluster_selector
            .as_ref()
            .and_then(|s| s.match_labels.clone())
            .unwrap_or_default();
        if let Some(cache) = cache_selector {
            cluster_selector.extend(cache.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Deployment {
            namespace: deployment.metadata.namespace.clone().unwrap_or_default(),
            name: deployment.metadata.name.clone().unwrap_or_default(),
            replicas: u32::try_from(deployment.spec.replicas).unwrap_or(0),
            cluster_selector,
            tolerations: spec
                .tolerations
                .iter()
                .flatten()
                .map(|t| Toleration {
                    key: t.key.clone().unwrap_or_default(),
                    operator: t.operator.unwrap_or_default(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect,
                })
                .collect(),
            engines: spec
                .engines
                .iter()
                .map(|e| EngineSpec {
                    name: e.name.clone(),
                    copies: u32::try_from(e.copies()).unwrap_or(1),
                    members: e
                        .members
                        .iter()
                        .map(|m| MemberSpec {
                            role: m.role(),
                            pods: pods(m.role(), m.worker.as_ref().map(|w| w.nodes)),
                            requests: m
                                .node_selector
                                .iter()
                                .flat_map(|ns| &ns.devices)
                                .map(|r| RequestSpec {
                                    name: r.name.clone(),
                                    count: i64::from(r.count.unwrap_or(1)),
                                    selectors: r
                                        .selectors
                                        .iter()
                                        .filter_map(|s| s.cel.clone())
                                        .filter(|c| !c.is_empty())
                                        .collect(),
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Python `int()` on a label value (see [`modelplane_api::python::int`]).
pub fn parse_index(text: &str) -> Option<i64> {
    modelplane_api::python::int(text)
}

impl ExistingReplica {
    /// The replica a placement of `deployment` becomes, as the scheduler
    /// will see it once created (named as ModelDeployment composition names it).
    pub fn from_placement(
        deployment: &Deployment,
        placement: &crate::Placement,
    ) -> ExistingReplica {
        ExistingReplica {
            namespace: deployment.namespace.clone(),
            name: modelplane_api::names::replica_name(
                &deployment.name,
                &placement.cluster,
                u32::try_from(placement.index).unwrap_or(0),
            ),
            deployment: Some(deployment.name.clone()),
            index: placement.index,
            cluster: placement.cluster.clone(),
            engines: placement
                .engines
                .iter()
                .zip(&deployment.engines)
                .map(|(placed, spec)| ReplicaEngine {
                    name: placed.name.clone(),
                    copies: spec.copies,
                    members: placed
                        .members
                        .iter()
                        .zip(&spec.members)
                        .map(|(m, member)| ReplicaMember {
                            role: m.role,
                            pods: member.pods,
                            pool: m.pool.clone(),
                            claims: !m.device_requests.is_empty(),
                            requests: m
                                .device_requests
                                .iter()
                                .map(|r| (r.device_class_name.clone(), r.count))
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// Builds the scheduler's view of a ModelReplica.
    pub fn from_resource(replica: &ModelReplica) -> ExistingReplica {
        let labels = replica.metadata.labels.clone().unwrap_or_default();
        ExistingReplica {
            namespace: replica.metadata.namespace.clone().unwrap_or_default(),
            name: replica.metadata.name.clone().unwrap_or_default(),
            deployment: labels.get(labels::DEPLOYMENT).cloned(),
            index: labels
                .get(labels::REPLICA_INDEX)
                .and_then(|v| parse_index(v))
                .unwrap_or(0),
            cluster: replica.spec.cluster_name.clone(),
            engines: replica
                .spec
                .engines
                .iter()
                .map(|e| ReplicaEngine {
                    name: e.name.clone(),
                    copies: u32::try_from(e.copies()).unwrap_or(1),
                    members: e
                        .members
                        .iter()
                        .map(|m| ReplicaMember {
                            role: m.role(),
                            pods: pods(m.role(), m.worker.as_ref().map(|w| w.nodes)),
                            pool: m.node_pool_name.clone(),
                            claims: m.device_requests.as_ref().is_some_and(|r| !r.is_empty()),
                            requests: m
                                .device_requests
                                .iter()
                                .flatten()
                                .map(|r| {
                                    (r.device_class_name.clone(), i64::from(r.count.unwrap_or(1)))
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_indexes_are_read_like_python_int() {
        assert_eq!(parse_index("3"), Some(3));
        assert_eq!(parse_index(" 1_0 "), Some(10));
        assert_eq!(parse_index("+2"), Some(2));
        assert_eq!(parse_index("-1"), Some(-1));
        for bad in ["", "x", "1__0", "_1", "1_", "1.0", "0x1"] {
            assert_eq!(parse_index(bad), None, "{bad}");
        }
    }
}
