//! The request path, in explicit phases: parse (the route, and for `/v1/…`
//! the body's top-level `model`) → authorise (API key) → pick an endpoint →
//! connect and send → stream the response back as it arrives.
//!
//! Retry rule: a request is retried on another endpoint only when provably
//! no engine acted on it: the connection could not be made, hyper reports
//! the request was never sent (a pooled connection found closed before the
//! request was written), or the engine answered 503 or 429 (it was too busy
//! to take the request). A connection lost after any byte of the request
//! was written is never retried: the engine may have read the prompt, done
//! the work (an external provider bills it) or crashed on it, so sending it
//! elsewhere could run it twice or crash the next engine; the client gets a
//! 502. A streamed request body is handed to the connection only once it is
//! established, so it is still there to retry with; a body already streamed
//! away cannot be retried.
//!
//! Health: a failed connection or a 5xx counts against the endpoint; after
//! [`GatewayConfig::eject_after`] in a row it is ejected for a backoff that
//! doubles with each ejection. Active `/health` checks run beside
//! ([`crate::health`]).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::json;

use crate::body::{ScanError, as_str, top_level_fields};
use crate::error::{ErrorKind, GatewayError};
use crate::metrics::{Metrics, RequestLabels};
use crate::select::{Rng, pick};
use crate::table::{ApiKey, Endpoint, ModelMatch, Service, Table};

/// How the gateway treats requests and engines.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Largest request body.
    pub max_body: usize,
    /// Time allowed to connect to an engine.
    pub connect_timeout: Duration,
    /// Time allowed for an engine's response head: vLLM sends it only when a
    /// non-streamed answer is complete, so it is long; a service may set its
    /// own ([`crate::table::FIRST_BYTE_TIMEOUT_ANNOTATION`]).
    pub first_byte_timeout: Duration,
    /// Longest silence between two chunks of an answer being streamed.
    pub idle_timeout: Duration,
    /// Endpoints tried per request (only what provably was not processed).
    pub max_attempts: usize,
    /// A `/<namespace>/<service>/…` body of at most this many bytes (by its
    /// Content-Length) is read whole before it is sent, so a busy or
    /// unreachable endpoint's request can still go to another; a larger or
    /// unsized one streams through and is sent once.
    pub retry_buffer: usize,
    /// Failures in a row that eject an endpoint.
    pub eject_after: u32,
    /// Most of a group's endpoints ejected at once, in percent (at least one
    /// may always be); Envoy's `max_ejection_percent`.
    pub max_ejected_percent: u32,
    /// Failed active health checks in a row that take an endpoint out.
    pub probe_failures_to_eject: u32,
    /// First ejection's length; each next one doubles, up to `max_ejection`.
    pub base_ejection: Duration,
    /// Longest ejection.
    pub max_ejection: Duration,
    /// Time between active health checks of each composed endpoint.
    pub health_interval: Duration,
    /// Time allowed for one health check.
    pub health_timeout: Duration,
    /// What the listener allows a client.
    pub listener: crate::server::ListenerLimits,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            max_body: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(2),
            first_byte_timeout: Duration::from_secs(30 * 60),
            idle_timeout: Duration::from_secs(5 * 60),
            max_attempts: 3,
            retry_buffer: 1024 * 1024,
            eject_after: 3,
            max_ejected_percent: 50,
            probe_failures_to_eject: 3,
            base_ejection: Duration::from_secs(1),
            max_ejection: Duration::from_secs(30),
            health_interval: Duration::from_secs(5),
            health_timeout: Duration::from_secs(1),
            listener: crate::server::ListenerLimits::default(),
        }
    }
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// The gateway: the current table, the upstream client, the metrics.
pub struct Gateway {
    table: RwLock<Arc<Table>>,
    loaded: std::sync::atomic::AtomicBool,
    publishes: std::sync::atomic::AtomicU64,
    client: Client<Connector, UpstreamBody>,
    metrics: Metrics,
    config: GatewayConfig,
    epoch: Instant,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// A gateway with an empty table (not ready until [`Gateway::publish`]).
    pub fn new(config: GatewayConfig) -> std::io::Result<Arc<Gateway>> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout));
        http.enforce_http(false);
        let https = https_or_http(http)?;
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(4096)
            .build(https);
        Ok(Arc::new(Gateway {
            table: RwLock::new(Arc::new(Table::default())),
            loaded: std::sync::atomic::AtomicBool::new(false),
            publishes: std::sync::atomic::AtomicU64::new(0),
            client,
            metrics: Metrics::default(),
            config,
            epoch: Instant::now(),
        }))
    }

    /// The table requests read now.
    pub fn table(&self) -> Arc<Table> {
        self.table.read().map(|t| t.clone()).unwrap_or_default()
    }

    /// Swaps in a new table; requests already routed keep the old one.
    pub fn publish(&self, table: Table, compile_time: Duration) {
        self.metrics.compile_seconds.set(compile_time.as_secs_f64());
        for service in table.services() {
            service_metrics(self, service);
        }
        if let Ok(mut current) = self.table.write() {
            *current = Arc::new(table);
        }
        self.loaded.store(true, Ordering::Release);
        self.publishes.fetch_add(1, Ordering::Relaxed);
    }

    /// How many tables have been published.
    pub fn publishes(&self) -> u64 {
        self.publishes.load(Ordering::Relaxed)
    }

    /// Its metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Its configuration.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// Milliseconds on the gateway's clock.
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The upstream client (health checks share its connections).
    pub(crate) fn client(&self) -> &Client<Connector, UpstreamBody> {
        &self.client
    }
}

