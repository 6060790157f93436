//! InferenceCluster → its cloud cluster (or an existing cluster's kubeconfig),
//! the ServingStack that installs the serving stack on it, and the status the
//! fleet scheduler reads (`behavior.md` §8.1, DECISIONS §A1/§A7). Also
//! InferenceClass, which composes nothing (§8.4).
//!
//! Where this differs from the original: a missing InferenceClass holds the
//! cluster's children instead of dropping them, so an ordering hiccup while
//! applying manifests never tears down a cloud cluster.

use modelplane_api::labels;
use modelplane_api::names;
use modelplane_api::types::Condition as ObservedCondition;
use modelplane_api::types::{
    AksNodePool, CloudClusterStatus, EksNodePool, FabricType, GkeNodePool, InferenceClass,
    InferenceCluster, NebiusNodePool, NodePool, PoolGpu, PoolRole, PoolSize, Provisioning,
    ServingStack, Source, StackSecret, VultrNodePool,
};
use serde_json::{Value, json};

use crate::recipes;
use crate::{Composition, Condition, Desired, Event, EventType, ReadinessRule, Target};

/// Where GKE's container-optimised OS keeps the NVIDIA driver.
const GKE_DRIVER_ROOT: &str = "/home/kubernetes/bin/nvidia";

/// What composing an InferenceCluster reads.
#[derive(Clone, Copy, Debug)]
pub struct ClusterInputs<'a> {
    /// The cluster.
    pub cluster: &'a InferenceCluster,
    /// Every InferenceClass.
    pub classes: &'a [InferenceClass],
    /// ModelReplicas labelled `modelplane.ai/cluster=<name>`.
    pub hosted_replicas: usize,
    /// The observed cloud cluster's status, if it exists.
    pub cloud_cluster: Option<&'a CloudClusterStatus>,
    /// The observed ServingStack, if it exists.
    pub serving_stack: Option<&'a ServingStack>,
}

/// `Ready=True` among observed conditions.
pub(crate) fn observed_ready(conditions: Option<&Vec<ObservedCondition>>) -> bool {
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn control_plane(object: Value, ready_when: ReadinessRule) -> Desired {
    Desired {
        target: Target::ControlPlane,
        object,
        ready_when,
    }
}

pub(crate) fn cloud_kind(source: Source) -> Option<&'static str> {
    match source {
        Source::Gke => Some("GKECluster"),
        Source::Eks => Some("EKSCluster"),
        Source::Aks => Some("AKSCluster"),
        Source::Nebius => Some("NebiusCluster"),
        Source::Vultr => Some("VultrCluster"),
        Source::Existing => None,
    }
}

fn cloud_label(source: Source) -> &'static str {
    match source {
        Source::Gke => "GKE",
        Source::Eks => "EKS",
        Source::Aks => "AKS",
        Source::Nebius => "Nebius",
        Source::Vultr => "Vultr",
        Source::Existing => "Existing",
    }
}

fn size(pool: &NodePool) -> PoolSize {
    PoolSize {
        node_count: Some(pool.node_count()),
        min_node_count: pool.min_node_count,
        max_node_count: pool.max_node_count,
    }
}

fn fabric_is(pool: &NodePool, wanted: FabricType) -> bool {
    pool.fabric.as_ref().and_then(|f| f.type_) == Some(wanted)
}

