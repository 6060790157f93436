//! Schemas of the platform team's kinds: InferenceGateway, InferenceClass,
//! InferenceCluster.

use serde_json::json;

use super::common::*;
use crate::schema::*;

/// InferenceGateway: the control plane's single OpenAI-compatible front door.
pub fn inference_gateway() -> (Schema, Schema) {
    let traefik = object()
        .req(
            "version",
            string().doc("Traefik Helm chart version, e.g. 40.2.0."),
        )
        .prop(
            "loadBalancer",
            one_of(&["MetalLB"]).doc("MetalLB for kind or bare metal; omit on clouds."),
        )
        .prop(
            "metallb",
            object().req(
                "addressPool",
                string().doc("IP range, e.g. 172.18.255.200-172.18.255.250."),
            ),
        )
        .rule(
            "!has(self.loadBalancer) || self.loadBalancer != 'MetalLB' || has(self.metallb)",
            "metallb is required when loadBalancer is MetalLB",
        )
        .doc("Traefik settings; required when backend is Traefik.");
    let spec = object()
        .prop(
            "backend",
            one_of(&["Modelplane", "Traefik"])
                .default(json!("Modelplane"))
                .doc("Modelplane's built-in fleet gateway, or Traefik with Gateway API routes."),
        )
        .prop("traefik", traefik)
        .rule(
            "self.backend != 'Traefik' || has(self.traefik)",
            "traefik is required when backend is Traefik",
        );
    let status = object()
        .prop(
            "address",
            string().doc("External address of the fleet gateway."),
        )
        .prop("conditions", conditions());
    (spec, status)
}

fn provisioning_accelerator() -> Schema {
    object()
        .req(
            "type",
            name_len(63)
                .doc("Accelerator type, e.g. nvidia-l4; becomes the modelplane.ai/gpu node label."),
        )
        .req(
            "count",
            int_range(1, 16).doc("Accelerators per node (used on GKE)."),
        )
}

fn disk_size() -> Schema {
    integer()
        .minimum(10)
        .default(json!(100))
        .doc("Boot disk size in GB.")
}

/// InferenceClass: a reusable hardware recipe for one GPU node pool.
pub fn inference_class() -> (Schema, Schema) {
    let gke = object()
        .req("machineType", string().min_len(1))
        .prop("diskSizeGb", disk_size())
        .req("accelerator", provisioning_accelerator());
    let eks = object()
        .req("instanceType", string().min_len(1))
        .prop("diskSizeGb", disk_size())
        .req("accelerator", provisioning_accelerator());
    let aks = object()
        .req("vmSize", string().min_len(1))
        .prop("diskSizeGb", disk_size())
        .req("accelerator", provisioning_accelerator());
    let nebius = object()
        .req("platform", name_len(63).doc("e.g. gpu-h100-sxm"))
        .req("preset", name_len(63).doc("e.g. 8gpu-128vcpu-1600gb"))
        .prop("diskSizeGb", disk_size())
        .prop("driversPreset", name_len(63).default(json!("cuda13.0")))
        .req("accelerator", provisioning_accelerator());
    let vultr = object()
        .req("plan", name_len(63).doc("e.g. vcg-l40s-16c-180g-48vram"))
        .req("accelerator", provisioning_accelerator());
    let mut provisioning = object()
        .req(
            "provider",
            one_of(&["GKE", "EKS", "AKS", "Nebius", "Vultr"]).doc("Cloud that builds this pool."),
        )
        .prop("gke", gke)
        .prop("eks", eks)
        .prop("aks", aks)
        .prop("nebius", nebius)
        .prop("vultr", vultr)
        .doc("How a provisioned InferenceCluster builds this pool; omit for bring-your-own pools.");
    for (provider, block) in [
        ("GKE", "gke"),
        ("EKS", "eks"),
        ("AKS", "aks"),
        ("Nebius", "nebius"),
        ("Vultr", "vultr"),
    ] {
        provisioning = provisioning.rule(
            &format!("self.provider != '{provider}' || has(self.{block})"),
            &format!("{block} is required when provider is {provider}"),
        );
    }
    let spec = object()
        .prop("description", string().doc("Free text."))
        .prop("provisioning", provisioning)
        .req(
            "devices",
            array(class_device())
                .min_items(1)
                .max_items(16)
                .list_map(&["name"])
                .doc("The devices each node of the pool offers: the scheduling contract."),
        );
    let status = object().prop("conditions", conditions());
    (spec, status)
}

fn cloud_block(region_field: &str) -> Schema {
    object()
        .req(region_field, name_len(32))
        .prop("kubernetesVersion", removed_version())
        .prop("credentials", credentials_ref())
}

