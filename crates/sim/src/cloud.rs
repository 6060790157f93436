//! The clouds' stage table: how a managed resource moves from created to
//! available as its provider would report it, and what a cluster or node
//! pool resource stands for. Pure: the time and everything observed are
//! inputs.
//!
//! A managed resource is reconciled only while its provider runs. Then it
//! waits for what it refers to (`…Ref`/`…Refs` fields name sibling resources
//! that must be Ready first, as Crossplane's reference resolution does), is
//! `Synced` and `Creating` for the profile's provisioning time, and becomes
//! `Ready` with its `atProvider` fields — or fails with the cloud's error.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

/// What a managed resource stands for in the simulated cloud.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A Kubernetes control plane: a workload cluster comes into being.
    Cluster,
    /// A pool of nodes in a cluster.
    Pool,
    /// Anything else (networks, roles, addons…): only its status.
    Other,
}

/// The role of `group`'s `kind`.
pub fn role(group: &str, kind: &str) -> Role {
    match (group, kind) {
        ("eks.aws.m.upbound.io", "Cluster")
        | ("container.gcp.m.upbound.io", "Cluster")
        | ("containerservice.azure.m.upbound.io", "KubernetesCluster")
        | ("mk8s.nebius.m.upbound.io", "Cluster")
        | ("vke.vultr.m.upbound.io", "Kubernetes") => Role::Cluster,
        ("eks.aws.m.upbound.io", "NodeGroup")
        | ("container.gcp.m.upbound.io", "NodePool")
        | ("containerservice.azure.m.upbound.io", "KubernetesClusterNodePool")
        | ("mk8s.nebius.m.upbound.io", "NodeGroup")
        | ("vke.vultr.m.upbound.io", "KubernetesNodePool") => Role::Pool,
        _ => Role::Other,
    }
}

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// The nodes a pool resource asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pool {
    /// The pool's name (`modelplane.ai/pool`).
    pub name: String,
    /// How many nodes.
    pub count: u32,
    /// Node labels the pool sets.
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    pub taints: Vec<Taint>,
    /// The cloud's machine type.
    pub instance_type: String,
    /// Zones the nodes spread over (empty: the region's first).
    pub zones: Vec<String>,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

fn labels(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// A cloud API's effect spelling (`NO_SCHEDULE`) as Kubernetes writes it.
fn effect(cloud: &str) -> String {
    match cloud {
        "NO_SCHEDULE" => "NoSchedule".into(),
        "NO_EXECUTE" => "NoExecute".into(),
        "PREFER_NO_SCHEDULE" => "PreferNoSchedule".into(),
        other => other.into(),
    }
}

fn taint_objects(value: &Value) -> Vec<Taint> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| Taint {
            key: t["key"].as_str().unwrap_or_default().into(),
            value: t["value"].as_str().unwrap_or_default().into(),
            effect: effect(t["effect"].as_str().unwrap_or_default()),
        })
        .collect()
}

/// `key=value:Effect`, as AKS takes taints.
fn taint_strings(value: &Value) -> Vec<Taint> {
    strings(value)
        .iter()
        .filter_map(|s| {
            let (kv, effect) = s.split_once(':')?;
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            Some(Taint {
                key: key.into(),
                value: value.into(),
                effect: effect.into(),
            })
        })
        .collect()
}

