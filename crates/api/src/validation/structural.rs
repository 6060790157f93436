//! What a Kubernetes API server does to a custom resource before its CEL
//! rules run: prune (here: report) undeclared fields, drop `null`s, fill
//! structural defaults, and check the OpenAPI value constraints.
//!
//! Data flow: [`admit`] walks the schema and the object together, mutating the
//! object in place (pruning and defaulting) and collecting one [`FieldError`]
//! per violation, worded as the API server words its `422 Invalid` causes.
//! It works on any structural schema, so the embedded API server uses it for
//! every CRD, not only Modelplane's.

use std::fmt;

use serde_json::{Map, Value};

/// The class of a field error, as Kubernetes' `field.ErrorType`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// A field the schema does not declare (strict field validation).
    Unknown,
    /// A required field is missing.
    Required,
    /// A value breaks a constraint; `value` is shown as the API server shows it.
    Invalid {
        /// The offending value, rendered (`"text"`, `3`, `"object"`).
        value: String,
    },
    /// A value of the wrong JSON type; CEL rules do not run past it.
    WrongType {
        /// The value's type, rendered (`"string"`).
        value: String,
    },
    /// A value outside an enum.
    NotSupported {
        /// The offending value, rendered.
        value: String,
        /// The allowed values, rendered.
        supported: Vec<String>,
    },
    /// A string longer than `maxLength`.
    TooLong {
        /// The limit.
        max: u64,
    },
    /// A list or map with too many entries.
    TooMany {
        /// Entries present.
        actual: usize,
        /// The limit.
        max: u64,
    },
    /// A list-map key that occurs twice.
    Duplicate {
        /// The duplicated key, rendered.
        value: String,
    },
}

/// One violation at one field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Field path, e.g. `spec.template.spec.engines[0].name`.
    pub path: String,
    /// What kind of violation.
    pub error: ErrorType,
    /// The constraint's explanation, when the type carries one.
    pub detail: String,
}

impl fmt::Display for FieldError {
    /// The part of an API server cause after the field path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            ErrorType::Unknown => write!(f, "unknown field \"{}\"", self.path),
            ErrorType::Required => f.write_str("Required value"),
            ErrorType::Invalid { value } | ErrorType::WrongType { value } => {
                write!(f, "Invalid value: {value}: {}", self.detail)
            }
            ErrorType::NotSupported { value, supported } => write!(
                f,
                "Unsupported value: {value}: supported values: {}",
                supported.join(", ")
            ),
            ErrorType::TooLong { max } => write!(f, "Too long: may not be more than {max} bytes"),
            ErrorType::TooMany { actual, max } => {
                write!(f, "Too many: {actual}: must have at most {max} items")
            }
            ErrorType::Duplicate { value } => write!(f, "Duplicate value: {value}"),
        }
    }
}

/// Renders a value the way the API server quotes it in messages.
pub fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "\"null\"".into(),
        Value::Bool(_) | Value::Number(_) => value.to_string(),
        Value::Array(_) => "\"array\"".into(),
        Value::Object(_) => "\"object\"".into(),
    }
}

/// The JSON type name of a value, as OpenAPI names it.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Appends a property name to a field path.
pub fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// Prunes, defaults and validates `value` against `schema`, which is the
/// node at `path`. Returns every violation; the value is left pruned and
/// defaulted either way.
pub fn admit(schema: &Value, value: &mut Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    walk(schema, value, path, &mut errors);
    errors
}

fn invalid(path: &str, value: &Value, detail: String) -> FieldError {
    FieldError {
        path: path.to_string(),
        error: ErrorType::Invalid {
            value: render_value(value),
        },
        detail,
    }
}

fn walk(schema: &Value, value: &mut Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(schema) = schema.as_object() else {
        return;
    };
    if !check_type(schema, value, path, errors) {
        return;
    }
    match value {
        Value::Object(map) => walk_object(schema, map, path, errors),
        Value::Array(items) => walk_array(schema, items, path, errors),
        scalar => check_scalar(schema, scalar, path, errors),
    }
}