/// One cloud node pool built from an IC pool and its class's provisioning
/// block; `None` when the class has no block for this cloud.
fn cloud_pool(source: Source, pool: &NodePool, p: &Provisioning) -> Option<Value> {
    let gpu = |type_: &str| PoolGpu {
        accelerator_type: type_.to_string(),
        ..PoolGpu::default()
    };
    let value = match source {
        Source::Eks => {
            let r = p.eks.as_ref()?;
            serde_json::to_value(EksNodePool {
                name: pool.name.clone(),
                role: PoolRole::Gpu,
                instance_type: r.instance_type.clone(),
                disk_size_gb: r.disk_size_gb,
                size: size(pool),
                gpu: Some(gpu(&r.accelerator.type_)),
                capacity_block: pool.capacity_block.clone(),
                zones: pool.zones.clone(),
                fabric: fabric_is(pool, FabricType::Efa).then(|| "EFA".to_string()),
            })
        }
        Source::Gke => {
            let r = p.gke.as_ref()?;
            serde_json::to_value(GkeNodePool {
                name: pool.name.clone(),
                role: PoolRole::Gpu,
                machine_type: r.machine_type.clone(),
                disk_size_gb: r.disk_size_gb,
                size: size(pool),
                gpu: Some(PoolGpu {
                    accelerator_count: Some(r.accelerator.count),
                    ..gpu(&r.accelerator.type_)
                }),
                zones: pool.zones.clone(),
            })
        }
        Source::Aks => {
            let r = p.aks.as_ref()?;
            serde_json::to_value(AksNodePool {
                name: pool.name.clone(),
                role: PoolRole::Gpu,
                vm_size: r.vm_size.clone(),
                disk_size_gb: r.disk_size_gb,
                size: size(pool),
                zones: pool.zones.clone().filter(|z| !z.is_empty()),
                gpu: Some(gpu(&r.accelerator.type_)),
                fabric: fabric_is(pool, FabricType::InfiniBand).then(|| "InfiniBand".to_string()),
            })
        }
        Source::Nebius => {
            let r = p.nebius.as_ref()?;
            serde_json::to_value(NebiusNodePool {
                name: pool.name.clone(),
                role: PoolRole::Gpu,
                platform: r.platform.clone(),
                preset: r.preset.clone(),
                disk_size_gb: r.disk_size_gb,
                size: size(pool),
                gpu: Some(PoolGpu {
                    drivers_preset: r.drivers_preset.clone(),
                    ..gpu(&r.accelerator.type_)
                }),
                fabric: pool
                    .fabric
                    .clone()
                    .filter(|_| fabric_is(pool, FabricType::InfiniBand)),
            })
        }
        Source::Vultr => {
            let r = p.vultr.as_ref()?;
            serde_json::to_value(VultrNodePool {
                name: pool.name.clone(),
                role: PoolRole::Gpu,
                plan: r.plan.clone(),
                size: size(pool),
                gpu: Some(gpu(&r.accelerator.type_)),
            })
        }
        Source::Existing => return None,
    };
    value.ok()
}

/// The cloud cluster XR's spec without its pools: region or location and
/// credentials, passed through.
fn cloud_spec(cluster: &InferenceCluster) -> Value {
    let c = &cluster.spec.cluster;
    let (place, credentials) = match c.source {
        Source::Gke => (
            c.gke.as_ref().map(|r| ("region", &r.region)),
            c.gke.as_ref().and_then(|r| r.credentials.as_ref()),
        ),
        Source::Eks => (
            c.eks.as_ref().map(|r| ("region", &r.region)),
            c.eks.as_ref().and_then(|r| r.credentials.as_ref()),
        ),
        Source::Vultr => (
            c.vultr.as_ref().map(|r| ("region", &r.region)),
            c.vultr.as_ref().and_then(|r| r.credentials.as_ref()),
        ),
        Source::Aks => (
            c.aks.as_ref().map(|r| ("location", &r.location)),
            c.aks.as_ref().and_then(|r| r.credentials.as_ref()),
        ),
        Source::Nebius => (None, c.nebius.as_ref().and_then(|r| r.credentials.as_ref())),
        Source::Existing => (None, None),
    };
    let mut spec = serde_json::Map::new();
    if let Some((key, value)) = place {
        spec.insert(key.into(), json!(value));
    }
    if let Some(credentials) = credentials {
        spec.insert("credentials".into(), json!(credentials));
    }
    Value::Object(spec)
}

/// The provider-kubernetes ClusterProviderConfig that reaches the cluster.
fn cluster_provider_config(
    name: &str,
    kubeconfig: &StackSecret,
    identity: Option<&StackSecret>,
) -> Desired {
    let mut spec = json!({
        "credentials": {
            "source": "Secret",
            "secretRef": {
                "namespace": kubeconfig.namespace.as_deref().unwrap_or(labels::SYSTEM_NAMESPACE),
                "name": kubeconfig.name,
                "key": kubeconfig.key,
            },
        },
    });
    if let Some(id) = identity {
        spec["identity"] = json!({
            "type": id.type_,
            "source": "Secret",
            "secretRef": {
                "namespace": id.namespace.as_deref().unwrap_or(labels::SYSTEM_NAMESPACE),
                "name": id.name,
                "key": id.key,
            },
        });
    }
    control_plane(
        json!({
            "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
            "kind": "ClusterProviderConfig",
            "metadata": { "name": names::cluster_provider_config_name(name) },
            "spec": spec,
        }),
        ReadinessRule::Created,
    )
}

