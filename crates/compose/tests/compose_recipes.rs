//! The locked recipes: every one parses, the stacks differ by exactly their
//! own components, and no cluster spec carries a version field.

use std::collections::BTreeSet;

use modelplane_api::crds;
use modelplane_api::types::{Source, Stack};
use modelplane_compose::recipes::{self, Component};

fn names<'a>(components: impl Iterator<Item = &'a Component>) -> BTreeSet<String> {
    components.map(|c| c.name.clone()).collect()
}

#[test]
fn every_recipe_is_complete() {
    let all = recipes::all();
    assert!(all.len() >= 10);
    for r in all {
        for c in &r.components {
            for (field, value) in [
                ("chart", &c.chart),
                ("repository", &c.repository),
                ("version", &c.version),
                ("namespace", &c.namespace),
            ] {
                assert!(!value.is_empty(), "{}: {} has no {field}", r.name, c.name);
            }
            assert!(
                c.repository.starts_with("https://") || c.repository.starts_with("oci://"),
                "{}: {}",
                r.name,
                c.repository
            );
        }
        let unique = names(r.components.iter());
        assert_eq!(
            unique.len(),
            r.components.len(),
            "{}: duplicate component",
            r.name
        );
    }
}

#[test]
fn the_stacks_differ_by_exactly_their_own_components() {
    for r in recipes::all() {
        let standard = names(r.components(Stack::Standard));
        let dynamo = names(r.components(Stack::Dynamo));
        let only_standard: BTreeSet<String> = standard.difference(&dynamo).cloned().collect();
        let only_dynamo: BTreeSet<String> = dynamo.difference(&standard).cloned().collect();
        assert_eq!(
            only_standard,
            BTreeSet::from(["leader-worker-set".to_string()]),
            "{}",
            r.name
        );
        assert_eq!(
            only_dynamo,
            ["grove", "kai-scheduler", "modelexpress-server"]
                .into_iter()
                .map(String::from)
                .collect(),
            "{}",
            r.name
        );
    }
}

#[test]
fn the_required_recipes_exist_and_resolve() {
    for (source, accelerator, want) in [
        (Source::Eks, "nvidia-h100", "eks-h100-ubuntu"),
        (Source::Eks, "nvidia-h200", "eks-h200-ubuntu"),
        (Source::Eks, "nvidia-l4", "eks-l4-ubuntu"),
        (Source::Gke, "nvidia-h100", "gke-h100-cos"),
        (Source::Gke, "nvidia-l4", "gke-l4-cos"),
        (Source::Aks, "nvidia-h100", "aks-h100-ubuntu"),
        (Source::Nebius, "nvidia-h100", "nebius-h100-ubuntu"),
        (Source::Nebius, "nvidia-h200", "nebius-h200-ubuntu"),
        (Source::Vultr, "nvidia-l40s", "vultr-l40s-ubuntu"),
        (Source::Existing, "nvidia-h100", "existing-any-any"),
        (Source::Aks, "nvidia-a100", "aks-any-ubuntu"),
    ] {
        assert_eq!(
            recipes::resolve(source, &[accelerator.to_string()]).name,
            want
        );
    }
    // Mixed accelerators no single recipe covers fall back to the cloud's general one.
    assert_eq!(
        recipes::resolve(Source::Eks, &["nvidia-h200".into(), "nvidia-l4".into()]).name,
        "eks-any-ubuntu"
    );
}

#[test]
fn gke_recipes_point_the_dra_driver_at_the_cos_driver_root() {
    let r = recipes::resolve(Source::Gke, &["nvidia-l4".into()]);
    let dra = recipes::by_name(r)["nvidia-dra-driver-gpu"];
    assert_eq!(
        dra.values["nvidiaDriverRoot"],
        "/home/kubernetes/bin/nvidia"
    );
    assert_eq!(
        dra.values["gpuResourcesEnabledOverride"], true,
        "common values are kept"
    );
}

/// An object that sets every property the schema declares.
fn maximal(schema: &serde_json::Value) -> serde_json::Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match schema["type"].as_str() {
        Some("object") => {
            let mut map = serde_json::Map::new();
            for (name, child) in schema["properties"].as_object().into_iter().flatten() {
                map.insert(name.clone(), maximal(child));
            }
            serde_json::Value::Object(map)
        }
        Some("array") => serde_json::Value::Array(vec![maximal(&schema["items"])]),
        Some("integer") => 1.into(),
        Some("boolean") => true.into(),
        _ => "x".into(),
    }
}

fn keys(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                keys(v, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

fn typed_spec<T: serde::de::DeserializeOwned + serde::Serialize>(kind: &str) -> serde_json::Value {
    let info = crds::KINDS.iter().find(|k| k.kind == kind).expect("a kind");
    let spec = maximal(&info.schema()["properties"]["spec"]);
    let typed: T = serde_json::from_value(spec).expect("typed spec");
    serde_json::to_value(typed).expect("serializes")
}

#[test]
fn no_cluster_spec_carries_a_version_field() {
    use modelplane_api::types::*;
    let specs = [
        (
            "InferenceCluster",
            typed_spec::<InferenceClusterSpec>("InferenceCluster"),
        ),
        (
            "ServingStack",
            typed_spec::<ServingStackSpec>("ServingStack"),
        ),
        ("EKSCluster", typed_spec::<EksClusterSpec>("EKSCluster")),
        ("GKECluster", typed_spec::<GkeClusterSpec>("GKECluster")),
        ("AKSCluster", typed_spec::<AksClusterSpec>("AKSCluster")),
        (
            "NebiusCluster",
            typed_spec::<NebiusClusterSpec>("NebiusCluster"),
        ),
        (
            "VultrCluster",
            typed_spec::<VultrClusterSpec>("VultrCluster"),
        ),
    ];
    for (kind, spec) in specs {
        let mut all = Vec::new();
        keys(&spec, &mut all);
        assert!(!all.is_empty());
        let versions: Vec<&String> = all
            .iter()
            .filter(|k| k.to_ascii_lowercase().contains("version"))
            .collect();
        assert!(versions.is_empty(), "{kind} spec carries {versions:?}");
    }
}
