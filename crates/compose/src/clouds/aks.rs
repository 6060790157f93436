//! AKSCluster → Azure managed resources (`behavior.md` §9 compose-aks-cluster,
//! §8.2 AKS extras, `api.md` §10.3, §10.6).
//!
//! A resource group, a virtual network with one node subnet, the AKS cluster
//! with the injected `system` pool as its default pool, and one node pool per
//! GPU pool (labelled, tainted, zones only when given, GPU drivers left to the
//! GPU operator). InfiniBand pools add NVIDIA's network operator. The managed
//! RWX class is Azure Files over NFS.

use modelplane_api::labels;
use modelplane_api::types::{AKSCluster, AksNodePool};
use serde_json::json;

use super::{Builder, GPU_TAINT_KEY};
use crate::{Composition, ReadinessRule};

const AZURE: &str = "azure.m.upbound.io/v1beta1";
const NETWORK: &str = "network.azure.m.upbound.io/v1beta1";
const CONTAINER: &str = "containerservice.azure.m.upbound.io/v1beta1";

const DEFAULT_VNET_CIDR: &str = "10.0.0.0/16";
const DEFAULT_SUBNET_CIDR: &str = "10.0.0.0/20";
const SYSTEM_VM_SIZE: &str = "Standard_D4s_v5";
/// The managed RWX class for model caches (Azure Files, NFS).
pub const STORAGE_CLASS: &str = "modelplane-rwx-fs";

/// What composing an AKSCluster reads.
#[derive(Clone, Copy, Debug)]
pub struct AksInputs<'a> {
    /// The XR.
    pub cluster: &'a AKSCluster,
    /// The AKS cluster is observed Ready.
    pub control_plane_ready: bool,
}

fn node_labels(pool: &AksNodePool) -> serde_json::Value {
    let mut out = json!({ labels::POOL: pool.name });
    if let Some(gpu) = &pool.gpu {
        out[labels::GPU] = json!(gpu.accelerator_type);
    }
    out
}

/// Composes an AKSCluster.
pub fn compose_aks_cluster(inputs: AksInputs<'_>) -> Composition {
    let xr = inputs.cluster;
    let name = xr.metadata.name.as_deref().unwrap_or_default();
    let namespace = xr
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(labels::SYSTEM_NAMESPACE);
    let spec = &xr.spec;
    let location = spec.location.as_str();
    let net = spec.networking.clone().unwrap_or_default();
    let mut b = Builder::new(name, namespace, spec.credentials.as_ref());

    b.managed(
        AZURE,
        "ResourceGroup",
        "rg",
        json!({ "location": location }),
    );
    b.managed(
        NETWORK,
        "VirtualNetwork",
        "vnet",
        json!({
            "location": location, "resourceGroupNameRef": b.reference("rg"),
            "addressSpace": [net.vnet_cidr.as_deref().unwrap_or(DEFAULT_VNET_CIDR)],
        }),
    );
    b.managed(
        NETWORK,
        "Subnet",
        "nodes",
        json!({
            "resourceGroupNameRef": b.reference("rg"), "virtualNetworkNameRef": b.reference("vnet"),
            "addressPrefixes": [net.subnet_cidr.as_deref().unwrap_or(DEFAULT_SUBNET_CIDR)],
        }),
    );
    let kubeconfig = b.name("kubeconfig");
    b.managed(
        CONTAINER,
        "KubernetesCluster",
        "cluster",
        json!({
            "location": location,
            "resourceGroupNameRef": b.reference("rg"),
            "dnsPrefix": name,
            "identity": { "type": "SystemAssigned" },
            "oidcIssuerEnabled": true,
            "networkProfile": { "networkPlugin": "azure", "networkPluginMode": "overlay" },
            "storageProfile": { "fileDriverEnabled": true },
            "defaultNodePool": {
                "name": "system",
                "vmSize": SYSTEM_VM_SIZE,
                "osDiskSizeGb": 100,
                "autoScalingEnabled": true,
                "minCount": 1,
                "maxCount": 2,
                "vnetSubnetIdRef": b.reference("nodes"),
                "nodeLabels": { labels::POOL: "system" },
            },
        }),
    );
    b.with_connection_secret(&kubeconfig);
    for pool in spec.node_pools.iter().filter(|p| p.name != "system") {
        let count = pool.size.node_count.unwrap_or(1);
        let mut for_provider = json!({
            "kubernetesClusterIdRef": b.reference("cluster"),
            "vmSize": pool.vm_size,
            "osDiskSizeGb": pool.disk_size_gb.unwrap_or(100),
            "nodeCount": count,
            "autoScalingEnabled": true,
            "minCount": pool.size.min_node_count.unwrap_or(0).min(count),
            "maxCount": pool.size.max_node_count.unwrap_or(8).max(count),
            "vnetSubnetIdRef": b.reference("nodes"),
            "nodeLabels": node_labels(pool),
        });
        if pool.gpu.is_some() {
            for_provider["nodeTaints"] = json!([format!("{GPU_TAINT_KEY}=true:NoSchedule")]);
            // The GPU operator installs the driver.
            for_provider["gpuDriver"] = json!("None");
        }
        if let Some(zones) = pool.zones.as_ref().filter(|z| !z.is_empty()) {
            for_provider["zones"] = json!(zones);
        }
        b.managed(
            CONTAINER,
            "KubernetesClusterNodePool",
            &format!("pool-{}", pool.name),
            for_provider,
        );
        // AKS names pools itself from this: lowercase, at most 12 characters.
        b.with_external_name(&pool.name);
    }

    let mut out = Composition::default();
    if inputs.control_plane_ready {
        b.helm_provider_config(&kubeconfig);
        if spec
            .node_pools
            .iter()
            .any(|p| p.fabric.as_deref() == Some("InfiniBand"))
        {
            b.release(
                "network-operator",
                "network-operator",
                "https://helm.ngc.nvidia.com/nvidia",
                "26.4.0",
                "network-operator",
                json!({}),
            );
        }
        b.on_cluster(
            json!({
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": { "name": STORAGE_CLASS },
                "provisioner": "file.csi.azure.com",
                "parameters": { "skuName": "Premium_LRS", "protocol": "nfs" },
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
                "allowVolumeExpansion": true,
            }),
            ReadinessRule::Created,
        );
        out.status = Some(json!({
            "secrets": [{ "type": "Kubeconfig", "name": kubeconfig, "key": "kubeconfig" }],
            "cache": { "storageClassName": STORAGE_CLASS },
        }));
    }
    out.desired = b.out;
    out
}
