//! What the index holds of each target (the control plane and every
//! workload cluster): the objects Modelplane applied there, by owner; the
//! provider configs; and the workload clusters' own pods and nodes. Each
//! change returns the subjects to reconcile because of it.

use super::*;

impl Index {
    /// Records an object Modelplane applied, as observed on `target`;
    /// returns its owner to reconcile.
    pub fn apply_owned(&mut self, target: &Target, object: Value) -> Vec<Subject> {
        let reference = ObjectRef::of(&object);
        if self
            .world
            .applied
            .get(target)
            .and_then(|m| m.get(&reference))
            .is_some_and(|known| is_newer(known, &object))
        {
            // An apply's answer taken in after the watch delivered a later
            // change (a status the cluster's controller set meanwhile):
            // what the watch saw stands.
            return Vec::new();
        }
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
        let mut subjects = Vec::new();
        if let Some(stack) = applied_subject(target, &reference) {
            if let Some(object) = self
                .world
                .applied
                .get(target)
                .and_then(|m| m.get(&reference))
            {
                let object = object.clone();
                self.remember(&object, &stack);
            }
            subjects.push(stack);
        }
        let Some(owner) = owner else {
            return subjects;
        };
        self.owned
            .entry(owner.clone())
            .or_default()
            .insert((target.clone(), reference));
        subjects.extend(self.subjects.get(&owner).cloned());
        subjects
    }

