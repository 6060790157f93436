//! Sending a routed request to one endpoint after another, by the retry
//! rule of the [`proxy`](super) module: only what provably no engine acted
//! on goes elsewhere.

use std::sync::Arc;
use std::time::Instant;

use http::header::{self, HeaderName};
use http::{Request, Response, StatusCode, Uri};

use super::RequestCtx;
use super::models::{ModelField, model_for, with_model};
use super::paths::upstream_path;
use crate::body::{GatewayBody, InFlight, Outstanding, Tracked, UpstreamBody, UpstreamInner};
use crate::error::{ErrorKind, GatewayError};
use crate::select::{Rng, pick};
use crate::state::Gateway;
use crate::table::{Endpoint, Service};

/// Headers that describe one connection (or a hop's proxy), not the
/// request (RFC 9110 §7.6.1): never forwarded either way.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
];

/// `headers` without what only concerns this hop: the fixed list, and
/// whatever the `Connection` header names.
pub(super) fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(&HOP_BY_HOP) {
        headers.remove(name);
    }
}

/// The client's address appended to `X-Forwarded-For` (what the client
/// sent is passed on as the hops before it, never believed here).
fn forwarded_for(headers: &mut http::HeaderMap, client: Option<std::net::IpAddr>) {
    let Some(client) = client else { return };
    let before: Vec<String> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    let mut chain = before.join(", ");
    if !chain.is_empty() {
        chain.push_str(", ");
    }
    chain.push_str(&client.to_string());
    if let Ok(value) = http::HeaderValue::from_str(&chain) {
        headers.insert("x-forwarded-for", value);
    }
}

/// A routed request, ready to send to one endpoint after another.
pub(super) struct Routed {
    pub(super) parts: http::request::Parts,
    /// The path (and query) below the service prefix.
    pub(super) relative: String,
    pub(super) body: UpstreamBody,
    /// The `model` of a `/v1` body, which an endpoint may need renamed.
    pub(super) model: Option<ModelField>,
    /// A gateway API key authorised it (and must not go upstream).
    pub(super) keyed: bool,
}

pub(super) async fn proxy(
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
    let client = parts
        .extensions
        .get::<modelplane_listener::http1::ClientAddr>()
        .map(|c| c.0.ip());
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers);
    forwarded_for(&mut headers, client);
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
                if let Some(client) = client_caused(gateway, &e) {
                    // The client's upload failed (cut short, or over the
                    // cap): the endpoint did nothing wrong and stays in.
                    tracing::debug!(endpoint = %endpoint.id, "the client's body failed: {}", error_chain(&e));
                    return Err(client);
                }
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
                let metrics = gateway.service_metrics(service);
                metrics
                    .upstream_latency
                    .observe(sent.elapsed().as_secs_f64());
                if let Some(sent_bytes) = body.sent_bytes() {
                    metrics.request_bytes.inc_by(sent_bytes);
                }
                let (mut head, incoming) = response.into_parts();
                strip_hop_by_hop(&mut head.headers);
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
pub(super) fn never_sent(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(err) = source {
        if let Some(hyper_error) = err.downcast_ref::<hyper::Error>() {
            return hyper_error.is_canceled();
        }
        source = err.source();
    }
    false
}

/// The client's own error, if the request failed because its body did
/// (an upload it aborted, a streamed body over the cap), as the error
/// the client gets: never the endpoint's failure.
pub(super) fn client_caused(
    gateway: &Gateway,
    e: &(dyn std::error::Error + 'static),
) -> Option<GatewayError> {
    let mut source = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return Some(super::too_large(gateway));
        }
        if err.is::<crate::body::ClientBodyError>() {
            return Some(super::unreadable(err));
        }
        source = err.source();
    }
    None
}

/// Whether an endpoint other than `endpoint` and those `tried` remains: if
/// none does, a busy answer goes to the client as the engine gave it.
pub(super) fn another_to_try(
    service: &Service,
    tried: &[Arc<Endpoint>],
    endpoint: &Arc<Endpoint>,
) -> bool {
    service
        .self_hosted
        .iter()
        .chain(&service.external)
        .flat_map(|g| g.endpoints.iter())
        .any(|e| !Arc::ptr_eq(e, endpoint) && !tried.iter().any(|t| Arc::ptr_eq(t, e)))
}

/// 503 and 429: the engine was too busy to take the request and did not
/// process it (vLLM's and SGLang's overload answers).
pub(super) fn is_busy(status: StatusCode) -> bool {
    status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS
}

pub(super) fn count_retry(gateway: &Gateway, service: &Service) {
    gateway.service_metrics(service).retries.inc();
}

/// The whole chain of an error, for messages.
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

pub(super) fn thread_rng() -> Rng {
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

pub(super) fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let thread = format!("{:?}", std::thread::current().id());
    thread.bytes().fold(nanos, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
