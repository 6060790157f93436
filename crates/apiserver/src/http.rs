//! The Kubernetes REST surface over the store (`apiserver.md` §1, §3):
//! get, list (label and field selectors, `limit`/`continue`), watch
//! (NDJSON, resume from a resourceVersion, bookmarks, `sendInitialEvents`,
//! in-stream 410), create, replace, patch (merge, JSON, strategic subset),
//! delete, and the status
//! subresource, with Kubernetes `Status` errors.
//!
//! Legacy discovery and OpenAPI v3 are served too, and finalizers hold deletions until the
//! last one is removed; aggregated discovery, server-side apply and dry runs too.
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

/// Watches without `timeoutSeconds` end after this long, as real servers do.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Objects read from the store at a time while listing.
const LIST_PAGE: usize = 1000;
/// Most watches open at once by default; each holds a task and a channel, so
/// a client that leaks them gets 429 instead of exhausting the server.
pub const MAX_WATCHES: usize = 10_000;
/// Largest accepted request body.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// The server's state: one cluster (the root one or a logical one).
pub struct ApiServer {
    store: Keyspace,
    /// Built-in kinds and those of the stored CRDs.
    resources: std::sync::RwLock<Vec<Resource>>,
    /// What every cluster of the store shares: admission for Modelplane's
    /// kinds and the compiled schemas of other CRDs.
    shared: Arc<Shared>,
    /// The same for the other custom kinds, from their CRDs' schemas, by
    /// `apiVersion` and plural; each kept with the schema it was compiled from.
    schemas: std::sync::RwLock<CompiledSchemas>,
    /// Serves `LogicalCluster` (the root cluster of a store).
    root: bool,
    /// Watches open now, and how many may be ([`MAX_WATCHES`] by default).
    watches: std::sync::atomic::AtomicUsize,
    watch_limit: std::sync::atomic::AtomicUsize,
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
            resources: std::sync::RwLock::new(Vec::new()),
            shared,
            schemas: std::sync::RwLock::default(),
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

    /// Every resource served now.
    pub fn resources(&self) -> Vec<Resource> {
        self.resources.read().map(|r| r.clone()).unwrap_or_default()
    }

    /// Rebuilds the resource table from the built-ins and the stored CRDs.
    fn sync_crds(&self) {
        let mut table = builtins();
        if self.root {
            table.push(crate::clusters::resource());
        }
        if let Ok((_, crds)) = self.store.list(CRD_PREFIX, None, None) {
            for stored in crds {
                if let Ok(crd) = serde_json::from_slice::<Value>(&stored.value) {
                    table.extend(crate::crd::resources(&crd));
                }
            }
        }
        for resource in &mut table {
            if let Some(schema) = &resource.schema {
                resource.schema = Some(self.shared.intern(schema));
            }
        }
        self.compile_schemas(&table);
        if let Ok(mut resources) = self.resources.write() {
            *resources = table;
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
        .fallback(handle)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
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
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
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

/// What a path addresses.
#[derive(Clone, Debug)]
struct Target {
    resource: Resource,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
    /// The scale subresource.
    scale: bool,
    /// A pod's log.
    log: bool,
    /// `fieldValidation` and `dryRun` of the request.
    options: WriteOptions,
    /// Who writes: the `fieldManager`, else the client's User-Agent up to
    /// its first `/`, as Kubernetes names managers of updates.
    manager: String,
    /// The request is a PATCH (an apply may create).
    patch: bool,
}

impl Target {
    /// The fields this request addresses, for ownership.
    fn scope(&self) -> crate::apply::Scope {
        if self.status {
            crate::apply::Scope::Status
        } else {
            crate::apply::Scope::Main {
                status_subresource: self.resource.status,
            }
        }
    }
}

/// How the request asks its write to be handled (`apiserver.md` §3.13, §3.14).
#[derive(Clone, Copy, Debug, Default)]
struct WriteOptions {
    field_validation: FieldValidation,
    /// `dryRun=All`: admit and check everything, persist nothing.
    dry_run: bool,
}

/// What an unknown field does to a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum FieldValidation {
    /// Pruned silently.
    Ignore,
    /// Pruned, with a `Warning` header (the default).
    #[default]
    Warn,
    /// Rejected with 400.
    Strict,
}

impl WriteOptions {
    fn from_query(query: &BTreeMap<String, String>) -> Result<WriteOptions, Failure> {
        let field_validation = match query.get("fieldValidation").map(String::as_str) {
            None | Some("" | "Warn") => FieldValidation::Warn,
            Some("Ignore") => FieldValidation::Ignore,
            Some("Strict") => FieldValidation::Strict,
            Some(other) => {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!(
                        "fieldValidation parameter unsupported: \"{other}\": valid values are \"Ignore\", \"Warn\", \"Strict\""
                    ),
                ));
            }
        };
        let dry_run = match query.get("dryRun").map(String::as_str) {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!(
                        "unsupported dryRun value \"{other}\": the only supported value is \"All\""
                    ),
                ));
            }
        };
        Ok(WriteOptions {
            field_validation,
            dry_run,
        })
    }
}