/// A connector for `http` and `https` endpoints, trusting the system's
/// roots. Without a system trust store plain HTTP still works and HTTPS
/// endpoints fail their handshakes, visibly, in their errors.
fn https_or_http(http: HttpConnector) -> std::io::Result<Connector> {
    let provider = || Arc::new(rustls::crypto::ring::default_provider());
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider())
    {
        Ok(builder) => builder,
        Err(e) => {
            tracing::warn!("no system root certificates ({e}): HTTPS endpoints cannot be verified");
            let config = rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(std::io::Error::other)?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    Ok(builder.https_or_http().enable_http1().wrap_connector(http))
}

/// Serves one request.
pub async fn handle(
    gateway: Arc<Gateway>,
    req: Request<Incoming>,
) -> Result<Response<GatewayBody>, Infallible> {
    let started = Instant::now();
    gateway.metrics.in_flight.inc();
    let in_flight = InFlight(gateway.clone());
    let mut ctx = RequestCtx::default();
    let response = match route(&gateway, req, &mut ctx, started, in_flight).await {
        Ok(response) => response,
        Err(e) => {
            if e.code() == "no_healthy_endpoint" {
                // A state, not a fault: the endpoints' ejection or failed
                // health checks warned once already; each refused request
                // is counted, and logged at debug.
                tracing::debug!(service = ctx.service_id(), code = e.code(), "{}", e.message);
            } else if e.source() != crate::error::Source::Client {
                tracing::warn!(
                    service = ctx.service_id(),
                    endpoint = ctx.endpoint_id(),
                    code = e.code(),
                    "{}",
                    e.message
                );
            }
            e.response()
        }
    };
    let status = response.status().as_u16();
    tracing::debug!(
        service = ctx.service_id(),
        endpoint = ctx.endpoint_id(),
        status,
        head_ms = started.elapsed().as_secs_f64() * 1e3,
        "request"
    );
    // The common answer counts through a handle made at publish time.
    let cached = (status == 200)
        .then(|| ctx.service.as_ref()?.metrics.get())
        .flatten()
        .and_then(|m| m.ok_by_endpoint.get(ctx.endpoint_id()));
    match cached {
        Some(counter) => {
            counter.inc();
        }
        None => {
            gateway
                .metrics
                .requests
                .get_or_create(&RequestLabels {
                    service: ctx.service_id().to_string(),
                    endpoint: ctx.endpoint_id().to_string(),
                    status,
                })
                .inc();
        }
    }
    Ok(response)
}

/// What the phases learned about one request.
#[derive(Default)]
struct RequestCtx {
    service: Option<Arc<Service>>,
    endpoint: Option<Arc<Endpoint>>,
}

impl RequestCtx {
    fn service_id(&self) -> &str {
        self.service.as_ref().map_or("", |s| s.id.as_str())
    }

    fn endpoint_id(&self) -> &str {
        self.endpoint.as_ref().map_or("", |e| e.id.as_str())
    }
}

/// Decrements the in-flight gauge when the request's response ends.
struct InFlight(Arc<Gateway>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.metrics.in_flight.dec();
    }
}

