//! Desired state: pure functions from observed objects to the objects
//! Modelplane wants to exist.
//!
//! Data flow: a controller (or `modelplane render`) gathers what one object's
//! composition reads, calls `compose_<kind>`, and gets a [`Composition`]:
//! every desired object with where it goes ([`Target`]) and when it counts as
//! ready ([`ReadinessRule`]), the status, conditions and events to publish,
//! and whether to [`hold`](Composition::hold) — keep every existing child
//! because the desired state could not be computed. Nothing here does I/O,
//! reads a clock or draws random numbers: the same inputs give the same
//! objects, byte for byte.
#![warn(missing_docs)]

pub mod cache;
pub mod clouds;
pub mod cluster;
pub mod deployment;
pub mod endpoint;
pub mod gateway;
pub mod kinds;
pub mod observed;
pub mod providers;
pub mod recipes;
pub mod replica;
pub mod service;
pub mod stack;
pub mod world;

use serde::Serialize;
use serde_json::Value;

pub use cache::{CacheInputs, Staging, Token, compose_model_cache};
pub use cluster::{ClusterInputs, compose_inference_class, compose_inference_cluster};
pub use deployment::{CacheLookup, DeploymentInputs, compose_model_deployment};
pub use endpoint::{EndpointInputs, compose_model_endpoint};
pub use gateway::{GatewayInputs, compose_inference_gateway};
pub use providers::{ProvidersInputs, compose_providers, plan_providers};
pub use replica::{ReplicaInputs, compose_model_replica, compose_model_replica_reading};
pub use service::{ServiceInputs, compose_model_service};
pub use stack::{StackInputs, compose_serving_stack};

/// Where a desired object is applied.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "target", content = "cluster")]
pub enum Target {
    /// The control plane (Modelplane's own API server or control cluster).
    ControlPlane,
    /// The workload cluster of that InferenceCluster, through its kubeconfig.
    Cluster(String),
}

/// When a desired object counts as ready.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ReadinessRule {
    /// As soon as it exists.
    Created,
    /// Never gates its owner's readiness, observed or not: a Usage protects
    /// what it names from deletion and serves nothing (Crossplane's
    /// readiness check `None`). A cluster's first replica adds one; the
    /// cluster serves as before while it is applied.
    Ungated,
    /// When `status.conditions` has this type with status `True`.
    ConditionTrue(String),
    /// When `status.availableReplicas` reaches `spec.replicas` (Grove).
    ReplicasAvailable,
    /// When the field at this JSON pointer exists and is not empty (e.g. a
    /// Gateway's `status.addresses`).
    FieldPresent(String),
    /// When the field at this JSON pointer has this value (e.g. a PVC `Bound`).
    FieldEquals {
        /// JSON pointer into the object, e.g. `/status/phase`.
        path: String,
        /// The value it must have.
        value: String,
    },
}

/// One object Modelplane wants to exist.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Desired {
    /// Where it goes.
    pub target: Target,
    /// The full manifest: apiVersion, kind, metadata (name, namespace), spec.
    pub object: Value,
    /// When it is ready.
    pub ready_when: ReadinessRule,
}

impl Desired {
    /// A team's namespace on a workload cluster, where its replicas' and
    /// caches' objects live. Several objects want it, so it is marked
    /// [`labels::SHARED`]: created when missing, never pruned.
    pub fn team_namespace(cluster: &str, namespace: &str) -> Desired {
        Desired {
            target: Target::Cluster(cluster.to_string()),
            object: serde_json::json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": { "name": namespace, "annotations": { modelplane_api::labels::SHARED: "true" } },
            }),
            ready_when: ReadinessRule::Created,
        }
    }

    /// `kind` of the object.
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }

    /// `metadata.name` of the object.
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }
}

/// A condition to publish (the controller stamps transition times).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Condition {
    /// Type, e.g. `ReplicasScheduled`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// Reason in CamelCase.
    pub reason: String,
    /// Message; empty when there is none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Condition {
    /// A condition; `ok` gives `True`, else `False`.
    pub fn new(type_: &str, ok: bool, reason: &str, message: impl Into<String>) -> Condition {
        Condition {
            type_: type_.into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Severity of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// Normal.
    Normal,
    /// Warning.
    Warning,
}

/// An event to record on the composed-for object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Normal or Warning.
    #[serde(rename = "type")]
    pub type_: EventType,
    /// Reason in CamelCase.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// Everything one composition decides.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Composition {
    /// Objects that should exist. Owned objects not listed are pruned, unless `hold`.
    pub desired: Vec<Desired>,
    /// Status fields to publish (without conditions), if any.
    pub status: Option<Value>,
    /// Conditions to publish, in order.
    pub conditions: Vec<Condition>,
    /// Events to record, in order.
    pub events: Vec<Event>,
    /// The desired state could not be computed: keep every existing child.
    pub hold: bool,
    /// Why the subject is not Ready though every object composed may be
    /// (a deployment short of Ready replicas): its `Ready` stays False with
    /// this reason. `None`: Ready follows the composed objects alone.
    pub waiting: Option<Waiting>,
    /// What a reader is told beyond the conditions, one line each: why a
    /// deployment's replicas short of its count found no place, per
    /// cluster and pool (what `modelplane render` prints under it).
    pub notes: Vec<String>,
}

/// What a subject's `Ready` waits for beyond its composed objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Waiting {
    /// The `Ready` condition's reason, in CamelCase.
    pub reason: String,
    /// Its message.
    pub message: String,
}

impl Waiting {
    /// Waiting for `reason`, said in `message`.
    pub fn new(reason: &str, message: impl Into<String>) -> Waiting {
        Waiting {
            reason: reason.into(),
            message: message.into(),
        }
    }
}
