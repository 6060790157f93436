//! Owner-reference garbage collection (`apiserver.md` §3.6), background and
//! orphan propagation: when an object is gone, each dependent that names it
//! in `ownerReferences` either loses that reference (orphan, or it still has
//! a live owner) or is deleted (finalizers still hold it), which in turn
//! collects its own dependents.
//!
//! Foreground deletion marks the owner with the `foregroundDeletion`
//! finalizer, deletes its dependents, and removes the finalizer once none is
//! left (resumed at startup for owners a restart interrupted).
//!
//! Dependents, and whether an owner still exists, come from the store's
//! owner index (`crate::owners`): a deletion reads only its dependents.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use crate::codec::{encode, read_stored};
use crate::object::has_finalizers;
use crate::server::ApiServer;
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
    /// Already marked, held by its finalizers: nothing to write.
    Wait,
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
        return if crate::object::mark_deleting(&mut object) {
            Fate::Mark(object)
        } else {
            Fate::Wait
        };
    }
    Fate::Delete
}

fn decode(stored: &Stored) -> Option<Value> {
    read_stored(stored).ok()
}

/// Reads the object at `key`, if it is there.
async fn read(server: &Arc<ApiServer>, key: &str) -> Option<(Stored, Value)> {
    let s = server.clone();
    let key = key.to_string();
    let stored = tokio::task::spawn_blocking(move || s.store().get(&key))
        .await
        .ok()?
        .ok()??;
    let object = decode(&stored)?;
    Some((stored, object))
}

/// Collects the dependents of the object whose uid was `owner`.
pub async fn collect(server: Arc<ApiServer>, owner: String, orphan: bool) {
    for key in server.store().dependents(&owner) {
        if let Some((stored, object)) = read(&server, &key).await {
            collect_one(&server, &owner, orphan, stored, object).await;
        }
    }
}

/// Attempts at one dependent whose writes keep losing races to others.
const ATTEMPTS: usize = 16;

/// Decides and writes the fate of one dependent of `owner`; a write that
/// loses a race reads the dependent again and decides again.
async fn collect_one(
    server: &Arc<ApiServer>,
    owner: &str,
    orphan: bool,
    mut stored: Stored,
    mut object: Value,
) {
    for _ in 0..ATTEMPTS {
        // Other owners of this dependent that still exist keep it alive.
        let live: BTreeSet<String> = owner_uids(&object)
            .into_iter()
            .filter(|u| u != owner && server.store().has_uid(u))
            .collect();
        let uid = object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let write = match fate(object, owner, orphan, &live) {
            Fate::Release(o) | Fate::Mark(o) => Write::Update {
                key: stored.key.clone(),
                expected: Some(stored.revision),
                value: encode(&o),
            },
            Fate::Wait => return,
            Fate::Delete => Write::Delete {
                key: stored.key.clone(),
                expected: Some(stored.revision),
            },
        };
        let deleted = matches!(write, Write::Delete { .. });
        match server.store().submit(write).await {
            Ok(Ok(stored)) => {
                server.crd_written(&stored, deleted);
                if deleted {
                    Box::pin(collect(server.clone(), uid, false)).await;
                }
                return;
            }
            Ok(Err(crate::store::Error::Conflict { .. })) => {
                // Changed meanwhile: read it again and decide again.
                let s = server.clone();
                let key = stored.key.clone();
                let Ok(Ok(Some(fresh))) =
                    tokio::task::spawn_blocking(move || s.store().get(&key)).await
                else {
                    return;
                };
                let Some(fresh_object) = decode(&fresh) else {
                    return;
                };
                if !owner_uids(&fresh_object).iter().any(|u| u == owner) {
                    return;
                }
                (stored, object) = (fresh, fresh_object);
            }
            _ => return,
        }
    }
}

/// Collects every object whose owners are all gone: dependents of owners
/// deleted around a crash, or whose collection gave up. Run at startup and
/// periodically; reads only the index and the objects it names.
pub async fn sweep(server: Arc<ApiServer>) {
    let store = server.store();
    let gone: Vec<String> = store
        .owners()
        .into_iter()
        .filter(|(owner, _)| !store.has_uid(owner))
        .map(|(owner, _)| owner)
        .collect();
    for owner in gone {
        collect(server.clone(), owner, false).await;
    }
}

/// The finalizer that holds an owner during foreground deletion.
pub const FOREGROUND: &str = "foregroundDeletion";

/// Deletes the dependents of the owner at `key`, then releases it: polls
/// until no object names it as owner, then removes `foregroundDeletion`
/// (the owner is deleted if no other finalizer remains).
pub async fn finish_foreground(server: Arc<ApiServer>, key: String) {
    loop {
        let s = server.clone();
        let k = key.clone();
        let Ok(Ok(Some(stored))) = tokio::task::spawn_blocking(move || s.store().get(&k)).await
        else {
            return;
        };
        let Some(mut owner) = decode(&stored) else {
            return;
        };
        let Some(uid) = owner["metadata"]["uid"].as_str().map(str::to_string) else {
            return;
        };
        let remaining = server.store().dependents(&uid).len();
        if remaining == 0 {
            if let Some(finalizers) = owner["metadata"]["finalizers"].as_array_mut() {
                finalizers.retain(|f| f != FOREGROUND);
            }
            let write = if has_finalizers(&owner) {
                Write::Update {
                    key: key.clone(),
                    expected: Some(stored.revision),
                    value: encode(&owner),
                }
            } else {
                Write::Delete {
                    key: key.clone(),
                    expected: Some(stored.revision),
                }
            };
            let deleted = matches!(write, Write::Delete { .. });
            match server.store().submit(write).await {
                Ok(Ok(stored)) => {
                    server.crd_written(&stored, deleted);
                    if deleted {
                        collect(server.clone(), uid, false).await;
                    }
                    return;
                }
                // Changed meanwhile: look again.
                _ => continue,
            }
        }
        let mut changes = server.store().subscribe();
        collect(server.clone(), uid, false).await;
        // Look again when anything changes (a dependent's finalizer removed),
        // or after a while: no polling writes while a finalizer holds it.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), changes.recv()).await;
    }
}

/// Resumes the foreground deletions a restart interrupted.
pub async fn resume(server: Arc<ApiServer>) {
    let s = server.clone();
    let Ok(Ok((_, all))) =
        tokio::task::spawn_blocking(move || s.store().list("/", None, None)).await
    else {
        return;
    };
    for stored in all {
        let waiting = decode(&stored).is_some_and(|o| {
            o["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == FOREGROUND))
        });
        if waiting {
            server.tasks().spawn(
                "foreground deletion",
                finish_foreground(server.clone(), stored.key),
            );
        }
    }
}
