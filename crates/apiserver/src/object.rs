//! Object metadata as a Kubernetes API server keeps it (`apiserver.md`
//! §3.1–§3.4): server-owned fields, `generateName`, generation rules,
//! no-op detection and the status subresource split. Pure functions over
//! JSON objects; the caller supplies identity (uid, time, randomness) so the
//! rules are testable exactly.

use serde_json::{Map, Value, json};

pub use crate::codec::set_resource_version;
use crate::metadata_rules::{self, FieldError};
use crate::resources::{Resource, validate_name};
use crate::store::{Stored, Write};

/// Characters of a `generateName` suffix, as Kubernetes picks them.
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Metadata collections Go omits when empty.
const OMIT_WHEN_EMPTY: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];
/// Metadata only the server writes.
const SERVER_OWNED: [&str; 6] = [
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// A request the server refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// 422: a field is invalid.
    #[error("{field}: Invalid value: {message}")]
    Invalid {
        /// Field path, e.g. `metadata.name`.
        field: String,
        /// Why.
        message: String,
    },
    /// 422: labels or annotations are invalid, each cause named.
    #[error("{}", .0.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join(", "))]
    InvalidFields(Vec<FieldError>),
    /// 400: the request contradicts itself.
    #[error("{0}")]
    BadRequest(String),
    /// 409: a precondition the request carries does not hold.
    #[error("{0}")]
    Conflict(String),
}

/// What the server decides for a new object: its uid, its creation time and
/// the randomness behind a generated name.
#[derive(Clone, Debug)]
pub struct Identity {
    /// UUIDv4.
    pub uid: String,
    /// RFC 3339, seconds, `Z`.
    pub now: String,
    /// Five random bytes for a `generateName` suffix.
    pub random: [u8; 5],
}

impl Identity {
    /// A fresh identity: a random UUIDv4 and the current time.
    pub fn fresh() -> Identity {
        let uid = uuid::Uuid::new_v4();
        let mut random = [0u8; 5];
        random.copy_from_slice(&uid.as_bytes()[..5]);
        Identity {
            uid: uid.to_string(),
            now: now(),
            random,
        }
    }
}

/// The current time as `metadata` timestamps carry it.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `prefix` plus five characters chosen by `random`.
pub fn generated_name(prefix: &str, random: [u8; 5]) -> String {
    let suffix: String = random
        .iter()
        .map(|b| SUFFIX_ALPHABET[usize::from(*b) % SUFFIX_ALPHABET.len()] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// `metadata` of an object (made an empty map if missing or not a map).
/// Callers have checked that `object` is a JSON object.
fn metadata(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata was just made a map")
}

fn drop_empty_collections(meta: &mut Map<String, Value>) {
    for key in OMIT_WHEN_EMPTY {
        let empty = match meta.get(key) {
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty {
            meta.remove(key);
        }
    }
}

/// Readies a new object for storage: checks its name (or generates one) and
/// namespace, sets the server-owned metadata, and drops `status` when the
/// resource has a status subresource (a Node's excepted: see
/// [`Resource::keeps_status_on_create`]).
pub fn prepare_create(
    object: &mut Value,
    resource: &Resource,
    namespace: Option<&str>,
    identity: &Identity,
) -> Result<(), Refusal> {
    if !object.is_object() {
        return Err(Refusal::BadRequest(
            "the object is not a JSON object".into(),
        ));
    }
    object["apiVersion"] = json!(resource.api_version());
    object["kind"] = json!(resource.kind);
    if resource.status
        && !resource.keeps_status_on_create()
        && let Some(o) = object.as_object_mut()
    {
        o.remove("status");
    }
    let meta = metadata(object);
    for key in SERVER_OWNED {
        meta.remove(key);
    }
    meta.remove("managedFields");
    let name = match (
        meta.get("name").and_then(Value::as_str),
        meta.get("generateName").and_then(Value::as_str),
    ) {
        (Some(name), _) if !name.is_empty() => name.to_string(),
        (_, Some(prefix)) if !prefix.is_empty() => generated_name(prefix, identity.random),
        _ => {
            return Err(Refusal::Invalid {
                field: "metadata.name".into(),
                message: "name or generateName is required".into(),
            });
        }
    };
    validate_name(&name, resource.names_are_labels()).map_err(|message| Refusal::Invalid {
        field: "metadata.name".into(),
        message: format!("\"{name}\": {message}"),
    })?;
    meta.insert("name".into(), json!(name));
    match (resource.namespaced, namespace) {
        (true, Some(ns)) => match meta.get("namespace").and_then(Value::as_str) {
            Some(given) if given != ns => {
                return Err(Refusal::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
            _ => {
                meta.insert("namespace".into(), json!(ns));
            }
        },
        (true, None) => {
            return Err(Refusal::BadRequest(format!(
                "{} is namespaced: a namespace is required",
                resource.plural
            )));
        }
        (false, _) => {
            meta.remove("namespace");
        }
    }
    check_metadata(meta)?;
    meta.insert("uid".into(), json!(identity.uid));
    meta.insert("creationTimestamp".into(), json!(identity.now));
    meta.insert("generation".into(), json!(1));
    drop_empty_collections(meta);
    Ok(())
}

/// Labels and annotations as Kubernetes validates them.
fn check_metadata(meta: &Map<String, Value>) -> Result<(), Refusal> {
    let errors = metadata_rules::check(meta);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Refusal::InvalidFields(errors))
    }
}

/// Whether an update changed anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing but volatile metadata differs: keep the stored object, no new
    /// revision, no event.
    Unchanged,
    /// Store it.
    Changed,
}

/// The object without what a no-op comparison ignores: its revision and
/// the times in managedFields (a write that changes only who owns a field
/// is a change; one that only renews a time is not).
fn comparable(object: &Value) -> Value {
    let mut v = object.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        if let Some(entries) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
            for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
                entry.remove("time");
            }
        }
    }
    v
}

