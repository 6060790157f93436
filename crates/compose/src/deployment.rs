//! ModelDeployment → ModelReplicas (one per placement) and ModelEndpoints
//! (one per Ready replica on a cluster with a gateway), with the status,
//! conditions and events of `behavior.md` §4 — holding instead of emptying
//! (DECISIONS §B H2).
//!
//! Data flow: the cache lookup decides whether new replicas may be placed and
//! narrows the cluster selector; the scheduler places; each placement becomes
//! a ModelReplica carrying the scheduler's decisions; replicas the caller
//! reports Ready get a ModelEndpoint.

use std::collections::{BTreeMap, BTreeSet};

use modelplane_api::labels;
use modelplane_api::names;
use modelplane_api::types::{DeploymentMember, ModelCache, ModelDeployment};
use modelplane_scheduler::{
    Cluster, Deployment, Existing, Explain, Hold, Options, Placement, schedule,
};
use serde_json::{Map, Value, json};

use crate::{Composition, Condition, Desired, Event, EventType, ReadinessRule, Target};

/// What is known of the ModelCache a deployment references.
#[derive(Clone, Copy, Debug)]
pub enum CacheLookup<'a> {
    /// The deployment references no cache.
    NotReferenced,
    /// Not looked up yet.
    Unresolved,
    /// Looked up and not found.
    Absent,
    /// Found.
    Present(&'a ModelCache),
}

/// What composing a ModelDeployment reads.
#[derive(Clone, Copy, Debug)]
pub struct DeploymentInputs<'a> {
    /// The deployment.
    pub deployment: &'a ModelDeployment,
    /// Its ModelCache.
    pub cache: CacheLookup<'a>,
    /// Every InferenceCluster, as the scheduler sees them; `None` when the
    /// list could not be read.
    pub clusters: Option<&'a [Cluster]>,
    /// Every ModelReplica of every deployment, as the scheduler sees them
    /// (a `Vec`, or the world's table, which keeps them by deployment).
    pub replicas: &'a dyn Existing,
    /// Names of this deployment's ModelReplicas (in its namespace) that are Ready.
    pub ready: &'a BTreeSet<String>,
    /// Names of this deployment's ModelEndpoints (in its namespace) that
    /// exist: a Ready replica serves through the gateway once its
    /// endpoint does.
    pub routed: &'a BTreeSet<String>,
}

fn warning(reason: &str, message: impl Into<String>) -> Event {
    Event {
        type_: EventType::Warning,
        reason: reason.into(),
        message: message.into(),
    }
}

