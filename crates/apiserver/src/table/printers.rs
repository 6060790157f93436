//! The columns Kubernetes prints for its built-in kinds (`kubectl get pods`
//! shows READY, STATUS, RESTARTS…), computed as the API server's printers
//! compute them (k8s.io/kubernetes `pkg/printers/internalversion`): what a
//! JSONPath cannot express, such as a pod's status reason.

use serde_json::{Value, json};

use super::age;

/// One computed column.
pub struct Printer {
    /// Header.
    pub name: &'static str,
    /// Shown only with `-o wide` when 1.
    pub priority: u8,
    /// The cell of an object, given now.
    pub cell: fn(&Value, jiff::Timestamp) -> Value,
}

const fn col(
    name: &'static str,
    priority: u8,
    cell: fn(&Value, jiff::Timestamp) -> Value,
) -> Printer {
    Printer {
        name,
        priority,
        cell,
    }
}

fn created(o: &Value, now: jiff::Timestamp) -> Value {
    o["metadata"]["creationTimestamp"]
        .as_str()
        .map_or(Value::Null, |t| json!(age(t, now)))
}

fn containers(pod: &Value) -> Vec<&Value> {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .collect()
}

fn pod_ready(pod: &Value, _: jiff::Timestamp) -> Value {
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = containers(pod)
        .iter()
        .filter(|c| c["ready"] == true)
        .count();
    json!(format!("{ready}/{total}"))
}

/// A pod's STATUS, as kubectl prints it: Terminating, a container's waiting
/// or terminated reason, else the phase.
fn pod_status(pod: &Value, _: jiff::Timestamp) -> Value {
    if pod["metadata"]["deletionTimestamp"].is_string() {
        return json!("Terminating");
    }
    let mut reason = pod["status"]["reason"]
        .as_str()
        .or(pod["status"]["phase"].as_str())
        .unwrap_or("Pending")
        .to_string();
    if reason == "Pending" {
        let unschedulable = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "PodScheduled" && c["status"] == "False");
        if unschedulable {
            return json!("Pending");
        }
    }
    for c in containers(pod) {
        if let Some(waiting) = c["state"]["waiting"]["reason"].as_str() {
            reason = waiting.to_string();
        } else if let Some(terminated) = c["state"]["terminated"]["reason"].as_str() {
            reason = terminated.to_string();
        } else if c["state"]["terminated"].is_object() {
            reason = format!("ExitCode:{}", c["state"]["terminated"]["exitCode"]);
        }
    }
    json!(reason)
}

fn pod_restarts(pod: &Value, now: jiff::Timestamp) -> Value {
    let restarts: u64 = containers(pod)
        .iter()
        .filter_map(|c| c["restartCount"].as_u64())
        .sum();
    let last = containers(pod)
        .iter()
        .filter_map(|c| c["lastState"]["terminated"]["finishedAt"].as_str())
        .max()
        .map(str::to_string);
    match (restarts, last) {
        (0, _) | (_, None) => json!(restarts.to_string()),
        (n, Some(at)) => json!(format!("{n} ({} ago)", age(&at, now))),
    }
}

fn text(v: &Value) -> Value {
    v.as_str().map_or_else(|| json!("<none>"), |s| json!(s))
}

fn node_status(node: &Value, _: jiff::Timestamp) -> Value {
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str());
    let mut status = match ready {
        Some("True") => "Ready".to_string(),
        Some("False") => "NotReady".to_string(),
        _ => "Unknown".to_string(),
    };
    if node["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    json!(status)
}

fn event_object(e: &Value, _: jiff::Timestamp) -> Value {
    let o = &e["involvedObject"];
    json!(format!(
        "{}/{}",
        o["kind"].as_str().unwrap_or_default().to_lowercase(),
        o["name"].as_str().unwrap_or_default()
    ))
}

fn event_last_seen(e: &Value, now: jiff::Timestamp) -> Value {
    e["lastTimestamp"]
        .as_str()
        .or(e["eventTime"].as_str())
        .or(e["metadata"]["creationTimestamp"].as_str())
        .map_or(Value::Null, |t| json!(age(t, now)))
}

fn ratio(ready: &Value, total: &Value) -> Value {
    json!(format!(
        "{}/{}",
        ready.as_u64().unwrap_or(0),
        total.as_u64().unwrap_or(1)
    ))
}

fn job_status(job: &Value, _: jiff::Timestamp) -> Value {
    let conditions: Vec<&Value> = job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let has = |t: &str| {
        conditions
            .iter()
            .any(|c| c["type"] == t && c["status"] == "True")
    };
    json!(if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else {
        "Running"
    })
}

fn access_modes(pvc: &Value, _: jiff::Timestamp) -> Value {
    let short: Vec<&str> = pvc["status"]["accessModes"]
        .as_array()
        .or(pvc["spec"]["accessModes"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|m| match m.as_str()? {
            "ReadWriteOnce" => Some("RWO"),
            "ReadOnlyMany" => Some("ROX"),
            "ReadWriteMany" => Some("RWX"),
            "ReadWriteOncePod" => Some("RWOP"),
            _ => None,
        })
        .collect();
    json!(short.join(","))
}

fn ports(svc: &Value, _: jiff::Timestamp) -> Value {
    let ports: Vec<String> = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
        .collect();
    json!(if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    })
}

