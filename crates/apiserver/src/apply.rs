//! Server-side apply, a documented subset (`apiserver.md` §3.12): each
//! field manager owns the fields it applied (maps merge key by key; lists
//! and scalars are owned whole); applying again removes the fields that
//! manager stopped applying unless another manager owns them; setting a
//! field another manager owns to a different value is a conflict unless
//! forced, which transfers ownership. Ownership is kept in
//! `metadata.managedFields` in Kubernetes' FieldsV1 shape.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A field path: map keys from the root.
type Path = Vec<String>;

/// Apply refused because other managers own fields it would change.
#[derive(Debug, PartialEq, Eq)]
pub struct Conflicts(pub Vec<(String, String)>);

impl std::fmt::Display for Conflicts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list: Vec<String> = self
            .0
            .iter()
            .map(|(manager, field)| format!("conflict with \"{manager}\": .{field}"))
            .collect();
        write!(
            f,
            "Apply failed with {} conflict{}: {}",
            self.0.len(),
            if self.0.len() == 1 { "" } else { "s" },
            list.join(", ")
        )
    }
}

/// Fields no manager owns: identity and server-owned metadata.
fn ignored(path: &[String]) -> bool {
    match path {
        [first] => matches!(first.as_str(), "apiVersion" | "kind" | "status"),
        [first, ..] if first == "status" => true,
        [meta, key, ..] if meta == "metadata" => !matches!(
            key.as_str(),
            "labels" | "annotations" | "finalizers" | "ownerReferences"
        ),
        _ => false,
    }
}

/// The leaf paths of an applied object (maps recurse; anything else is a leaf).
fn leaves(value: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match value {
        Value::Object(map) if !map.is_empty() || prefix.is_empty() => {
            for (k, v) in map {
                prefix.push(k.clone());
                if !ignored(prefix) {
                    leaves(v, prefix, out);
                }
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

fn fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut here = &mut root;
        for key in path {
            let entry = here.entry(format!("f:{key}")).or_insert_with(|| json!({}));
            here = match entry.as_object_mut() {
                Some(m) => m,
                None => break,
            };
        }
    }
    Value::Object(root)
}

fn paths_of(fields: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(map) = fields.as_object().filter(|m| !m.is_empty()) else {
        if !prefix.is_empty() {
            out.insert(prefix.clone());
        }
        return;
    };
    for (k, v) in map {
        if let Some(key) = k.strip_prefix("f:") {
            prefix.push(key.to_string());
            paths_of(v, prefix, out);
            prefix.pop();
        }
    }
}

fn get<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, k| v.get(k))
}

fn remove(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut here = value;
    for key in parents {
        match here.get_mut(key) {
            Some(next) => here = next,
            None => return,
        }
    }
    if let Some(map) = here.as_object_mut() {
        map.remove(last);
    }
}

fn set(value: &mut Value, path: &[String], leaf: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut here = value;
    for key in parents {
        if !here[key.as_str()].is_object() {
            here[key.as_str()] = json!({});
        }
        here = &mut here[key.as_str()];
    }
    here[last.as_str()] = leaf;
}

/// The managers and their owned paths, from `metadata.managedFields`.
fn managers(object: &Value) -> Vec<(String, BTreeSet<Path>)> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let mut paths = BTreeSet::new();
            paths_of(&entry["fieldsV1"], &mut Vec::new(), &mut paths);
            Some((entry["manager"].as_str()?.to_string(), paths))
        })
        .collect()
}

