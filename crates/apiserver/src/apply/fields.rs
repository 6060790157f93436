//! Field paths as server-side apply knows them, read off an object through
//! its schema: a map's keys (`f:name`), a list whose schema makes it a map
//! its items by their keys (`k:{"name":"gpu"}`), a set its values
//! (`v:"finalizer"`), an atomic list (or one the schema says nothing of) a
//! single field. The same paths are read, written and removed on objects,
//! and kept in `managedFields` in Kubernetes' FieldsV1 shape.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Seg {
    /// A map key or an object's field.
    F(String),
    /// An item of a list map, by the JSON of its key fields (sorted).
    K(String),
    /// An item of a set, by its JSON.
    V(String),
}

/// A field path from the object's root.
pub type Path = Vec<Seg>;

/// How a list merges, from its schema.
enum List {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// `metadata`'s lists, which a CRD's schema does not describe.
static METADATA_SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    json!({ "properties": {
        "finalizers": { "type": "array", "x-kubernetes-list-type": "set" },
        "ownerReferences": { "type": "array", "x-kubernetes-list-type": "map",
                             "x-kubernetes-list-map-keys": ["uid"] },
    } })
});

/// The schema of what a schema says nothing of.
static NO_SCHEMA: Value = Value::Null;

/// The schema of `key` inside an object whose schema is `schema`.
/// Borrowed: a pod template's schema is large, and a copy of each level's
/// was most of an apply's time.
fn child<'s>(schema: &'s Value, key: &str, root: bool) -> &'s Value {
    if root && key == "metadata" {
        return &METADATA_SCHEMA;
    }
    match schema["properties"].get(key) {
        Some(s) => s,
        None if schema["additionalProperties"].is_object() => &schema["additionalProperties"],
        None => &NO_SCHEMA,
    }
}

fn list_type(schema: &Value) -> List {
    match schema["x-kubernetes-list-type"].as_str() {
        Some("set") => List::Set,
        Some("map") => List::Map(
            schema["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect(),
        ),
        _ => List::Atomic,
    }
}

/// The key of a list map's item: the JSON of its key fields, sorted; `None`
/// when it lacks one (the list is then treated as atomic).
fn item_key(item: &Value, keys: &[String]) -> Option<String> {
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    let mut map = Map::new();
    for key in sorted {
        map.insert(key.clone(), item.get(key)?.clone());
    }
    (!map.is_empty()).then(|| Value::Object(map).to_string())
}

/// The paths an object sets, below `prefix`, each a leaf: a scalar, an
/// atomic list, an empty map, or the existence of a list map's item.
/// `skip` says which paths belong to nobody (identity, the other endpoint).
pub fn leaves(
    value: &Value,
    schema: &Value,
    prefix: &mut Path,
    out: &mut BTreeSet<Path>,
    skip: &dyn Fn(&Path) -> bool,
) {
    match value {
        Value::Object(map) if !map.is_empty() || prefix.is_empty() => {
            let root = prefix.is_empty();
            for (k, v) in map {
                prefix.push(Seg::F(k.clone()));
                let descend = !skip(prefix) || (root && k == "metadata");
                if descend {
                    leaves(v, child(schema, k, root), prefix, out, skip);
                }
                prefix.pop();
            }
        }
        Value::Array(items) if !skip(prefix) => match list_type(schema) {
            List::Map(keys) if items.iter().all(|i| item_key(i, &keys).is_some()) => {
                for item in items {
                    let Some(key) = item_key(item, &keys) else {
                        continue;
                    };
                    prefix.push(Seg::K(key));
                    out.insert(prefix.clone());
                    if let Value::Object(fields) = item {
                        for (k, v) in fields {
                            prefix.push(Seg::F(k.clone()));
                            leaves(v, child(&schema["items"], k, false), prefix, out, skip);
                            prefix.pop();
                        }
                    }
                    prefix.pop();
                }
            }
            List::Set => {
                for item in items {
                    prefix.push(Seg::V(item.to_string()));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            _ => {
                out.insert(prefix.clone());
            }
        },
        _ if prefix.is_empty() || skip(prefix) => {}
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// Whether `path` only says something exists (a list map's item, an empty
/// map): owning it is no claim on a value.
pub fn is_container(path: &Path, applied: &Value) -> bool {
    matches!(path.last(), Some(Seg::K(_)))
        || get(applied, path).is_some_and(|v| v.as_object().is_some_and(Map::is_empty))
}

fn step<'a>(value: &'a Value, seg: &Seg) -> Option<&'a Value> {
    match seg {
        Seg::F(k) => value.get(k),
        Seg::K(key) => {
            let wanted: Value = serde_json::from_str(key).ok()?;
            let wanted = wanted.as_object()?;
            value
                .as_array()?
                .iter()
                .find(|item| wanted.iter().all(|(k, v)| item.get(k) == Some(v)))
        }
        Seg::V(json) => {
            let wanted: Value = serde_json::from_str(json).ok()?;
            value.as_array()?.iter().find(|item| **item == wanted)
        }
    }
}

/// The value at `path`.
pub fn get<'a>(value: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    path.iter().try_fold(value, step)
}

fn step_mut<'a>(value: &'a mut Value, seg: &Seg, create: bool) -> Option<&'a mut Value> {
    match seg {
        Seg::F(k) => {
            if !value.is_object() {
                if !create {
                    return None;
                }
                *value = json!({});
            }
            let map = value.as_object_mut()?;
            if create && !map.contains_key(k) {
                map.insert(k.clone(), json!({}));
            }
            map.get_mut(k)
        }
        Seg::K(key) => {
            let wanted: Value = serde_json::from_str(key).ok()?;
            if !value.is_array() {
                if !create {
                    return None;
                }
                *value = json!([]);
            }
            let items = value.as_array_mut()?;
            let matches = |item: &Value| {
                wanted
                    .as_object()
                    .is_some_and(|w| w.iter().all(|(k, v)| item.get(k) == Some(v)))
            };
            let at = match items.iter().position(matches) {
                Some(at) => at,
                None if create => {
                    items.push(wanted);
                    items.len() - 1
                }
                None => return None,
            };
            items.get_mut(at)
        }
        Seg::V(json) => {
            let wanted: Value = serde_json::from_str(json).ok()?;
            if !value.is_array() {
                if !create {
                    return None;
                }
                *value = json!([]);
            }
            let items = value.as_array_mut()?;
            let at = match items.iter().position(|item| *item == wanted) {
                Some(at) => at,
                None if create => {
                    items.push(wanted);
                    items.len() - 1
                }
                None => return None,
            };
            items.get_mut(at)
        }
    }
}

