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
//! [`GatewayConfig::eject_after`](crate::state::GatewayConfig::eject_after) in a row it is ejected for a backoff that
//! doubles with each ejection. Active `/health` checks run beside, in the
//! health module.
//!
//! Rooms: `paths` (which service a path names), `models` (a body's
//! `model`, `/v1/models`), `retry` (sending to one endpoint after
//! another); the state is [`Gateway`], the bodies [`crate::body`].

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};

mod models;
mod paths;
mod retry;

use crate::body::{BodyError, ClientBodyError, GatewayBody, InFlight, RequestBody, UpstreamBody};
use crate::error::{ErrorKind, GatewayError};
use crate::metrics::RequestLabels;
use crate::state::Gateway;
use crate::table::{ApiKey, Endpoint, ModelMatch, Service, Table};
use models::{model, model_not_found, model_of, models};
use paths::{check_path, service_path};
use retry::{Routed, proxy};

/// Serves one request.
/// Generic over the request's body, so the same path serves hyper's
/// connections and in-process callers (tests).
pub fn handle<B>(
    gateway: Arc<Gateway>,
    req: Request<B>,
) -> impl Future<Output = Result<Response<GatewayBody>, Infallible>> + Send + 'static
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BodyError>,
{
    // Boxed here, outside the future, so the future has one concrete type.
    serve(
        gateway,
        req.map(|body| body.map_err(|e| ClientBodyError(e.into())).boxed_unsync()),
    )
}

async fn serve(
    gateway: Arc<Gateway>,
    req: Request<RequestBody>,
) -> Result<Response<GatewayBody>, Infallible> {
    let started = Instant::now();
    let in_flight = InFlight::new(&gateway.metrics.in_flight);
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
pub(super) struct RequestCtx {
    pub(super) service: Option<Arc<Service>>,
    pub(super) endpoint: Option<Arc<Endpoint>>,
}

impl RequestCtx {
    fn service_id(&self) -> &str {
        self.service.as_ref().map_or("", |s| s.id.as_str())
    }

    fn endpoint_id(&self) -> &str {
        self.endpoint.as_ref().map_or("", |e| e.id.as_str())
    }
}

async fn route(
    gateway: &Arc<Gateway>,
    req: Request<RequestBody>,
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

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

pub(super) fn too_large(gateway: &Gateway) -> GatewayError {
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
    body: RequestBody,
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
        Err(e) => Err(unreadable(&*e)),
    }
}

/// A client's body that could not be read, as the client is told.
pub(super) fn unreadable(e: &dyn std::error::Error) -> GatewayError {
    GatewayError::new(
        ErrorKind::BodyRead,
        format!("The request body could not be read: {e}"),
    )
}

fn text(status: StatusCode, body: &str) -> Response<GatewayBody> {
    let mut response = Response::new(GatewayBody::full(body.to_string()));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::models::*;
    use super::paths::*;
    use super::retry::*;
    use super::*;
    use crate::state::GatewayConfig;
    use crate::table::EndpointState;
    use http::Uri;

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

    async fn answer(
        gateway: &Arc<Gateway>,
        method: Method,
        path: &str,
        body: &str,
    ) -> (StatusCode, String) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let response = handle(gateway.clone(), request).await.expect("infallible");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn requests_are_served_in_process_without_a_connection() {
        let gateway = Gateway::new(GatewayConfig::default()).expect("gateway");
        let (status, body) = answer(&gateway, Method::GET, "/readyz", "").await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "no routing table loaded yet\n"
            )
        );
        gateway.publish(Table::default(), std::time::Duration::ZERO);
        assert_eq!(
            answer(&gateway, Method::GET, "/readyz", "").await.0,
            StatusCode::OK
        );
        let (status, body) = answer(&gateway, Method::GET, "/v1/models", "").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, r#"{"object":"list","data":[]}"#);
        let (status, body) = answer(
            &gateway,
            Method::POST,
            "/v1/chat/completions",
            r#"{"model":"qwen"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("The model `qwen` does not exist"), "{body}");
        let (status, body) = answer(
            &gateway,
            Method::POST,
            "/v1/chat/completions",
            r#"{"messages":[]}"#,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body.contains("You must provide a model parameter."),
            "{body}"
        );
    }
}