async fn route(
    gateway: &Arc<Gateway>,
    req: Request<Incoming>,
    ctx: &mut RequestCtx,
    started: Instant,
    in_flight: InFlight,
) -> Result<Response<GatewayBody>, GatewayError> {
    let path = req.uri().path();
    match (req.method(), path) {
        (&Method::GET, "/healthz") => return Ok(text(StatusCode::OK, "ok\n")),
        (&Method::GET, "/readyz") => {
            return Ok(if gateway.loaded.load(Ordering::Acquire) {
                text(StatusCode::OK, "ready\n")
            } else {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no routing table loaded yet\n",
                )
            });
        }
        (&Method::GET, "/metrics") => return Ok(text(StatusCode::OK, &gateway.metrics.encode())),
        _ => {}
    }
    check_path(path)?;
    let table = gateway.table();
    let key = authorise(&table, req.headers())?;
    let allowed = |service: &str| key.is_none_or(|k| k.allows(service));
    let now = gateway.now_ms();
    if path == "/v1/models" && req.method() == Method::GET {
        return Ok(models(&table, &allowed, now));
    }
    if let Some(id) = path.strip_prefix("/v1/models/")
        && req.method() == Method::GET
    {
        return model(&table, &allowed, now, id);
    }
    if path.starts_with("/v1/") {
        let (parts, body) = req.into_parts();
        let body = read_body(gateway, &parts.headers, body).await?;
        let field = model_of(&body)?;
        let model = field.name.clone();
        let service = match table.model(&model, allowed) {
            ModelMatch::One(service) => service.clone(),
            ModelMatch::Ambiguous(ids) => {
                return Err(GatewayError::new(
                    ErrorKind::AmbiguousModel,
                    format!(
                        "The model `{model}` is served by several services ({}); name one as `namespace/name`.",
                        ids.join(", ")
                    ),
                ));
            }
            ModelMatch::None => return Err(model_not_found(&table, &allowed, &model)),
        };
        ctx.service = Some(service.clone());
        // As if it had come in under the service's prefix.
        let relative = parts
            .uri
            .path_and_query()
            .map_or("", |p| p.as_str())
            .trim_start_matches('/')
            .to_string();
        let upstream = UpstreamBody::buffered(body);
        let request = Routed {
            parts,
            relative,
            body: upstream,
            model: Some(field),
            keyed: key.is_some(),
        };
        return proxy(gateway, &service, request, ctx, started, in_flight).await;
    }
    let Some((service_id, relative)) = service_path(req.uri()) else {
        return Err(GatewayError::new(
            ErrorKind::PathNotFound,
            format!("Nothing is served at {path}."),
        ));
    };
    let Some(service) = table
        .service(&service_id)
        .filter(|s| allowed(&s.id))
        .cloned()
    else {
        return Err(GatewayError::new(
            ErrorKind::ServiceNotFound,
            format!("The service `{service_id}` does not exist or you do not have access to it."),
        ));
    };
    ctx.service = Some(service.clone());
    let (parts, body) = req.into_parts();
    if content_length(&parts.headers).is_some_and(|n| n > gateway.config.max_body as u64) {
        return Err(too_large(gateway));
    }
    let small =
        content_length(&parts.headers).is_some_and(|n| n <= gateway.config.retry_buffer as u64);
    let body = if small {
        UpstreamBody::buffered(read_body(gateway, &parts.headers, body).await?)
    } else {
        UpstreamBody::streaming(Limited::new(body, gateway.config.max_body))
    };
    let request = Routed {
        parts,
        relative,
        body,
        model: None,
        keyed: key.is_some(),
    };
    proxy(gateway, &service, request, ctx, started, in_flight).await
}

/// The API key a request presented, when keys are required.
fn authorise<'t>(
    table: &'t Table,
    headers: &HeaderMap,
) -> Result<Option<&'t ApiKey>, GatewayError> {
    if !table.requires_keys() {
        return Ok(None);
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .or_else(|| headers.get("x-api-key").map(HeaderValue::as_bytes));
    presented
        .and_then(|p| table.key(p.trim_ascii()))
        .map(Some)
        .ok_or_else(|| {
            GatewayError::new(
                ErrorKind::InvalidApiKey,
                if presented.is_some() {
                    "Incorrect API key provided."
                } else {
                    "You didn't provide an API key: send it as `Authorization: Bearer KEY`."
                },
            )
        })
}

/// `/namespace/name/rest` → (`namespace/name`, `rest?query`).
fn service_path(uri: &Uri) -> Option<(String, String)> {
    let path = uri.path().strip_prefix('/')?;
    let mut parts = path.splitn(3, '/');
    let (namespace, name) = (parts.next()?, parts.next()?);
    if namespace.is_empty() || name.is_empty() {
        return None;
    }
    let mut rest = parts.next().unwrap_or_default().to_string();
    if let Some(query) = uri.query() {
        rest.push('?');
        rest.push_str(query);
    }
    Some((format!("{namespace}/{name}"), rest))
}

/// Refuses a path an upstream could resolve differently from the gateway:
/// `.` and `..` segments (plain or percent-encoded) would climb out of a
/// service's prefix after routing and key scoping chose it, and encoded
/// slashes or backslashes split segments differently on the other side.
fn check_path(path: &str) -> Result<(), GatewayError> {
    if has_encoded_separator(path) || path.split('/').any(is_dot_segment) {
        return Err(GatewayError::new(
            ErrorKind::InvalidPath,
            "The request path may not contain `.` or `..` segments or encoded slashes.",
        ));
    }
    Ok(())
}

/// `%2f`, `%5c` (either case) or a backslash. Every request passes here,
/// so it reads the path in place.
fn has_encoded_separator(path: &str) -> bool {
    let bytes = path.as_bytes();
    bytes.contains(&b'\\')
        || memchr::memchr_iter(b'%', bytes).any(|i| {
            matches!(
                bytes.get(i + 1..i + 3),
                Some([b'2', b'f' | b'F'] | [b'5', b'c' | b'C'])
            )
        })
}

