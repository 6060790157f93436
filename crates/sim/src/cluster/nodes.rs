//! The nodes a cloud pool brings, as the cloud's node images register them:
//! the pool's labels and taints, the cloud's own labels, capacity from the
//! machine type, and a kubelet posting Ready. Pure.

use serde_json::{Value, json};

use crate::cloud::Pool;

/// CPU and memory of a machine type, as its cloud publishes them.
fn machine(instance_type: &str) -> (u32, &'static str) {
    match instance_type {
        "g6.xlarge" => (4, "16Gi"),
        "g6.12xlarge" => (48, "192Gi"),
        "p5.48xlarge" | "p5e.48xlarge" | "p5en.48xlarge" => (192, "2048Gi"),
        "p4d.24xlarge" => (96, "1152Gi"),
        "m6i.xlarge" | "e2-standard-4" => (4, "16Gi"),
        "a3-highgpu-8g" | "a3-megagpu-8g" => (208, "1872Gi"),
        "Standard_ND96isr_H100_v5" => (96, "1900Gi"),
        _ => (8, "32Gi"),
    }
}

/// The label the cloud puts on a node naming its pool.
fn cloud_pool_label(provider: &str) -> Option<&'static str> {
    match provider {
        "provider-aws-eks" => Some("eks.amazonaws.com/nodegroup"),
        "provider-gcp-container" => Some("cloud.google.com/gke-nodepool"),
        "provider-azure-containerservice" => Some("kubernetes.azure.com/agentpool"),
        "provider-vultr" => Some("vke.vultr.com/node-pool"),
        "provider-nebius" => Some("mk8s.nebius.ai/node-group"),
        _ => None,
    }
}

/// The name of node `index` of pool `pool`.
pub fn node_name(pool: &str, index: u32) -> String {
    format!("{pool}-node-{index}")
}

/// The nodes a pool registers: alike but for their names and zones, so
/// built once per pool and stamped for each node (built afresh, node by
/// node, they were a sixth of the simulator's CPU at 128,000 nodes).
pub struct PoolNodes {
    template: Value,
    pool: String,
    resource: String,
    zones: Vec<String>,
}

impl PoolNodes {
    /// The nodes of `pool`, `resource` being the cloud resource's name, as
    /// their kubelets register them at `timestamp` (started, posting Ready).
    pub fn new(
        pool: &Pool,
        resource: &str,
        provider: &str,
        kubelet_port: u16,
        timestamp: &str,
    ) -> PoolNodes {
        PoolNodes {
            template: template(pool, resource, provider, kubelet_port, timestamp),
            pool: pool.name.clone(),
            resource: resource.to_string(),
            zones: pool.zones.clone(),
        }
    }

    /// Node `index`, with its status.
    pub fn node(&self, index: u32) -> Value {
        let name = node_name(&self.pool, index);
        let mut node = self.template.clone();
        node["metadata"]["labels"]["kubernetes.io/hostname"] = json!(name);
        if !self.zones.is_empty() {
            node["metadata"]["labels"]["topology.kubernetes.io/zone"] =
                json!(self.zones[index as usize % self.zones.len()]);
        }
        node["spec"]["providerID"] = json!(format!("sim://{}/{name}", self.resource));
        node["status"]["addresses"][1]["address"] = json!(name);
        node["metadata"]["name"] = json!(name);
        node
    }
}

/// What every node of a pool has: its labels and taints, capacity from the
/// machine type, a kubelet posting Ready.
fn template(
    pool: &Pool,
    resource: &str,
    provider: &str,
    kubelet_port: u16,
    timestamp: &str,
) -> Value {
    let mut labels = json!({
        "kubernetes.io/hostname": "",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": pool.instance_type,
    });
    for (k, v) in &pool.labels {
        labels[k] = json!(v);
    }
    if let Some(key) = cloud_pool_label(provider) {
        labels[key] = json!(resource);
    }
    let taints: Vec<Value> = pool
        .taints
        .iter()
        .map(|t| json!({ "key": t.key, "value": t.value, "effect": t.effect }))
        .collect();
    let (cpu, memory) = machine(&pool.instance_type);
    let capacity = json!({ "cpu": cpu.to_string(), "memory": memory, "pods": "110", "ephemeral-storage": "500Gi" });
    let mut spec = json!({ "providerID": "" });
    if !taints.is_empty() {
        spec["taints"] = json!(taints);
    }
    let managed = serde_json::to_string(&taints).unwrap_or_default();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": "", "labels": labels, "annotations": { MANAGED_TAINTS: managed } },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": conditions(true, timestamp),
            "addresses": [
                // Every kubelet of a simulated cluster answers on one
                // loopback port (the API server asks it for pod logs).
                { "type": "InternalIP", "address": "127.0.0.1" },
                { "type": "Hostname", "address": "" },
            ],
            "daemonEndpoints": { "kubeletEndpoint": { "Port": kubelet_port } },
            "nodeInfo": {
                "kubeletVersion": "v1.34.1", "kubeProxyVersion": "v1.34.1",
                "containerRuntimeVersion": "containerd://2.1.4", "operatingSystem": "linux",
                "architecture": "amd64", "osImage": "Simulated Linux",
                "kernelVersion": "6.1.0", "machineID": "", "systemUUID": "", "bootID": "",
            },
        },
    })
}

