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
use modelplane_compose::world::{Key, ObjectRef, Subject, World, key};
use serde_json::Value;

/// The control plane's kinds the controller reads, typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// InferenceCluster.
    Cluster,
    /// InferenceClass.
    Class,
    /// ModelDeployment.
    Deployment,
    /// ModelReplica.
    Replica,
    /// ModelCache.
    Cache,
}

impl Kind {
    /// Every kind, in the order they are watched.
    pub const ALL: [Kind; 5] = [
        Kind::Cluster,
        Kind::Class,
        Kind::Cache,
        Kind::Deployment,
        Kind::Replica,
    ];

    /// `(apiVersion, kind)`.
    pub fn type_meta(self) -> (&'static str, &'static str) {
        let kind = match self {
            Kind::Cluster => "InferenceCluster",
            Kind::Class => "InferenceClass",
            Kind::Deployment => "ModelDeployment",
            Kind::Replica => "ModelReplica",
            Kind::Cache => "ModelCache",
        };
        ("modelplane.ai/v1alpha1", kind)
    }
}

/// Everything observed.
#[derive(Default)]
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
}

fn uid(object: &Value) -> Option<String> {
    object["metadata"]["uid"].as_str().map(str::to_string)
}

fn owner_uid(object: &Value) -> Option<&str> {
    object["metadata"]["labels"][labels::OWNER_UID].as_str()
}

