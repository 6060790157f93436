//! Patch types (`apiserver.md` §3.11): JSON merge patch (RFC 7386), JSON
//! patch (RFC 6902 with Kubernetes' rule that `test` of `null` against a
//! missing key passes), and the strategic merge patch subset built-in kinds
//! need (merge semantics, `$patch: delete|replace`, `$setElementOrder` and
//! `$retainKeys` ignored; lists are replaced).

use serde_json::Value;

/// A patch's media type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// From a Content-Type (parameters ignored).
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// The strategic merge patch subset: merge semantics plus the directives.
pub fn strategic(target: &mut Value, patch: &Value) {
    let (Value::Object(t), Value::Object(p)) = (&mut *target, patch) else {
        *target = patch.clone();
        return;
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("delete") => {
            *target = Value::Null;
            return;
        }
        Some("replace") => {
            let mut replacement = p.clone();
            replacement.remove("$patch");
            *target = Value::Object(replacement);
            return;
        }
        _ => {}
    }
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() || v.get("$patch").and_then(Value::as_str) == Some("delete") {
            t.remove(k);
        } else {
            strategic(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Whether the JSON pointer's parent exists and the key itself does not.
fn missing_with_parent(doc: &Value, pointer: &str) -> bool {
    let Some((parent, _)) = pointer.rsplit_once('/') else {
        return false;
    };
    doc.pointer(pointer).is_none() && (parent.is_empty() || doc.pointer(parent).is_some())
}

/// RFC 6902 JSON patch, with `test` of `null` against a missing key (whose
/// parent exists) passing, as Kubernetes' Go implementation does. Each
/// operation sees the document as the operations before it left it.
pub fn json(target: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    for op in ops {
        let null_test = op["op"] == "test" && op.get("value").is_some_and(Value::is_null);
        if null_test
            && op["path"]
                .as_str()
                .is_some_and(|p| missing_with_parent(target, p))
        {
            continue;
        }
        let parsed: json_patch::Patch = serde_json::from_value(Value::Array(vec![op.clone()]))
            .map_err(|e| format!("invalid JSON patch: {e}"))?;
        json_patch::patch(target, &parsed).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_of_null_against_a_missing_key_passes() {
        let mut doc = json!({ "metadata": { "name": "a" } });
        let patch = json!([
            { "op": "test", "path": "/metadata/finalizers", "value": null },
            { "op": "add", "path": "/metadata/finalizers", "value": ["x"] },
        ]);
        json(&mut doc, &patch).expect("kube-runtime's finalizer patch applies");
        assert_eq!(doc["metadata"]["finalizers"], json!(["x"]));
        let mut doc = json!({ "metadata": { "finalizers": ["y"] } });
        assert!(
            json(&mut doc, &patch).is_err(),
            "a present value is not null"
        );
        let mut doc = json!({ "spec": {} });
        assert!(
            json(
                &mut doc,
                &json!([{ "op": "replace", "path": "/spec/missing", "value": 1 }])
            )
            .is_err()
        );
    }

    #[test]
    fn test_of_null_sees_what_earlier_operations_did() {
        // The key is added first, so testing it for null must fail.
        let mut doc = json!({ "metadata": {} });
        let patch = json!([
            { "op": "add", "path": "/metadata/finalizers", "value": ["x"] },
            { "op": "test", "path": "/metadata/finalizers", "value": null },
        ]);
        assert!(json(&mut doc, &patch).is_err());
        // Removed first, so null passes.
        let mut doc = json!({ "metadata": { "finalizers": ["x"] } });
        let patch = json!([
            { "op": "remove", "path": "/metadata/finalizers" },
            { "op": "test", "path": "/metadata/finalizers", "value": null },
        ]);
        json(&mut doc, &patch).expect("the key is gone by then");
    }

    #[test]
    fn strategic_directives() {
        let mut doc =
            json!({ "data": { "a": "1", "b": "2" }, "metadata": { "labels": { "x": "y" } } });
        strategic(
            &mut doc,
            &json!({
                "$setElementOrder/finalizers": [],
                "data": { "$patch": "replace", "c": "3" },
                "metadata": { "labels": { "$patch": "delete" } },
            }),
        );
        assert_eq!(doc, json!({ "data": { "c": "3" }, "metadata": {} }));
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/json-patch+json; charset=utf-8"),
            Some(PatchType::Json)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml"),
            Some(PatchType::Apply)
        );
        assert_eq!(PatchType::from_content_type("text/plain"), None);
    }
}
