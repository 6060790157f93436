//! Server-side apply (`apiserver.md` §3.12): each field manager owns the
//! fields it applied; maps merge key by key, lists by their schema's
//! `x-kubernetes-list-type` (a map list item by item by its keys, a set value
//! by value, an atomic list whole); applying again removes the fields that
//! manager stopped applying unless another manager owns them; setting a
//! field another manager owns to a different value is a conflict unless
//! forced, which transfers ownership. Ownership is kept in
//! `metadata.managedFields` in Kubernetes' FieldsV1 shape (`fields`).

mod fields;

use std::collections::BTreeSet;

use serde_json::{Value, json};

use fields::{Path, Seg, fields_v1, get, is_container, leaves, order_like, paths_of, remove, set};

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
fn ignored(path: &Path, scope: Scope) -> bool {
    let name = |i: usize| match path.get(i) {
        Some(Seg::F(k)) => Some(k.as_str()),
        _ => None,
    };
    match scope {
        Scope::Status => name(0) != Some("status"),
        Scope::Main { status_subresource } => match (name(0), path.len()) {
            (Some("apiVersion" | "kind"), 1) => true,
            (Some("status"), _) => status_subresource,
            (Some("metadata"), n) if n >= 2 => !matches!(
                name(1),
                Some("labels" | "annotations" | "finalizers" | "ownerReferences")
            ),
            _ => false,
        },
    }
}

