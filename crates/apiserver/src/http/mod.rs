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
mod deletes;
mod documents;
mod reads;
mod served;
mod target;
mod watches;
mod writes;

use admission::*;
pub use deletes::*;
use documents::*;
use reads::*;
use target::*;
use watches::*;
use writes::*;

use crate::discovery;
use crate::keyspace::Keyspace;
use crate::object::{
    Change, Identity, Refusal, prepare_create, prepare_status_update, prepare_update,
    set_resource_version,
};
use crate::patch::PatchType;
use crate::resources::{Resource, builtins};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{self, Event, EventKind, Revision, Store, Stored, Write};

/// Most watches open at once by default; each holds a task and a channel, so
/// a client that leaks them gets 429 instead of exhausting the server.
pub const MAX_WATCHES: usize = 10_000;
/// Largest accepted request body.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// The server's state: one cluster (the root one or a logical one).
pub struct ApiServer {
    store: Keyspace,
    /// Built-in kinds and those of the stored CRDs.
    resources: std::sync::RwLock<Arc<Vec<Resource>>>,
    /// What every cluster of the store shares: admission for Modelplane's
    /// kinds and the compiled schemas of other CRDs.
    shared: Arc<Shared>,
    /// The same for the other custom kinds, from their CRDs' schemas, by
    /// `apiVersion` and plural; each kept with the schema it was compiled from.
    schemas: std::sync::RwLock<CompiledSchemas>,
    /// The kinds of each stored CRD: a CRD's write replaces its own entry
    /// without reading the others again. Held while the table is rebuilt
    /// from it.
    crds: std::sync::Mutex<served::CrdKinds>,
    /// The groups of the CRD writes on their way: until a write is in the
    /// table, discovery and a request for a kind of its group read the
    /// stored CRDs again (a client that heard of the CRD on a watch may ask
    /// for its kind first).
    crd_writes: std::sync::Mutex<Vec<String>>,
    /// Serves `LogicalCluster` (the root cluster of a store).
    root: bool,
    /// Watches open now, and how many may be ([`MAX_WATCHES`] by default).
    watches: std::sync::atomic::AtomicUsize,
    watch_limit: std::sync::atomic::AtomicUsize,
}

/// A CRD write on its way (see [`ApiServer::crd_write`]).
pub(crate) struct CrdWrite<'a> {
    server: &'a ApiServer,
    group: String,
}

impl Drop for CrdWrite<'_> {
    fn drop(&mut self) {
        // The write itself put the CRD in the table (`crd_written`); a write
        // that failed changed nothing.
        let mut writes = lock(&self.server.crd_writes);
        if let Some(at) = writes.iter().position(|g| *g == self.group) {
            writes.swap_remove(at);
        }
    }
}

/// A lock whose holder panicked is still taken: what it guards is rebuilt
/// whole by each holder.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Kept once per store, for every cluster in it: Modelplane's admission
/// (validation, pruning, defaulting and CEL for Modelplane's kinds) and each
/// distinct schema of another CRD with its compiled form, so a thousand
/// clusters with the same CRD hold and compile it once.
#[derive(Default)]
pub struct Shared {
    admission: modelplane_cel::Admission,
    /// The background work requests start (collections, namespace
    /// terminations, watch streams), stopped with the server.
    tasks: modelplane_supervisor::Supervisor,
    schemas: std::sync::Mutex<std::collections::HashMap<String, Interned>>,
    /// What the server answered, for `/metrics`.
    metrics: crate::metrics::Metrics,
}

struct Interned {
    schema: Arc<Value>,
    compiled: Option<Arc<modelplane_cel::SchemaAdmission>>,
}

impl Shared {
    /// The one shared copy of `schema`. Copies no cluster holds any more
    /// are dropped on the way.
    fn intern(&self, schema: &Arc<Value>) -> Arc<Value> {
        let Ok(mut schemas) = self.schemas.lock() else {
            return schema.clone();
        };
        schemas.retain(|_, interned| Arc::strong_count(&interned.schema) > 1);
        schemas
            .entry(schema.to_string())
            .or_insert_with(|| Interned {
                schema: schema.clone(),
                compiled: None,
            })
            .schema
            .clone()
    }

