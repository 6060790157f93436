//! Admission checks on a CRD's own schema: the structural-schema rules a
//! Kubernetes API server enforces before it accepts a CRD, and that every
//! `default` is valid under its own schema.
//!
//! `modelplane crds` output is tested with it, and the embedded API server
//! uses it to admit CRDs.

use serde_json::Value;

use super::structural::{admit, join};

/// Keywords allowed in a structural schema node.
const KNOWN: &[&str] = &[
    "description",
    "type",
    "format",
    "title",
    "default",
    "enum",
    "nullable",
    "maximum",
    "minimum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "multipleOf",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxProperties",
    "minProperties",
    "required",
    "items",
    "properties",
    "additionalProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "example",
    "externalDocs",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

/// Every violation of the structural-schema rules in `schema` (the
/// `openAPIV3Schema` of a CRD version), as `path: problem`.
pub fn structural_violations(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check_node(schema, "", true, &mut out);
    if let Some(meta) = schema.pointer("/properties/metadata") {
        let allowed_meta = ["name", "generateName"];
        if let Some(props) = meta.get("properties").and_then(Value::as_object) {
            for name in props.keys() {
                if !allowed_meta.contains(&name.as_str()) {
                    out.push(format!(
                        "metadata.{name}: only name and generateName may be constrained at the root"
                    ));
                }
            }
        }
    }
    out
}

fn check_node(node: &Value, path: &str, root: bool, out: &mut Vec<String>) {
    let Some(map) = node.as_object() else {
        out.push(format!("{path}: a schema must be an object"));
        return;
    };
    let at = if path.is_empty() { "<root>" } else { path };
    for key in map.keys() {
        if !KNOWN.contains(&key.as_str()) {
            out.push(format!("{at}: {key} is not allowed in a structural schema"));
        }
    }
    let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let ty = map.get("type").and_then(Value::as_str);
    if ty.is_none() && !int_or_string && !preserve {
        out.push(format!("{at}: type must be specified"));
    }
    if root && ty != Some("object") {
        out.push(format!("{at}: the root must be of type object"));
    }
    if map.contains_key("properties") && map.contains_key("additionalProperties") {
        out.push(format!(
            "{at}: properties and additionalProperties are mutually exclusive"
        ));
    }
    if ty == Some("array") && !map.contains_key("items") {
        out.push(format!("{at}: items must be specified for arrays"));
    }
    for junctor in ["allOf", "anyOf", "oneOf", "not"] {
        match map.get(junctor) {
            Some(Value::Array(branches)) => {
                for branch in branches {
                    check_value_validation(branch, &format!("{at}.{junctor}"), out);
                }
            }
            Some(branch) => check_value_validation(branch, &format!("{at}.{junctor}"), out),
            None => {}
        }
    }
    check_list_type(map, at, out);
    if let Some(default) = map.get("default") {
        let mut value = default.clone();
        let errors = admit(node, &mut value, path);
        if !errors.is_empty() || &value != default {
            out.push(format!(
                "{at}: default {default} is not valid under its own schema (or is not fully defaulted)"
            ));
        }
    }
    if let Some(rules) = map
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in rules {
            if rule
                .get("rule")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                out.push(format!("{at}: a validation rule needs rule text"));
            }
        }
    }
    if let Some(props) = map.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            check_node(child, &join(path, name), false, out);
        }
    }
    if let Some(additional) = map.get("additionalProperties").filter(|a| a.is_object()) {
        check_node(additional, &format!("{path}[*]"), false, out);
    }
    if let Some(items) = map.get("items") {
        check_node(items, &format!("{path}[*]"), false, out);
    }
}

/// Inside `allOf`/`anyOf`/`oneOf`/`not` only value validations may appear.
fn check_value_validation(node: &Value, at: &str, out: &mut Vec<String>) {
    let Some(map) = node.as_object() else { return };
    for forbidden in [
        "type",
        "default",
        "description",
        "nullable",
        "additionalProperties",
    ] {
        if map.contains_key(forbidden) {
            out.push(format!("{at}: {forbidden} is not allowed inside a junctor"));
        }
    }
    for nested in ["properties", "items", "allOf", "anyOf", "oneOf", "not"] {
        match map.get(nested) {
            Some(Value::Object(children)) if nested == "properties" => {
                for child in children.values() {
                    check_value_validation(child, at, out);
                }
            }
            Some(Value::Array(children)) => {
                for child in children {
                    check_value_validation(child, at, out);
                }
            }
            Some(child) => check_value_validation(child, at, out),
            None => {}
        }
    }
}

/// `x-kubernetes-list-type: map` needs object items whose keys are scalar
/// properties that are required or defaulted.
fn check_list_type(map: &serde_json::Map<String, Value>, at: &str, out: &mut Vec<String>) {
    let Some(list_type) = map.get("x-kubernetes-list-type").and_then(Value::as_str) else {
        if map.contains_key("x-kubernetes-list-map-keys") {
            out.push(format!(
                "{at}: list-map-keys need x-kubernetes-list-type: map"
            ));
        }
        return;
    };
    if map.get("type").and_then(Value::as_str) != Some("array") {
        out.push(format!("{at}: x-kubernetes-list-type is only for arrays"));
    }
    if !matches!(list_type, "atomic" | "set" | "map") {
        out.push(format!("{at}: unknown list type {list_type}"));
    }
    if list_type != "map" {
        return;
    }
    let items = map.get("items");
    let keys = map
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if keys.is_empty() {
        out.push(format!("{at}: a map list needs x-kubernetes-list-map-keys"));
    }
    let required: Vec<&str> = items
        .and_then(|i| i.get("required"))
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for key in keys.iter().filter_map(Value::as_str) {
        let prop = items.and_then(|i| i.pointer(&format!("/properties/{key}")));
        match prop {
            None => out.push(format!(
                "{at}: list-map key {key} is not a property of the items"
            )),
            Some(p) => {
                let scalar = matches!(
                    p.get("type").and_then(Value::as_str),
                    Some("string" | "integer" | "number" | "boolean")
                );
                if !scalar {
                    out.push(format!("{at}: list-map key {key} must be a scalar"));
                }
                if !required.contains(&key) && p.get("default").is_none() {
                    out.push(format!(
                        "{at}: list-map key {key} must be required or have a default"
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn non_structural_schemas_are_reported() {
        let schema = json!({
            "type": "object",
            "properties": {
                "untyped": {"description": "no type"},
                "both": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
                "list": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                         "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
                "bad_default": {"type": "integer", "minimum": 1, "default": 0},
                "ref": {"$ref": "#/definitions/x", "type": "string"}
            }
        });
        let v = structural_violations(&schema);
        assert!(
            v.iter()
                .any(|m| m.starts_with("untyped: type must be specified")),
            "{v:?}"
        );
        assert!(v.iter().any(|m| m.contains("mutually exclusive")), "{v:?}");
        assert!(
            v.iter()
                .any(|m| m.contains("must be required or have a default")),
            "{v:?}"
        );
        assert!(
            v.iter().any(|m| m.starts_with("bad_default: default 0")),
            "{v:?}"
        );
        assert!(v.iter().any(|m| m.contains("$ref is not allowed")), "{v:?}");
        assert_eq!(v.len(), 5, "{v:?}");
    }
}