/// Checks `type`; returns whether the value may be walked further.
fn check_type(
    schema: &Map<String, Value>,
    value: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> bool {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return matches!(type_name(value), "integer" | "string");
    }
    let Some(expected) = schema.get("type").and_then(Value::as_str) else {
        return true;
    };
    let actual = type_name(value);
    let ok = actual == expected || (expected == "number" && actual == "integer");
    if !ok {
        let shown = if value.is_null() {
            "\"null\"".to_string()
        } else {
            format!("{actual:?}")
        };
        errors.push(FieldError {
            path: path.to_string(),
            error: ErrorType::WrongType {
                value: shown.clone(),
            },
            detail: format!("{path} in body must be of type {expected}: {shown}"),
        });
    }
    ok
}

fn walk_object(
    schema: &Map<String, Value>,
    map: &mut Map<String, Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));

    // Prune: undeclared fields go (reported), nulls of non-nullable fields go (silently).
    if let Some(props) = props {
        map.retain(|name, v| {
            let Some(field) = props.get(name) else {
                if !preserve && additional.is_none() {
                    errors.push(FieldError {
                        path: join(path, name),
                        error: ErrorType::Unknown,
                        detail: String::new(),
                    });
                    return false;
                }
                return true;
            };
            !(v.is_null() && field.get("nullable") != Some(&Value::Bool(true)))
        });
        // Default: fill absent properties, in schema order.
        for (name, field) in props {
            if !map.contains_key(name)
                && let Some(default) = field.get("default")
            {
                map.insert(name.clone(), default.clone());
            }
        }
        for (name, field) in props {
            if let Some(v) = map.get_mut(name) {
                walk(field, v, &join(path, name), errors);
            }
        }
    } else if additional.is_none() && !preserve && schema.contains_key("type") {
        for name in map.keys() {
            errors.push(FieldError {
                path: join(path, name),
                error: ErrorType::Unknown,
                detail: String::new(),
            });
        }
        map.clear();
    }
    if let Some(additional) = additional {
        let declared = |name: &str| props.is_some_and(|p| p.contains_key(name));
        for (name, v) in map.iter_mut() {
            if !declared(name) {
                walk(additional, v, &join(path, name), errors);
            }
        }
    }

    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(name) {
                errors.push(FieldError {
                    path: join(path, name),
                    error: ErrorType::Required,
                    detail: String::new(),
                });
            }
        }
    }
    let count = map.len();
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && (count as u64) < min
    {
        errors.push(invalid(
            path,
            &Value::from(count),
            format!("{path} in body should have at least {min} properties"),
        ));
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && count as u64 > max
    {
        errors.push(FieldError {
            path: path.to_string(),
            error: ErrorType::TooMany { actual: count, max },
            detail: String::new(),
        });
    }
}

fn walk_array(
    schema: &Map<String, Value>,
    items: &mut [Value],
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter_mut().enumerate() {
            walk(item_schema, item, &format!("{path}[{i}]"), errors);
        }
    }
    let count = items.len();
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (count as u64) < min
    {
        errors.push(invalid(
            path,
            &Value::from(count),
            format!("{path} in body should have at least {min} items"),
        ));
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && count as u64 > max
    {
        errors.push(FieldError {
            path: path.to_string(),
            error: ErrorType::TooMany { actual: count, max },
            detail: String::new(),
        });
    }
    check_list_type(schema, items, path, errors);
}

/// `x-kubernetes-list-type`: `map` items are unique by their keys, `set` items
/// are unique.
fn check_list_type(
    schema: &Map<String, Value>,
    items: &[Value],
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let identity = |item: &Value| -> Value {
        match list_type {
            Some("map") => Value::Object(
                keys.iter()
                    .filter_map(|k| item.get(*k).map(|v| ((*k).to_string(), v.clone())))
                    .collect(),
            ),
            _ => item.clone(),
        }
    };
    if !matches!(list_type, Some("map") | Some("set")) {
        return;
    }
    let mut seen: Vec<Value> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let id = identity(item);
        if seen.contains(&id) {
            errors.push(FieldError {
                path: format!("{path}[{i}]"),
                error: ErrorType::Duplicate {
                    value: id.to_string(),
                },
                detail: String::new(),
            });
        } else {
            seen.push(id);
        }
    }
}

fn check_scalar(
    schema: &Map<String, Value>,
    value: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        errors.push(FieldError {
            path: path.to_string(),
            error: ErrorType::NotSupported {
                value: render_value(value),
                supported: allowed.iter().map(render_value).collect(),
            },
            detail: String::new(),
        });
    }
    match value {
        Value::Number(n) => check_number(schema, n, value, path, errors),
        Value::String(s) => check_string(schema, s, value, path, errors),
        _ => {}
    }
}

