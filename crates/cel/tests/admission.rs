//! Admission of Modelplane objects through the CRDs' CEL rules.

use modelplane_api::crds::KINDS;
use modelplane_cel::{Admission, Review};
use serde_json::{Value, json};

fn rule_compile_errors(node: &kube_cel::CompiledSchema, path: &str, out: &mut Vec<String>) {
    for e in node.compilation_errors() {
        out.push(format!("{path}: {e}"));
    }
    for (name, child) in &node.properties {
        rule_compile_errors(child, &format!("{path}.{name}"), out);
    }
    if let Some(items) = &node.items {
        rule_compile_errors(items, &format!("{path}[*]"), out);
    }
    if let Some(values) = &node.additional_properties {
        rule_compile_errors(values, &format!("{path}.*"), out);
    }
}

#[test]
fn every_cel_rule_of_every_kind_compiles() {
    let mut errors = Vec::new();
    let mut rules = 0;
    for info in KINDS {
        let schema = info.schema();
        rules += count_rules(&schema);
        rule_compile_errors(&kube_cel::compile_schema(&schema), info.kind, &mut errors);
    }
    assert!(errors.is_empty(), "{errors:#?}");
    assert!(rules >= 50, "only {rules} rules");
}

fn count_rules(node: &Value) -> usize {
    match node {
        Value::Object(map) => {
            map.get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
                + map.values().map(count_rules).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(count_rules).sum(),
        _ => 0,
    }
}

fn errors_of(review: Review) -> Vec<String> {
    match review {
        Review::Checked { errors, .. } => errors
            .into_iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect(),
        Review::Skipped { kind, .. } => panic!("{kind} skipped"),
    }
}

fn cluster(stack: Option<&str>) -> Value {
    let mut spec =
        json!({"cluster": {"source": "Existing", "existing": {"secretRef": {"name": "kc"}}}});
    if let Some(stack) = stack {
        spec["stack"] = json!(stack);
    }
    json!({"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
           "metadata": {"name": "byo"}, "spec": spec})
}

#[test]
fn stack_change_is_rejected_only_on_update() {
    let admission = Admission::new();
    assert!(errors_of(admission.review(cluster(Some("Dynamo")), None)).is_empty());
    let old = cluster(None);
    assert_eq!(
        errors_of(admission.review(cluster(Some("Dynamo")), Some(&old))),
        vec![
            "spec.stack: Invalid value: \"string\": stack is immutable; create a new InferenceCluster to change stacks"
        ]
    );
    // Setting the default explicitly is no change.
    assert!(errors_of(admission.review(cluster(Some("Standard")), Some(&old))).is_empty());
}

#[test]
fn defaults_are_applied_before_rules_run() {
    // `claim` defaults to DRA, so the DRA rule requires deviceClassName.
    let class = json!({"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClass",
        "metadata": {"name": "l4"},
        "spec": {"devices": [{"name": "gpu", "driver": "gpu.nvidia.com"}]}});
    let admission = Admission::new();
    assert_eq!(
        errors_of(admission.review(class, None)),
        vec![
            "spec.devices[0]: Invalid value: \"object\": deviceClassName is required when claim is DRA"
        ]
    );
}

#[test]
fn admitted_objects_carry_their_defaults() {
    let admission = Admission::new();
    let Review::Checked { object, errors, .. } = admission.review(cluster(None), None) else {
        panic!("checked");
    };
    assert!(errors.is_empty());
    assert_eq!(object["spec"]["stack"], "Standard");
    assert_eq!(
        object["spec"]["cluster"]["existing"]["secretRef"]["key"],
        "kubeconfig"
    );
    assert_eq!(object["metadata"]["name"], "byo");
}

#[test]
fn other_kinds_are_skipped() {
    let admission = Admission::new();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
    assert!(matches!(
        admission.review(secret, None),
        Review::Skipped { .. }
    ));
}