/// Everything generation tracks: the object without `metadata` (and
/// without `status` when the resource has a status subresource).
fn generational(object: &Value, status_subresource: bool) -> Value {
    let mut v = object.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        if status_subresource {
            o.remove("status");
        }
    }
    v
}

/// Readies a replacement of `old` (PUT, or a patch's result) on the main
/// endpoint: server-owned metadata carries over, `status` stays the old one
/// when the resource has a status subresource, generation moves when the
/// spec does; identifies no-op writes.
pub fn prepare_update(
    old: &Value,
    new: &mut Value,
    resource: &Resource,
) -> Result<Change, Refusal> {
    if !new.is_object() {
        return Err(Refusal::BadRequest(
            "the object is not a JSON object".into(),
        ));
    }
    new["apiVersion"] = json!(resource.api_version());
    new["kind"] = json!(resource.kind);
    if resource.status {
        match old.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        }
    }
    carry_metadata(old, new)?;
    check_metadata(metadata(new))?;
    let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
    let bumped = generational(old, resource.status) != generational(new, resource.status);
    metadata(new).insert(
        "generation".into(),
        json!(if bumped { generation + 1 } else { generation }),
    );
    Ok(if comparable(old) == comparable(new) {
        Change::Unchanged
    } else {
        Change::Changed
    })
}

/// A write to the status subresource: the old object with only the new
/// `status` (none if the request has none). Generation never moves.
pub fn prepare_status_update(old: &Value, new: &Value) -> (Value, Change) {
    let mut out = old.clone();
    match new.get("status") {
        Some(status) => out["status"] = status.clone(),
        None => {
            if let Some(o) = out.as_object_mut() {
                o.remove("status");
            }
        }
    }
    let change = if comparable(old) == comparable(&out) {
        Change::Unchanged
    } else {
        Change::Changed
    };
    (out, change)
}

/// A uid in a write is a precondition: the write is for that object and no
/// other (not one deleted and created again under the same name).
pub fn check_uid(old: &Value, new: &Value) -> Result<(), Refusal> {
    match (
        new["metadata"]["uid"].as_str(),
        old["metadata"]["uid"].as_str(),
    ) {
        (Some(given), Some(stored)) if given != stored => Err(Refusal::Conflict(format!(
            "Precondition failed: UID in precondition: {given}, UID in object meta: {stored}"
        ))),
        _ => Ok(()),
    }
}