impl Target {
    fn qualified(&self) -> String {
        if self.resource.group.is_empty() {
            self.resource.plural.clone()
        } else {
            format!("{}.{}", self.resource.plural, self.resource.group)
        }
    }

    fn details(&self, name: &str) -> Value {
        json!({ "name": name, "group": self.resource.group, "kind": self.resource.plural })
    }

    fn not_found(&self, name: &str) -> Failure {
        Failure {
            details: Some(self.details(name)),
            ..Failure::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{} \"{name}\" not found", self.qualified()),
            )
        }
    }

    fn list_prefix(&self) -> String {
        match (&self.namespace, self.resource.namespaced) {
            (Some(ns), true) => self.resource.namespace_prefix(ns),
            _ => self.resource.prefix(),
        }
    }
}

fn parse_target(server: &ApiServer, path: &str) -> Result<Target, Failure> {
    let not_found = || {
        Failure::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        )
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(not_found()),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, rest @ ..] => (
            Some(ns.to_string()),
            std::iter::once(*plural)
                .chain(rest.iter().copied())
                .collect::<Vec<_>>(),
        ),
        _ => (None, rest.to_vec()),
    };
    // `/api/v1/namespaces/NAME` addresses the namespace itself.
    let (plural, name, sub) = match (namespace.as_deref(), rest.as_slice()) {
        (Some(ns), []) if group.is_empty() => ("namespaces", Some(ns.to_string()), None),
        (Some(ns), ["status"]) if group.is_empty() => {
            ("namespaces", Some(ns.to_string()), Some("status"))
        }
        (_, [plural]) => (*plural, None, None),
        (_, [plural, name]) => (*plural, Some(name.to_string()), None),
        (_, [plural, name, sub]) => (*plural, Some(name.to_string()), Some(*sub)),
        _ => return Err(not_found()),
    };
    let namespace = if plural == "namespaces" && group.is_empty() {
        None
    } else {
        namespace
    };
    let resource = server
        .resources()
        .into_iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
        .ok_or_else(not_found)?;
    let (status, scale, log) = match sub {
        None => (false, false, false),
        Some("status") if resource.status => (true, false, false),
        Some("scale") if resource.scale.is_some() => (false, true, false),
        Some("log") if group.is_empty() && plural == "pods" => (false, false, true),
        Some(_) => return Err(not_found()),
    };
    Ok(Target {
        resource,
        namespace,
        name,
        status,
        scale,
        log,
        options: WriteOptions::default(),
        manager: String::new(),
        patch: false,
    })
}

