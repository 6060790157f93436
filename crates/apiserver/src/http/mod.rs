//! The Kubernetes REST surface over the store (`apiserver.md` §1, §3), with
//! Kubernetes `Status` errors. A request goes: [`router`] → `handle`
//! (content type, body, a protobuf body read as JSON) → the request target
//! (`target`) → `dispatch` to its verb's room, run again as a whole when it
//! loses a revision race:
//! - `reads`: get, list (selectors, pages);
//! - `writes`: create, replace, patch, server-side apply, scale, each
//!   through `admission`;
//! - `deletes`: finalizers, propagation, namespaces and CRDs;
//! - `watches`: event streams;
//! - `documents`: discovery, OpenAPI, pod logs.
//!
//! Garbage collection (background and orphan) is in [`crate::gc`].
//! Authentication wraps this router (`serve`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

mod admission;
mod clusters;
mod deletes;
mod documents;
mod logs;
mod reads;
mod target;
mod watches;
mod writes;

use admission::*;
pub use clusters::clusters_router;
pub use deletes::*;
use documents::*;
use reads::*;
use target::*;
use watches::*;
use writes::*;

use crate::codec::{encode, read_stored, stamp};
use crate::discovery;
use crate::object::{
    Change, Identity, Refusal, deletion_step, has_finalizers, prepare_create,
    prepare_status_update, prepare_update, set_resource_version,
};
use crate::patch::PatchType;
use crate::resources::{Resource, builtins};
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::{ApiServer, CRD_PREFIX};
use crate::store::{self, Event, EventKind, Revision, Stored, Write};

/// Largest accepted request body.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// The router: `/version` and every resource path.
pub fn router(server: Arc<ApiServer>) -> Router {
    Router::new()
        .route("/version", axum::routing::get(version))
        .route("/healthz", axum::routing::get(healthy))
        .route("/readyz", axum::routing::get(healthy))
        .route("/livez", axum::routing::get(healthy))
        .route("/metrics", axum::routing::get(metrics))
        .fallback(handle)
        .with_state(server)
}

/// Paths anyone may read, as Kubernetes' `system:public-info-viewer` allows.
pub const PUBLIC_PATHS: [&str; 4] = ["/healthz", "/readyz", "/livez", "/version"];

async fn healthy() -> Response {
    let mut response = (StatusCode::OK, "ok").into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

async fn metrics(State(server): State<Arc<ApiServer>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        server.metrics().encode(),
    )
        .into_response()
}

async fn version() -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "major": "1", "minor": "34", "gitVersion": concat!("v1.34.0-modelplane.", env!("CARGO_PKG_VERSION")),
            "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        }),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    json_bytes(status, body.to_string().into_bytes())
}

/// JSON already written out, as an answer.
fn json_bytes(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A stored object as a request's answer: its bytes with the revision
/// spliced in ([`stamp`]); parsed and written again only if they have
/// another shape.
fn stored_response(status: StatusCode, stored: &Stored) -> Result<Response, Failure> {
    match stamp(&stored.value, stored.revision) {
        Some(body) => Ok(json_bytes(status, body)),
        None => Ok(json_response(status, &decode(stored)?)),
    }
}

/// A Kubernetes `Status` failure.
#[derive(Debug)]
pub struct Failure {
    code: StatusCode,
    reason: &'static str,
    message: String,
    details: Option<Value>,
    /// Another write landed between this request's read and its write: the
    /// request may be run again as a whole (its own preconditions, if any,
    /// are checked again then), as kube-apiserver retries internally.
    race: bool,
}

impl Failure {
    pub(crate) fn new(
        code: StatusCode,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Failure {
        Failure {
            code,
            reason,
            message: message.into(),
            details: None,
            race: false,
        }
    }

    fn body(&self) -> Value {
        let mut body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code.as_u16(),
        });
        if let Some(details) = &self.details {
            body["details"] = details.clone();
        }
        body
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        json_response(self.code, &self.body())
    }
}

fn store_failure(target: &Target, name: &str, e: store::Error) -> Failure {
    match e {
        store::Error::NotFound(_) => target.not_found(name),
        store::Error::AlreadyExists(_) => Failure {
            details: Some(target.details(name)),
            ..Failure::new(
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", target.qualified()),
            )
        },
        store::Error::Conflict { .. } => Failure {
            details: Some(target.details(name)),
            ..Failure::new(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    target.qualified()
                ),
            )
        },
        store::Error::Compacted { .. } => Failure::new(StatusCode::GONE, "Expired", e.to_string()),
        other => Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            other.to_string(),
        ),
    }
}

