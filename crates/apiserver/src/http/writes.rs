//! Writes: create, replace, merge/JSON/strategic patch, server-side apply
//! (status and scale too) and scale; each admitted, checked against its
//! preconditions and stored, or only checked on a dry run.

use super::*;

pub(super) async fn write(
    server: &ApiServer,
    target: &Target,
    name: &str,
    w: Write,
) -> Result<Stored, Failure> {
    if target.options.dry_run {
        return dry_write(server, target, name, w);
    }
    let deleting = matches!(w, Write::Delete { .. });
    let stored = server
        .store
        .submit(w)
        .await
        .map_err(|_| {
            Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "the store is shutting down",
            )
        })?
        .map_err(|e| {
            // A create that finds the object made meanwhile lost a race too
            // when the request was a patch (an apply creating it): run again,
            // it updates. A POST's AlreadyExists is the answer itself.
            let race = matches!(e, store::Error::Conflict { .. })
                || (matches!(e, store::Error::AlreadyExists(_)) && target.patch);
            Failure {
                race,
                ..store_failure(target, name, e)
            }
        })?;
    server.crd_written(&stored, deleting);
    Ok(stored)
}

/// What `w` would store, checked against the current state (existence,
/// the expected revision) but not stored: `dryRun=All`. An update keeps the
/// current revision, a create has none yet.
pub(super) fn dry_write(
    server: &ApiServer,
    target: &Target,
    name: &str,
    w: Write,
) -> Result<Stored, Failure> {
    let (key, expected) = match &w {
        Write::Create { key, .. } => (key.clone(), None),
        Write::Update { key, expected, .. } | Write::Delete { key, expected } => {
            (key.clone(), *expected)
        }
    };
    let current = server
        .store
        .get(&key)
        .map_err(|e| store_failure(target, name, e))?;
    match (w, current) {
        (Write::Create { key, value }, None) => Ok(Stored {
            key,
            revision: 0,
            create_revision: 0,
            value: value.into(),
        }),
        (Write::Create { key, .. }, Some(_)) => Err(store_failure(
            target,
            name,
            store::Error::AlreadyExists(key),
        )),
        (_, None) => Err(target.not_found(name)),
        (_, Some(current)) if expected.is_some_and(|e| e != current.revision) => {
            Err(store_failure(
                target,
                name,
                store::Error::Conflict {
                    key,
                    expected: expected.unwrap_or_default(),
                    actual: current.revision,
                },
            ))
        }
        (Write::Update { value, .. }, Some(current)) => Ok(Stored {
            value: value.into(),
            ..current
        }),
        (Write::Delete { .. }, Some(current)) => Ok(current),
    }
}

/// Refuses content for a namespace that does not exist or is terminating.
pub(super) async fn check_namespace(
    server: &Arc<ApiServer>,
    target: &Target,
) -> Result<(), Failure> {
    let Some(namespace) = target
        .namespace
        .clone()
        .filter(|_| target.resource.namespaced)
    else {
        return Ok(());
    };
    let s = server.clone();
    match blocking(move || crate::namespaces::refuse_content(s.store(), &namespace)).await? {
        Ok(None) => Ok(()),
        Ok(Some((404, message))) => Err(Failure::new(StatusCode::NOT_FOUND, "NotFound", message)),
        Ok(Some((_, message))) => Err(Failure::new(StatusCode::FORBIDDEN, "Forbidden", message)),
        Err(e) => Err(store_failure(target, "", e)),
    }
}

pub(super) async fn create(
    server: &Arc<ApiServer>,
    target: &Target,
    body: &Bytes,
) -> Result<Response, Failure> {
    check_namespace(server, target).await?;
    let mut object = parse_body(body)?;
    let given = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    prepare_create(
        &mut object,
        &target.resource,
        target.namespace.as_deref(),
        &Identity::fresh(),
    )
    .map_err(|r| refusal(target, &given, r))?;
    let (mut object, warnings) = admit(server, target, object, None)?;
    crate::object::builtin_defaults(&mut object, &target.resource);
    let now = crate::object::now();
    crate::apply::record_update(
        None,
        &mut object,
        &target.manager,
        &now,
        target.scope(),
        &target.structure(),
    );
    let is_crd = target.resource.is_crds();
    if is_crd {
        crate::crd::accept(&mut object, &now);
    }
    if target.resource.is_namespaces() {
        crate::namespaces::activate(&mut object);
    }
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let key = target.resource.key(target.namespace.as_deref(), &name);
    let crd_write = is_crd.then(|| server.crd_write(crd_group(&object)));
    let stored = write(
        server,
        target,
        &name,
        Write::Create {
            key,
            value: encode(&object),
        },
    )
    .await?;
    drop(crd_write);
    Ok(with_warnings(
        stored_response(StatusCode::CREATED, &stored)?,
        &warnings,
    ))
}

