//! The hold rule as a property: compose a generated world, take away one
//! observed input (an InferenceClass, a cluster's status, its published
//! secrets or storage class, the ServingStack, the provider configs, the
//! cluster list, the cache's token) and compose again. Whatever was desired
//! before is still desired, or the composition holds (so the controller
//! keeps every existing child). Only a change of spec may drop a child.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use modelplane_api::types::{
    CloudClusterStatus, InferenceClass, InferenceCluster, ModelCache, ModelDeployment, ServingStack,
};
use modelplane_compose::{
    CacheInputs, CacheLookup, ClusterInputs, Composition, DeploymentInputs, StackInputs, Staging,
    Token, compose_inference_cluster, compose_model_cache, compose_model_deployment,
    compose_serving_stack, recipes,
};
use modelplane_scheduler::{Cluster, DeviceInterner, ExistingReplica};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Names of what a composition wants, with their targets.
fn wanted(c: &Composition) -> BTreeSet<String> {
    c.desired
        .iter()
        .map(|d| format!("{:?}/{}/{}", d.target, d.kind(), d.name()))
        .collect()
}

/// Checks the hold rule for one case, counting in `tally` whether its first
/// composition wanted something (a case that wanted nothing exercises
/// nothing).
fn still_held(
    before: &Composition,
    after: &Composition,
    removed: &str,
    tally: &Tally,
) -> Result<(), TestCaseError> {
    if !before.desired.is_empty() {
        tally.composed.fetch_add(1, Ordering::Relaxed);
    }
    if after.hold {
        return Ok(());
    }
    let lost: Vec<String> = wanted(before).difference(&wanted(after)).cloned().collect();
    prop_assert!(
        lost.is_empty(),
        "removing {removed} dropped {lost:?} without holding"
    );
    Ok(())
}

/// How many cases a property ran, and how many of them composed something.
#[derive(Default)]
struct Tally {
    cases: AtomicUsize,
    composed: AtomicUsize,
}

impl Tally {
    fn case(&self) {
        self.cases.fetch_add(1, Ordering::Relaxed);
    }

    /// Asserts that at least `percent` of the cases composed something, so
    /// a property cannot pass on inputs that never reach the hold rule.
    fn exercised(&self, property: &str, percent: usize) {
        let (cases, composed) = (
            self.cases.load(Ordering::Relaxed),
            self.composed.load(Ordering::Relaxed),
        );
        println!("{property}: {composed} of {cases} cases composed something");
        assert!(
            cases > 0 && composed * 100 >= cases * percent,
            "{property}: {composed} of {cases} generated cases composed anything (at least {percent} % wanted)"
        );
    }
}

/// A generated platform: classes for one cloud, one cluster using some of
/// them, and what is observed of it after it was provisioned.
#[derive(Clone, Debug)]
struct Platform {
    source: &'static str,
    classes: Vec<String>,
    pools: Vec<usize>,
    dynamo: bool,
}

fn platform() -> impl Strategy<Value = Platform> {
    (
        prop::sample::select(vec!["EKS", "GKE", "AKS", "Existing"]),
        1usize..4,
        prop::collection::vec(0usize..3, 1..4),
        any::<bool>(),
    )
        .prop_map(|(source, n, pools, dynamo)| Platform {
            source,
            classes: (0..n).map(|i| format!("class-{i}")).collect(),
            pools: pools.into_iter().map(|p| p % n).collect(),
            dynamo,
        })
}

/// A class with the provisioning block of `source`'s cloud (none for
/// existing clusters).
fn class(name: &str, source: &str) -> InferenceClass {
    let mut class = json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClass",
        "metadata": { "name": name },
        "spec": {
            "devices": [{ "name": "gpu", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": 8,
                          "capacity": { "memory": { "value": "81559Mi" } } }],
        },
    });
    let block = match source {
        "EKS" => {
            json!({ "provider": "EKS", "eks": { "instanceType": "p5.48xlarge", "accelerator": { "type": "nvidia-h100", "count": 8 } } })
        }
        "GKE" => {
            json!({ "provider": "GKE", "gke": { "machineType": "a3-highgpu-8g", "accelerator": { "type": "nvidia-h100-80gb", "count": 8 } } })
        }
        "AKS" => {
            json!({ "provider": "AKS", "aks": { "vmSize": "Standard_ND96isr_H100_v5", "accelerator": { "type": "nvidia-h100", "count": 8 } } })
        }
        _ => Value::Null,
    };
    if !block.is_null() {
        class["spec"]["provisioning"] = block;
    }
    serde_json::from_value(class).expect("a class")
}