/// A node's conditions: as its kubelet posts them, or, once it went
/// silent, as the node controller marks them (every one `Unknown`).
pub fn conditions(kubelet_posting: bool, timestamp: &str) -> Value {
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({ "type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": timestamp, "lastTransitionTime": timestamp })
    };
    let silent = |type_: &str| {
        condition(
            type_,
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        )
    };
    if !kubelet_posting {
        return json!(["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"].map(silent));
    }
    json!([
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ])
}

/// What the simulated controllers read of a node, kept in their snapshot in
/// place of the whole node (a client-go informer's transform does the same):
/// its identity, labels and annotations, its spec, and whether each
/// condition holds. A thousand clusters of 128 nodes held 15 KB a node
/// otherwise, most of the simulator's memory.
pub fn trim(node: &mut Value) {
    let Some(object) = node.as_object_mut() else {
        return;
    };
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| {
            matches!(
                k.as_str(),
                "name" | "uid" | "labels" | "annotations" | "deletionTimestamp"
            )
        });
    }
    if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
        status.retain(|k, _| k == "conditions");
        for c in status
            .get_mut("conditions")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            c.retain(|k, _| k == "type" || k == "status");
        }
    }
}

/// The taint the node controller puts on a node whose kubelet went silent.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// The annotation on a node listing the taints the simulation put there
/// (its pool's, its faults', the node controller's), so it takes back only
/// its own: a taint `kubectl taint` adds stays, as on a real node.
pub const MANAGED_TAINTS: &str = "sim.modelplane.ai/managed-taints";

/// The taints of `node` the simulation manages: as it last recorded them,
/// else (a node just registered) its pool's.
fn managed_before(node: &Value, pool: &[Value]) -> Vec<Value> {
    node["metadata"]["annotations"][MANAGED_TAINTS]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_else(|| pool.to_vec())
}

/// Whether two taints are the same one (key and effect name a taint).
fn same_taint(a: &Value, b: &Value) -> bool {
    a["key"] == b["key"] && a["effect"] == b["effect"]
}

/// What node faults change: a silent kubelet's node goes `Ready=Unknown`
/// and gets the unreachable taint, and its pods are marked not Ready (the
/// node controller's part); a taint fault adds its taint. A healed fault
/// is undone: its taint goes, and the pool's and the users' stay.
pub fn fault_writes(
    world: &super::world::World<'_>,
    pool_taints: &std::collections::BTreeMap<String, Vec<crate::cloud::Taint>>,
    faults: &[crate::faults::Fault],
) -> Vec<super::world::Write> {
    use super::world::{ClusterKind, name};
    use crate::faults::Fault;
    let mut out = Vec::new();
    // Each pool's taints, and how a node records them, once per pass.
    let by_pool: std::collections::BTreeMap<&str, (Vec<Value>, String)> = pool_taints
        .iter()
        .map(|(pool, taints)| {
            let taints: Vec<Value> = taints
                .iter()
                .map(|t| json!({ "key": t.key, "value": t.value, "effect": t.effect }))
                .collect();
            let record = serde_json::to_string(&taints).unwrap_or_default();
            (pool.as_str(), (taints, record))
        })
        .collect();
    let no_taints = (Vec::new(), "[]".to_string());
    for node in world.all(ClusterKind::Node) {
        let node_name = name(node);
        let pool = node["metadata"]["labels"][modelplane_api::labels::POOL]
            .as_str()
            .unwrap_or_default();
        let faulty = faults.iter().any(|f| match f {
            Fault::NodeNotReady { node } | Fault::NodeTaint { node, .. } => node == node_name,
            _ => false,
        });
        let silent = faults
            .iter()
            .any(|f| matches!(f, Fault::NodeNotReady { node } if node == node_name));
        let (pool_taints, record) = by_pool.get(pool).unwrap_or(&no_taints);
        // Most nodes, most passes: no fault, and the node has its pool's
        // taints as it recorded them. Nothing to change in its taints.
        let as_recorded = !faulty
            && node["metadata"]["annotations"][MANAGED_TAINTS].as_str() == Some(record.as_str())
            && node["spec"]["taints"]
                .as_array()
                .map_or(pool_taints.is_empty(), |t| t == pool_taints);
        if !as_recorded {
            out.extend(taint_write(node, pool_taints, faults, silent));
        }
        out.extend(condition_write(node, silent, world.timestamp));
        if silent {
            out.extend(silent_node_pods(world, node_name));
        }
    }
    out
}