fn query(uri: &Uri) -> BTreeMap<String, String> {
    uri.query()
        .map(|q| {
            form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default()
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
    let mut ordered = serde_json::Map::new();
    if let Some(map) = object.as_object() {
        for key in ["apiVersion", "kind", "metadata"] {
            if let Some(v) = map.get(key) {
                ordered.insert(key.to_string(), v.clone());
            }
        }
        for (k, v) in map {
            if !ordered.contains_key(k) {
                ordered.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(meta) = ordered.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    Value::Object(ordered).to_string().into_bytes()
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
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    if let Err(failure) = check_content_type(&method, &headers) {
        return failure.into_response();
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            let status = rejection.status();
            let reason = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "RequestEntityTooLarge"
            } else {
                "BadRequest"
            };
            let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                format!("the request body is larger than the limit of {MAX_BODY} bytes")
            } else {
                rejection.body_text()
            };
            return Failure::new(status, reason, message).into_response();
        }
    };
    let body = match json_body(&headers, body) {
        Ok(body) => body,
        Err(failure) => return failure.into_response(),
    };
    if method == Method::GET {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if let Some(response) = aggregated_discovery(&server, uri.path(), accept) {
            return response;
        }
        if uri.path().trim_end_matches('/') == "/openapi/v2" {
            return openapi_v2(&server, accept);
        }
        if let Some(body) = discover(&server, uri.path()) {
            return json_response(StatusCode::OK, &body);
        }
    }
    let result = async {
        let mut target = parse_target(&server, uri.path())?;
        let query = query(&uri);
        target.options = WriteOptions::from_query(&query)?;
        target.patch = method == Method::PATCH;
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
            match dispatch(&server, &target, &method, &uri, &headers, &query, &body).await {
                Err(failure) if failure.race && attempts < RACE_RETRIES => continue,
                other => return other,
            }
        }
    };
    // A request must never take the connection down with it: should a
    // handler panic on some body nobody foresaw, the client gets a Status.
    match futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await {
        Ok(result) => result.unwrap_or_else(IntoResponse::into_response),
        Err(_) => Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "the server could not handle this request",
        )
        .into_response(),
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

/// A pod's log, from the kubelet of its node.
async fn pod_log(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
    query: &BTreeMap<String, String>,
) -> Result<Response, Failure> {
    let pod = decode(&read(server, target, name).await?)?;
    let node = match pod["spec"]["nodeName"].as_str() {
        Some(node_name) => {
            let nodes = server
                .resources()
                .into_iter()
                .find(|r| r.group.is_empty() && r.plural == "nodes")
                .ok_or_else(|| target.not_found(name))?;
            let key = nodes.key(None, node_name);
            let s = server.clone();
            let stored = blocking(move || s.store.get(&key))
                .await?
                .map_err(|e| store_failure(target, name, e))?;
            stored.map(|n| decode(&n)).transpose()?
        }
        None => None,
    };
    crate::logs::pod_log(&pod, node.as_ref(), query).await
}

/// Aggregated discovery of `/api` or `/apis`, when the client asks for it.
fn aggregated_discovery(server: &ApiServer, path: &str, accept: &str) -> Option<Response> {
    let core = match path.trim_end_matches('/') {
        "/api" => true,
        "/apis" => false,
        _ => return None,
    };
    if !discovery::wants_aggregated(accept) {
        return None;
    }
    let mut response = json_response(
        StatusCode::OK,
        &discovery::aggregated(&server.resources(), core),
    );
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(discovery::AGGREGATED),
    );
    Some(response)
}

/// `/openapi/v2`, in gnostic's protobuf when asked for it (kubectl does).
fn openapi_v2(server: &ApiServer, accept: &str) -> Response {
    use crate::openapi::v2;
    let document = v2::document(&server.resources());
    if !accept.contains(v2::PROTOBUF) {
        return json_response(StatusCode::OK, &document);
    }
    // kube-apiserver answers it as octet-stream: client-go cannot parse the
    // `@` of the media type it asked for.
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        v2::protobuf(&document),
    )
        .into_response()
}

/// Discovery documents, for the paths that are not resources.
fn discover(server: &ApiServer, path: &str) -> Option<Value> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api"] => Some(discovery::core_versions()),
        ["apis"] => Some(discovery::groups(&server.resources())),
        ["openapi", "v3"] => Some(crate::openapi::v3::index(&server.resources())),
        ["openapi", "v3", rest @ ..] => {
            crate::openapi::v3::document(&server.resources(), &rest.join("/"))
        }
        ["api", version] => discovery::resource_list(&server.resources(), "", version),
        ["apis", group, version] => discovery::resource_list(&server.resources(), group, version),
        _ => None,
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

/// The form a read asks for in its `Accept` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// The objects themselves.
    Full,
    /// A `Table` (kubectl get).
    Table,
    /// `PartialObjectMetadata`: metadata only (`Api::get_metadata`,
    /// `metadata_watcher`).
    Metadata,
}

fn shape(headers: &axum::http::HeaderMap) -> Shape {
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
fn metadata_only(object: &Value) -> Value {
    json!({ "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"] })
}

