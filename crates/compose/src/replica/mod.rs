//! ModelReplica → the objects that run it on its cluster (`behavior.md` §5,
//! DECISIONS §A3–§A6, H3, H4).
//!
//! Data flow: each engine becomes a stack-independent [`EnginePlan`] (pod
//! templates from `pod`, claim templates); the routing layer decorates the
//! serving pods under PrefillDecode; the cluster's stack — [`standard`] or
//! [`dynamo`], behind [`StackComposer`] — wraps each plan into its workload;
//! `routing` adds the InferencePool, HTTPRoute and endpoint picker.

pub mod dynamo;
pub mod pod;
pub mod routing;
pub mod standard;

use std::collections::BTreeMap;

use modelplane_api::names;
use modelplane_api::types::{
    Engine, InferenceCluster, ModelReplica, Phase, ReplicaMember, Role, ServingMode, Stack,
};
use serde_json::json;

use crate::{Composition, Condition, Desired, Event, EventType, ReadinessRule, Target};
use pod::{MemberContext, PodPlan, member_pod, role_name};

/// What composing a ModelReplica reads.
#[derive(Clone, Copy, Debug)]
pub struct ReplicaInputs<'a> {
    /// The replica.
    pub replica: &'a ModelReplica,
    /// Its InferenceCluster, if it exists.
    pub cluster: Option<&'a InferenceCluster>,
    /// Workloads observed on the cluster, by name: `true` when Ready.
    pub observed: &'a BTreeMap<String, bool>,
}

/// The shape of one engine's pods.
#[derive(Clone, Debug)]
pub enum Shape {
    /// One pod per copy.
    Standalone(PodPlan),
    /// A leader and `nodes` workers per copy.
    Gang {
        /// The leader (rank 0), which serves.
        leader: PodPlan,
        /// Every worker (ranks 1..=nodes).
        worker: Box<PodPlan>,
        /// Worker pods.
        nodes: u32,
    },
}

/// One engine, ready for a stack to wrap.
#[derive(Clone, Debug)]
pub struct EnginePlan {
    /// The replica's name (the serving label value).
    pub replica: String,
    /// The replica's namespace: where its objects go on the cluster.
    pub namespace: String,
    /// The cluster.
    pub cluster: String,
    /// The workload's name.
    pub workload_name: String,
    /// Copies of the engine.
    pub copies: i32,
    /// The pods.
    pub shape: Shape,
}

impl EnginePlan {
    /// The pod that serves traffic (Standalone or leader).
    pub fn serving(&mut self) -> &mut PodPlan {
        match &mut self.shape {
            Shape::Standalone(pod) => pod,
            Shape::Gang { leader, .. } => leader,
        }
    }
}

/// One serving stack's way of running an engine.
pub trait StackComposer {
    /// The workload object for one engine.
    fn workload(&self, plan: EnginePlan) -> Desired;
}

/// The name of an engine's workload on `stack`.
pub fn workload_name(stack: Stack, replica: &str, engine: &str) -> String {
    match stack {
        Stack::Standard => names::workload_name(replica, engine),
        Stack::Dynamo => names::pod_clique_set_name(replica, engine),
    }
}

fn composer(stack: Stack) -> &'static dyn StackComposer {
    match stack {
        Stack::Standard => &standard::Standard,
        Stack::Dynamo => &dynamo::Dynamo,
    }
}

