//! The Dynamo stack (DECISIONS §A3–§A6): a Grove PodCliqueSet per engine,
//! every pod scheduled by KAI in Modelplane's queue, ModelExpress wired into
//! every engine container.
//!
//! A Leader+Worker engine is a leader clique and one worker clique per rank
//! inside one PodCliqueScalingGroup, all-or-nothing (`minAvailable` equals
//! `replicas` everywhere). The rank is a literal per clique. The leader's
//! address is built from the pod's own Grove labels (replica indexes of the
//! set and of the scaling group) read through the downward API into
//! variables placed ahead of the user's env: released Grove (the recipe pins
//! v0.1.0-alpha.12-rc1) appends its discovery variables *after* the
//! template's env, where an env value cannot refer to them, so the alias
//! must not depend on them. Every gang runs at KAI's non-preemptible
//! `inference` priority (KAI would otherwise treat it as preemptible `train`).
//! When Grove exposes a group-wide pod index, one worker clique with
//! `replicas: nodes` and `MODELPLANE_RANK=$(GROVE_PCSG_POD_INDEX)` replaces
//! the per-rank cliques here, and nowhere else.

use modelplane_api::labels;
use serde_json::{Map, Value, json};

use super::pod::{PodPlan, env, prepend_env};
use super::{EnginePlan, Shape, StackComposer};
use crate::{Desired, ReadinessRule, Target};

/// Composes engines for Grove + KAI + ModelExpress clusters.
pub struct Dynamo;

/// The scaling group holding a gang's cliques.
const GROUP: &str = "g";
/// The leader clique.
const LEADER: &str = "leader";
/// The clique of a Standalone engine.
const STANDALONE: &str = "engine";

/// Grove's pod labels holding the set's and the scaling group's replica
/// index, and the variables Modelplane reads them into.
const PCS_INDEX: (&str, &str) = (
    "MODELPLANE_GROVE_PCS_INDEX",
    "metadata.labels['grove.io/podcliqueset-replica-index']",
);
const PCSG_INDEX: (&str, &str) = (
    "MODELPLANE_GROVE_PCSG_INDEX",
    "metadata.labels['grove.io/podcliquescalinggroup-replica-index']",
);
/// KAI's predefined non-preemptible class for serving.
const PRIORITY_CLASS: &str = "inference";

/// A variable from the downward API.
fn field_env(name: &str, path: &str) -> Value {
    json!({ "name": name, "valueFrom": { "fieldRef": { "fieldPath": path } } })
}

/// The leader pod's address, as Grove names it: hostname
/// `<set>-<i>-<group>-<j>-leader-0` in the set replica's headless service
/// `<set>-<i>`, in the pod's namespace.
fn leader_address(set: &str, namespace: &str) -> String {
    let (i, j) = (PCS_INDEX.0, PCSG_INDEX.0);
    format!("{set}-$({i})-{GROUP}-$({j})-{LEADER}-0.{set}-$({i}).{namespace}.svc.cluster.local")
}

fn model_express() -> Vec<Value> {
    vec![
        env(labels::MX_SERVER_ADDRESS_ENV, labels::MODELEXPRESS_ADDRESS),
        env(labels::MODEL_EXPRESS_URL_ENV, labels::MODELEXPRESS_ADDRESS),
    ]
}

fn clique(name: &str, role: &str, mut pod: PodPlan) -> Value {
    pod.labels
        .insert(labels::KAI_QUEUE_LABEL.into(), json!(labels::KAI_QUEUE));
    let template = pod.into_template(vec![("schedulerName", json!(labels::KAI_SCHEDULER_NAME))]);
    let Value::Object(mut template) = template else {
        return Value::Null;
    };
    let mut clique = Map::new();
    clique.insert("name".into(), json!(name));
    if let Some(Value::Object(mut metadata)) = template.remove("metadata") {
        for key in ["labels", "annotations"] {
            if let Some(v) = metadata.remove(key) {
                clique.insert(key.into(), v);
            }
        }
    }
    clique.insert(
        "spec".into(),
        json!({
            "roleName": role,
            "replicas": 1,
            "minAvailable": 1,
            "podSpec": template.remove("spec").unwrap_or_default(),
        }),
    );
    Value::Object(clique)
}

impl StackComposer for Dynamo {
    fn workload(&self, plan: EnginePlan) -> Desired {
        let EnginePlan {
            replica,
            namespace,
            cluster,
            workload_name,
            copies,
            shape,
        } = plan;
        let mut template = Map::new();
        match shape {
            Shape::Standalone(mut pod) => {
                prepend_env(pod.engine(), model_express());
                pod.labels.insert(labels::SERVING.into(), json!(replica));
                template.insert(
                    "cliques".into(),
                    json!([clique(STANDALONE, STANDALONE, pod)]),
                );
            }
            Shape::Gang {
                mut leader,
                worker,
                nodes,
            } => {
                let address = leader_address(&workload_name, &namespace);
                let gang_env = |rank: u32| {
                    let mut vars = vec![
                        field_env(PCS_INDEX.0, PCS_INDEX.1),
                        field_env(PCSG_INDEX.0, PCSG_INDEX.1),
                        env(labels::LEADER_ADDRESS_ENV, &address),
                        env(labels::RANK_ENV, &rank.to_string()),
                    ];
                    vars.extend(model_express());
                    vars
                };
                prepend_env(leader.engine(), gang_env(0));
                leader.labels.insert(labels::SERVING.into(), json!(replica));
                let mut cliques = vec![clique(LEADER, LEADER, leader)];
                let mut names = vec![json!(LEADER)];
                for rank in 1..=nodes {
                    let mut pod = (*worker).clone();
                    prepend_env(pod.engine(), gang_env(rank));
                    let name = format!("w{rank}");
                    cliques.push(clique(&name, "worker", pod));
                    names.push(json!(name));
                }
                template.insert("cliques".into(), Value::Array(cliques));
                template.insert(
                    "podCliqueScalingGroups".into(),
                    json!([{ "name": GROUP, "cliqueNames": names, "replicas": 1, "minAvailable": 1 }]),
                );
            }
        }
        template.insert("priorityClassName".into(), json!(PRIORITY_CLASS));
        let object = json!({
            "apiVersion": "grove.io/v1alpha1",
            "kind": "PodCliqueSet",
            "metadata": {
                "name": workload_name,
                "namespace": namespace,
                "labels": { labels::KAI_QUEUE_LABEL: labels::KAI_QUEUE },
            },
            "spec": { "replicas": copies, "template": template },
        });
        Desired {
            target: Target::Cluster(cluster),
            object,
            ready_when: ReadinessRule::ReplicasAvailable,
        }
    }
}
