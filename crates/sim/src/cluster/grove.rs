//! The Grove operator, as its pinned release (v0.1.0-alpha.12-rc1) behaves
//! (`external.md` §2): per PodCliqueSet replica `r` a headless Service
//! `<pcs>-<r>`, a base PodGang `<pcs>-<r>`, PodCliques `<pcs>-<r>-<clique>`
//! (standalone) or `<pcs>-<r>-<pcsg>-<k>-<clique>` (in a scaling group) and
//! their pods, with Grove's labels, hostname `<pclq>-<j>` and subdomain
//! `<pcs>-<r>`, and Grove's discovery variables *appended* after the
//! template's env (the release predates PR #753). Pods carry the scheduling
//! gate `grove.io/podgang-pending-creation` until their PodGang exists.
//! Status: `replicas`, `availableReplicas` (every clique at its
//! `minAvailable` ready pods). Pure.

use serde_json::{Value, json};

use super::kcm::{delete_pod, push_status};
use super::world::{
    ClusterKind, World, Write, deleting, name, namespace, owner_reference, pod_ready, short_hash,
    uid,
};

const MANAGER: &str = "grove-operator";
const GATE: &str = "grove.io/podgang-pending-creation";

/// Everything Grove writes this pass.
pub fn step(world: &World<'_>) -> Vec<Write> {
    let mut out = Vec::new();
    for pcs in world.all(ClusterKind::Pcs) {
        if !deleting(pcs) {
            reconcile(world, pcs, &mut out);
        }
    }
    out
}

/// One PodClique to run: its name, template, pod count and scaling group.
struct Clique<'a> {
    name: String,
    template: &'a Value,
    replicas: u64,
    min_available: u64,
    /// `(pcsg FQN without index, pcsg replica index, pods in the PCSG template)`.
    group: Option<(String, u64, u64)>,
    gang: String,
}