fn inference_cluster(p: &Platform) -> InferenceCluster {
    let cluster = match p.source {
        "EKS" => json!({ "source": "EKS", "eks": { "region": "us-east-1" } }),
        "GKE" => json!({ "source": "GKE", "gke": { "region": "us-central1" } }),
        "AKS" => json!({ "source": "AKS", "aks": { "location": "westeurope" } }),
        _ => {
            json!({ "source": "Existing", "existing": { "secretRef": { "name": "kc" }, "cache": { "storageClassName": "nfs" } } })
        }
    };
    let pools: Vec<Value> = p
        .pools
        .iter()
        .enumerate()
        .map(|(i, c)| json!({ "name": format!("pool-{i}"), "className": p.classes[*c], "nodeCount": 2, "zones": ["z1"] }))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
        "metadata": { "name": "gpu-east" },
        "spec": { "stack": if p.dynamo { "Dynamo" } else { "Standard" }, "cluster": cluster, "nodePools": pools },
    }))
    .expect("a cluster")
}

fn ready() -> Value {
    json!([{ "type": "Ready", "status": "True" }])
}

fn cloud_status() -> CloudClusterStatus {
    serde_json::from_value(json!({
        "secrets": [{ "type": "Kubeconfig", "name": "gpu-east-kubeconfig", "key": "kubeconfig", "namespace": "modelplane-system" },
                    { "type": "GoogleApplicationCredentials", "name": "gpu-east-sa", "key": "private_key" }],
        "cache": { "storageClassName": "modelplane-rwx" },
        "conditions": ready(),
    }))
    .expect("a cloud status")
}

/// What a first pass composes for the ServingStack, observed Ready.
fn observed_stack(c: &Composition) -> Option<ServingStack> {
    let d = c.desired.iter().find(|d| d.kind() == "ServingStack")?;
    let mut object = d.object.clone();
    object["status"] = json!({ "gateway": { "address": "203.0.113.10" }, "conditions": ready() });
    Some(serde_json::from_value(object).expect("typed"))
}

#[derive(Clone, Copy, Debug)]
enum ClusterLoss {
    Class(usize),
    CloudStatus,
    CloudSecrets,
    CloudNotReady,
    StorageClass,
    ServingStack,
}

fn cluster_loss() -> impl Strategy<Value = ClusterLoss> {
    prop_oneof![
        (0usize..3).prop_map(ClusterLoss::Class),
        Just(ClusterLoss::CloudStatus),
        Just(ClusterLoss::CloudSecrets),
        Just(ClusterLoss::CloudNotReady),
        Just(ClusterLoss::StorageClass),
        Just(ClusterLoss::ServingStack),
    ]
}

#[test]
fn a_cluster_keeps_its_children_when_an_observed_input_goes_missing() {
    let tally = Tally::default();
    proptest!(ProptestConfig { cases: 4000, ..ProptestConfig::default() }, |(p in platform(), loss in cluster_loss())| {
        tally.case();
            let classes: Vec<InferenceClass> = p.classes.iter().map(|c| class(c, p.source)).collect();
            let ic = inference_cluster(&p);
            let status = cloud_status();
            let first = compose_inference_cluster(ClusterInputs {
                cluster: &ic, classes: &classes, hosted_replicas: 1,
                cloud_cluster: Some(&status), serving_stack: None,
            });
            let stack = observed_stack(&first);
            let inputs = ClusterInputs {
                cluster: &ic, classes: &classes, hosted_replicas: 1,
                cloud_cluster: Some(&status), serving_stack: stack.as_ref(),
            };
            let before = compose_inference_cluster(inputs);
            let mut fewer_classes = classes.clone();
            let mut damaged = status.clone();
            let after = match loss {
                ClusterLoss::Class(i) => {
                    fewer_classes.retain(|c| c.metadata.name.as_deref() != Some(p.classes[i % p.classes.len()].as_str()));
                    compose_inference_cluster(ClusterInputs { classes: &fewer_classes, ..inputs })
                }
                ClusterLoss::CloudStatus => compose_inference_cluster(ClusterInputs { cloud_cluster: None, ..inputs }),
                ClusterLoss::CloudSecrets => {
                    damaged.secrets = None;
                    compose_inference_cluster(ClusterInputs { cloud_cluster: Some(&damaged), ..inputs })
                }
                ClusterLoss::CloudNotReady => {
                    damaged.conditions = None;
                    compose_inference_cluster(ClusterInputs { cloud_cluster: Some(&damaged), ..inputs })
                }
                ClusterLoss::StorageClass => {
                    damaged.cache = None;
                    compose_inference_cluster(ClusterInputs { cloud_cluster: Some(&damaged), ..inputs })
                }
                ClusterLoss::ServingStack => compose_inference_cluster(ClusterInputs { serving_stack: None, ..inputs }),
            };
            still_held(&before, &after, &format!("{loss:?}"), &tally)?;
    });
    tally.exercised(
        "a_cluster_keeps_its_children_when_an_observed_input_goes_missing",
        90,
    );
}