/// Applies `applied` for `manager` onto `live` (absent for a create).
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, Conflicts> {
    let mut wanted = BTreeSet::new();
    leaves(applied, &mut Vec::new(), &mut wanted);
    let mut others = live.map(managers).unwrap_or_default();
    let previous: BTreeSet<Path> = others
        .iter()
        .find(|(m, _)| m == manager)
        .map(|(_, p)| p.clone())
        .unwrap_or_default();
    others.retain(|(m, _)| m != manager);

    let conflicts: Vec<(String, String)> = wanted
        .iter()
        .filter(|path| live.and_then(|l| get(l, path)) != get(applied, path))
        .flat_map(|path| {
            others
                .iter()
                .filter(|(_, owned)| owned.contains(path))
                .map(|(m, _)| (m.clone(), path.join(".")))
        })
        .collect();
    if !conflicts.is_empty() && !force {
        return Err(Conflicts(conflicts));
    }
    if force {
        for (_, owned) in &mut others {
            owned.retain(|p| !wanted.contains(p));
        }
    }

    let mut result = live.cloned().unwrap_or_else(|| json!({}));
    for path in previous.difference(&wanted) {
        if !others.iter().any(|(_, owned)| owned.contains(path)) {
            remove(&mut result, path);
        }
    }
    for path in &wanted {
        if let Some(value) = get(applied, path) {
            set(&mut result, path, value.clone());
        }
    }
    for key in ["apiVersion", "kind"] {
        if let Some(v) = applied.get(key) {
            result[key] = v.clone();
        }
    }
    for key in ["name", "namespace"] {
        if let Some(v) = applied["metadata"].get(key) {
            result["metadata"][key] = v.clone();
        }
    }
    let api_version = applied["apiVersion"].clone();
    let mut entries: Vec<Value> = others
        .into_iter()
        .filter(|(_, owned)| !owned.is_empty())
        .map(|(m, owned)| json!({ "manager": m, "operation": "Apply", "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(&owned) }))
        .collect();
    entries.push(json!({ "manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(&wanted) }));
    result["metadata"]["managedFields"] = Value::Array(entries);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-30T09:00:00Z";

    fn cm(data: Value) -> Value {
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" }, "data": data })
    }

    #[test]
    fn a_manager_owns_what_it_applies_and_drops_what_it_stops_applying() {
        let first = apply(
            None,
            &cm(json!({ "a": "1", "b": "2" })),
            "alice",
            false,
            NOW,
        )
        .expect("create");
        assert_eq!(first["data"], json!({ "a": "1", "b": "2" }));
        assert_eq!(
            first["metadata"]["managedFields"][0]["fieldsV1"],
            json!({ "f:data": { "f:a": {}, "f:b": {} } })
        );
        let second =
            apply(Some(&first), &cm(json!({ "a": "1" })), "alice", false, NOW).expect("apply");
        assert_eq!(
            second["data"],
            json!({ "a": "1" }),
            "b is no longer applied, so it goes"
        );
    }

    #[test]
    fn other_managers_fields_stay_and_conflicts_need_force() {
        let alice = apply(None, &cm(json!({ "a": "1" })), "alice", false, NOW).expect("alice");
        let bob = apply(Some(&alice), &cm(json!({ "b": "2" })), "bob", false, NOW).expect("bob");
        assert_eq!(bob["data"], json!({ "a": "1", "b": "2" }));
        let conflict = apply(Some(&bob), &cm(json!({ "a": "9" })), "bob", false, NOW)
            .expect_err("a is alice's");
        assert_eq!(
            conflict.0,
            vec![("alice".to_string(), "data.a".to_string())]
        );
        assert!(
            conflict
                .to_string()
                .starts_with("Apply failed with 1 conflict: conflict with \"alice\": .data.a")
        );
        // Same value: shared ownership, no conflict.
        apply(
            Some(&bob),
            &cm(json!({ "a": "1", "b": "2" })),
            "bob",
            false,
            NOW,
        )
        .expect("agreeing is fine");
        let forced = apply(
            Some(&bob),
            &cm(json!({ "a": "9", "b": "2" })),
            "bob",
            true,
            NOW,
        )
        .expect("forced");
        assert_eq!(forced["data"]["a"], "9");
        let owners = managers(&forced);
        let alice_owns = owners
            .iter()
            .find(|(m, _)| m == "alice")
            .map(|(_, p)| p.len())
            .unwrap_or(0);
        assert_eq!(alice_owns, 0, "force transfers ownership");
    }
}
