//! Schemas of the internal `infrastructure.modelplane.ai` kinds that an
//! InferenceCluster composes: ServingStack and the five cloud clusters.

use serde_json::json;

use super::common::*;
use crate::schema::*;

/// ServingStack: the serving substrate installed on one workload cluster.
pub fn serving_stack() -> (Schema, Schema) {
    let secret = object()
        .req(
            "type",
            one_of(&[
                "Kubeconfig",
                "GoogleApplicationCredentials",
                "AWSWebIdentityCredentials",
                "NebiusServiceAccountCredentials",
            ]),
        )
        .req("name", string().max_len(253))
        .req("key", string().max_len(253))
        .prop(
            "namespace",
            string()
                .max_len(253)
                .doc("Defaults to the ServingStack's namespace."),
        );
    let mut versions = object().doc(
        "Ignored: versions come from the release's recipe. Kept so existing manifests stay valid.",
    );
    for field in [
        "gatewayApi",
        "certManager",
        "envoyGateway",
        "prometheus",
        "leaderWorkerSet",
        "nodeFeatureDiscovery",
        "nvidiaDraDriver",
    ] {
        versions = versions.prop(field, string_len(1, 32));
    }
    let listener = object()
        .req("name", name_len(63))
        .req("port", int_range(1, 65535))
        .req("protocol", one_of(&["HTTP", "TCP"]));
    let spec = object()
        .prop(
            "stack",
            one_of(&["Standard", "Dynamo"])
                .default(json!("Standard"))
                .doc("Serving stack, carried down from the InferenceCluster."),
        )
        .req(
            "secrets",
            array(secret)
                .min_items(1)
                .max_items(8)
                .doc("Kubeconfig and optional cloud identity of the cluster."),
        )
        .prop(
            "nvidiaDriverRoot",
            string().max_len(512).default(json!("/")),
        )
        .prop("versions", versions)
        .prop(
            "gateway",
            object()
                .prop("className", name_len(63).default(json!("envoy")))
                .prop(
                    "listeners",
                    array(listener)
                        .max_items(8)
                        .list_map(&["name"])
                        .doc("One HTTP listener on port 80 when absent."),
                ),
        )
        .rule(
            "self.secrets.exists(s, s.type == 'Kubeconfig')",
            "a Kubeconfig secret is required",
        );
    let status = object()
        .prop("gateway", object().prop("address", string().max_len(256)))
        .prop("conditions", conditions());
    (spec, status)
}

fn node_count(min: i64, default: Option<i64>) -> Schema {
    let s = int_range(min, 1000);
    match default {
        Some(d) => s.default(json!(d)),
        None => s,
    }
}

fn gpu_required(pool: Schema) -> Schema {
    pool.rule(
        "self.role != 'GPU' || has(self.gpu)",
        "gpu is required for GPU node pools",
    )
}

fn zones_required(pool: Schema) -> Schema {
    pool.rule(
        "self.role != 'GPU' || has(self.zones)",
        "zones are required for GPU node pools",
    )
}

fn min_requires_max(pool: Schema) -> Schema {
    pool.rule(
        "!has(self.minNodeCount) || has(self.maxNodeCount)",
        "minNodeCount requires maxNodeCount",
    )
}

fn pool_base(name: Schema) -> Schema {
    object()
        .req("name", name)
        .req("role", one_of(&["System", "GPU"]))
}

fn disk() -> Schema {
    int_range(10, 65536).default(json!(100))
}

fn accelerator_type() -> Schema {
    object().req("acceleratorType", name_len(63))
}

fn zones(max: u64, item_max: u64) -> Schema {
    array(name_len(item_max)).min_items(1).max_items(max)
}

fn pools(pool: Schema) -> Schema {
    array(pool).min_items(1).max_items(8).list_map(&["name"])
}

fn cluster_spec(location_field: Option<&str>) -> Schema {
    let s = object();
    let s = match location_field {
        Some(f) => s.req(f, name_len(32)),
        None => s,
    };
    s.prop("kubernetesVersion", removed_version())
        .prop("credentials", credentials_ref())
}

fn secrets_status(types: &[&str], with_namespace: bool) -> Schema {
    let item = object()
        .req("type", one_of(types))
        .req("name", string().max_len(253))
        .req("key", string().max_len(253));
    let item = if with_namespace {
        item.prop("namespace", string().max_len(253))
    } else {
        item
    };
    array(item)
}

fn cloud_status(types: &[&str], with_namespace: bool, cache: bool) -> Schema {
    let s = object().prop("secrets", secrets_status(types, with_namespace));
    let s = if cache {
        s.prop(
            "cache",
            object().prop("storageClassName", string().max_len(253)),
        )
    } else {
        s
    };
    s.prop("conditions", conditions())
}

