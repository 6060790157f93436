//! The world a first pass over manifests sees once every cluster runs —
//! what `modelplane render` prints — reached through the same compositions
//! the controllers run, never a second copy of them.
//!
//! Data flow: the caller fills a [`World`] with the objects it read, then
//! [`World::assume_running`] walks each InferenceCluster as the controllers
//! would: its first composition asks for a cloud cluster XR, whose managed
//! resources are observed Ready as the cloud would make them, whose published
//! status (the kubeconfig Secret, the cache storage class) makes the cluster
//! compose its ServingStack, whose provider configs and cluster gateway are
//! observed in turn; last the cluster's own status is published. Values only
//! a cloud makes are placeholders ([`FILE_SYSTEM_ID`], [`gateway_address`]).
//! [`World::place_deployments`] then composes every deployment in key
//! order, each seeing the replicas placed before it.

use std::sync::Arc;

use modelplane_api::labels;
use modelplane_api::types::{InferenceClusterStatus, ModelReplica};
use serde_json::{Value, json};

use super::{Key, ObjectRef, Subject, World, key};
use crate::{Composition, Desired, Target};

/// The EFS file system ID a first pass shows: only AWS knows the real one.
pub const FILE_SYSTEM_ID: &str = "fs-from-aws";

/// The address a first pass shows for cluster `name`'s gateway: only its
/// load balancer knows the real one.
pub fn gateway_address(name: &str) -> String {
    format!("{name}.gateway.invalid")
}

/// The status a subject publishes once `conditions` hold: `fields` beside
/// them, and Ready when every one of them is True (as it is for what the
/// cloud and the cluster make, which a first pass takes as running).
fn running(fields: Option<&Value>, conditions: &[crate::Condition]) -> Value {
    let mut status = fields.cloned().unwrap_or_else(|| json!({}));
    let ready = conditions.iter().all(|c| c.status == "True");
    let mut all: Vec<Value> = conditions
        .iter()
        .filter(|c| c.type_ != "Ready" && c.type_ != "Synced")
        .map(|c| json!(c))
        .collect();
    all.push(json!({ "type": "Synced", "status": "True", "reason": "ReconcileSuccess" }));
    all.push(if ready {
        json!({ "type": "Ready", "status": "True", "reason": "Available" })
    } else {
        json!({ "type": "Ready", "status": "False", "reason": "Creating" })
    });
    status["conditions"] = Value::Array(all);
    status
}

/// What a deployment placed on a first pass.
pub struct Placed {
    /// The deployment's key.
    pub key: Key,
    /// Its composition.
    pub composition: Composition,
    /// The keys of the ModelReplicas it composed, in order.
    pub replicas: Vec<Key>,
}

impl World {
    /// Records `desired` as observed on its target with `status`.
    fn observe(&mut self, desired: &Desired, status: Option<Value>) {
        let mut object = desired.object.clone();
        if let Some(status) = status {
            object["status"] = status;
        }
        self.applied
            .entry(desired.target.clone())
            .or_default()
            .insert(ObjectRef::of(&object), Arc::new(object));
    }

    /// Brings every InferenceCluster to the state a first pass assumes:
    /// provisioned, its stack installed, its status published (a status
    /// given in the inputs stands, as the scheduler would read it). Marks
    /// the world synced: what the inputs lack does not exist.
    pub fn assume_running(&mut self) {
        self.synced = true;
        let names: Vec<Key> = self.clusters.keys().cloned().collect();
        for name in names {
            self.run_cluster(&name);
        }
        self.clusters_changed();
    }

    fn run_cluster(&mut self, name: &str) {
        let Some(first) = self.compose_cluster(name) else {
            return;
        };
        if let Some(xr) = first
            .desired
            .iter()
            .find(|d| crate::clouds::XR_KINDS.contains(&d.kind()))
        {
            self.run_cloud(xr);
        }
        // With the cloud cluster's kubeconfig published, the cluster
        // composes its ServingStack.
        let Some(provisioned) = self.compose_cluster(name) else {
            return;
        };
        if let Some(stack) = provisioned
            .desired
            .iter()
            .find(|d| d.kind() == "ServingStack")
        {
            self.observe(stack, Some(running(None, &[])));
            let stack_key = key(Some(labels::SYSTEM_NAMESPACE), stack.name());
            self.run_stack(&stack_key, stack);
        }
        let Some(steady) = self.compose_cluster(name) else {
            return;
        };
        let Some(cluster) = self.clusters.get_mut(name) else {
            return;
        };
        if cluster.status.is_none() {
            let status = running(steady.status.as_ref(), &steady.conditions);
            let mut with_status = (**cluster).clone();
            with_status.status = serde_json::from_value::<InferenceClusterStatus>(status).ok();
            *cluster = Arc::new(with_status);
        }
    }

