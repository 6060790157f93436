//! What Modelplane reads on workload clusters but does not own: the pods
//! that serve its replicas (labelled `modelplane.ai/serving`), the GPU
//! nodes they run on (labelled `modelplane.ai/pool`) and the pods of
//! caches' hydration Jobs (labelled `modelplane.ai/modelcache`), each
//! reduced once (`from_resource`) to what a status tells — so a replica
//! whose workload is not ready can say which node, or which scheduler
//! message, is why, and a cache that cannot stage what its download said.

use serde_json::Value;

/// A condition as status shows it: status, reason, message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Said {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// When it last changed.
    pub since: String,
}

impl Said {
    fn of(condition: &Value) -> Said {
        let text = |k: &str| condition[k].as_str().unwrap_or_default().to_string();
        Said {
            status: text("status"),
            reason: text("reason"),
            message: text("message"),
            since: text("lastTransitionTime"),
        }
    }
}

fn condition(object: &Value, type_: &str) -> Option<Said> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(Said::of)
}

/// A serving pod of a replica.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The replica it serves (its `modelplane.ai/serving` label).
    pub replica: String,
    /// The node it is bound to, if any.
    pub node: Option<String>,
    /// Its `PodScheduled` condition, when False (why it waits for a node).
    pub unscheduled: Option<Said>,
    /// A container waiting (`CrashLoopBackOff`, `ImagePullBackOff`, …):
    /// `(container, reason, message)`.
    pub waiting: Option<(String, String, String)>,
    /// Whether it is being deleted.
    pub deleting: bool,
}

impl PodView {
    /// The view of a Pod object.
    pub fn from_resource(pod: &Value) -> PodView {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let waiting = pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| {
                let waiting = c["state"]["waiting"].as_object()?;
                let reason = waiting.get("reason").map(text).unwrap_or_default();
                // Every container waits a moment as it is created.
                (reason != "ContainerCreating" && reason != "PodInitializing").then(|| {
                    (
                        text(&c["name"]),
                        reason,
                        waiting.get("message").map(text).unwrap_or_default(),
                    )
                })
            });
        PodView {
            namespace: text(&pod["metadata"]["namespace"]),
            name: text(&pod["metadata"]["name"]),
            replica: text(&pod["metadata"]["labels"][modelplane_api::labels::SERVING]),
            node: pod["spec"]["nodeName"].as_str().map(str::to_string),
            unscheduled: condition(pod, "PodScheduled").filter(|c| c.status == "False"),
            waiting,
            deleting: !pod["metadata"]["deletionTimestamp"].is_null(),
        }
    }
}

/// A GPU node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeView {
    /// Name.
    pub name: String,
    /// Its `Ready` condition, when not True.
    pub not_ready: Option<Said>,
}

impl NodeView {
    /// The view of a Node object.
    pub fn from_resource(node: &Value) -> NodeView {
        NodeView {
            name: node["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            not_ready: match condition(node, "Ready") {
                Some(ready) if ready.status == "True" => None,
                Some(ready) => Some(ready),
                None => Some(Said {
                    status: "Unknown".into(),
                    reason: "NoReadyCondition".into(),
                    message: "the node has not posted a Ready condition".into(),
                    since: String::new(),
                }),
            },
        }
    }
}