/// Composes a ModelDeployment.
pub fn compose_model_deployment(inputs: DeploymentInputs<'_>) -> Composition {
    let md = inputs.deployment;
    let mut out = Composition::default();
    let cache_ref = md
        .spec
        .template
        .spec
        .model_cache_ref
        .as_ref()
        .map(|c| c.name.clone());
    let (fill, cache_selector) = match (inputs.cache, &cache_ref) {
        (CacheLookup::NotReferenced, _) | (_, None) => (true, None),
        (CacheLookup::Unresolved, Some(name)) => {
            out.conditions.push(Condition::new(
                "ModelCacheResolved",
                false,
                "ModelCacheUnresolved",
                format!("Waiting for ModelCache {name}"),
            ));
            (false, None)
        }
        (CacheLookup::Absent, Some(name)) => {
            let message = format!("ModelCache {name} not found; holding replica placement");
            out.conditions.push(Condition::new(
                "ModelCacheResolved",
                false,
                "ModelCacheNotFound",
                message.clone(),
            ));
            out.events.push(warning("ModelCacheNotFound", message));
            (false, None)
        }
        (CacheLookup::Present(cache), Some(_)) => {
            out.conditions.push(Condition::new(
                "ModelCacheResolved",
                true,
                "ModelCacheResolved",
                "",
            ));
            let selector = cache
                .spec
                .cluster_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone())
                .filter(|m| !m.is_empty());
            (true, selector)
        }
    };
    let deployment = Deployment::from_resource(md, cache_selector.as_ref());

    let Some(clusters) = inputs.clusters else {
        return hold_no_clusters(out);
    };
    // A cluster hosting one of our replicas whose pools are unknown (its
    // status not published or not readable) would make the scheduler drop
    // the replica and place it again elsewhere: hold instead.
    let ours = inputs
        .replicas
        .of_deployment(&deployment.namespace, &deployment.name);
    let mut unknown: Vec<&str> = ours
        .iter()
        .filter_map(|r| clusters.iter().find(|c| c.name == r.cluster))
        .filter(|c| !c.pools_published)
        .map(|c| c.name.as_str())
        .collect();
    unknown.sort_unstable();
    unknown.dedup();
    if !unknown.is_empty() {
        out.conditions.push(Condition::new(
            "ReplicasScheduled",
            false,
            "ClusterStatusUnknown",
            format!(
                "Holding placement: {} host replicas but publish no GPU pools yet",
                unknown.join(", ")
            ),
        ));
        out.hold = true;
        return out;
    }
    let result = schedule(
        &deployment,
        clusters,
        inputs.replicas,
        // Why the replicas short of the count found no place comes from the
        // same pass: no second one to ask.
        Options {
            fill,
            explain: Explain::WhenShort,
        },
    );
    let placed = match result {
        Ok(s) => s,
        Err(Hold::NoClusters { .. }) => return hold_no_clusters(out),
        Err(Hold::InvalidSelector(e)) => {
            let message = format!("Invalid nodeSelector CEL expression: {e}");
            out.conditions.push(Condition::new(
                "ReplicasScheduled",
                false,
                "InvalidNodeSelector",
                message.clone(),
            ));
            out.events.push(warning("InvalidNodeSelector", message));
            out.hold = true;
            return out;
        }
    };

    let namespace = deployment.namespace.clone();
    let existing: BTreeSet<&str> = ours.iter().map(|r| r.name.as_str()).collect();
    let gateways: BTreeMap<&str, &str> = clusters
        .iter()
        .map(|c| (c.name.as_str(), c.gateway_address.as_str()))
        .collect();

    let mut observed_any = false;
    let mut ready = 0usize;
    for placement in &placed.placements {
        let name = names::replica_name(
            &deployment.name,
            &placement.cluster,
            u32::try_from(placement.index).unwrap_or(0),
        );
        let replica_labels = replica_labels(md, &placement.cluster, placement.index);
        observed_any |= existing.contains(name.as_str());
        out.desired.push(Desired {
            target: Target::ControlPlane,
            object: model_replica(md, &name, &replica_labels, placement),
            ready_when: ReadinessRule::ConditionTrue("Ready".into()),
        });
        let is_ready = inputs.ready.contains(&name);
        if is_ready {
            ready += 1;
        }
        let gateway = gateways
            .get(placement.cluster.as_str())
            .copied()
            .unwrap_or_default();
        if is_ready && !gateway.is_empty() {
            let mut endpoint = json!({
                "apiVersion": "modelplane.ai/v1alpha1",
                "kind": "ModelEndpoint",
                "metadata": { "name": name, "namespace": namespace, "labels": replica_labels },
                "spec": {
                    "url": format!("http://{gateway}/{namespace}/{name}/v1"),
                    "rewritePath": format!("/{namespace}/{name}/"),
                },
            });
            owned_by(&mut endpoint, md);
            out.desired.push(Desired {
                target: Target::ControlPlane,
                object: endpoint,
                ready_when: ReadinessRule::Created,
            });
        }
    }

    let total = placed.placements.len();
    let desired = placed.requested as usize;
    let short = (total < desired).then(|| {
        let explanations = &placed.explanations;
        out.notes = explanations
            .iter()
            .filter(|e| !matches!(e.reason, modelplane_scheduler::Reason::NotNeeded))
            .map(|e| match &e.pool {
                Some(pool) => format!("{}/{pool}: {}", e.cluster, e.reason),
                None => format!("{}: {}", e.cluster, e.reason),
            })
            .collect();
        let shortfall = match (&cache_ref, fill) {
            (Some(cache), false) => Shortfall::ModelCache(cache.clone()),
            _ => Shortfall::of(explanations),
        };
        if let Some(why) = explain_unplaced(explanations) {
            out.events.push(warning(
                "FailedScheduling",
                format!(
                    "{} of {desired} replicas not placed: {why}",
                    desired - total
                ),
            ));
        }
        shortfall
    });
    if total > 0 && !observed_any {
        let clusters: BTreeSet<&str> = placed
            .placements
            .iter()
            .map(|p| p.cluster.as_str())
            .collect();
        out.events.push(Event {
            type_: EventType::Normal,
            reason: "Scheduled".into(),
            message: format!(
                "Scheduled {total} replicas across {} clusters: {}",
                clusters.len(),
                clusters.into_iter().collect::<Vec<_>>().join(", ")
            ),
        });
    }
    let serving = placed
        .placements
        .iter()
        .map(|p| {
            names::replica_name(
                &deployment.name,
                &p.cluster,
                u32::try_from(p.index).unwrap_or(0),
            )
        })
        .filter(|name| inputs.ready.contains(name) && inputs.routed.contains(name))
        .count();
    out.status = Some(json!({
        "replicas": { "desired": desired, "total": total, "ready": ready },
        "ready": format!("{ready}/{desired}"),
    }));
    let scheduled = match &short {
        Some(shortfall) => Condition::new(
            "ReplicasScheduled",
            false,
            shortfall.reason(),
            format!(
                "{total} of {desired} replicas placed (checked {} clusters): {}",
                placed.candidates,
                shortfall.message()
            ),
        ),
        None if observed_any => Condition::new(
            "ReplicasScheduled",
            true,
            "ReplicasCreated",
            format!("Scheduled {total} of {desired} replicas"),
        ),
        None => Condition::new("ReplicasScheduled", false, "Scheduling", ""),
    };
    let unplaced = desired - total;
    let count = if unplaced == 0 {
        format!("{ready} of {desired} ready")
    } else {
        format!("{ready} of {desired} ready, {unplaced} not placed")
    };
    let replicas_ready = if total == 0 {
        Condition::new("ReplicasReady", false, "NoReplicasScheduled", count.clone())
    } else if ready == desired {
        Condition::new("ReplicasReady", true, "AllReplicasReady", count.clone())
    } else if ready == total {
        Condition::new("ReplicasReady", false, "ReplicasNotPlaced", count.clone())
    } else {
        Condition::new("ReplicasReady", false, "ModelStarting", count.clone())
    };
    out.waiting = (ready < desired).then(|| {
        let reason = match &short {
            Some(shortfall) if ready == total => shortfall.reason(),
            _ => replicas_ready.reason.as_str(),
        };
        crate::Waiting::new(reason, format!("{count}; Ready needs every replica Ready"))
    });
    out.conditions.push(scheduled);
    out.conditions.push(replicas_ready);
    out.conditions.push(if serving > 0 {
        Condition::new(
            "Available",
            true,
            "MinimumReplicasAvailable",
            format!("{serving} of {desired} replicas serve through the gateway"),
        )
    } else {
        Condition::new(
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "No replica serves yet",
        )
    });
    out
}

