//! Deletes: finalizers, propagation (background, foreground, orphan),
//! namespaces that take their contents, and CRDs that take their objects.

use super::*;

pub(super) async fn delete(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
    body: &Bytes,
    query: &BTreeMap<String, String>,
) -> Result<Response, Failure> {
    let options: Value = if body.is_empty() {
        json!({})
    } else {
        parse_body(body)?
    };
    if !options.is_object() {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "DeleteOptions must be a JSON object",
        ));
    }
    // DeleteOptions may ask for a dry run in the body too.
    let dry_target;
    let target = if options["dryRun"] == json!(["All"]) && !target.options.dry_run {
        dry_target = Target {
            options: WriteOptions {
                dry_run: true,
                ..target.options
            },
            ..target.clone()
        };
        &dry_target
    } else {
        target
    };
    let expected = options["preconditions"]["resourceVersion"]
        .as_str()
        .map(|rv| rv.parse::<Revision>())
        .transpose()
        .map_err(|_| {
            Failure::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "invalid preconditions.resourceVersion",
            )
        })?;
    let old = read(server, target, name).await?;
    if let Some(uid) = options["preconditions"]["uid"].as_str() {
        let stored_uid = decode(&old)?["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if stored_uid != uid {
            return Err(Failure {
                details: Some(target.details(name)),
                ..Failure::new(
                    StatusCode::CONFLICT,
                    "Conflict",
                    format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {stored_uid}"
                    ),
                )
            });
        }
    }
    if target.resource.is_namespaces() && crate::namespaces::BUILT_IN.contains(&name) {
        return Err(Failure {
            details: Some(target.details(name)),
            ..Failure::new(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
            )
        });
    }
    if let Some(expected) = expected
        && expected != old.revision
    {
        return Err(store_failure(
            target,
            name,
            store::Error::Conflict {
                key: old.key.clone(),
                expected,
                actual: old.revision,
            },
        ));
    }
    if target.resource.is_namespaces() {
        return delete_namespace(server, target, name).await;
    }
    let policy = options["propagationPolicy"]
        .as_str()
        .or(query.get("propagationPolicy").map(String::as_str));
    let orphan = policy == Some("Orphan") || options["orphanDependents"] == json!(true);
    let mut object = decode(&old)?;
    // Foreground: the owner waits, marked, until its dependents are gone.
    let foreground =
        policy == Some("Foreground") && object["metadata"].get("deletionTimestamp").is_none();
    if foreground {
        add_finalizer(&mut object, crate::gc::FOREGROUND);
    }
    // A CRD stays, held, until its objects are gone (their finalizers too).
    let crd = target.resource.is_crds();
    let cleanup = crd && object["metadata"].get("deletionTimestamp").is_none();
    if cleanup {
        add_finalizer(&mut object, CRD_CLEANUP);
    }
    if !has_finalizers(&object) {
        let stored = write(
            server,
            target,
            name,
            Write::Delete {
                key: old.key.clone(),
                expected: Some(old.revision),
            },
        )
        .await?;
        let deleted = decode(&stored)?;
        if target.options.dry_run {
            return Ok(json_response(StatusCode::OK, &deleted));
        }
        spawn_collection(server, &deleted, orphan);
        return Ok(json_response(StatusCode::OK, &deleted));
    }
    // Finalizers hold the object: mark it, once; whoever removes the last
    // finalizer deletes it.
    if !crate::object::mark_deleting(&mut object) {
        return Ok(json_response(StatusCode::OK, &object));
    }
    let stored = write(
        server,
        target,
        name,
        Write::Update {
            key: old.key.clone(),
            expected: Some(old.revision),
            value: encode(&object),
        },
    )
    .await?;
    if foreground && !target.options.dry_run {
        server.tasks().spawn(
            "foreground deletion",
            crate::gc::finish_foreground(server.clone(), stored.key.clone()),
        );
    }
    if cleanup && !target.options.dry_run {
        server.tasks().spawn(
            "CRD object deletion",
            delete_custom_objects(server.clone(), stored.key.clone()),
        );
    }
    stored_response(StatusCode::OK, &stored)
}

pub(super) fn added_finalizer(old: &Value, new: &Value) -> bool {
    let before = old["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    new["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|after| after.iter().any(|f| !before.contains(f)))
}

