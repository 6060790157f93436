//! The observed fleet, and the one path from it to each kind's composition.
//!
//! Data flow: whoever observes the fleet (the controllers' watches, or
//! `render` reading manifests) fills a [`World`] — Modelplane's own objects
//! typed, and the objects Modelplane applied as they were observed on each
//! [`Target`] — then asks it for a kind's [`Composition`]: the world gathers
//! exactly what that `compose_<kind>` reads and calls it. The readiness of
//! what was composed before (a workload's `ready_when`, a replica's `Ready`)
//! is read back from the same world, so the controllers and the CLI share
//! every lookup. Pure: no I/O, no clock.

use std::collections::BTreeMap;
use std::sync::Arc;

use modelplane_api::labels;
use modelplane_api::names;
use modelplane_api::types::{
    CloudClusterStatus, InferenceClass, InferenceCluster, InferenceGateway, ModelCache,
    ModelDeployment, ModelEndpoint, ModelService, ServingStack, Source,
};
use modelplane_scheduler::{Cluster, DeviceInterner};
use serde_json::Value;

use crate::{Composition, Desired, ReadinessRule, Target, compose_inference_class};

pub mod first_pass;
mod models;
mod platform;
mod tables;

pub use tables::{Replicas, Row, Table};

pub use crate::cluster::Unreachable;

/// `namespace/name` of a namespaced object, `name` of a cluster-scoped one.
pub type Key = String;

/// The key of an object in `namespace` (or cluster-scoped when `None`).
pub fn key(namespace: Option<&str>, name: &str) -> Key {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// One object on a target, by what identifies it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// `group/version`, or `v1`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// The reference of a manifest.
    pub fn of(object: &Value) -> ObjectRef {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        ObjectRef {
            api_version: text(&object["apiVersion"]),
            kind: text(&object["kind"]),
            namespace: text(&object["metadata"]["namespace"]),
            name: text(&object["metadata"]["name"]),
        }
    }

    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = self.group();
        let kind = if group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{group}", self.kind)
        };
        if self.namespace.is_empty() {
            write!(f, "{kind} {}", self.name)
        } else {
            write!(f, "{kind} {}/{}", self.namespace, self.name)
        }
    }
}

/// What one composition is for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subject {
    /// An InferenceClass, by name.
    Class(Key),
    /// An InferenceCluster, by name.
    Cluster(Key),
    /// A ServingStack (composed by its InferenceCluster), by key.
    Stack(Key),
    /// The InferenceGateway, by name.
    Gateway(Key),
    /// A ModelDeployment, by key.
    Deployment(Key),
    /// A ModelReplica, by key.
    Replica(Key),
    /// A ModelEndpoint, by key.
    Endpoint(Key),
    /// A ModelService, by key.
    Service(Key),
    /// A ModelCache, by key.
    Cache(Key),
    /// A cloud cluster XR (composed by its InferenceCluster): its kind, one
    /// of [`crate::clouds::XR_KINDS`], and key.
    Cloud(&'static str, Key),
    /// The Crossplane providers on demand: one for the whole fleet.
    Providers,
}

/// The key of [`Subject::Providers`], which has no object of its own.
static NO_KEY: Key = Key::new();

impl Subject {
    /// `(apiVersion, kind)` of the object it is.
    pub fn type_meta(&self) -> (&'static str, &'static str) {
        let kind = match self {
            Subject::Class(_) => "InferenceClass",
            Subject::Cluster(_) => "InferenceCluster",
            Subject::Stack(_) => return ("infrastructure.modelplane.ai/v1alpha1", "ServingStack"),
            Subject::Cloud(kind, _) => return ("infrastructure.modelplane.ai/v1alpha1", kind),
            Subject::Providers => return ("pkg.crossplane.io/v1", "Provider"),
            Subject::Gateway(_) => "InferenceGateway",
            Subject::Deployment(_) => "ModelDeployment",
            Subject::Replica(_) => "ModelReplica",
            Subject::Endpoint(_) => "ModelEndpoint",
            Subject::Service(_) => "ModelService",
            Subject::Cache(_) => "ModelCache",
        };
        ("modelplane.ai/v1alpha1", kind)
    }

    /// The key of the object it is.
    pub fn key(&self) -> &Key {
        match self {
            Subject::Class(k)
            | Subject::Cluster(k)
            | Subject::Stack(k)
            | Subject::Gateway(k)
            | Subject::Deployment(k)
            | Subject::Replica(k)
            | Subject::Endpoint(k)
            | Subject::Service(k)
            | Subject::Cache(k)
            | Subject::Cloud(_, k) => k,
            Subject::Providers => &NO_KEY,
        }
    }
}