    /// The XR observed, its managed resources observed Ready (the file
    /// system with its ID), and the status its full composition publishes
    /// written back on it. An XR that cannot compose (its provider config
    /// is not among the inputs) stays as it is: its cluster provisions no
    /// further, as it would not on the control plane.
    fn run_cloud(&mut self, xr: &Desired) {
        self.observe(xr, None);
        let kind = xr.kind().to_string();
        let Some(&kind) = crate::clouds::XR_KINDS.iter().find(|k| **k == kind) else {
            return;
        };
        let xr_key = key(xr.object["metadata"]["namespace"].as_str(), xr.name());
        let Some(first) = self.compose_cloud(kind, &xr_key) else {
            return;
        };
        for resource in &first.desired {
            let mut status = running(None, &[]);
            if resource.kind() == "FileSystem" {
                status["atProvider"] = json!({ "id": FILE_SYSTEM_ID });
            }
            self.observe(resource, Some(status));
        }
        let Some(full) = self.compose_cloud(kind, &xr_key) else {
            return;
        };
        if full.hold {
            return;
        }
        self.observe(xr, Some(running(full.status.as_ref(), &full.conditions)));
    }

    /// The stack's provider configs observed, then its cluster gateway with
    /// a placeholder address, and the status its composition publishes
    /// written back on it.
    fn run_stack(&mut self, stack_key: &str, stack: &Desired) {
        let Some(first) = self.compose_stack(stack_key) else {
            return;
        };
        for config in &first.desired {
            self.observe(config, None);
        }
        let Some(full) = self.compose_stack(stack_key) else {
            return;
        };
        let cluster = stack.object["metadata"]["labels"][labels::CLUSTER]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(gateway) = full.desired.iter().find(|d| {
            d.kind() == "Gateway"
                && d.name() == labels::CLUSTER_GATEWAY_NAME
                && d.target == Target::Cluster(cluster.clone())
        }) {
            let address = gateway_address(&cluster);
            let status = json!({ "addresses": [{ "type": "Hostname", "value": address }] });
            self.observe(gateway, Some(status));
        }
        if let Some(steady) = self.compose_stack(stack_key) {
            self.observe(
                stack,
                Some(running(steady.status.as_ref(), &steady.conditions)),
            );
        }
    }

    /// Composes every ModelDeployment in key order, each seeing the
    /// replicas of those before it: what it composes replaces its replicas
    /// in the world, as the controller's apply and prune would.
    pub fn place_deployments(&mut self) -> Vec<Placed> {
        let keys: Vec<Key> = self.deployments.keys().cloned().collect();
        keys.into_iter()
            .filter_map(|k| {
                let composition = self.compose(&Subject::Deployment(k.clone()))?;
                let replicas = self.take_replicas(&k, &composition);
                Some(Placed {
                    key: k,
                    composition,
                    replicas,
                })
            })
            .collect()
    }

    /// Replaces deployment `key`'s replicas by those `composition` wants;
    /// returns their keys. While it holds, what exists stays, as the
    /// controller keeps it.
    fn take_replicas(&mut self, deployment: &str, composition: &Composition) -> Vec<Key> {
        let (namespace, name) = deployment.split_once('/').unwrap_or(("", deployment));
        let own = |r: &ModelReplica| {
            r.metadata.namespace.as_deref().unwrap_or_default() == namespace
                && r.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::DEPLOYMENT))
                    .is_some_and(|d| d == name)
        };
        if composition.hold {
            return self
                .replicas
                .iter()
                .filter(|(_, r)| own(r))
                .map(|(k, _)| k.clone())
                .collect();
        }
        self.replicas.retain(|_, r| !own(r));
        let mut keys = Vec::new();
        for desired in composition.desired.iter() {
            if desired.kind() != "ModelReplica" {
                continue;
            }
            let Ok(replica) = serde_json::from_value::<ModelReplica>(desired.object.clone()) else {
                continue;
            };
            let k = key(replica.metadata.namespace.as_deref(), desired.name());
            self.replicas.insert(k.clone(), Arc::new(replica));
            keys.push(k);
        }
        keys
    }
}