    /// The compiled form of `schema`, compiling it the first time.
    fn compile(&self, schema: &Arc<Value>) -> Arc<modelplane_cel::SchemaAdmission> {
        let compile = || Arc::new(modelplane_cel::SchemaAdmission::compile((**schema).clone()));
        let Ok(mut schemas) = self.schemas.lock() else {
            return compile();
        };
        let interned = schemas
            .entry(schema.to_string())
            .or_insert_with(|| Interned {
                schema: schema.clone(),
                compiled: None,
            });
        interned.compiled.get_or_insert_with(compile).clone()
    }
}

type CompiledSchemas =
    std::collections::HashMap<(String, String), (Arc<Value>, Arc<modelplane_cel::SchemaAdmission>)>;

/// Key prefix of the stored CRDs.
const CRD_PREFIX: &str = "/apiextensions.k8s.io/customresourcedefinitions/";

impl ApiServer {
    /// A server over `store`, serving the built-in kinds and every CRD stored.
    pub fn new(store: Store) -> Arc<ApiServer> {
        ApiServer::in_space(Keyspace::root(Arc::new(store)), Arc::default(), true)
    }

    /// A server for one cluster's keys of a shared store.
    pub fn in_space(store: Keyspace, shared: Arc<Shared>, root: bool) -> Arc<ApiServer> {
        let server = Arc::new(ApiServer {
            store,
            resources: std::sync::RwLock::default(),
            shared,
            schemas: std::sync::RwLock::default(),
            crds: std::sync::Mutex::default(),
            crd_writes: std::sync::Mutex::default(),
            root,
            watches: std::sync::atomic::AtomicUsize::new(0),
            watch_limit: std::sync::atomic::AtomicUsize::new(MAX_WATCHES),
        });
        server.sync_crds();
        // A store that cannot be written shows on the first request.
        let _ = crate::namespaces::ensure_built_in(&server);
        server
    }

    /// Owns the work requests leave running after they answer.
    pub fn tasks(&self) -> &modelplane_supervisor::Supervisor {
        &self.shared.tasks
    }