/// The observed fleet.
#[derive(Clone, Debug, Default)]
pub struct World {
    /// InferenceClusters, by name.
    pub clusters: BTreeMap<Key, Arc<InferenceCluster>>,
    /// InferenceClasses, by name.
    pub classes: BTreeMap<Key, Arc<InferenceClass>>,
    /// ModelDeployments.
    pub deployments: BTreeMap<Key, Arc<ModelDeployment>>,
    /// ModelReplicas.
    pub replicas: Replicas,
    /// ModelCaches.
    pub caches: BTreeMap<Key, Arc<ModelCache>>,
    /// ModelEndpoints.
    pub endpoints: Table<ModelEndpoint>,
    /// ModelServices.
    pub services: BTreeMap<Key, Arc<ModelService>>,
    /// InferenceGateways (one, `default`).
    pub gateways: BTreeMap<Key, Arc<InferenceGateway>>,
    /// Where the built-in fleet gateway is reached, if it runs.
    pub builtin_gateway: Option<String>,
    /// Whether the control plane's lists have all been read once: until
    /// then a missing object may only be unread, so nothing is decided on
    /// its absence.
    pub synced: bool,
    /// The objects Modelplane applied, as observed on each target.
    pub applied: BTreeMap<Target, BTreeMap<ObjectRef, Arc<Value>>>,
    /// The cloud providers' configs a platform team created (the project
    /// and credentials a cloud cluster's composition reads).
    pub provider_configs: BTreeMap<ObjectRef, Arc<Value>>,
    /// Whether each connected workload cluster's API server answers, by
    /// InferenceCluster name: `None` when it does, else why not and since
    /// when. A cluster not connected yet has no entry (nothing known).
    pub reachability: BTreeMap<Key, Option<Unreachable>>,
    /// The serving pods and GPU nodes of each workload cluster, by
    /// InferenceCluster name.
    pub workloads: BTreeMap<Key, crate::observed::ClusterState>,
    /// The Secrets gated ModelCaches name for their token, by
    /// `namespace/name`, as last read: each key's value base64-encoded, as
    /// stored; `None` when the Secret does not exist. Read when a cache is
    /// reconciled, never listed, never logged.
    pub cache_tokens: BTreeMap<Key, Option<BTreeMap<String, String>>>,
    /// The scheduler's view of every cluster, built on the first
    /// composition that needs it after `clusters` changed (see
    /// [`World::clusters_changed`]), not once per deployment composed.
    views: std::sync::OnceLock<Arc<Vec<Cluster>>>,
}

impl ReadinessRule {
    /// Whether `object` (as observed) is ready by this rule.
    pub fn is_met(&self, object: &Value) -> bool {
        match self {
            ReadinessRule::Created | ReadinessRule::Ungated => true,
            ReadinessRule::ConditionTrue(type_) => condition_true(object, type_),
            ReadinessRule::ReplicasAvailable => {
                let wanted = object["spec"]["replicas"].as_i64().unwrap_or(1);
                object["status"]["availableReplicas"]
                    .as_i64()
                    .is_some_and(|available| available >= wanted)
            }
            ReadinessRule::FieldPresent(pointer) => {
                object.pointer(pointer).is_some_and(|v| match v {
                    Value::Null => false,
                    Value::String(s) => !s.is_empty(),
                    Value::Array(a) => !a.is_empty(),
                    Value::Object(o) => !o.is_empty(),
                    _ => true,
                })
            }
            ReadinessRule::FieldEquals { path, value } => {
                object.pointer(path).is_some_and(|v| match v {
                    Value::String(s) => s == value,
                    other => serde_json::from_str::<Value>(value).is_ok_and(|v| v == *other),
                })
            }
        }
    }
}