fn usage(
    name: &str,
    namespaced: bool,
    of: Value,
    by: Option<Value>,
    reason: Option<&str>,
) -> Desired {
    let mut spec = json!({ "of": of, "replayDeletion": true });
    if let Some(by) = by {
        spec["by"] = by;
    }
    if let Some(reason) = reason {
        spec["reason"] = json!(reason);
    }
    let mut metadata = json!({ "name": name });
    if namespaced {
        metadata["namespace"] = json!(labels::SYSTEM_NAMESPACE);
    }
    control_plane(
        json!({
            "apiVersion": "protection.crossplane.io/v1beta1",
            "kind": if namespaced { "Usage" } else { "ClusterUsage" },
            "metadata": metadata,
            "spec": spec,
        }),
        ReadinessRule::Ungated,
    )
}

fn serving_stack(
    cluster: &InferenceCluster,
    classes: &[InferenceClass],
    name: &str,
    secrets: &[StackSecret],
) -> Desired {
    let recipe = recipes::resolve(
        cluster.spec.cluster.source,
        &recipes::accelerators(cluster, classes),
    );
    let mut spec = json!({
        "stack": cluster.spec.stack(),
        "secrets": secrets,
    });
    if cluster.spec.cluster.source == Source::Gke {
        spec["nvidiaDriverRoot"] = json!(GKE_DRIVER_ROOT);
    }
    control_plane(
        json!({
            "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
            "kind": "ServingStack",
            "metadata": {
                "name": names::serving_stack_name(name),
                "namespace": labels::SYSTEM_NAMESPACE,
                "labels": { labels::CLUSTER: name, labels::RECIPE: recipe.name },
            },
            "spec": spec,
        }),
        ReadinessRule::ConditionTrue("Ready".into()),
    )
}

/// The Existing source's secrets: the kubeconfig and an optional identity.
fn existing_secrets(cluster: &InferenceCluster) -> Vec<StackSecret> {
    let Some(existing) = &cluster.spec.cluster.existing else {
        return Vec::new();
    };
    let mut out = vec![StackSecret {
        type_: "Kubeconfig".into(),
        name: existing.secret_ref.name.clone(),
        key: existing.secret_ref.key().to_string(),
        namespace: None,
    }];
    if let Some(id) = &existing.identity_secret_ref {
        out.push(StackSecret {
            type_: id
                .type_
                .clone()
                .unwrap_or_else(|| "GoogleApplicationCredentials".into()),
            name: id.name.clone(),
            key: id.key.clone().unwrap_or_else(|| "private_key".into()),
            namespace: None,
        });
    }
    out
}

/// The identity a provisioned cluster's provider config carries.
fn cloud_identity(source: Source, secrets: &[StackSecret]) -> Option<&StackSecret> {
    let wanted = match source {
        Source::Gke => "GoogleApplicationCredentials",
        Source::Nebius => "NebiusServiceAccountCredentials",
        _ => return None,
    };
    secrets.iter().find(|s| s.type_ == wanted)
}