fn existing_block() -> Schema {
    object()
        .req(
            "secretRef",
            secret_key_ref(Some("kubeconfig"))
                .doc("Secret in modelplane-system holding the cluster's kubeconfig."),
        )
        .prop(
            "identitySecretRef",
            object()
                .req("name", name_len(253))
                .prop("key", name_len(253).default(json!("private_key")))
                .prop(
                    "type",
                    one_of(&[
                        "GoogleApplicationCredentials",
                        "AWSWebIdentityCredentials",
                        "NebiusServiceAccountCredentials",
                    ])
                    .default(json!("GoogleApplicationCredentials")),
                )
                .doc("Cloud identity used instead of the kubeconfig's credentials."),
        )
        .prop(
            "cache",
            object().prop(
                "storageClassName",
                name_len(253).doc("An existing RWX StorageClass for model caches."),
            ),
        )
}

fn node_pool() -> Schema {
    let fabric = object()
        .prop(
            "type",
            one_of(&["None", "EFA", "InfiniBand"]).default(json!("None")),
        )
        .prop(
            "infiniband",
            object().req(
                "fabric",
                name_len(63).doc("Existing fabric id, e.g. fabric-2."),
            ),
        )
        .rule(
            "!has(self.infiniband) || self.type == 'InfiniBand'",
            "infiniband may only be set when type is InfiniBand",
        )
        .doc("High-speed interconnect between the pool's nodes.");
    object()
        .req(
            "name",
            string()
                .max_len(40)
                .doc("Pool name; nodes carry the label modelplane.ai/pool=<name>."),
        )
        .req("className", name_len(253).doc("Name of an InferenceClass."))
        .prop("nodeCount", integer().minimum(0).default(json!(1)))
        .prop("minNodeCount", integer().minimum(0))
        .prop(
            "maxNodeCount",
            integer()
                .minimum(1)
                .doc("Autoscaling maximum; omit for a fixed-size pool."),
        )
        .prop("zones", array(string()))
        .prop(
            "capacityBlock",
            object()
                .req(
                    "capacityReservationId",
                    string_len(4, 64).pattern("^cr-[0-9a-f]+$"),
                )
                .doc("An EC2 capacity block (EKS only)."),
        )
        .prop("fabric", fabric)
}

fn gpu_pool_status() -> Schema {
    object()
        .req("name", string())
        .prop("nodes", integer())
        .prop(
            "devices",
            array(status_device()).max_items(16).list_map(&["name"]),
        )
}

/// InferenceCluster: one Kubernetes cluster registered as fleet capacity.
pub fn inference_cluster() -> (Schema, Schema) {
    let mut cluster = object()
        .req(
            "source",
            one_of(&["GKE", "EKS", "AKS", "Nebius", "Vultr", "Existing"])
                .doc("Cloud to provision on, or Existing for a cluster you already run."),
        )
        .prop("existing", existing_block())
        .prop("gke", cloud_block("region"))
        .prop("eks", cloud_block("region"))
        .prop("aks", cloud_block("location"))
        .prop(
            "nebius",
            object()
                .prop("kubernetesVersion", removed_version())
                .prop("credentials", credentials_ref()),
        )
        .prop("vultr", cloud_block("region"));
    for (source, block) in [
        ("Existing", "existing"),
        ("GKE", "gke"),
        ("EKS", "eks"),
        ("AKS", "aks"),
        ("Nebius", "nebius"),
        ("Vultr", "vultr"),
    ] {
        cluster = cluster.rule(
            &format!("self.source != '{source}' || has(self.{block})"),
            &format!("{block} is required when source is {source}"),
        );
    }
    let spec = object()
        .prop(
            "stack",
            one_of(&["Standard", "Dynamo"])
                .default(json!("Standard"))
                .rule(
                    "self == oldSelf",
                    "stack is immutable; create a new InferenceCluster to change stacks",
                )
                .doc("Serving stack: Standard (LeaderWorkerSet) or Dynamo (Grove, KAI Scheduler, ModelExpress). Immutable."),
        )
        .req("cluster", cluster.doc("Where the cluster comes from."))
        .prop(
            "taints",
            array(
                object()
                    .req("key", string().min_len(1))
                    .prop("value", string())
                    .req("effect", one_of(&["NoSchedule", "NoExecute"])),
            )
            .list_map(&["key", "effect"])
            .doc("Cluster-wide taints; replicas must tolerate them."),
        )
        .prop(
            "nodePools",
            array(node_pool())
                .min_items(1)
                .max_items(8)
                .list_map(&["name"])
                .doc("GPU node pools, each built from an InferenceClass."),
        )
        .rule(
            "self.cluster.source != 'Nebius' || !has(self.nodePools) || self.nodePools.all(p, !has(p.fabric) || p.fabric.type != 'InfiniBand' || has(p.fabric.infiniband))",
            "an InfiniBand node pool on Nebius must set fabric.infiniband",
        );
    let status = object()
        .prop("providerConfigRef", object().prop("name", string()))
        .prop("gateway", object().prop("address", string()))
        .prop(
            "cache",
            object().prop("storageClassName", string().max_len(253)),
        )
        .prop(
            "gpuPools",
            array(gpu_pool_status()).max_items(8).list_map(&["name"]),
        )
        .prop("namespace", string())
        .prop("conditions", conditions());
    (spec, status)
}