fn refusal(target: &Target, name: &str, r: Refusal) -> Failure {
    match r {
        Refusal::Invalid { field, message } => Failure {
            details: Some(json!({
                "name": name, "group": target.resource.group, "kind": target.resource.kind,
                "causes": [{ "reason": "FieldValueInvalid", "message": format!("Invalid value: {message}"), "field": field }],
            })),
            ..Failure::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!(
                    "{} \"{name}\" is invalid: {field}: Invalid value: {message}",
                    target.resource.kind
                ),
            )
        },
        Refusal::InvalidFields(errors) => {
            let causes: Vec<Value> = errors
                .iter()
                .map(|e| json!({ "reason": e.reason, "message": e.message, "field": e.field }))
                .collect();
            let each: Vec<String> = errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect();
            // Go's aggregate: one error bare, several in brackets.
            let summary = match &each[..] {
                [one] => one.clone(),
                _ => format!("[{}]", each.join(", ")),
            };
            Failure {
                details: Some(json!({
                    "name": name, "group": target.resource.group, "kind": target.resource.kind,
                    "causes": causes,
                })),
                ..Failure::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    format!("{} \"{name}\" is invalid: {summary}", target.resource.kind),
                )
            }
        }
        Refusal::BadRequest(message) => {
            Failure::new(StatusCode::BAD_REQUEST, "BadRequest", message)
        }
        Refusal::Conflict(message) => Failure::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {message}",
                target.resource.plural
            ),
        ),
    }
}

fn decode(stored: &Stored) -> Result<Value, Failure> {
    read_stored(stored).map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            format!("stored object is not JSON: {e}"),
        )
    })
}

fn parse_body(body: &Bytes) -> Result<Value, Failure> {
    serde_json::from_slice(body).map_err(|e| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("the request body is not valid JSON: {e}"),
        )
    })
}

fn precondition(object: &Value) -> Result<Option<Revision>, Failure> {
    match object["metadata"]["resourceVersion"].as_str() {
        None | Some("") => Ok(None),
        Some(rv) => rv.parse().map(Some).map_err(|_| {
            Failure::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("invalid resourceVersion {rv:?}"),
            )
        }),
    }
}

/// Refuses bodies the server cannot read with 415.
fn check_content_type(method: &Method, headers: &axum::http::HeaderMap) -> Result<(), Failure> {
    let accepted: &[&str] = match *method {
        Method::POST | Method::PUT => &["application/json", crate::protobuf::MEDIA_TYPE],
        Method::PATCH => &[
            "application/merge-patch+json",
            "application/json-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ],
        _ => return Ok(()),
    };
    match content_type(headers).as_deref() {
        Some(t) if !accepted.contains(&t) => Err(Failure::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )),
        _ => Ok(()),
    }
}

/// The request's media type, lowercased, without parameters.
fn content_type(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
}

/// The body as JSON: a protobuf one (kubectl's generators send them) is
/// decoded into the JSON the store keeps.
fn json_body(headers: &axum::http::HeaderMap, body: Bytes) -> Result<Bytes, Failure> {
    if content_type(headers).as_deref() != Some(crate::protobuf::MEDIA_TYPE) {
        return Ok(body);
    }
    let object = crate::protobuf::decode(&body)
        .map_err(|e| Failure::new(StatusCode::BAD_REQUEST, "BadRequest", e.to_string()))?;
    Ok(Bytes::from(object.to_string()))
}

async fn handle(
    State(server): State<Arc<ApiServer>>,
    method: Method,
    uri: Uri,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    let mut counted = Counted {
        resource: String::new(),
        subresource: "",
        verb: verb(&method, uri.path(), &query(&uri), &headers),
    };
    // A request must never take the connection down with it: should a
    // handler panic on some body nobody foresaw, the client gets a Status.
    let answer =
        std::panic::AssertUnwindSafe(answer(&server, &method, &uri, &headers, body, &mut counted));
    let response = match futures_util::FutureExt::catch_unwind(answer).await {
        Ok(response) => response,
        Err(_) => Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "the server could not handle this request",
        )
        .into_response(),
    };
    server.metrics().request(crate::metrics::RequestLabels {
        verb: counted.verb,
        resource: counted.resource,
        subresource: counted.subresource,
        code: response.status().as_u16(),
    });
    response
}

/// What a request is counted as, filled in as it is understood.
struct Counted {
    verb: &'static str,
    resource: String,
    subresource: &'static str,
}