/// Whether `object` has the condition `type_` with status `True`.
pub fn condition_true(object: &Value, type_: &str) -> bool {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

fn typed_condition_true(conditions: Option<&Vec<modelplane_api::types::Condition>>) -> bool {
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Whether `composition` is ready when `unready` (as [`World::unready`]
/// lists them) are not.
fn ready_with(composition: &Composition, unready: &[String]) -> bool {
    if composition.waiting.is_some() {
        return false;
    }
    if composition.desired.is_empty() {
        return !composition.hold
            && !composition.conditions.is_empty()
            && composition.conditions.iter().all(|c| c.status == "True");
    }
    unready.is_empty()
}

impl World {
    /// The observed object that `desired` would be, if it exists.
    pub fn observed(&self, desired: &Desired) -> Option<&Arc<Value>> {
        self.applied
            .get(&desired.target)?
            .get(&ObjectRef::of(&desired.object))
    }

    /// Whether every object of `composition` is observed and ready by its
    /// rule — Crossplane's `Ready` of the composed-for object. A composition
    /// with nothing to compose (an InferenceClass, the built-in gateway) is
    /// ready when it does not hold and every condition it states is True;
    /// so a deployment scaled to nothing is not. Shared objects (a team's
    /// namespace) are not the subject's own and do not count.
    pub fn all_ready(&self, composition: &Composition) -> bool {
        ready_with(composition, &self.unready(composition))
    }

    /// [`World::all_ready`] and [`World::unready`] in one pass: whether
    /// `composition` is ready, and what is not.
    pub fn readiness(&self, composition: &Composition) -> (bool, Vec<String>) {
        let unready = self.unready(composition);
        (ready_with(composition, &unready), unready)
    }

    /// The objects of `composition` not observed yet or not ready by their
    /// rule, as `Kind/name` (Crossplane names them in its `Ready`
    /// condition: "Unready resources: …").
    pub fn unready(&self, composition: &Composition) -> Vec<String> {
        composition
            .desired
            .iter()
            .filter(|d| d.object["metadata"]["annotations"][labels::SHARED] != "true")
            .filter(|d| d.ready_when != ReadinessRule::Ungated)
            .filter(|d| {
                !self
                    .observed(d)
                    .is_some_and(|observed| d.ready_when.is_met(observed))
            })
            .map(|d| {
                format!(
                    "{}/{}",
                    d.kind(),
                    d.object["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    /// The composition for `subject`, or `None` when the object is gone.
    pub fn compose(&self, subject: &Subject) -> Option<Composition> {
        match subject {
            Subject::Class(key) => self.classes.get(key).map(|_| compose_inference_class()),
            Subject::Cluster(key) => self.compose_cluster(key),
            Subject::Stack(key) => self.compose_stack(key),
            Subject::Gateway(key) => self.compose_gateway(key),
            Subject::Deployment(key) => self.compose_deployment(key),
            Subject::Replica(key) => self.compose_replica(key),
            Subject::Endpoint(key) => self.compose_endpoint(key),
            Subject::Service(key) => self.compose_service(key),
            Subject::Cloud(kind, key) => self.compose_cloud(kind, key),
            Subject::Cache(key) => self.compose_cache(key),
            Subject::Providers => Some(self.compose_providers()),
        }
    }

    /// The object Modelplane applied on `target` with this kind and key:
    /// looked up under each API version the kind is applied at there (the
    /// kinds compositions apply, `kinds::on`), not found by a scan of every
    /// object — a fleet's reconciles ask this thousands of times.
    pub fn applied_object(&self, target: &Target, kind: &str, key: &str) -> Option<&Arc<Value>> {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        let objects = self.applied.get(target)?;
        crate::kinds::on(target)
            .iter()
            .filter(|(_, k)| *k == kind)
            .find_map(|(api_version, _)| {
                objects.get(&ObjectRef {
                    api_version: (*api_version).to_string(),
                    kind: kind.to_string(),
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })
            })
    }

    /// The ServingStack of cluster `name`, as observed.
    pub fn serving_stack(&self, cluster: &str) -> Option<ServingStack> {
        let key = self::key(
            Some(labels::SYSTEM_NAMESPACE),
            &names::serving_stack_name(cluster),
        );
        let observed = self.applied_object(&Target::ControlPlane, "ServingStack", &key)?;
        serde_json::from_value((**observed).clone()).ok()
    }

    /// The status of cluster `name`'s cloud cluster, as observed.
    pub fn cloud_cluster(&self, cluster: &InferenceCluster) -> Option<CloudClusterStatus> {
        let name = cluster.metadata.name.as_deref().unwrap_or_default();
        let kind = crate::cluster::cloud_kind(cluster.spec.cluster.source)?;
        let key = self::key(Some(labels::SYSTEM_NAMESPACE), name);
        let observed = self.applied_object(&Target::ControlPlane, kind, &key)?;
        serde_json::from_value(observed["status"].clone()).ok()
    }

    /// Where cluster `name`'s kubeconfig is: `(namespace, Secret, key)` —
    /// an Existing cluster's from its spec, a provisioned one's as its
    /// cloud cluster published it.
    pub fn kubeconfig_secret(&self, name: &str) -> Result<(String, String, String), String> {
        let cluster = self
            .clusters
            .get(name)
            .ok_or_else(|| format!("InferenceCluster {name} does not exist"))?;
        if cluster.spec.cluster.source == Source::Existing {
            let existing = cluster
                .spec
                .cluster
                .existing
                .as_ref()
                .ok_or("spec.cluster.existing is not set")?;
            return Ok((
                labels::SYSTEM_NAMESPACE.to_string(),
                existing.secret_ref.name.clone(),
                existing.secret_ref.key().to_string(),
            ));
        }
        let published = self
            .cloud_cluster(cluster)
            .and_then(|s| s.secrets)
            .into_iter()
            .flatten()
            .chain(
                self.serving_stack(name)
                    .map(|ss| ss.spec.secrets)
                    .into_iter()
                    .flatten(),
            )
            .find(|s| s.type_ == "Kubeconfig")
            .ok_or("its cloud cluster has not published a kubeconfig yet")?;
        Ok((
            published
                .namespace
                .clone()
                .unwrap_or_else(|| labels::SYSTEM_NAMESPACE.to_string()),
            published.name,
            published.key,
        ))
    }

    /// The scheduler's view of every cluster: built once per change of
    /// `clusters`, shared by every deployment composed until the next.
    pub fn cluster_views(&self) -> Arc<Vec<Cluster>> {
        self.views
            .get_or_init(|| {
                let mut interner = DeviceInterner::default();
                Arc::new(
                    self.clusters
                        .values()
                        .map(|c| Cluster::from_resource(c, &mut interner))
                        .collect(),
                )
            })
            .clone()
    }

    /// Says `clusters` changed: the scheduler's views are built again when
    /// next needed. Whoever writes `clusters` after a composition calls it.
    pub fn clusters_changed(&mut self) {
        self.views = std::sync::OnceLock::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn readiness_rules_read_the_observed_object_as_they_say() {
        let deployment = json!({ "status": { "conditions": [
            { "type": "Progressing", "status": "True" },
            { "type": "Available", "status": "False" } ] } });
        assert!(!ReadinessRule::ConditionTrue("Available".into()).is_met(&deployment));
        assert!(ReadinessRule::ConditionTrue("Progressing".into()).is_met(&deployment));
        let pcs = json!({ "spec": { "replicas": 2 }, "status": { "availableReplicas": 2 } });
        assert!(ReadinessRule::ReplicasAvailable.is_met(&pcs));
        assert!(!ReadinessRule::ReplicasAvailable.is_met(&json!({ "spec": { "replicas": 2 } })));
        let gateway = json!({ "status": { "addresses": [] } });
        assert!(!ReadinessRule::FieldPresent("/status/addresses".into()).is_met(&gateway));
        let pvc = json!({ "status": { "phase": "Bound" } });
        let bound = ReadinessRule::FieldEquals {
            path: "/status/phase".into(),
            value: "Bound".into(),
        };
        assert!(bound.is_met(&pvc));
        assert!(ReadinessRule::Created.is_met(&json!({})));
    }

    #[test]
    fn a_composition_with_nothing_to_compose_is_ready_by_its_conditions() {
        let world = World::default();
        assert!(world.all_ready(&crate::compose_inference_class()));
        let scaled_to_nothing = Composition {
            conditions: vec![crate::Condition::new(
                "ReplicasScheduled",
                false,
                "NoReplicasScheduled",
                "",
            )],
            ..Composition::default()
        };
        assert!(!world.all_ready(&scaled_to_nothing));
        let holding = Composition {
            hold: true,
            ..crate::compose_inference_class()
        };
        assert!(!world.all_ready(&holding));
    }

    #[test]
    fn an_object_ref_names_kind_group_and_place() {
        let r = ObjectRef::of(&json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "namespace": "ml-team" } }));
        assert_eq!(r.to_string(), "Deployment.apps ml-team/web");
        assert_eq!(r.group(), "apps");
        let ns = ObjectRef::of(
            &json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "a" } }),
        );
        assert_eq!(ns.to_string(), "Namespace a");
    }

    #[test]
    fn the_schedulers_views_are_built_once_per_change_of_the_clusters() {
        let cluster = |name: &str| -> Arc<InferenceCluster> {
            Arc::new(
                serde_json::from_value(json!({
                    "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
                    "metadata": { "name": name },
                    "spec": { "cluster": { "source": "Existing",
                        "existing": { "secretRef": { "name": "kc" } } } },
                }))
                .expect("an InferenceCluster"),
            )
        };
        let mut world = World::default();
        world.clusters.insert("a".into(), cluster("a"));
        let first = world.cluster_views();
        assert!(Arc::ptr_eq(&first, &world.cluster_views()), "built once");
        world.clusters.insert("b".into(), cluster("b"));
        world.clusters_changed();
        let second = world.cluster_views();
        assert_eq!((first.len(), second.len()), (1, 2));
    }
}
