//! OpenAPI v2 (Swagger 2.0) at `/openapi/v2`: kubectl 1.27 and 1.28 read it
//! before every `apply` and `explain` (and later versions for what v3 does
//! not answer), in the protobuf form of gnostic's `openapi.v2.Document`,
//! which is what they ask for; JSON to anyone else.
//!
//! [`document`] builds the Swagger JSON; [`protobuf`] encodes it. The
//! messages below are the part of gnostic's schema the document uses, with
//! gnostic's field numbers; prost encodes them.

use serde_json::{Map, Value, json};

use super::{collection_path, field_validation, gvk, kind_schema, schema_name};
use crate::resources::Resource;

/// The media type kubectl asks `/openapi/v2` for.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The Swagger 2.0 document of every served kind.
pub fn document(resources: &[Resource]) -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for r in resources {
        let reference = json!({ "$ref": format!("#/definitions/{}", schema_name(r)) });
        let operation = |verb: &str, with_body: bool| {
            let mut parameters = vec![field_validation()];
            if with_body {
                parameters.push(
                    json!({ "name": "body", "in": "body", "required": true, "schema": reference }),
                );
            }
            json!({
                "operationId": format!("{verb}{}", r.kind),
                "consumes": ["application/json"],
                "produces": ["application/json"],
                "parameters": parameters,
                "responses": { "200": { "description": "OK", "schema": reference } },
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk(r),
            })
        };
        let collection = collection_path(r);
        paths.insert(
            collection.clone(),
            json!({ "get": operation("list", false), "post": operation("post", true) }),
        );
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({
                "get": operation("get", false),
                "put": operation("put", true),
                "patch": operation("patch", true),
                "delete": operation("delete", false),
            }),
        );
        definitions.insert(schema_name(r), swagger_schema(&kind_schema(r)));
    }
    json!({
        "swagger": "2.0",
        "info": { "title": "Kubernetes", "version": "v1.34.0" },
        "paths": paths,
        "definitions": definitions,
    })
}

/// A structural OpenAPI v3 schema as Swagger 2.0 has it: without what v2
/// lacks (`nullable`, `anyOf`, `oneOf`, `not`), as kube-apiserver publishes
/// CRDs to v2.
fn swagger_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "nullable" | "anyOf" | "oneOf" | "not"))
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        "properties" | "definitions" => Value::Object(
                            v.as_object()
                                .into_iter()
                                .flatten()
                                .map(|(name, s)| (name.clone(), swagger_schema(s)))
                                .collect(),
                        ),
                        "items" | "additionalProperties" => swagger_schema(v),
                        "allOf" => Value::Array(
                            v.as_array()
                                .into_iter()
                                .flatten()
                                .map(swagger_schema)
                                .collect(),
                        ),
                        _ => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The document in gnostic's protobuf encoding.
