//! Manifest validation shared by `modelplane validate`, the API server's
//! admission and the controllers' read path.
//!
//! Data flow: [`yaml::parse_documents`] turns text into located documents;
//! [`structural::admit`] prunes, defaults and checks each against its kind's
//! schema; `modelplane-cel` then runs the schema's CEL rules; [`warnings`]
//! adds the advisories that never reject a manifest.

pub mod crd_schema;
pub mod structural;
pub mod yaml;

use serde_json::Value;

/// An advisory about an accepted manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// Field path the warning is about.
    pub path: String,
    /// What to know or do.
    pub message: String,
}

/// The message for a removed version field (DECISIONS §A7).
pub const REMOVED_VERSION: &str = "ignored: versions come from the release's recipe";

/// Advisories for an object of `kind`: removed version fields (§A7) and a
/// multi-node engine without a model cache (§B D5).
pub fn warnings(kind: &str, object: &Value) -> Vec<Warning> {
    let spec = &object["spec"];
    let mut out = Vec::new();
    let mut removed = |path: String| {
        out.push(Warning {
            path,
            message: REMOVED_VERSION.to_string(),
        })
    };
    match kind {
        "InferenceCluster" => {
            for cloud in ["gke", "eks", "aks", "nebius", "vultr"] {
                if spec["cluster"][cloud].get("kubernetesVersion").is_some() {
                    removed(format!("spec.cluster.{cloud}.kubernetesVersion"));
                }
            }
        }
        "EKSCluster" | "GKECluster" | "AKSCluster" | "NebiusCluster" | "VultrCluster"
            if spec.get("kubernetesVersion").is_some() =>
        {
            removed("spec.kubernetesVersion".to_string())
        }
        "ServingStack" if spec.get("versions").is_some() => removed("spec.versions".to_string()),
        "ModelDeployment" => out.extend(uncached_multi_node_engines(&spec["template"]["spec"])),
        _ => {}
    }
    out
}

fn uncached_multi_node_engines(template_spec: &Value) -> Vec<Warning> {
    if template_spec.get("modelCacheRef").is_some() {
        return Vec::new();
    }
    let engines = template_spec["engines"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    engines
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            e["members"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "Leader" || m["role"] == "Worker"))
        })
        .map(|(i, _)| Warning {
            path: format!("spec.template.spec.engines[{i}]"),
            message: "multi-node engine without spec.template.spec.modelCacheRef: every node of the gang downloads the weights itself; add a ModelCache".to_string(),
        })
        .collect()
}