/// Validates `new` as the successor of `old` and stores it: on the status
/// endpoint only its status counts; elsewhere it goes through admission and
/// the metadata rules. Shared by replace, every patch type and scale.
pub(super) async fn update_to(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
    old: &Stored,
    old_object: &Value,
    successor: Successor,
) -> Result<Response, Failure> {
    let Successor {
        object: mut new,
        expected,
        applied,
    } = successor;
    let (mut new, change, warnings) = if target.status {
        let managed = new["metadata"]["managedFields"].clone();
        crate::object::check_uid(old_object, &new).map_err(|r| {
            refusal(
                target,
                old_object["metadata"]["name"].as_str().unwrap_or_default(),
                r,
            )
        })?;
        let (mut out, change) = prepare_status_update(old_object, &new);
        if applied {
            out["metadata"]["managedFields"] = managed;
        }
        (out, change, Vec::new())
    } else {
        new["apiVersion"] = json!(target.resource.api_version());
        new["kind"] = json!(target.resource.kind);
        let (mut new, warnings) = admit(server, target, new, Some(old_object))?;
        crate::object::builtin_defaults(&mut new, &target.resource);
        let change = prepare_update(old_object, &mut new, &target.resource)
            .map_err(|r| refusal(target, name, r))?;
        (new, change, warnings)
    };
    if !applied && change == Change::Changed {
        let now = crate::object::now();
        crate::apply::record_update(
            Some(old_object),
            &mut new,
            &target.manager,
            &now,
            target.scope(),
            &target.structure(),
        );
    }
    // A CRD written unchanged (a chart re-applied) serves what it served.
    let crd_write = (target.resource.is_crds() && change == Change::Changed)
        .then(|| server.crd_write(crd_group(&new)));
    let response = store_update(server, target, name, old, new, change, expected).await?;
    drop(crd_write);
    Ok(with_warnings(response, &warnings))
}

/// What a write makes of an object: the new object, the revision it must
/// replace (if the client said), and whether it came from an apply (which
/// records its own ownership) rather than an update.
pub(super) struct Successor {
    pub(super) object: Value,
    pub(super) expected: Option<Revision>,
    pub(super) applied: bool,
}

/// Stores `new` (already prepared) as the successor of `old`, unless nothing changed.
pub(super) async fn store_update(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
    old: &Stored,
    new: Value,
    change: Change,
    expected: Option<Revision>,
) -> Result<Response, Failure> {
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
    if change == Change::Unchanged {
        return stored_response(StatusCode::OK, old);
    }
    let old_object = decode(old)?;
    let deleting = old_object["metadata"].get("deletionTimestamp").is_some();
    if deleting && !has_finalizers(&new) {
        // The last finalizer is gone: the deletion completes.
        write(
            server,
            target,
            name,
            Write::Delete {
                key: old.key.clone(),
                expected: Some(old.revision),
            },
        )
        .await?;
        if !target.options.dry_run {
            spawn_collection(server, &new, false);
        }
        return Ok(json_response(StatusCode::OK, &new));
    }
    if deleting && added_finalizer(&old_object, &new) {
        return Err(refusal(
            target,
            name,
            Refusal::Invalid {
                field: "metadata.finalizers".into(),
                message: "no new finalizers can be added if the object is being deleted".into(),
            },
        ));
    }
    let stored = write(
        server,
        target,
        name,
        Write::Update {
            key: old.key.clone(),
            expected: Some(old.revision),
            value: encode(&new),
        },
    )
    .await?;
    stored_response(StatusCode::OK, &stored)
}

pub(super) async fn replace(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
    new: Value,
) -> Result<Response, Failure> {
    if !new.is_object() || new.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(not_an_object());
    }
    let expected = precondition(&new)?;
    // CRDs allow no unconditional update (built-in kinds do).
    if expected.is_none() && is_custom(&target.resource) {
        return Err(Failure {
            details: Some(
                json!({ "name": name, "group": target.resource.group, "kind": target.resource.kind, "causes": [{ "reason": "FieldValueInvalid", "message": "Invalid value: 0: must be specified for an update", "field": "metadata.resourceVersion" }] }),
            ),
            ..Failure::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!(
                    "{} \"{name}\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update",
                    target.qualified()
                ),
            )
        });
    }
    let old = read(server, target, name).await?;
    let old_object = decode(&old)?;
    update_to(
        server,
        target,
        name,
        &old,
        &old_object,
        Successor {
            object: new,
            expected,
            applied: false,
        },
    )
    .await
}