/// The printers of a built-in kind (by group and plural), if it has its own.
pub fn for_kind(group: &str, plural: &str) -> Option<&'static [Printer]> {
    const PODS: &[Printer] = &[
        col("Ready", 0, pod_ready),
        col("Status", 0, pod_status),
        col("Restarts", 0, pod_restarts),
        col("Age", 0, created),
        col("IP", 1, |p, _| text(&p["status"]["podIP"])),
        col("Node", 1, |p, _| text(&p["spec"]["nodeName"])),
    ];
    const NODES: &[Printer] = &[
        col("Status", 0, node_status),
        col("Roles", 0, |_, _| json!("<none>")),
        col("Age", 0, created),
        col("Version", 0, |n, _| {
            text(&n["status"]["nodeInfo"]["kubeletVersion"])
        }),
    ];
    const EVENTS: &[Printer] = &[
        col("Last Seen", 0, event_last_seen),
        col("Type", 0, |e, _| text(&e["type"])),
        col("Reason", 0, |e, _| text(&e["reason"])),
        col("Object", 0, event_object),
        col("Message", 0, |e, _| text(&e["message"])),
    ];
    const DEPLOYMENTS: &[Printer] = &[
        col("Ready", 0, |d, _| {
            ratio(&d["status"]["readyReplicas"], &d["spec"]["replicas"])
        }),
        col("Up-to-date", 0, |d, _| {
            json!(d["status"]["updatedReplicas"].as_u64().unwrap_or(0))
        }),
        col("Available", 0, |d, _| {
            json!(d["status"]["availableReplicas"].as_u64().unwrap_or(0))
        }),
        col("Age", 0, created),
    ];
    const JOBS: &[Printer] = &[
        col("Status", 0, job_status),
        col("Completions", 0, |j, _| {
            ratio(&j["status"]["succeeded"], &j["spec"]["completions"])
        }),
        col("Age", 0, created),
    ];
    const PVCS: &[Printer] = &[
        col("Status", 0, |p, _| text(&p["status"]["phase"])),
        col("Volume", 0, |p, _| {
            json!(p["spec"]["volumeName"].as_str().unwrap_or_default())
        }),
        col("Capacity", 0, |p, _| {
            json!(
                p["status"]["capacity"]["storage"]
                    .as_str()
                    .unwrap_or_default()
            )
        }),
        col("Access Modes", 0, access_modes),
        col("StorageClass", 0, |p, _| {
            text(&p["spec"]["storageClassName"])
        }),
        col("Age", 0, created),
    ];
    const NAMESPACES: &[Printer] = &[
        col("Status", 0, |n, _| text(&n["status"]["phase"])),
        col("Age", 0, created),
    ];
    const SERVICES: &[Printer] = &[
        col("Type", 0, |s, _| {
            json!(s["spec"]["type"].as_str().unwrap_or("ClusterIP"))
        }),
        col("Cluster-IP", 0, |s, _| text(&s["spec"]["clusterIP"])),
        col("Port(s)", 0, ports),
        col("Age", 0, created),
    ];
    match (group, plural) {
        ("", "pods") => Some(PODS),
        ("", "nodes") => Some(NODES),
        ("", "events") => Some(EVENTS),
        ("apps", "deployments") => Some(DEPLOYMENTS),
        ("batch", "jobs") => Some(JOBS),
        ("", "persistentvolumeclaims") => Some(PVCS),
        ("", "namespaces") => Some(NAMESPACES),
        ("", "services") => Some(SERVICES),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(group: &str, plural: &str, object: &Value) -> Vec<Value> {
        let now: jiff::Timestamp = "2026-12-01T12:00:00Z".parse().expect("time");
        for_kind(group, plural)
            .expect("printers")
            .iter()
            .map(|p| (p.cell)(object, now))
            .collect()
    }

    #[test]
    fn a_crash_looping_pod_prints_as_kubectl_shows_it() {
        let pod = json!({
            "metadata": { "creationTimestamp": "2026-12-01T11:58:00Z" },
            "spec": { "containers": [{ "name": "engine" }], "nodeName": "h200-node-0" },
            "status": { "phase": "Running", "podIP": "127.1.0.5", "containerStatuses": [{
                "ready": false, "restartCount": 3,
                "state": { "waiting": { "reason": "CrashLoopBackOff" } },
                "lastState": { "terminated": { "exitCode": 2, "finishedAt": "2026-12-01T11:59:30Z" } },
            }] },
        });
        assert_eq!(
            cells("", "pods", &pod),
            vec![
                json!("0/1"),
                json!("CrashLoopBackOff"),
                json!("3 (30s ago)"),
                json!("2m"),
                json!("127.1.0.5"),
                json!("h200-node-0")
            ]
        );
        let mut terminating = pod.clone();
        terminating["metadata"]["deletionTimestamp"] = json!("2026-12-01T11:59:59Z");
        assert_eq!(cells("", "pods", &terminating)[1], json!("Terminating"));
    }

    #[test]
    fn events_and_nodes_print_their_story() {
        let event = json!({ "type": "Warning", "reason": "FailedScheduling", "message": "0/5 nodes are available",
            "involvedObject": { "kind": "Pod", "name": "p" }, "lastTimestamp": "2026-12-01T11:59:50Z" });
        assert_eq!(
            cells("", "events", &event),
            vec![
                json!("10s"),
                json!("Warning"),
                json!("FailedScheduling"),
                json!("pod/p"),
                json!("0/5 nodes are available")
            ]
        );
        let node = json!({ "metadata": { "creationTimestamp": "2026-12-01T11:00:00Z" }, "spec": { "unschedulable": true },
            "status": { "conditions": [{ "type": "Ready", "status": "Unknown" }], "nodeInfo": { "kubeletVersion": "v1.34.1" } } });
        assert_eq!(
            cells("", "nodes", &node),
            vec![
                json!("Unknown,SchedulingDisabled"),
                json!("<none>"),
                json!("60m"),
                json!("v1.34.1")
            ]
        );
    }
}