pub fn protobuf(document: &Value) -> Vec<u8> {
    use prost::Message;
    let doc = Document {
        swagger: text(&document["swagger"]),
        info: Some(Info {
            title: text(&document["info"]["title"]),
            version: text(&document["info"]["version"]),
        }),
        paths: Some(Paths {
            path: entries(&document["paths"])
                .map(|(name, item)| NamedPathItem {
                    name: name.clone(),
                    value: Some(path_item(item)),
                })
                .collect(),
        }),
        definitions: Some(Definitions {
            additional_properties: named_schemas(&document["definitions"]),
        }),
    };
    doc.encode_to_vec()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

fn texts(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().map(text).collect()
}

fn entries(value: &Value) -> impl Iterator<Item = (&String, &Value)> {
    value.as_object().into_iter().flatten()
}

fn path_item(item: &Value) -> PathItem {
    let op = |verb: &str| item.get(verb).map(operation);
    PathItem {
        get: op("get"),
        put: op("put"),
        post: op("post"),
        delete: op("delete"),
        patch: op("patch"),
    }
}

fn operation(op: &Value) -> Operation {
    Operation {
        operation_id: text(&op["operationId"]),
        produces: texts(&op["produces"]),
        consumes: texts(&op["consumes"]),
        parameters: op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .map(parameter)
            .collect(),
        responses: Some(Responses {
            response_code: entries(&op["responses"])
                .map(|(code, response)| NamedResponseValue {
                    name: code.clone(),
                    value: Some(ResponseValue {
                        response: Some(Response {
                            description: text(&response["description"]),
                            schema: response.get("schema").map(|s| SchemaItem {
                                schema: Some(schema(s)),
                            }),
                        }),
                    }),
                })
                .collect(),
        }),
        vendor_extension: extensions(op),
    }
}

fn parameter(p: &Value) -> ParametersItem {
    let parameter = if p["in"] == "body" {
        Parameter {
            body_parameter: Some(BodyParameter {
                name: text(&p["name"]),
                r#in: "body".into(),
                required: p["required"].as_bool().unwrap_or(false),
                schema: p.get("schema").map(schema),
            }),
            non_body_parameter: None,
        }
    } else {
        Parameter {
            body_parameter: None,
            non_body_parameter: Some(NonBodyParameter {
                query_parameter_sub_schema: Some(QueryParameterSubSchema {
                    r#in: text(&p["in"]),
                    description: text(&p["description"]),
                    name: text(&p["name"]),
                    r#type: text(&p["type"]),
                }),
            }),
        }
    };
    ParametersItem {
        parameter: Some(parameter),
    }
}

fn named_schemas(value: &Value) -> Vec<NamedSchema> {
    entries(value)
        .map(|(name, s)| NamedSchema {
            name: name.clone(),
            value: Some(schema(s)),
        })
        .collect()
}

fn schema(s: &Value) -> Schema {
    let number = |k: &str| s[k].as_f64().unwrap_or_default();
    let integer = |k: &str| s[k].as_i64().unwrap_or_default();
    Schema {
        reference: text(&s["$ref"]),
        format: text(&s["format"]),
        title: text(&s["title"]),
        description: text(&s["description"]),
        default: s.get("default").map(any),
        maximum: number("maximum"),
        minimum: number("minimum"),
        max_length: integer("maxLength"),
        min_length: integer("minLength"),
        pattern: text(&s["pattern"]),
        max_items: integer("maxItems"),
        min_items: integer("minItems"),
        required: texts(&s["required"]),
        r#enum: s["enum"]
            .as_array()
            .into_iter()
            .flatten()
            .map(any)
            .collect(),
        additional_properties: match &s["additionalProperties"] {
            Value::Bool(b) => Some(Box::new(AdditionalPropertiesItem {
                schema: None,
                boolean: Some(*b),
            })),
            Value::Object(_) => Some(Box::new(AdditionalPropertiesItem {
                schema: Some(schema(&s["additionalProperties"])),
                boolean: None,
            })),
            _ => None,
        },
        r#type: s.get("type").map(|t| TypeItem {
            value: match t {
                Value::Array(_) => texts(t),
                t => vec![text(t)],
            },
        }),
        items: s.get("items").map(|i| ItemsItem {
            schema: vec![schema(i)],
        }),
        all_of: s["allOf"]
            .as_array()
            .into_iter()
            .flatten()
            .map(schema)
            .collect(),
        properties: s.get("properties").map(|p| Properties {
            additional_properties: named_schemas(p),
        }),
        vendor_extension: extensions(s),
    }
}

/// Every `x-…` field as gnostic keeps them: a name and the value as YAML
/// (JSON is YAML).
fn extensions(object: &Value) -> Vec<NamedAny> {
    entries(object)
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny {
            name: k.clone(),
            value: Some(any(v)),
        })
        .collect()
}

fn any(value: &Value) -> Any {
    Any {
        yaml: value.to_string(),
    }
}

// === gnostic's openapi.v2 messages (the fields used) ===

