//! The OpenAPI documents kubectl reads: v3 (`v3.rs`, what kubectl 1.27+
//! prefers) and v2 (`v2.rs`, which kubectl 1.27 and 1.28 fetch before any
//! `apply` or `explain`, in protobuf). Both describe the same paths and
//! schemas: every served kind's operations, with the `fieldValidation`
//! parameter that hands validation to the server, and each kind's schema
//! (a CRD's own; a built-in kind's is open).

pub mod v2;
pub mod v3;

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

/// The path of a kind's collection (all namespaces' for a namespaced kind
/// being under `namespaces/{namespace}`).
fn collection_path(r: &Resource) -> String {
    let path = segment(r);
    if r.namespaced {
        format!("/{path}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("/{path}/{}", r.plural)
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

fn gvk(r: &Resource) -> Value {
    json!({ "group": r.group, "version": r.version, "kind": r.kind })
}

/// The `fieldValidation` query parameter, whose presence on an operation
/// tells kubectl the server validates fields itself.
fn field_validation() -> Value {
    json!({
        "name": "fieldValidation", "in": "query", "type": "string",
        "description": "Strict, Warn or Ignore: how the server treats unknown or duplicate fields",
    })
}

/// A kind's schema, marked with its group, version and kind.
fn kind_schema(r: &Resource) -> Value {
    let mut schema = r.schema.as_deref().cloned().unwrap_or_else(
        || json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true }),
    );
    schema["x-kubernetes-group-version-kind"] = json!([gvk(r)]);
    schema
}