/// Resumes the CRD deletions a restart interrupted.
pub async fn resume_crd_deletions(server: Arc<ApiServer>) {
    let s = server.clone();
    let Ok(Ok((_, crds))) =
        tokio::task::spawn_blocking(move || s.store.list(CRD_PREFIX, None, None)).await
    else {
        return;
    };
    for stored in crds {
        if read_stored(&stored).is_ok_and(|crd| crd["metadata"].get("deletionTimestamp").is_some())
        {
            server.tasks().spawn(
                "CRD object deletion",
                delete_custom_objects(server.clone(), stored.key),
            );
        }
    }
}

/// The finalizer that holds a CRD until its objects are gone.
pub(super) const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

pub(super) fn add_finalizer(object: &mut Value, finalizer: &str) {
    let mut finalizers = object["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == finalizer) {
        finalizers.push(json!(finalizer));
    }
    object["metadata"]["finalizers"] = Value::Array(finalizers);
}

/// Deletes every object of the CRD at `key` being deleted, as Kubernetes
/// does: objects held by finalizers are marked and wait for them, their
/// dependents are collected; once none is left the CRD's cleanup finalizer
/// comes off (and the CRD goes, if nothing else holds it).
pub(super) async fn delete_custom_objects(server: Arc<ApiServer>, key: String) {
    loop {
        let mut changes = server.store.subscribe();
        let s = server.clone();
        let k = key.clone();
        let Ok(Ok(Some(stored))) = tokio::task::spawn_blocking(move || s.store.get(&k)).await
        else {
            return;
        };
        let Ok(mut crd) = read_stored(&stored) else {
            return;
        };
        let mut prefixes: Vec<String> = crate::crd::resources(&crd)
            .iter()
            .map(Resource::prefix)
            .collect();
        prefixes.dedup();
        let mut remaining = 0;
        for prefix in prefixes {
            let s = server.clone();
            let Ok(Ok((_, objects))) =
                tokio::task::spawn_blocking(move || s.store.list(&prefix, None, None)).await
            else {
                return;
            };
            remaining += objects.len();
            for stored in objects {
                let Ok(mut object) = read_stored(&stored) else {
                    continue;
                };
                let Some(write) = deletion_step(&stored, &mut object) else {
                    continue;
                };
                let deleted = matches!(write, Write::Delete { .. });
                if let Ok(Ok(_)) = server.store.submit(write).await
                    && deleted
                {
                    spawn_collection(&server, &object, false);
                }
            }
        }
        if remaining == 0 {
            if let Some(finalizers) = crd["metadata"]["finalizers"].as_array_mut() {
                finalizers.retain(|f| f != CRD_CLEANUP);
            }
            let write = if has_finalizers(&crd) {
                Write::Update {
                    key: key.clone(),
                    expected: Some(stored.revision),
                    value: encode(&crd),
                }
            } else {
                Write::Delete {
                    key: key.clone(),
                    expected: Some(stored.revision),
                }
            };
            let deleted = matches!(write, Write::Delete { .. });
            if let Ok(Ok(stored)) = server.store.submit(write).await {
                server.crd_written(&stored, deleted);
                return;
            }
            continue;
        }
        // Wait for a change (a finalizer removed) rather than poll.
        let _ = tokio::time::timeout(Duration::from_secs(1), changes.recv()).await;
    }
}

/// Marks a namespace Terminating and empties it in the background.
pub(super) async fn delete_namespace(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
) -> Result<Response, Failure> {
    let old = read(server, target, name).await?;
    let mut object = decode(&old)?;
    if crate::object::mark_deleting(&mut object) {
        object["status"]["phase"] = json!("Terminating");
        let stored = write(
            server,
            target,
            name,
            Write::Update {
                key: old.key.clone(),
                expected: Some(old.revision),
                value: encode(&object),
            },
        )
        .await?;
        object = decode(&stored)?;
        if !target.options.dry_run {
            server.tasks().spawn(
                "namespace termination",
                crate::namespaces::terminate(server.store().clone(), name.to_string()),
            );
        }
    }
    Ok(json_response(StatusCode::OK, &object))
}

/// Starts collecting the dependents of a deleted object.
pub(super) fn spawn_collection(server: &Arc<ApiServer>, deleted: &Value, orphan: bool) {
    if let Some(uid) = deleted["metadata"]["uid"].as_str() {
        server.tasks().spawn(
            "garbage collection",
            crate::gc::collect(server.clone(), uid.to_string(), orphan),
        );
    }
}
