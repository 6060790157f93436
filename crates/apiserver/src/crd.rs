//! CustomResourceDefinitions (`apiserver.md` §4.1): a stored CRD serves its
//! kind at once (Established), its served versions join discovery, and
//! deleting it deletes its objects. Modelplane's own kinds are validated,
//! pruned and defaulted by `modelplane-cel`'s admission, CEL rules included.

use serde_json::{Value, json};

use crate::resources::{Column, Resource, ScalePaths};

fn columns(value: &Value) -> Vec<Column> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some(Column {
                name: c["name"].as_str()?.to_string(),
                type_: c["type"].as_str().unwrap_or("string").to_string(),
                json_path: c["jsonPath"].as_str()?.to_string(),
                description: c["description"].as_str().unwrap_or_default().to_string(),
                priority: c["priority"].as_i64().unwrap_or(0),
            })
        })
        .collect()
}

/// The resources a CRD serves: one per served version.
pub fn resources(crd: &Value) -> Vec<Resource> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let (Some(group), Some(plural), Some(kind)) = (
        spec["group"].as_str(),
        names["plural"].as_str(),
        names["kind"].as_str(),
    ) else {
        return Vec::new();
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"] != json!(false))
        .filter_map(|v| {
            Some(Resource {
                group: group.to_string(),
                version: v["name"].as_str()?.to_string(),
                kind: kind.to_string(),
                plural: plural.to_string(),
                singular: names["singular"]
                    .as_str()
                    .map_or_else(|| kind.to_ascii_lowercase(), str::to_string),
                namespaced: spec["scope"].as_str() != Some("Cluster"),
                short_names: strings(&names["shortNames"]),
                categories: strings(&names["categories"]),
                status: v["subresources"].get("status").is_some(),
                columns: columns(&v["additionalPrinterColumns"]),
                schema: v["schema"]
                    .get("openAPIV3Schema")
                    .cloned()
                    .map(std::sync::Arc::new),
                scale: v["subresources"].get("scale").map(|scale| ScalePaths {
                    spec_replicas: scale["specReplicasPath"]
                        .as_str()
                        .unwrap_or(".spec.replicas")
                        .to_string(),
                    status_replicas: scale["statusReplicasPath"]
                        .as_str()
                        .unwrap_or(".status.replicas")
                        .to_string(),
                    label_selector: scale["labelSelectorPath"].as_str().map(str::to_string),
                }),
            })
        })
        .collect()
}

/// Marks a new CRD accepted and established, as the API server does at once
/// when its names are free.
pub fn accept(crd: &mut Value, now: &str) {
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == json!(true))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    let condition = |type_: &str, reason: &str, message: &str| json!({ "type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now });
    crd["status"] = json!({
        "acceptedNames": crd["spec"]["names"].clone(),
        "storedVersions": stored,
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_modelplane_crd_serves_its_kind() {
        let crds = modelplane_api::crds::all_crds();
        assert_eq!(crds.len(), 14);
        for crd in &crds {
            let value = serde_json::to_value(crd).expect("json");
            let served = resources(&value);
            assert!(!served.is_empty(), "{}", value["metadata"]["name"]);
            let md = served.iter().find(|r| r.kind == "ModelDeployment");
            if let Some(md) = md {
                assert!(md.namespaced && md.status);
                assert_eq!(md.api_version(), "modelplane.ai/v1alpha1");
            }
        }
    }

    #[test]
    fn acceptance_establishes_the_crd() {
        let mut crd = serde_json::to_value(&modelplane_api::crds::all_crds()[0]).expect("json");
        accept(&mut crd, "2026-11-30T09:00:00Z");
        let conditions = crd["status"]["conditions"].as_array().expect("conditions");
        assert!(
            conditions
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        );
        assert_eq!(crd["status"]["acceptedNames"], crd["spec"]["names"]);
    }
}
