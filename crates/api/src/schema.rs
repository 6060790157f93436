//! A small builder for structural OpenAPI v3 schemas, the dialect of
//! `apiextensions.k8s.io/v1` CRDs.
//!
//! The CRD schemas of the `crds` module are written with it: each call adds one
//! keyword, in the order a reader expects (`description`, `type`, value
//! constraints, `properties`, `required`, Kubernetes extensions), so the
//! generated YAML is stable and reviewable.

use serde_json::{Map, Value, json};

/// One schema node under construction.
#[derive(Clone, Debug, Default)]
pub struct Schema(Map<String, Value>);

/// Builds a node of the given OpenAPI type.
fn typed(ty: &str) -> Schema {
    let mut map = Map::new();
    map.insert("type".into(), Value::String(ty.into()));
    Schema(map)
}

/// An object with declared properties (add them with [`Schema::prop`]).
pub fn object() -> Schema {
    typed("object")
}

/// A string.
pub fn string() -> Schema {
    typed("string")
}

/// A string of `min..=max` characters.
pub fn string_len(min: u64, max: u64) -> Schema {
    string().min_len(min).max_len(max)
}

/// A non-empty string of at most `max` characters.
pub fn name_len(max: u64) -> Schema {
    string_len(1, max)
}

/// A string restricted to the given values.
pub fn one_of(values: &[&str]) -> Schema {
    string().enumerated(values)
}

/// A 64-bit integer (no `format`, as the Kubernetes wire default).
pub fn integer() -> Schema {
    typed("integer")
}

/// An integer in `min..=max`.
pub fn int_range(min: i64, max: i64) -> Schema {
    integer().minimum(min).maximum(max)
}

/// A boolean.
pub fn boolean() -> Schema {
    typed("boolean")
}

/// A list of `items`.
pub fn array(items: Schema) -> Schema {
    let mut s = typed("array");
    s.0.insert("items".into(), items.into_value());
    s
}

/// A string-keyed map of `values`.
pub fn map_of(values: Schema) -> Schema {
    let mut s = typed("object");
    s.0.insert("additionalProperties".into(), values.into_value());
    s
}

/// A map of strings to strings (labels, `matchLabels`).
pub fn string_map() -> Schema {
    map_of(string())
}

impl Schema {
    /// Sets `description`, shown by `kubectl explain`. It always comes first.
    pub fn doc(mut self, text: &str) -> Self {
        let mut map = Map::new();
        map.insert("description".into(), Value::String(text.into()));
        map.extend(std::mem::take(&mut self.0));
        self.0 = map;
        self
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.0.insert(key.into(), value);
        self
    }

    /// Sets the structural `default`, filled in when the field is absent
    /// inside an object that exists.
    pub fn default(self, value: Value) -> Self {
        self.set("default", value)
    }

    /// Restricts a string to the given values.
    pub fn enumerated(self, values: &[&str]) -> Self {
        self.set("enum", json!(values))
    }

    /// `minLength`.
    pub fn min_len(self, n: u64) -> Self {
        self.set("minLength", json!(n))
    }

    /// `maxLength`.
    pub fn max_len(self, n: u64) -> Self {
        self.set("maxLength", json!(n))
    }

    /// `pattern` (RE2 syntax).
    pub fn pattern(self, re: &str) -> Self {
        self.set("pattern", json!(re))
    }

    /// `minimum`.
    pub fn minimum(self, n: i64) -> Self {
        self.set("minimum", json!(n))
    }

    /// `maximum`.
    pub fn maximum(self, n: i64) -> Self {
        self.set("maximum", json!(n))
    }

    /// `format` (e.g. `int64`, `date-time`).
    pub fn format(self, f: &str) -> Self {
        self.set("format", json!(f))
    }

    /// `minItems`.
    pub fn min_items(self, n: u64) -> Self {
        self.set("minItems", json!(n))
    }

    /// `maxItems`.
    pub fn max_items(self, n: u64) -> Self {
        self.set("maxItems", json!(n))
    }

    /// `minProperties`.
    pub fn min_props(self, n: u64) -> Self {
        self.set("minProperties", json!(n))
    }

    /// `maxProperties`.
    pub fn max_props(self, n: u64) -> Self {
        self.set("maxProperties", json!(n))
    }

    /// Adds an optional property.
    pub fn prop(mut self, name: &str, schema: Schema) -> Self {
        let props = self
            .0
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(props) = props {
            props.insert(name.into(), schema.into_value());
        }
        self
    }

    /// Adds a required property.
    pub fn req(self, name: &str, schema: Schema) -> Self {
        self.prop(name, schema).require(name)
    }

    /// Marks an already declared property as required.
    pub fn require(mut self, name: &str) -> Self {
        let required = self
            .0
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(names) = required {
            names.push(Value::String(name.into()));
        }
        self
    }

    /// A list whose items are unique by `keys` (server-side apply merges by them).
    pub fn list_map(self, keys: &[&str]) -> Self {
        self.set("x-kubernetes-list-type", json!("map"))
            .set("x-kubernetes-list-map-keys", json!(keys))
    }

    /// A list replaced as a whole on merge.
    pub fn atomic(self) -> Self {
        self.set("x-kubernetes-list-type", json!("atomic"))
    }

    /// Keeps fields the schema does not declare (no pruning below this node).
    pub fn preserve_unknown(self) -> Self {
        self.set("x-kubernetes-preserve-unknown-fields", json!(true))
    }

    /// Adds an `x-kubernetes-validations` CEL rule with its message.
    pub fn rule(mut self, rule: &str, message: &str) -> Self {
        let rules = self
            .0
            .entry("x-kubernetes-validations")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(rules) = rules {
            rules.push(json!({ "rule": rule, "message": message }));
        }
        self
    }

    /// The schema as JSON, ready to embed in a CRD.
    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_emits_keywords_in_call_order_with_description_first() {
        let s = object()
            .req("name", name_len(63))
            .prop("count", int_range(1, 64).default(json!(1)))
            .rule("self.count > 0", "count must be positive")
            .doc("A thing.");
        let text = serde_json::to_string(&s.into_value()).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"description":"A thing.","type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":63},"count":{"type":"integer","minimum":1,"maximum":64,"default":1}},"required":["name"],"x-kubernetes-validations":[{"rule":"self.count > 0","message":"count must be positive"}]}"#
        );
    }
}