/// Why a deployment has fewer replicas placed than it asks for, from the
/// scheduler's explanations of every cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Shortfall {
    /// Devices match on some pool, but it has no room.
    InsufficientCapacity,
    /// Clusters that may fit are still coming up (not Ready, no gateway
    /// or pools yet).
    WaitingForClusters(Vec<String>),
    /// Clusters that fit carry taints the deployment does not tolerate.
    UntoleratedTaints,
    /// No device of any candidate pool matches the requests.
    NoMatchingDevices,
    /// New replicas wait for the ModelCache the deployment references.
    ModelCache(String),
}

impl Shortfall {
    fn of(explanations: &[modelplane_scheduler::Explanation]) -> Shortfall {
        use modelplane_scheduler::Reason;
        let any = |f: fn(&Reason) -> bool| explanations.iter().any(|e| f(&e.reason));
        if any(|r| matches!(r, Reason::InsufficientDevices { .. })) {
            return Shortfall::InsufficientCapacity;
        }
        // A cluster coming up counts unless none of its pools matches.
        let mut waiting: Vec<String> = explanations
            .iter()
            .filter(|e| {
                matches!(
                    e.reason,
                    Reason::NotReady | Reason::NoGateway | Reason::NoPools
                )
            })
            .map(|e| e.cluster.clone())
            .filter(|cluster| {
                let pools: Vec<_> = explanations
                    .iter()
                    .filter(|e| e.cluster == *cluster && e.pool.is_some())
                    .collect();
                pools.is_empty() || pools.iter().any(|e| !mismatch(&e.reason))
            })
            .collect();
        waiting.dedup();
        if !waiting.is_empty() {
            return Shortfall::WaitingForClusters(waiting);
        }
        if any(|r| matches!(r, Reason::Taint { .. })) {
            return Shortfall::UntoleratedTaints;
        }
        Shortfall::NoMatchingDevices
    }