/// Why a replica whose workloads are not ready is not, from its serving
/// pods and their nodes: `(reason, message)` for its `ModelReady`
/// condition, the most telling first — a node that is not Ready, then a
/// pod the scheduler cannot place, then a container that cannot start.
pub fn why_not_ready<'a>(
    pods: impl IntoIterator<Item = &'a PodView>,
    node: impl Fn(&str) -> Option<&'a NodeView>,
) -> Option<(&'static str, String)> {
    let pods: Vec<&PodView> = pods.into_iter().filter(|p| !p.deleting).collect();
    for pod in &pods {
        let Some(node_name) = &pod.node else {
            continue;
        };
        if let Some(not_ready) = node(node_name).and_then(|n| n.not_ready.as_ref()) {
            let since = if not_ready.since.is_empty() {
                String::new()
            } else {
                format!(" since {}", not_ready.since)
            };
            return Some((
                "NodeNotReady",
                format!(
                    "pod {} runs on node {node_name}, which is not Ready ({}{since}: {})",
                    pod.name, not_ready.reason, not_ready.message
                ),
            ));
        }
    }
    if let Some((pod, said)) = pods
        .iter()
        .find_map(|p| p.unscheduled.as_ref().map(|s| (p, s)))
    {
        return Some((
            "Unschedulable",
            format!("pod {} waits for a node: {}", pod.name, said.message),
        ));
    }
    pods.iter().find_map(|p| {
        let (container, reason, message) = p.waiting.as_ref()?;
        let mut said = format!("pod {} container {container}: {reason}", p.name);
        if !message.is_empty() {
            said = format!("{said}: {message}");
        }
        Some(("ContainerWaiting", said))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_node_not_ready_under_a_pod_is_named_before_anything_else() {
        let pod = PodView::from_resource(&json!({
            "metadata": { "name": "p", "namespace": "ml", "labels": { "modelplane.ai/serving": "r" } },
            "spec": { "nodeName": "gpu-1" },
            "status": { "containerStatuses": [{ "name": "engine",
                "state": { "waiting": { "reason": "CrashLoopBackOff", "message": "back-off 10s" } } }] } }));
        let node = NodeView::from_resource(&json!({ "metadata": { "name": "gpu-1" },
            "status": { "conditions": [{ "type": "Ready", "status": "Unknown",
                "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.",
                "lastTransitionTime": "2026-12-05T10:00:00Z" }] } }));
        let why = why_not_ready([&pod], |n| (n == "gpu-1").then_some(&node));
        assert_eq!(
            why,
            Some((
                "NodeNotReady",
                "pod p runs on node gpu-1, which is not Ready (NodeStatusUnknown since 2026-12-05T10:00:00Z: Kubelet stopped posting node status.)".into()
            ))
        );
        let healthy = NodeView::from_resource(&json!({ "metadata": { "name": "gpu-1" },
            "status": { "conditions": [{ "type": "Ready", "status": "True" }] } }));
        let why = why_not_ready([&pod], |_| Some(&healthy));
        assert_eq!(
            why,
            Some((
                "ContainerWaiting",
                "pod p container engine: CrashLoopBackOff: back-off 10s".into()
            ))
        );
    }

    #[test]
    fn a_hydration_pod_tells_why_its_container_last_failed() {
        let pod = |state: Value| {
            json!({ "metadata": { "name": "h-1", "namespace": "ml",
                "labels": { "modelplane.ai/modelcache": "c", "batch.kubernetes.io/job-name": "h" } },
                "status": { "containerStatuses": [state] } })
        };
        let crashed = pod(json!({ "name": "hydrate",
            "state": { "waiting": { "reason": "CrashLoopBackOff" } },
            "lastState": { "terminated": { "exitCode": 1, "message": "401 Client Error: Unauthorized" } } }));
        let mut state = ClusterState::default();
        assert_eq!(state.apply_hydration_pod(&crashed), Some("ml/c".into()));
        assert_eq!(state.apply_hydration_pod(&crashed), None, "unchanged");
        assert_eq!(
            state.hydration_failure("ml", "h"),
            Some("401 Client Error: Unauthorized")
        );
        assert_eq!(state.hydration_failure("ml", "other-job"), None);
        let done = pod(json!({ "name": "hydrate",
            "state": { "terminated": { "exitCode": 0, "message": "staged" } } }));
        assert_eq!(HydrationPod::from_resource(&done).failure, None);
        assert_eq!(state.delete_hydration_pod(&crashed), Some("ml/c".into()));
        assert_eq!(state.hydration_failure("ml", "h"), None);
    }

    #[test]
    fn a_pod_the_scheduler_cannot_place_says_the_schedulers_words() {
        let pod = PodView::from_resource(&json!({
            "metadata": { "name": "p", "namespace": "ml" },
            "status": { "conditions": [{ "type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/2 nodes are available: 2 Insufficient devices." }] } }));
        assert_eq!(
            why_not_ready([&pod], |_| None),
            Some((
                "Unschedulable",
                "pod p waits for a node: 0/2 nodes are available: 2 Insufficient devices.".into()
            ))
        );
    }
}

/// A pod of a cache's hydration Job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HydrationPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The cache it stages (its `modelplane.ai/modelcache` label).
    pub cache: String,
    /// Its Job (its `batch.kubernetes.io/job-name` label).
    pub job: String,
    /// Why its container last failed: the message of its terminated state
    /// (current or last) when it exited with an error — the tail of its
    /// log under `FallbackToLogsOnError`.
    pub failure: Option<String>,
}

impl HydrationPod {
    /// The view of a Pod object.
    pub fn from_resource(pod: &Value) -> HydrationPod {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let failure = pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| [&c["state"]["terminated"], &c["lastState"]["terminated"]])
            .find(|t| t["exitCode"].as_i64().is_some_and(|code| code != 0))
            .and_then(|t| t["message"].as_str())
            .filter(|m| !m.trim().is_empty())
            .map(str::to_string);
        HydrationPod {
            namespace: text(&pod["metadata"]["namespace"]),
            name: text(&pod["metadata"]["name"]),
            cache: text(&pod["metadata"]["labels"][modelplane_api::labels::MODEL_CACHE]),
            job: text(&pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]),
            failure,
        }
    }
}

