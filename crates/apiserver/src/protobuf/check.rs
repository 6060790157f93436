//! A built-in kind's JSON read as kube-apiserver reads it into its Go types,
//! with the same schema the protobuf bodies are decoded against: a value of
//! the wrong type is refused (`json: cannot unmarshal string into Go struct
//! field Deployment.spec.replicas of type int32`), a field the type does not
//! have is dropped and reported (what `fieldValidation` then does with it is
//! the caller's), `null` is the zero value. So no object a typed client
//! (kube-rs, client-go) cannot read is ever stored.

use prost_reflect::{Kind, MessageDescriptor};
use serde_json::{Map, Value};

use super::schema::{SCHEMA_POOL, Schema};

/// What reading a built-in object found.
#[derive(Debug, Default)]
pub struct Read {
    /// Paths of the fields its type does not have (dropped).
    pub unknown: Vec<String>,
}

/// Reads `object` of `api_version`/`kind` as its Go type would: `None` when
/// the kind is not a built-in one the schema has, else the object with
/// unknown fields dropped, or why a value cannot be read.
pub fn check(api_version: &str, kind: &str, object: &mut Value) -> Option<Result<Read, String>> {
    let schema = SCHEMA_POOL.as_ref().ok()?;
    let name = super::message_name(api_version, kind)?;
    let message = schema.pool.get_message_by_name(&name)?;
    let mut read = Read::default();
    let Value::Object(fields) = object else {
        return Some(Err(format!(
            "json: cannot unmarshal {} into Go value of type {kind}",
            json_type(object)
        )));
    };
    // The type meta is not part of the message: read in place, around it.
    if let Err(e) = walk_fields(
        schema,
        &message,
        fields,
        kind,
        Path::Root,
        &mut read,
        TYPE_META,
    ) {
        return Some(Err(e));
    }
    Some(Ok(read))
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Where a value is in the object (`spec.template.spec.containers[0]`):
/// written out only when an error or an unknown field names it, as most
/// objects read have neither.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Field(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Field(Path::Root, name) => f.write_str(name),
            Path::Field(parent, name) => write!(f, "{parent}.{name}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// The field of `message` (or of a struct it embeds inline) that JSON
/// spells `json_name`.
fn field_of(
    schema: &Schema,
    message: &MessageDescriptor,
    json_name: &str,
) -> Option<prost_reflect::FieldDescriptor> {
    if let Some(field) = message.get_field_by_json_name(json_name)
        && !schema.is_inline(message.full_name(), field.number())
    {
        return Some(field);
    }
    message
        .fields()
        .filter(|f| schema.is_inline(message.full_name(), f.number()))
        .find_map(|inline| match inline.kind() {
            Kind::Message(inner) => field_of(schema, &inner, json_name),
            _ => None,
        })
}

/// The fields of a top-level object that are not its message's.
const TYPE_META: &[&str] = &["apiVersion", "kind"];

fn walk_object(
    schema: &Schema,
    message: &MessageDescriptor,
    object: &mut Map<String, Value>,
    owner: &str,
    path: Path<'_>,
    read: &mut Read,
) -> Result<(), String> {
    walk_fields(schema, message, object, owner, path, read, &[])
}

/// [`walk_object`], leaving the fields named in `skip` as they are.
fn walk_fields(
    schema: &Schema,
    message: &MessageDescriptor,
    object: &mut Map<String, Value>,
    owner: &str,
    path: Path<'_>,
    read: &mut Read,
    skip: &[&str],
) -> Result<(), String> {
    // Named in the order a decoder meets them, depth first; dropped after.
    let mut unknown = Vec::new();
    for (name, value) in object.iter_mut() {
        if skip.contains(&name.as_str()) {
            continue;
        }
        let Some(field) = field_of(schema, message, name) else {
            let at = Path::Field(&path, name);
            read.unknown.push(format!("unknown field \"{at}\""));
            unknown.push(name.clone());
            continue;
        };
        let at = Path::Field(&path, name);
        if field.is_map() {
            walk_map(schema, &field, value, owner, at, read)?;
        } else if field.is_list() {
            walk_list(schema, &field, value, owner, at, read)?;
        } else {
            walk_value(schema, &field.kind(), value, owner, at, read)?;
        }
    }
    for name in unknown {
        object.shift_remove(&name);
    }
    Ok(())
}

fn walk_list(
    schema: &Schema,
    field: &prost_reflect::FieldDescriptor,
    value: &mut Value,
    owner: &str,
    path: Path<'_>,
    read: &mut Read,
) -> Result<(), String> {
    match value {
        Value::Null => Ok(()),
        Value::Array(items) => items.iter_mut().enumerate().try_for_each(|(i, item)| {
            walk_value(
                schema,
                &field.kind(),
                item,
                owner,
                Path::Index(&path, i),
                read,
            )
        }),
        other => Err(cannot(other, owner, path, "array")),
    }
}

fn walk_map(
    schema: &Schema,
    field: &prost_reflect::FieldDescriptor,
    value: &mut Value,
    owner: &str,
    path: Path<'_>,
    read: &mut Read,
) -> Result<(), String> {
    let Kind::Message(entry) = field.kind() else {
        return Ok(());
    };
    let Some(value_kind) = entry.get_field(2).map(|f| f.kind()) else {
        return Ok(());
    };
    match value {
        Value::Null => Ok(()),
        Value::Object(entries) => entries.iter_mut().try_for_each(|(key, v)| {
            walk_value(schema, &value_kind, v, owner, Path::Field(&path, key), read)
        }),
        other => Err(cannot(other, owner, path, "map")),
    }
}

fn cannot(value: &Value, owner: &str, path: Path<'_>, go_type: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field {owner}.{path} of type {go_type}",
        json_type(value)
    )
}

fn walk_value(
    schema: &Schema,
    kind: &Kind,
    value: &mut Value,
    owner: &str,
    path: Path<'_>,
    read: &mut Read,
) -> Result<(), String> {
    if value.is_null() {
        return Ok(());
    }
    let fits = match kind {
        Kind::String => value.is_string(),
        Kind::Bool => value.is_boolean(),
        Kind::Int32 | Kind::Int64 => value.is_i64() || value.is_u64(),
        Kind::Double | Kind::Float => value.is_number(),
        Kind::Bytes => value.is_string(),
        Kind::Message(message) => {
            return walk_message(schema, message, value, owner, path, read);
        }
        _ => true,
    };
    if fits {
        Ok(())
    } else {
        let go_type = match kind {
            Kind::Int32 => "int32",
            Kind::Int64 => "int64",
            Kind::Double | Kind::Float => "float64",
            Kind::Bool => "bool",
            Kind::Bytes => "[]uint8",
            _ => "string",
        };
        Err(cannot(value, owner, path, go_type))
    }
}

fn walk_message(
    schema: &Schema,
    message: &MessageDescriptor,
    value: &mut Value,
    owner: &str,
    path: Path<'_>,
    read: &mut Read,
) -> Result<(), String> {
    let name = message.full_name();
    // apimachinery's types that JSON spells its own way.
    let fits = match name {
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => value.is_string(),
        "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1" => value.is_object(),
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => value.is_string() || value.is_number(),
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => value.is_string() || value.is_i64(),
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => true,
        _ => {
            let Value::Object(fields) = value else {
                return Err(cannot(value, owner, path, "object"));
            };
            return walk_object(schema, message, fields, owner, path, read);
        }
    };
    if fits {
        Ok(())
    } else {
        let short = name.rsplit('.').next().unwrap_or(name);
        Err(cannot(value, owner, path, short))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_well_typed_deployment_reads_whole() {
        let mut deployment = json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "d", "labels": { "app": "d" } },
            "spec": { "replicas": 0, "selector": { "matchLabels": { "app": "d" } },
                "template": { "metadata": { "labels": { "app": "d" } },
                    "spec": { "containers": [{ "name": "c", "image": "nginx",
                        "ports": [{ "containerPort": 80 }],
                        "resources": { "limits": { "cpu": "1", "memory": 1024 } },
                        "livenessProbe": { "httpGet": { "port": "http", "path": "/" } },
                        "env": [{ "name": "A", "value": "b" }] }],
                        "volumes": [{ "name": "v", "configMap": { "name": "cm" } }] } } } });
        let before = deployment.clone();
        let read = check("apps/v1", "Deployment", &mut deployment)
            .expect("a built-in kind")
            .expect("reads");
        assert!(read.unknown.is_empty(), "{:?}", read.unknown);
        assert_eq!(deployment, before);
    }

    #[test]
    fn a_value_of_the_wrong_type_is_refused_as_go_refuses_it() {
        let mut deployment = json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "d" }, "spec": { "replicas": "two" } });
        assert_eq!(
            check("apps/v1", "Deployment", &mut deployment)
                .expect("built in")
                .expect_err("refused"),
            "json: cannot unmarshal string into Go struct field Deployment.spec.replicas of type int32"
        );
        let mut config_map = json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "c" }, "data": { "a": 1 } });
        assert_eq!(
            check("v1", "ConfigMap", &mut config_map)
                .expect("built in")
                .expect_err("refused"),
            "json: cannot unmarshal number into Go struct field ConfigMap.data.a of type string"
        );
    }

    #[test]
    fn a_path_names_list_items_and_map_keys() {
        let mut deployment = json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "d" }, "spec": { "template": { "spec": { "containers": [
                { "name": "a", "imagez": "x" },
                { "name": "b", "resources": { "limits": { "cpu": true } } }] } } } });
        assert_eq!(
            check("apps/v1", "Deployment", &mut deployment)
                .expect("built in")
                .expect_err("refused"),
            "json: cannot unmarshal bool into Go struct field \
             Deployment.spec.template.spec.containers[1].resources.limits.cpu of type Quantity"
        );
        let mut deployment = json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "d" }, "spec": { "template": { "spec": { "containers": [
                { "name": "a" }, { "name": "b", "imagez": "x" }] } } } });
        let read = check("apps/v1", "Deployment", &mut deployment)
            .expect("built in")
            .expect("reads");
        assert_eq!(
            read.unknown,
            ["unknown field \"spec.template.spec.containers[1].imagez\""]
        );
    }

    #[test]
    fn unknown_fields_are_dropped_and_named() {
        let mut deployment = json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "d" }, "spec": { "replicas": 1, "replicaz": 3 }, "extra": true });
        let read = check("apps/v1", "Deployment", &mut deployment)
            .expect("built in")
            .expect("reads");
        assert_eq!(
            read.unknown,
            ["unknown field \"spec.replicaz\"", "unknown field \"extra\""]
        );
        assert_eq!(
            deployment,
            json!({ "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": { "name": "d" }, "spec": { "replicas": 1 } })
        );
        assert!(check("modelplane.ai/v1alpha1", "ModelDeployment", &mut json!({})).is_none());
    }
}