/// The ResourceClaimTemplate of a member that claims devices.
fn claim_template(
    cluster: &str,
    namespace: &str,
    replica: &str,
    engine: &str,
    member: &ReplicaMember,
) -> Option<Desired> {
    let requests = member.device_requests.as_ref().filter(|r| !r.is_empty())?;
    let requests: Vec<serde_json::Value> = requests
        .iter()
        .map(|r| {
            let mut exactly = serde_json::Map::new();
            exactly.insert("deviceClassName".into(), json!(r.device_class_name));
            exactly.insert("count".into(), json!(r.count.unwrap_or(1)));
            let selectors: Vec<serde_json::Value> = r
                .selectors
                .iter()
                .flatten()
                .filter_map(|s| s.cel.as_ref())
                .map(|cel| json!({ "cel": { "expression": cel } }))
                .collect();
            if !selectors.is_empty() {
                exactly.insert("selectors".into(), json!(selectors));
            }
            json!({ "name": r.name, "exactly": exactly })
        })
        .collect();
    Some(Desired {
        target: Target::Cluster(cluster.to_string()),
        object: json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {
                "name": names::claim_template_name(replica, engine, role_name(member.role())),
                "namespace": namespace,
            },
            "spec": { "spec": { "devices": { "requests": requests } } },
        }),
        ready_when: ReadinessRule::Created,
    })
}

/// Plans one engine's pods.
fn plan_engine(
    replica: &ModelReplica,
    cluster: &str,
    stack: Stack,
    engine: &Engine<ReplicaMember>,
) -> EnginePlan {
    let replica_name = replica.metadata.name.clone().unwrap_or_default();
    let pod_of = |member: &ReplicaMember, serving: bool, always_args: bool| {
        member_pod(&MemberContext {
            replica,
            engine: &engine.name,
            member,
            serving,
            always_args,
        })
    };
    let standalone = engine.members.iter().find(|m| m.role() == Role::Standalone);
    let shape = match standalone {
        Some(member) => Shape::Standalone(pod_of(member, true, true)),
        None => {
            let leader = engine.members.iter().find(|m| m.role() == Role::Leader);
            let worker = engine.members.iter().find(|m| m.role() == Role::Worker);
            let nodes = worker
                .and_then(|w| w.worker.as_ref())
                .map_or(1, |w| u32::try_from(w.nodes).unwrap_or(1));
            // Validation guarantees both members; fall back to the first.
            let first = &engine.members[0];
            Shape::Gang {
                leader: pod_of(leader.unwrap_or(first), true, false),
                worker: Box::new(pod_of(worker.unwrap_or(first), false, false)),
                nodes,
            }
        }
    };
    EnginePlan {
        workload_name: workload_name(stack, &replica_name, &engine.name),
        replica: replica_name,
        namespace: replica.metadata.namespace.clone().unwrap_or_default(),
        cluster: cluster.to_string(),
        copies: engine.copies(),
        shape,
    }
}

fn waiting(composition: &mut Composition, reason: &str, event: &str) {
    composition.conditions = vec![
        Condition::new("ModelAccepted", false, reason, ""),
        Condition::new("ModelReady", false, "WaitingForModel", ""),
    ];
    composition.events.push(Event {
        type_: EventType::Normal,
        reason: reason.into(),
        message: event.into(),
    });
}

/// Composes a ModelReplica on its cluster's stack.
pub fn compose_model_replica(inputs: ReplicaInputs<'_>) -> Composition {
    compose_model_replica_reading(inputs.replica, inputs.cluster, |workload| {
        inputs.observed.get(workload.name()).copied()
    })
}

