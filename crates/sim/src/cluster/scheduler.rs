//! The schedulers of a workload cluster. kube-scheduler binds pod by pod:
//! node selector, taints and tolerations, bound PVCs and DRA claims (so two
//! contending gangs can half-land, some pods holding GPUs while others wait).
//! The KAI scheduler binds a gang's pods all together or none: a Grove
//! PodGang, an LWS group (KAI's pod-grouper), else the pod alone, from the
//! queue its `kai.scheduler/queue` label names. Pure.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::dra::{Allocated, Inventory, allocation};
use super::kcm::tolerates;
use super::world::{ClusterKind, World, Write, deleting, name, namespace, pod_done, uid};

/// A pod: `(namespace, name)`.
pub type PodKey = (String, String);

/// What the schedulers bound that the watches may not show yet.
#[derive(Debug, Default)]
pub struct Assumed {
    /// Pod → node.
    pub pods: BTreeMap<PodKey, String>,
    /// Claim `(namespace, name)` → its devices.
    pub claims: BTreeMap<PodKey, Vec<Allocated>>,
}

impl Assumed {
    /// Forgets what the snapshot now shows (or what no longer exists).
    pub fn settle(&mut self, world: &World<'_>) {
        self.pods.retain(|(ns, n), _| {
            world
                .get(ClusterKind::Pod, ns, n)
                .is_some_and(|p| p["spec"]["nodeName"].is_null())
        });
        self.claims.retain(|(ns, n), _| {
            world
                .get(ClusterKind::Claim, ns, n)
                .is_some_and(|c| c["status"]["allocation"].is_null())
        });
    }
}

/// The claims a placement allocates, each with its devices.
type Taken = Vec<(Value, Vec<Allocated>)>;

/// What a scheduling pass did.
#[derive(Debug, Default)]
pub struct Pass {
    /// Writes: claim allocations, bindings, conditions, events.
    pub writes: Vec<Write>,
    /// Newly bound pods and claims.
    pub assumed: Assumed,
}

fn pod_key(pod: &Value) -> PodKey {
    (namespace(pod).to_string(), name(pod).to_string())
}

fn pending(pod: &Value, assumed: &Assumed, scheduler: &str) -> bool {
    pod["spec"]["nodeName"].is_null()
        && !deleting(pod)
        && !pod_done(pod)
        && pod["spec"]["schedulerName"]
            .as_str()
            .unwrap_or("default-scheduler")
            == scheduler
        && pod["spec"]["schedulingGates"]
            .as_array()
            .is_none_or(Vec::is_empty)
        && !assumed.pods.contains_key(&pod_key(pod))
}