/// Composes an InferenceCluster.
pub fn compose_inference_cluster(inputs: ClusterInputs<'_>) -> Composition {
    let ic = inputs.cluster;
    let name = ic.metadata.name.as_deref().unwrap_or_default();
    let mut out = Composition::default();
    if inputs.hosted_replicas > 0 {
        out.desired.push(usage(
            &names::child_name(&[name, "replicas"]),
            false,
            json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster", "resourceRef": { "name": name } }),
            None,
            Some("ModelReplicas are scheduled to this InferenceCluster"),
        ));
    }

    let mut missing: Vec<&str> = ic
        .spec
        .node_pools
        .iter()
        .flatten()
        .map(|p| p.class_name.as_str())
        .filter(|c| {
            !inputs
                .classes
                .iter()
                .any(|k| k.metadata.name.as_deref() == Some(c))
        })
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if !missing.is_empty() {
        let message = format!("Waiting for InferenceClasses: {}", missing.join(", "));
        out.conditions.push(Condition::new(
            "ClusterReady",
            false,
            "WaitingForClasses",
            &message,
        ));
        out.events.push(Event {
            type_: EventType::Normal,
            reason: "WaitingForClasses".into(),
            message,
        });
        out.hold = true;
        return out;
    }

    let source = ic.spec.cluster.source;
    let (cluster_ready, secrets, storage_class) = match cloud_kind(source) {
        None => {
            let secrets = existing_secrets(ic);
            if let Some(kubeconfig) = secrets.first() {
                out.desired
                    .push(cluster_provider_config(name, kubeconfig, secrets.get(1)));
            }
            let storage = ic
                .spec
                .cluster
                .existing
                .as_ref()
                .and_then(|e| e.cache.as_ref())
                .and_then(|c| c.storage_class_name.clone());
            (true, Some(secrets), storage)
        }
        Some(kind) => compose_cloud_cluster(&inputs, kind, &mut out),
    };

    let backend = inputs.serving_stack;
    let backend_ready = backend
        .is_some_and(|ss| observed_ready(ss.status.as_ref().and_then(|s| s.conditions.as_ref())));
    let secrets = secrets.or_else(|| backend.map(|ss| ss.spec.secrets.clone()));
    if let Some(secrets) = secrets.filter(|s| !s.is_empty()) {
        out.desired
            .push(serving_stack(ic, inputs.classes, name, &secrets));
        if let Some(kind) = cloud_kind(source) {
            out.desired.push(usage(
                &names::child_name(&[name, &cloud_label(source).to_ascii_lowercase(), "by-backend"]),
                true,
                json!({ "apiVersion": "infrastructure.modelplane.ai/v1alpha1", "kind": kind, "resourceRef": { "name": name } }),
                Some(json!({ "apiVersion": "infrastructure.modelplane.ai/v1alpha1", "kind": "ServingStack", "resourceRef": { "name": names::serving_stack_name(name) } })),
                None,
            ));
        }
    }

    let gateway = backend
        .and_then(|ss| ss.status.as_ref())
        .and_then(|s| s.gateway.as_ref())
        .and_then(|g| g.address.clone());
    let mut status = json!({
        "providerConfigRef": { "name": names::cluster_provider_config_name(name) },
        "namespace": labels::SYSTEM_NAMESPACE,
        "gpuPools": ic.spec.gpu_pools(inputs.classes),
    });
    if let Some(storage) = storage_class {
        status["cache"] = json!({ "storageClassName": storage });
    }
    if let Some(address) = gateway {
        status["gateway"] = json!({ "address": address });
    }
    out.status = Some(status);

    out.conditions.push(if cluster_ready {
        Condition::new("ClusterReady", true, "ClusterRunning", "")
    } else {
        Condition::new("ClusterReady", false, "Provisioning", "")
    });
    out.conditions.push(if backend_ready {
        Condition::new("BackendReady", true, "BackendHealthy", "")
    } else if !cluster_ready {
        Condition::new("BackendReady", false, "WaitingForCluster", "")
    } else {
        Condition::new("BackendReady", false, "Installing", "")
    });
    out
}

