//! NebiusCluster → Nebius managed resources (`behavior.md` §9
//! compose-nebius-cluster, §8.2 Nebius extras, `api.md` §10.4, §10.6).
//!
//! A network and subnet, the Managed Kubernetes cluster, the injected
//! `system` node group and one per GPU pool (fixed size unless a maximum is
//! given; drivers preset; a GPU cluster per InfiniBand fabric), and a shared
//! filesystem attached to every node and mounted by cloud-init, served to
//! pods by the mounted-fs-path CSI driver as `modelplane-rwx-fs`. Everything
//! lives in the project of the provider config the credentials name, whose
//! service-account Secret is also how clients reach the cluster.

use std::collections::BTreeSet;

use modelplane_api::labels;
use modelplane_api::types::{NebiusCluster, NebiusNodePool, StackSecret};
use serde_json::{Value, json};

use super::{Builder, GPU_TAINT_KEY};
use crate::{Composition, Desired, ReadinessRule, Target};

const VPC: &str = "vpc.nebius.m.upbound.io/v1beta1";
const MK8S: &str = "mk8s.nebius.m.upbound.io/v1beta1";
const COMPUTE: &str = "compute.nebius.m.upbound.io/v1beta1";

const SYSTEM_PLATFORM: &str = "cpu-d3";
const SYSTEM_PRESET: &str = "4vcpu-16gb";
const DEFAULT_DRIVERS: &str = "cuda13.0";
/// The managed RWX class for model caches.
pub const STORAGE_CLASS: &str = "modelplane-rwx-fs";
const FS_TAG: &str = "modelplane-fs";
const FS_MOUNT: &str = "/mnt/data";
const FS_SIZE_GIB: i64 = 2048;

/// What composing a NebiusCluster reads.
#[derive(Clone, Copy, Debug)]
pub struct NebiusInputs<'a> {
    /// The XR.
    pub cluster: &'a NebiusCluster,
    /// `spec.projectID` of the Nebius provider config the credentials name.
    pub project: Option<&'a str>,
    /// That provider config's service-account credentials Secret.
    pub credentials: Option<&'a StackSecret>,
    /// The Managed Kubernetes cluster is observed Ready.
    pub control_plane_ready: bool,
}

fn cloud_init() -> String {
    format!(
        "#cloud-config\nruncmd:\n  - mkdir -p {FS_MOUNT}\n  - mount -t virtiofs {FS_TAG} {FS_MOUNT}\n  - echo '{FS_TAG} {FS_MOUNT} virtiofs defaults 0 2' >> /etc/fstab\n"
    )
}

fn node_group(b: &mut Builder<'_>, pool: &NebiusNodePool) {
    let mut node_labels = json!({ labels::POOL: pool.name });
    let mut template = json!({
        "resources": { "platform": pool.platform, "preset": pool.preset },
        "bootDisk": { "sizeGibibytes": pool.disk_size_gb.unwrap_or(100), "type": "NETWORK_SSD" },
        "filesystems": [{ "attachMode": "READ_WRITE", "mountTag": FS_TAG, "existingFilesystem": { "idRef": b.reference("fs") } }],
        "cloudInitUserData": cloud_init(),
    });
    if let Some(gpu) = &pool.gpu {
        node_labels[labels::GPU] = json!(gpu.accelerator_type);
        template["gpuSettings"] =
            json!({ "driversPreset": gpu.drivers_preset.as_deref().unwrap_or(DEFAULT_DRIVERS) });
        template["taints"] =
            json!([{ "key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE" }]);
    }
    if let Some(fabric) = pool.fabric.as_ref().and_then(|f| f.infiniband.as_ref()) {
        template["gpuCluster"] =
            json!({ "idRef": b.reference(&format!("gpu-cluster-{}", fabric.fabric)) });
    }
    template["metadata"] = json!({ "labels": node_labels });
    let count = pool.size.node_count.unwrap_or(1);
    let mut for_provider = json!({ "parentIdRef": b.reference("cluster"), "template": template });
    // Fixed size unless the pool gives a maximum; the minimum falls back to the count.
    match pool.size.max_node_count {
        Some(max) => {
            for_provider["autoscaling"] = json!({ "minNodeCount": pool.size.min_node_count.unwrap_or(count), "maxNodeCount": max });
        }
        None => for_provider["fixedNodeCount"] = json!(count),
    }
    b.managed(
        MK8S,
        "NodeGroup",
        &format!("pool-{}", pool.name),
        for_provider,
    );
}

