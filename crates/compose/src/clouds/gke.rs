//! GKECluster → GCP managed resources (`behavior.md` §9 compose-gke-cluster,
//! §8.2 GKE extras, `api.md` §10.2, §10.6).
//!
//! A custom-mode VPC network and one regional subnetwork with secondary
//! ranges for pods and services; a regional cluster with its default pool
//! removed, Workload Identity and the Filestore CSI driver on; the injected
//! `system` pool and one node pool per GPU pool (GKE's built-in autoscaler,
//! GKE-managed GPU drivers, the DRA-driver node label). Two service accounts:
//! one for nodes, one whose key reaches the cluster (published as the
//! cluster's `GoogleApplicationCredentials`). The project comes from the
//! provider config the credentials name; without it nothing is composed.

use modelplane_api::labels;
use modelplane_api::names;
use modelplane_api::types::{GKECluster, GkeNodePool};
use serde_json::{Value, json};

use super::Builder;
use crate::{Composition, ReadinessRule};

const COMPUTE: &str = "compute.gcp.m.upbound.io/v1beta1";
const CONTAINER: &str = "container.gcp.m.upbound.io/v1beta1";
const PLATFORM: &str = "cloudplatform.gcp.m.upbound.io/v1beta1";

const DEFAULT_POD_CIDR: &str = "10.1.0.0/16";
const DEFAULT_SERVICE_CIDR: &str = "10.2.0.0/16";
const DEFAULT_NODE_CIDR: &str = "10.0.0.0/24";
const SYSTEM_MACHINE_TYPE: &str = "e2-standard-4";
/// The managed RWX class for model caches (Filestore).
pub const STORAGE_CLASS: &str = "modelplane-rwx";
/// Node label that turns on GKE's DRA path for NVIDIA GPUs.
const DRA_NODE_LABEL: &str = "cloud.google.com/gke-nvidia-gpu-dra-driver";
const APIS: [&str; 2] = ["container.googleapis.com", "file.googleapis.com"];
const NODE_ROLES: [&str; 3] = [
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/artifactregistry.reader",
];

/// What composing a GKECluster reads.
#[derive(Clone, Copy, Debug)]
pub struct GkeInputs<'a> {
    /// The XR.
    pub cluster: &'a GKECluster,
    /// `spec.projectID` of the GCP provider config the credentials name.
    pub project: Option<&'a str>,
    /// The GKE cluster and the access key are observed Ready.
    pub control_plane_ready: bool,
}

/// A service account ID (6–30 characters, a letter first) unique per XR.
fn account_id(xr: &str, part: &str) -> String {
    let full = names::child_name(&[xr, part]);
    let hash = &full[full.len() - 5..];
    format!("mp{hash}-{part}")
}

fn email(xr: &str, part: &str, project: &str) -> String {
    format!("{}@{project}.iam.gserviceaccount.com", account_id(xr, part))
}

fn node_pool(b: &mut Builder<'_>, region: &str, project: &str, pool: &GkeNodePool) {
    let mut node_labels = json!({ labels::POOL: pool.name });
    let mut config = json!({
        "machineType": pool.machine_type,
        "diskSizeGb": pool.disk_size_gb.unwrap_or(100),
        "serviceAccount": email(b.xr, "nodes", project),
        "oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"],
    });
    if let Some(gpu) = &pool.gpu {
        node_labels[labels::GPU] = json!(gpu.accelerator_type);
        node_labels[DRA_NODE_LABEL] = json!("true");
        config["guestAccelerator"] = json!([{
            "type": gpu.accelerator_type,
            "count": gpu.accelerator_count.unwrap_or(1),
            "gpuDriverInstallationConfig": { "gpuDriverVersion": "LATEST" },
        }]);
    }
    config["labels"] = node_labels;
    let count = pool.size.node_count.unwrap_or(1);
    let mut for_provider = json!({
        "location": region,
        "clusterRef": b.reference("cluster"),
        "initialNodeCount": count,
        "autoscaling": {
            "minNodeCount": pool.size.min_node_count.unwrap_or(0).min(count),
            "maxNodeCount": pool.size.max_node_count.unwrap_or(8).max(count),
        },
        "nodeConfig": config,
    });
    if let Some(zones) = pool.zones.as_ref().filter(|z| !z.is_empty()) {
        for_provider["nodeLocations"] = json!(zones);
    }
    b.managed(
        CONTAINER,
        "NodePool",
        &format!("pool-{}", pool.name),
        for_provider,
    );
}

