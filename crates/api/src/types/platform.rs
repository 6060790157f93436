//! The platform team's kinds: InferenceGateway, InferenceClass, InferenceCluster.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::*;

/// Spec of the fleet's single OpenAI-compatible front door.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "modelplane.ai",
    version = "v1alpha1",
    kind = "InferenceGateway",
    plural = "inferencegateways",
    shortname = "ig",
    category = "modelplane",
    status = "InferenceGatewayStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct InferenceGatewaySpec {
    /// `Modelplane` (the built-in gateway, the default) or `Traefik`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<GatewayBackend>,
    /// Traefik settings; required when backend is Traefik.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traefik: Option<Traefik>,
}

impl InferenceGatewaySpec {
    /// The backend, `Modelplane` when unset.
    pub fn backend(&self) -> GatewayBackend {
        self.backend.unwrap_or_default()
    }
}

/// Which gateway fronts the fleet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum GatewayBackend {
    /// Modelplane's built-in fleet gateway.
    #[default]
    Modelplane,
    /// Traefik with Gateway API routes (the original's gateway).
    Traefik,
}

/// Traefik settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Traefik {
    /// Traefik Helm chart version.
    pub version: String,
    /// `MetalLB` for kind or bare metal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<String>,
    /// MetalLB settings; required with `loadBalancer: MetalLB`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metallb: Option<MetalLb>,
}

/// MetalLB settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetalLb {
    /// IP range, e.g. `172.18.255.200-172.18.255.250`.
    pub address_pool: String,
}

/// Observed state of the gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InferenceGatewayStatus {
    /// External address of the fleet gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// Spec of a reusable hardware recipe for one GPU node pool.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "modelplane.ai",
    version = "v1alpha1",
    kind = "InferenceClass",
    plural = "inferenceclasses",
    shortname = "icl",
    category = "modelplane",
    status = "ConditionsStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct InferenceClassSpec {
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How a provisioned cluster builds the pool; absent for bring-your-own pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Provisioning>,
    /// The devices each node offers.
    pub devices: Vec<Device>,
}

/// A status with conditions only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionsStatus {
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// A cloud that builds node pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CloudProvider {
    /// Google Kubernetes Engine.
    #[serde(rename = "GKE")]
    Gke,
    /// Amazon Elastic Kubernetes Service.
    #[serde(rename = "EKS")]
    Eks,
    /// Azure Kubernetes Service.
    #[serde(rename = "AKS")]
    Aks,
    /// Nebius Managed Kubernetes.
    Nebius,
    /// Vultr Kubernetes Engine.
    Vultr,
}

/// Per-cloud recipes for a class's pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provisioning {
    /// The cloud.
    pub provider: CloudProvider,
    /// GKE recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gke: Option<GkeRecipe>,
    /// EKS recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eks: Option<EksRecipe>,
    /// AKS recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aks: Option<AksRecipe>,
    /// Nebius recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nebius: Option<NebiusRecipe>,
    /// Vultr recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vultr: Option<VultrRecipe>,
}

/// Accelerators a provisioned node carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accelerator {
    /// Accelerator type, e.g. `nvidia-l4`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Accelerators per node.
    pub count: i32,
}

/// GKE node-pool recipe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GkeRecipe {
    /// Machine type.
    pub machine_type: String,
    /// Boot disk in GB (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size_gb: Option<i32>,
    /// Accelerators.
    pub accelerator: Accelerator,
}

/// EKS node-group recipe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EksRecipe {
    /// EC2 instance type.
    pub instance_type: String,
    /// Boot disk in GB (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size_gb: Option<i32>,
    /// Accelerators.
    pub accelerator: Accelerator,
}

/// AKS node-pool recipe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AksRecipe {
    /// VM size.
    pub vm_size: String,
    /// OS disk in GB (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size_gb: Option<i32>,
    /// Accelerators.
    pub accelerator: Accelerator,
}

