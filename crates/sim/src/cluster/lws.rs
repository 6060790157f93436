//! The LeaderWorkerSet controller and its pod webhook (`external.md` §1):
//! per group `i` a leader pod `<lws>-<i>` and workers `<lws>-<i>-<j>`, the
//! labels and annotations LWS writes, `LWS_LEADER_ADDRESS`, `LWS_GROUP_SIZE`
//! and `LWS_WORKER_INDEX` placed at the front of every container's env
//! (a template entry of the same name dropped), one headless Service, the
//! group recreated when one of its containers restarts, and status. No gang
//! scheduling: pods are scheduled one by one. Pure.

use serde_json::{Value, json};

use super::kcm::{delete_pod, pod_from_template, push_status};
use super::world::{
    ClusterKind, World, Write, condition, condition_value, deleting, name, namespace,
    owner_reference, pod_ready, short_hash, uid,
};

const MANAGER: &str = "lws-controller-manager";
const PREFIX: &str = "leaderworkerset.sigs.k8s.io";

/// Everything the LWS controller writes this pass.
pub fn step(world: &World<'_>) -> Vec<Write> {
    let mut out = Vec::new();
    for lws in world.all(ClusterKind::Lws) {
        if !deleting(lws) {
            reconcile(world, lws, &mut out);
        }
    }
    out
}

/// LWS's env variables, first in every container; same-named template entries dropped.
pub fn inject_env(spec: &mut Value, injected: &[(&str, String)]) {
    for list in ["containers", "initContainers"] {
        for container in spec[list].as_array_mut().into_iter().flatten() {
            let mut env: Vec<Value> = injected
                .iter()
                .map(|(n, v)| json!({ "name": n, "value": v }))
                .collect();
            for entry in container["env"].as_array().into_iter().flatten() {
                if !injected.iter().any(|(n, _)| entry["name"] == *n) {
                    env.push(entry.clone());
                }
            }
            container["env"] = json!(env);
        }
    }
}

