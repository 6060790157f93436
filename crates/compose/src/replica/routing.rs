//! The routing layer of a replica (`behavior.md` §5.6): an InferencePool over
//! the serving pods, an HTTPRoute on the cluster gateway for
//! `/<namespace>/<replica>/`, and an endpoint picker; under PrefillDecode the
//! prefill and decode engines are decorated for disaggregated serving.

use modelplane_api::labels;
use modelplane_api::names::child_name;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::pod::{PodPlan, readiness_probe};
use crate::{Desired, ReadinessRule, Target};

/// Image of the endpoint picker.
pub const EPP_IMAGE: &str = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.9.0";
/// Image of the prefill/decode sidecar.
pub const SIDECAR_IMAGE: &str = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0";
/// Decode port when the decode engine does not set `--port`.
const DEFAULT_DECODE_PORT: i64 = 8001;
/// gRPC port of the endpoint picker.
const EPP_PORT: i64 = 9002;

/// The first `--block-size`/`--page-size` value in `args`, read as the
/// engine (Python's `int()`) reads it, else 16.
pub fn block_size(args: &[String]) -> i64 {
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        for flag in ["--block-size", "--page-size"] {
            if let Some(v) = arg.strip_prefix(&format!("{flag}=")) {
                return modelplane_api::python::int(v).unwrap_or(16);
            }
            if arg == flag {
                return iter
                    .peek()
                    .and_then(|v| modelplane_api::python::int(v))
                    .unwrap_or(16);
            }
        }
    }
    16
}

/// The integer `--port` in `args` (read as Python's `int()` reads it):
/// `Ok(None)` when absent, `Err` when not an integer.
pub fn port_arg(args: &[String]) -> Result<Option<i64>, String> {
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        let value = if let Some(v) = arg.strip_prefix("--port=") {
            Some(v.to_string())
        } else if arg == "--port" {
            iter.peek().map(|v| v.to_string())
        } else {
            None
        };
        if let Some(v) = value {
            return modelplane_api::python::int(&v).map(Some).ok_or(v);
        }
    }
    Ok(None)
}