/// Nebius node-group recipe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NebiusRecipe {
    /// Platform, e.g. `gpu-h100-sxm`.
    pub platform: String,
    /// Preset, e.g. `8gpu-128vcpu-1600gb`.
    pub preset: String,
    /// Boot disk in GB (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size_gb: Option<i32>,
    /// GPU drivers preset (default `cuda13.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drivers_preset: Option<String>,
    /// Accelerators.
    pub accelerator: Accelerator,
}

/// Vultr node-pool recipe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VultrRecipe {
    /// Plan, e.g. `vcg-l40s-16c-180g-48vram`.
    pub plan: String,
    /// Accelerators.
    pub accelerator: Accelerator,
}

/// Spec of a Kubernetes cluster registered as GPU capacity.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "modelplane.ai",
    version = "v1alpha1",
    kind = "InferenceCluster",
    plural = "inferenceclusters",
    shortname = "ic",
    category = "modelplane",
    status = "InferenceClusterStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct InferenceClusterSpec {
    /// Serving stack; `Standard` when unset. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<Stack>,
    /// Where the cluster comes from.
    pub cluster: ClusterSource,
    /// Cluster-wide taints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// GPU node pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_pools: Option<Vec<NodePool>>,
}

impl InferenceClusterSpec {
    /// The serving stack, `Standard` when unset.
    pub fn stack(&self) -> Stack {
        self.stack.unwrap_or_default()
    }
}

/// The serving stack a cluster runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stack {
    /// LeaderWorkerSet for multi-node engines, Deployments otherwise.
    #[default]
    Standard,
    /// Grove PodCliqueSets gang-scheduled by KAI, with ModelExpress.
    Dynamo,
}

/// Where a cluster comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Source {
    /// Provisioned on GKE.
    #[serde(rename = "GKE")]
    Gke,
    /// Provisioned on EKS.
    #[serde(rename = "EKS")]
    Eks,
    /// Provisioned on AKS.
    #[serde(rename = "AKS")]
    Aks,
    /// Provisioned on Nebius.
    Nebius,
    /// Provisioned on Vultr.
    Vultr,
    /// A cluster you already run, reached through a kubeconfig Secret.
    Existing,
}

/// The cluster's source and its per-source settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSource {
    /// The source.
    pub source: Source,
    /// Settings for `Existing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing: Option<ExistingCluster>,
    /// Settings for `GKE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gke: Option<RegionalCloud>,
    /// Settings for `EKS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eks: Option<RegionalCloud>,
    /// Settings for `AKS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aks: Option<AksCloud>,
    /// Settings for `Nebius` (`{}` is valid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nebius: Option<NebiusCloud>,
    /// Settings for `Vultr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vultr: Option<RegionalCloud>,
}

impl Default for ClusterSource {
    fn default() -> Self {
        ClusterSource {
            source: Source::Existing,
            existing: None,
            gke: None,
            eks: None,
            aks: None,
            nebius: None,
            vultr: None,
        }
    }
}

/// A cloud addressed by region (GKE, EKS, Vultr).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegionalCloud {
    /// Region, e.g. `us-east-1`.
    pub region: String,
    /// Cloud credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
}

/// Azure settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AksCloud {
    /// Location, e.g. `westeurope`.
    pub location: String,
    /// Cloud credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
}

/// Nebius settings: the provider config's project decides the region.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NebiusCloud {
    /// Cloud credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
}

/// An existing cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExistingCluster {
    /// Secret in `modelplane-system` holding the kubeconfig.
    pub secret_ref: KubeconfigSecretRef,
    /// Cloud identity used instead of the kubeconfig's credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_secret_ref: Option<IdentitySecretRef>,
    /// Model cache storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ExistingCache>,
}

/// The kubeconfig Secret of an existing cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeconfigSecretRef {
    /// Secret name.
    pub name: String,
    /// Key, `kubeconfig` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl KubeconfigSecretRef {
    /// The key, `kubeconfig` when unset.
    pub fn key(&self) -> &str {
        self.key.as_deref().unwrap_or("kubeconfig")
    }
}