/// Sets `path` in `value` to `leaf` (as `applied` has it): a list map's
/// item or a set's value is made to exist; an empty map keeps what is
/// there (others' keys stay); anything else is replaced.
pub fn set(value: &mut Value, path: &[Seg], leaf: &Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut here = value;
    for seg in parents {
        match step_mut(here, seg, true) {
            Some(next) => here = next,
            None => return,
        }
    }
    match last {
        Seg::K(_) | Seg::V(_) => {
            step_mut(here, last, true);
        }
        Seg::F(_) => {
            if let Some(slot) = step_mut(here, last, true) {
                let keep = leaf.as_object().is_some_and(Map::is_empty) && slot.is_object();
                if !keep {
                    *slot = leaf.clone();
                }
            }
        }
    }
}

/// Removes what `path` names from `value`.
pub fn remove(value: &mut Value, path: &[Seg]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut here = value;
    for seg in parents {
        match step_mut(here, seg, false) {
            Some(next) => here = next,
            None => return,
        }
    }
    match last {
        Seg::F(k) => {
            if let Some(map) = here.as_object_mut() {
                map.remove(k);
            }
        }
        Seg::K(_) | Seg::V(_) => {
            let Some(found) = get(here, std::slice::from_ref(last)).cloned() else {
                return;
            };
            if let Some(items) = here.as_array_mut() {
                items.retain(|item| *item != found);
            }
        }
    }
}

/// Puts the items of every list map and set in `merged` in the order
/// `applied` lists them, the items only others have after them (in the
/// order they were): ownership is by key, but order is the applier's.
pub fn order_like(merged: &mut Value, applied: &Value, schema: &Value, root: bool) {
    match (merged, applied) {
        (Value::Object(merged), Value::Object(applied)) => {
            for (k, a) in applied {
                if let Some(m) = merged.get_mut(k) {
                    order_like(m, a, child(schema, k, root), false);
                }
            }
        }
        (Value::Array(merged), Value::Array(applied)) => {
            let identity = |item: &Value| -> Option<String> {
                match list_type(schema) {
                    List::Map(keys) => item_key(item, &keys),
                    List::Set => Some(item.to_string()),
                    List::Atomic => None,
                }
            };
            let wanted: Vec<Option<String>> = applied.iter().map(identity).collect();
            if wanted.iter().any(Option::is_none) {
                return;
            }
            let rank = |item: &Value| {
                let id = identity(item);
                wanted.iter().position(|w| *w == id).unwrap_or(usize::MAX)
            };
            merged.sort_by_key(|item| rank(item));
            for item in merged.iter_mut() {
                let position = rank(item);
                if let Some(a) = applied.get(position) {
                    order_like(item, a, &schema["items"], false);
                }
            }
        }
        _ => {}
    }
}

fn seg_key(seg: &Seg) -> String {
    match seg {
        Seg::F(k) => format!("f:{k}"),
        Seg::K(key) => format!("k:{key}"),
        Seg::V(json) => format!("v:{json}"),
    }
}

/// The paths as FieldsV1 (`{"f:spec":{"f:devices":{"k:{…}":{".":{},"f:count":{}}}}}`).
pub fn fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = json!({});
    for path in paths {
        let mut here = &mut root;
        for seg in path {
            here = &mut here[seg_key(seg)];
            if !here.is_object() {
                *here = json!({});
            }
        }
        // A list map's item owned as such: `.` inside its entry.
        if matches!(path.last(), Some(Seg::K(_))) {
            here["."] = json!({});
        }
    }
    root
}

/// The paths FieldsV1 names.
pub fn paths_of(fields: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(map) = fields.as_object().filter(|m| !m.is_empty()) else {
        if !prefix.is_empty() {
            out.insert(prefix.clone());
        }
        return;
    };
    for (k, v) in map {
        let seg = if k == "." {
            out.insert(prefix.clone());
            continue;
        } else if let Some(key) = k.strip_prefix("f:") {
            Seg::F(key.to_string())
        } else if let Some(key) = k.strip_prefix("k:") {
            Seg::K(key.to_string())
        } else if let Some(json) = k.strip_prefix("v:") {
            Seg::V(json.to_string())
        } else {
            continue;
        };
        prefix.push(seg);
        paths_of(v, prefix, out);
        prefix.pop();
    }
}

/// A path as a conflict names it: `.spec.devices[name="gpu"].count`.
pub fn display(path: &Path) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::F(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::K(key) => {
                let fields: Value = serde_json::from_str(key).unwrap_or(Value::Null);
                let parts: Vec<String> = fields
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            Seg::V(json) => out.push_str(&format!("[={json}]")),
        }
    }
    out
}
