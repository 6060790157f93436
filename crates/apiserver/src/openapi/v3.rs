//! OpenAPI v3 (`apiserver.md` fact 8, §2.4): an index of group versions and
//! one document per group version, with every resource's paths and, for
//! CRDs, the kind's schema. The PATCH and POST operations declare the
//! `fieldValidation` parameter, which is what makes kubectl 1.33 hand
//! validation to the server (`kubectl apply` works); the schemas serve
//! `kubectl explain`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{collection_path, field_validation, gvk, hash, kind_schema, schema_name, segment};
use crate::resources::Resource;

/// One group version's document, or `None` when nothing is served there.
pub fn document(resources: &[Resource], path: &str) -> Option<Value> {
    let served: Vec<&Resource> = resources.iter().filter(|r| segment(r) == path).collect();
    if served.is_empty() {
        return None;
    }
    // v3 types a parameter by its schema.
    let mut field_validation = field_validation();
    if let Some(parameter) = field_validation.as_object_mut() {
        parameter.remove("type");
    }
    field_validation["schema"] = json!({ "type": "string", "uniqueItems": true });
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for r in served {
        let gvk = gvk(r);
        let collection = collection_path(r);
        let reference = json!({ "$ref": format!("#/components/schemas/{}", schema_name(r)) });
        let body = json!({ "content": { "application/json": { "schema": reference } } });
        let ok = json!({ "200": { "description": "OK", "content": { "application/json": { "schema": reference } } } });
        let operation = |verb: &str, with_body: bool| {
            let mut op = json!({
                "operationId": format!("{verb}{}", r.kind),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [field_validation],
                "responses": ok,
            });
            if with_body {
                op["requestBody"] = body.clone();
            }
            op
        };
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
        schemas.insert(schema_name(r), kind_schema(r));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": "v1.34.0" },
        "paths": paths,
        "components": { "schemas": schemas },
    }))
}

/// `GET /openapi/v3`: every group version with the URL of its document.
pub fn index(resources: &[Resource]) -> Value {
    let mut paths: BTreeMap<String, Value> = BTreeMap::new();
    for path in resources.iter().map(segment) {
        if paths.contains_key(&path) {
            continue;
        }
        let text = document(resources, &path)
            .map(|d| d.to_string())
            .unwrap_or_default();
        paths.insert(
            path.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{path}?hash={}", hash(&text)) }),
        );
    }
    json!({ "paths": paths })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    #[test]
    fn patch_operations_declare_field_validation() {
        let all = builtins();
        let index = index(&all);
        assert!(
            index["paths"]["api/v1"]["serverRelativeURL"]
                .as_str()
                .is_some_and(|u| u.starts_with("/openapi/v3/api/v1?hash="))
        );
        let doc = document(&all, "api/v1").expect("core");
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(patch["parameters"][0]["name"], "fieldValidation");
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        assert!(document(&all, "apis/nothing/v1").is_none());
    }
}