/// The leaf paths of `value` in `scope`, read through `schema`.
fn owned(value: &Value, schema: &Value, scope: Scope) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    leaves(value, schema, &mut Vec::new(), &mut out, &|p| {
        ignored(p, scope)
    });
    out
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
/// `scope`, reading both through `schema` (the kind's structural schema, or
/// null): the manager owns what it applies; what it applied before and
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
    schema: &Value,
) -> Result<Value, Conflicts> {
    let subresource = scope.subresource();
    let wanted = owned(applied, schema, scope);
    let mut all = live.map(entries).unwrap_or_default();
    let previous: BTreeSet<Path> = all
        .iter()
        .find(|e| e.is(manager, "Apply", subresource))
        .map(|e| e.paths.clone())
        .unwrap_or_default();
    all.retain(|e| !e.is(manager, "Apply", subresource));

    // Saying that something exists (a list item, a map) claims no value.
    let changes = |path: &Path| {
        !is_container(path, applied) && live.and_then(|l| get(l, path)) != get(applied, path)
    };
    let conflicts: Vec<(String, String)> = wanted
        .iter()
        .filter(|path| changes(path))
        .flat_map(|path| {
            all.iter()
                .filter(|e| e.manager != manager && e.paths.contains(path))
                .map(|e| (e.manager.clone(), fields::display(path)))
        })
        .collect();
    if !conflicts.is_empty() && !force {
        return Err(Conflicts(conflicts));
    }
    // What this manager applies now is its own alone (forced, or agreed).
    for entry in &mut all {
        if force || entry.manager == manager {
            entry
                .paths
                .retain(|p| !wanted.contains(p) || is_container(p, applied));
        }
    }

    let mut result = live.cloned().unwrap_or_else(|| json!({}));
    // What nobody else owns (anywhere below it) goes; a list item goes
    // whole, its fields with it.
    let mut removed: Vec<&Path> = Vec::new();
    for path in previous.difference(&wanted) {
        let gone_with_parent = removed.iter().any(|r| path.starts_with(r));
        let kept = all
            .iter()
            .any(|e| e.paths.iter().any(|p| p.starts_with(path)));
        if !gone_with_parent && !kept {
            remove(&mut result, path);
            removed.push(path);
        }
    }
    for path in &wanted {
        if let Some(value) = get(applied, path) {
            set(&mut result, path, value);
        }
    }
    order_like(&mut result, applied, schema, true);
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
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    now: &str,
    scope: Scope,
    schema: &Value,
) {
    let subresource = scope.subresource();
    let after = owned(new, schema, scope);
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
        super::apply(live, applied, manager, force, now, MAIN, &Value::Null)
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
        record_update(
            Some(&alice),
            &mut edited,
            "kubectl-edit",
            NOW,
            MAIN,
            &Value::Null,
        );
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
        let live =
            super::apply(None, &applied, "alice", false, NOW, main, &Value::Null).expect("apply");
        let mut with_status = live.clone();
        with_status["status"] = json!({ "ready": true });
        record_update(
            Some(&live),
            &mut with_status,
            "ctl",
            NOW,
            Scope::Status,
            &Value::Null,
        );
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
        let out = super::apply(Some(&live), &applied, "ctl", true, NOW, scope, &Value::Null)
            .expect("status");
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

    /// A kind whose `spec.devices` is a list map keyed by name.
    fn device_schema() -> Value {
        json!({ "type": "object", "properties": { "spec": { "type": "object", "properties": {
            "devices": { "type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": { "type": "object", "properties": {
                    "name": { "type": "string" }, "count": { "type": "integer" },
                    "claim": { "type": "string" } } } } } } } })
    }

    fn class(devices: Value) -> Value {
        json!({ "apiVersion": "x/v1", "kind": "Class", "metadata": { "name": "c" },
                "spec": { "devices": devices } })
    }

    fn apply_to(
        live: Option<&Value>,
        applied: &Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, Conflicts> {
        super::apply(live, applied, manager, force, NOW, MAIN, &device_schema())
    }

    #[test]
    fn an_empty_map_claims_no_one_elses_keys() {
        let mut alice_cm = cm(json!({ "k": "v" }));
        alice_cm["metadata"]["labels"] = json!({ "a": "1" });
        let alice = apply(None, &alice_cm, "alice", false, NOW).expect("alice");
        let mut empty = cm(json!({}));
        empty["metadata"]["labels"] = json!({});
        let bob = apply(Some(&alice), &empty, "bob", false, NOW).expect("bob");
        assert_eq!(bob["data"], json!({ "k": "v" }));
        assert_eq!(bob["metadata"]["labels"], json!({ "a": "1" }));
    }

    #[test]
    fn list_map_items_merge_by_their_keys_and_conflict_field_by_field() {
        let alice = apply_to(
            None,
            &class(json!([{ "name": "gpu", "count": 1 }])),
            "alice",
            false,
        )
        .expect("alice");
        assert_eq!(
            alice["metadata"]["managedFields"][0]["fieldsV1"],
            json!({ "f:spec": { "f:devices": { "k:{\"name\":\"gpu\"}": {
                ".": {}, "f:count": {}, "f:name": {} } } } })
        );
        let both = apply_to(
            Some(&alice),
            &class(json!([{ "name": "nic", "count": 2 }])),
            "bob",
            false,
        )
        .expect("another item is bob's own");
        assert_eq!(
            both["spec"]["devices"],
            json!([{ "name": "nic", "count": 2 }, { "name": "gpu", "count": 1 }])
        );
        let conflict = apply_to(
            Some(&both),
            &class(json!([{ "name": "gpu", "count": 3 }])),
            "bob",
            false,
        )
        .expect_err("alice's count");
        assert_eq!(
            conflict.0,
            vec![(
                "alice".to_string(),
                "spec.devices[name=\"gpu\"].count".to_string()
            )]
        );
        // Alice stops applying her item: it goes, bob's stays.
        let alone = apply_to(Some(&both), &class(json!([])), "alice", false).expect("alice again");
        assert_eq!(
            alone["spec"]["devices"],
            json!([{ "name": "nic", "count": 2 }])
        );
    }

    #[test]
    fn a_field_another_writer_defaulted_inside_an_item_is_no_conflict() {
        // kubectl's client-side apply created it; the server defaulted `claim`.
        let mut created = class(json!([{ "name": "gpu", "count": 1, "claim": "DRA" }]));
        record_update(
            None,
            &mut created,
            "kubectl-client-side-apply",
            NOW,
            MAIN,
            &device_schema(),
        );
        // The same file applied server-side, without the default: no conflict.
        let applied = apply_to(
            Some(&created),
            &class(json!([{ "name": "gpu", "count": 1 }])),
            "kubectl",
            false,
        )
        .expect("nothing changes");
        assert_eq!(
            applied["spec"]["devices"],
            json!([{ "name": "gpu", "count": 1, "claim": "DRA" }])
        );
    }

    #[test]
    fn finalizers_are_a_set() {
        let with = |finalizers: Value| {
            let mut object = cm(json!({}));
            object["metadata"]["finalizers"] = finalizers;
            object
        };
        let alice = apply(None, &with(json!(["a.io/x"])), "alice", false, NOW).expect("alice");
        let both = apply(Some(&alice), &with(json!(["b.io/y"])), "bob", false, NOW).expect("bob");
        assert_eq!(both["metadata"]["finalizers"], json!(["b.io/y", "a.io/x"]));
        let left = apply(Some(&both), &with(json!([])), "alice", false, NOW).expect("alice again");
        assert_eq!(left["metadata"]["finalizers"], json!(["b.io/y"]));
    }

    #[test]
    fn items_keep_the_order_they_are_applied_in() {
        let applied = class(json!([{ "name": "l4", "count": 1 }, { "name": "h200", "count": 8 }]));
        let created = apply_to(None, &applied, "alice", false).expect("alice");
        assert_eq!(created["spec"]["devices"], applied["spec"]["devices"]);
        let bob = apply_to(
            Some(&created),
            &class(json!([{ "name": "a100", "count": 4 }])),
            "bob",
            false,
        )
        .expect("bob");
        let names: Vec<&str> = bob["spec"]["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["a100", "l4", "h200"],
            "bob's first, then the rest as they were"
        );
    }
}
