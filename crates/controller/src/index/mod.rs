//! The in-memory index of what the watches observed (STYLE.md 2): the
//! control plane's Modelplane objects, typed, and every object Modelplane
//! applied on each target, by its owner. Watch events update it with
//! synchronous `apply`, `delete` and `reset`, which never await and never
//! fail — an object that does not parse is logged and skipped — and each
//! returns the subjects to reconcile because of it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use modelplane_api::labels;
use modelplane_compose::Target;
use modelplane_compose::clouds::XR_KINDS;
use modelplane_compose::providers::cloud_of_group;
use modelplane_compose::world::{Key, ObjectRef, Subject, World, key};
use serde_json::Value;

/// What of a workload cluster's own objects is watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observe {
    /// Pods labelled `modelplane.ai/serving`.
    Pods,
    /// Nodes labelled `modelplane.ai/pool`.
    Nodes,
    /// Pods labelled `modelplane.ai/modelcache`: caches' hydration Jobs'.
    CachePods,
}

/// The control plane's kinds the controller reads, typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// InferenceCluster.
    Cluster,
    /// InferenceClass.
    Class,
    /// InferenceGateway.
    Gateway,
    /// ModelDeployment.
    Deployment,
    /// ModelReplica.
    Replica,
    /// ModelCache.
    Cache,
    /// ModelEndpoint.
    Endpoint,
    /// ModelService.
    Service,
}

impl Kind {
    /// Every kind, in the order they are watched.
    pub const ALL: [Kind; 8] = [
        Kind::Cluster,
        Kind::Class,
        Kind::Gateway,
        Kind::Cache,
        Kind::Deployment,
        Kind::Replica,
        Kind::Endpoint,
        Kind::Service,
    ];

    /// `(apiVersion, kind)`.
    pub fn type_meta(self) -> (&'static str, &'static str) {
        let kind = match self {
            Kind::Cluster => "InferenceCluster",
            Kind::Class => "InferenceClass",
            Kind::Gateway => "InferenceGateway",
            Kind::Deployment => "ModelDeployment",
            Kind::Replica => "ModelReplica",
            Kind::Cache => "ModelCache",
            Kind::Endpoint => "ModelEndpoint",
            Kind::Service => "ModelService",
        };
        ("modelplane.ai/v1alpha1", kind)
    }

    /// The kind named `kind` (`ModelCache`), if it is one of these.
    pub fn named(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.type_meta().1 == kind)
    }

    /// The subject an object of this kind is, if it is one.
    fn subject(self, key: Key) -> Option<Subject> {
        Some(match self {
            Kind::Cluster => Subject::Cluster(key),
            Kind::Class => Subject::Class(key),
            Kind::Gateway => Subject::Gateway(key),
            Kind::Deployment => Subject::Deployment(key),
            Kind::Replica => Subject::Replica(key),
            Kind::Endpoint => Subject::Endpoint(key),
            Kind::Service => Subject::Service(key),
            Kind::Cache => Subject::Cache(key),
        })
    }
}

mod locked;
mod targets;

pub use locked::Locked;

/// The owner uid of what the providers on demand compose (they have no
/// object of their own, so their objects are labelled with this).
pub const PROVIDERS_UID: &str = "modelplane-providers";

/// Everything observed.
pub struct Index {
    /// The fleet as compose reads it.
    pub world: World,
    /// The control-plane kinds listed at least once.
    listed: BTreeSet<Kind>,
    /// Which subject each uid is (deployments and replicas own objects).
    subjects: HashMap<String, Subject>,
    /// The uid of each subject.
    uids: HashMap<Subject, String>,
    /// Objects Modelplane applied, by the uid of their owner.
    owned: HashMap<String, BTreeSet<(Target, ObjectRef)>>,
    /// The owned kinds listed at least once, per target.
    owned_listed: BTreeMap<Target, BTreeSet<(String, String)>>,
    /// What placement reads of each InferenceCluster, as last seen.
    placement_views: HashMap<Key, Value>,
}

