//! Watches: NDJSON events from a resourceVersion or with the initial state,
//! bookmarks, selectors (objects leaving and entering them), Table rows,
//! and an in-stream 410 once history is compacted.

use super::*;

/// Watches without `timeoutSeconds` end after this long, as real servers do.
pub(super) const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub(super) fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({ "type": kind, "object": object }).to_string();
    line.push('\n');
    Bytes::from(line)
}

/// A watch event's line around an object already written out as JSON.
fn raw_event_line(kind: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + kind.len() + 24);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

pub(super) fn bookmark(target: &Target, revision: Revision, initial_end: bool) -> Bytes {
    let mut metadata = json!({ "resourceVersion": revision.to_string() });
    if initial_end {
        metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    event_line(
        "BOOKMARK",
        &json!({ "kind": target.resource.kind, "apiVersion": target.resource.api_version(), "metadata": metadata }),
    )
}

pub(super) fn expired(message: String) -> Bytes {
    event_line(
        "ERROR",
        &Failure::new(StatusCode::GONE, "Expired", message).body(),
    )
}

pub(super) fn watch(
    server: Arc<ApiServer>,
    target: Target,
    query: &BTreeMap<String, String>,
    shape: Shape,
) -> Result<Response, Failure> {
    let filter = Filter::from_query(query)?;
    let form = match shape {
        Shape::Metadata => Form::Metadata,
        // `kubectl get -w`: each event a one-row Table, so every line keeps
        // the printer columns.
        Shape::Table => Form::Table(Box::new(target.resource.clone()), target.include),
        Shape::Full => Form::Full,
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let send_initial = query.get("sendInitialEvents").is_some_and(|v| v == "true");
    let from: Option<Revision> = match query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(rv.parse().map_err(|_| {
            Failure::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("invalid resourceVersion {rv:?}"),
            )
        })?),
    };
    let slot = WatchSlot::take(&server)?;
    let (counted, resource) = (server.clone(), target.resource.plural.clone());
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    // Subscribe before reading anything, so no change falls in between.
    let mut live = server.store.subscribe();
    let prefix = target.list_prefix();
    server.clone().tasks().spawn("watch stream", async move {
        let _slot = slot;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let initial = from.is_none() || send_initial;
        let s = server.clone();
        let p = prefix.clone();
        let selective = !filter.is_empty();
        let start = blocking(move || -> Result<(Revision, Vec<Event>), store::Error> {
            match from {
                Some(rv) if !send_initial => {
                    let mut events = s.store.events_since(&p, rv)?;
                    if selective {
                        // Selectors need what each object was before.
                        for event in &mut events {
                            if event.kind == EventKind::Modified {
                                event.prev = s.store.value_before(&event.key, event.revision)?;
                            }
                        }
                    }
                    Ok((rv, events))
                }
                _ => {
                    let (rev, items) = s.store.list(&p, None, None)?;
                    let added = items
                        .into_iter()
                        .map(|st| Event {
                            kind: EventKind::Added,
                            key: st.key,
                            revision: st.revision,
                            value: st.value,
                            prev: None,
                            rendered: Default::default(),
                        })
                        .collect();
                    Ok((rev, added))
                }
            }
        })
        .await;
        let (mut seen, backlog) = match start {
            Ok(Ok(start)) => start,
            Ok(Err(e)) => {
                let _ = tx.send(expired(e.to_string())).await;
                return;
            }
            Err(_) => return,
        };
        for event in &backlog {
            seen = seen.max(event.revision);
            if let Some(line) = render_event(event, &filter, &form)
                && tx.send(line).await.is_err()
            {
                return;
            }
        }
        if initial && send_initial && bookmarks {
            let _ = tx.send(bookmark(&target, seen, true)).await;
        }
        loop {
            tokio::select! {
                () = &mut deadline => {
                    if bookmarks {
                        let _ = tx.send(bookmark(&target, seen, false)).await;
                    }
                    return;
                }
                () = tx.closed() => return,
                received = live.recv() => match received {
                    Ok(event) => {
                        if event.revision <= seen || !event.key.starts_with(&prefix) {
                            continue;
                        }
                        seen = event.revision;
                        if let Some(line) = render_event(&event, &filter, &form)
                            && tx.send(line).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        let _ = tx.send(expired("the watch fell behind; list again".into())).await;
                        return;
                    }
                    Err(RecvError::Closed) => return,
                },
            }
        }
    });
    // Every event sent is counted as it goes out.
    let stream = futures_util::stream::unfold((rx, counted), move |(mut rx, server)| {
        let resource = resource.clone();
        async move {
            let line = rx.recv().await?;
            server.metrics().watch_event(&line, &resource);
            Some((Ok::<_, std::convert::Infallible>(line), (rx, server)))
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// One of the limited watch slots, given back when dropped.
pub(super) struct WatchSlot(pub(super) Arc<ApiServer>);

impl WatchSlot {
    pub(super) fn take(server: &Arc<ApiServer>) -> Result<WatchSlot, Failure> {
        use std::sync::atomic::Ordering;
        let open = server.watches.fetch_add(1, Ordering::AcqRel);
        let slot = WatchSlot(server.clone());
        let limit = server.watch_limit.load(Ordering::Relaxed);
        if open >= limit {
            return Err(Failure::new(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                format!("too many open watches (at most {limit}); close some and retry"),
            ));
        }
        Ok(slot)
    }
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.0
            .watches
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// How a watch's objects are written.
pub(super) enum Form {
    Full,
    Metadata,
    Table(Box<Resource>, crate::table::Include),
}

/// The line a watcher gets for `event`, if any. With selectors, what
/// counts is whether the object matched before and matches now, as
/// Kubernetes' watch cache does: starting to match is ADDED, stopping is
/// DELETED (with the object as it last matched).
pub(super) fn render_event(event: &Event, filter: &Filter, form: &Form) -> Option<Bytes> {
    // Most watches take every change of their kind whole: the line is the
    // same for all of them, made once.
    if !(matches!(form, Form::Full) && filter.is_empty()) {
        return render_filtered(event, filter, form);
    }
    let kind = match event.kind {
        EventKind::Added => "ADDED",
        EventKind::Modified => "MODIFIED",
        EventKind::Deleted => "DELETED",
    };
    let line = event.rendered.get_or_init(|| {
        // The stored bytes, stamped, as a write's answer is (parsed and
        // written again only if they have another shape).
        if let Some(object) = stamp(&event.value, event.revision) {
            return raw_event_line(kind, &object);
        }
        let Ok(mut object) = serde_json::from_slice::<Value>(&event.value) else {
            return Bytes::new();
        };
        set_resource_version(&mut object, event.revision);
        event_line(kind, &object)
    });
    // A value that does not parse is not sent (as below).
    (!line.is_empty()).then_some(line)
}

fn render_filtered(event: &Event, filter: &Filter, form: &Form) -> Option<Bytes> {
    let parse = |raw: &[u8], revision: Revision| -> Option<Value> {
        let mut object: Value = serde_json::from_slice(raw).ok()?;
        set_resource_version(&mut object, revision);
        Some(object)
    };
    let object = parse(&event.value, event.revision)?;
    let now = filter.matches(&object);
    let (kind, object) = match event.kind {
        EventKind::Added if now => ("ADDED", object),
        EventKind::Deleted if now => ("DELETED", object),
        EventKind::Modified if filter.is_empty() => ("MODIFIED", object),
        EventKind::Modified => {
            let before = event
                .prev
                .as_deref()
                .and_then(|raw| parse(raw, event.revision));
            let matched = before.as_ref().is_some_and(|b| filter.matches(b));
            match (matched, now) {
                (true, true) => ("MODIFIED", object),
                (false, true) => ("ADDED", object),
                (true, false) => ("DELETED", before?),
                (false, false) => return None,
            }
        }
        _ => return None,
    };
    Some(match form {
        Form::Full => event_line(kind, &object),
        Form::Metadata => event_line(kind, &metadata_only(&object)),
        Form::Table(resource, include) => {
            let revision = event.revision.to_string();
            event_line(
                kind,
                &crate::table::table(resource, &[object], &revision, *include),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, value: &[u8]) -> Event {
        Event {
            kind,
            key: "/v1/configmaps/ns/a".into(),
            revision: 42,
            value: Arc::from(value),
            prev: None,
            rendered: Default::default(),
        }
    }

    fn everything() -> Filter {
        Filter {
            labels: LabelSelector::default(),
            fields: FieldSelector::default(),
        }
    }

    /// The line shared by plain watches is made from the stored bytes
    /// without parsing them; it must say what the parsed object would.
    #[test]
    fn a_plain_watch_line_is_the_stored_object_stamped() {
        let object = json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "a", "namespace": "ns", "labels": { "x": "y" } }, "data": { "k": "v" } });
        let mut expected = object.clone();
        expected["metadata"]["resourceVersion"] = json!("42");
        for (kind, word) in [
            (EventKind::Added, "ADDED"),
            (EventKind::Modified, "MODIFIED"),
            (EventKind::Deleted, "DELETED"),
        ] {
            let line = render_event(&event(kind, &encode(&object)), &everything(), &Form::Full)
                .expect("a line");
            assert!(line.ends_with(b"}\n"), "one line per event");
            let line: Value = serde_json::from_slice(&line).expect("JSON");
            assert_eq!(line, json!({ "type": word, "object": expected }));
        }
        // Bytes of another shape are parsed and written again.
        let other =
            serde_json::to_vec(&json!({ "metadata": { "name": "a" }, "kind": "ConfigMap" }))
                .expect("JSON");
        let line = render_event(&event(EventKind::Added, &other), &everything(), &Form::Full)
            .expect("a line");
        let line: Value = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(line["object"]["metadata"]["resourceVersion"], "42");
    }
}