    /// What the server answered, counted.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.shared.metrics
    }

    /// What this server shares with the other clusters of its store.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Caps the watches open at once; more get 429.
    pub fn limit_watches(&self, limit: usize) {
        self.watch_limit
            .store(limit, std::sync::atomic::Ordering::Relaxed);
    }

    /// This cluster's keys of the store (for tests and compaction).
    pub fn store(&self) -> &Keyspace {
        &self.store
    }

    /// Every resource served now: the table itself, not a copy. Read for
    /// discovery, so a CRD write on its way is waited for.
    pub fn resources(&self) -> Arc<Vec<Resource>> {
        if !lock(&self.crd_writes).is_empty() {
            self.sync_crds();
        }
        self.table()
    }

    fn table(&self) -> Arc<Vec<Resource>> {
        self.resources.read().map(|r| r.clone()).unwrap_or_default()
    }

    /// The resource `group/version` serves as `plural` (every request
    /// looks its own up here); while a CRD of `group` is being written, as
    /// stored now.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Resource> {
        if lock(&self.crd_writes).iter().any(|g| g == group) {
            self.sync_crds();
        }
        self.table()
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// Marks a write of a CRD of `group` on its way, until dropped (after
    /// the write).
    pub(crate) fn crd_write(&self, group: &str) -> CrdWrite<'_> {
        lock(&self.crd_writes).push(group.to_string());
        CrdWrite {
            server: self,
            group: group.to_string(),
        }
    }

    /// Rebuilds the resource table from the built-ins and the stored CRDs.
    fn sync_crds(&self) {
        let mut crds = lock(&self.crds);
        if let Ok((at, stored)) = self.store.list(CRD_PREFIX, None, None) {
            crds.listed(at, stored.iter().filter_map(|s| self.crd_entry(s)));
        }
        self.publish(&crds);
    }

    /// Keeps the table in step with a write to the store at `stored.key`
    /// (by any path: requests, collection, a CRD's cleanup), if a CRD's.
    pub(crate) fn crd_written(&self, stored: &Stored, deleted: bool) {
        let Some(name) = stored.key.strip_prefix(CRD_PREFIX) else {
            return;
        };
        if deleted {
            let mut crds = lock(&self.crds);
            if crds.deleted(name, stored.revision) {
                self.publish(&crds);
            }
        } else if let Some((name, revision, kinds)) = self.crd_entry(stored) {
            let mut crds = lock(&self.crds);
            if crds.stored(name, revision, kinds) {
                self.publish(&crds);
            }
        }
    }

    /// A stored CRD's name and kinds, their schemas shared store-wide.
    fn crd_entry(&self, stored: &Stored) -> Option<(String, Revision, Vec<Resource>)> {
        let crd: Value = serde_json::from_slice(&stored.value).ok()?;
        let name = crd["metadata"]["name"].as_str()?.to_string();
        let mut resources = crate::crd::resources(&crd);
        for resource in &mut resources {
            if let Some(schema) = &resource.schema {
                resource.schema = Some(self.shared.intern(schema));
            }
        }
        Some((name, stored.revision, resources))
    }

    /// Serves the built-ins and the kinds of `crds`.
    fn publish(&self, crds: &served::CrdKinds) {
        let mut table = builtins();
        if self.root {
            table.push(crate::clusters::resource());
        }
        table.extend(crds.kinds().cloned());
        self.compile_schemas(&table);
        if let Ok(mut resources) = self.resources.write() {
            *resources = Arc::new(table);
        }
    }

    /// Compiles the schema of every custom kind not Modelplane's own,
    /// reusing what was compiled before for a schema that did not change.
    fn compile_schemas(&self, table: &[Resource]) {
        let Ok(mut schemas) = self.schemas.write() else {
            return;
        };
        let mut compiled = CompiledSchemas::new();
        for resource in table {
            let Some(schema) = &resource.schema else {
                continue;
            };
            let api_version = resource.api_version();
            if modelplane_api::crds::is_modelplane_group(&api_version) {
                continue;
            }
            let key = (api_version, resource.plural.clone());
            let admission = match schemas.get(&key) {
                Some((old, admission)) if old == schema => admission.clone(),
                _ => self.shared.compile(schema),
            };
            compiled.insert(key, (schema.clone(), admission));
        }
        *schemas = compiled;
    }

    /// The compiled schema of a custom kind that is not Modelplane's.
    fn schema_of(&self, resource: &Resource) -> Option<Arc<modelplane_cel::SchemaAdmission>> {
        let schemas = self.schemas.read().ok()?;
        schemas
            .get(&(resource.api_version(), resource.plural.clone()))
            .map(|(_, admission)| admission.clone())
    }
}

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

/// A stored object as served: its bytes parsed, its revision stamped.
pub(crate) fn read_stored(stored: &Stored) -> Result<Value, serde_json::Error> {
    let mut object: Value = serde_json::from_slice(&stored.value)?;
    set_resource_version(&mut object, stored.revision);
    Ok(object)
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

/// The stored form: `apiVersion`, `kind` and `metadata` first (so lists can
/// stamp the resourceVersion without parsing, see [`stamp`]), no
/// resourceVersion (the store's revision is the truth).
pub(crate) fn encode(object: &Value) -> Vec<u8> {
    match object {
        // Written in that order as they are, without copying the object.
        // A map of JSON values always serializes; were it ever to fail, the
        // object as it is (but for its resourceVersion, which `stamp` adds)
        // beats storing nothing.
        Value::Object(map) => serde_json::to_vec(&StoredForm(map)).unwrap_or_else(|_| {
            let mut object = object.clone();
            if let Some(metadata) = object["metadata"].as_object_mut() {
                metadata.remove("resourceVersion");
            }
            object.to_string().into()
        }),
        _ => b"{}".to_vec(),
    }
}

/// The keys [`encode`] writes first, in this order.
const STORED_FIRST: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// An object as [`encode`] writes it.
struct StoredForm<'a>(&'a serde_json::Map<String, Value>);

