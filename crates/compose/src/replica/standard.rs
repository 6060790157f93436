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
    fn workload(&self, plan: &EnginePlan) -> Desired {
        let object = match &plan.shape {
            Shape::Standalone(pod) => {
                let mut pod = pod.clone();
                pod.labels
                    .insert(labels::SERVING.into(), json!(plan.replica));
                pod.labels
                    .insert(labels::WORKLOAD.into(), json!(plan.workload_name));
                json!({
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": { "name": plan.workload_name, "namespace": labels::WORKLOAD_NAMESPACE },
                    "spec": {
                        "replicas": plan.copies,
                        "selector": { "matchLabels": { labels::WORKLOAD: plan.workload_name } },
                        "template": pod.template(&[]),
                    },
                })
            }
            Shape::Gang {
                leader,
                worker,
                nodes,
            } => {
                let aliases = || {
                    vec![
                        env(labels::LEADER_ADDRESS_ENV, "$(LWS_LEADER_ADDRESS)"),
                        env(labels::RANK_ENV, "$(LWS_WORKER_INDEX)"),
                    ]
                };
                let mut leader = leader.clone();
                prepend_env(leader.engine(), aliases());
                leader
                    .labels
                    .insert(labels::SERVING.into(), json!(plan.replica));
                leader
                    .labels
                    .insert(labels::LWS_ROLE.into(), json!("leader"));
                let mut worker = (**worker).clone();
                prepend_env(worker.engine(), aliases());
                json!({
                    "apiVersion": "leaderworkerset.x-k8s.io/v1",
                    "kind": "LeaderWorkerSet",
                    "metadata": { "name": plan.workload_name, "namespace": labels::WORKLOAD_NAMESPACE },
                    "spec": {
                        "replicas": plan.copies,
                        "leaderWorkerTemplate": {
                            "size": 1 + nodes,
                            "leaderTemplate": leader.template(&[]),
                            "workerTemplate": worker.template(&[]),
                        },
                    },
                })
            }
        };
        Desired {
            target: Target::Cluster(plan.cluster.clone()),
            object,
            ready_when: ReadinessRule::ConditionTrue("Available".into()),
        }
    }
}