fn count(value: &Value) -> u32 {
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

/// The pool a pool resource (`role == Pool`) describes, from its
/// `forProvider`: named by its `modelplane.ai/pool` label, else (a pool
/// compose did not write) by the resource's own name, as its nodes are.
pub fn pool(kind: &str, group: &str, resource: &Value) -> Option<Pool> {
    let f = &resource["spec"]["forProvider"];
    let (count, labels, taints, instance_type, zones) = match (group, kind) {
        ("eks.aws.m.upbound.io", "NodeGroup") => (
            count(&f["scalingConfig"]["desiredSize"]),
            labels(&f["labels"]),
            taint_objects(&f["taint"]),
            strings(&f["instanceTypes"]).into_iter().next(),
            Vec::new(),
        ),
        ("container.gcp.m.upbound.io", "NodePool") => {
            let mut taints = taint_objects(&f["nodeConfig"]["taint"]);
            // GKE taints GPU nodes itself.
            if f["nodeConfig"]["guestAccelerator"].is_array() {
                taints.push(Taint {
                    key: "nvidia.com/gpu".into(),
                    value: "present".into(),
                    effect: "NoSchedule".into(),
                });
            }
            (
                count(&f["initialNodeCount"]),
                labels(&f["nodeConfig"]["labels"]),
                taints,
                f["nodeConfig"]["machineType"].as_str().map(str::to_string),
                strings(&f["nodeLocations"]),
            )
        }
        ("containerservice.azure.m.upbound.io", "KubernetesClusterNodePool") => (
            count(&f["nodeCount"]),
            labels(&f["nodeLabels"]),
            taint_strings(&f["nodeTaints"]),
            f["vmSize"].as_str().map(str::to_string),
            strings(&f["zones"]),
        ),
        ("mk8s.nebius.m.upbound.io", "NodeGroup") => (
            f["fixedNodeCount"].as_u64().map_or_else(
                || count(&f["autoscaling"]["minNodeCount"]),
                |_| count(&f["fixedNodeCount"]),
            ),
            labels(&f["template"]["metadata"]["labels"]),
            taint_objects(&f["template"]["taints"]),
            f["template"]["resources"]["preset"]
                .as_str()
                .map(str::to_string),
            Vec::new(),
        ),
        ("vke.vultr.m.upbound.io", "KubernetesNodePool") => (
            count(&f["nodeQuantity"]),
            labels(&f["labels"]),
            taint_objects(&f["taints"]),
            f["plan"].as_str().map(str::to_string),
            Vec::new(),
        ),
        _ => return None,
    };
    let name = labels
        .get(modelplane_api::labels::POOL)
        .map(String::as_str)
        .or(resource["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_string();
    Some(Pool {
        name,
        count,
        labels,
        taints,
        instance_type: instance_type.unwrap_or_default(),
        zones,
    })
}

/// The names a managed resource's `forProvider` refers to, with the field
/// that holds each (`vpcConfig.subnetIdRefs[0]`), in document order.
pub fn references(for_provider: &Value) -> Vec<(String, String)> {
    fn walk(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let at = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    if key.ends_with("Ref")
                        && let Some(name) = child["name"].as_str()
                    {
                        out.push((at, name.to_string()));
                        continue;
                    }
                    if key.ends_with("Refs") {
                        for (i, item) in child.as_array().into_iter().flatten().enumerate() {
                            if let Some(name) = item["name"].as_str() {
                                out.push((format!("{at}[{i}]"), name.to_string()));
                            }
                        }
                        continue;
                    }
                    walk(child, &at, out);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(for_provider, "", &mut out);
    out
}

/// Where a managed resource stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Its provider does not run: nothing reconciles it, no status is written.
    Unreconciled,
    /// Waiting on something it needs (a reference, its provider config).
    Blocked(String),
    /// Being created; available at `ready_at`.
    Creating {
        /// When creation completes.
        ready_at: Duration,
    },
    /// The cloud refused it.
    Failed(String),
    /// Created.
    Available,
}

/// What one step of a managed resource reads.
#[derive(Clone, Debug)]
pub struct Observation<'a> {
    /// The resource as observed.
    pub object: &'a Value,
    /// Its provider's runtime has replicas.
    pub provider_running: bool,
    /// What it waits on, if anything.
    pub blocked: Option<String>,
    /// An injected provisioning failure (the cloud's error).
    pub failure: Option<&'a str>,
    /// When it was first seen unblocked with its provider running.
    pub since: Option<Duration>,
    /// How long the cloud takes to create it.
    pub provisioning: Duration,
    /// Now.
    pub now: Duration,
}

/// The condition `type_` of `object`'s status, if any.
pub fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn is_true(object: &Value, type_: &str) -> bool {
    condition(object, type_).is_some_and(|c| c["status"] == "True")
}

/// Ready, as Crossplane reports it.
pub fn is_ready(object: &Value) -> bool {
    is_true(object, "Ready")
}

/// The phase of an observed managed resource.
pub fn phase(o: &Observation<'_>) -> Phase {
    if !o.provider_running {
        return Phase::Unreconciled;
    }
    // Once created it stays so: a reference or credentials going away later
    // does not un-create a cloud resource.
    if is_ready(o.object) {
        return Phase::Available;
    }
    if let Some(why) = &o.blocked {
        return Phase::Blocked(why.clone());
    }
    if let Some(error) = o.failure {
        return Phase::Failed(error.to_string());
    }
    let ready_at = o.since.unwrap_or(o.now) + o.provisioning;
    if o.now < ready_at {
        Phase::Creating { ready_at }
    } else {
        Phase::Available
    }
}

fn condition_value(type_: &str, status: &str, reason: &str, message: Option<&str>) -> Value {
    let mut c = json!({ "type": type_, "status": status, "reason": reason });
    if let Some(message) = message {
        c["message"] = json!(message);
    }
    c
}

/// The conditions a phase shows (Crossplane's reasons), none when unreconciled.
pub fn conditions(phase: &Phase) -> Vec<Value> {
    match phase {
        Phase::Unreconciled => Vec::new(),
        Phase::Blocked(why) => vec![
            condition_value("Synced", "False", "ReconcileError", Some(why)),
            condition_value("Ready", "False", "Creating", None),
        ],
        Phase::Creating { .. } => vec![
            condition_value("Synced", "True", "ReconcileSuccess", None),
            condition_value("Ready", "False", "Creating", None),
        ],
        Phase::Failed(error) => vec![
            condition_value(
                "Synced",
                "False",
                "ReconcileError",
                Some(&format!("create failed: {error}")),
            ),
            condition_value("Ready", "False", "Creating", None),
        ],
        Phase::Available => vec![
            condition_value("Synced", "True", "ReconcileSuccess", None),
            condition_value("Ready", "True", "Available", None),
        ],
    }
}

/// The `atProvider` fields the cloud reports once a resource exists: its
/// ID (the external name when set) and, for clusters, the endpoint.
pub fn at_provider(object: &Value, endpoint: Option<&str>) -> Value {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let external = object["metadata"]["annotations"]["crossplane.io/external-name"]
        .as_str()
        .unwrap_or(name);
    let kind = object["kind"].as_str().unwrap_or_default();
    let id = match kind {
        // Compose copies this one into a StorageClass: it looks like EFS's.
        "FileSystem" => format!("fs-{}", short_hash(name)),
        _ => external.to_string(),
    };
    let mut out = json!({ "id": id });
    if let Some(endpoint) = endpoint {
        out["endpoint"] = json!(endpoint);
    }
    out
}

/// A stable 17-hex-digit digest of `text` (FNV-1a, as cloud IDs look).
fn short_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:017x}")
}

