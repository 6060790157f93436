//! The world's ModelReplicas and ModelEndpoints, kept with the indexes the
//! compositions read: by deployment and by cluster, and each replica as the
//! scheduler sees it. They change one object at a time (a watch event), so
//! each index moves by one entry then, instead of every deployment's
//! composition scanning and converting the fleet's replicas again: at 1,000
//! deployments of 10 replicas that scan was most of the controller's time.
//!
//! Reads go through `Deref` to the objects' map; writes only through
//! [`Table::insert`], [`Table::remove`] and [`Table::retain`], which keep
//! the indexes with the objects.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use modelplane_api::labels;
use modelplane_api::types::{ModelEndpoint, ModelReplica};
use modelplane_scheduler::{Existing, ExistingReplica};

use super::{Key, key};

/// An object a table keeps: what its indexes read of it.
pub trait Row: std::fmt::Debug {
    /// Its metadata.
    fn meta(&self) -> &ObjectMeta;
    /// The cluster it is on, for tables indexed by cluster.
    fn cluster(&self) -> Option<&str> {
        None
    }
}

impl Row for ModelReplica {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn cluster(&self) -> Option<&str> {
        Some(&self.spec.cluster_name)
    }
}

impl Row for ModelEndpoint {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

/// The key of the deployment that `meta`'s object belongs to (its
/// `modelplane.ai/deployment` label, in its namespace).
fn deployment_of(meta: &ObjectMeta) -> Option<Key> {
    let name = meta.labels.as_ref()?.get(labels::DEPLOYMENT)?;
    Some(key(meta.namespace.as_deref(), name))
}

/// Objects by key, with the keys of each deployment's and each cluster's.
#[derive(Clone, Debug)]
pub struct Table<T> {
    objects: BTreeMap<Key, Arc<T>>,
    by_deployment: BTreeMap<Key, BTreeSet<Key>>,
    by_cluster: BTreeMap<String, BTreeSet<Key>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            objects: BTreeMap::new(),
            by_deployment: BTreeMap::new(),
            by_cluster: BTreeMap::new(),
        }
    }
}

impl<T> Deref for Table<T> {
    type Target = BTreeMap<Key, Arc<T>>;

    fn deref(&self) -> &Self::Target {
        &self.objects
    }
}

fn unindex(index: &mut BTreeMap<Key, BTreeSet<Key>>, group: Option<&str>, key: &str) {
    let Some(group) = group else { return };
    if let Some(keys) = index.get_mut(group) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(group);
        }
    }
}

impl<T: Row> Table<T> {
    /// Keeps `object` at `key`; returns what was there.
    pub fn insert(&mut self, key: Key, object: Arc<T>) -> Option<Arc<T>> {
        let before = self.remove(&key);
        if let Some(deployment) = deployment_of(object.meta()) {
            self.by_deployment
                .entry(deployment)
                .or_default()
                .insert(key.clone());
        }
        if let Some(cluster) = object.cluster() {
            self.by_cluster
                .entry(cluster.to_string())
                .or_default()
                .insert(key.clone());
        }
        self.objects.insert(key, object);
        before
    }

    /// Forgets the object at `key`; returns it.
    pub fn remove(&mut self, key: &str) -> Option<Arc<T>> {
        let object = self.objects.remove(key)?;
        let deployment = deployment_of(object.meta());
        unindex(&mut self.by_deployment, deployment.as_deref(), key);
        unindex(&mut self.by_cluster, object.cluster(), key);
        Some(object)
    }

    /// Keeps only the objects `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&Key, &Arc<T>) -> bool) {
        let gone: Vec<Key> = self
            .objects
            .iter()
            .filter(|(k, o)| !keep(k, o))
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.remove(&key);
        }
    }

    /// The objects of the deployment `name` in `namespace`, by key.
    pub fn in_deployment<'a>(
        &'a self,
        namespace: Option<&str>,
        name: &str,
    ) -> impl Iterator<Item = (&'a Key, &'a Arc<T>)> + use<'a, T> {
        self.rows(self.by_deployment.get(&key(namespace, name)))
    }

    /// The objects on the cluster `name`, by key.
    pub fn on_cluster<'a>(
        &'a self,
        name: &str,
    ) -> impl Iterator<Item = (&'a Key, &'a Arc<T>)> + use<'a, T> {
        self.rows(self.by_cluster.get(name))
    }

    fn rows<'a>(
        &'a self,
        keys: Option<&'a BTreeSet<Key>>,
    ) -> impl Iterator<Item = (&'a Key, &'a Arc<T>)> + use<'a, T> {
        keys.into_iter()
            .flatten()
            .filter_map(|k| self.objects.get_key_value(k))
    }
}

