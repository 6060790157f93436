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

/// Which part of an object a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The main resource; `status` is left out when it has its own subresource.
    Main {
        /// The kind has a status subresource.
        status_subresource: bool,
    },
    /// The status subresource: only `status`.
    Status,
}

impl Scope {
    fn subresource(self) -> Option<&'static str> {
        match self {
            Scope::Status => Some("status"),
            Scope::Main { .. } => None,
        }
    }
}

/// Fields no manager owns in `scope`: identity, server-owned metadata, and
/// what belongs to the other endpoint.
fn ignored(path: &[String], scope: Scope) -> bool {
    let first = path.first().map(String::as_str);
    match scope {
        Scope::Status => first != Some("status"),
        Scope::Main { status_subresource } => match path {
            [only] => {
                matches!(only.as_str(), "apiVersion" | "kind")
                    || (status_subresource && only == "status")
            }
            [first, ..] if first == "status" => status_subresource,
            [meta, key, ..] if meta == "metadata" => !matches!(
                key.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences"
            ),
            _ => false,
        },
    }
}

/// The leaf paths of an object in `scope` (maps recurse; anything else is a leaf).
fn leaves(value: &Value, scope: Scope, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match value {
        Value::Object(map) if !map.is_empty() || prefix.is_empty() => {
            for (k, v) in map {
                prefix.push(k.clone());
                // `metadata` alone is no field, only what is inside it.
                if !ignored(prefix, scope) || (prefix.len() == 1 && k == "metadata") {
                    leaves(v, scope, prefix, out);
                }
                prefix.pop();
            }
        }
        _ if prefix.is_empty() || ignored(prefix, scope) => {}
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
    if here.is_object() {
        here[last.as_str()] = leaf;
    }
}

/// One entry of `metadata.managedFields`: who owns which fields, through
/// which operation and endpoint.
#[derive(Clone, Debug)]
struct Entry {
    manager: String,
    operation: String,
    subresource: Option<String>,
    api_version: Value,
    time: Value,
    paths: BTreeSet<Path>,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    fn to_json(&self) -> Value {
        let mut entry = json!({
            "manager": self.manager, "operation": self.operation, "apiVersion": self.api_version,
            "time": self.time, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(&self.paths),
        });
        if let Some(sub) = &self.subresource {
            entry["subresource"] = json!(sub);
        }
        entry
    }
}

/// The entries of `metadata.managedFields`.
fn entries(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let mut paths = BTreeSet::new();
            paths_of(&entry["fieldsV1"], &mut Vec::new(), &mut paths);
            Some(Entry {
                manager: entry["manager"].as_str()?.to_string(),
                operation: entry["operation"].as_str().unwrap_or("Apply").to_string(),
                subresource: entry["subresource"].as_str().map(str::to_string),
                api_version: entry["apiVersion"].clone(),
                time: entry["time"].clone(),
                paths,
            })
        })
        .collect()
}

fn store_entries(object: &mut Value, entries: &[Entry]) {
    let kept: Vec<Value> = entries
        .iter()
        .filter(|e| !e.paths.is_empty())
        .map(Entry::to_json)
        .collect();
    if let Some(meta) = object["metadata"].as_object_mut() {
        if kept.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(kept));
        }
    }
}

/// Applies `applied` for `manager` onto `live` (absent for a create), in
/// `scope`: the manager owns what it applies; what it applied before and
/// leaves out now goes unless another manager owns it; a field another
/// manager owns with a different value is a conflict unless `force`, which
/// takes it over.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    now: &str,
    scope: Scope,
) -> Result<Value, Conflicts> {
    let subresource = scope.subresource();
    let mut wanted = BTreeSet::new();
    leaves(applied, scope, &mut Vec::new(), &mut wanted);
    let mut all = live.map(entries).unwrap_or_default();
    let previous: BTreeSet<Path> = all
        .iter()
        .find(|e| e.is(manager, "Apply", subresource))
        .map(|e| e.paths.clone())
        .unwrap_or_default();
    all.retain(|e| !e.is(manager, "Apply", subresource));

    let conflicts: Vec<(String, String)> = wanted
        .iter()
        .filter(|path| live.and_then(|l| get(l, path)) != get(applied, path))
        .flat_map(|path| {
            all.iter()
                .filter(|e| e.manager != manager && e.paths.contains(path))
                .map(|e| (e.manager.clone(), path.join(".")))
        })
        .collect();
    if !conflicts.is_empty() && !force {
        return Err(Conflicts(conflicts));
    }
    // What this manager applies now is its own alone (forced, or agreed).
    for entry in &mut all {
        if force || entry.manager == manager {
            entry.paths.retain(|p| !wanted.contains(p));
        }
    }

    let mut result = live.cloned().unwrap_or_else(|| json!({}));
    for path in previous.difference(&wanted) {
        if !all.iter().any(|e| e.paths.contains(path)) {
            remove(&mut result, path);
        }
    }
    for path in &wanted {
        if let Some(value) = get(applied, path) {
            set(&mut result, path, value.clone());
        }
    }
    if scope != Scope::Status {
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
    }
    if !result["metadata"].is_object() {
        result["metadata"] = json!({});
    }
    all.push(Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        subresource: subresource.map(str::to_string),
        api_version: applied["apiVersion"].clone(),
        time: json!(now),
        paths: wanted,
    });
    store_entries(&mut result, &all);
    Ok(result)
}