/// A cloud identity Secret for an existing cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentitySecretRef {
    /// Secret name.
    pub name: String,
    /// Key, `private_key` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Kind of identity, `GoogleApplicationCredentials` when unset.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// Model cache storage on an existing cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExistingCache {
    /// An existing RWX StorageClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// A cluster-wide taint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule` or `NoExecute`.
    pub effect: TaintEffect,
}

/// What a taint keeps away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaintEffect {
    /// New replicas stay off.
    #[default]
    NoSchedule,
    /// New replicas stay off and placed ones are evicted.
    NoExecute,
}

/// A GPU node pool of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePool {
    /// Pool name; nodes carry `modelplane.ai/pool=<name>`.
    pub name: String,
    /// InferenceClass of the pool.
    pub class_name: String,
    /// Nodes (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_count: Option<i32>,
    /// Autoscaling minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_node_count: Option<i32>,
    /// Autoscaling maximum; absent for a fixed-size pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_node_count: Option<i32>,
    /// Zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// An EC2 capacity block (EKS only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_block: Option<CapacityBlock>,
    /// Interconnect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<Fabric>,
}

impl NodePool {
    /// Nodes, 1 when unset.
    pub fn node_count(&self) -> i32 {
        self.node_count.unwrap_or(1)
    }

    /// Capacity in nodes the scheduler counts: the maximum if set, else the node count.
    pub fn capacity_nodes(&self) -> i32 {
        self.max_node_count.unwrap_or_else(|| self.node_count())
    }
}

/// An EC2 capacity block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBlock {
    /// Reservation id, `cr-…`.
    pub capacity_reservation_id: String,
}

/// A pool's interconnect.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fabric {
    /// `None` (default), `EFA` or `InfiniBand`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<FabricType>,
    /// InfiniBand settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infiniband: Option<InfiniBand>,
}

/// Kind of interconnect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FabricType {
    /// No special interconnect.
    #[default]
    None,
    /// AWS Elastic Fabric Adapter.
    #[serde(rename = "EFA")]
    Efa,
    /// InfiniBand.
    InfiniBand,
}

/// InfiniBand settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfiniBand {
    /// Existing fabric id, e.g. `fabric-2`.
    pub fabric: String,
}

/// Observed state of an InferenceCluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceClusterStatus {
    /// Provider config that reaches the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_config_ref: Option<NameRef>,
    /// The cluster's inference gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayAddress>,
    /// Effective RWX storage for model caches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheStorage>,
    /// The capacity the fleet scheduler reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_pools: Option<Vec<GpuPool>>,
    /// Namespace of the cluster's internal objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// A reference by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameRef {
    /// Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A gateway's address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayAddress {
    /// Address (host or host:port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// Model cache storage of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheStorage {
    /// RWX StorageClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// One pool's capacity as the scheduler sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuPool {
    /// Pool name.
    pub name: String,
    /// Nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i32>,
    /// The class's devices, copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<Device>>,
}

/// Labels by key, as on `metadata.labels`.
pub type Labels = BTreeMap<String, String>;

impl InferenceClusterSpec {
    /// `status.gpuPools` as the InferenceCluster composition publishes it
    /// (`behavior.md` §8.1 step 5): one entry per node pool whose class is
    /// known and has devices, with `maxNodeCount` (else `nodeCount`) nodes and
    /// the class's devices, `claim` and `count` explicit.
    pub fn gpu_pools(&self, classes: &[InferenceClass]) -> Vec<GpuPool> {
        self.node_pools
            .iter()
            .flatten()
            .filter_map(|pool| {
                let class = classes
                    .iter()
                    .find(|c| c.metadata.name.as_deref() == Some(pool.class_name.as_str()))?;
                if class.spec.devices.is_empty() {
                    return None;
                }
                let devices = class
                    .spec
                    .devices
                    .iter()
                    .map(|d| Device {
                        claim: Some(d.claim()),
                        count: Some(d.count()),
                        ..d.clone()
                    })
                    .collect();
                Some(GpuPool {
                    name: pool.name.clone(),
                    nodes: Some(pool.capacity_nodes()),
                    devices: Some(devices),
                })
            })
            .collect()
    }
}