/// Copies what the client may not change from `old` into `new`, and refuses
/// a rename or a move to another namespace.
fn carry_metadata(old: &Value, new: &mut Value) -> Result<(), Refusal> {
    check_uid(old, new)?;
    let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
    let meta = metadata(new);
    for key in ["name", "namespace"] {
        let given = meta.get(key).and_then(Value::as_str).unwrap_or_default();
        let stored = old_meta
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default();
        if key == "name" && !given.is_empty() && given != stored {
            return Err(Refusal::BadRequest(format!(
                "the name of the object ({given}) does not match the name on the URL ({stored})"
            )));
        }
        if let Some(v) = old_meta.get(key) {
            meta.insert(key.into(), v.clone());
        }
    }
    for key in SERVER_OWNED {
        match old_meta.get(key) {
            Some(v) => {
                meta.insert(key.into(), v.clone());
            }
            None => {
                meta.remove(key);
            }
        }
    }
    meta.remove("generateName");
    if let Some(g) = old_meta.get("generateName") {
        meta.insert("generateName".into(), g.clone());
    }
    drop_empty_collections(meta);
    Ok(())
}

/// The defaults Kubernetes gives built-in kinds that users see: a Secret's
/// `type` is `Opaque` unless set.
pub fn builtin_defaults(object: &mut Value, resource: &Resource) {
    if !(resource.group.is_empty() && resource.plural == "secrets") {
        return;
    }
    let Some(map) = object.as_object_mut() else {
        return;
    };
    if map.get("type").is_none_or(Value::is_null) {
        map.insert("type".into(), json!("Opaque"));
    }
    // `stringData` is write-only: merged into `data`, base64-encoded, over
    // what `data` has under the same key, as Kubernetes does.
    if let Some(Value::Object(strings)) = map.remove("stringData") {
        let data = map.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        for (key, value) in strings {
            if let (Some(text), Some(data)) = (value.as_str(), data.as_object_mut()) {
                data.insert(key, json!(crate::codec::base64(text.as_bytes())));
            }
        }
    }
}

/// Marks an object for deletion, as the first delete of an object held by
/// finalizers does: `deletionTimestamp` now, grace 0, generation bumped.
/// Returns false (and changes nothing) if it was already marked.
pub fn mark_deleting(object: &mut Value) -> bool {
    let meta = metadata(object);
    if meta.contains_key("deletionTimestamp") {
        return false;
    }
    let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
    meta.insert("deletionTimestamp".into(), json!(now()));
    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    meta.insert("generation".into(), json!(generation + 1));
    true
}

/// The next step of deleting a stored object on the server's own behalf
/// (a namespace's or a CRD's contents): delete it, or mark it for its
/// finalizers; `None` when it is marked and waiting already.
pub fn deletion_step(stored: &Stored, object: &mut Value) -> Option<Write> {
    if !has_finalizers(object) {
        return Some(Write::Delete {
            key: stored.key.clone(),
            expected: Some(stored.revision),
        });
    }
    mark_deleting(object).then(|| Write::Update {
        key: stored.key.clone(),
        expected: Some(stored.revision),
        value: crate::codec::encode(object),
    })
}

/// Whether finalizers hold the object.
pub fn has_finalizers(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_naming_another_uid_is_refused() {
        let old = json!({ "metadata": { "name": "p", "uid": "u1", "resourceVersion": "3" } });
        let resource = crate::resources::builtins()
            .into_iter()
            .find(|r| r.plural == "pods")
            .expect("pods");
        let mut new = json!({ "metadata": { "name": "p", "uid": "u0" }, "spec": {} });
        match prepare_update(&old, &mut new, &resource) {
            Err(Refusal::Conflict(m)) => assert_eq!(
                m,
                "Precondition failed: UID in precondition: u0, UID in object meta: u1"
            ),
            other => panic!("{other:?}"),
        }
        let mut same = json!({ "metadata": { "name": "p", "uid": "u1" }, "spec": {} });
        assert!(prepare_update(&old, &mut same, &resource).is_ok());
    }
}