/// EKSCluster.
pub fn eks_cluster() -> (Schema, Schema) {
    let pool = pool_base(name_len(40))
        .req("instanceType", name_len(63))
        .prop("diskSizeGb", disk())
        .prop("nodeCount", node_count(0, Some(1)))
        .prop("minNodeCount", node_count(0, Some(0)))
        .prop("maxNodeCount", node_count(0, Some(8)))
        .prop("gpu", accelerator_type())
        .prop(
            "capacityBlock",
            object().req(
                "capacityReservationId",
                string_len(4, 64).pattern("^cr-[0-9a-f]+$"),
            ),
        )
        .prop("zones", zones(8, 63))
        .prop("fabric", one_of(&["None", "EFA"]).default(json!("None")));
    let spec = cluster_spec(Some("region"))
        .prop(
            "networking",
            object()
                .prop(
                    "vpcCidr",
                    string().max_len(18).default(json!("10.0.0.0/16")),
                )
                .prop(
                    "subnetCidrs",
                    array(string().max_len(18))
                        .min_items(2)
                        .max_items(6)
                        .default(json!(["10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20"])),
                ),
        )
        .req("nodePools", pools(zones_required(gpu_required(pool))));
    (spec, cloud_status(&["Kubeconfig"], false, true))
}

/// GKECluster.
pub fn gke_cluster() -> (Schema, Schema) {
    let pool = pool_base(name_len(40))
        .req("machineType", name_len(63))
        .prop("diskSizeGb", disk())
        .prop("nodeCount", node_count(0, Some(1)))
        .prop("minNodeCount", node_count(0, Some(0)))
        .prop("maxNodeCount", node_count(0, Some(8)))
        .prop(
            "gpu",
            accelerator_type().prop("acceleratorCount", int_range(1, 16).default(json!(1))),
        )
        .prop("zones", zones(8, 63));
    let spec = cluster_spec(Some("region"))
        .prop(
            "networking",
            object()
                .prop(
                    "podCidr",
                    string().max_len(18).default(json!("10.1.0.0/16")),
                )
                .prop(
                    "serviceCidr",
                    string().max_len(18).default(json!("10.2.0.0/16")),
                )
                .prop(
                    "nodeCidr",
                    string().max_len(18).default(json!("10.0.0.0/24")),
                ),
        )
        .req("nodePools", pools(zones_required(gpu_required(pool))));
    (
        spec,
        cloud_status(&["Kubeconfig", "GoogleApplicationCredentials"], false, true),
    )
}

/// AKSCluster.
pub fn aks_cluster() -> (Schema, Schema) {
    let pool = pool_base(name_len(12).pattern("^[a-z][a-z0-9]{0,11}$"))
        .req("vmSize", name_len(63))
        .prop("diskSizeGb", disk())
        .prop("nodeCount", node_count(0, Some(1)))
        .prop("minNodeCount", node_count(0, Some(0)))
        .prop("maxNodeCount", node_count(0, Some(8)))
        .prop("zones", zones(3, 8))
        .prop("gpu", accelerator_type())
        .prop(
            "fabric",
            one_of(&["None", "InfiniBand"]).default(json!("None")),
        );
    let spec = cluster_spec(Some("location"))
        .prop(
            "networking",
            object()
                .prop(
                    "vnetCidr",
                    string().max_len(18).default(json!("10.0.0.0/16")),
                )
                .prop(
                    "subnetCidr",
                    string().max_len(18).default(json!("10.0.0.0/20")),
                ),
        )
        .req("nodePools", pools(gpu_required(pool)));
    (spec, cloud_status(&["Kubeconfig"], false, true))
}

/// NebiusCluster.
pub fn nebius_cluster() -> (Schema, Schema) {
    let fabric = object()
        .prop(
            "type",
            one_of(&["None", "InfiniBand"]).default(json!("None")),
        )
        .prop("infiniband", object().req("fabric", name_len(63)))
        .rule(
            "self.type != 'InfiniBand' || has(self.infiniband)",
            "infiniband is required when type is InfiniBand",
        )
        .rule(
            "!has(self.infiniband) || self.type == 'InfiniBand'",
            "infiniband may only be set when type is InfiniBand",
        );
    let pool = pool_base(name_len(40))
        .req("platform", name_len(63))
        .req("preset", name_len(63))
        .prop("diskSizeGb", disk())
        .prop("nodeCount", node_count(0, Some(1)))
        .prop("minNodeCount", node_count(0, None))
        .prop("maxNodeCount", node_count(1, None))
        .prop(
            "gpu",
            accelerator_type().prop("driversPreset", name_len(63).default(json!("cuda13.0"))),
        )
        .prop("fabric", fabric);
    let spec = cluster_spec(None).req("nodePools", pools(min_requires_max(gpu_required(pool))));
    (
        spec,
        cloud_status(
            &["Kubeconfig", "NebiusServiceAccountCredentials"],
            true,
            true,
        ),
    )
}

/// VultrCluster.
pub fn vultr_cluster() -> (Schema, Schema) {
    let pool = pool_base(name_len(40))
        .req("plan", name_len(63))
        .prop("nodeCount", node_count(1, Some(1)))
        .prop("minNodeCount", node_count(1, None))
        .prop("maxNodeCount", node_count(1, None))
        .prop("gpu", accelerator_type());
    let spec =
        cluster_spec(Some("region")).req("nodePools", pools(min_requires_max(gpu_required(pool))));
    (spec, cloud_status(&["Kubeconfig"], false, false))
}