#[test]
fn a_serving_stack_keeps_its_releases_when_its_provider_configs_are_not_seen() {
    let tally = Tally::default();
    proptest!(ProptestConfig { cases: 4000, ..ProptestConfig::default() }, |(p in platform())| {
        tally.case();
            let classes: Vec<InferenceClass> = p.classes.iter().map(|c| class(c, p.source)).collect();
            let ic = inference_cluster(&p);
            let status = cloud_status();
            let first = compose_inference_cluster(ClusterInputs {
                cluster: &ic, classes: &classes, hosted_replicas: 1,
                cloud_cluster: Some(&status), serving_stack: None,
            });
            let Some(ss) = observed_stack(&first) else { return Ok(()) };
            let recipe = recipes::all().first().expect("a recipe");
            let inputs = StackInputs {
                serving_stack: &ss, recipe, provider_configs_observed: true, gateway_address: Some("203.0.113.10"),
            };
            let before = compose_serving_stack(inputs);
            let after = compose_serving_stack(StackInputs { provider_configs_observed: false, ..inputs });
            still_held(&before, &after, "the provider configs", &tally)?;
    });
    tally.exercised(
        "a_serving_stack_keeps_its_releases_when_its_provider_configs_are_not_seen",
        90,
    );
}

/// Clusters for caches and deployments, as the control plane publishes them.
fn fleet(n: usize) -> Vec<InferenceCluster> {
    (0..n)
        .map(|i| {
            serde_json::from_value(json!({
                "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
                "metadata": { "name": format!("c{i}"), "labels": { "tier": if i % 2 == 0 { "gold" } else { "silver" } } },
                "spec": { "cluster": { "source": "Existing", "existing": { "secretRef": { "name": "kc" } } } },
                "status": {
                    "providerConfigRef": { "name": format!("c{i}-cluster-kubeconfig") },
                    "cache": { "storageClassName": "rwx" },
                    "conditions": ready(),
                    "gateway": { "address": format!("10.0.0.{i}") },
                    "gpuPools": [{ "name": "h100", "nodes": 4, "devices": [
                        { "name": "gpu", "claim": "DRA", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com", "count": 8,
                          "capacity": { "memory": { "value": "81559Mi" } } }] }],
                },
            }))
            .expect("a cluster")
        })
        .collect()
}

fn cache(gated: bool, selector: bool) -> ModelCache {
    let mut hf = json!({ "repo": "Qwen/Qwen3-8B", "sizeGiB": 20 });
    if gated {
        hf["authSecret"] = json!({ "name": "hf" });
    }
    let mut spec = json!({ "source": "HuggingFace", "huggingFace": hf });
    if selector {
        spec["clusterSelector"] = json!({ "matchLabels": { "tier": "gold" } });
    }
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelCache",
        "metadata": { "name": "qwen", "namespace": "ml-team" }, "spec": spec,
    }))
    .expect("a cache")
}

#[derive(Clone, Copy, Debug)]
enum CacheLoss {
    ClusterStatus(usize),
    StorageClass(usize),
    ClusterList,
    Token,
}

fn cache_loss() -> impl Strategy<Value = CacheLoss> {
    prop_oneof![
        (0usize..6).prop_map(CacheLoss::ClusterStatus),
        (0usize..6).prop_map(CacheLoss::StorageClass),
        Just(CacheLoss::ClusterList),
        Just(CacheLoss::Token),
    ]
}

#[test]
fn a_cache_keeps_its_volumes_when_a_cluster_is_briefly_unreadable() {
    let tally = Tally::default();
    proptest!(ProptestConfig { cases: 4000, ..ProptestConfig::default() }, |(n in 1usize..6, gated in any::<bool>(), selector in any::<bool>(), staged in prop::collection::vec(any::<bool>(), 6), loss in cache_loss())| {
        tally.case();
            let clusters = fleet(n);
            let mc = cache(gated, selector);
            let observed: BTreeMap<String, Staging> = clusters
                .iter()
                .zip(&staged)
                .map(|(c, s)| (c.metadata.name.clone().unwrap_or_default(),
                    Staging { pvc_observed: true, pvc_bound: true, job_complete: *s, ..Staging::default() }))
                .collect();
            let previous = Vec::new();
            let token = if gated { Token::Found("dG9rZW4=") } else { Token::NotNeeded };
            let inputs = CacheInputs {
                cache: &mc, clusters: Some(&clusters), token, observed: &observed, previous: &previous, was_ready: false,
            };
            let before = compose_model_cache(inputs);
            let mut damaged = clusters.clone();
            let after = match loss {
                CacheLoss::ClusterStatus(i) => {
                    damaged[i % n].status = None;
                    compose_model_cache(CacheInputs { clusters: Some(&damaged), ..inputs })
                }
                CacheLoss::StorageClass(i) => {
                    if let Some(s) = damaged[i % n].status.as_mut() { s.cache = None; }
                    compose_model_cache(CacheInputs { clusters: Some(&damaged), ..inputs })
                }
                CacheLoss::ClusterList => compose_model_cache(CacheInputs { clusters: None, ..inputs }),
                CacheLoss::Token if gated => compose_model_cache(CacheInputs { token: Token::Unresolved, ..inputs }),
                CacheLoss::Token => return Ok(()),
            };
            still_held(&before, &after, &format!("{loss:?}"), &tally)?;
    });
    tally.exercised(
        "a_cache_keeps_its_volumes_when_a_cluster_is_briefly_unreadable",
        75,
    );
}