#[derive(Clone, PartialEq, prost::Message)]
struct Document {
    #[prost(string, tag = "1")]
    swagger: String,
    #[prost(message, optional, tag = "2")]
    info: Option<Info>,
    #[prost(message, optional, tag = "8")]
    paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    definitions: Option<Definitions>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Info {
    #[prost(string, tag = "1")]
    title: String,
    #[prost(string, tag = "2")]
    version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Paths {
    #[prost(message, repeated, tag = "2")]
    path: Vec<NamedPathItem>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NamedPathItem {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    value: Option<PathItem>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PathItem {
    #[prost(message, optional, tag = "2")]
    get: Option<Operation>,
    #[prost(message, optional, tag = "3")]
    put: Option<Operation>,
    #[prost(message, optional, tag = "4")]
    post: Option<Operation>,
    #[prost(message, optional, tag = "5")]
    delete: Option<Operation>,
    #[prost(message, optional, tag = "8")]
    patch: Option<Operation>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Operation {
    #[prost(string, tag = "5")]
    operation_id: String,
    #[prost(string, repeated, tag = "6")]
    produces: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    consumes: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    parameters: Vec<ParametersItem>,
    #[prost(message, optional, tag = "9")]
    responses: Option<Responses>,
    #[prost(message, repeated, tag = "13")]
    vendor_extension: Vec<NamedAny>,
}

/// A oneof in gnostic (parameter = 1, json_reference = 2).
#[derive(Clone, PartialEq, prost::Message)]
struct ParametersItem {
    #[prost(message, optional, tag = "1")]
    parameter: Option<Parameter>,
}

/// A oneof in gnostic: one of the two is set.
#[derive(Clone, PartialEq, prost::Message)]
struct Parameter {
    #[prost(message, optional, tag = "1")]
    body_parameter: Option<BodyParameter>,
    #[prost(message, optional, tag = "2")]
    non_body_parameter: Option<NonBodyParameter>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct BodyParameter {
    #[prost(string, tag = "2")]
    name: String,
    #[prost(string, tag = "3")]
    r#in: String,
    #[prost(bool, tag = "4")]
    required: bool,
    #[prost(message, optional, tag = "5")]
    schema: Option<Schema>,
}

/// A oneof in gnostic; only query parameters are described.
#[derive(Clone, PartialEq, prost::Message)]
struct NonBodyParameter {
    #[prost(message, optional, tag = "3")]
    query_parameter_sub_schema: Option<QueryParameterSubSchema>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct QueryParameterSubSchema {
    #[prost(string, tag = "2")]
    r#in: String,
    #[prost(string, tag = "3")]
    description: String,
    #[prost(string, tag = "4")]
    name: String,
    #[prost(string, tag = "6")]
    r#type: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Responses {
    #[prost(message, repeated, tag = "1")]
    response_code: Vec<NamedResponseValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NamedResponseValue {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    value: Option<ResponseValue>,
}

/// A oneof in gnostic (response = 1, json_reference = 2).
#[derive(Clone, PartialEq, prost::Message)]
struct ResponseValue {
    #[prost(message, optional, tag = "1")]
    response: Option<Response>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Response {
    #[prost(string, tag = "1")]
    description: String,
    #[prost(message, optional, tag = "2")]
    schema: Option<SchemaItem>,
}

/// A oneof in gnostic (schema = 1, file_schema = 2).
#[derive(Clone, PartialEq, prost::Message)]
struct SchemaItem {
    #[prost(message, optional, tag = "1")]
    schema: Option<Schema>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Definitions {
    #[prost(message, repeated, tag = "1")]
    additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NamedSchema {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    value: Option<Schema>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Schema {
    #[prost(string, tag = "1")]
    reference: String,
    #[prost(string, tag = "2")]
    format: String,
    #[prost(string, tag = "3")]
    title: String,
    #[prost(string, tag = "4")]
    description: String,
    #[prost(message, optional, tag = "5")]
    default: Option<Any>,
    #[prost(double, tag = "7")]
    maximum: f64,
    #[prost(double, tag = "9")]
    minimum: f64,
    #[prost(int64, tag = "11")]
    max_length: i64,
    #[prost(int64, tag = "12")]
    min_length: i64,
    #[prost(string, tag = "13")]
    pattern: String,
    #[prost(int64, tag = "14")]
    max_items: i64,
    #[prost(int64, tag = "15")]
    min_items: i64,
    #[prost(string, repeated, tag = "19")]
    required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    r#enum: Vec<Any>,
    #[prost(message, optional, boxed, tag = "21")]
    additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    properties: Option<Properties>,
    #[prost(message, repeated, tag = "31")]
    vendor_extension: Vec<NamedAny>,
}

/// A oneof in gnostic: a schema or a boolean.
#[derive(Clone, PartialEq, prost::Message)]
struct AdditionalPropertiesItem {
    #[prost(message, optional, tag = "1")]
    schema: Option<Schema>,
    #[prost(bool, optional, tag = "2")]
    boolean: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    value: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    schema: Vec<Schema>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Properties {
    #[prost(message, repeated, tag = "1")]
    additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NamedAny {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    value: Option<Any>,
}

/// gnostic's `Any`: the value as YAML (field 2).
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "2")]
    yaml: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    #[test]
    fn patch_operations_carry_their_kind_and_field_validation() {
        let doc = document(&builtins());
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        assert_eq!(patch["parameters"][0]["name"], "fieldValidation");
        assert_eq!(
            doc["definitions"]["core.v1.ConfigMap"]["x-kubernetes-group-version-kind"][0]["kind"],
            "ConfigMap"
        );
    }

    #[test]
    fn the_protobuf_names_every_path_and_definition() {
        use prost::Message;
        let doc = document(&builtins());
        let decoded = Document::decode(protobuf(&doc).as_slice()).expect("decodes");
        assert_eq!(decoded.swagger, "2.0");
        let paths = decoded.paths.expect("paths").path;
        assert_eq!(paths.len(), doc["paths"].as_object().map_or(0, Map::len));
        let configmap = paths
            .iter()
            .find(|p| p.name == "/api/v1/namespaces/{namespace}/configmaps/{name}")
            .and_then(|p| p.value.clone())
            .and_then(|p| p.patch)
            .expect("configmap patch");
        let gvk = configmap
            .vendor_extension
            .iter()
            .find(|e| e.name == "x-kubernetes-group-version-kind")
            .and_then(|e| e.value.clone())
            .expect("gvk");
        assert_eq!(
            gvk.yaml,
            r#"{"group":"","version":"v1","kind":"ConfigMap"}"#
        );
    }

    #[test]
    fn v2_schemas_leave_out_what_swagger_lacks() {
        let schema = json!({ "type": "object", "properties": { "a": { "type": "string", "nullable": true,
            "anyOf": [{ "type": "string" }] } } });
        assert_eq!(
            swagger_schema(&schema),
            json!({ "type": "object", "properties": { "a": { "type": "string" } } })
        );
    }
}