async fn get(
    server: &Arc<ApiServer>,
    target: &Target,
    name: &str,
    headers: &axum::http::HeaderMap,
) -> Result<Response, Failure> {
    let stored = read(server, target, name).await?;
    let object = decode(&stored)?;
    match shape(headers) {
        Shape::Table if !target.status => {
            let table =
                crate::table::table(&target.resource, &[object], &stored.revision.to_string());
            Ok(json_response(StatusCode::OK, &table))
        }
        Shape::Metadata => Ok(json_response(StatusCode::OK, &metadata_only(&object))),
        _ => Ok(json_response(StatusCode::OK, &object)),
    }
}

async fn write(
    server: &ApiServer,
    target: &Target,
    name: &str,
    w: Write,
) -> Result<Stored, Failure> {
    if target.options.dry_run {
        return dry_write(server, target, name, w);
    }
    server
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
        })
}

/// What `w` would store, checked against the current state (existence,
/// the expected revision) but not stored: `dryRun=All`. An update keeps the
/// current revision, a create has none yet.
fn dry_write(server: &ApiServer, target: &Target, name: &str, w: Write) -> Result<Stored, Failure> {
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
async fn check_namespace(server: &Arc<ApiServer>, target: &Target) -> Result<(), Failure> {
    let Some(namespace) = target
        .namespace
        .clone()
        .filter(|_| target.resource.namespaced)
    else {
        return Ok(());
    };
    let s = server.clone();
    match blocking(move || crate::namespaces::refuse_content(&s, &namespace)).await? {
        Ok(None) => Ok(()),
        Ok(Some((404, message))) => Err(Failure::new(StatusCode::NOT_FOUND, "NotFound", message)),
        Ok(Some((_, message))) => Err(Failure::new(StatusCode::FORBIDDEN, "Forbidden", message)),
        Err(e) => Err(store_failure(target, "", e)),
    }
}

async fn create(
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
    crate::apply::record_update(None, &mut object, &target.manager, &now, target.scope());
    let is_crd = target.resource.plural == "customresourcedefinitions";
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
    if is_crd {
        server.sync_crds();
    }
    Ok(with_warnings(
        json_response(StatusCode::CREATED, &decode(&stored)?),
        &warnings,
    ))
}

/// Admission of a write: Modelplane's own kinds through their compiled CRDs
/// (with advisories), other custom kinds through the schema of the CRD that
/// defines them; built-in kinds pass as they are. Unknown fields are pruned
/// and then, by the request's `fieldValidation`, warned about, ignored or
/// refused (400, before any other check, as decoding is); any other problem
/// is a 422 listing every cause.
fn admit(
    server: &ApiServer,
    target: &Target,
    object: Value,
    old: Option<&Value>,
) -> Result<(Value, Vec<String>), Failure> {
    let metadata = object["metadata"].clone();
    let (mut admitted, problems, mut warnings) = if modelplane_api::crds::is_modelplane_group(
        &target.resource.api_version(),
    ) {
        match server.shared.admission.review(object, old) {
            modelplane_cel::Review::Skipped { api_version, kind } => {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!(
                        "the API version in the data ({api_version}) does not match the expected API version ({}) for kind {kind}",
                        target.resource.api_version()
                    ),
                ));
            }
            modelplane_cel::Review::Checked {
                object,
                errors,
                warnings,
                ..
            } => (
                object,
                errors,
                warnings
                    .iter()
                    .map(|w| format!("{}: {}", w.path, w.message))
                    .collect::<Vec<_>>(),
            ),
        }
    } else if let Some(schema) = server.schema_of(&target.resource) {
        let (object, problems) = schema.review(object, old);
        (object, problems, Vec::new())
    } else {
        return Ok((object, Vec::new()));
    };
    let errors = field_validation(target, problems, &mut warnings)?;
    if !errors.is_empty() {
        return Err(invalid(target, &metadata, &errors));
    }
    admitted["metadata"] = metadata;
    Ok((admitted, warnings))
}
/// Applies the request's `fieldValidation` to the unknown fields among
/// `problems` (already pruned); returns the other problems.
fn field_validation(
    target: &Target,
    problems: Vec<modelplane_cel::Problem>,
    warnings: &mut Vec<String>,
) -> Result<Vec<modelplane_cel::Problem>, Failure> {
    let (unknown, errors): (Vec<_>, Vec<_>) = problems.into_iter().partition(|p| p.unknown_field);
    match target.options.field_validation {
        FieldValidation::Strict if !unknown.is_empty() => {
            let fields: Vec<&str> = unknown.iter().map(|p| p.message.as_str()).collect();
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!(
                    "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {}",
                    target.resource.version,
                    fields.join(", "),
                    kind = target.resource.kind,
                ),
            ));
        }
        FieldValidation::Warn => warnings.extend(unknown.into_iter().map(|p| p.message)),
        FieldValidation::Strict | FieldValidation::Ignore => {}
    }
    Ok(errors)
}