fn deployment(replicas: i64, cached: bool) -> ModelDeployment {
    let mut spec = json!({
        "engines": [{ "name": "main", "members": [{
            "nodeSelector": { "devices": [{ "name": "gpu", "count": 8, "selectors": [
                { "cel": "device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"40Gi\")) >= 0" }] }] },
            "template": { "spec": { "containers": [{ "name": "engine", "image": "vllm/vllm-openai:v0.23.0" }] } },
        }] }],
    });
    if cached {
        spec["modelCacheRef"] = json!({ "name": "qwen" });
    }
    serde_json::from_value(json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
        "metadata": { "name": "qwen", "namespace": "ml-team" },
        "spec": { "replicas": replicas, "template": { "spec": spec } },
    }))
    .expect("a deployment")
}

#[derive(Clone, Copy, Debug)]
enum DeploymentLoss {
    ClusterStatus(usize),
    ClusterList,
    Cache,
}

fn deployment_loss() -> impl Strategy<Value = DeploymentLoss> {
    prop_oneof![
        (0usize..6).prop_map(DeploymentLoss::ClusterStatus),
        Just(DeploymentLoss::ClusterList),
        Just(DeploymentLoss::Cache),
    ]
}

fn views(clusters: &[InferenceCluster]) -> Vec<Cluster> {
    let mut interner = DeviceInterner::default();
    clusters
        .iter()
        .map(|c| Cluster::from_resource(c, &mut interner))
        .collect()
}

#[test]
fn a_deployment_keeps_its_replicas_when_a_cluster_or_its_cache_goes_unseen() {
    let tally = Tally::default();
    proptest!(ProptestConfig { cases: 3000, ..ProptestConfig::default() }, |(n in 1usize..6, replicas in 1i64..6, cached in any::<bool>(), loss in deployment_loss())| {
        tally.case();
            let clusters = fleet(n);
            let md = deployment(replicas, cached);
            let mc = cache(false, false);
            let lookup = if cached { CacheLookup::Present(&mc) } else { CacheLookup::NotReferenced };
            let fleet_views = views(&clusters);
            let ready = BTreeSet::new();
            let none: Vec<ExistingReplica> = Vec::new();
            // First pass: place; then the placed replicas exist.
            let first = compose_model_deployment(DeploymentInputs {
                deployment: &md, cache: lookup, clusters: Some(&fleet_views), replicas: &none, ready: &ready, routed: &BTreeSet::new(),
            });
            let existing: Vec<ExistingReplica> = first
                .desired
                .iter()
                .filter(|d| d.kind() == "ModelReplica")
                .map(|d| ExistingReplica::from_resource(&serde_json::from_value(d.object.clone()).expect("typed")))
                .collect();
            let inputs = DeploymentInputs {
                deployment: &md, cache: lookup, clusters: Some(&fleet_views), replicas: &existing, ready: &ready, routed: &BTreeSet::new(),
            };
            let before = compose_model_deployment(inputs);
            let mut damaged = clusters.clone();
            let damaged_views;
            let after = match loss {
                DeploymentLoss::ClusterStatus(i) => {
                    damaged[i % n].status = None;
                    damaged_views = views(&damaged);
                    compose_model_deployment(DeploymentInputs { clusters: Some(&damaged_views), ..inputs })
                }
                DeploymentLoss::ClusterList => compose_model_deployment(DeploymentInputs { clusters: None, ..inputs }),
                DeploymentLoss::Cache if cached => compose_model_deployment(DeploymentInputs { cache: CacheLookup::Unresolved, ..inputs }),
                DeploymentLoss::Cache => return Ok(()),
            };
            still_held(&before, &after, &format!("{loss:?}"), &tally)?;
    });
    tally.exercised(
        "a_deployment_keeps_its_replicas_when_a_cluster_or_its_cache_goes_unseen",
        70,
    );
}
