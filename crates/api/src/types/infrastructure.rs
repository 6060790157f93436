//! The internal `infrastructure.modelplane.ai` kinds an InferenceCluster
//! composes: ServingStack and the five cloud clusters.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::*;
use super::platform::{CacheStorage, GatewayAddress, Stack};

/// Spec of the serving substrate of one workload cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "infrastructure.modelplane.ai",
    version = "v1alpha1",
    kind = "ServingStack",
    plural = "servingstacks",
    shortname = "ss",
    category = "modelplane",
    namespaced,
    status = "ServingStackStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct ServingStackSpec {
    /// Serving stack, carried down from the InferenceCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<Stack>,
    /// Kubeconfig and optional cloud identity of the cluster.
    pub secrets: Vec<StackSecret>,
    /// Where the NVIDIA driver lives on the host (`/` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_driver_root: Option<String>,
    /// The cluster's inference gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<StackGateway>,
}

/// A credential Secret of a ServingStack or a cloud cluster's status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackSecret {
    /// `Kubeconfig` or a cloud identity type.
    #[serde(rename = "type")]
    pub type_: String,
    /// Secret name.
    pub name: String,
    /// Key.
    pub key: String,
    /// Namespace; the owner's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The workload cluster's inference gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StackGateway {
    /// GatewayClass, `envoy` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// Listeners; one HTTP listener on port 80 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listeners: Option<Vec<Listener>>,
}

/// A gateway listener.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    /// Name.
    pub name: String,
    /// Port.
    pub port: i32,
    /// `HTTP` or `TCP`.
    pub protocol: String,
}

/// Observed state of a ServingStack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServingStackStatus {
    /// The gateway's external address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayAddress>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// Observed state of a cloud cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudClusterStatus {
    /// The kubeconfig (and identity) Secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<StackSecret>>,
    /// Managed RWX storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheStorage>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// Role of a cloud node pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolRole {
    /// System workloads.
    System,
    /// GPU workloads.
    #[serde(rename = "GPU")]
    Gpu,
}

/// A GPU pool's accelerator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolGpu {
    /// Accelerator type.
    pub accelerator_type: String,
    /// Accelerators per node (GKE only; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator_count: Option<i32>,
    /// Drivers preset (Nebius only; default `cuda13.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drivers_preset: Option<String>,
}

/// Node counts of a cloud pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolSize {
    /// Nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_count: Option<i32>,
    /// Autoscaling minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_node_count: Option<i32>,
    /// Autoscaling maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_node_count: Option<i32>,
}

/// Spec of an Amazon EKS cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "infrastructure.modelplane.ai",
    version = "v1alpha1",
    kind = "EKSCluster",
    plural = "eksclusters",
    shortname = "eks",
    category = "modelplane",
    namespaced,
    status = "CloudClusterStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct EksClusterSpec {
    /// Region.
    pub region: String,
    /// Cloud credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
    /// VPC layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networking: Option<EksNetworking>,
    /// Node groups.
    pub node_pools: Vec<EksNodePool>,
}

/// EKS VPC layout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EksNetworking {
    /// VPC CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_cidr: Option<String>,
    /// Subnet CIDRs, one per zone in alphabetical order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_cidrs: Option<Vec<String>>,
}

/// An EKS node group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EksNodePool {
    /// Name.
    pub name: String,
    /// System or GPU.
    pub role: PoolRole,
    /// EC2 instance type.
    pub instance_type: String,
    /// Disk in GB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size_gb: Option<i32>,
    /// Node counts.
    #[serde(flatten)]
    pub size: PoolSize,
    /// Accelerator (GPU pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<PoolGpu>,
    /// Capacity block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_block: Option<super::platform::CapacityBlock>,
    /// Zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// `None` or `EFA`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<String>,
}