/// A metadata map without its resourceVersion.
struct MetadataStored<'a>(&'a serde_json::Map<String, Value>);

impl serde::Serialize for StoredForm<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut out = serializer.serialize_map(None)?;
        for key in STORED_FIRST {
            match self.0.get(key) {
                Some(Value::Object(meta)) if key == "metadata" => {
                    out.serialize_entry(key, &MetadataStored(meta))?;
                }
                Some(value) => out.serialize_entry(key, value)?,
                None => {}
            }
        }
        for (key, value) in self.0 {
            if !STORED_FIRST.contains(&key.as_str()) {
                out.serialize_entry(key, value)?;
            }
        }
        out.end()
    }
}

impl serde::Serialize for MetadataStored<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut out = serializer.serialize_map(None)?;
        for (key, value) in self.0 {
            if key != "resourceVersion" {
                out.serialize_entry(key, value)?;
            }
        }
        out.end()
    }
}

/// The stored bytes with `"resourceVersion":"REV"` spliced into the
/// top-level metadata, when the bytes have the shape [`encode`] writes:
/// `{"apiVersion":"…","kind":"…","metadata":{…`. `None` otherwise.
fn stamp(raw: &[u8], revision: Revision) -> Option<Vec<u8>> {
    const AT: &[u8] = b",\"metadata\":{";
    let at = raw.windows(AT.len()).position(|w| w == AT)?;
    // Exactly the two string fields before it: eight quotes, none escaped.
    let head = &raw[..at];
    if !head.starts_with(b"{\"apiVersion\":")
        || head.iter().filter(|b| **b == b'"').count() != 8
        || head.contains(&b'\\')
    {
        return None;
    }
    let split = at + AT.len();
    let mut out = Vec::with_capacity(raw.len() + 32);
    out.extend_from_slice(&raw[..split]);
    out.extend_from_slice(format!("\"resourceVersion\":\"{revision}\"").as_bytes());
    if raw.get(split) != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(&raw[split..]);
    Some(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamping_splices_the_revision_into_top_level_metadata() {
        let object = json!({ "data": { "x": "\"metadata\":{" }, "metadata": { "name": "a" }, "kind": "ConfigMap", "apiVersion": "v1" });
        let raw = encode(&object);
        let stamped: Value =
            serde_json::from_slice(&stamp(&raw, 42).expect("encoded shape")).expect("JSON");
        let mut expected = object.clone();
        expected["metadata"]["resourceVersion"] = json!("42");
        assert_eq!(stamped, expected);
        let empty_meta = encode(&json!({ "apiVersion": "v1", "kind": "X", "metadata": {} }));
        let stamped: Value =
            serde_json::from_slice(&stamp(&empty_meta, 7).expect("shape")).expect("JSON");
        assert_eq!(stamped["metadata"], json!({ "resourceVersion": "7" }));
        assert!(
            stamp(br#"{"spec":{"metadata":{}},"metadata":{}}"#, 1).is_none(),
            "other shapes are parsed instead"
        );
    }

    #[test]
    fn the_stored_form_puts_type_and_metadata_first_without_the_resource_version() {
        let object = json!({ "data": { "b": "1", "a": "2" },
            "metadata": { "resourceVersion": "5", "name": "c", "labels": { "z": "1" } },
            "kind": "ConfigMap", "apiVersion": "v1" });
        assert_eq!(
            String::from_utf8(encode(&object)).expect("UTF-8"),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"z":"1"}},"data":{"b":"1","a":"2"}}"#
        );
        assert_eq!(encode(&json!([1])), b"{}");
    }
}