fn identity(b: &mut Builder<'_>, project: &str) {
    for (part, display) in [
        ("nodes", "Modelplane nodes"),
        ("access", "Modelplane cluster access"),
    ] {
        b.managed(PLATFORM, "ServiceAccount", &format!("sa-{part}"), json!({
            "accountId": account_id(b.xr, part), "displayName": format!("{display} ({})", b.xr), "project": project,
        }));
    }
    let members = NODE_ROLES
        .iter()
        .map(|role| ("nodes", *role))
        .chain([("access", "roles/container.developer")]);
    for (part, role) in members {
        let short = role
            .trim_start_matches("roles/")
            .replace('.', "-")
            .to_ascii_lowercase();
        b.managed(PLATFORM, "ProjectIAMMember", &format!("iam-{part}-{short}"), json!({
            "project": project, "role": role, "member": format!("serviceAccount:{}", email(b.xr, part, project)),
        }));
    }
    b.managed(
        PLATFORM,
        "ServiceAccountKey",
        "access-key",
        json!({ "serviceAccountIdRef": b.reference("sa-access") }),
    );
    let secret = b.name("access-key");
    b.with_connection_secret(&secret);
}

/// Composes a GKECluster.
pub fn compose_gke_cluster(inputs: GkeInputs<'_>) -> Composition {
    let xr = inputs.cluster;
    let mut out = Composition::default();
    let Some(project) = inputs.project else {
        // The project decides every name below: wait for the provider config.
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
    let region = spec.region.as_str();
    let net = spec.networking.clone().unwrap_or_default();
    let mut b = Builder::new(name, namespace, spec.credentials.as_ref());

    for api in APIS {
        b.managed(
            PLATFORM,
            "ProjectService",
            &format!("api-{}", api.split('.').next().unwrap_or(api)),
            json!({
                "project": project, "service": api, "disableOnDestroy": false,
            }),
        );
    }
    b.managed(
        COMPUTE,
        "Network",
        "network",
        json!({ "project": project, "autoCreateSubnetworks": false }),
    );
    b.managed(COMPUTE, "Subnetwork", "subnet", json!({
        "project": project, "region": region, "networkRef": b.reference("network"),
        "ipCidrRange": net.node_cidr.as_deref().unwrap_or(DEFAULT_NODE_CIDR),
        "secondaryIpRange": [
            { "rangeName": "pods", "ipCidrRange": net.pod_cidr.as_deref().unwrap_or(DEFAULT_POD_CIDR) },
            { "rangeName": "services", "ipCidrRange": net.service_cidr.as_deref().unwrap_or(DEFAULT_SERVICE_CIDR) },
        ],
    }));
    identity(&mut b, project);
    let kubeconfig = b.name("kubeconfig");
    b.managed(CONTAINER, "Cluster", "cluster", json!({
        "project": project,
        "location": region,
        "networkRef": b.reference("network"),
        "subnetworkRef": b.reference("subnet"),
        "removeDefaultNodePool": true,
        "initialNodeCount": 1,
        "deletionProtection": false,
        "releaseChannel": { "channel": "REGULAR" },
        "ipAllocationPolicy": { "clusterSecondaryRangeName": "pods", "servicesSecondaryRangeName": "services" },
        "workloadIdentityConfig": { "workloadPool": format!("{project}.svc.id.goog") },
        "addonsConfig": { "gcpFilestoreCsiDriverConfig": { "enabled": true } },
    }));
    b.with_connection_secret(&kubeconfig);
    let system = GkeNodePool {
        name: "system".into(),
        role: modelplane_api::types::PoolRole::System,
        machine_type: SYSTEM_MACHINE_TYPE.into(),
        disk_size_gb: None,
        size: modelplane_api::types::PoolSize {
            node_count: Some(1),
            min_node_count: Some(1),
            max_node_count: Some(2),
        },
        gpu: None,
        zones: None,
    };
    node_pool(&mut b, region, project, &system);
    for pool in spec.node_pools.iter().filter(|p| p.name != "system") {
        node_pool(&mut b, region, project, pool);
    }

    if inputs.control_plane_ready {
        b.on_cluster(
            json!({
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": { "name": STORAGE_CLASS },
                "provisioner": "filestore.csi.storage.gke.io",
                "parameters": { "tier": "standard", "network": b.name("network") },
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowVolumeExpansion": true,
            }),
            ReadinessRule::Created,
        );
        out.status = Some(json!({
            "secrets": [
                { "type": "Kubeconfig", "name": kubeconfig, "key": "kubeconfig" },
                { "type": "GoogleApplicationCredentials", "name": b.name("access-key"), "key": "private_key" },
            ],
            "cache": { "storageClassName": STORAGE_CLASS },
        }));
    }
    out.desired = b.out;
    out
}

/// The GCP provider config's project, as the composition reads it.
pub fn project_of(provider_config: &Value) -> Option<&str> {
    provider_config["spec"]["projectID"]
        .as_str()
        .filter(|p| !p.is_empty())
}