/// A kind served by a CRD rather than built in.
pub(super) fn is_custom(resource: &Resource) -> bool {
    !builtins()
        .iter()
        .any(|r| r.group == resource.group && r.plural == resource.plural)
}

pub(super) fn not_an_object() -> Failure {
    Failure::new(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "the request body must be a JSON object",
    )
}

/// Server-side apply (`crate::apply`): creates the object when missing.
pub(super) async fn server_side_apply(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
    body: &Bytes,
    query: &BTreeMap<String, String>,
) -> Result<Response, Failure> {
    let bad = |m: String| Failure::new(StatusCode::BAD_REQUEST, "BadRequest", m);
    let manager = query.get("fieldManager").filter(|m| !m.is_empty()).ok_or_else(|| {
        Failure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        )
    })?;
    let force = query.get("force").is_some_and(|f| f == "true");
    let text =
        std::str::from_utf8(body).map_err(|e| bad(format!("the apply patch is not UTF-8: {e}")))?;
    // Clients other than kubectl send JSON (which is YAML too): read it as
    // JSON, many times faster, and as YAML only if it is not.
    let applied: Value = match serde_json::from_str(text) {
        Ok(applied) => applied,
        Err(_) => serde_saphyr::from_str(text)
            .map_err(|e| bad(format!("the apply patch is not valid YAML: {e}")))?,
    };
    if applied["apiVersion"].as_str().is_none() || applied["kind"].as_str().is_none() {
        return Err(bad("an apply patch needs apiVersion and kind".into()));
    }
    if applied.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(bad("metadata of an apply patch must be an object".into()));
    }
    let now = crate::object::now();
    let conflict =
        |c: crate::apply::Conflicts| Failure::new(StatusCode::CONFLICT, "Conflict", c.to_string());
    let key = target.resource.key(target.namespace.as_deref(), name);
    let s = server.clone();
    let live = blocking(move || s.store.get(&key))
        .await?
        .map_err(|e| store_failure(target, name, e))?;
    let Some(old) = live else {
        // An apply creates the object only on its main endpoint; a status
        // or scale apply is for an object that exists.
        if target.status || target.scale {
            return Err(Failure::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{} \"{name}\" not found", target.qualified()),
            ));
        }
        check_namespace(server, target).await?;
        let mut object = crate::apply::apply(
            None,
            &applied,
            manager,
            force,
            &now,
            target.scope(),
            &target.structure(),
        )
        .map_err(conflict)?;
        object["metadata"]["name"] = json!(name);
        let managed = object["metadata"]["managedFields"].clone();
        prepare_create(
            &mut object,
            &target.resource,
            target.namespace.as_deref(),
            &Identity::fresh(),
        )
        .map_err(|r| refusal(target, name, r))?;
        let (mut object, warnings) = admit(server, target, object, None)?;
        crate::object::builtin_defaults(&mut object, &target.resource);
        object["metadata"]["managedFields"] = managed;
        let is_crd = target.resource.is_crds();
        if is_crd {
            crate::crd::accept(&mut object, &now);
        }
        if target.resource.is_namespaces() {
            crate::namespaces::activate(&mut object);
        }
        let key = target.resource.key(target.namespace.as_deref(), name);
        let crd_write = is_crd.then(|| server.crd_write(crd_group(&object)));
        let stored = write(
            server,
            target,
            name,
            Write::Create {
                key,
                value: encode(&object),
            },
        )
        .await?;
        drop(crd_write);
        return Ok(with_warnings(
            stored_response(StatusCode::CREATED, &stored)?,
            &warnings,
        ));
    };
    let old_object = decode(&old)?;
    crate::object::check_uid(&old_object, &applied).map_err(|r| refusal(target, name, r))?;
    let new = crate::apply::apply(
        Some(&old_object),
        &applied,
        manager,
        force,
        &now,
        target.scope(),
        &target.structure(),
    )
    .map_err(conflict)?;
    // A resourceVersion in the applied object is a precondition.
    let expected = precondition(&applied)?;
    update_to(
        server,
        target,
        name,
        &old,
        &old_object,
        Successor {
            object: new,
            expected,
            applied: true,
        },
    )
    .await
}

/// Sets the value at a simple JSONPath (`.spec.replicas`), creating maps.
pub(super) fn set_at(object: &mut Value, path: &str, value: Value) {
    let keys: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|k| !k.is_empty())
        .collect();
    let Some((last, parents)) = keys.split_last() else {
        return;
    };
    let mut here = object;
    for key in parents {
        if !here[*key].is_object() {
            here[*key] = json!({});
        }
        here = &mut here[*key];
    }
    here[*last] = value;
}

