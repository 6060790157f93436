//! Namespaces (`apiserver.md` §3.7): `default`, `kube-system` and
//! `kube-public` always exist; objects go only into namespaces that exist
//! and are not terminating; deleting a namespace marks it Terminating,
//! deletes everything in it (finalizers respected), then the namespace.

use serde_json::{Value, json};

use crate::keyspace::Keyspace;
use crate::object::{Identity, prepare_create};
use crate::resources::{Resource, builtins};
use crate::store::{Error, Write};

/// Namespaces every server has.
pub const BUILT_IN: [&str; 3] = ["default", "kube-system", "kube-public"];

fn namespaces() -> Resource {
    builtins()
        .into_iter()
        .find(|r| r.group.is_empty() && r.plural == "namespaces")
        .expect("namespaces are built in")
}

/// Store key of a namespace.
pub fn key(name: &str) -> String {
    namespaces().key(None, name)
}

/// Gives a new Namespace its status.
pub fn activate(namespace: &mut Value) {
    namespace["spec"] = json!({ "finalizers": ["kubernetes"] });
    namespace["status"] = json!({ "phase": "Active" });
}

/// Creates namespace `name` unless it exists (blocking).
pub fn create(store: &Keyspace, name: &str) -> Result<(), Error> {
    create_all(store, &[name])
}

/// The write that creates namespace `name`.
fn creation(name: &str) -> Result<Write, Error> {
    let mut object = json!({ "metadata": { "name": name } });
    if prepare_create(&mut object, &namespaces(), None, &Identity::fresh()).is_err() {
        return Err(Error::NotFound(format!(
            "namespace name {name:?} is invalid"
        )));
    }
    activate(&mut object);
    Ok(Write::Create {
        key: key(name),
        value: object.to_string().into_bytes(),
    })
}

/// Creates those of `names` that do not exist, in one commit (blocking).
fn create_all(store: &Keyspace, names: &[&str]) -> Result<(), Error> {
    let mut writes = Vec::new();
    for name in names {
        if store.get(&key(name))?.is_none() {
            writes.push(creation(name)?);
        }
    }
    if writes.is_empty() {
        return Ok(());
    }
    for outcome in store.write_all(writes) {
        match outcome {
            Ok(_) | Err(Error::AlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Creates the built-in namespaces that are missing.
pub fn ensure_built_in(store: &Keyspace) -> Result<(), Error> {
    create_all(store, &BUILT_IN)
}

/// Why an object cannot be created in `namespace`, if it cannot.
pub fn refuse_content(store: &Keyspace, namespace: &str) -> Result<Option<(u16, String)>, Error> {
    let Some(stored) = store.get(&key(namespace))? else {
        return Ok(Some((404, format!("namespaces \"{namespace}\" not found"))));
    };
    let object: Value = serde_json::from_slice(&stored.value).unwrap_or(Value::Null);
    if object["metadata"].get("deletionTimestamp").is_some() {
        return Ok(Some((
            403,
            format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ),
        )));
    }
    Ok(None)
}

/// Deletes everything in a terminating namespace, then the namespace.
pub async fn terminate(store: Keyspace, name: String) {
    loop {
        let s = store.clone();
        let Ok(Ok((_, everything))) =
            tokio::task::spawn_blocking(move || s.list("/", None, None)).await
        else {
            return;
        };
        let mut remaining = 0;
        for stored in everything {
            let Ok(mut object) = serde_json::from_slice::<Value>(&stored.value) else {
                continue;
            };
            if object["metadata"]["namespace"].as_str() != Some(name.as_str()) {
                continue;
            }
            remaining += 1;
            let Some(write) = crate::object::deletion_step(&stored, &mut object) else {
                continue;
            };
            let _ = store.submit(write).await;
        }
        if remaining == 0 {
            let _ = store
                .submit(Write::Delete {
                    key: key(&name),
                    expected: None,
                })
                .await;
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Resumes the terminations a restart interrupted.
pub async fn resume(store: Keyspace, tasks: modelplane_supervisor::Supervisor) {
    let s = store.clone();
    let prefix = namespaces().prefix();
    let Ok(Ok((_, all))) = tokio::task::spawn_blocking(move || s.list(&prefix, None, None)).await
    else {
        return;
    };
    for stored in all {
        let Ok(object) = serde_json::from_slice::<Value>(&stored.value) else {
            continue;
        };
        if object["metadata"].get("deletionTimestamp").is_some()
            && let Some(name) = object["metadata"]["name"].as_str()
        {
            tasks.spawn(
                "namespace termination",
                terminate(store.clone(), name.to_string()),
            );
        }
    }
}