/// The ModelReplicas, each also kept as the scheduler sees it (converted
/// once per change of it).
#[derive(Clone, Debug, Default)]
pub struct Replicas {
    table: Table<ModelReplica>,
    existing: BTreeMap<Key, ExistingReplica>,
}

impl Deref for Replicas {
    type Target = Table<ModelReplica>;

    fn deref(&self) -> &Self::Target {
        &self.table
    }
}

impl Replicas {
    /// Keeps `replica` at `key`; returns what was there.
    pub fn insert(&mut self, key: Key, replica: Arc<ModelReplica>) -> Option<Arc<ModelReplica>> {
        self.existing
            .insert(key.clone(), ExistingReplica::from_resource(&replica));
        self.table.insert(key, replica)
    }

    /// Forgets the replica at `key`; returns it.
    pub fn remove(&mut self, key: &str) -> Option<Arc<ModelReplica>> {
        self.existing.remove(key);
        self.table.remove(key)
    }

    /// Keeps only the replicas `keep` says yes to.
    pub fn retain(&mut self, keep: impl FnMut(&Key, &Arc<ModelReplica>) -> bool) {
        self.table.retain(keep);
        let objects = &self.table.objects;
        self.existing.retain(|k, _| objects.contains_key(k));
    }
}

impl Existing for Replicas {
    fn of_deployment(&self, namespace: &str, deployment: &str) -> Vec<&ExistingReplica> {
        self.table
            .by_deployment
            .get(&key(Some(namespace), deployment))
            .into_iter()
            .flatten()
            .filter_map(|k| self.existing.get(k))
            // The label names the deployment; the scheduler's own check
            // (a replica of a deployment of that name) agrees.
            .filter(|r| r.deployment.as_deref() == Some(deployment))
            .collect()
    }

    fn each(&self) -> Box<dyn Iterator<Item = &ExistingReplica> + '_> {
        Box::new(self.existing.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn replica(name: &str, deployment: &str, cluster: &str) -> Arc<ModelReplica> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "modelplane.ai/v1alpha1",
                "kind": "ModelReplica",
                "metadata": {
                    "name": name,
                    "namespace": "team",
                    "labels": { labels::DEPLOYMENT: deployment },
                },
                "spec": { "clusterName": cluster, "engines": [] },
            }))
            .expect("a replica"),
        )
    }

    fn names<'a>(rows: impl Iterator<Item = (&'a Key, &'a Arc<ModelReplica>)>) -> Vec<&'a str> {
        rows.map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn indexes_follow_every_write() {
        let mut replicas = Replicas::default();
        replicas.insert("team/a-0".into(), replica("a-0", "a", "c1"));
        replicas.insert("team/a-1".into(), replica("a-1", "a", "c2"));
        replicas.insert("team/b-0".into(), replica("b-0", "b", "c1"));
        assert_eq!(
            names(replicas.in_deployment(Some("team"), "a")),
            ["team/a-0", "team/a-1"]
        );
        assert_eq!(names(replicas.on_cluster("c1")), ["team/a-0", "team/b-0"]);
        assert_eq!(replicas.each().count(), 3);

        // Moved to another cluster: indexed there only.
        replicas.insert("team/a-0".into(), replica("a-0", "a", "c2"));
        assert_eq!(names(replicas.on_cluster("c1")), ["team/b-0"]);
        assert_eq!(Existing::of_deployment(&replicas, "team", "a").len(), 2);

        replicas.remove("team/a-1");
        replicas.retain(|k, _| k != "team/b-0");
        assert_eq!(
            names(replicas.in_deployment(Some("team"), "a")),
            ["team/a-0"]
        );
        assert_eq!(names(replicas.on_cluster("c1")), Vec::<&str>::new());
        assert_eq!(replicas.each().count(), 1);
        assert!(
            replicas.by_deployment.keys().eq(["team/a"]),
            "empty groups go"
        );
    }
}