impl Default for Index {
    fn default() -> Self {
        let mut index = Index {
            world: World::default(),
            listed: BTreeSet::new(),
            subjects: HashMap::new(),
            uids: HashMap::new(),
            owned: HashMap::new(),
            owned_listed: BTreeMap::new(),
            placement_views: HashMap::new(),
        };
        index
            .uids
            .insert(Subject::Providers, PROVIDERS_UID.to_string());
        index
            .subjects
            .insert(PROVIDERS_UID.to_string(), Subject::Providers);
        index
    }
}

fn uid(object: &Value) -> Option<String> {
    object["metadata"]["uid"].as_str().map(str::to_string)
}

fn owner_uid(object: &Value) -> Option<&str> {
    object["metadata"]["labels"][labels::OWNER_UID].as_str()
}

/// The index key of a namespaced or cluster-scoped object.
pub fn object_key(object: &Value) -> Key {
    key(
        object["metadata"]["namespace"].as_str(),
        object["metadata"]["name"].as_str().unwrap_or_default(),
    )
}

fn typed<T: serde::de::DeserializeOwned>(object: &Value) -> Option<Arc<T>> {
    match serde_json::from_value::<T>(object.clone()) {
        Ok(typed) => Some(Arc::new(typed)),
        Err(e) => {
            tracing::warn!(object = %ObjectRef::of(object), error = %e, "skipping an object that does not parse");
            None
        }
    }
}

impl Index {
    /// The subject that `uid` is, if known.
    pub fn subject_of(&self, uid: &str) -> Option<&Subject> {
        self.subjects.get(uid)
    }

    /// The uid of `subject`, if it is observed.
    pub fn uid_of(&self, subject: &Subject) -> Option<&str> {
        self.uids.get(subject).map(String::as_str)
    }