/// The 422 of an object that failed admission, naming every cause.
fn invalid(target: &Target, metadata: &Value, errors: &[modelplane_cel::Problem]) -> Failure {
    let name = metadata["name"].as_str().unwrap_or_default();
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({ "reason": "FieldValueInvalid", "message": e.message, "field": e.path }))
        .collect();
    let summary: Vec<String> = errors
        .iter()
        .map(|e| {
            if e.path.is_empty() {
                e.message.clone()
            } else {
                format!("{}: {}", e.path, e.message)
            }
        })
        .collect();
    Failure {
        details: Some(
            json!({ "name": name, "group": target.resource.group, "kind": target.resource.kind, "causes": causes }),
        ),
        ..Failure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: {}",
                target.qualified(),
                summary.join(", ")
            ),
        )
    }
}

/// Adds `Warning` headers, as kubectl prints them.
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let escaped = warning.replace('\\', "\\\\").replace('"', "\\\"");
        let text = format!("299 - \"{escaped}\"");
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// Validates `new` as the successor of `old` and stores it: on the status
/// endpoint only its status counts; elsewhere it goes through admission and
/// the metadata rules. Shared by replace, every patch type and scale.
async fn update_to(
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
        );
    }
    let response = store_update(server, target, name, old, new, change, expected).await?;
    if target.resource.plural == "customresourcedefinitions" {
        server.sync_crds();
    }
    Ok(with_warnings(response, &warnings))
}

/// What a write makes of an object: the new object, the revision it must
/// replace (if the client said), and whether it came from an apply (which
/// records its own ownership) rather than an update.
struct Successor {
    object: Value,
    expected: Option<Revision>,
    applied: bool,
}

/// Stores `new` (already prepared) as the successor of `old`, unless nothing changed.
async fn store_update(
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
        return Ok(json_response(StatusCode::OK, &decode(old)?));
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
    Ok(json_response(StatusCode::OK, &decode(&stored)?))
}