/// `.` or `..`, each dot plain or encoded as `%2e` / `%2E`.
fn is_dot_segment(segment: &str) -> bool {
    let mut rest = segment.as_bytes();
    let mut dots = 0;
    while !rest.is_empty() {
        rest = match rest {
            [b'.', tail @ ..] => tail,
            [b'%', b'2', b'e' | b'E', tail @ ..] => tail,
            _ => return false,
        };
        dots += 1;
    }
    matches!(dots, 1 | 2)
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

fn too_large(gateway: &Gateway) -> GatewayError {
    GatewayError::new(
        ErrorKind::RequestTooLarge,
        format!(
            "The request body is larger than the limit of {} bytes.",
            gateway.config.max_body
        ),
    )
}

async fn read_body(
    gateway: &Gateway,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<Bytes, GatewayError> {
    if content_length(headers).is_some_and(|n| n > gateway.config.max_body as u64) {
        return Err(too_large(gateway));
    }
    // A client that stops sending mid-body does not hold its task forever.
    let idle = gateway.config.idle_timeout;
    let read = tokio::time::timeout(idle, Limited::new(body, gateway.config.max_body).collect());
    let Ok(read) = read.await else {
        return Err(GatewayError::new(
            ErrorKind::BodyRead,
            format!("The request body was not received within {idle:?}."),
        ));
    };
    match read {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large(gateway)),
        Err(e) => Err(GatewayError::new(
            ErrorKind::BodyRead,
            format!("The request body could not be read: {e}"),
        )),
    }
}

/// The `model` of a `/v1` body, and where its value sits in the body.
#[derive(Debug, PartialEq, Eq)]
struct ModelField {
    name: String,
    range: std::ops::Range<usize>,
}

fn model_of(body: &[u8]) -> Result<ModelField, GatewayError> {
    let [model] = top_level_fields(body, ["model"]).map_err(|e| match e {
        ScanError::Ambiguous { .. } => GatewayError::new(
            ErrorKind::ConflictingModel,
            format!("The request body must name its model exactly once: {e}."),
        ),
        ScanError::Malformed { .. } => GatewayError::new(
            ErrorKind::InvalidJson,
            format!("We could not parse the JSON body of your request: {e}."),
        ),
    })?;
    let missing = || {
        GatewayError::new(
            ErrorKind::MissingModel,
            "You must provide a model parameter.",
        )
    };
    let raw = model.ok_or_else(missing)?;
    let name = as_str(raw).ok_or_else(missing)?.into_owned();
    // The value is a slice of the body: its offset is where it starts.
    let start = raw.as_ptr() as usize - body.as_ptr() as usize;
    Ok(ModelField {
        name,
        range: start..start + raw.len(),
    })
}

/// The model name an endpoint's engine expects for a request that asked
/// for `asked` through `service`: what the engine declares it serves; else
/// the service's own name when the request qualified it (`namespace/name`);
/// else what was asked.
fn model_for<'a>(endpoint: &'a Endpoint, service: &'a Service, asked: &'a str) -> &'a str {
    match &endpoint.served_model {
        Some(served) => served,
        None if asked == service.id => service.id.split_once('/').map_or(asked, |(_, name)| name),
        None => asked,
    }
}

/// `body` with its `model` value replaced by `model`.
fn with_model(body: &Bytes, field: &ModelField, model: &str) -> Bytes {
    let quoted = serde_json::Value::String(model.to_string()).to_string();
    let mut out = Vec::with_capacity(body.len() + quoted.len());
    out.extend_from_slice(&body[..field.range.start]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[field.range.end..]);
    Bytes::from(out)
}

/// No service answers `model`: said so, and where a deployment of that
/// name serves but no ModelService routes to it, what to do.
fn model_not_found(table: &Table, allowed: &impl Fn(&str) -> bool, model: &str) -> GatewayError {
    let unrouted = table.unrouted(model, allowed);
    if unrouted.is_empty() {
        return GatewayError::new(
            ErrorKind::ModelNotFound,
            format!("The model `{model}` does not exist or you do not have access to it."),
        );
    }
    GatewayError::new(
        ErrorKind::ModelNotFound,
        format!(
            "The model `{model}` is deployed (ModelDeployment {}) but no ModelService routes to it: create a ModelService whose endpoints select modelplane.ai/deployment: {model}.",
            unrouted.join(", ")
        ),
    )
}

/// One entry of `/v1/models`.
fn model_entry(name: &str, service: &crate::table::Service) -> serde_json::Value {
    json!({ "id": name, "object": "model", "created": service.created, "owned_by": service.id })
}