    /// Every object owned by `uid`, as observed.
    pub fn owned_by(&self, uid: &str) -> Vec<(Target, ObjectRef)> {
        self.owned
            .get(uid)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether every control-plane kind has been listed.
    pub fn synced(&self) -> bool {
        self.world.synced
    }

    /// The control-plane kinds not listed yet.
    pub fn unlisted(&self) -> Vec<Kind> {
        Kind::ALL
            .into_iter()
            .filter(|k| !self.listed.contains(k))
            .collect()
    }

    /// Whether `kind` of owned objects on `target` has been listed.
    pub fn owned_synced(&self, target: &Target, api_version: &str, kind: &str) -> bool {
        self.owned_listed
            .get(target)
            .is_some_and(|l| l.contains(&(api_version.to_string(), kind.to_string())))
    }

    /// Whether the subject with `uid` is observed (objects labelled with
    /// an unknown owner's uid are orphans).
    pub fn knows_owner(&self, uid: &str) -> bool {
        self.subjects.contains_key(uid)
    }

    /// Objects on `target` whose owner is no observed subject, as observed.
    pub fn orphans(&self, target: &Target) -> Vec<(ObjectRef, Arc<Value>)> {
        let Some(applied) = self.world.applied.get(target) else {
            return Vec::new();
        };
        applied
            .iter()
            .filter(|(_, object)| {
                owner_uid(object).is_some_and(|owner| !self.subjects.contains_key(owner))
            })
            .map(|(r, o)| (r.clone(), o.clone()))
            .collect()
    }

    /// Every subject observed.
    pub fn subjects(&self) -> Vec<Subject> {
        let mut subjects: Vec<Subject> = self.uids.keys().cloned().collect();
        subjects.sort();
        subjects
    }

    /// The object `subject` is, as observed.
    pub fn subject_object(&self, subject: &Subject) -> Option<Value> {
        let w = &self.world;
        let value = |v: Option<serde_json::Result<Value>>| v.and_then(Result::ok);
        match subject {
            Subject::Class(k) => value(w.classes.get(k).map(|o| serde_json::to_value(o.as_ref()))),
            Subject::Cluster(k) => {
                value(w.clusters.get(k).map(|o| serde_json::to_value(o.as_ref())))
            }
            Subject::Gateway(k) => {
                value(w.gateways.get(k).map(|o| serde_json::to_value(o.as_ref())))
            }
            Subject::Deployment(k) => value(
                w.deployments
                    .get(k)
                    .map(|o| serde_json::to_value(o.as_ref())),
            ),
            Subject::Replica(k) => {
                value(w.replicas.get(k).map(|o| serde_json::to_value(o.as_ref())))
            }
            Subject::Endpoint(k) => {
                value(w.endpoints.get(k).map(|o| serde_json::to_value(o.as_ref())))
            }
            Subject::Service(k) => {
                value(w.services.get(k).map(|o| serde_json::to_value(o.as_ref())))
            }
            Subject::Stack(k) => w
                .applied_object(&Target::ControlPlane, "ServingStack", k)
                .map(|o| (**o).clone()),
            Subject::Cloud(kind, k) => w
                .applied_object(&Target::ControlPlane, kind, k)
                .map(|o| (**o).clone()),
            Subject::Cache(k) => value(w.caches.get(k).map(|o| serde_json::to_value(o.as_ref()))),
            Subject::Providers => None,
        }
    }

    fn deployments(&self) -> Vec<Subject> {
        self.world
            .deployments
            .keys()
            .cloned()
            .map(Subject::Deployment)
            .collect()
    }

    /// Records a control-plane object; returns what to reconcile.
    pub fn apply(&mut self, kind: Kind, object: &Value) -> Vec<Subject> {
        let key = object_key(object);
        if self
            .version_of(kind, &key)
            .is_some_and(|known| is_later(&known, object))
        {
            // A watch event older than a version this process wrote and
            // took in already: what it wrote stands.
            return Vec::new();
        }
        // Its uid counts even if it does not parse: what it owns is no
        // orphan.
        if let Some(subject) = kind.subject(key.clone()) {
            self.remember(object, &subject);
        }
        let hosted_before = (kind == Kind::Replica)
            .then(|| self.hosted_on(&key))
            .flatten();
        let stored = match kind {
            Kind::Cluster => typed(object).map(|o| {
                self.world.clusters.insert(key.clone(), o);
                self.world.clusters_changed();
            }),
            Kind::Class => typed(object).map(|o| drop(self.world.classes.insert(key.clone(), o))),
            Kind::Gateway => {
                typed(object).map(|o| drop(self.world.gateways.insert(key.clone(), o)))
            }
            Kind::Cache => typed(object).map(|o| drop(self.world.caches.insert(key.clone(), o))),
            Kind::Deployment => {
                typed(object).map(|o| drop(self.world.deployments.insert(key.clone(), o)))
            }
            Kind::Replica => {
                typed(object).map(|o| drop(self.world.replicas.insert(key.clone(), o)))
            }
            Kind::Endpoint => {
                typed(object).map(|o| drop(self.world.endpoints.insert(key.clone(), o)))
            }
            Kind::Service => {
                typed(object).map(|o| drop(self.world.services.insert(key.clone(), o)))
            }
        };
        if stored.is_none() {
            return Vec::new();
        }
        let mut subjects = self.concerned(kind, object, &key);
        if let Some(before) = hosted_before {
            // A cluster's composition reads whether it hosts replicas (a
            // Usage guards it while it does), not how they are: a
            // replica's status moving (thousands in a fleet's bring-up)
            // plans no cluster again.
            if object["spec"]["clusterName"] == before.as_str() {
                subjects.retain(|s| !matches!(s, Subject::Cluster(_)));
            } else {
                subjects.push(Subject::Cluster(before));
            }
        }
        if kind == Kind::Cluster {
            let view = placement_view(object);
            if self.placement_views.get(&key) == Some(&view) {
                // A status change placement does not read (a condition
                // other than Ready, a message): every deployment planned
                // again for it was most of a fleet's bring-up.
                subjects.retain(|s| !matches!(s, Subject::Deployment(_)));
            }
            self.placement_views.insert(key, view);
        }
        subjects
    }

    /// What a change of `object` (of `kind`, at `key`) concerns.
    fn concerned(&self, kind: Kind, object: &Value, key: &str) -> Vec<Subject> {
        let own = kind.subject(key.to_string());
        let all = |f: fn(Key) -> Subject, keys: Vec<&Key>| -> Vec<Subject> {
            keys.into_iter().cloned().map(f).collect()
        };
        let deployments = || all(Subject::Deployment, self.world.deployments.keys().collect());
        let services = || all(Subject::Service, self.world.services.keys().collect());
        let mut subjects: Vec<Subject> = own.into_iter().collect();
        match kind {
            Kind::Cluster => {
                subjects.extend(self.after_cluster_change(key));
                subjects.extend(all(Subject::Cache, self.world.caches.keys().collect()));
                subjects.push(Subject::Providers);
            }
            Kind::Class => {
                subjects.extend(deployments());
                subjects.extend(all(Subject::Cluster, self.world.clusters.keys().collect()));
            }
            Kind::Cache => subjects.extend(deployments()),
            Kind::Gateway => {
                subjects.extend(services());
                subjects.push(Subject::Providers);
            }
            Kind::Endpoint => subjects.extend(services()),
            Kind::Replica => {
                let labels = &object["metadata"]["labels"];
                if let Some(d) = labels[labels::DEPLOYMENT].as_str() {
                    subjects.push(Subject::Deployment(key_in(object, d)));
                }
                if let Some(c) = object["spec"]["clusterName"].as_str() {
                    subjects.push(Subject::Cluster(c.to_string()));
                }
            }
            Kind::Deployment | Kind::Service => {}
        }
        subjects
    }

    fn remember(&mut self, object: &Value, subject: &Subject) {
        if let Some(uid) = uid(object) {
            if let Some(old) = self.uids.insert(subject.clone(), uid.clone())
                && old != uid
            {
                self.subjects.remove(&old);
            }
            self.subjects.insert(uid, subject.clone());
        }
    }

    fn forget(&mut self, subject: &Subject) {
        if let Some(uid) = self.uids.remove(subject) {
            self.subjects.remove(&uid);
        }
    }

    fn after_cluster_change(&self, cluster: &str) -> Vec<Subject> {
        let replicas = self
            .world
            .replicas
            .on_cluster(cluster)
            .map(|(k, _)| Subject::Replica(k.clone()));
        self.deployments().into_iter().chain(replicas).collect()
    }

    /// Forgets a deleted control-plane object; returns what to reconcile.
    pub fn delete(&mut self, kind: Kind, object: &Value) -> Vec<Subject> {
        let key = object_key(object);
        self.remove(kind, &key);
        let mut subjects = self.concerned(kind, object, &key);
        // The object itself is gone: nothing to compose for it.
        subjects.retain(|s| Some(s) != kind.subject(key.clone()).as_ref());
        if kind == Kind::Replica {
            // What it held is free: a deployment short of replicas may
            // place now, not at the next resync.
            subjects.extend(self.short_deployments());
        }
        subjects
    }

    /// The deployments whose last status says fewer replicas are placed
    /// than asked for (or that have published none yet).
    pub fn short_deployments(&self) -> Vec<Subject> {
        self.world
            .deployments
            .iter()
            .filter(|(_, d)| {
                let placed = d
                    .status
                    .as_ref()
                    .and_then(|s| s.replicas.as_ref())
                    .and_then(|r| r.total);
                placed.is_none_or(|placed| placed < d.spec.replicas)
            })
            .map(|(k, _)| Subject::Deployment(k.clone()))
            .collect()
    }

    fn remove(&mut self, kind: Kind, key: &str) {
        match kind {
            Kind::Cluster => {
                self.placement_views.remove(key);
                drop(self.world.clusters.remove(key));
                self.world.clusters_changed();
            }
            Kind::Class => drop(self.world.classes.remove(key)),
            Kind::Gateway => drop(self.world.gateways.remove(key)),
            Kind::Cache => drop(self.world.caches.remove(key)),
            Kind::Deployment => drop(self.world.deployments.remove(key)),
            Kind::Replica => drop(self.world.replicas.remove(key)),
            Kind::Endpoint => drop(self.world.endpoints.remove(key)),
            Kind::Service => drop(self.world.services.remove(key)),
        }
        if let Some(subject) = kind.subject(key.to_string()) {
            self.forget(&subject);
        }
    }

    fn keys(&self, kind: Kind) -> Vec<Key> {
        match kind {
            Kind::Cluster => self.world.clusters.keys().cloned().collect(),
            Kind::Class => self.world.classes.keys().cloned().collect(),
            Kind::Gateway => self.world.gateways.keys().cloned().collect(),
            Kind::Cache => self.world.caches.keys().cloned().collect(),
            Kind::Deployment => self.world.deployments.keys().cloned().collect(),
            Kind::Replica => self.world.replicas.keys().cloned().collect(),
            Kind::Endpoint => self.world.endpoints.keys().cloned().collect(),
            Kind::Service => self.world.services.keys().cloned().collect(),
        }
    }

    /// The uid and resourceVersion known of the `kind` object at `key`.
    fn version_of(&self, kind: Kind, key: &Key) -> Option<(String, String)> {
        fn of<T: kube::Resource>(
            map: &BTreeMap<Key, Arc<T>>,
            key: &Key,
        ) -> Option<(String, String)> {
            let meta = map.get(key)?.meta();
            Some((meta.uid.clone()?, meta.resource_version.clone()?))
        }
        let w = &self.world;
        match kind {
            Kind::Cluster => of(&w.clusters, key),
            Kind::Class => of(&w.classes, key),
            Kind::Gateway => of(&w.gateways, key),
            Kind::Cache => of(&w.caches, key),
            Kind::Deployment => of(&w.deployments, key),
            Kind::Replica => of(&w.replicas, key),
            Kind::Endpoint => of(&w.endpoints, key),
            Kind::Service => of(&w.services, key),
        }
    }

    /// Replaces every object of `kind` with a fresh list; returns what to
    /// reconcile (everything, once every kind is listed).
    pub fn reset(&mut self, kind: Kind, objects: &[Value]) -> Vec<Subject> {
        // Only what the list no longer has goes: an object that is listed
        // but does not parse keeps what was known of it.
        let listed: BTreeSet<Key> = objects.iter().map(object_key).collect();
        for key in self.keys(kind) {
            // A booked replica is not on the server yet: its create is on
            // its way (or fails, and unbooks it).
            let booked = kind == Kind::Replica && self.is_booked(&key);
            if !listed.contains(&key) && !booked {
                self.remove(kind, &key);
            }
        }
        for object in objects {
            self.apply(kind, object);
        }
        self.listed.insert(kind);
        self.world.synced = Kind::ALL.iter().all(|k| self.listed.contains(k));
        if self.world.synced {
            self.subjects()
        } else {
            Vec::new()
        }
    }

    /// Takes in an object of `kind` as this process's write of it was
    /// answered, unless its watch already delivered a later version: the
    /// next reconcile reads what was written, not what the watch event has
    /// yet to bring (a composition reading its own last status, say).
    /// Returns what to reconcile for it, as its watch event would have.
    pub fn assume(&mut self, kind: Kind, object: &Value) -> Vec<Subject> {
        if object["metadata"]["resourceVersion"].as_str().is_none() {
            return Vec::new();
        }
        self.apply(kind, object)
    }

    /// [`Index::assume`] for a status written: only of an object still
    /// known (one deleted meanwhile is not brought back).
    pub fn assume_status(&mut self, kind: Kind, object: &Value) -> Vec<Subject> {
        if self.version_of(kind, &object_key(object)).is_none() {
            return Vec::new();
        }
        self.assume(kind, object)
    }

    /// Books a ModelReplica about to be created: counted by the next
    /// deployment's placement before its create is answered, as a
    /// scheduler assumes a pod it is binding. Returns what planned around
    /// it (its cluster now hosts it); none (nothing booked) when one of
    /// that name is known already.
    pub fn book_replica(&mut self, object: &Value) -> Option<Vec<Subject>> {
        let key = object_key(object);
        if self.world.replicas.contains_key(&key) {
            return None;
        }
        Some(self.apply(Kind::Replica, object))
    }

    /// The cluster the replica at `key` is on (booked or on the server).
    fn hosted_on(&self, key: &Key) -> Option<String> {
        let replica = self.world.replicas.get(key)?;
        Some(replica.spec.cluster_name.clone())
    }

    /// Whether the replica at `key` is booked, not yet on the server (what
    /// the server holds has a uid).
    fn is_booked(&self, key: &Key) -> bool {
        self.world
            .replicas
            .get(key)
            .is_some_and(|r| r.metadata.uid.is_none())
    }

    /// Forgets a booked ModelReplica whose create failed, unless the
    /// server's copy (a version of it) came in meanwhile; returns what
    /// planned around it (its deployment, its cluster).
    pub fn unbook_replica(&mut self, object: &Value) -> Vec<Subject> {
        let key = object_key(object);
        if !self.is_booked(&key) {
            return Vec::new();
        }
        self.remove(Kind::Replica, &key);
        let mut subjects = self.concerned(Kind::Replica, object, &key);
        subjects.retain(|s| *s != Subject::Replica(key.clone()));
        subjects
    }
}

/// The key of `name` in the namespace of `object`.
fn key_in(object: &Value, name: &str) -> Key {
    key(object["metadata"]["namespace"].as_str(), name)
}

/// What the scheduler reads of an InferenceCluster (its labels, spec,
/// deletion, published pools, cache and gateway, and whether it is Ready):
/// a change elsewhere places nothing differently.
fn placement_view(cluster: &Value) -> Value {
    let status = &cluster["status"];
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| c["status"].clone());
    serde_json::json!({
        "labels": cluster["metadata"]["labels"],
        "deleting": cluster["metadata"]["deletionTimestamp"],
        "spec": cluster["spec"],
        "status": {
            "ready": ready,
            "gpuPools": status["gpuPools"],
            "gateway": status["gateway"],
            "cache": status["cache"],
        },
    })
}