    fn reason(&self) -> &'static str {
        match self {
            Shortfall::InsufficientCapacity => "InsufficientCapacity",
            Shortfall::WaitingForClusters(_) => "WaitingForClusters",
            Shortfall::UntoleratedTaints => "UntoleratedTaints",
            Shortfall::NoMatchingDevices => "NoMatchingDevices",
            Shortfall::ModelCache(_) => "WaitingForModelCache",
        }
    }

    fn message(&self) -> String {
        match self {
            Shortfall::InsufficientCapacity => "every pool whose devices match is full".to_string(),
            Shortfall::WaitingForClusters(clusters) => {
                format!("waiting for {} to come up", clusters.join(", "))
            }
            Shortfall::UntoleratedTaints => {
                "the clusters that fit carry taints it does not tolerate".to_string()
            }
            Shortfall::NoMatchingDevices => {
                "no device of any pool matches its requests".to_string()
            }
            Shortfall::ModelCache(cache) => {
                format!("new replicas wait for ModelCache {cache}")
            }
        }
    }
}

/// Whether `reason` says a pool's devices do not fit the engine at all.
fn mismatch(reason: &modelplane_scheduler::Reason) -> bool {
    use modelplane_scheduler::Reason;
    matches!(
        reason,
        Reason::DeviceUnmatched { .. } | Reason::NoClaimableDevice | Reason::ClaimStranded { .. }
    )
}