/// The `autoscaling/v1` Scale of an object.
pub(super) fn scale_of(object: &Value, paths: &crate::resources::ScalePaths) -> Value {
    let meta = &object["metadata"];
    let mut status = json!({
        "replicas": crate::table::at(object, &paths.status_replicas).and_then(Value::as_i64).unwrap_or(0),
    });
    if let Some(selector) = paths
        .label_selector
        .as_deref()
        .and_then(|p| crate::table::at(object, p))
        .and_then(Value::as_str)
    {
        status["selector"] = json!(selector);
    }
    let mut metadata = json!({
        "name": meta["name"], "uid": meta["uid"], "resourceVersion": meta["resourceVersion"],
        "creationTimestamp": meta["creationTimestamp"],
    });
    if let Some(ns) = meta.get("namespace") {
        metadata["namespace"] = ns.clone();
    }
    json!({
        "apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": metadata,
        "spec": { "replicas": crate::table::at(object, &paths.spec_replicas).and_then(Value::as_i64).unwrap_or(0) },
        "status": status,
    })
}

/// The scale subresource: read, replace or merge-patch the Scale; the new
/// `spec.replicas` goes to the parent, which is validated and stored as any
/// write to it (generation moves).
pub(super) async fn scale(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
    method: &Method,
    body: &Bytes,
) -> Result<Response, Failure> {
    let Some(paths) = target.resource.scale.clone() else {
        return Err(target.not_found(name));
    };
    let old = read(server, target, name).await?;
    let old_object = decode(&old)?;
    let current = scale_of(&old_object, &paths);
    let wanted = match *method {
        Method::GET => return Ok(json_response(StatusCode::OK, &current)),
        Method::PUT => parse_body(body)?,
        _ => {
            let mut patched = current.clone();
            crate::patch::merge(&mut patched, &parse_body(body)?);
            patched
        }
    };
    let expected = precondition(&wanted)?;
    let Some(replicas) = wanted["spec"]["replicas"].as_i64() else {
        return Err(refusal(
            target,
            name,
            Refusal::Invalid {
                field: "spec.replicas".into(),
                message: "must be an integer".into(),
            },
        ));
    };
    let mut new = old_object.clone();
    set_at(&mut new, &paths.spec_replicas, json!(replicas));
    let (parts, body) = update_to(
        server,
        target,
        name,
        &old,
        &old_object,
        Successor {
            object: new,
            expected,
            applied: false,
        },
    )
    .await?
    .into_parts();
    let body = axum::body::to_bytes(body, MAX_BODY).await.map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            e.to_string(),
        )
    })?;
    let stored: Value = parse_body(&body)?;
    let mut response = json_response(StatusCode::OK, &scale_of(&stored, &paths));
    for warning in parts.headers.get_all(header::WARNING) {
        response
            .headers_mut()
            .append(header::WARNING, warning.clone());
    }
    Ok(response)
}

pub(super) async fn patch(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
    body: &Bytes,
    headers: &axum::http::HeaderMap,
    query: &BTreeMap<String, String>,
) -> Result<Response, Failure> {
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(PatchType::from_content_type)
        .unwrap_or(PatchType::Merge);
    if kind == PatchType::Apply {
        return server_side_apply(server, target, name, body, query).await;
    }
    let patch = parse_body(body)?;
    if kind == PatchType::Strategic && is_custom(&target.resource) {
        return Err(Failure::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    let expected = if kind == PatchType::Json {
        None
    } else {
        precondition(&patch)?
    };
    let old = read(server, target, name).await?;
    let old_object = decode(&old)?;
    let mut new = old_object.clone();
    let bad = |message: String| Failure::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message);
    match kind {
        PatchType::Json => crate::patch::json(&mut new, &patch).map_err(bad)?,
        _ if !patch.is_object() => {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "a merge patch must be a JSON object",
            ));
        }
        // Handled above.
        PatchType::Merge | PatchType::Apply => crate::patch::merge(&mut new, &patch),
        PatchType::Strategic => crate::patch::strategic(&mut new, &patch),
    }
    if !new.is_object() || !new["metadata"].is_object() {
        return Err(Failure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "the patched object must be a JSON object with an object `metadata`",
        ));
    }
    update_to(
        server,
        target,
        name,
        &old,
        &old_object,
        Successor {
            object: new,
            expected,
            applied: false,
        },
    )
    .await
}

/// The API group a CRD serves.
fn crd_group(crd: &Value) -> &str {
    crd["spec"]["group"].as_str().unwrap_or_default()
}
