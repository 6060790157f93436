//! ServingStack → the serving stack of one workload cluster (`behavior.md`
//! §8.3, DECISIONS §A2/§A7/§E). The recipe's Helm charts become provider-helm
//! `Release`s on the control plane, pointed at the cluster through
//! namespaced provider configs built from its kubeconfig Secret; the stack's
//! plain objects (the DRA driver's critical-pods quota, the cluster gateway,
//! and on Dynamo the KAI queue) are applied to the cluster directly.
//!
//! Which components install comes from the recipe and the stack alone: there
//! are no version fields to read.

use modelplane_api::labels;
use modelplane_api::names;
use modelplane_api::types::{ServingStack, StackSecret};
use serde_json::{Value, json};

use crate::recipes::{Component, Recipe};
use crate::{Composition, Desired, ReadinessRule, Target};

/// The component whose values take the host's NVIDIA driver root.
const DRA_DRIVER: &str = "nvidia-dra-driver-gpu";
/// GatewayClass when the spec names none.
const DEFAULT_GATEWAY_CLASS: &str = "envoy";

/// What composing a ServingStack reads.
#[derive(Clone, Copy, Debug)]
pub struct StackInputs<'a> {
    /// The ServingStack.
    pub serving_stack: &'a ServingStack,
    /// Its recipe (named by the `modelplane.ai/recipe` label).
    pub recipe: &'a Recipe,
    /// Both provider configs are observed on the control plane.
    pub provider_configs_observed: bool,
    /// `status.addresses[0].value` of the observed cluster Gateway.
    pub gateway_address: Option<&'a str>,
}

fn secret_ref(secret: &StackSecret) -> Value {
    let mut r = json!({ "name": secret.name, "key": secret.key });
    if let Some(ns) = &secret.namespace {
        r["namespace"] = json!(ns);
    }
    r
}

/// The provider-kubernetes and provider-helm configs that reach the cluster.
fn provider_configs(ss: &ServingStack, name: &str, namespace: &str) -> Vec<Desired> {
    let secrets = &ss.spec.secrets;
    let Some(kubeconfig) = secrets.iter().find(|s| s.type_ == "Kubeconfig") else {
        return Vec::new();
    };
    let mut spec =
        json!({ "credentials": { "source": "Secret", "secretRef": secret_ref(kubeconfig) } });
    if let Some(identity) = secrets.iter().find(|s| s.type_ != "Kubeconfig") {
        spec["identity"] = json!({ "type": identity.type_, "source": "Secret", "secretRef": secret_ref(identity) });
    }
    ["kubernetes.m.crossplane.io/v1alpha1", "helm.m.crossplane.io/v1beta1"]
        .into_iter()
        .map(|api_version| Desired {
            target: Target::ControlPlane,
            object: json!({
                "apiVersion": api_version,
                "kind": "ProviderConfig",
                "metadata": { "name": names::serving_stack_provider_config_name(name), "namespace": namespace },
                "spec": spec,
            }),
            ready_when: ReadinessRule::Created,
        })
        .collect()
}

/// One recipe component as a Release on the control plane.
fn release(ss: &ServingStack, name: &str, namespace: &str, component: &Component) -> Desired {
    let mut values = component.values.clone();
    let driver_root = ss.spec.nvidia_driver_root.as_deref().unwrap_or("/");
    if component.name == DRA_DRIVER && driver_root != "/" {
        if !values.is_object() {
            values = json!({});
        }
        values["nvidiaDriverRoot"] = json!(driver_root);
    }
    let mut for_provider = json!({
        "chart": { "name": component.chart, "repository": component.repository, "version": component.version },
        "namespace": component.namespace,
    });
    if !values.is_null() {
        for_provider["values"] = values;
    }
    Desired {
        target: Target::ControlPlane,
        object: json!({
            "apiVersion": "helm.m.crossplane.io/v1beta1",
            "kind": "Release",
            "metadata": {
                "name": names::child_name(&[name, &component.name]),
                "namespace": namespace,
                "labels": { labels::RELEASE: component.name, labels::USAGE_CONSUMER: component.name },
                "annotations": { labels::EXTERNAL_NAME: format!("mp-{}", component.chart) },
            },
            "spec": {
                "providerConfigRef": { "kind": "ProviderConfig", "name": names::serving_stack_provider_config_name(name) },
                "forProvider": for_provider,
            },
        }),
        ready_when: ReadinessRule::ConditionTrue("Ready".into()),
    }
}

