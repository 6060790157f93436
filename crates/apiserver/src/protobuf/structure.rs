//! A built-in kind's structure as a JSON schema, for server-side apply:
//! objects with their properties (embedded structs' fields inlined), maps,
//! and lists with the `x-kubernetes-list-type` and keys Kubernetes gives
//! them. Types and formats are left out: reading values is `check`'s job.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use prost_reflect::{Kind, MessageDescriptor};
use serde_json::{Map, Value, json};

use super::schema::{SCHEMA_POOL, Schema};

/// Deeper than any built-in kind nests.
const MAX_DEPTH: usize = 40;

static CACHE: LazyLock<Mutex<HashMap<String, Arc<Value>>>> = LazyLock::new(Mutex::default);

/// The structure of `kind` in `api_version`, if it is a built-in kind.
pub fn structure(api_version: &str, kind: &str) -> Option<Arc<Value>> {
    let name = super::message_name(api_version, kind)?;
    if let Some(cached) = CACHE.lock().ok()?.get(&name) {
        return Some(cached.clone());
    }
    let schema = SCHEMA_POOL.as_ref().ok()?;
    let message = schema.pool.get_message_by_name(&name)?;
    let built = Arc::new(object(schema, &message, 0));
    CACHE.lock().ok()?.insert(name, built.clone());
    Some(built)
}

fn object(schema: &Schema, message: &MessageDescriptor, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return json!({});
    }
    let mut properties = Map::new();
    collect(schema, message, depth, &mut properties);
    json!({ "type": "object", "properties": properties })
}

/// The properties of `message`, those of the structs it embeds inline too.
fn collect(
    schema: &Schema,
    message: &MessageDescriptor,
    depth: usize,
    into: &mut Map<String, Value>,
) {
    for field in message.fields() {
        if schema.is_inline(message.full_name(), field.number()) {
            if let Kind::Message(inner) = field.kind() {
                collect(schema, &inner, depth, into);
            }
            continue;
        }
        let property = if field.is_map() {
            let value = match field.kind() {
                Kind::Message(entry) => entry.get_field(2).map(|v| value(schema, &v.kind(), depth)),
                _ => None,
            };
            json!({ "type": "object", "additionalProperties": value.unwrap_or_else(|| json!({})) })
        } else if field.is_list() {
            let mut list = json!({ "type": "array", "items": value(schema, &field.kind(), depth) });
            match schema.list_type(message.full_name(), field.number()) {
                "set" => list["x-kubernetes-list-type"] = json!("set"),
                map if map.starts_with("map:") => {
                    list["x-kubernetes-list-type"] = json!("map");
                    list["x-kubernetes-list-map-keys"] =
                        json!(map[4..].split(',').collect::<Vec<_>>());
                }
                _ => list["x-kubernetes-list-type"] = json!("atomic"),
            }
            list
        } else {
            value(schema, &field.kind(), depth)
        };
        into.insert(field.json_name().to_string(), property);
    }
}

fn value(schema: &Schema, kind: &Kind, depth: usize) -> Value {
    match kind {
        Kind::Message(message) => match message.full_name() {
            // apimachinery's types that JSON writes as scalars.
            "k8s.io.apimachinery.pkg.apis.meta.v1.Time"
            | "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime"
            | "k8s.io.apimachinery.pkg.api.resource.Quantity"
            | "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
            | "k8s.io.apimachinery.pkg.runtime.RawExtension"
            | "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1" => json!({}),
            _ => object(schema, message, depth + 1),
        },
        _ => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_lists_its_containers_by_name_and_its_finalizers_as_a_set() {
        let deployment = structure("apps/v1", "Deployment").expect("built in");
        let pod = &deployment["properties"]["spec"]["properties"]["template"]["properties"]["spec"];
        let containers = &pod["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-list-type"], "map");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        assert_eq!(
            containers["items"]["properties"]["args"]["x-kubernetes-list-type"],
            "atomic"
        );
        // The volume source is inlined into each volume.
        assert!(pod["properties"]["volumes"]["items"]["properties"]["configMap"].is_object());
        let metadata = &deployment["properties"]["metadata"]["properties"];
        assert_eq!(metadata["finalizers"]["x-kubernetes-list-type"], "set");
        assert!(structure("modelplane.ai/v1alpha1", "ModelDeployment").is_none());
    }
}