fn cliques<'a>(pcs: &'a Value, replica: u64) -> Vec<Clique<'a>> {
    let pcs_name = name(pcs);
    let template = &pcs["spec"]["template"];
    let all: Vec<&Value> = template["cliques"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let groups: Vec<&Value> = template["podCliqueScalingGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let base_gang = format!("{pcs_name}-{replica}");
    let mut out = Vec::new();
    let in_group = |clique: &str| {
        groups.iter().any(|g| {
            g["cliqueNames"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|n| n == clique)
        })
    };
    for c in &all {
        let clique = c["name"].as_str().unwrap_or_default();
        if in_group(clique) {
            continue;
        }
        let replicas = c["spec"]["replicas"].as_u64().unwrap_or(1);
        out.push(Clique {
            name: format!("{pcs_name}-{replica}-{clique}"),
            template: c,
            replicas,
            min_available: c["spec"]["minAvailable"].as_u64().unwrap_or(replicas),
            group: None,
            gang: base_gang.clone(),
        });
    }
    for g in groups {
        let group = g["name"].as_str().unwrap_or_default();
        let members: Vec<&str> = g["cliqueNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let template_pods: u64 = members
            .iter()
            .filter_map(|m| all.iter().find(|c| c["name"] == *m))
            .map(|c| c["spec"]["replicas"].as_u64().unwrap_or(1))
            .sum();
        let group_replicas = g["replicas"].as_u64().unwrap_or(1);
        let group_min = g["minAvailable"].as_u64().unwrap_or(1);
        let fqn = format!("{pcs_name}-{replica}-{group}");
        for k in 0..group_replicas {
            for member in &members {
                let Some(c) = all.iter().find(|c| c["name"] == *member) else {
                    continue;
                };
                let replicas = c["spec"]["replicas"].as_u64().unwrap_or(1);
                out.push(Clique {
                    name: format!("{fqn}-{k}-{member}"),
                    template: c,
                    replicas,
                    min_available: c["spec"]["minAvailable"].as_u64().unwrap_or(replicas),
                    group: Some((fqn.clone(), k, template_pods)),
                    // Scaled PodGangs are numbered from 0, whatever minAvailable is.
                    gang: if k < group_min {
                        base_gang.clone()
                    } else {
                        format!("{fqn}-{}", k - group_min)
                    },
                });
            }
        }
    }
    out
}

/// Grove's variables, in the order the release appends them.
fn grove_env(pcs: &Value, replica: u64, clique: &Clique<'_>) -> Vec<Value> {
    let mut env = vec![
        json!({ "name": "GROVE_PCS_NAME", "value": name(pcs) }),
        json!({ "name": "GROVE_PCS_INDEX", "value": replica.to_string() }),
        json!({ "name": "GROVE_PCLQ_NAME", "value": clique.name }),
        json!({ "name": "GROVE_HEADLESS_SERVICE", "value": format!("{}-{replica}.{}.svc.cluster.local", name(pcs), namespace(pcs)) }),
        json!({ "name": "GROVE_PCLQ_POD_INDEX", "valueFrom": { "fieldRef": { "fieldPath": "metadata.labels['grove.io/podclique-pod-index']" } } }),
    ];
    if let Some((fqn, _, pods)) = &clique.group {
        env.push(json!({ "name": "GROVE_PCSG_NAME", "value": fqn }));
        env.push(json!({ "name": "GROVE_PCSG_TEMPLATE_NUM_PODS", "value": pods.to_string() }));
        env.push(json!({ "name": "GROVE_PCSG_INDEX", "valueFrom": { "fieldRef": { "fieldPath": "metadata.labels['grove.io/podcliquescalinggroup-replica-index']" } } }));
    }
    env
}

fn pod(pcs: &Value, replica: u64, clique: &Clique<'_>, index: u64, gated: bool) -> Value {
    let pod_name = format!(
        "{}-{}",
        clique.name,
        short_hash(&format!("{}/{index}", clique.name), 5)
    );
    let mut labels = clique.template["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    let extra = [
        ("grove.io/podclique", clique.name.clone()),
        ("grove.io/podgang", clique.gang.clone()),
        ("grove.io/podcliqueset-replica-index", replica.to_string()),
        ("grove.io/podclique-pod-index", index.to_string()),
        ("app.kubernetes.io/part-of", name(pcs).to_string()),
        ("app.kubernetes.io/managed-by", "grove-operator".to_string()),
    ];
    for (k, v) in extra {
        labels[k] = json!(v);
    }
    if let Some((fqn, k, _)) = &clique.group {
        labels["grove.io/podcliquescalinggroup"] = json!(fqn);
        labels["grove.io/podcliquescalinggroup-replica-index"] = json!(k.to_string());
    }
    let mut spec = clique.template["spec"]["podSpec"].clone();
    spec["hostname"] = json!(format!("{}-{index}", clique.name));
    spec["subdomain"] = json!(format!("{}-{replica}", name(pcs)));
    if spec["schedulerName"].is_null() {
        spec["schedulerName"] = json!("default-scheduler");
    }
    if gated {
        spec["schedulingGates"] = json!([{ "name": GATE }]);
    }
    let appended = grove_env(pcs, replica, clique);
    for list in ["containers", "initContainers"] {
        for container in spec[list].as_array_mut().into_iter().flatten() {
            let mut env: Vec<Value> = container["env"].as_array().cloned().unwrap_or_default();
            env.extend(appended.iter().cloned());
            container["env"] = json!(env);
        }
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": pod_name, "namespace": namespace(pcs), "labels": labels, "ownerReferences": [owner_reference(pcs)] },
        "spec": spec,
    })
}

fn reconcile(world: &World<'_>, pcs: &Value, out: &mut Vec<Write>) {
    let ns = namespace(pcs);
    let replicas = pcs["spec"]["replicas"].as_u64().unwrap_or(0);
    let pods: Vec<&Value> = world.pods_of(uid(pcs)).collect();
    let mut available = 0;
    let mut wanted_pods = Vec::new();
    for r in 0..replicas {
        let service = format!("{}-{r}", name(pcs));
        if world.get(ClusterKind::Service, ns, &service).is_none() {
            out.push(Write::Apply {
                kind: ClusterKind::Service,
                object: json!({ "apiVersion": "v1", "kind": "Service",
                    "metadata": { "name": service, "namespace": ns, "ownerReferences": [owner_reference(pcs)] },
                    "spec": { "clusterIP": "None", "publishNotReadyAddresses": true,
                        "selector": { "app.kubernetes.io/part-of": name(pcs), "grove.io/podcliqueset-replica-index": r.to_string() } } }),
                manager: MANAGER,
            });
        }
        let cliques = cliques(pcs, r);
        let mut gangs: std::collections::BTreeMap<String, Vec<Value>> =
            std::collections::BTreeMap::new();
        let mut replica_available = true;
        for clique in &cliques {
            let gang_exists = world.get(ClusterKind::PodGang, ns, &clique.gang).is_some();
            let mut refs = Vec::new();
            let mut ready = 0;
            for j in 0..clique.replicas {
                let desired = pod(pcs, r, clique, j, !gang_exists);
                let pod_name = name(&desired).to_string();
                refs.push(json!({ "namespace": ns, "name": pod_name }));
                wanted_pods.push(pod_name.clone());
                match pods.iter().find(|p| name(p) == pod_name) {
                    None => out.push(Write::Apply {
                        kind: ClusterKind::Pod,
                        object: desired,
                        manager: MANAGER,
                    }),
                    Some(existing) => {
                        ready += u64::from(pod_ready(existing));
                        let gated = existing["spec"]["schedulingGates"]
                            .as_array()
                            .is_some_and(|g| !g.is_empty());
                        if gated && gang_exists {
                            // The gang exists: lift the gate. The whole pod
                            // is applied again (a partial apply would drop
                            // every field Grove set and left out).
                            out.push(Write::Apply {
                                kind: ClusterKind::Pod,
                                object: desired,
                                manager: MANAGER,
                            });
                        }
                    }
                }
            }
            replica_available &= ready >= clique.min_available;
            gangs.entry(clique.gang.clone()).or_default().push(json!({
                "name": clique.name, "podReferences": refs, "minReplicas": clique.min_available,
            }));
            if world.get(ClusterKind::Pclq, ns, &clique.name).is_none() {
                out.push(Write::Apply {
                    kind: ClusterKind::Pclq,
                    object: json!({ "apiVersion": "grove.io/v1alpha1", "kind": "PodClique",
                        "metadata": { "name": clique.name, "namespace": ns, "ownerReferences": [owner_reference(pcs)] },
                        "spec": clique.template["spec"] }),
                    manager: MANAGER,
                });
            }
        }
        available += u64::from(replica_available);
        for (gang, podgroups) in gangs {
            let spec = json!({ "podgroups": podgroups, "priorityClassName": pcs["spec"]["template"]["priorityClassName"] });
            if world
                .get(ClusterKind::PodGang, ns, &gang)
                .is_none_or(|g| g["spec"] != spec)
            {
                out.push(Write::Apply {
                    kind: ClusterKind::PodGang,
                    object: json!({ "apiVersion": "scheduler.grove.io/v1alpha1", "kind": "PodGang",
                        "metadata": { "name": gang, "namespace": ns, "ownerReferences": [owner_reference(pcs)] },
                        "spec": spec }),
                    manager: MANAGER,
                });
            }
        }
    }
    for p in &pods {
        if !wanted_pods.iter().any(|w| w == name(p)) && !deleting(p) {
            out.push(delete_pod(p));
        }
    }
    let status = json!({ "replicas": replicas, "availableReplicas": available, "updatedReplicas": replicas, "observedGeneration": pcs["metadata"]["generation"] });
    push_status(
        ClusterKind::Pcs,
        pcs,
        status,
        &["replicas", "availableReplicas"],
        out,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::expand::environment;
    use crate::cluster::world::Snapshot;
    use crate::informer::Change;

    fn pcs() -> Value {
        json!({ "apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
            "metadata": { "name": "coder", "namespace": "ml-team", "uid": "p1", "generation": 1 },
            "spec": { "replicas": 1, "template": {
                "podCliqueScalingGroups": [{ "name": "g", "cliqueNames": ["leader", "w1"], "replicas": 1, "minAvailable": 1 }],
                "cliques": [
                    { "name": "leader", "spec": { "roleName": "leader", "replicas": 1, "podSpec": { "schedulerName": "kai-scheduler",
                        "containers": [{ "name": "engine", "env": [
                            { "name": "IDX", "valueFrom": { "fieldRef": { "fieldPath": "metadata.labels['grove.io/podcliquescalinggroup-replica-index']" } } },
                            { "name": "BY_LABEL", "value": "coder-0-g-$(IDX)-leader-0" },
                            { "name": "BY_GROVE", "value": "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-leader-0" }] }] } } },
                    { "name": "w1", "spec": { "roleName": "w1", "replicas": 1, "podSpec": { "containers": [{ "name": "engine" }] } } },
                ] } } })
    }

    fn run(s: &mut Snapshot) -> Vec<Write> {
        let writes = step(&World {
            snapshot: s,
            timestamp: "t",
        });
        for w in &writes {
            if let Write::Apply { kind, object, .. } = w {
                s.change(Change::Apply(*kind, object.clone()));
            }
        }
        writes
    }

    #[test]
    fn a_scaling_group_becomes_cliques_and_pods_named_and_labelled_as_grove_does() {
        let mut s = Snapshot::default();
        s.change(Change::Apply(ClusterKind::Pcs, pcs()));
        let writes = run(&mut s);
        let pods: Vec<&Value> = writes
            .iter()
            .filter_map(|w| match w {
                Write::Apply {
                    kind: ClusterKind::Pod,
                    object,
                    ..
                } => Some(object),
                _ => None,
            })
            .collect();
        assert_eq!(pods.len(), 2);
        let leader = pods[0];
        assert!(name(leader).starts_with("coder-0-g-0-leader-"));
        assert_eq!(leader["spec"]["hostname"], "coder-0-g-0-leader-0");
        assert_eq!(leader["spec"]["subdomain"], "coder-0");
        assert_eq!(
            leader["spec"]["schedulingGates"][0]["name"], GATE,
            "gated until its PodGang exists"
        );
        let labels = &leader["metadata"]["labels"];
        assert_eq!(labels["grove.io/podgang"], "coder-0");
        assert_eq!(labels["grove.io/podcliquescalinggroup"], "coder-0-g");
        assert_eq!(labels["grove.io/podcliquescalinggroup-replica-index"], "0");
        let env: Vec<&str> = leader["spec"]["containers"][0]["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert_eq!(
            env,
            vec![
                "IDX",
                "BY_LABEL",
                "BY_GROVE",
                "GROVE_PCS_NAME",
                "GROVE_PCS_INDEX",
                "GROVE_PCLQ_NAME",
                "GROVE_HEADLESS_SERVICE",
                "GROVE_PCLQ_POD_INDEX",
                "GROVE_PCSG_NAME",
                "GROVE_PCSG_TEMPLATE_NUM_PODS",
                "GROVE_PCSG_INDEX"
            ]
        );
        let (_, vars) = environment(leader, &leader["spec"]["containers"][0]);
        assert_eq!(
            vars["BY_LABEL"], "coder-0-g-0-leader-0",
            "built from the pod's own labels: resolves"
        );
        assert_eq!(
            vars["BY_GROVE"], "$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-leader-0",
            "Grove's appended variables do not expand"
        );
        assert_eq!(
            vars["GROVE_HEADLESS_SERVICE"],
            "coder-0.ml-team.svc.cluster.local"
        );
        let gang = writes
            .iter()
            .find_map(|w| match w {
                Write::Apply {
                    kind: ClusterKind::PodGang,
                    object,
                    ..
                } => Some(object),
                _ => None,
            })
            .expect("a PodGang");
        assert_eq!(gang["spec"]["podgroups"].as_array().map(Vec::len), Some(2));
        // Next pass: the gang exists, the gates are lifted.
        let writes = run(&mut s);
        let ungated: Vec<&Value> = writes
            .iter()
            .filter_map(|w| match w {
                Write::Apply {
                    kind: ClusterKind::Pod,
                    object,
                    ..
                } => Some(object),
                _ => None,
            })
            .collect();
        assert_eq!(ungated.len(), 2);
        assert!(
            ungated
                .iter()
                .all(|p| p["spec"]["schedulingGates"].is_null()
                    && p["spec"]["schedulerName"] == "kai-scheduler"
                    || p["spec"]["schedulingGates"].is_null()),
            "the whole pod, without its gate"
        );
        assert_eq!(ungated[0]["spec"]["containers"][0]["name"], "engine");
    }
}