/// The serving pods, GPU nodes and hydration pods of one workload
/// cluster, as watched.
#[derive(Clone, Debug, Default)]
pub struct ClusterState {
    /// Serving pods, by `(namespace, replica, pod)`.
    pub pods: std::collections::BTreeMap<(String, String, String), PodView>,
    /// GPU nodes, by name.
    pub nodes: std::collections::BTreeMap<String, NodeView>,
    /// Hydration pods, by `(namespace, job, pod)`.
    pub hydration: std::collections::BTreeMap<(String, String, String), HydrationPod>,
}

impl ClusterState {
    /// Why a pod of hydration Job `namespace/job` last failed, if one did.
    pub fn hydration_failure(&self, namespace: &str, job: &str) -> Option<&str> {
        let from = (namespace.to_string(), job.to_string(), String::new());
        self.hydration
            .range(from..)
            .take_while(|((ns, j, _), _)| ns == namespace && j == job)
            .find_map(|(_, pod)| pod.failure.as_deref())
    }

    /// Records a hydration pod; returns its cache, `namespace/name`, when
    /// what it tells changed.
    pub fn apply_hydration_pod(&mut self, pod: &Value) -> Option<String> {
        let view = HydrationPod::from_resource(pod);
        if view.cache.is_empty() || view.job.is_empty() {
            return None;
        }
        let cache = format!("{}/{}", view.namespace, view.cache);
        let key = (view.namespace.clone(), view.job.clone(), view.name.clone());
        let changed = self.hydration.get(&key) != Some(&view);
        self.hydration.insert(key, view);
        changed.then_some(cache)
    }

    /// Forgets a hydration pod; returns its cache.
    pub fn delete_hydration_pod(&mut self, pod: &Value) -> Option<String> {
        let view = HydrationPod::from_resource(pod);
        self.hydration
            .remove(&(view.namespace, view.job, view.name))
            .map(|p| format!("{}/{}", p.namespace, p.cache))
    }

    /// The serving pods of replica `namespace/replica`.
    pub fn pods_of<'a>(
        &'a self,
        namespace: &'a str,
        replica: &'a str,
    ) -> impl Iterator<Item = &'a PodView> + 'a {
        let from = (namespace.to_string(), replica.to_string(), String::new());
        self.pods
            .range(from..)
            .take_while(move |((ns, r, _), _)| ns == namespace && r == replica)
            .map(|(_, pod)| pod)
    }

    /// Records a pod; returns the replica it serves, `namespace/name`.
    pub fn apply_pod(&mut self, pod: &Value) -> Option<String> {
        let view = PodView::from_resource(pod);
        if view.replica.is_empty() {
            return None;
        }
        let replica = format!("{}/{}", view.namespace, view.replica);
        let key = (
            view.namespace.clone(),
            view.replica.clone(),
            view.name.clone(),
        );
        self.pods.insert(key, view);
        Some(replica)
    }

    /// Forgets a pod; returns the replica it served.
    pub fn delete_pod(&mut self, pod: &Value) -> Option<String> {
        let view = PodView::from_resource(pod);
        self.pods
            .remove(&(view.namespace, view.replica, view.name))
            .map(|p| format!("{}/{}", p.namespace, p.replica))
    }

    /// Records a node; returns the replicas with a pod on it.
    pub fn apply_node(&mut self, node: &Value) -> Vec<String> {
        let view = NodeView::from_resource(node);
        let name = view.name.clone();
        let changed = self.nodes.get(&name) != Some(&view);
        self.nodes.insert(name.clone(), view);
        if changed {
            self.replicas_on(&name)
        } else {
            Vec::new()
        }
    }

    /// Forgets a node; returns the replicas with a pod on it.
    pub fn delete_node(&mut self, node: &Value) -> Vec<String> {
        let name = node["metadata"]["name"].as_str().unwrap_or_default();
        self.nodes.remove(name);
        self.replicas_on(name)
    }

    fn replicas_on(&self, node: &str) -> Vec<String> {
        let mut replicas: Vec<String> = self
            .pods
            .values()
            .filter(|p| p.node.as_deref() == Some(node))
            .map(|p| format!("{}/{}", p.namespace, p.replica))
            .collect();
        replicas.dedup();
        replicas
    }
}