fn object_key(object: &Value) -> Key {
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

    /// Whether `kind` of owned objects on `target` has been listed.
    pub fn owned_synced(&self, target: &Target, api_version: &str, kind: &str) -> bool {
        self.owned_listed
            .get(target)
            .is_some_and(|l| l.contains(&(api_version.to_string(), kind.to_string())))
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
        let deployments = self
            .world
            .deployments
            .keys()
            .cloned()
            .map(Subject::Deployment);
        let replicas = self.world.replicas.keys().cloned().map(Subject::Replica);
        deployments.chain(replicas).collect()
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
        match kind {
            Kind::Cluster => {
                let Some(cluster) = typed(object) else {
                    return Vec::new();
                };
                self.world.clusters.insert(key.clone(), cluster);
                self.after_cluster_change(&key)
            }
            Kind::Class => {
                let Some(class) = typed(object) else {
                    return Vec::new();
                };
                self.world.classes.insert(key, class);
                self.deployments()
            }
            Kind::Cache => {
                let Some(cache) = typed(object) else {
                    return Vec::new();
                };
                self.world.caches.insert(key, cache);
                self.deployments()
            }
            Kind::Deployment => {
                let subject = Subject::Deployment(key.clone());
                // Its uid counts even if it does not parse: what it owns is
                // not an orphan.
                self.remember(object, &subject);
                let Some(deployment) = typed(object) else {
                    return Vec::new();
                };
                self.world.deployments.insert(key, deployment);
                vec![subject]
            }
            Kind::Replica => {
                self.remember(object, &Subject::Replica(key.clone()));
                let Some(replica) = typed::<modelplane_api::types::ModelReplica>(object) else {
                    return Vec::new();
                };
                let deployment = replica
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::DEPLOYMENT))
                    .map(|d| Subject::Deployment(key_in(object, d)));
                self.world.replicas.insert(key.clone(), replica);
                let subject = Subject::Replica(key);
                [Some(subject)]
                    .into_iter()
                    .chain([deployment])
                    .flatten()
                    .collect()
            }
        }
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
            .iter()
            .filter(|(_, r)| r.spec.cluster_name == cluster)
            .map(|(k, _)| Subject::Replica(k.clone()));
        self.deployments().into_iter().chain(replicas).collect()
    }

    /// Forgets a deleted control-plane object; returns what to reconcile.
    pub fn delete(&mut self, kind: Kind, object: &Value) -> Vec<Subject> {
        let key = object_key(object);
        match kind {
            Kind::Cluster => {
                self.world.clusters.remove(&key);
                self.after_cluster_change(&key)
            }
            Kind::Class => {
                self.world.classes.remove(&key);
                self.deployments()
            }
            Kind::Cache => {
                self.world.caches.remove(&key);
                self.deployments()
            }
            Kind::Deployment => {
                self.world.deployments.remove(&key);
                self.forget(&Subject::Deployment(key));
                Vec::new()
            }
            Kind::Replica => {
                let deployment = self.world.replicas.remove(&key).and_then(|r| {
                    r.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(labels::DEPLOYMENT))
                        .map(|d| Subject::Deployment(key_in(object, d)))
                });
                self.forget(&Subject::Replica(key));
                deployment.into_iter().collect()
            }
        }
    }

    /// Replaces every object of `kind` with a fresh list; returns what to
    /// reconcile (everything, once every kind is listed).
    pub fn reset(&mut self, kind: Kind, objects: &[Value]) -> Vec<Subject> {
        // Only what the list no longer has goes: an object that is listed
        // but does not parse keeps what was known of it.
        let listed: BTreeSet<Key> = objects.iter().map(object_key).collect();
        let gone = |keys: Vec<&Key>| -> Vec<Key> {
            keys.into_iter()
                .filter(|k| !listed.contains(*k))
                .cloned()
                .collect()
        };
        match kind {
            Kind::Cluster => gone(self.world.clusters.keys().collect())
                .iter()
                .for_each(|k| drop(self.world.clusters.remove(k))),
            Kind::Class => gone(self.world.classes.keys().collect())
                .iter()
                .for_each(|k| drop(self.world.classes.remove(k))),
            Kind::Cache => gone(self.world.caches.keys().collect())
                .iter()
                .for_each(|k| drop(self.world.caches.remove(k))),
            Kind::Deployment => {
                for key in gone(self.world.deployments.keys().collect()) {
                    self.world.deployments.remove(&key);
                    self.forget(&Subject::Deployment(key));
                }
            }
            Kind::Replica => {
                for key in gone(self.world.replicas.keys().collect()) {
                    self.world.replicas.remove(&key);
                    self.forget(&Subject::Replica(key));
                }
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

    /// Records an object Modelplane applied, as observed on `target`;
    /// returns its owner to reconcile.
    pub fn apply_owned(&mut self, target: &Target, object: Value) -> Vec<Subject> {
        let reference = ObjectRef::of(&object);
        let owner = owner_uid(&object).map(str::to_string);
        let previous = self
            .world
            .applied
            .entry(target.clone())
            .or_default()
            .insert(reference.clone(), Arc::new(object));
        let previous_owner = previous.as_deref().and_then(owner_uid).map(str::to_string);
        if let Some(old) = previous_owner.filter(|o| Some(o) != owner.as_ref())
            && let Some(set) = self.owned.get_mut(&old)
        {
            set.remove(&(target.clone(), reference.clone()));
        }
        let Some(owner) = owner else {
            return Vec::new();
        };
        self.owned
            .entry(owner.clone())
            .or_default()
            .insert((target.clone(), reference));
        self.subjects.get(&owner).cloned().into_iter().collect()
    }

    /// Forgets an owned object that was deleted; returns its owner.
    pub fn delete_owned(&mut self, target: &Target, object: &Value) -> Vec<Subject> {
        let reference = ObjectRef::of(object);
        let removed = self
            .world
            .applied
            .get_mut(target)
            .and_then(|m| m.remove(&reference));
        let Some(owner) = removed.as_deref().and_then(owner_uid).map(str::to_string) else {
            return Vec::new();
        };
        if let Some(set) = self.owned.get_mut(&owner) {
            set.remove(&(target.clone(), reference));
            if set.is_empty() {
                self.owned.remove(&owner);
            }
        }
        self.subjects.get(&owner).cloned().into_iter().collect()
    }

    /// Replaces the owned objects of one kind on `target` with a fresh list.
    pub fn reset_owned(
        &mut self,
        target: &Target,
        (api_version, kind): (&str, &str),
        objects: Vec<Value>,
    ) -> Vec<Subject> {
        let stale: Vec<Value> = self
            .world
            .applied
            .get(target)
            .map(|m| {
                m.iter()
                    .filter(|(r, _)| r.api_version == api_version && r.kind == kind)
                    .map(|(_, o)| (**o).clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut subjects = Vec::new();
        for object in &stale {
            subjects.extend(self.delete_owned(target, object));
        }
        for object in objects {
            subjects.extend(self.apply_owned(target, object));
        }
        self.owned_listed
            .entry(target.clone())
            .or_default()
            .insert((api_version.to_string(), kind.to_string()));
        subjects.sort();
        subjects.dedup();
        subjects
    }

    /// Forgets everything observed on `target` (its connection is gone).
    pub fn drop_target(&mut self, target: &Target) {
        if let Some(applied) = self.world.applied.remove(target) {
            for (reference, object) in applied {
                if let Some(owner) = owner_uid(&object)
                    && let Some(set) = self.owned.get_mut(owner)
                {
                    set.remove(&(target.clone(), reference));
                }
            }
        }
        self.owned_listed.remove(target);
    }
}

/// The key of `name` in the namespace of `object`.
fn key_in(object: &Value, name: &str) -> Key {
    key(object["metadata"]["namespace"].as_str(), name)
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
}