/// Spec of a Google GKE cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "infrastructure.modelplane.ai",
    version = "v1alpha1",
    kind = "GKECluster",
    plural = "gkeclusters",
    shortname = "gke",
    category = "modelplane",
    namespaced,
    status = "CloudClusterStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct GkeClusterSpec {
    /// Region.
    pub region: String,
    /// Cloud credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
    /// Network layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networking: Option<GkeNetworking>,
    /// Node pools.
    pub node_pools: Vec<GkeNodePool>,
}

/// GKE network layout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GkeNetworking {
    /// Pod CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_cidr: Option<String>,
    /// Service CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_cidr: Option<String>,
    /// Node CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_cidr: Option<String>,
}

/// A GKE node pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GkeNodePool {
    /// Name.
    pub name: String,
    /// System or GPU.
    pub role: PoolRole,
    /// Machine type.
    pub machine_type: String,
    /// Disk in GB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size_gb: Option<i32>,
    /// Node counts.
    #[serde(flatten)]
    pub size: PoolSize,
    /// Accelerator (GPU pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<PoolGpu>,
    /// Zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
}

/// Spec of an Azure AKS cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "infrastructure.modelplane.ai",
    version = "v1alpha1",
    kind = "AKSCluster",
    plural = "aksclusters",
    shortname = "aks",
    category = "modelplane",
    namespaced,
    status = "CloudClusterStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct AksClusterSpec {
    /// Location.
    pub location: String,
    /// Cloud credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
    /// Network layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networking: Option<AksNetworking>,
    /// Node pools.
    pub node_pools: Vec<AksNodePool>,
}

/// AKS network layout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AksNetworking {
    /// VNet CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vnet_cidr: Option<String>,
    /// Subnet CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_cidr: Option<String>,
}

/// An AKS node pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AksNodePool {
    /// Name (`^[a-z][a-z0-9]{0,11}$`).
    pub name: String,
    /// System or GPU.
    pub role: PoolRole,
    /// VM size.
    pub vm_size: String,
    /// Disk in GB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size_gb: Option<i32>,
    /// Node counts.
    #[serde(flatten)]
    pub size: PoolSize,
    /// Zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// Accelerator (GPU pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<PoolGpu>,
    /// `None` or `InfiniBand`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<String>,
}

/// Spec of a Nebius Managed Kubernetes cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "infrastructure.modelplane.ai",
    version = "v1alpha1",
    kind = "NebiusCluster",
    plural = "nebiusclusters",
    shortname = "mk8s",
    category = "modelplane",
    namespaced,
    status = "CloudClusterStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct NebiusClusterSpec {
    /// Cloud credentials (the config's project decides the region).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
    /// Node groups.
    pub node_pools: Vec<NebiusNodePool>,
}

/// A Nebius node group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NebiusNodePool {
    /// Name.
    pub name: String,
    /// System or GPU.
    pub role: PoolRole,
    /// Platform.
    pub platform: String,
    /// Preset.
    pub preset: String,
    /// Disk in GB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size_gb: Option<i32>,
    /// Node counts.
    #[serde(flatten)]
    pub size: PoolSize,
    /// Accelerator (GPU pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<PoolGpu>,
    /// Interconnect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<super::platform::Fabric>,
}

/// Spec of a Vultr Kubernetes Engine cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "infrastructure.modelplane.ai",
    version = "v1alpha1",
    kind = "VultrCluster",
    plural = "vultrclusters",
    shortname = "vke",
    category = "modelplane",
    namespaced,
    status = "CloudClusterStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct VultrClusterSpec {
    /// Region.
    pub region: String,
    /// Cloud credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
    /// Node pools.
    pub node_pools: Vec<VultrNodePool>,
}

/// A Vultr node pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VultrNodePool {
    /// Name.
    pub name: String,
    /// System or GPU.
    pub role: PoolRole,
    /// Plan.
    pub plan: String,
    /// Node counts.
    #[serde(flatten)]
    pub size: PoolSize,
    /// Accelerator (GPU pools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<PoolGpu>,
}
