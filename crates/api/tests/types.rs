//! The Rust types cover every field users write: each Modelplane manifest of
//! the upstream corpus, admitted (pruned and defaulted), deserializes into its
//! type and serializes back to the same JSON.

use std::path::{Path, PathBuf};

use kube::core::CustomResourceExt;
use modelplane_api::crds::{self, KINDS};
use modelplane_api::types::*;
use modelplane_api::validation::structural::admit;
use modelplane_api::validation::yaml::parse_documents;
use serde_json::Value;

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("readable directory")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
}

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(value: &Value) -> Value {
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{e}: {value}"));
    serde_json::to_value(&typed).expect("serializes")
}

fn typed_round_trip(kind: &str, value: &Value) -> Value {
    match kind {
        "InferenceGateway" => round_trip::<InferenceGateway>(value),
        "InferenceClass" => round_trip::<InferenceClass>(value),
        "InferenceCluster" => round_trip::<InferenceCluster>(value),
        "ModelDeployment" => round_trip::<ModelDeployment>(value),
        "ModelReplica" => round_trip::<ModelReplica>(value),
        "ModelService" => round_trip::<ModelService>(value),
        "ModelEndpoint" => round_trip::<ModelEndpoint>(value),
        "ModelCache" => round_trip::<ModelCache>(value),
        "ServingStack" => round_trip::<ServingStack>(value),
        "EKSCluster" => round_trip::<EKSCluster>(value),
        "GKECluster" => round_trip::<GKECluster>(value),
        "AKSCluster" => round_trip::<AKSCluster>(value),
        "NebiusCluster" => round_trip::<NebiusCluster>(value),
        "VultrCluster" => round_trip::<VultrCluster>(value),
        other => panic!("no type for {other}"),
    }
}

/// Drops the fields v0.4 removed (they are only warned about).
fn without_removed_fields(mut value: Value) -> Value {
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("kubernetesVersion");
        spec.remove("versions");
    }
    for cloud in ["gke", "eks", "aks", "nebius", "vultr"] {
        let pointer = format!("/spec/cluster/{cloud}");
        if let Some(block) = value.pointer_mut(&pointer).and_then(Value::as_object_mut) {
            block.remove("kubernetesVersion");
        }
    }
    value
}

#[test]
fn every_upstream_manifest_round_trips_through_its_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/upstream-manifests");
    let mut files = Vec::new();
    yaml_files(&root, &mut files);
    let mut checked = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        for doc in parse_documents(&text).expect("valid YAML") {
            let api_version = doc.value["apiVersion"].as_str().unwrap_or_default();
            let kind = doc.value["kind"].as_str().unwrap_or_default();
            let Some(info) = crds::find(api_version, kind) else {
                continue;
            };
            let mut value = doc.value.clone();
            let metadata = value.as_object_mut().and_then(|m| m.remove("metadata"));
            let errors = admit(&info.schema(), &mut value, "");
            assert!(errors.is_empty(), "{}: {errors:?}", file.display());
            value["metadata"] = metadata.unwrap_or_default();
            let expected = without_removed_fields(value);
            assert_eq!(
                typed_round_trip(kind, &expected),
                expected,
                "{} {kind}",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 80, "only {checked} documents checked");
}

#[test]
fn type_identities_match_the_crds() {
    let identities = [
        InferenceGateway::crd(),
        InferenceClass::crd(),
        InferenceCluster::crd(),
        ModelDeployment::crd(),
        ModelReplica::crd(),
        ModelService::crd(),
        ModelEndpoint::crd(),
        ModelCache::crd(),
        ServingStack::crd(),
        EKSCluster::crd(),
        GKECluster::crd(),
        AKSCluster::crd(),
        NebiusCluster::crd(),
        VultrCluster::crd(),
    ];
    for (derived, info) in identities.iter().zip(KINDS) {
        let ours = crds::crd(info);
        let derived = serde_json::to_value(derived).expect("serializes");
        for pointer in [
            "/metadata/name",
            "/spec/group",
            "/spec/scope",
            "/spec/names/kind",
            "/spec/names/plural",
            "/spec/names/shortNames",
            "/spec/names/categories",
            "/spec/versions/0/name",
        ] {
            assert_eq!(
                derived.pointer(pointer),
                ours.pointer(pointer),
                "{} {pointer}",
                info.kind
            );
        }
    }
}

#[test]
fn accessors_return_schema_defaults_for_unset_fields() {
    let spec = InferenceClusterSpec::default();
    assert_eq!(spec.stack(), Stack::Standard);
    assert_eq!(
        InferenceGatewaySpec::default().backend(),
        GatewayBackend::Modelplane
    );
    let pool = NodePool {
        max_node_count: Some(4),
        ..NodePool::default()
    };
    assert_eq!(pool.node_count(), 1);
    assert_eq!(pool.capacity_nodes(), 4);
    assert_eq!(CredentialsRef::default().name(), "default");
}

/// An object that sets every property the schema declares.
fn maximal(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match schema["type"].as_str() {
        Some("object") => {
            let mut map = serde_json::Map::new();
            if let Some(props) = schema["properties"].as_object() {
                for (name, child) in props {
                    map.insert(name.clone(), maximal(child));
                }
            }
            if schema["additionalProperties"].is_object() {
                map.insert("key".into(), maximal(&schema["additionalProperties"]));
            }
            Value::Object(map)
        }
        Some("array") => Value::Array(vec![maximal(&schema["items"])]),
        Some("integer") => schema["minimum"].as_i64().unwrap_or(1).max(1).into(),
        Some("boolean") => true.into(),
        _ => "x".into(),
    }
}

#[test]
fn every_schema_field_has_a_place_in_its_type() {
    for info in KINDS {
        let mut value = maximal(&info.schema());
        value["apiVersion"] = info.api_version().into();
        value["kind"] = info.kind.into();
        value["metadata"] = serde_json::json!({"name": "x"});
        let expected = without_removed_fields(value);
        assert_eq!(
            typed_round_trip(info.kind, &expected),
            expected,
            "{}",
            info.kind
        );
    }
}
