//! VultrCluster → Vultr managed resources (`behavior.md` §9
//! compose-vultr-cluster, `api.md` §10.5, §10.6).
//!
//! A VKE cluster with the injected `system` pool inline and one node pool
//! per GPU pool. Vultr has no RWX storage, so the cluster publishes no cache
//! class and model caches cannot stage there. No provider-helm: nothing is
//! installed beyond the serving stack.
//!
//! Not composed: the original's observe-only `gpu-observer` Object, which
//! holds readiness until the GPU operator's validator DaemonSet is ready.

use modelplane_api::labels;
use modelplane_api::types::{VultrCluster, VultrNodePool};
use serde_json::json;

use super::{Builder, GPU_TAINT_KEY};
use crate::Composition;

const VKE: &str = "vke.vultr.m.upbound.io/v1beta1";
const SYSTEM_PLAN: &str = "vc2-6c-16gb";

/// What composing a VultrCluster reads.
#[derive(Clone, Copy, Debug)]
pub struct VultrInputs<'a> {
    /// The XR.
    pub cluster: &'a VultrCluster,
    /// The VKE cluster is observed Ready.
    pub control_plane_ready: bool,
}

fn node_pool(b: &mut Builder<'_>, pool: &VultrNodePool) {
    let mut for_provider = json!({
        "clusterIdRef": b.reference("cluster"),
        "label": pool.name,
        "plan": pool.plan,
        "nodeQuantity": pool.size.node_count.unwrap_or(1),
    });
    // Autoscaling only when the pool gives its bounds.
    if let (Some(min), Some(max)) = (pool.size.min_node_count, pool.size.max_node_count) {
        for_provider["autoScaler"] = json!(true);
        for_provider["minNodes"] = json!(min);
        for_provider["maxNodes"] = json!(max);
    }
    let mut node_labels = json!({ labels::POOL: pool.name });
    if let Some(gpu) = &pool.gpu {
        node_labels[labels::GPU] = json!(gpu.accelerator_type);
        for_provider["taints"] =
            json!([{ "key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule" }]);
    }
    for_provider["labels"] = node_labels;
    b.managed(
        VKE,
        "KubernetesNodePool",
        &format!("pool-{}", pool.name),
        for_provider,
    );
}

/// Composes a VultrCluster.
pub fn compose_vultr_cluster(inputs: VultrInputs<'_>) -> Composition {
    let xr = inputs.cluster;
    let name = xr.metadata.name.as_deref().unwrap_or_default();
    let namespace = xr
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(labels::SYSTEM_NAMESPACE);
    let spec = &xr.spec;
    let mut b = Builder::new(name, namespace, spec.credentials.as_ref());
    let kubeconfig = b.name("kubeconfig");
    b.managed(
        VKE,
        "Kubernetes",
        "cluster",
        json!({
            "region": spec.region,
            "label": name,
            // Vultr honours changes to the inline pool only at creation.
            "nodePools": {
                "label": "system",
                "plan": SYSTEM_PLAN,
                "nodeQuantity": 1,
                "autoScaler": true,
                "minNodes": 1,
                "maxNodes": 2,
                "labels": { labels::POOL: "system" },
            },
        }),
    );
    b.with_connection_secret(&kubeconfig);
    for pool in spec.node_pools.iter().filter(|p| p.name != "system") {
        node_pool(&mut b, pool);
    }
    let mut out = Composition::default();
    if inputs.control_plane_ready {
        out.status = Some(json!({
            "secrets": [{ "type": "Kubeconfig", "name": kubeconfig, "key": "kubeconfig" }],
        }));
    }
    out.desired = b.out;
    out
}