/// `GET /v1/models`: the models a request can be served for now (some
/// endpoint of its service healthy), as OpenAI lists them.
fn models(table: &Table, allowed: &impl Fn(&str) -> bool, now_ms: u64) -> Response<GatewayBody> {
    let data: Vec<serde_json::Value> = table
        .model_names(allowed)
        .into_iter()
        .filter(|(_, service)| service.servable(now_ms))
        .map(|(name, service)| model_entry(&name, service))
        .collect();
    let mut response = Response::new(GatewayBody::full(
        json!({ "object": "list", "data": data }).to_string(),
    ));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `GET /v1/models/{id}`: one of the names `/v1/models` lists.
fn model(
    table: &Table,
    allowed: &impl Fn(&str) -> bool,
    now_ms: u64,
    id: &str,
) -> Result<Response<GatewayBody>, GatewayError> {
    let found = table
        .model_names(allowed)
        .into_iter()
        .filter(|(_, service)| service.servable(now_ms))
        .find(|(name, _)| name == id);
    let Some((name, service)) = found else {
        return Err(model_not_found(table, allowed, id));
    };
    let body = model_entry(&name, service);
    let mut response = Response::new(GatewayBody::full(body.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

fn text(status: StatusCode, body: &str) -> Response<GatewayBody> {
    let mut response = Response::new(GatewayBody::full(body.to_string()));
    *response.status_mut() = status;
    response
}

/// Headers that describe one connection, not the request.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::UPGRADE,
];

/// The path an endpoint receives for `relative` (the part below the
/// service prefix): the rewrite replaces the prefix, else the prefix stays.
fn upstream_path(service: &Service, endpoint: &Endpoint, relative: &str) -> String {
    let (base, separator) = match &endpoint.rewrite {
        Some(rewrite) => (rewrite.trim_end_matches('/'), "/"),
        None => (service.prefix.as_str(), ""),
    };
    [base, separator, relative].concat()
}

/// A routed request, ready to send to one endpoint after another.
struct Routed {
    parts: http::request::Parts,
    /// The path (and query) below the service prefix.
    relative: String,
    body: UpstreamBody,
    /// The `model` of a `/v1` body, which an endpoint may need renamed.
    model: Option<ModelField>,
    /// A gateway API key authorised it (and must not go upstream).
    keyed: bool,
}

async fn proxy(
    gateway: &Arc<Gateway>,
    service: &Arc<Service>,
    request: Routed,
    ctx: &mut RequestCtx,
    started: Instant,
    in_flight: InFlight,
) -> Result<Response<GatewayBody>, GatewayError> {
    let Routed {
        parts,
        relative,
        body,
        model,
        keyed,
    } = request;
    let relative = relative.as_str();
    let mut headers = parts.headers;
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::HOST);
    if keyed {
        // The gateway's key is for the gateway only.
        headers.remove(header::AUTHORIZATION);
        headers.remove("x-api-key");
    }
    let mut tried: Vec<Arc<Endpoint>> = Vec::new();
    let mut rng = thread_rng();
    loop {
        let Some(endpoint) = pick(service, &tried, gateway.now_ms(), &mut rng) else {
            return Err(GatewayError::new(
                ErrorKind::NoHealthyEndpoint,
                if tried.is_empty() {
                    format!("No healthy endpoint serves `{}` right now.", service.id)
                } else {
                    format!(
                        "No endpoint of `{}` could be reached ({} tried).",
                        service.id,
                        tried.len()
                    )
                },
            ));
        };
        ctx.endpoint = Some(endpoint.clone());
        let uri = Uri::builder()
            .scheme(endpoint.scheme.clone())
            .authority(endpoint.authority.clone())
            .path_and_query(upstream_path(service, &endpoint, relative))
            .build()
            .map_err(|e| {
                GatewayError::new(
                    ErrorKind::UpstreamFailed,
                    format!("Bad upstream address: {e}"),
                )
            })?;
        let mut attempt = body.attempt();
        if let (Some(field), UpstreamInner::Buffered(Some(bytes), len)) =
            (&model, &mut attempt.inner)
        {
            let wanted = model_for(&endpoint, service, &field.name);
            if wanted != field.name {
                *bytes = with_model(bytes, field, wanted);
                *len = bytes.len();
                headers.remove(header::CONTENT_LENGTH);
            }
        }
        let mut request = Request::new(attempt);
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = uri;
        *request.headers_mut() = headers.clone();
        if let Some(bearer) = &endpoint.bearer {
            request
                .headers_mut()
                .insert(header::AUTHORIZATION, bearer.clone());
        }
        let outstanding = Outstanding::new(&endpoint);
        let sent = Instant::now();
        let first_byte_timeout = service
            .first_byte_timeout
            .unwrap_or(gateway.config.first_byte_timeout);
        let result =
            tokio::time::timeout(first_byte_timeout, gateway.client.request(request)).await;
        match result {
            Err(_) => {
                gateway.failed(service, &endpoint);
                return Err(GatewayError::new(
                    ErrorKind::UpstreamTimeout,
                    format!(
                        "The endpoint `{}` did not answer within {first_byte_timeout:?}.",
                        endpoint.id
                    ),
                ));
            }
            Ok(Err(e))
                if (e.is_connect() || never_sent(&e))
                    && body.retryable()
                    && tried.len() + 1 < gateway.config.max_attempts =>
            {
                gateway.failed(service, &endpoint);
                tracing::debug!(endpoint = %endpoint.id, "not sent, retrying elsewhere: {e}");
                count_retry(gateway, service);
                tried.push(endpoint);
                continue;
            }
            Ok(Ok(response))
                if is_busy(response.status())
                    && body.retryable()
                    && tried.len() + 1 < gateway.config.max_attempts
                    && another_to_try(service, &tried, &endpoint) =>
            {
                // Busy is backpressure, not a failure: the endpoint stays in.
                tracing::debug!(endpoint = %endpoint.id, status = %response.status(), "busy, retrying elsewhere");
                count_retry(gateway, service);
                tried.push(endpoint);
                continue;
            }
            Ok(Err(e)) => {
                gateway.failed(service, &endpoint);
                let kind = if e.is_connect() {
                    ErrorKind::NoHealthyEndpoint
                } else {
                    ErrorKind::UpstreamFailed
                };
                return Err(GatewayError::new(
                    kind,
                    format!("The endpoint `{}` failed: {}", endpoint.id, error_chain(&e)),
                ));
            }
            Ok(Ok(response)) => {
                if response.status().is_server_error() && !is_busy(response.status()) {
                    gateway.failed(service, &endpoint);
                } else {
                    gateway.succeeded(&endpoint);
                }
                let metrics = service_metrics(gateway, service);
                metrics
                    .upstream_latency
                    .observe(sent.elapsed().as_secs_f64());
                if let Some(sent_bytes) = body.sent_bytes() {
                    metrics.request_bytes.inc_by(sent_bytes);
                }
                let (mut head, incoming) = response.into_parts();
                for name in &HOP_BY_HOP {
                    head.headers.remove(name);
                }
                let idle_timeout = gateway.config.idle_timeout;
                let tracked = Tracked {
                    inner: incoming,
                    idle: None,
                    fresh: false,
                    idle_timeout,
                    metrics,
                    started,
                    first_byte: false,
                    bytes: 0,
                    _outstanding: outstanding,
                    _in_flight: in_flight,
                };
                return Ok(Response::from_parts(
                    head,
                    GatewayBody::Proxied(Box::new(tracked)),
                ));
            }
        }
    }
}

/// Whether hyper reports the request was never sent: it was canceled
/// before any byte was written (a pooled connection closed under it).
/// Resets, broken pipes and early ends of the answer are not this: the
/// request may have reached the engine.
fn never_sent(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(err) = source {
        if let Some(hyper_error) = err.downcast_ref::<hyper::Error>() {
            return hyper_error.is_canceled();
        }
        source = err.source();
    }
    false
}

/// Whether an endpoint other than `endpoint` and those `tried` remains: if
/// none does, a busy answer goes to the client as the engine gave it.
fn another_to_try(service: &Service, tried: &[Arc<Endpoint>], endpoint: &Arc<Endpoint>) -> bool {
    service
        .self_hosted
        .iter()
        .chain(&service.external)
        .flat_map(|g| g.endpoints.iter())
        .any(|e| !Arc::ptr_eq(e, endpoint) && !tried.iter().any(|t| Arc::ptr_eq(t, e)))
}

/// 503 and 429: the engine was too busy to take the request and did not
/// process it (vLLM's and SGLang's overload answers).
fn is_busy(status: StatusCode) -> bool {
    status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS
}

fn count_retry(gateway: &Gateway, service: &Service) {
    service_metrics(gateway, service).retries.inc();
}

/// The service's metric handles: made at publish time; made now for a
/// service served from a table that was never published (tests).
fn service_metrics(gateway: &Gateway, service: &Service) -> Arc<crate::metrics::ServiceMetrics> {
    service
        .metrics
        .get_or_init(|| {
            let endpoints = service.self_hosted.iter().chain(&service.external);
            let ids = endpoints
                .flat_map(|g| g.endpoints.iter())
                .map(|e| e.id.as_str());
            Arc::new(gateway.metrics.for_service(&service.id, ids))
        })
        .clone()
}

/// The whole chain of an error, for messages.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn thread_rng() -> Rng {
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new(seed());
    }
    STATE.with(|s| {
        let mut rng = Rng::new(s.get());
        let next = rng.next_u64();
        s.set(next);
        Rng::new(next)
    })
}

fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let thread = format!("{:?}", std::thread::current().id());
    thread.bytes().fold(nanos, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Counts a request as in flight to an endpoint until dropped.
struct Outstanding(Arc<Endpoint>);

impl Outstanding {
    fn new(endpoint: &Arc<Endpoint>) -> Outstanding {
        endpoint.state.outstanding.fetch_add(1, Ordering::Relaxed);
        Outstanding(endpoint.clone())
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.state.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

type StreamedRequest = Limited<Incoming>;

/// A request body as sent upstream: buffered (a `/v1` body that was read for
/// its model, or a small one under a service prefix; cheap to resend) or
/// streamed from the client, held in a slot until the upstream connection
/// first asks for it.
pub struct UpstreamBody {
    inner: UpstreamInner,
}

enum UpstreamInner {
    Buffered(Option<Bytes>, usize),
    Streaming {
        slot: Arc<Mutex<Option<StreamedRequest>>>,
        taken: Option<StreamedRequest>,
        size: SizeHint,
    },
}

impl UpstreamBody {
    fn buffered(bytes: Bytes) -> UpstreamBody {
        let len = bytes.len();
        UpstreamBody {
            inner: UpstreamInner::Buffered(Some(bytes), len),
        }
    }

    fn streaming(body: StreamedRequest) -> UpstreamBody {
        let size = body.size_hint();
        UpstreamBody {
            inner: UpstreamInner::Streaming {
                slot: Arc::new(Mutex::new(Some(body))),
                taken: None,
                size,
            },
        }
    }

    /// Empty (health checks).
    pub(crate) fn empty() -> UpstreamBody {
        UpstreamBody::buffered(Bytes::new())
    }

    /// The body for one attempt.
    fn attempt(&self) -> UpstreamBody {
        let inner = match &self.inner {
            UpstreamInner::Buffered(bytes, len) => UpstreamInner::Buffered(bytes.clone(), *len),
            UpstreamInner::Streaming { slot, size, .. } => UpstreamInner::Streaming {
                slot: slot.clone(),
                taken: None,
                size: *size,
            },
        };
        UpstreamBody { inner }
    }

    /// Whether another attempt could still send the whole body.
    fn retryable(&self) -> bool {
        match &self.inner {
            UpstreamInner::Buffered(..) => true,
            UpstreamInner::Streaming { slot, .. } => {
                slot.lock().map(|s| s.is_some()).unwrap_or(false)
            }
        }
    }

    fn sent_bytes(&self) -> Option<u64> {
        match &self.inner {
            UpstreamInner::Buffered(_, len) => Some(*len as u64),
            UpstreamInner::Streaming { size, .. } => size.exact(),
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match &mut self.get_mut().inner {
            UpstreamInner::Buffered(bytes, _) => Poll::Ready(
                bytes
                    .take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            UpstreamInner::Streaming { slot, taken, .. } => {
                if taken.is_none() {
                    *taken = slot.lock().ok().and_then(|mut s| s.take());
                }
                match taken {
                    Some(body) => Pin::new(body).poll_frame(cx),
                    None => Poll::Ready(Some(Err(
                        "the request body was already sent to another endpoint".into(),
                    ))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            UpstreamInner::Buffered(bytes, _) => bytes.as_ref().is_none_or(Bytes::is_empty),
            UpstreamInner::Streaming { taken, size, .. } => match taken {
                Some(body) => body.is_end_stream(),
                None => size.exact() == Some(0),
            },
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            UpstreamInner::Buffered(bytes, _) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            UpstreamInner::Streaming { size, .. } => *size,
        }
    }
}

/// A response body as sent to the client.
pub enum GatewayBody {
    /// Made by the gateway.
    Full(Option<Bytes>),
    /// An engine's, forwarded frame by frame as it arrives.
    Proxied(Box<Tracked>),
}

impl GatewayBody {
    fn full(body: impl Into<Bytes>) -> GatewayBody {
        GatewayBody::Full(Some(body.into()))
    }
}

impl From<Bytes> for GatewayBody {
    fn from(bytes: Bytes) -> Self {
        GatewayBody::Full(Some(bytes))
    }
}

/// Why a body stopped: the engine's connection failed, or it went silent.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            GatewayBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            GatewayBody::Proxied(tracked) => Pin::new(tracked.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GatewayBody::Full(bytes) => bytes.is_none(),
            GatewayBody::Proxied(tracked) => tracked.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GatewayBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            GatewayBody::Proxied(tracked) => tracked.inner.size_hint(),
        }
    }
}

/// An engine's response body with its accounting: time to first byte,
/// bytes, and the request's place in flight, released when the body ends or
/// the client goes away (dropping it also drops the upstream request).
pub struct Tracked {
    inner: Incoming,
    /// Fires when the engine sends nothing for the idle timeout; armed only
    /// once the engine makes the client wait (most answers never do).
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Data arrived since the timer was last set.
    fresh: bool,
    idle_timeout: Duration,
    metrics: Arc<crate::metrics::ServiceMetrics>,
    started: Instant,
    first_byte: bool,
    bytes: u64,
    _outstanding: Outstanding,
    _in_flight: InFlight,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if polled.is_pending() {
            let this = self.as_mut().get_mut();
            let deadline = || tokio::time::Instant::now() + this.idle_timeout;
            let idle = match &mut this.idle {
                Some(idle) if this.fresh => {
                    idle.as_mut().reset(deadline());
                    idle
                }
                Some(idle) => idle,
                None => this
                    .idle
                    .insert(Box::pin(tokio::time::sleep_until(deadline()))),
            };
            this.fresh = false;
            // Silence: the stream ends in an error (the client's connection
            // is cut, so a cut answer never looks complete).
            return match idle.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(format!(
                    "the engine sent nothing for {:?}",
                    this.idle_timeout
                )
                .into()))),
                Poll::Pending => Poll::Pending,
            };
        }
        self.fresh = true;
        let polled = polled.map(|frame| frame.map(|f| f.map_err(BodyError::from)));
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            let this = self.as_mut().get_mut();
            if !this.first_byte {
                this.first_byte = true;
                this.metrics
                    .time_to_first_byte
                    .observe(this.started.elapsed().as_secs_f64());
            }
            this.bytes += data.len() as u64;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.metrics.response_bytes.inc_by(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::EndpointState;

    fn endpoint(rewrite: Option<&str>, served: Option<&str>) -> Endpoint {
        Endpoint {
            id: "ml/e".into(),
            scheme: http::uri::Scheme::HTTP,
            authority: "127.0.0.1:1".parse().expect("authority"),
            rewrite: rewrite.map(str::to_string),
            bearer: None,
            served_model: served.map(str::to_string),
            external: false,
            state: Arc::new(EndpointState::default()),
        }
    }

    fn service() -> Service {
        Service {
            id: "ml/qwen".into(),
            prefix: "/ml/qwen/".into(),
            self_hosted: Vec::new(),
            external: Vec::new(),
            first_byte_timeout: None,
            metrics: std::sync::OnceLock::new(),
            created: 0,
        }
    }

    #[test]
    fn rewrites_replace_the_prefix_and_no_rewrite_keeps_it() {
        let s = service();
        let rel = "v1/chat/completions?x=1";
        assert_eq!(
            upstream_path(&s, &endpoint(Some("/"), None), rel),
            "/v1/chat/completions?x=1"
        );
        assert_eq!(
            upstream_path(&s, &endpoint(Some("/ml/replica-0/"), None), rel),
            "/ml/replica-0/v1/chat/completions?x=1"
        );
        assert_eq!(
            upstream_path(&s, &endpoint(Some("/openai"), None), rel),
            "/openai/v1/chat/completions?x=1"
        );
        assert_eq!(
            upstream_path(&s, &endpoint(None, None), rel),
            "/ml/qwen/v1/chat/completions?x=1"
        );
    }

    #[test]
    fn the_model_is_renamed_only_where_the_engine_needs_it() {
        let s = service();
        assert_eq!(
            model_for(&endpoint(None, Some("qwen-7b")), &s, "qwen"),
            "qwen-7b"
        );
        assert_eq!(model_for(&endpoint(None, None), &s, "ml/qwen"), "qwen");
        assert_eq!(model_for(&endpoint(None, None), &s, "qwen"), "qwen");
        let body = Bytes::from_static(br#"{"stream":true,"model":"ml/qwen","messages":[]}"#);
        let field = model_of(&body).expect("model");
        assert_eq!(field.name, "ml/qwen");
        assert_eq!(
            with_model(&body, &field, "qwen"),
            Bytes::from_static(br#"{"stream":true,"model":"qwen","messages":[]}"#)
        );
        assert_eq!(
            model_of(b"{}").map_err(|e| e.kind),
            Err(ErrorKind::MissingModel)
        );
        assert_eq!(
            model_of(b"[").map_err(|e| e.kind),
            Err(ErrorKind::InvalidJson)
        );
    }

    #[test]
    fn only_requests_never_written_count_as_not_sent() {
        // io errors (reset, broken pipe) come after bytes were written: the
        // engine may have read the request.
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!never_sent(&reset));
        let wrapped = std::io::Error::other(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(!never_sent(&wrapped));
        assert!(is_busy(StatusCode::SERVICE_UNAVAILABLE));
        assert!(is_busy(StatusCode::TOO_MANY_REQUESTS));
        assert!(!is_busy(StatusCode::BAD_GATEWAY));
    }

    #[test]
    fn dot_segments_and_encoded_slashes_are_refused() {
        for bad in [
            "/ml/svc/../other/v1/chat/completions",
            "/ml/svc/v1/./models",
            "/ml/svc/%2e%2E/other/v1",
            "/ml/svc%2Fother/v1",
            "/ml/svc/v1%5cmodels",
            "/v1/..",
            "/ml/svc/.%2E/other",
            "/ml/svc/%2e",
            "/ml/svc%2f",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
        for good in [
            "/v1/chat/completions",
            "/ml/svc/v1/models",
            "/ml/svc/v1/a.b/..c",
            "/ml/svc/.../v1",
            "/ml/svc/%2e%2e%2e/v1",
            "/ml/svc/v1/100%25",
            "/ml/svc/v1/%",
        ] {
            assert!(check_path(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn service_paths_split_into_service_and_rest() {
        let uri: Uri = "/ml/qwen/v1/chat/completions?x=1".parse().expect("uri");
        assert_eq!(
            service_path(&uri),
            Some(("ml/qwen".into(), "v1/chat/completions?x=1".into()))
        );
        let uri: Uri = "/ml/qwen".parse().expect("uri");
        assert_eq!(service_path(&uri), Some(("ml/qwen".into(), String::new())));
        let uri: Uri = "/ml".parse().expect("uri");
        assert_eq!(service_path(&uri), None);
    }
}