async fn replace(
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
fn is_custom(resource: &Resource) -> bool {
    !builtins()
        .iter()
        .any(|r| r.group == resource.group && r.plural == resource.plural)
}

fn not_an_object() -> Failure {
    Failure::new(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "the request body must be a JSON object",
    )
}

/// Server-side apply (`crate::apply`): creates the object when missing.
async fn server_side_apply(
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
    let applied: Value = serde_saphyr::from_str(text)
        .map_err(|e| bad(format!("the apply patch is not valid YAML: {e}")))?;
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
        let mut object = crate::apply::apply(None, &applied, manager, force, &now, target.scope())
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
        let is_crd = target.resource.plural == "customresourcedefinitions";
        if is_crd {
            crate::crd::accept(&mut object, &now);
        }
        if target.resource.is_namespaces() {
            crate::namespaces::activate(&mut object);
        }
        let key = target.resource.key(target.namespace.as_deref(), name);
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
        if is_crd {
            server.sync_crds();
        }
        return Ok(with_warnings(
            json_response(StatusCode::CREATED, &decode(&stored)?),
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
fn set_at(object: &mut Value, path: &str, value: Value) {
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
fn scale_of(object: &Value, paths: &crate::resources::ScalePaths) -> Value {
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
async fn scale(
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

async fn patch(
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

async fn delete(
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
    let crd = target.resource.plural == "customresourcedefinitions";
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
        if crd {
            server.sync_crds();
        }
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
    Ok(json_response(StatusCode::OK, &decode(&stored)?))
}

fn added_finalizer(old: &Value, new: &Value) -> bool {
    let before = old["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    new["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|after| after.iter().any(|f| !before.contains(f)))
}

/// The next step of deleting a stored object on the server's own behalf
/// (a namespace's or a CRD's contents): delete it, or mark it for its
/// finalizers; `None` when it is marked and waiting already.
pub(crate) fn deletion_step(stored: &Stored, object: &mut Value) -> Option<Write> {
    if !has_finalizers(object) {
        return Some(Write::Delete {
            key: stored.key.clone(),
            expected: Some(stored.revision),
        });
    }
    crate::object::mark_deleting(object).then(|| Write::Update {
        key: stored.key.clone(),
        expected: Some(stored.revision),
        value: encode(object),
    })
}

pub(crate) fn has_finalizers(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
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
const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

fn add_finalizer(object: &mut Value, finalizer: &str) {
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
async fn delete_custom_objects(server: Arc<ApiServer>, key: String) {
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
            if let Ok(Ok(_)) = server.store.submit(write).await {
                server.sync_crds();
                return;
            }
            continue;
        }
        // Wait for a change (a finalizer removed) rather than poll.
        let _ = tokio::time::timeout(Duration::from_secs(1), changes.recv()).await;
    }
}

/// Marks a namespace Terminating and empties it in the background.
async fn delete_namespace(
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
                crate::namespaces::terminate(server.clone(), name.to_string()),
            );
        }
    }
    Ok(json_response(StatusCode::OK, &object))
}

/// Starts collecting the dependents of a deleted object.
fn spawn_collection(server: &Arc<ApiServer>, deleted: &Value, orphan: bool) {
    if let Some(uid) = deleted["metadata"]["uid"].as_str() {
        server.tasks().spawn(
            "garbage collection",
            crate::gc::collect(server.clone(), uid.to_string(), orphan),
        );
    }
}

/// Whether an object passes the request's selectors.
struct Filter {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn from_query(query: &BTreeMap<String, String>) -> Result<Filter, Failure> {
        let bad = |e: String| Failure::new(StatusCode::BAD_REQUEST, "BadRequest", e);
        Ok(Filter {
            labels: LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
                .map_err(bad)?,
            fields: FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))
                .map_err(bad)?,
        })
    }

    fn is_empty(&self) -> bool {
        self.labels == LabelSelector::default() && self.fields == FieldSelector::default()
    }

    fn matches(&self, object: &Value) -> bool {
        self.labels.matches(&object["metadata"]["labels"]) && self.fields.matches(object)
    }
}

fn continue_token(revision: Revision, last_key: &str) -> String {
    let raw = format!("{revision}\n{last_key}");
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn parse_continue(token: &str) -> Option<(Revision, String)> {
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

async fn list(
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
            let mut table = crate::table::table(&target.resource, &items, &revision.to_string());
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
async fn list_raw(
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

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({ "type": kind, "object": object }).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn bookmark(target: &Target, revision: Revision, initial_end: bool) -> Bytes {
    let mut metadata = json!({ "resourceVersion": revision.to_string() });
    if initial_end {
        metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    event_line(
        "BOOKMARK",
        &json!({ "kind": target.resource.kind, "apiVersion": target.resource.api_version(), "metadata": metadata }),
    )
}

fn expired(message: String) -> Bytes {
    event_line(
        "ERROR",
        &Failure::new(StatusCode::GONE, "Expired", message).body(),
    )
}

fn watch(
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
        Shape::Table => Form::Table(Box::new(target.resource.clone())),
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
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// One of the limited watch slots, given back when dropped.
struct WatchSlot(Arc<ApiServer>);

impl WatchSlot {
    fn take(server: &Arc<ApiServer>) -> Result<WatchSlot, Failure> {
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

/// The line a watcher gets for `event`, if any. With selectors, what
/// counts is whether the object matched before and matches now, as
/// Kubernetes' watch cache does: starting to match is ADDED, stopping is
/// DELETED (with the object as it last matched).
/// How a watch's objects are written.
enum Form {
    Full,
    Metadata,
    Table(Box<Resource>),
}

fn render_event(event: &Event, filter: &Filter, form: &Form) -> Option<Bytes> {
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
        Form::Table(resource) => {
            let revision = event.revision.to_string();
            event_line(kind, &crate::table::table(resource, &[object], &revision))
        }
    })
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
}