/// The answer to one request.
async fn answer(
    server: &Arc<ApiServer>,
    method: &Method,
    uri: &Uri,
    headers: &axum::http::HeaderMap,
    body: Body,
    counted: &mut Counted,
) -> Response {
    if let Err(failure) = check_content_type(method, headers) {
        return failure.into_response();
    }
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(failure) => return failure.into_response(),
    };
    if method == Method::GET {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if let Some(response) = aggregated_discovery(server, uri.path(), accept) {
            return response;
        }
        if uri.path().trim_end_matches('/') == "/openapi/v2" {
            return openapi_v2(server, accept);
        }
        if let Some(body) = discover(server, uri.path()) {
            return json_response(StatusCode::OK, &body);
        }
    }
    let result = async {
        let mut target = parse_target(server, uri.path())?;
        counted.resource = target.resource.plural.clone();
        counted.subresource = target.subresource();
        // Read only once the path names something served: a protobuf body
        // for a path nobody serves is a 404 like any other.
        let body = json_body(headers, body)?;
        let query = query(uri);
        target.options = WriteOptions::from_query(&query)?;
        target.patch = method == Method::PATCH;
        target.include =
            crate::table::Include::from_query(query.get("includeObject").map(String::as_str));
        target.manager = match query.get("fieldManager").filter(|m| !m.is_empty()) {
            Some(manager) => manager.clone(),
            None => headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .and_then(|ua| ua.split('/').next())
                .filter(|m| !m.is_empty())
                .unwrap_or("unknown")
                .to_string(),
        };
        // A write that lost a race to another is run again (a few times).
        let mut attempts = 0;
        loop {
            attempts += 1;
            match dispatch(server, &target, method, uri, headers, &query, &body).await {
                Err(failure) if failure.race && attempts < RACE_RETRIES => continue,
                other => break other,
            }
        }
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// Most of an oversized body read (and thrown away) before its 413 is
/// answered: a client still sending when the server closes gets a reset
/// instead of the answer. Beyond this the connection is closed.
const DRAIN_BODY: usize = 64 * 1024 * 1024;

/// The request body, up to [`MAX_BODY`] bytes; a larger one is a 413 once
/// it has been read to its end (up to [`DRAIN_BODY`]), so the client reads
/// the answer rather than a broken pipe.
async fn read_body(body: Body) -> Result<Bytes, Failure> {
    let mut body = body.into_data_stream();
    let mut read = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = futures_util::StreamExt::next(&mut body).await {
        let chunk = chunk.map_err(|e| {
            Failure::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("reading the body: {e}"),
            )
        })?;
        total += chunk.len();
        if total <= MAX_BODY {
            read.extend_from_slice(&chunk);
        } else if total > DRAIN_BODY {
            break;
        }
    }
    if total > MAX_BODY {
        return Err(Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("the request body is larger than the limit of {MAX_BODY} bytes"),
        ));
    }
    Ok(Bytes::from(read))
}

/// A request's verb as kube-apiserver counts it.
fn verb(
    method: &Method,
    path: &str,
    query: &BTreeMap<String, String>,
    headers: &axum::http::HeaderMap,
) -> &'static str {
    // `…/<resource>/<name>` has an odd number of segments after the group
    // version's (`api/v1` or `apis/g/v`), namespaces counted as a pair.
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.first() {
        Some(&"api") => segments.len().saturating_sub(2),
        _ => segments.len().saturating_sub(3),
    };
    let in_namespace = segments.contains(&"namespaces") && rest > 2;
    let named = if in_namespace { rest >= 4 } else { rest >= 2 };
    match *method {
        Method::GET if named => "GET",
        Method::GET if matches!(query.get("watch").map(String::as_str), Some("true" | "1")) => {
            "WATCH"
        }
        Method::GET => "LIST",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH
            if content_type(headers).as_deref() == Some("application/apply-patch+yaml") =>
        {
            "APPLY"
        }
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

/// Times a request that lost a write race is run before its 409 is answered.
const RACE_RETRIES: u32 = 64;

/// Runs one request against its target.
async fn dispatch(
    server: &Arc<ApiServer>,
    target: &Target,
    method: &Method,
    uri: &Uri,
    headers: &axum::http::HeaderMap,
    query: &BTreeMap<String, String>,
    body: &Bytes,
) -> Result<Response, Failure> {
    {
        match (method, target.name.clone()) {
            (&Method::GET | &Method::PUT | &Method::PATCH, Some(name)) if target.scale => {
                scale(server, target, &name, method, body).await
            }
            (&Method::GET, Some(name)) if target.log => pod_log(server, target, &name, query).await,
            (&Method::GET, Some(name)) => get(server, target, &name, headers).await,
            (&Method::GET, None)
                if matches!(query.get("watch").map(String::as_str), Some("true" | "1")) =>
            {
                watch(server.clone(), target.clone(), query, shape(headers))
            }
            (&Method::GET, None) => list(server, target, query, headers).await,
            (&Method::POST, None) => create(server, target, body).await,
            (&Method::PUT, Some(name)) => replace(server, target, &name, parse_body(body)?).await,
            (&Method::PATCH, Some(name)) => {
                patch(server, target, &name, body, headers, query).await
            }
            (&Method::DELETE, Some(name)) => delete(server, target, &name, body, query).await,
            _ => Err(Failure::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                format!("{method} is not supported on {}", uri.path()),
            )),
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Failure> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            e.to_string(),
        )
    })
}

async fn read(server: &Arc<ApiServer>, target: &Target, name: &str) -> Result<Stored, Failure> {
    let key = target.resource.key(target.namespace.as_deref(), name);
    let s = server.clone();
    blocking(move || s.store.get(&key))
        .await?
        .map_err(|e| store_failure(target, name, e))?
        .ok_or_else(|| target.not_found(name))
}