/// The args of a pod's engine container.
pub fn engine_args(pod: &PodPlan) -> Vec<String> {
    pod.containers[0]
        .get("args")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Labels a PrefillDecode serving pod carries.
pub fn decorate_phase(pod: &mut PodPlan, replica: &str, role: &str) {
    pod.labels.insert(labels::LLMD_ROLE.into(), json!(role));
    pod.labels
        .insert(labels::LLMD_INFERENCE_SERVING.into(), json!("true"));
    pod.labels.insert("app".into(), json!(replica));
    let volumes = pod.spec.entry("volumes").or_insert_with(|| json!([]));
    if let Value::Array(volumes) = volumes
        && !volumes.iter().any(|v| v["name"] == "nixl-shm")
    {
        volumes.push(json!({ "name": "nixl-shm", "emptyDir": { "medium": "Memory" } }));
    }
    let engine = pod.engine();
    let mounts_shm = engine
        .get("volumeMounts")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|m| m["mountPath"] == "/dev/shm"));
    if !mounts_shm {
        let mounts = engine.entry("volumeMounts").or_insert_with(|| json!([]));
        if let Value::Array(mounts) = mounts {
            mounts.push(json!({ "name": "nixl-shm", "mountPath": "/dev/shm" }));
        }
    }
    if !engine.contains_key("env") {
        super::pod::insert_after(engine, "args", "env", json!([]));
    }
    if let Some(Value::Array(env)) = engine.get_mut("env") {
        let named = |env: &Vec<Value>, n: &str| env.iter().any(|e| e["name"] == n);
        if !named(env, "VLLM_NIXL_SIDE_CHANNEL_HOST") {
            env.push(json!({ "name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }));
        }
        if !named(env, "VLLM_NIXL_SIDE_CHANNEL_PORT") {
            env.push(json!({ "name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": "5557" }));
        }
    }
}

/// Moves the decode engine to `port` and puts the disaggregation sidecar on 8000.
pub fn decorate_decode(pod: &mut PodPlan, port: i64) {
    let engine = pod.engine();
    engine.insert("ports".into(), json!([{ "containerPort": port }]));
    engine.insert("readinessProbe".into(), readiness_probe(port));
    let mut sidecar = Map::new();
    sidecar.insert("name".into(), json!("pd-sidecar"));
    sidecar.insert("image".into(), json!(SIDECAR_IMAGE));
    sidecar.insert(
        "args".into(),
        json!([
            "--secure-proxy=false",
            "--kv-connector=nixlv2",
            format!("--vllm-port={port}")
        ]),
    );
    sidecar.insert(
        "ports".into(),
        json!([{ "containerPort": labels::ENGINE_PORT }]),
    );
    sidecar.insert(
        "readinessProbe".into(),
        readiness_probe(i64::from(labels::ENGINE_PORT)),
    );
    pod.containers.push(sidecar);
}

/// The decode port of a decode engine's args (8001 when unset).
pub fn decode_port(args: &[String]) -> Result<i64, String> {
    port_arg(args).map(|p| p.unwrap_or(DEFAULT_DECODE_PORT))
}

/// The endpoint picker configuration, as YAML text (hashed into the rollout checksum).
pub fn epp_config(block_size: i64, disaggregated: bool) -> String {
    let producer = format!(
        "- type: approx-prefix-cache-producer\n  parameters:\n    autoTune: false\n    blockSizeTokens: {block_size}\n    maxPrefixBlocksToMatch: 256\n    lruCapacityPerServer: 31250\n"
    );
    let mut text =
        String::from("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n");
    text.push_str(&producer);
    if disaggregated {
        text.push_str(
            "- type: prefix-cache-scorer\n\
             - type: disagg-headers-handler\n\
             - type: queue-scorer\n\
             - type: prefill-filter\n\
             - type: decode-filter\n\
             - type: max-score-picker\n\
             - type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: 16\n\
             - type: disagg-profile-handler\n  parameters:\n    deciders:\n      prefill: prefix-based-pd-decider\n\
             schedulingProfiles:\n",
        );
        for (profile, filter) in [("prefill", "prefill-filter"), ("decode", "decode-filter")] {
            text.push_str(&format!(
                "- name: {profile}\n  plugins:\n  - pluginRef: {filter}\n  - pluginRef: max-score-picker\n  - pluginRef: prefix-cache-scorer\n    weight: 2\n  - pluginRef: queue-scorer\n    weight: 1\n"
            ));
        }
    } else {
        text.push_str(
            "- type: prefix-cache-scorer\n\
             - type: queue-scorer\n\
             - type: max-score-picker\n\
             schedulingProfiles:\n\
             - name: default\n  plugins:\n  - pluginRef: max-score-picker\n  - pluginRef: prefix-cache-scorer\n    weight: 2\n  - pluginRef: queue-scorer\n    weight: 1\n",
        );
    }
    text
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The InferencePool, HTTPRoute and endpoint-picker objects of a replica.
pub fn routing_objects(
    cluster: &str,
    namespace: &str,
    replica: &str,
    block_size: i64,
    disaggregated: bool,
) -> Vec<Desired> {
    // The team's namespace on the cluster: pools select only its pods.
    let ns = namespace;
    let pool = child_name(&[replica, "pool"]);
    let epp = child_name(&[replica, "epp"]);
    let config = epp_config(block_size, disaggregated);
    let created = |object: Value| Desired {
        target: Target::Cluster(cluster.to_string()),
        object,
        ready_when: ReadinessRule::Created,
    };
    vec![
        created(json!({
            "apiVersion": "inference.networking.k8s.io/v1",
            "kind": "InferencePool",
            "metadata": { "name": pool, "namespace": ns },
            "spec": {
                "selector": { "matchLabels": { labels::SERVING: replica } },
                "targetPorts": [{ "number": labels::ENGINE_PORT }],
                "endpointPickerRef": { "name": epp, "port": { "number": EPP_PORT }, "failureMode": "FailOpen" },
            },
        })),
        created(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": { "name": replica, "namespace": ns },
            "spec": {
                "parentRefs": [{ "name": labels::CLUSTER_GATEWAY_NAME, "namespace": labels::SYSTEM_NAMESPACE }],
                "rules": [{
                    "matches": [{ "path": { "type": "PathPrefix", "value": format!("/{namespace}/{replica}/") } }],
                    "timeouts": { "request": "0s" },
                    "filters": [{ "type": "URLRewrite", "urlRewrite": { "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/" } } }],
                    "backendRefs": [{ "group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool }],
                }],
            },
        })),
        created(json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": { "name": epp, "namespace": ns },
        })),
        created(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": { "name": epp, "namespace": ns },
            "rules": crate::kinds::GRANTED_ON_CLUSTER
                .iter()
                .map(|(group, resource, verbs)| json!({ "apiGroups": [group], "resources": [resource], "verbs": verbs }))
                .collect::<Vec<_>>(),
        })),
        created(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": { "name": epp, "namespace": ns },
            "subjects": [{ "kind": "ServiceAccount", "name": epp, "namespace": ns }],
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": epp },
        })),
        created(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "name": epp, "namespace": ns },
            "data": { "epp-config.yaml": config },
        })),
        Desired {
            target: Target::Cluster(cluster.to_string()),
            ready_when: ReadinessRule::ConditionTrue("Available".into()),
            object: json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": { "name": epp, "namespace": ns },
                "spec": {
                    "replicas": 1,
                    "selector": { "matchLabels": { "app": epp } },
                    "template": {
                        "metadata": {
                            "labels": { "app": epp },
                            "annotations": { labels::EPP_CONFIG_CHECKSUM: sha256_hex(&config) },
                        },
                        "spec": {
                            "serviceAccountName": epp,
                            "containers": [{
                                "name": "epp",
                                "image": EPP_IMAGE,
                                "args": [
                                    format!("--pool-name={pool}"),
                                    format!("--pool-namespace={ns}"),
                                    "--pool-group=inference.networking.k8s.io",
                                    "--config-file=/config/epp-config.yaml",
                                    format!("--grpc-port={EPP_PORT}"),
                                ],
                                "ports": [
                                    { "name": "grpc", "containerPort": EPP_PORT },
                                    { "name": "grpc-health", "containerPort": 9003 },
                                ],
                                "volumeMounts": [{ "name": "config", "mountPath": "/config" }],
                            }],
                            "volumes": [{ "name": "config", "configMap": { "name": epp } }],
                        },
                    },
                },
            }),
        },
        created(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": { "name": epp, "namespace": ns },
            "spec": {
                "selector": { "app": epp },
                "ports": [{ "name": "grpc-ext-proc", "port": EPP_PORT, "targetPort": EPP_PORT, "appProtocol": "http2" }],
            },
        })),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn block_size_takes_the_first_flag_in_either_form() {
        assert_eq!(
            block_size(&args(&["--x", "--block-size", "32", "--page-size=64"])),
            32
        );
        assert_eq!(block_size(&args(&["--page-size=64"])), 64);
        assert_eq!(block_size(&args(&["--block-size=big"])), 16);
        assert_eq!(block_size(&args(&["--block-size"])), 16);
        assert_eq!(block_size(&[]), 16);
    }

    #[test]
    fn integer_flags_are_read_as_the_engine_reads_them() {
        // vLLM and SGLang parse with Python's int(): whitespace, a sign and
        // digit separators are fine.
        assert_eq!(block_size(&args(&["--block-size=3_2"])), 32);
        assert_eq!(block_size(&args(&["--block-size", " 64 "])), 64);
        assert_eq!(port_arg(&args(&["--port= 8002"])), Ok(Some(8002)));
        assert_eq!(port_arg(&args(&["--port", "+8_003"])), Ok(Some(8003)));
        assert_eq!(port_arg(&args(&["--port=80.5"])), Err("80.5".into()));
    }

    #[test]
    fn ports_must_be_integers() {
        assert_eq!(port_arg(&args(&["--port", "8200"])), Ok(Some(8200)));
        assert_eq!(port_arg(&args(&["--port=9000"])), Ok(Some(9000)));
        assert_eq!(port_arg(&args(&["--model=x"])), Ok(None));
        assert_eq!(port_arg(&args(&["--port=$(PORT)"])), Err("$(PORT)".into()));
        assert_eq!(decode_port(&[]), Ok(8001));
    }

    #[test]
    fn the_unified_config_has_no_prefill_or_decider() {
        let text = epp_config(16, false);
        assert!(!text.contains("prefill") && !text.contains("decider"));
        assert!(epp_config(32, true).contains("blockSizeTokens: 32"));
    }
}
