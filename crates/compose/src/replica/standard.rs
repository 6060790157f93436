//! The Standard stack: a Deployment per Standalone engine, a LeaderWorkerSet
//! per Leader+Worker engine (`behavior.md` §5.4–§5.5).

use modelplane_api::labels;
use serde_json::json;

use super::pod::{env, prepend_env};
use super::{EnginePlan, Shape, StackComposer};
use crate::{Desired, ReadinessRule, Target};

/// Composes engines for LeaderWorkerSet clusters.
pub struct Standard;

impl StackComposer for Standard {
    fn workload(&self, plan: EnginePlan) -> Desired {
        let EnginePlan {
            replica,
            namespace,
            cluster,
            workload_name,
            copies,
            shape,
        } = plan;
        let object = match shape {
            Shape::Standalone(mut pod) => {
                pod.labels.insert(labels::SERVING.into(), json!(replica));
                pod.labels
                    .insert(labels::WORKLOAD.into(), json!(workload_name));
                json!({
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": { "name": workload_name, "namespace": namespace },
                    "spec": {
                        "replicas": copies,
                        "selector": { "matchLabels": { labels::WORKLOAD: workload_name } },
                        "template": pod.into_template(Vec::new()),
                    },
                })
            }
            Shape::Gang {
                mut leader,
                worker,
                nodes,
            } => {
                let aliases = || {
                    vec![
                        env(labels::LEADER_ADDRESS_ENV, "$(LWS_LEADER_ADDRESS)"),
                        env(labels::RANK_ENV, "$(LWS_WORKER_INDEX)"),
                    ]
                };
                prepend_env(leader.engine(), aliases());
                leader.labels.insert(labels::SERVING.into(), json!(replica));
                leader
                    .labels
                    .insert(labels::LWS_ROLE.into(), json!("leader"));
                let mut worker = *worker;
                prepend_env(worker.engine(), aliases());
                json!({
                    "apiVersion": "leaderworkerset.x-k8s.io/v1",
                    "kind": "LeaderWorkerSet",
                    "metadata": { "name": workload_name, "namespace": namespace },
                    "spec": {
                        "replicas": copies,
                        "leaderWorkerTemplate": {
                            "size": 1 + nodes,
                            "leaderTemplate": leader.into_template(Vec::new()),
                            "workerTemplate": worker.into_template(Vec::new()),
                        },
                    },
                })
            }
        };
        Desired {
            target: Target::Cluster(cluster),
            object,
            ready_when: ReadinessRule::ConditionTrue("Available".into()),
        }
    }
}
