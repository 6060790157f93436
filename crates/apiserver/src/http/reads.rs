//! Reads: get, and list with selectors, pages and `continue` (every page
//! at the first page's revision), as objects, Tables or metadata only.

use super::*;

/// Objects read from the store at a time while listing.
pub(super) const LIST_PAGE: usize = 1000;
/// The form a read asks for in its `Accept` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// The objects themselves.
    Full,
    /// A `Table` (kubectl get).
    Table,
    /// `PartialObjectMetadata`: metadata only (`Api::get_metadata`,
    /// `metadata_watcher`).
    Metadata,
}

pub(super) fn shape(headers: &axum::http::HeaderMap) -> Shape {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if crate::table::wanted(accept) {
        return Shape::Table;
    }
    let first = accept.split(',').next().unwrap_or_default();
    if first
        .split(';')
        .any(|p| p.trim().starts_with("as=PartialObjectMetadata"))
    {
        Shape::Metadata
    } else {
        Shape::Full
    }
}

/// An object reduced to its metadata, as `PartialObjectMetadata`.
pub(super) fn metadata_only(object: &Value) -> Value {
    json!({ "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"] })
}

pub(super) async fn get(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
    headers: &axum::http::HeaderMap,
) -> Result<Response, Failure> {
    let stored = read(server, target, name).await?;
    match shape(headers) {
        Shape::Full => stored_response(StatusCode::OK, &stored),
        // A status subresource is never a table: it is answered whole.
        Shape::Table if target.status => stored_response(StatusCode::OK, &stored),
        Shape::Table => {
            let table = crate::table::table(
                &target.resource,
                &[decode(&stored)?],
                &stored.revision.to_string(),
                target.include,
            );
            Ok(json_response(StatusCode::OK, &table))
        }
        Shape::Metadata => Ok(json_response(
            StatusCode::OK,
            &metadata_only(&decode(&stored)?),
        )),
    }
}

/// Whether an object passes the request's selectors.
pub(super) struct Filter {
    pub(super) labels: LabelSelector,
    pub(super) fields: FieldSelector,
}

impl Filter {
    pub(super) fn from_query(query: &BTreeMap<String, String>) -> Result<Filter, Failure> {
        let bad = |e: String| Failure::new(StatusCode::BAD_REQUEST, "BadRequest", e);
        Ok(Filter {
            labels: LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
                .map_err(bad)?,
            fields: FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))
                .map_err(bad)?,
        })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.labels == LabelSelector::default() && self.fields == FieldSelector::default()
    }

    pub(super) fn matches(&self, object: &Value) -> bool {
        self.labels.matches(&object["metadata"]["labels"]) && self.fields.matches(object)
    }
}

pub(super) fn continue_token(revision: Revision, last_key: &str) -> String {
    let raw = format!("{revision}\n{last_key}");
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn parse_continue(token: &str) -> Option<(Revision, String)> {
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (rev, key) = text.split_once('\n')?;
    Some((rev.parse().ok()?, key.to_string()))
}

pub(super) async fn list(
    server: &Arc<ApiServer>,
    target: &Target,
    query: &BTreeMap<String, String>,
    headers: &axum::http::HeaderMap,
) -> Result<Response, Failure> {
    let filter = Filter::from_query(query)?;
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    // A continued list keeps the first page's resourceVersion: a watch from
    // it then delivers every change made while the pages were read.
    let (snapshot, start) = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let (revision, key) = parse_continue(token).ok_or_else(|| {
                Failure::new(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "invalid continue token",
                )
            })?;
            let compacted = server
                .store
                .compacted()
                .map_err(|e| store_failure(target, "", e))?;
            if revision < compacted {
                return Err(Failure::new(
                    StatusCode::GONE,
                    "Expired",
                    format!(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list. (revision {revision} is compacted)"
                    ),
                ));
            }
            (Some(revision), Some(key))
        }
        None => (None, None),
    };
    let prefix = target.list_prefix();
    let shape = shape(headers);
    if filter.is_empty() && shape == Shape::Full && limit.is_none() && start.is_none() {
        return list_raw(server, target, prefix).await;
    }
    let s = server.clone();
    // Selectors filter after the read, so read in pages until `limit` match.
    let (revision, items, more) = blocking(move || {
        let mut items = Vec::new();
        let mut after = start;
        let mut revision = None;
        loop {
            let (rev, page) = s.store.list(&prefix, after.as_deref(), Some(LIST_PAGE))?;
            let revision = *revision.get_or_insert(snapshot.unwrap_or(rev));
            let full = page.len() == LIST_PAGE;
            for stored in page {
                after = Some(stored.key.clone());
                let mut object: Value =
                    serde_json::from_slice(&stored.value).unwrap_or(Value::Null);
                set_resource_version(&mut object, stored.revision);
                if !filter.matches(&object) {
                    continue;
                }
                items.push(object);
                if limit.is_some_and(|l| items.len() >= l) {
                    let more = !s
                        .store
                        .list(&prefix, after.as_deref(), Some(1))?
                        .1
                        .is_empty();
                    return Ok::<_, store::Error>((revision, items, after.filter(|_| more)));
                }
            }
            if !full {
                return Ok((revision, items, None));
            }
        }
    })
    .await?
    .map_err(|e| store_failure(target, "", e))?;
    let mut metadata = json!({ "resourceVersion": revision.to_string() });
    if let Some(last) = more {
        metadata["continue"] = json!(continue_token(revision, &last));
    }
    match shape {
        Shape::Table => {
            let mut table = crate::table::table(
                &target.resource,
                &items,
                &revision.to_string(),
                target.include,
            );
            table["metadata"] = metadata;
            return Ok(json_response(StatusCode::OK, &table));
        }
        Shape::Metadata => {
            let items: Vec<Value> = items.iter().map(metadata_only).collect();
            return Ok(json_response(
                StatusCode::OK,
                &json!({ "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": items }),
            ));
        }
        Shape::Full => {}
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", target.resource.kind),
            "apiVersion": target.resource.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    ))
}

/// A whole, unfiltered list written from the stored bytes, each stamped
/// with its revision: no parsing or re-serializing of the objects.
pub(super) async fn list_raw(
    server: &Arc<ApiServer>,
    target: &Target,
    prefix: String,
) -> Result<Response, Failure> {
    let s = server.clone();
    let (revision, stored) = blocking(move || s.store.list(&prefix, None, None))
        .await?
        .map_err(|e| store_failure(target, "", e))?;
    let mut body =
        Vec::with_capacity(stored.iter().map(|s| s.value.len() + 40).sum::<usize>() + 256);
    body.extend_from_slice(
        format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{revision}\"}},\"items\":[",
            target.resource.kind,
            target.resource.api_version()
        )
        .as_bytes(),
    );
    for (i, item) in stored.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        match stamp(&item.value, item.revision) {
            Some(stamped) => body.extend_from_slice(&stamped),
            None => body.extend_from_slice(decode(item)?.to_string().as_bytes()),
        }
    }
    body.extend_from_slice(b"]}");
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}
