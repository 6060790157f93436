//! OpenAPI v3 (`apiserver.md` fact 8, §2.4): an index of group versions and
//! one document per group version, with every resource's paths and, for
//! CRDs, the kind's schema. The PATCH and POST operations declare the
//! `fieldValidation` parameter, which is what makes kubectl 1.33 hand
//! validation to the server (`kubectl apply` works); the schemas serve
//! `kubectl explain`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::resources::Resource;

/// `group/version` path segment: `api/v1` or `apis/GROUP/VERSION`.
fn segment(r: &Resource) -> String {
    if r.group.is_empty() {
        format!("api/{}", r.version)
    } else {
        format!("apis/{}/{}", r.group, r.version)
    }
}

/// A stable content hash for cache busting (FNV-1a over the document).
fn hash(text: &str) -> String {
    let h = text.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    format!("{h:016X}")
}

/// Schema name of a kind: reversed group, version, kind (`ai.modelplane.v1alpha1.ModelDeployment`).
fn schema_name(r: &Resource) -> String {
    let group: Vec<&str> = if r.group.is_empty() {
        vec!["core"]
    } else {
        r.group.split('.').rev().collect()
    };
    format!("{}.{}.{}", group.join("."), r.version, r.kind)
}

/// One group version's document, or `None` when nothing is served there.
pub fn document(resources: &[Resource], path: &str) -> Option<Value> {
    let served: Vec<&Resource> = resources.iter().filter(|r| segment(r) == path).collect();
    if served.is_empty() {
        return None;
    }
    let field_validation = json!({
        "name": "fieldValidation", "in": "query", "schema": { "type": "string", "uniqueItems": true },
        "description": "Strict, Warn or Ignore: how the server treats unknown or duplicate fields",
    });
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for r in served {
        let gvk = json!({ "group": r.group, "version": r.version, "kind": r.kind });
        let collection = if r.namespaced {
            format!("/{path}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("/{path}/{}", r.plural)
        };
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
        let mut schema = r.schema.as_deref().cloned().unwrap_or_else(
            || json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true }),
        );
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(schema_name(r), schema);
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