/// The taints `node` should have (its pool's, its faults', the node
/// controller's) written if they are not what it has.
fn taint_write(
    node: &Value,
    pool_taints: &[Value],
    faults: &[crate::faults::Fault],
    silent: bool,
) -> Option<super::world::Write> {
    use super::world::{ClusterKind, Write, name};
    use crate::faults::Fault;
    let node_name = name(node);
    let mut taints = pool_taints.to_vec();
    for fault in faults {
        if let Fault::NodeTaint {
            node,
            key,
            value,
            effect,
        } = fault
            && node == node_name
        {
            taints.push(json!({ "key": key, "value": value, "effect": effect }));
        }
    }
    if silent {
        taints.push(json!({ "key": UNREACHABLE_TAINT, "effect": "NoSchedule" }));
    }
    let current = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let before = managed_before(node, pool_taints);
    let managed = taints;
    let mut taints: Vec<Value> = current
        .iter()
        .filter(|t| !before.iter().any(|m| same_taint(t, m)))
        .filter(|t| !managed.iter().any(|m| same_taint(t, m)))
        .cloned()
        .collect();
    taints.extend(managed.iter().cloned());
    let strip = |list: &[Value]| -> Vec<(Value, Value, Value)> {
        let mut v: Vec<_> = list
            .iter()
            .map(|t| (t["key"].clone(), t["value"].clone(), t["effect"].clone()))
            .collect();
        v.sort_by_key(|t| format!("{t:?}"));
        v
    };
    if strip(&current) == strip(&taints) && strip(&before) == strip(&managed) {
        return None;
    }
    let record = serde_json::to_string(&managed).unwrap_or_default();
    Some(Write::Patch {
        kind: ClusterKind::Node,
        namespace: String::new(),
        name: node_name.to_string(),
        patch: json!({
            "metadata": { "uid": node["metadata"]["uid"], "annotations": { MANAGED_TAINTS: record } },
            "spec": { "taints": taints },
        }),
    })
}

/// The conditions `node` should show written if its Ready one differs:
/// `Unknown` once its kubelet went silent, `True` while it posts.
fn condition_write(node: &Value, silent: bool, timestamp: &str) -> Option<super::world::Write> {
    use super::world::{ClusterKind, Write};
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map_or(&Value::Null, |c| &c["status"]);
    let wanted = if silent { "Unknown" } else { "True" };
    if ready == wanted || !node["status"].is_object() {
        return None;
    }
    // Only the conditions, patched as a kubelet posts them: the rest of the
    // status is its registration, which this leaves as is.
    Some(Write::StatusPatch {
        kind: ClusterKind::Node,
        object: node.clone(),
        status: json!({ "conditions": conditions(!silent, timestamp) }),
        manager: "kubelet",
    })
}

