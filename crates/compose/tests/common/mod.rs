//! Shared helpers: admitted manifests, a one-cluster fleet per stack, and a
//! first-pass composition of a deployment down to its cluster objects.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use modelplane_api::types::{InferenceCluster, ModelCache, ModelDeployment, ModelReplica, Stack};
use modelplane_cel::{Admission, Review};
use modelplane_compose::{
    CacheLookup, DeploymentInputs, Desired, ReplicaInputs, compose_model_deployment,
    compose_model_replica,
};
use modelplane_scheduler::{Cluster, DeviceInterner, ExistingReplica};
use serde_json::{Value, json};

pub mod external;

pub fn upstream() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/upstream-manifests")
}

/// Admits every document of a YAML text (defaults filled in), panicking on errors.
pub fn admit(text: &str) -> Vec<Value> {
    let admission = Admission::new();
    modelplane_api::validation::yaml::parse_documents(text)
        .expect("valid YAML")
        .into_iter()
        .filter_map(|doc| match admission.review(doc.value, None) {
            Review::Checked { object, errors, .. } => {
                assert!(errors.is_empty(), "{errors:?}");
                Some(object)
            }
            Review::Skipped { .. } => None,
        })
        .collect()
}

/// The ModelDeployments (and ModelCaches) of a YAML text.
pub fn deployments(text: &str) -> (Vec<ModelDeployment>, Vec<ModelCache>) {
    let mut mds = Vec::new();
    let mut caches = Vec::new();
    for object in admit(text) {
        match object["kind"].as_str() {
            Some("ModelDeployment") => mds.push(serde_json::from_value(object).expect("typed")),
            Some("ModelCache") => caches.push(serde_json::from_value(object).expect("typed")),
            _ => {}
        }
    }
    (mds, caches)
}

/// One Ready cluster on `stack` whose 8-node pool offers 8 H200s and 16 EFA
/// interfaces per node, labelled to match `labels`.
pub fn cluster(stack: Stack, labels: &BTreeMap<String, String>) -> InferenceCluster {
    let name = match stack {
        Stack::Standard => "standard",
        Stack::Dynamo => "dynamo",
    };
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "stack": stack,
            "cluster": { "source": "Existing", "existing": { "secretRef": { "name": "kc" } } },
        },
        "status": {
            "conditions": [{ "type": "Ready", "status": "True" }],
            "gateway": { "address": format!("{name}.gateway.example") },
            "gpuPools": [{
                "name": "h200",
                "nodes": 8,
                "devices": [
                    {
                        "name": "gpu", "claim": "DRA", "driver": "gpu.nvidia.com",
                        "deviceClassName": "gpu.nvidia.com", "count": 8,
                        "attributes": { "architecture": { "string": "Hopper" }, "cudaComputeCapability": { "version": "9.0.0" } },
                        "capacity": { "memory": { "value": "143771Mi" } },
                    },
                    {
                        "name": "efa", "claim": "DRA", "driver": "dra.net",
                        "deviceClassName": "efa.networking.k8s.aws", "count": 16,
                    },
                ],
            }],
        },
    }))
    .expect("a cluster")
}

/// Every object a first pass creates for `md` on a one-cluster fleet on `stack`.
pub fn compose_on(md: &ModelDeployment, caches: &[ModelCache], stack: Stack) -> Vec<Desired> {
    let mut labels = md
        .spec
        .template
        .spec
        .cluster_selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap_or_default();
    let cache = match &md.spec.template.spec.model_cache_ref {
        None => CacheLookup::NotReferenced,
        Some(r) => match caches
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(r.name.as_str()))
        {
            Some(c) => {
                labels.extend(
                    c.spec
                        .cluster_selector
                        .clone()
                        .and_then(|s| s.match_labels)
                        .unwrap_or_default(),
                );
                CacheLookup::Present(c)
            }
            None => CacheLookup::Absent,
        },
    };
    let ic = cluster(stack, &labels);
    let mut interner = DeviceInterner::default();
    let views: Vec<Cluster> = vec![Cluster::from_resource(&ic, &mut interner)];
    let ready = BTreeSet::new();
    let no_replicas: Vec<ExistingReplica> = Vec::new();
    let composition = compose_model_deployment(DeploymentInputs {
        deployment: md,
        cache,
        clusters: Some(&views),
        replicas: &no_replicas,
        ready: &ready,
        routed: &BTreeSet::new(),
    });
    assert!(!composition.hold, "held: {:?}", composition.conditions);
    let mut all = Vec::new();
    let observed = BTreeMap::new();
    assert_kinds_listed(&composition.desired);
    for desired in &composition.desired {
        if desired.kind() == "ModelReplica" {
            let replica: ModelReplica =
                serde_json::from_value(desired.object.clone()).expect("typed replica");
            let on_cluster = compose_model_replica(ReplicaInputs {
                replica: &replica,
                cluster: Some(&ic),
                observed: &observed,
            });
            assert!(!on_cluster.hold, "held: {:?}", on_cluster.conditions);
            assert_kinds_listed(&on_cluster.desired);
            all.push(desired.clone());
            all.extend(on_cluster.desired);
        } else {
            all.push(desired.clone());
        }
    }
    all
}

/// Fails naming every desired object whose kind a controller would not
/// watch from its start on that target (`modelplane_compose::kinds`).
pub fn assert_kinds_listed(desired: &[Desired]) {
    let unlisted: BTreeSet<String> = desired
        .iter()
        .filter(|d| !modelplane_compose::kinds::listed(d))
        .map(|d| format!("{:?} {} {}", d.target, d.object["apiVersion"], d.kind()))
        .collect();
    assert!(unlisted.is_empty(), "kinds not in kinds.rs: {unlisted:#?}");
}

/// The objects as multi-document YAML, each preceded by its target.
pub fn to_yaml(objects: &[Desired]) -> String {
    let mut text = String::new();
    for d in objects {
        let target = match &d.target {
            modelplane_compose::Target::ControlPlane => "control plane".to_string(),
            modelplane_compose::Target::Cluster(c) => format!("cluster {c}"),
        };
        text.push_str(&format!("--- # {target}, ready when {:?}\n", d.ready_when));
        text.push_str(&serde_saphyr::to_string(&d.object).expect("YAML"));
    }
    text
}