    /// Forgets an owned object that was deleted; returns its owner.
    pub fn delete_owned(&mut self, target: &Target, object: &Value) -> Vec<Subject> {
        let reference = ObjectRef::of(object);
        if let Some(stack) = applied_subject(target, &reference) {
            self.forget(&stack);
        }
        let removed = self
            .world
            .applied
            .get_mut(target)
            .and_then(|m| m.remove(&reference));
        let Some(owner) = removed.as_deref().and_then(owner_uid).map(str::to_string) else {
            return Vec::new();
        };
        // The last managed resource of a cloud gone lets its providers idle.
        let mut subjects = Vec::new();
        if *target == Target::ControlPlane && cloud_of_group(reference.group()).is_some() {
            subjects.push(Subject::Providers);
        }
        if let Some(set) = self.owned.get_mut(&owner) {
            set.remove(&(target.clone(), reference));
            if set.is_empty() {
                self.owned.remove(&owner);
            }
        }
        subjects.extend(self.subjects.get(&owner).cloned());
        subjects
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

    /// Records a cloud provider config a platform team created; returns the
    /// cloud clusters to compose again.
    pub fn apply_config(&mut self, object: Value) -> Vec<Subject> {
        self.world
            .provider_configs
            .insert(ObjectRef::of(&object), Arc::new(object));
        self.clouds()
    }

    /// Forgets a deleted provider config.
    pub fn delete_config(&mut self, object: &Value) -> Vec<Subject> {
        self.world.provider_configs.remove(&ObjectRef::of(object));
        self.clouds()
    }

    /// Replaces the provider configs of `(api_version, kind)` with a list.
    pub fn reset_configs(
        &mut self,
        (api_version, kind): (&str, &str),
        objects: Vec<Value>,
    ) -> Vec<Subject> {
        self.world
            .provider_configs
            .retain(|r, _| !(r.api_version == api_version && r.kind == kind));
        for object in objects {
            self.world
                .provider_configs
                .insert(ObjectRef::of(&object), Arc::new(object));
        }
        self.clouds()
    }

    /// The clusters whose kubeconfig is in the system namespace's Secret
    /// `secret`.
    pub fn clusters_reached_by(&self, secret: &str) -> Vec<String> {
        self.world
            .clusters
            .keys()
            .filter(|name| {
                self.world
                    .kubeconfig_secret(name)
                    .is_ok_and(|(ns, s, _)| ns == labels::SYSTEM_NAMESPACE && s == secret)
            })
            .cloned()
            .collect()
    }

    /// The subjects that may compose objects onto `target`: every one for
    /// the control plane; for a workload cluster, its InferenceCluster, its
    /// cloud cluster and serving stack, the replicas it hosts and the caches.
    pub fn subjects_on(&self, target: &Target) -> Vec<Subject> {
        let Target::Cluster(name) = target else {
            return self.subjects();
        };
        let stack_of = |key: &Key| {
            self.world
                .applied_object(&Target::ControlPlane, "ServingStack", key)
                .is_some_and(|o| o["metadata"]["labels"][labels::CLUSTER] == name.as_str())
        };
        self.uids
            .keys()
            .filter(|s| match s {
                Subject::Cluster(k) => k == name,
                Subject::Cloud(_, k) => k.rsplit('/').next() == Some(name),
                Subject::Stack(k) => stack_of(k),
                Subject::Replica(k) => self
                    .world
                    .replicas
                    .get(k)
                    .is_some_and(|r| r.spec.cluster_name == *name),
                Subject::Cache(_) => true,
                _ => false,
            })
            .cloned()
            .collect()
    }

    pub(super) fn clouds(&self) -> Vec<Subject> {
        self.uids
            .keys()
            .filter(|s| matches!(s, Subject::Cloud(..)))
            .cloned()
            .collect()
    }

    /// Records a serving pod, GPU node or hydration pod of a workload
    /// cluster; returns the replicas (or cache) whose status it tells.
    pub fn apply_workload(
        &mut self,
        target: &Target,
        what: Observe,
        object: &Value,
    ) -> Vec<Subject> {
        let Target::Cluster(cluster) = target else {
            return Vec::new();
        };
        let state = self.world.workloads.entry(cluster.clone()).or_default();
        let replicas = match what {
            Observe::Pods => state.apply_pod(object).into_iter().collect(),
            Observe::Nodes => state.apply_node(object),
            Observe::CachePods => {
                let cache = state.apply_hydration_pod(object);
                return self.known_caches(cache);
            }
        };
        self.known_replicas(replicas)
    }

    /// Forgets a serving pod or GPU node; returns the replicas it concerned.
    pub fn delete_workload(
        &mut self,
        target: &Target,
        what: Observe,
        object: &Value,
    ) -> Vec<Subject> {
        let Target::Cluster(cluster) = target else {
            return Vec::new();
        };
        let Some(state) = self.world.workloads.get_mut(cluster) else {
            return Vec::new();
        };
        let replicas = match what {
            Observe::Pods => state.delete_pod(object).into_iter().collect(),
            Observe::Nodes => state.delete_node(object),
            Observe::CachePods => {
                let cache = state.delete_hydration_pod(object);
                return self.known_caches(cache);
            }
        };
        self.known_replicas(replicas)
    }

    /// Replaces a workload cluster's serving pods or GPU nodes with a list.
    pub fn reset_workloads(
        &mut self,
        target: &Target,
        what: Observe,
        objects: &[Value],
    ) -> Vec<Subject> {
        let Target::Cluster(cluster) = target else {
            return Vec::new();
        };
        let state = self.world.workloads.entry(cluster.clone()).or_default();
        match what {
            Observe::Pods => state.pods.clear(),
            Observe::Nodes => state.nodes.clear(),
            Observe::CachePods => state.hydration.clear(),
        }
        for object in objects {
            match what {
                Observe::Pods => drop(state.apply_pod(object)),
                Observe::Nodes => drop(state.apply_node(object)),
                Observe::CachePods => drop(state.apply_hydration_pod(object)),
            }
        }
        if what == Observe::CachePods {
            // What every cache says of its downloads may have changed.
            return self
                .world
                .caches
                .keys()
                .map(|k| Subject::Cache(k.clone()))
                .collect();
        }
        // What each replica of the cluster says may have changed.
        self.world
            .replicas
            .iter()
            .filter(|(_, r)| r.spec.cluster_name == *cluster)
            .map(|(k, _)| Subject::Replica(k.clone()))
            .collect()
    }

    fn known_caches(&self, key: Option<String>) -> Vec<Subject> {
        key.into_iter()
            .filter(|k| self.world.caches.contains_key(k))
            .map(Subject::Cache)
            .collect()
    }

    fn known_replicas(&self, keys: Vec<String>) -> Vec<Subject> {
        keys.into_iter()
            .filter(|k| self.world.replicas.contains_key(k))
            .map(Subject::Replica)
            .collect()
    }

    /// Forgets everything observed on `target` (its connection is gone).
    pub fn drop_target(&mut self, target: &Target) {
        if let Target::Cluster(cluster) = target {
            self.world.workloads.remove(cluster);
        }
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

/// The subject an object Modelplane applied is, if any: a ServingStack or a
/// cloud cluster XR on the control plane (its InferenceCluster composes it;
/// it composes the stack's releases and cluster objects, or the cloud's
/// managed resources).
pub(super) fn applied_subject(target: &Target, reference: &ObjectRef) -> Option<Subject> {
    if *target != Target::ControlPlane {
        return None;
    }
    let key = key(Some(&reference.namespace), &reference.name);
    if reference.kind == "ServingStack" {
        return Some(Subject::Stack(key));
    }
    XR_KINDS
        .iter()
        .find(|k| **k == reference.kind)
        .map(|kind| Subject::Cloud(kind, key))
}