/// The node controller's part for a silent node: its Ready pods marked not
/// Ready, each with an event.
fn silent_node_pods(world: &super::world::World<'_>, node_name: &str) -> Vec<super::world::Write> {
    use super::world::{ClusterKind, Write, name, namespace};
    let mut out = Vec::new();
    for pod in world
        .all(ClusterKind::Pod)
        .filter(|p| p["spec"]["nodeName"] == node_name)
    {
        let ready = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if ready {
            out.push(Write::Status {
                kind: ClusterKind::Pod,
                object: pod.clone(),
                status: json!({ "conditions": [{ "type": "Ready", "status": "False", "reason": "NodeNotReady" }] }),
                manager: "node-controller",
            });
            out.push(Write::Event {
                object: pod.clone(),
                type_: "Warning",
                reason: "NodeNotReady".into(),
                message: format!("Node is not ready (pod {}/{})", namespace(pod), name(pod)),
                source: "node-controller",
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::Taint;
    use crate::cluster::world::{ClusterKind, Snapshot};
    use crate::faults::Fault;
    use crate::informer::Change;

    fn taints_after(node: Value, faults: &[Fault]) -> Vec<Value> {
        let mut snapshot = Snapshot::default();
        snapshot.change(Change::Apply(ClusterKind::Node, node.clone()));
        let world = super::super::world::World {
            snapshot: &snapshot,
            timestamp: "t",
        };
        let pool_taints = [(
            "l4".to_string(),
            vec![Taint {
                key: "nvidia.com/gpu".into(),
                value: "true".into(),
                effect: "NoSchedule".into(),
            }],
        )]
        .into();
        let writes = fault_writes(&world, &pool_taints, faults);
        match writes.first() {
            Some(super::super::world::Write::Patch { patch, .. }) => {
                patch["spec"]["taints"].as_array().cloned().unwrap()
            }
            _ => node["spec"]["taints"].as_array().cloned().unwrap(),
        }
    }

    fn l4_node(taints: Value, annotations: Value) -> Value {
        json!({ "metadata": { "name": "l4-node-0", "uid": "n0",
                "labels": { "modelplane.ai/pool": "l4" }, "annotations": annotations },
            "spec": { "taints": taints },
            "status": { "conditions": [{ "type": "Ready", "status": "True" }] } })
    }

    #[test]
    fn a_taint_a_user_puts_on_a_node_stays_and_a_healed_faults_goes() {
        let gpu = json!({ "key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule" });
        let drain = json!({ "key": "drain", "value": "now", "effect": "NoExecute" });
        // `kubectl taint nodes l4-node-0 drain=now:NoExecute` is not undone.
        let kept = taints_after(l4_node(json!([gpu, drain]), json!({})), &[]);
        assert!(kept.contains(&drain), "{kept:?}");
        assert!(kept.contains(&gpu), "{kept:?}");
        // A fault's taint is the simulation's: healing the fault removes it.
        let fault = Fault::NodeTaint {
            node: "l4-node-0".into(),
            key: "sim.modelplane.ai/drain".into(),
            value: String::new(),
            effect: "NoExecute".into(),
        };
        let with_fault = taints_after(l4_node(json!([gpu, drain]), json!({})), &[fault]);
        assert_eq!(with_fault.len(), 3, "{with_fault:?}");
        let node = l4_node(
            json!(with_fault),
            json!({ MANAGED_TAINTS: serde_json::to_string(&json!([gpu, with_fault[2]])).unwrap() }),
        );
        let healed = taints_after(node, &[]);
        assert_eq!(healed.len(), 2, "{healed:?}");
        assert!(
            healed.contains(&drain) && healed.contains(&gpu),
            "{healed:?}"
        );
    }

    #[test]
    fn a_gpu_pool_node_has_the_pools_labels_taints_and_the_clouds_own() {
        let pool = Pool {
            name: "h200".into(),
            count: 2,
            labels: [("modelplane.ai/pool".to_string(), "h200".to_string())].into(),
            taints: vec![Taint {
                key: "nvidia.com/gpu".into(),
                value: "true".into(),
                effect: "NoSchedule".into(),
            }],
            instance_type: "p5en.48xlarge".into(),
            zones: vec!["us-east-1a".into()],
        };
        let nodes = PoolNodes::new(
            &pool,
            "us-east-pool-h200-297ac",
            "provider-aws-eks",
            10250,
            "t",
        );
        let node = nodes.node(1);
        assert_eq!(node["metadata"]["name"], "h200-node-1");
        assert_eq!(
            node["metadata"]["labels"]["kubernetes.io/hostname"],
            "h200-node-1"
        );
        assert_eq!(
            node["spec"]["providerID"],
            "sim://us-east-pool-h200-297ac/h200-node-1"
        );
        assert_eq!(node["status"]["addresses"][1]["address"], "h200-node-1");
        assert_ne!(nodes.node(0)["metadata"]["name"], node["metadata"]["name"]);
        let labels = &node["metadata"]["labels"];
        assert_eq!(labels["modelplane.ai/pool"], "h200");
        assert_eq!(
            labels["eks.amazonaws.com/nodegroup"],
            "us-east-pool-h200-297ac"
        );
        assert_eq!(labels["topology.kubernetes.io/zone"], "us-east-1a");
        assert_eq!(labels["node.kubernetes.io/instance-type"], "p5en.48xlarge");
        assert_eq!(node["spec"]["taints"][0]["effect"], "NoSchedule");
        assert_eq!(node["status"]["capacity"]["cpu"], "192");
        assert_eq!(node["status"]["conditions"][3]["type"], "Ready");
        assert_eq!(node["status"]["conditions"][3]["status"], "True");
    }
}