/// Records a write that is not an apply (create, replace, patch): `manager`
/// takes ownership of every field in `scope` it set or changed, from
/// whoever owned it (updates never conflict); fields it removed are owned by
/// nobody. Kept in `new`'s `metadata.managedFields`, based on `old`'s.
pub fn record_update(old: Option<&Value>, new: &mut Value, manager: &str, now: &str, scope: Scope) {
    let subresource = scope.subresource();
    let mut after = BTreeSet::new();
    leaves(new, scope, &mut Vec::new(), &mut after);
    let changed: BTreeSet<Path> = after
        .iter()
        .filter(|p| old.and_then(|o| get(o, p)) != get(new, p))
        .cloned()
        .collect();
    let mut all = old.map(entries).unwrap_or_default();
    // Only fields in this write's scope change hands; the other endpoint's
    // (spec for a status write, status for a main one) stay as they were.
    for entry in &mut all {
        entry
            .paths
            .retain(|p| (ignored(p, scope) || after.contains(p)) && !changed.contains(p));
    }
    if !changed.is_empty() {
        match all
            .iter_mut()
            .find(|e| e.is(manager, "Update", subresource))
        {
            Some(entry) => {
                entry.paths.extend(changed);
                entry.time = json!(now);
            }
            None => all.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                subresource: subresource.map(str::to_string),
                api_version: new["apiVersion"].clone(),
                time: json!(now),
                paths: changed,
            }),
        }
    }
    store_entries(new, &all);
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-30T09:00:00Z";

    fn cm(data: Value) -> Value {
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" }, "data": data })
    }

    const MAIN: Scope = Scope::Main {
        status_subresource: false,
    };

    fn apply(
        live: Option<&Value>,
        applied: &Value,
        manager: &str,
        force: bool,
        now: &str,
    ) -> Result<Value, Conflicts> {
        super::apply(live, applied, manager, force, now, MAIN)
    }

    fn managers(object: &Value) -> Vec<(String, BTreeSet<Path>)> {
        entries(object)
            .into_iter()
            .map(|e| (e.manager, e.paths))
            .collect()
    }

    #[test]
    fn an_apply_conflicts_with_a_field_an_update_set_unless_forced() {
        let alice = apply(None, &cm(json!({ "a": "1" })), "alice", false, NOW).expect("alice");
        let mut edited = alice.clone();
        edited["data"]["a"] = json!("edited");
        record_update(Some(&alice), &mut edited, "kubectl-edit", NOW, MAIN);
        let owners = managers(&edited);
        assert!(
            owners
                .iter()
                .any(|(m, p)| m == "kubectl-edit" && p.len() == 1)
        );
        assert!(
            owners.iter().all(|(m, _)| m != "alice"),
            "the update took data.a over"
        );
        let again = apply(Some(&edited), &cm(json!({ "a": "1" })), "alice", false, NOW);
        assert_eq!(
            again.expect_err("kubectl-edit owns data.a now").0,
            vec![("kubectl-edit".to_string(), "data.a".to_string())]
        );
        let forced =
            apply(Some(&edited), &cm(json!({ "a": "1" })), "alice", true, NOW).expect("forced");
        assert_eq!(forced["data"]["a"], "1");
    }

    #[test]
    fn a_status_write_leaves_the_spec_owners_alone() {
        let main = Scope::Main {
            status_subresource: true,
        };
        let applied = json!({ "apiVersion": "v1", "kind": "X", "metadata": { "name": "x" }, "spec": { "a": 1 } });
        let live = super::apply(None, &applied, "alice", false, NOW, main).expect("apply");
        let mut with_status = live.clone();
        with_status["status"] = json!({ "ready": true });
        record_update(Some(&live), &mut with_status, "ctl", NOW, Scope::Status);
        let owners = managers(&with_status);
        assert!(
            owners.iter().any(|(m, p)| m == "alice" && p.len() == 1),
            "{owners:?}"
        );
        assert!(owners.iter().any(|(m, _)| m == "ctl"));
    }

    #[test]
    fn status_is_applied_on_its_own_subresource() {
        let scope = Scope::Status;
        let live = json!({ "apiVersion": "v1", "kind": "X", "metadata": { "name": "x" }, "spec": { "a": 1 } });
        let applied = json!({ "apiVersion": "v1", "kind": "X", "metadata": { "name": "x" }, "status": { "ready": true }, "spec": { "a": 2 } });
        let out = super::apply(Some(&live), &applied, "ctl", true, NOW, scope).expect("status");
        assert_eq!(out["status"]["ready"], true);
        assert_eq!(
            out["spec"]["a"], 1,
            "the status endpoint writes only status"
        );
        assert_eq!(out["metadata"]["managedFields"][0]["subresource"], "status");
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
