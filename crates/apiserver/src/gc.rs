//! Owner-reference garbage collection (`apiserver.md` §3.6), background and
//! orphan propagation: when an object is gone, each dependent that names it
//! in `ownerReferences` either loses that reference (orphan, or it still has
//! a live owner) or is deleted (finalizers still hold it), which in turn
//! collects its own dependents.
//!
//! Dependents are found by scanning the store: fine for the thousands of
//! objects an embedded control plane holds.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::http::{ApiServer, has_finalizers};
use crate::object::{now, set_resource_version};
use crate::store::{Stored, Write};

fn owner_uids(object: &Value) -> Vec<String> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// What happens to one dependent of a deleted owner.
enum Fate {
    /// Drop the reference and keep the object.
    Release(Value),
    /// Mark it for deletion: finalizers hold it.
    Mark(Value),
    /// Delete it now.
    Delete,
}

fn fate(mut object: Value, owner: &str, orphan: bool, live: &BTreeSet<String>) -> Fate {
    let others_alive = owner_uids(&object)
        .iter()
        .any(|u| u != owner && live.contains(u));
    if orphan || others_alive {
        let emptied = object["metadata"]["ownerReferences"]
            .as_array_mut()
            .is_some_and(|refs| {
                refs.retain(|r| r["uid"].as_str() != Some(owner));
                refs.is_empty()
            });
        if emptied && let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("ownerReferences");
        }
        return Fate::Release(object);
    }
    if has_finalizers(&object) {
        if object["metadata"].get("deletionTimestamp").is_none() {
            let generation = object["metadata"]["generation"].as_i64().unwrap_or(1);
            object["metadata"]["deletionTimestamp"] = json!(now());
            object["metadata"]["generation"] = json!(generation + 1);
        }
        return Fate::Mark(object);
    }
    Fate::Delete
}

fn decode(stored: &Stored) -> Option<Value> {
    let mut object: Value = serde_json::from_slice(&stored.value).ok()?;
    set_resource_version(&mut object, stored.revision);
    Some(object)
}

fn encode(object: &Value) -> Vec<u8> {
    let mut stored = object.clone();
    if let Some(meta) = stored.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    stored.to_string().into_bytes()
}

/// Collects the dependents of the object whose uid was `owner`.
pub async fn collect(server: Arc<ApiServer>, owner: String, orphan: bool) {
    let s = server.clone();
    let Ok(Ok((_, everything))) =
        tokio::task::spawn_blocking(move || s.store().list("/", None, None)).await
    else {
        return;
    };
    let objects: Vec<(Stored, Value)> = everything
        .into_iter()
        .filter_map(|stored| decode(&stored).map(|o| (stored, o)))
        .collect();
    let live: BTreeSet<String> = objects
        .iter()
        .filter_map(|(_, o)| o["metadata"]["uid"].as_str().map(str::to_string))
        .collect();
    for (stored, object) in objects {
        if !owner_uids(&object).contains(&owner) {
            continue;
        }
        let uid = object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let write = match fate(object, &owner, orphan, &live) {
            Fate::Release(o) | Fate::Mark(o) => Write::Update {
                key: stored.key.clone(),
                expected: Some(stored.revision),
                value: encode(&o),
            },
            Fate::Delete => Write::Delete {
                key: stored.key.clone(),
                expected: Some(stored.revision),
            },
        };
        let deleted = matches!(write, Write::Delete { .. });
        // A conflict means someone changed the dependent meanwhile; their
        // write will be seen by the next collection that concerns it.
        if let Ok(Ok(_)) = server.store().submit(write).await
            && deleted
        {
            Box::pin(collect(server.clone(), uid, false)).await;
        }
    }
}