/// The status to write for `phase`, keeping each unchanged condition's
/// transition time; `None` when what is observed already says it.
pub fn status_update(
    object: &Value,
    phase: &Phase,
    at_provider: Option<Value>,
    timestamp: &str,
) -> Option<Value> {
    let wanted = conditions(phase);
    if wanted.is_empty() {
        return None;
    }
    let mut changed = false;
    let conditions: Vec<Value> = wanted
        .into_iter()
        .map(|mut c| {
            let type_ = c["type"].as_str().unwrap_or_default().to_string();
            let previous = condition(object, &type_);
            let same = previous.is_some_and(|p| {
                p["status"] == c["status"]
                    && p["reason"] == c["reason"]
                    && p["message"] == c["message"]
            });
            let transition = match previous {
                Some(p) if p["status"] == c["status"] => p["lastTransitionTime"].clone(),
                _ => json!(timestamp),
            };
            changed |= !same;
            c["lastTransitionTime"] = transition;
            c
        })
        .collect();
    let at_provider_changed = at_provider
        .as_ref()
        .is_some_and(|a| object["status"]["atProvider"] != *a);
    if !changed && !at_provider_changed {
        return None;
    }
    let mut status = json!({ "conditions": conditions });
    if let Some(a) = at_provider {
        status["atProvider"] = a;
    }
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_group() -> Value {
        json!({
            "apiVersion": "eks.aws.m.upbound.io/v1beta1", "kind": "NodeGroup",
            "metadata": { "name": "us-east-pool-l4-32c24", "namespace": "modelplane-system" },
            "spec": { "forProvider": {
                "clusterNameRef": { "name": "us-east-cluster-2961e" },
                "subnetIdRefs": [{ "name": "a" }, { "name": "b" }],
                "instanceTypes": ["g6.xlarge"],
                "scalingConfig": { "desiredSize": 2, "minSize": 0, "maxSize": 8 },
                "taint": [{ "key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE" }],
                "labels": { "modelplane.ai/pool": "l4", "modelplane.ai/gpu": "nvidia-l4" },
                "launchTemplate": { "name": "not-a-reference", "version": "$Latest" },
            } },
        })
    }

    #[test]
    fn references_are_the_ref_fields_and_nothing_else() {
        assert_eq!(
            references(&node_group()["spec"]["forProvider"]),
            vec![
                (
                    "clusterNameRef".to_string(),
                    "us-east-cluster-2961e".to_string()
                ),
                ("subnetIdRefs[0]".to_string(), "a".to_string()),
                ("subnetIdRefs[1]".to_string(), "b".to_string()),
            ]
        );
    }

    #[test]
    fn an_eks_node_group_is_a_pool_of_tainted_labelled_nodes() {
        let mr = node_group();
        assert_eq!(role("eks.aws.m.upbound.io", "NodeGroup"), Role::Pool);
        let pool = pool("NodeGroup", "eks.aws.m.upbound.io", &mr).expect("a pool");
        assert_eq!(pool.name, "l4");
        assert_eq!(pool.count, 2);
        assert_eq!(pool.instance_type, "g6.xlarge");
        assert_eq!(
            pool.taints,
            vec![Taint {
                key: "nvidia.com/gpu".into(),
                value: "true".into(),
                effect: "NoSchedule".into()
            }]
        );
    }

    #[test]
    fn aks_taints_are_parsed_from_their_string_form() {
        let f = json!({ "nodeCount": 3, "vmSize": "Standard_ND96isr_H100_v5",
            "nodeTaints": ["nvidia.com/gpu=true:NoSchedule"], "nodeLabels": { "modelplane.ai/pool": "h100" } });
        let pool = pool(
            "KubernetesClusterNodePool",
            "containerservice.azure.m.upbound.io",
            &json!({ "spec": { "forProvider": f } }),
        )
        .expect("a pool");
        assert_eq!((pool.count, pool.name.as_str()), (3, "h100"));
        assert_eq!(pool.taints[0].effect, "NoSchedule");
    }

    /// A pool without Modelplane's label (one compose did not write) is
    /// named by its resource, and so are its nodes: they were named
    /// `-node-0` once, which the API server refuses, and never registered.
    #[test]
    fn a_pool_without_modelplanes_label_is_named_by_its_resource() {
        let mut mr = node_group();
        mr["spec"]["forProvider"]["labels"] = json!({});
        let pool = pool("NodeGroup", "eks.aws.m.upbound.io", &mr).expect("a pool");
        assert_eq!(pool.name, mr["metadata"]["name"].as_str().expect("named"));
    }

    fn observe(object: &Value, since: Option<u64>, now: u64) -> Phase {
        phase(&Observation {
            object,
            provider_running: true,
            blocked: None,
            failure: None,
            since: since.map(Duration::from_secs),
            provisioning: Duration::from_secs(10),
            now: Duration::from_secs(now),
        })
    }

    /// The stage table, step by step: unreconciled → blocked → creating →
    /// available, the conditions each shows, and that nothing is rewritten
    /// when nothing changed.
    #[test]
    fn a_managed_resource_moves_through_its_stages() {
        let mr = node_group();
        let stopped = Observation {
            object: &mr,
            provider_running: false,
            blocked: None,
            failure: None,
            since: None,
            provisioning: Duration::from_secs(10),
            now: Duration::ZERO,
        };
        assert_eq!(phase(&stopped), Phase::Unreconciled);
        assert_eq!(status_update(&mr, &Phase::Unreconciled, None, "t0"), None);

        let blocked = Observation {
            provider_running: true,
            blocked: Some("cannot resolve references".into()),
            ..stopped.clone()
        };
        let p = phase(&blocked);
        let status = status_update(&mr, &p, None, "t0").expect("written");
        assert_eq!(status["conditions"][0]["status"], "False");
        assert_eq!(
            status["conditions"][0]["message"],
            "cannot resolve references"
        );

        assert_eq!(
            observe(&mr, Some(5), 7),
            Phase::Creating {
                ready_at: Duration::from_secs(15)
            }
        );
        let creating =
            json!({ "status": status_update(&mr, &observe(&mr, Some(5), 7), None, "t1") });
        assert_eq!(creating["status"]["conditions"][1]["reason"], "Creating");
        // Same phase again: nothing to write.
        assert_eq!(
            status_update(&creating, &observe(&mr, Some(5), 8), None, "t2"),
            None
        );

        let available = observe(&mr, Some(5), 15);
        assert_eq!(available, Phase::Available);
        let done = status_update(&creating, &available, Some(at_provider(&mr, None)), "t3")
            .expect("written");
        assert_eq!(done["conditions"][1]["status"], "True");
        assert_eq!(
            done["conditions"][0]["lastTransitionTime"], "t1",
            "Synced stayed True"
        );
        assert_eq!(done["conditions"][1]["lastTransitionTime"], "t3");
        assert_eq!(done["atProvider"]["id"], "us-east-pool-l4-32c24");

        let ready = json!({ "status": done });
        let failure = Observation {
            object: &ready,
            failure: Some("InsufficientCapacity"),
            ..blocked
        };
        assert_eq!(
            phase(&failure),
            Phase::Available,
            "a created resource stays created"
        );
    }

    #[test]
    fn a_provisioning_failure_shows_the_clouds_error() {
        let mr = node_group();
        let o = Observation {
            object: &mr,
            provider_running: true,
            blocked: None,
            failure: Some("InsufficientCapacity: no p5en.48xlarge capacity in us-east-1a"),
            since: Some(Duration::ZERO),
            provisioning: Duration::from_secs(1),
            now: Duration::from_secs(60),
        };
        let status = status_update(&mr, &phase(&o), None, "t").expect("written");
        assert_eq!(
            status["conditions"][0]["message"],
            "create failed: InsufficientCapacity: no p5en.48xlarge capacity in us-east-1a"
        );
        assert_eq!(status["conditions"][1]["status"], "False");
    }
}