/// Keeps the helm provider config until the Release that uses it is gone
/// (compose-usages).
fn release_usage(name: &str, namespace: &str, component: &str) -> Desired {
    Desired {
        target: Target::ControlPlane,
        object: json!({
            "apiVersion": "protection.crossplane.io/v1beta1",
            "kind": "Usage",
            "metadata": { "name": names::child_name(&[name, "usage-pc", component]), "namespace": namespace },
            "spec": {
                "of": { "apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "ProviderConfig", "resourceRef": { "name": names::serving_stack_provider_config_name(name) } },
                "by": {
                    "apiVersion": "helm.m.crossplane.io/v1beta1",
                    "kind": "Release",
                    "resourceSelector": { "matchControllerRef": true, "matchLabels": { labels::USAGE_CONSUMER: component } },
                },
                "replayDeletion": true,
            },
        }),
        ready_when: ReadinessRule::Ungated,
    }
}

/// The stack's plain objects, applied to the workload cluster.
fn cluster_objects(ss: &ServingStack, recipe: &Recipe, cluster: &str) -> Vec<Desired> {
    let on_cluster = |object: Value, ready_when: ReadinessRule| Desired {
        target: Target::Cluster(cluster.to_string()),
        object,
        ready_when,
    };
    let dra_namespace = recipe
        .components
        .iter()
        .find(|c| c.name == DRA_DRIVER)
        .map_or("nvidia-dra-driver", |c| c.namespace.as_str());
    let gateway = ss.spec.gateway.clone().unwrap_or_default();
    let class_name = gateway
        .class_name
        .as_deref()
        .unwrap_or(DEFAULT_GATEWAY_CLASS);
    let listeners: Vec<Value> = match gateway.listeners.filter(|l| !l.is_empty()) {
        Some(listeners) => listeners
            .iter()
            .map(|l| json!({ "name": l.name, "protocol": l.protocol, "port": l.port, "allowedRoutes": { "namespaces": { "from": "All" } } }))
            .collect(),
        None => vec![json!({ "name": "http", "protocol": "HTTP", "port": 80, "allowedRoutes": { "namespaces": { "from": "All" } } })],
    };
    let mut out = vec![
        // The DRA driver's kubelet plugin runs at node-critical priority; GKE
        // only admits such pods into a namespace with a quota that allows them.
        on_cluster(
            json!({
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": { "name": "allow-critical-pods", "namespace": dra_namespace },
                "spec": {
                    "hard": { "pods": "1000" },
                    "scopeSelector": { "matchExpressions": [{
                        "operator": "In",
                        "scopeName": "PriorityClass",
                        "values": ["system-node-critical", "system-cluster-critical"],
                    }] },
                },
            }),
            ReadinessRule::Created,
        ),
        on_cluster(
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": labels::SYSTEM_NAMESPACE } }),
            ReadinessRule::Created,
        ),
        on_cluster(
            json!({
                "apiVersion": "gateway.envoyproxy.io/v1alpha1",
                "kind": "EnvoyProxy",
                "metadata": { "name": labels::CLUSTER_GATEWAY_NAME, "namespace": labels::SYSTEM_NAMESPACE, "labels": { labels::RESOURCE: "gateway-proxy" } },
                "spec": { "provider": { "type": "Kubernetes", "kubernetes": { "envoyService": { "externalTrafficPolicy": "Cluster" } } } },
            }),
            ReadinessRule::Created,
        ),
        on_cluster(
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "GatewayClass",
                "metadata": { "name": class_name, "labels": { labels::RESOURCE: "gateway-class" } },
                "spec": {
                    "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
                    "parametersRef": {
                        "group": "gateway.envoyproxy.io",
                        "kind": "EnvoyProxy",
                        "name": labels::CLUSTER_GATEWAY_NAME,
                        "namespace": labels::SYSTEM_NAMESPACE,
                    },
                },
            }),
            ReadinessRule::ConditionTrue("Accepted".into()),
        ),
        on_cluster(
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "Gateway",
                "metadata": { "name": labels::CLUSTER_GATEWAY_NAME, "namespace": labels::SYSTEM_NAMESPACE, "labels": { labels::RESOURCE: "gateway" } },
                "spec": { "gatewayClassName": class_name, "listeners": listeners },
            }),
            ReadinessRule::FieldPresent("/status/addresses".into()),
        ),
    ];
    if ss.spec.stack.unwrap_or_default() == modelplane_api::types::Stack::Dynamo {
        out.push(on_cluster(
            json!({
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": { "name": labels::KAI_QUEUE },
                "spec": {
                    "displayName": "Modelplane",
                    "parentQueue": "default-parent-queue",
                    "resources": {
                        "gpu": { "quota": -1, "limit": -1, "overQuotaWeight": 1 },
                        "cpu": { "quota": -1, "limit": -1, "overQuotaWeight": 1 },
                        "memory": { "quota": -1, "limit": -1, "overQuotaWeight": 1 },
                    },
                },
            }),
            ReadinessRule::Created,
        ));
    }
    out
}

/// Composes a ServingStack.
pub fn compose_serving_stack(inputs: StackInputs<'_>) -> Composition {
    let ss = inputs.serving_stack;
    let name = ss.metadata.name.as_deref().unwrap_or_default();
    let namespace = ss
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(labels::SYSTEM_NAMESPACE);
    let cluster = ss
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::CLUSTER))
        .map_or(name, String::as_str);
    let mut out = Composition {
        desired: provider_configs(ss, name, namespace),
        ..Composition::default()
    };
    if out.desired.is_empty() {
        // No kubeconfig: nothing can reach the cluster; keep what exists.
        out.hold = true;
        return out;
    }
    if !inputs.provider_configs_observed {
        // The releases and objects target these configs: until both are
        // observed the rest cannot be composed, and what already exists
        // (installed by an earlier pass) must stay — a cold cache on the
        // control plane must not uninstall the stack.
        out.hold = true;
    } else {
        for component in inputs.recipe.components(ss.spec.stack.unwrap_or_default()) {
            out.desired.push(release(ss, name, namespace, component));
            out.desired
                .push(release_usage(name, namespace, &component.name));
        }
        out.desired
            .extend(cluster_objects(ss, inputs.recipe, cluster));
    }
    if let Some(address) = inputs.gateway_address {
        out.status = Some(json!({ "gateway": { "address": address } }));
    }
    out
}