fn reconcile(world: &World<'_>, lws: &Value, out: &mut Vec<Write>) {
    let lws_name = name(lws);
    let ns = namespace(lws);
    let replicas = lws["spec"]["replicas"].as_u64().unwrap_or(1);
    let template = &lws["spec"]["leaderWorkerTemplate"];
    let size = template["size"].as_u64().unwrap_or(1);
    let revision = short_hash(&template.to_string(), 10);
    let leader_ready_first = lws["spec"]["startupPolicy"] == "LeaderReady";
    let restart_policy = template["restartPolicy"]
        .as_str()
        .unwrap_or("RecreateGroupOnPodRestart");

    if world.get(ClusterKind::Service, ns, lws_name).is_none() {
        out.push(Write::Apply {
            kind: ClusterKind::Service,
            object: json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": { "name": lws_name, "namespace": ns, "ownerReferences": [owner_reference(lws)] },
                "spec": { "clusterIP": "None", "publishNotReadyAddresses": true,
                    "selector": { format!("{PREFIX}/name"): lws_name } },
            }),
            manager: MANAGER,
        });
    }

    let pods: Vec<&Value> = world.pods_of(uid(lws)).collect();
    let mut ready_groups = 0;
    for group in 0..replicas {
        let leader_name = format!("{lws_name}-{group}");
        let group_key = short_hash(&format!("{ns}/{leader_name}"), 16);
        let group_pods: Vec<&&Value> = pods
            .iter()
            .filter(|p| {
                p["metadata"]["labels"][format!("{PREFIX}/group-index")]
                    == group.to_string().as_str()
            })
            .collect();
        let restarted = group_pods.iter().any(|p| {
            p["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["restartCount"].as_u64().unwrap_or(0) > 0)
        });
        if restarted && restart_policy == "RecreateGroupOnPodRestart" {
            // The whole group goes and comes back together.
            for pod in &group_pods {
                if !deleting(pod) {
                    out.push(delete_pod(pod));
                }
            }
            out.push(Write::Event {
                object: lws.clone(),
                type_: "Normal",
                reason: "RecreateGroup".into(),
                message: format!("Recreating group {group}: a container of it restarted"),
                source: MANAGER,
            });
            continue;
        }
        let leader = group_pods.iter().find(|p| name(p) == leader_name);
        let address = format!("{leader_name}.{lws_name}.{ns}");
        for worker in 0..size {
            let pod_name = if worker == 0 {
                leader_name.clone()
            } else {
                format!("{leader_name}-{worker}")
            };
            if group_pods.iter().any(|p| name(p) == pod_name) {
                continue;
            }
            if worker > 0 && leader_ready_first && !leader.is_some_and(|l| pod_ready(l)) {
                continue;
            }
            let role_template = if worker == 0 && !template["leaderTemplate"].is_null() {
                &template["leaderTemplate"]
            } else {
                &template["workerTemplate"]
            };
            let labels = json!({
                format!("{PREFIX}/name"): lws_name,
                format!("{PREFIX}/group-index"): group.to_string(),
                format!("{PREFIX}/group-key"): group_key,
                format!("{PREFIX}/worker-index"): worker.to_string(),
                format!("{PREFIX}/template-revision-hash"): revision,
            });
            let mut pod = pod_from_template(lws, role_template, &pod_name, labels);
            pod["metadata"]["annotations"][format!("{PREFIX}/size")] = json!(size.to_string());
            if worker > 0 {
                pod["metadata"]["annotations"][format!("{PREFIX}/leader-name")] =
                    json!(leader_name);
            }
            pod["spec"]["hostname"] = json!(pod_name);
            pod["spec"]["subdomain"] = json!(lws_name);
            inject_env(
                &mut pod["spec"],
                &[
                    ("LWS_LEADER_ADDRESS", address.clone()),
                    ("LWS_GROUP_SIZE", size.to_string()),
                    ("LWS_WORKER_INDEX", worker.to_string()),
                ],
            );
            out.push(Write::Apply {
                kind: ClusterKind::Pod,
                object: pod,
                manager: MANAGER,
            });
        }
        let all_ready = (0..size).all(|w| {
            let n = if w == 0 {
                leader_name.clone()
            } else {
                format!("{leader_name}-{w}")
            };
            group_pods.iter().any(|p| name(p) == n && pod_ready(p))
        });
        ready_groups += u64::from(all_ready);
    }
    // Groups beyond `replicas` (scaled down) go.
    for pod in &pods {
        let group: u64 = pod["metadata"]["labels"][format!("{PREFIX}/group-index")]
            .as_str()
            .and_then(|g| g.parse().ok())
            .unwrap_or(0);
        if group >= replicas && !deleting(pod) {
            out.push(delete_pod(pod));
        }
    }
    let previous = condition(lws, "Available");
    let available = ready_groups >= replicas;
    let status = json!({
        "replicas": replicas,
        "readyReplicas": ready_groups,
        "updatedReplicas": replicas,
        "hpaPodSelector": format!("{PREFIX}/name={lws_name},{PREFIX}/worker-index=0"),
        "observedGeneration": lws["metadata"]["generation"],
        "conditions": [if available {
            condition_value(previous, "Available", true, "AllGroupsReady", "All replicas are ready", world.timestamp)
        } else {
            condition_value(previous, "Available", false, "AllGroupsReady", "Not all replicas are ready", world.timestamp)
        }],
    });
    push_status(
        ClusterKind::Lws,
        lws,
        status,
        &["replicas", "readyReplicas"],
        out,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::world::Snapshot;
    use crate::informer::Change;

    fn lws() -> Value {
        json!({ "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": { "name": "coder", "namespace": "ml-team", "uid": "l1", "generation": 1 },
            "spec": { "replicas": 1, "leaderWorkerTemplate": { "size": 2,
                "leaderTemplate": { "metadata": { "labels": { "role": "leader" } }, "spec": { "containers": [{ "name": "engine",
                    "env": [{ "name": "MODELPLANE_LEADER_ADDRESS", "value": "$(LWS_LEADER_ADDRESS)" }, { "name": "LWS_GROUP_SIZE", "value": "mine" }] }] } },
                "workerTemplate": { "spec": { "containers": [{ "name": "engine",
                    "env": [{ "name": "MODELPLANE_RANK", "value": "$(LWS_WORKER_INDEX)" }] }] } } } } })
    }

    /// Names, labels, annotations and env exactly as `external.md` §1 says.
    #[test]
    fn a_group_is_a_leader_and_its_workers_with_what_lws_injects() {
        let mut s = Snapshot::default();
        s.change(Change::Apply(ClusterKind::Lws, lws()));
        let writes = step(&World {
            snapshot: &s,
            timestamp: "t",
        });
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
        assert_eq!(
            pods.iter().map(|p| name(p)).collect::<Vec<_>>(),
            vec!["coder-0", "coder-0-1"]
        );
        let (leader, worker) = (pods[0], pods[1]);
        let labels = &worker["metadata"]["labels"];
        assert_eq!(labels["leaderworkerset.sigs.k8s.io/name"], "coder");
        assert_eq!(labels["leaderworkerset.sigs.k8s.io/group-index"], "0");
        assert_eq!(labels["leaderworkerset.sigs.k8s.io/worker-index"], "1");
        assert_eq!(
            worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"],
            "2"
        );
        assert_eq!(
            worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/leader-name"],
            "coder-0"
        );
        assert_eq!(
            leader["metadata"]["labels"]["role"], "leader",
            "the leader template is used for the leader"
        );
        assert_eq!(
            (
                leader["spec"]["hostname"].as_str(),
                leader["spec"]["subdomain"].as_str()
            ),
            (Some("coder-0"), Some("coder"))
        );
        let env = &leader["spec"]["containers"][0]["env"];
        assert_eq!(
            env[0],
            json!({ "name": "LWS_LEADER_ADDRESS", "value": "coder-0.coder.ml-team" }),
            "no .svc.cluster.local"
        );
        assert_eq!(
            env[1],
            json!({ "name": "LWS_GROUP_SIZE", "value": "2" }),
            "LWS's wins over the template's"
        );
        assert_eq!(env[2], json!({ "name": "LWS_WORKER_INDEX", "value": "0" }));
        assert_eq!(
            env[3]["name"], "MODELPLANE_LEADER_ADDRESS",
            "the template's after LWS's, so $(LWS_…) expands"
        );
        assert_eq!(env.as_array().map(Vec::len), Some(4));
        assert_eq!(worker["spec"]["containers"][0]["env"][2]["value"], "1");
        assert!(writes.iter().any(|w| matches!(w, Write::Apply { kind: ClusterKind::Service, object, .. } if object["spec"]["clusterIP"] == "None")));
    }

    #[test]
    fn a_restarted_container_recreates_its_whole_group() {
        let mut s = Snapshot::default();
        s.change(Change::Apply(ClusterKind::Lws, lws()));
        for w in step(&World {
            snapshot: &s,
            timestamp: "t",
        }) {
            if let Write::Apply {
                kind, mut object, ..
            } = w
            {
                if kind == ClusterKind::Pod && name(&object) == "coder-0-1" {
                    object["status"] =
                        json!({ "containerStatuses": [{ "name": "engine", "restartCount": 1 }] });
                }
                s.change(Change::Apply(kind, object));
            }
        }
        let writes = step(&World {
            snapshot: &s,
            timestamp: "t",
        });
        let deleted: Vec<&str> = writes
            .iter()
            .filter_map(|w| match w {
                Write::Delete { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deleted, vec!["coder-0", "coder-0-1"]);
    }
}