/// Composes a ModelReplica on its cluster's stack in one pass, reading each
/// composed workload's observed readiness through `observed` (`None`: not
/// observed): what the workloads are called is known once they are
/// composed, so the controller needs no first pass to learn their names.
pub fn compose_model_replica_reading(
    replica: &ModelReplica,
    cluster: Option<&InferenceCluster>,
    observed: impl Fn(&Desired) -> Option<bool>,
) -> Composition {
    let mut out = Composition::default();
    let Some(cluster) = cluster else {
        // The cluster is unknown: keep whatever runs, explain, compose nothing new.
        waiting(
            &mut out,
            "WaitingForCluster",
            "Waiting for cluster to be resolved",
        );
        out.hold = true;
        return out;
    };
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    let stack = cluster.spec.stack();
    let replica_name = replica.metadata.name.clone().unwrap_or_default();
    let namespace = replica.metadata.namespace.clone().unwrap_or_default();

    let mut plans: Vec<EnginePlan> = replica
        .spec
        .engines
        .iter()
        .map(|e| plan_engine(replica, &cluster_name, stack, e))
        .collect();

    let disaggregated = replica
        .spec
        .serving
        .as_ref()
        .and_then(|s| s.mode)
        .is_some_and(|m| m == ServingMode::PrefillDecode);
    let block = if disaggregated {
        match decorate_prefill_decode(replica, &mut plans) {
            Ok(block) => block,
            Err(message) => {
                out.conditions = vec![
                    Condition::new("ModelAccepted", false, "InvalidEngineArgs", message.clone()),
                    Condition::new("ModelReady", false, "WaitingForModel", ""),
                ];
                out.events.push(Event {
                    type_: EventType::Warning,
                    reason: "InvalidEngineArgs".into(),
                    message,
                });
                out.hold = true;
                return out;
            }
        }
    } else {
        plans.first_mut().map_or(16, |p| {
            routing::block_size(&routing::engine_args(p.serving()))
        })
    };

    let composer = composer(stack);
    let mut workloads: Vec<Option<bool>> = Vec::new();
    out.desired
        .push(Desired::team_namespace(&cluster_name, &namespace));
    for (engine, plan) in replica.spec.engines.iter().zip(plans) {
        for member in &engine.members {
            out.desired.extend(claim_template(
                &cluster_name,
                &namespace,
                &replica_name,
                &engine.name,
                member,
            ));
        }
        let workload = composer.workload(plan);
        workloads.push(observed(&workload));
        out.desired.push(workload);
    }
    out.desired.extend(routing::routing_objects(
        &cluster_name,
        &namespace,
        &replica_name,
        block,
        disaggregated,
    ));

    let observed = workloads;
    if observed.iter().all(Option::is_none) {
        let image = replica
            .spec
            .engines
            .first()
            .and_then(|e| e.members.first())
            .and_then(|m| m.template.spec.as_ref())
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        out.events.push(Event {
            type_: EventType::Normal,
            reason: "Composing".into(),
            message: format!("Composing {image} on {cluster_name}"),
        });
    }
    let accepted = observed.iter().all(Option::is_some);
    let ready = observed.iter().all(|o| *o == Some(true));
    out.conditions = vec![
        if accepted {
            Condition::new("ModelAccepted", true, "Accepted", "")
        } else {
            Condition::new("ModelAccepted", false, "Deploying", "")
        },
        if ready {
            Condition::new("ModelReady", true, "Serving", "")
        } else if accepted {
            Condition::new("ModelReady", false, "ModelStarting", "")
        } else {
            Condition::new("ModelReady", false, "WaitingForModel", "")
        },
    ];
    out
}

/// Decorates the prefill and decode engines; returns the KV block size (from
/// the decode engine), or the message for a decode `--port` that is not a number.
fn decorate_prefill_decode(
    replica: &ModelReplica,
    plans: &mut [EnginePlan],
) -> Result<i64, String> {
    let replica_name = replica.metadata.name.clone().unwrap_or_default();
    let find = |phase: Phase| {
        replica
            .spec
            .engines
            .iter()
            .position(|e| e.phase == Some(phase))
    };
    if let Some(i) = find(Phase::Prefill) {
        routing::decorate_phase(plans[i].serving(), &replica_name, "prefill");
    }
    let Some(d) = find(Phase::Decode) else {
        return Ok(16);
    };
    let args = routing::engine_args(plans[d].serving());
    let port = routing::decode_port(&args).map_err(|value| {
        format!(
            "engine {}: --port {value:?} is not an integer; the decode engine's port must be a number",
            replica.spec.engines[d].name
        )
    })?;
    let serving = plans[d].serving();
    routing::decorate_phase(serving, &replica_name, "decode");
    routing::decorate_decode(serving, port);
    Ok(routing::block_size(&args))
}