/// The explanations of what kept replicas off each cluster, one sentence
/// per reason with every place it applies: `reason (at a, b/p)`.
fn explain_unplaced(explanations: &[modelplane_scheduler::Explanation]) -> Option<String> {
    let mut by_reason: Vec<(String, Vec<String>)> = Vec::new();
    for e in explanations
        .iter()
        .filter(|e| !matches!(e.reason, modelplane_scheduler::Reason::NotNeeded))
    {
        let mut place = e.cluster.clone();
        if let Some(pool) = &e.pool {
            place = format!("{place}/{pool}");
        }
        if let Some(engine) = &e.engine {
            place = format!("{place} ({engine})");
        }
        let reason = e.reason.to_string();
        match by_reason.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, places)) => places.push(place),
            None => by_reason.push((reason, vec![place])),
        }
    }
    (!by_reason.is_empty()).then(|| {
        by_reason
            .into_iter()
            .map(|(reason, places)| format!("{}: {reason}", places.join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// No cluster to place on, or the list could not be read: keep everything.
fn hold_no_clusters(mut out: Composition) -> Composition {
    out.conditions.push(Condition::new(
        "ReplicasScheduled",
        false,
        "NoClusters",
        "No InferenceClusters found",
    ));
    out.events
        .push(warning("NoClusters", "No InferenceClusters found"));
    out.hold = true;
    out
}

/// Template labels, then the managed ones (which win).
fn replica_labels(md: &ModelDeployment, cluster: &str, index: i64) -> Map<String, Value> {
    let mut labels_map: Map<String, Value> = md
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    labels_map.insert(
        labels::DEPLOYMENT.into(),
        json!(md.metadata.name.clone().unwrap_or_default()),
    );
    labels_map.insert(labels::CLUSTER.into(), json!(cluster));
    // The original's composed resources carry their composite's name, and
    // users' selectors were written against it.
    labels_map.insert(
        labels::COMPOSITE.into(),
        json!(md.metadata.name.clone().unwrap_or_default()),
    );
    labels_map.insert(labels::REPLICA_INDEX.into(), json!(index.to_string()));
    labels_map
}

/// The ModelReplica of one placement (`behavior.md` §4.3).
fn model_replica(
    md: &ModelDeployment,
    name: &str,
    labels: &Map<String, Value>,
    placement: &Placement,
) -> Value {
    let spec = &md.spec.template.spec;
    let mut replica_spec = Map::new();
    replica_spec.insert("clusterName".into(), json!(placement.cluster));
    if let Some(cache) = &spec.model_cache_ref {
        replica_spec.insert("modelCacheRef".into(), json!({ "name": cache.name }));
    }
    if let Some(serving) = &spec.serving {
        replica_spec.insert(
            "serving".into(),
            serde_json::to_value(serving).unwrap_or_default(),
        );
    }
    let engines: Vec<Value> = placement
        .engines
        .iter()
        .filter_map(|placed| {
            let engine = spec.engines.iter().find(|e| e.name == placed.name)?;
            let mut e = Map::new();
            e.insert("name".into(), json!(engine.name));
            e.insert("copies".into(), json!(engine.copies()));
            if let Some(phase) = engine.phase {
                e.insert(
                    "phase".into(),
                    serde_json::to_value(phase).unwrap_or_default(),
                );
            }
            let members: Vec<Value> = engine
                .members
                .iter()
                .zip(&placed.members)
                .map(|(member, at)| replica_member(member, at))
                .collect();
            e.insert("members".into(), json!(members));
            Some(Value::Object(e))
        })
        .collect();
    replica_spec.insert("engines".into(), json!(engines));
    let mut replica = json!({
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {
            "name": name,
            "namespace": md.metadata.namespace.clone().unwrap_or_default(),
            "labels": labels,
        },
        "spec": replica_spec,
    });
    owned_by(&mut replica, md);
    replica
}

/// `object` owned by `md` (its controller), as tools that draw ownership
/// trees (Argo CD, `kubectl tree`) and the garbage collector read it; not
/// before `md` has a uid (a manifest rendered from files).
fn owned_by(object: &mut Value, md: &ModelDeployment) {
    if let (Some(name), Some(uid)) = (&md.metadata.name, &md.metadata.uid) {
        object["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "ModelDeployment",
            "name": name,
            "uid": uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }]);
    }
}

fn replica_member(member: &DeploymentMember, at: &modelplane_scheduler::MemberPlacement) -> Value {
    let mut m = Map::new();
    m.insert(
        "role".into(),
        serde_json::to_value(member.role()).unwrap_or_default(),
    );
    m.insert("nodePoolName".into(), json!(at.pool));
    if !at.device_requests.is_empty() {
        let requests: Vec<Value> = at
            .device_requests
            .iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "deviceClassName": r.device_class_name,
                    "count": r.count,
                    "selectors": r.selectors.iter().map(|s| json!({ "cel": s })).collect::<Vec<_>>(),
                })
            })
            .collect();
        m.insert("deviceRequests".into(), json!(requests));
    }
    if let Some(worker) = &member.worker {
        m.insert("worker".into(), json!({ "nodes": worker.nodes }));
    }
    m.insert(
        "template".into(),
        serde_json::to_value(&member.template).unwrap_or_default(),
    );
    Value::Object(m)
}
