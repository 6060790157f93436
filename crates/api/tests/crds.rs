//! The generated CRDs: structural, self-consistent, and pinned by a golden file.

use modelplane_api::crds::{self, KINDS};
use modelplane_api::validation::crd_schema::structural_violations;

#[test]
fn every_crd_schema_is_structural_and_its_defaults_validate() {
    for info in KINDS {
        let violations = structural_violations(&info.schema());
        assert!(violations.is_empty(), "{}: {violations:#?}", info.kind);
    }
}

#[test]
fn there_are_fourteen_kinds_with_unique_names_and_short_names() {
    assert_eq!(KINDS.len(), 14);
    let mut names: Vec<String> = KINDS.iter().map(|k| k.crd_name()).collect();
    let mut shorts: Vec<&str> = KINDS
        .iter()
        .flat_map(|k| k.short_names.iter().copied())
        .collect();
    names.sort();
    names.dedup();
    shorts.sort();
    shorts.dedup();
    assert_eq!(names.len(), 14);
    assert_eq!(shorts.len(), 14);
}

#[test]
fn stack_is_an_immutable_enum_defaulting_to_standard() {
    let schema = crds::find("modelplane.ai/v1alpha1", "InferenceCluster")
        .expect("InferenceCluster")
        .schema();
    let stack = &schema["properties"]["spec"]["properties"]["stack"];
    assert_eq!(stack["enum"], serde_json::json!(["Standard", "Dynamo"]));
    assert_eq!(stack["default"], "Standard");
    assert_eq!(
        stack["x-kubernetes-validations"][0]["rule"],
        "self == oldSelf"
    );
}

#[test]
fn only_model_deployment_has_a_scale_subresource() {
    for crd in crds::all_crds() {
        let scale = &crd["spec"]["versions"][0]["subresources"]["scale"];
        let is_md = crd["spec"]["names"]["kind"] == "ModelDeployment";
        assert_eq!(!scale.is_null(), is_md, "{}", crd["metadata"]["name"]);
        if is_md {
            assert_eq!(scale["specReplicasPath"], ".spec.replicas");
            assert_eq!(scale["statusReplicasPath"], ".status.replicas.total");
        }
    }
}

#[test]
fn crds_yaml_matches_the_golden_file() {
    let yaml = crds::render_yaml().expect("CRDs serialize");
    insta::with_settings!({
        snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/crds"),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("crds", yaml);
    });
}

#[test]
fn crds_yaml_parses_back_to_the_same_objects() {
    let yaml = crds::render_yaml().expect("CRDs serialize");
    let docs = modelplane_api::validation::yaml::parse_documents(&yaml).expect("valid YAML");
    let parsed: Vec<serde_json::Value> = docs.into_iter().map(|d| d.value).collect();
    assert_eq!(parsed, crds::all_crds());
}