/// Composes a NebiusCluster.
pub fn compose_nebius_cluster(inputs: NebiusInputs<'_>) -> Composition {
    let xr = inputs.cluster;
    let mut out = Composition::default();
    let Some(project) = inputs.project else {
        out.hold = true;
        return out;
    };
    let name = xr.metadata.name.as_deref().unwrap_or_default();
    let namespace = xr
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(labels::SYSTEM_NAMESPACE);
    let spec = &xr.spec;
    let mut b = Builder::new(name, namespace, spec.credentials.as_ref());

    b.managed(
        VPC,
        "Network",
        "network",
        json!({ "parentId": project, "name": name }),
    );
    b.managed(
        VPC,
        "Subnet",
        "subnet",
        json!({ "parentId": project, "name": name, "networkIdRef": b.reference("network") }),
    );
    let kubeconfig = b.name("kubeconfig");
    b.managed(MK8S, "Cluster", "cluster", json!({
        "parentId": project,
        "name": name,
        "controlPlane": { "subnetIdRef": b.reference("subnet"), "endpoints": { "publicEndpoint": {} } },
    }));
    b.with_connection_secret(&kubeconfig);
    b.managed(COMPUTE, "Filesystem", "fs", json!({
        "parentId": project, "name": format!("{name}-models"), "type": "NETWORK_SSD", "sizeGibibytes": FS_SIZE_GIB,
    }));
    let fabrics: BTreeSet<&str> = spec
        .node_pools
        .iter()
        .filter_map(|p| p.fabric.as_ref()?.infiniband.as_ref())
        .map(|ib| ib.fabric.as_str())
        .collect();
    for fabric in fabrics {
        b.managed(
            COMPUTE,
            "GpuCluster",
            &format!("gpu-cluster-{fabric}"),
            json!({
                "parentId": project, "name": format!("{name}-{fabric}"), "infinibandFabric": fabric,
            }),
        );
    }
    b.out.push(Desired {
        target: Target::ControlPlane,
        object: json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": { "name": b.name("cloud-init"), "namespace": namespace },
            "type": "Opaque",
            "stringData": { "userdata": cloud_init() },
        }),
        ready_when: ReadinessRule::Created,
    });
    let system = NebiusNodePool {
        name: "system".into(),
        role: modelplane_api::types::PoolRole::System,
        platform: SYSTEM_PLATFORM.into(),
        preset: SYSTEM_PRESET.into(),
        disk_size_gb: None,
        size: modelplane_api::types::PoolSize {
            node_count: Some(1),
            min_node_count: Some(1),
            max_node_count: Some(2),
        },
        gpu: None,
        fabric: None,
    };
    node_group(&mut b, &system);
    for pool in spec.node_pools.iter().filter(|p| p.name != "system") {
        node_group(&mut b, pool);
    }

    if inputs.control_plane_ready {
        b.helm_provider_config(&kubeconfig);
        b.release(
            "csi-mounted-fs-path",
            "csi-mounted-fs-path",
            "oci://cr.eu-north1.nebius.cloud/mk8s/helm",
            "0.1.6",
            "kube-system",
            json!({
                "dataDir": format!("{FS_MOUNT}/csi-mounted-fs-path-data/"),
            }),
        );
        b.on_cluster(
            json!({
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": { "name": STORAGE_CLASS },
                "provisioner": "mounted-fs-path.csi.nebius.ai",
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer",
            }),
            ReadinessRule::Created,
        );
        let mut secrets =
            vec![json!({ "type": "Kubeconfig", "name": kubeconfig, "key": "kubeconfig" })];
        if let Some(c) = inputs.credentials {
            let mut entry =
                json!({ "type": "NebiusServiceAccountCredentials", "name": c.name, "key": c.key });
            if let Some(ns) = &c.namespace {
                entry["namespace"] = json!(ns);
            }
            secrets.push(entry);
        }
        out.status = Some(
            json!({ "secrets": Value::Array(secrets), "cache": { "storageClassName": STORAGE_CLASS } }),
        );
    }
    out.desired = b.out;
    out
}