fn check_number(
    schema: &Map<String, Value>,
    n: &serde_json::Number,
    value: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(x) = n.as_f64() else { return };
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && x < min
    {
        errors.push(invalid(
            path,
            value,
            format!("{path} in body should be greater than or equal to {min}"),
        ));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && x > max
    {
        errors.push(invalid(
            path,
            value,
            format!("{path} in body should be less than or equal to {max}"),
        ));
    }
}

fn check_string(
    schema: &Map<String, Value>,
    s: &str,
    value: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let len = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        errors.push(invalid(
            path,
            value,
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        errors.push(FieldError {
            path: path.to_string(),
            error: ErrorType::TooLong { max },
            detail: String::new(),
        });
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        let matches = regex::Regex::new(pattern).map(|re| re.is_match(s));
        if matches != Ok(true) {
            errors.push(invalid(
                path,
                value,
                format!("{path} in body should match '{pattern}'"),
            ));
        }
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time") && !looks_like_rfc3339(s) {
        errors.push(invalid(
            path,
            value,
            format!(
                "{path} in body must be of type date-time: {}",
                render_value(value)
            ),
        ));
    }
}

/// A light RFC 3339 check: `YYYY-MM-DDTHH:MM:SS` followed by an optional
/// fraction and a zone.
fn looks_like_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b't' | b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && matches!(b[b.len() - 1], b'Z' | b'z' | b'0'..=b'9')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schema::*;

    fn messages(schema: Schema, mut value: Value) -> (Value, Vec<String>) {
        let errors = admit(&schema.into_value(), &mut value, "spec");
        let lines = errors.iter().map(|e| format!("{}: {e}", e.path)).collect();
        (value, lines)
    }

    #[test]
    fn unknown_fields_are_reported_and_pruned() {
        let (value, errs) = messages(object().prop("a", string()), json!({"a": "x", "b": 1}));
        assert_eq!(value, json!({"a": "x"}));
        assert_eq!(errs, vec![r#"spec.b: unknown field "spec.b""#]);
    }

    #[test]
    fn defaults_fill_only_inside_existing_objects() {
        let schema = object().prop("inner", object().prop("n", integer().default(json!(1))));
        let (value, errs) = messages(schema.clone(), json!({}));
        assert_eq!(value, json!({}));
        assert!(errs.is_empty());
        let (value, _) = messages(schema, json!({"inner": {}}));
        assert_eq!(value, json!({"inner": {"n": 1}}));
    }

    #[test]
    fn constraint_messages_match_the_api_server() {
        let schema = object()
            .req("replicas", int_range(1, 10))
            .prop("mode", one_of(&["A", "B"]))
            .prop("name", name_len(3))
            .prop("items", array(string()).max_items(1))
            .prop("id", string().pattern("^cr-[0-9a-f]+$"));
        let (_, errs) = messages(
            schema,
            json!({"replicas": 0, "mode": "C", "name": "long", "items": ["a", "b"], "id": "x"}),
        );
        assert_eq!(
            errs,
            vec![
                "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
                r#"spec.mode: Unsupported value: "C": supported values: "A", "B""#,
                "spec.name: Too long: may not be more than 3 bytes",
                "spec.items: Too many: 2: must have at most 1 items",
                r#"spec.id: Invalid value: "x": spec.id in body should match '^cr-[0-9a-f]+$'"#,
            ]
        );
    }

    #[test]
    fn wrong_types_and_missing_required_fields_are_reported() {
        let schema = object().req("replicas", integer()).req("name", string());
        let (_, errs) = messages(schema, json!({"replicas": "two"}));
        assert_eq!(
            errs,
            vec![
                r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
                "spec.name: Required value",
            ]
        );
    }

    #[test]
    fn list_map_keys_must_be_unique() {
        let schema = array(object().req("name", string())).list_map(&["name"]);
        let (_, errs) = messages(schema, json!([{"name": "a"}, {"name": "a"}]));
        assert_eq!(errs, vec![r#"spec[1]: Duplicate value: {"name":"a"}"#]);
    }
}