/// Whether `known` (uid, resourceVersion) is a later version of the same
/// object than `incoming`, as [`is_newer`] judges.
fn is_later(known: &(String, String), incoming: &Value) -> bool {
    let metadata = &incoming["metadata"];
    metadata["uid"] == known.0.as_str()
        && newer_version(Some(&known.1), metadata["resourceVersion"].as_str())
}

/// Whether `known` is a later version of the same object than `incoming`.
fn is_newer(known: &Value, incoming: &Value) -> bool {
    let (known, incoming) = (&known["metadata"], &incoming["metadata"]);
    known["uid"] == incoming["uid"]
        && newer_version(
            known["resourceVersion"].as_str(),
            incoming["resourceVersion"].as_str(),
        )
}

/// resourceVersions are opaque to clients, but every server Modelplane
/// talks to (etcd's revisions, the embedded store's) numbers them in
/// order; one that is not a number is never judged older.
fn newer_version(known: Option<&str>, incoming: Option<&str>) -> bool {
    let number = |v: Option<&str>| v?.parse::<u64>().ok();
    matches!((number(known), number(incoming)), (Some(k), Some(i)) if k > i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn workload(owner: &str) -> Value {
        json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "w", "namespace": "t", "uid": "w-1",
                "labels": { labels::OWNER_UID: owner } } })
    }

    #[test]
    fn what_an_unparseable_replica_owns_is_no_orphan() {
        let mut index = Index::default();
        for kind in Kind::ALL {
            index.reset(kind, &[]);
        }
        // Version skew: a replica this build cannot read.
        let unreadable = json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
            "metadata": { "name": "r", "namespace": "t", "uid": "r-1" }, "spec": "from the future" });
        index.reset(Kind::Replica, &[unreadable]);
        let cluster = Target::Cluster("edge".into());
        index.apply_owned(&cluster, workload("r-1"));
        assert!(index.orphans(&cluster).is_empty());
        index.apply_owned(&cluster, {
            let mut w = workload("gone");
            w["metadata"]["name"] = json!("x");
            w
        });
        assert_eq!(
            index.orphans(&cluster).len(),
            1,
            "an unknown owner's object is one"
        );
    }

    #[test]
    fn an_apply_answered_after_a_newer_watch_event_does_not_undo_it() {
        let mut index = Index::default();
        let cluster = Target::Cluster("edge".into());
        let at = |version: &str, status: Value| {
            let mut w = workload("r-1");
            w["metadata"]["resourceVersion"] = json!(version);
            w["status"] = status;
            w
        };
        // The simulated controller set the status (seen by the watch)
        // before the apply's own answer, without it, was taken in.
        index.apply_owned(&cluster, at("7", json!({ "ready": true })));
        index.apply_owned(&cluster, at("6", Value::Null));
        let reference = ObjectRef::of(&workload("r-1"));
        assert_eq!(
            index.world.applied[&cluster][&reference]["status"],
            json!({ "ready": true })
        );
        index.apply_owned(&cluster, at("8", Value::Null));
        assert_eq!(
            index.world.applied[&cluster][&reference]["status"],
            Value::Null
        );
    }

    #[test]
    fn a_status_written_is_read_back_before_its_watch_event_but_never_over_a_newer_one() {
        let mut index = Index::default();
        let replica = |version: &str, ready: &str| {
            json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
                "metadata": { "name": "r", "namespace": "t", "uid": "r-1", "resourceVersion": version },
                "spec": { "clusterName": "edge", "engines": [] },
                "status": { "conditions": [{ "type": "Ready", "status": ready, "reason": "R",
                    "message": "", "lastTransitionTime": "2026-12-02T00:00:00Z" }] } })
        };
        let ready = |index: &Index| {
            let subject = Kind::Replica
                .subject(object_key(&replica("0", "")))
                .expect("a subject");
            index.subject_object(&subject).expect("the replica")["status"]["conditions"][0]
                ["status"]
                .clone()
        };
        index.reset(Kind::Replica, &[replica("5", "False")]);
        // A composition that reads its own last status (a cache's staged
        // cluster latched) must see the status just written: before, the
        // next pass read the old one and composed the hydration Job again.
        index.assume(Kind::Replica, &replica("6", "True"));
        assert_eq!(ready(&index), "True");
        // The watch event of the write before arrives late: it is older.
        index.apply(Kind::Replica, &replica("5", "False"));
        assert_eq!(
            ready(&index),
            "True",
            "an older watch event does not undo it"
        );
        index.apply(Kind::Replica, &replica("8", "False"));
        index.assume(Kind::Replica, &replica("7", "True"));
        assert_eq!(ready(&index), "False", "the watch's later version stands");
    }

    #[test]
    fn deployments_are_planned_again_only_for_what_placement_reads_of_a_cluster() {
        let mut index = Index::default();
        let deployment = json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
            "metadata": { "name": "d", "namespace": "t", "uid": "d-1" },
            "spec": { "replicas": 1, "template": { "spec": { "engines": [] } } } });
        index.apply(Kind::Deployment, &deployment);
        let cluster = |conditions: Value| {
            json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
                "metadata": { "name": "edge", "uid": "c-1" },
                "spec": { "stack": "Standard", "cluster": { "source": "EKS", "eks": { "region": "us-east-1" } } },
                "status": { "conditions": conditions } })
        };
        let condition = |type_: &str, status: &str| {
            json!({ "type": type_, "status": status, "reason": "R", "message": "",
                "lastTransitionTime": "2026-12-02T00:00:00Z" })
        };
        let plans_deployment =
            |subjects: Vec<Subject>| subjects.iter().any(|s| matches!(s, Subject::Deployment(_)));
        let not_ready = cluster(json!([condition("Ready", "False")]));
        assert!(plans_deployment(index.apply(Kind::Cluster, &not_ready)));
        // Another condition moves: nothing placement reads.
        let installing = cluster(json!([
            condition("Ready", "False"),
            condition("BackendReady", "False")
        ]));
        assert!(!plans_deployment(index.apply(Kind::Cluster, &installing)));
        let ready = cluster(json!([
            condition("Ready", "True"),
            condition("BackendReady", "True")
        ]));
        assert!(plans_deployment(index.apply(Kind::Cluster, &ready)));
    }

    #[test]
    fn a_replica_deleted_plans_every_deployment_short_of_replicas_at_once() {
        let mut index = Index::default();
        let deployment = |name: &str, replicas: i64, placed: i64| {
            json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
                "metadata": { "name": name, "namespace": "t", "uid": format!("{name}-1") },
                "spec": { "replicas": replicas, "template": { "spec": { "engines": [] } } },
                "status": { "replicas": { "desired": replicas, "total": placed, "ready": placed } } })
        };
        index.apply(Kind::Deployment, &deployment("short", 3, 1));
        index.apply(Kind::Deployment, &deployment("whole", 2, 2));
        let replica = json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
            "metadata": { "name": "gone-edge-0", "namespace": "t", "uid": "r-1",
                "labels": { labels::DEPLOYMENT: "gone" } },
            "spec": { "clusterName": "edge", "engines": [] } });
        index.apply(Kind::Replica, &replica);
        let planned = index.delete(Kind::Replica, &replica);
        assert!(planned.contains(&Subject::Deployment("t/short".into())));
        assert!(
            !planned.contains(&Subject::Deployment("t/whole".into())),
            "a deployment placed whole has nothing to place"
        );
    }

    #[test]
    fn a_booked_replica_counts_until_written_and_goes_if_its_create_failed() {
        let mut index = Index::default();
        let replica = |version: Option<&str>| {
            let uid = version.map(|_| "r-1");
            json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
                "metadata": { "name": "r", "namespace": "t", "uid": uid, "resourceVersion": version },
                "spec": { "clusterName": "edge", "engines": [] } })
        };
        assert!(index.book_replica(&replica(None)).is_some());
        assert!(
            index
                .world
                .replicas
                .contains_key(&object_key(&replica(None)))
        );
        assert!(index.book_replica(&replica(None)).is_none(), "booked once");
        index.unbook_replica(&replica(None));
        assert!(index.world.replicas.is_empty(), "its create failed");
        assert!(index.book_replica(&replica(None)).is_some());
        // A relist while its create is on its way keeps it booked.
        index.reset(Kind::Replica, &[]);
        assert_eq!(index.world.replicas.len(), 1, "booked through a relist");
        index.assume(Kind::Replica, &replica(Some("9")));
        index.unbook_replica(&replica(None));
        assert_eq!(index.world.replicas.len(), 1, "written: it stays");
    }

    #[test]
    fn a_relist_keeps_what_it_still_lists_and_forgets_the_rest() {
        let mut index = Index::default();
        let replica = |name: &str| {
            json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
                "metadata": { "name": name, "namespace": "t", "uid": format!("{name}-uid") },
                "spec": { "clusterName": "edge", "engines": [] } })
        };
        index.reset(Kind::Replica, &[replica("a"), replica("b")]);
        assert!(index.subject_of("b-uid").is_some());
        index.reset(Kind::Replica, &[replica("a")]);
        assert!(index.subject_of("a-uid").is_some());
        assert!(index.subject_of("b-uid").is_none());
    }

    #[test]
    fn a_replica_plans_its_cluster_again_only_when_it_comes_goes_or_moves() {
        let mut index = Index::default();
        let replica = |cluster: &str, ready: &str| {
            json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelReplica",
                "metadata": { "name": "r", "namespace": "t", "uid": "r-1",
                    "labels": { labels::DEPLOYMENT: "d" } },
                "spec": { "clusterName": cluster, "engines": [] },
                "status": { "conditions": [{ "type": "Ready", "status": ready }] } })
        };
        let clusters = |subjects: Vec<Subject>| {
            let mut clusters: Vec<String> = subjects
                .into_iter()
                .filter_map(|s| match s {
                    Subject::Cluster(c) => Some(c),
                    _ => None,
                })
                .collect();
            clusters.sort();
            clusters
        };
        let deployment = Subject::Deployment("t/d".into());
        assert_eq!(
            clusters(index.apply(Kind::Replica, &replica("edge", "False"))),
            ["edge"]
        );
        // Its status moves: its cluster hosts what it did (a status is
        // what the deployment reads, not the cluster).
        let ready = index.apply(Kind::Replica, &replica("edge", "True"));
        assert!(ready.contains(&deployment));
        assert!(clusters(ready).is_empty());
        assert_eq!(
            clusters(index.apply(Kind::Replica, &replica("core", "True"))),
            ["core", "edge"],
            "moved: both clusters"
        );
        assert_eq!(
            clusters(index.delete(Kind::Replica, &replica("core", "True"))),
            ["core"]
        );
        // Booked by a placement: its cluster at once, then not again as
        // its create is answered and its watch event arrives.
        let mut booked = replica("edge", "False");
        booked["metadata"]["uid"] = Value::Null;
        let booking = index.book_replica(&booked).expect("not known yet");
        assert_eq!(clusters(booking), ["edge"]);
        let mut written = replica("edge", "False");
        written["metadata"]["resourceVersion"] = json!("7");
        assert!(clusters(index.assume(Kind::Replica, &written)).is_empty());
        assert!(clusters(index.apply(Kind::Replica, &written)).is_empty());
    }
}