/// The cloud cluster XR and, once it is ready with a kubeconfig, the provider
/// config that reaches it. Returns whether it is ready, its secrets when
/// ready, and its managed storage class.
fn compose_cloud_cluster(
    inputs: &ClusterInputs<'_>,
    kind: &str,
    out: &mut Composition,
) -> (bool, Option<Vec<StackSecret>>, Option<String>) {
    let ic = inputs.cluster;
    let name = ic.metadata.name.as_deref().unwrap_or_default();
    let source = ic.spec.cluster.source;
    let mut pools = Vec::new();
    let mut invalid = None;
    for pool in ic.spec.node_pools.iter().flatten() {
        let class = inputs
            .classes
            .iter()
            .find(|k| k.metadata.name.as_deref() == Some(pool.class_name.as_str()));
        match class
            .and_then(|k| k.spec.provisioning.as_ref())
            .and_then(|p| cloud_pool(source, pool, p))
        {
            Some(p) => pools.push(p),
            None => {
                invalid.get_or_insert_with(|| {
                    format!(
                        "InferenceClass {} has no {} provisioning block",
                        pool.class_name,
                        cloud_label(source)
                    )
                });
            }
        }
    }
    if let Some(message) = invalid {
        out.conditions.push(Condition::new(
            "ClusterReady",
            false,
            "InvalidNodePool",
            &message,
        ));
        out.events.push(Event {
            type_: EventType::Warning,
            reason: "InvalidNodePool".into(),
            message,
        });
        // The cloud cluster cannot be composed this pass, but may exist and
        // serve: keep it (and everything else) until the class is fixed.
        out.hold = true;
    } else {
        let mut spec = cloud_spec(ic);
        spec["nodePools"] = Value::Array(pools);
        out.desired.push(control_plane(
            json!({
                "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
                "kind": kind,
                "metadata": { "name": name, "namespace": labels::SYSTEM_NAMESPACE, "labels": { labels::CLUSTER: name } },
                "spec": spec,
            }),
            ReadinessRule::ConditionTrue("Ready".into()),
        ));
    }

    let observed = inputs.cloud_cluster;
    let ready = observed.is_some_and(|s| observed_ready(s.conditions.as_ref()));
    let published: Vec<StackSecret> = observed.and_then(|s| s.secrets.clone()).unwrap_or_default();
    let storage = observed
        .and_then(|s| s.cache.as_ref())
        .and_then(|c| c.storage_class_name.clone());
    // How to reach the cluster: what the cloud cluster publishes, else what
    // the ServingStack was given when it was. The provider config stays
    // while the cluster is briefly not Ready (the original drops it, hazard
    // H6, and with it everything installed through it).
    let reach = [
        published.as_slice(),
        inputs
            .serving_stack
            .map_or(&[][..], |ss| ss.spec.secrets.as_slice()),
    ]
    .into_iter()
    .find(|secrets| secrets.iter().any(|s| s.type_ == "Kubeconfig"));
    match reach {
        Some(secrets) => {
            if let Some(kubeconfig) = secrets.iter().find(|s| s.type_ == "Kubeconfig") {
                out.desired.push(cluster_provider_config(
                    name,
                    kubeconfig,
                    cloud_identity(source, secrets),
                ));
            }
        }
        // A ServingStack exists but neither it nor the cluster says how to
        // reach the cluster: keep what exists.
        None if inputs.serving_stack.is_some() => out.hold = true,
        None => {}
    }
    let kubeconfig_published = published.iter().any(|s| s.type_ == "Kubeconfig");
    if ready && kubeconfig_published {
        if inputs.serving_stack.is_none() {
            out.events.push(Event {
                type_: EventType::Normal,
                reason: "ComposingBackend".into(),
                message: format!("{} cluster ready, composing backend", cloud_label(source)),
            });
        }
        (true, Some(published), storage)
    } else {
        (false, None, storage)
    }
}

/// Composes an InferenceClass: nothing to create, always accepted.
pub fn compose_inference_class() -> Composition {
    Composition {
        status: Some(json!({})),
        conditions: vec![Condition::new("Accepted", true, "Available", "")],
        ..Composition::default()
    }
}

/// A workload cluster whose API server does not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreachable {
    /// The client's error.
    pub why: String,
    /// When it was first found not answering (RFC 3339).
    pub since: String,
}

/// `composition` of InferenceCluster `name` with whether its API server
/// answers (`unreachable` says why not): a `Reachable` condition, and while
/// it does not answer, not Ready (no new replica is placed there) and a
/// warning. Nothing composed changes: what runs there stays.
pub fn with_reachability(
    mut composition: Composition,
    name: &str,
    unreachable: Option<&Unreachable>,
) -> Composition {
    composition.conditions.push(match unreachable {
        None => Condition::new("Reachable", true, "APIServerAnswers", ""),
        Some(u) => {
            let message = unreachable_message(name, u);
            composition.events.push(Event {
                type_: EventType::Warning,
                reason: "Unreachable".into(),
                message: message.clone(),
            });
            composition.waiting = Some(crate::Waiting::new("Unreachable", message.clone()));
            Condition::new("Reachable", false, "Unreachable", message)
        }
    });
    composition
}

/// How a replica on cluster `name` says whether that cluster answers: its
/// state is as last seen, and nothing on it is changed, while it does not.
pub fn with_cluster_reachability(
    mut composition: Composition,
    name: &str,
    unreachable: Option<&Unreachable>,
) -> Composition {
    composition.conditions.push(match unreachable {
        None => Condition::new("ClusterReachable", true, "APIServerAnswers", ""),
        Some(u) => Condition::new(
            "ClusterReachable",
            false,
            "ClusterUnreachable",
            format!(
                "{}; this replica's state is as last seen, and nothing on the cluster is changed or deleted until it answers",
                unreachable_message(name, u)
            ),
        ),
    });
    composition
}

fn unreachable_message(name: &str, u: &Unreachable) -> String {
    format!(
        "the API server of cluster {name} does not answer since {}: {}",
        u.since, u.why
    )
}