/// The claims of `pod`, by the names its status gives them; `None` while
/// one is not created yet.
fn claims<'w>(world: &'w World<'_>, pod: &Value) -> Option<Vec<&'w Value>> {
    let mut out = Vec::new();
    for claim in pod["spec"]["resourceClaims"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let claim_name = match claim["resourceClaimName"].as_str() {
            Some(direct) => direct.to_string(),
            None => pod["status"]["resourceClaimStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["name"] == claim["name"])?["resourceClaimName"]
                .as_str()?
                .to_string(),
        };
        out.push(world.get(ClusterKind::Claim, namespace(pod), &claim_name)?);
    }
    Some(out)
}

/// Why `node` cannot take `pod` (without looking at devices), as
/// kube-scheduler words it.
fn node_reason(pod: &Value, node: &Value) -> Option<String> {
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    if !ready {
        return Some("1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }".into());
    }
    if node["spec"]["unschedulable"] == true {
        return Some("1 node(s) were unschedulable".into());
    }
    let labels = &node["metadata"]["labels"];
    let selector_ok = pod["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels[k] == *v);
    if !selector_ok {
        return Some("1 node(s) didn't match Pod's node affinity/selector".into());
    }
    for taint in node["spec"]["taints"].as_array().into_iter().flatten() {
        let blocking = matches!(taint["effect"].as_str(), Some("NoSchedule" | "NoExecute"));
        if blocking && !tolerates(pod, taint) {
            return Some(format!(
                "1 node(s) had untolerated taint {{{}: {}}}",
                taint["key"].as_str().unwrap_or_default(),
                taint["value"].as_str().unwrap_or_default()
            ));
        }
    }
    None
}

/// kube-scheduler's summary: `0/N nodes are available: <count> <reason>, …`.
fn unschedulable_message(total: usize, reasons: &BTreeMap<String, usize>) -> String {
    let parts: Vec<String> = reasons
        .iter()
        .map(|(reason, n)| reason.replacen("1 ", &format!("{n} "), 1))
        .collect();
    format!(
        "0/{total} nodes are available: {}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling.",
        parts.join(", ")
    )
}

/// Tries `pod` on every node; the chosen node and its devices, or the message.
fn place(
    world: &World<'_>,
    inventory: &mut Inventory,
    pod: &Value,
    pod_claims: &[&Value],
) -> Result<(String, Taken), String> {
    let nodes: Vec<&Value> = world.all(ClusterKind::Node).collect();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut fits: Vec<(usize, String)> = Vec::new();
    for node in &nodes {
        if let Some(reason) = node_reason(pod, node) {
            *reasons.entry(reason).or_default() += 1;
            continue;
        }
        fits.push((inventory.free_gpus(name(node)), name(node).to_string()));
    }
    // The fullest node that fits first (best fit): KAI's default binpack,
    // and what a bin-packing profile gives kube-scheduler. Real
    // kube-scheduler 1.34 does not score DRA devices at all; packing is
    // what the fleet scheduler counts on (docs/sim.md, kube-scheduler).
    fits.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    for (_, node) in &fits {
        let mut taken: Taken = Vec::new();
        let mut failure = None;
        for claim in pod_claims {
            if !claim["status"]["allocation"].is_null() {
                continue;
            }
            match inventory.allocate(claim, node) {
                Ok(devices) => taken.push(((*claim).clone(), devices)),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let Some(failure) = failure else {
            return Ok((node.clone(), taken));
        };
        for (_, devices) in &taken {
            inventory.release(devices);
        }
        // Not enough devices reads as kube-scheduler's summary; a selector
        // that cannot be evaluated is said as is.
        let reason = if failure == "cannot allocate all claims" {
            "1 cannot allocate all claims".to_string()
        } else {
            format!("1 {failure}")
        };
        *reasons.entry(reason).or_default() += 1;
    }
    Err(unschedulable_message(nodes.len(), &reasons))
}

fn bind(
    pod: &Value,
    node: &str,
    taken: Vec<(Value, Vec<Allocated>)>,
    scheduler: &'static str,
    pass: &mut Pass,
    timestamp: &str,
) {
    for (claim, devices) in taken {
        pass.writes.push(Write::Status {
            kind: ClusterKind::Claim,
            object: claim.clone(),
            status: json!({
                "allocation": allocation(&devices, node),
                "reservedFor": [{ "resource": "pods", "name": name(pod), "uid": uid(pod) }],
            }),
            manager: scheduler,
        });
        pass.assumed
            .claims
            .insert((namespace(&claim).into(), name(&claim).into()), devices);
    }
    // A binding: for this pod only (its uid), never creating one.
    pass.writes.push(Write::Patch {
        kind: ClusterKind::Pod,
        namespace: namespace(pod).to_string(),
        name: name(pod).to_string(),
        patch: json!({ "metadata": { "uid": uid(pod) }, "spec": { "nodeName": node } }),
    });
    pass.writes.push(Write::Status {
        kind: ClusterKind::Pod,
        object: pod.clone(),
        status: json!({ "conditions": [{ "type": "PodScheduled", "status": "True", "lastTransitionTime": timestamp }] }),
        manager: scheduler,
    });
    pass.writes.push(Write::Event {
        object: pod.clone(),
        type_: "Normal",
        reason: "Scheduled".into(),
        message: format!(
            "Successfully assigned {}/{} to {node}",
            namespace(pod),
            name(pod)
        ),
        source: scheduler,
    });
    pass.assumed.pods.insert(pod_key(pod), node.to_string());
}

fn unschedulable(
    pod: &Value,
    message: String,
    scheduler: &'static str,
    reason: &str,
    pass: &mut Pass,
    timestamp: &str,
) {
    let previous = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "PodScheduled");
    if previous.is_none_or(|p| p["message"] != message.as_str()) {
        pass.writes.push(Write::Status {
            kind: ClusterKind::Pod,
            object: pod.clone(),
            status: json!({ "phase": "Pending", "conditions": [{ "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message, "lastTransitionTime": timestamp }] }),
            manager: scheduler,
        });
    }
    pass.writes.push(Write::Event {
        object: pod.clone(),
        type_: "Warning",
        reason: reason.into(),
        message,
        source: scheduler,
    });
}

fn inventory(world: &World<'_>, assumed: &Assumed) -> Inventory {
    let mut inventory = Inventory::new(world);
    for devices in assumed.claims.values() {
        inventory.take(devices);
    }
    inventory
}

fn by_age(mut pods: Vec<&Value>) -> Vec<&Value> {
    pods.sort_by(|a, b| {
        let t = |p: &Value| {
            p["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        t(a).cmp(&t(b)).then(name(a).cmp(name(b)))
    });
    pods
}

/// kube-scheduler's pass over pending pods, oldest first, one at a time.
pub fn default_scheduler(world: &World<'_>, assumed: &Assumed) -> Pass {
    const SCHEDULER: &str = "default-scheduler";
    let mut pass = Pass::default();
    let pods = by_age(
        world
            .all(ClusterKind::Pod)
            .filter(|p| pending(p, assumed, SCHEDULER))
            .collect(),
    );
    if pods.is_empty() {
        return pass;
    }
    // Built only with a pod to place: most passes have none.
    let mut inventory = inventory(world, assumed);
    for pod in pods {
        let Some(pod_claims) = claims(world, pod) else {
            continue;
        };
        if let Some(message) = unbound_volumes(world, pod) {
            unschedulable(
                pod,
                message,
                SCHEDULER,
                "FailedScheduling",
                &mut pass,
                world.timestamp,
            );
            continue;
        }
        match place(world, &mut inventory, pod, &pod_claims) {
            Ok((node, taken)) => bind(pod, &node, taken, SCHEDULER, &mut pass, world.timestamp),
            Err(message) => unschedulable(
                pod,
                message,
                SCHEDULER,
                "FailedScheduling",
                &mut pass,
                world.timestamp,
            ),
        }
    }
    pass
}

fn unbound_volumes(world: &World<'_>, pod: &Value) -> Option<String> {
    let total = world.all(ClusterKind::Node).count();
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() else {
            continue;
        };
        match world.get(ClusterKind::Pvc, namespace(pod), claim) {
            None => return Some(format!("persistentvolumeclaim \"{claim}\" not found")),
            Some(pvc) if pvc["status"]["phase"] != "Bound" => {
                return Some(format!(
                    "0/{total} nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
                ));
            }
            Some(_) => {}
        }
    }
    None
}

/// The gang a KAI pod belongs to and how many pods it needs, as KAI's
/// pod-grouper forms it.
fn gang(world: &World<'_>, pod: &Value) -> Option<(String, usize)> {
    let labels = &pod["metadata"]["labels"];
    if let Some(podgang) = labels["grove.io/podgang"].as_str() {
        let gang = world.get(ClusterKind::PodGang, namespace(pod), podgang)?;
        let need = gang["spec"]["podgroups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| g["minReplicas"].as_u64().unwrap_or(1) as usize)
            .sum();
        return Some((format!("podgang/{podgang}"), need));
    }
    if let Some(group) = labels["leaderworkerset.sigs.k8s.io/group-key"].as_str() {
        let size = pod["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        // With `startupPolicy: LeaderReady` the workers come only once the
        // leader runs: KAI's pod-grouper asks for the leader alone first.
        let leader_ready_first = pod["metadata"]["ownerReferences"][0]["name"]
            .as_str()
            .and_then(|lws| world.get(ClusterKind::Lws, namespace(pod), lws))
            .is_some_and(|lws| lws["spec"]["startupPolicy"] == "LeaderReady");
        let is_leader = labels["leaderworkerset.sigs.k8s.io/worker-index"] == "0";
        let need = if leader_ready_first && is_leader {
            1
        } else {
            size
        };
        return Some((format!("lws/{group}"), need));
    }
    Some((format!("pod/{}", name(pod)), 1))
}

/// KAI's pass: each gang whose pods all exist is bound whole, or not at all.
pub fn kai_scheduler(world: &World<'_>, assumed: &Assumed) -> Pass {
    const SCHEDULER: &str = "kai-scheduler";
    let mut pass = Pass::default();
    let queues: BTreeSet<&str> = world.all(ClusterKind::Queue).map(name).collect();
    let mut gangs: BTreeMap<String, (usize, Vec<&Value>)> = BTreeMap::new();
    for pod in by_age(
        world
            .all(ClusterKind::Pod)
            .filter(|p| pending(p, assumed, SCHEDULER))
            .collect(),
    ) {
        let queue = pod["metadata"]["labels"]["kai.scheduler/queue"]
            .as_str()
            .unwrap_or_default();
        if !queues.contains(queue) {
            let message = format!(
                "queue \"{queue}\" does not exist: the pod's kai.scheduler/queue label must name a leaf Queue"
            );
            unschedulable(
                pod,
                message,
                SCHEDULER,
                "Unschedulable",
                &mut pass,
                world.timestamp,
            );
            continue;
        }
        let Some((gang, need)) = gang(world, pod) else {
            continue;
        };
        let entry = gangs.entry(gang).or_insert((need, Vec::new()));
        entry.1.push(pod);
    }
    if gangs.is_empty() {
        return pass;
    }
    // Members already bound count toward a gang's minimum (a replacement
    // pod joins its running gang).
    let mut bound: BTreeMap<String, usize> = BTreeMap::new();
    for pod in world
        .all(ClusterKind::Pod)
        .filter(|p| p["spec"]["nodeName"].is_string() && !deleting(p) && !pod_done(p))
    {
        if pod["spec"]["schedulerName"] == SCHEDULER
            && let Some((gang, _)) = gang(world, pod)
        {
            *bound.entry(gang).or_default() += 1;
        }
    }
    let mut inventory = inventory(world, assumed);
    for (gang, (need, pods)) in gangs {
        if pods.len() + bound.get(&gang).copied().unwrap_or(0) < need {
            // The rest of the gang is not created yet.
            continue;
        }
        let mut placed: Vec<(&Value, String, Taken)> = Vec::new();
        let mut failure = None;
        for pod in &pods {
            let Some(pod_claims) = claims(world, pod) else {
                failure = Some(String::new());
                break;
            };
            if let Some(message) = unbound_volumes(world, pod) {
                failure = Some(message);
                break;
            }
            match place(world, &mut inventory, pod, &pod_claims) {
                Ok((node, taken)) => placed.push((pod, node, taken)),
                Err(message) => {
                    failure = Some(message);
                    break;
                }
            }
        }
        match failure {
            None => {
                for (pod, node, taken) in placed {
                    bind(pod, &node, taken, SCHEDULER, &mut pass, world.timestamp);
                }
            }
            Some(message) if message.is_empty() => {}
            Some(message) => {
                // All or nothing: give back what the fitting pods took.
                let fitting = placed.len();
                for (_, _, taken) in &placed {
                    for (_, devices) in taken {
                        inventory.release(devices);
                    }
                }
                let message = format!(
                    "{gang}: {fitting} of {} pods fit, the gang is not scheduled: {message}",
                    pods.len()
                );
                for pod in &pods {
                    unschedulable(
                        pod,
                        message.clone(),
                        SCHEDULER,
                        "Unschedulable",
                        &mut pass,
                        world.timestamp,
                    );
                }
            }
        }
    }
    pass
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::dra::{Hardware, driver_step};
    use crate::cluster::world::Snapshot;
    use crate::informer::Change;

    fn node(name: &str) -> Value {
        json!({ "metadata": { "name": name, "labels": { "modelplane.ai/pool": "h200" } },
            "spec": { "taints": [{ "key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule" }] },
            "status": { "conditions": [{ "type": "Ready", "status": "True" }] } })
    }

    fn pod(name: &str, scheduler: &str, labels: Value, created: &str) -> Value {
        json!({ "metadata": { "name": name, "namespace": "ml", "uid": format!("uid-{name}"), "labels": labels,
                "annotations": { "leaderworkerset.sigs.k8s.io/size": "2" }, "creationTimestamp": created },
            "spec": { "schedulerName": scheduler, "nodeSelector": { "modelplane.ai/pool": "h200" },
                "tolerations": [{ "key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule" }],
                "resourceClaims": [{ "name": "devices", "resourceClaimName": format!("{name}-devices") }] } })
    }

    fn claim(name: &str) -> Value {
        json!({ "metadata": { "name": format!("{name}-devices"), "namespace": "ml" }, "spec": { "devices": { "requests": [
            { "name": "gpu", "exactly": { "deviceClassName": "gpu.nvidia.com", "count": 8 } }] } } })
    }

    /// Two nodes of 8 GPUs, two 2-pod gangs of 8-GPU pods: three pods fit.
    fn contention(scheduler: &str) -> Snapshot {
        let mut s = Snapshot::default();
        let hardware = BTreeMap::from([(
            "h200".to_string(),
            Hardware {
                devices: vec![json!({ "name": "gpu", "driver": "gpu.nvidia.com", "count": 8 })],
                fabric: None,
            },
        )]);
        for n in ["n0", "n1"] {
            s.change(Change::Apply(ClusterKind::Node, node(n)));
        }
        s.change(Change::Apply(
            ClusterKind::Queue,
            json!({ "metadata": { "name": "modelplane" } }),
        ));
        let published = driver_step(
            &World {
                snapshot: &s,
                timestamp: "t",
            },
            crate::cluster::dra::NVIDIA,
            &hardware,
        );
        for w in published {
            if let Write::Apply { kind, object, .. } = w {
                s.change(Change::Apply(kind, object));
            }
        }
        // Leaders first, then workers: pod by pod, both leaders fit.
        for (i, (p, group)) in [("a-0", "a"), ("b-0", "b"), ("a-0-1", "a"), ("b-0-1", "b")]
            .iter()
            .enumerate()
        {
            let labels = json!({ "leaderworkerset.sigs.k8s.io/group-key": group, "kai.scheduler/queue": "modelplane" });
            s.change(Change::Apply(
                ClusterKind::Pod,
                pod(p, scheduler, labels, &format!("2026-01-01T00:00:0{i}Z")),
            ));
            s.change(Change::Apply(ClusterKind::Claim, claim(p)));
        }
        s
    }

    fn bound(pass: &Pass) -> Vec<String> {
        pass.assumed.pods.keys().map(|(_, n)| n.clone()).collect()
    }

    #[test]
    fn kube_scheduler_binds_pod_by_pod_so_two_gangs_half_land() {
        let s = contention("default-scheduler");
        let pass = default_scheduler(
            &World {
                snapshot: &s,
                timestamp: "t",
            },
            &Assumed::default(),
        );
        assert_eq!(
            bound(&pass),
            vec!["a-0", "b-0"],
            "each leader holds a node; no gang is whole"
        );
        let event = pass
            .writes
            .iter()
            .find_map(|w| match w {
                Write::Event {
                    reason, message, ..
                } if reason == "FailedScheduling" => Some(message.clone()),
                _ => None,
            })
            .expect("FailedScheduling");
        assert_eq!(
            event,
            "0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn kai_binds_a_gang_whole_or_not_at_all() {
        let s = contention("kai-scheduler");
        let pass = kai_scheduler(
            &World {
                snapshot: &s,
                timestamp: "t",
            },
            &Assumed::default(),
        );
        let mut names = bound(&pass);
        names.sort();
        assert_eq!(
            names,
            vec!["a-0", "a-0-1"],
            "gang a whole; gang b waits holding nothing"
        );
        assert!(pass.writes.iter().any(|w| matches!(w, Write::Event { reason, message, .. } if reason == "Unschedulable" && message.starts_with("lws/b: 0 of 2 pods fit"))));
    }

    #[test]
    fn a_pod_without_a_toleration_is_refused_in_kube_schedulers_words() {
        let mut s = contention("default-scheduler");
        let mut p = pod("x", "default-scheduler", json!({}), "2025-01-01T00:00:00Z");
        p["spec"]["tolerations"] = json!([]);
        s.change(Change::Apply(ClusterKind::Pod, p));
        s.change(Change::Apply(ClusterKind::Claim, claim("x")));
        let pass = default_scheduler(
            &World {
                snapshot: &s,
                timestamp: "t",
            },
            &Assumed::default(),
        );
        assert!(pass.writes.iter().any(|w| matches!(w, Write::Event { message, .. } if message.starts_with("0/2 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: true}."))));
    }
}
