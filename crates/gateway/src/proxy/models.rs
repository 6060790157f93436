//! The `model` of a `/v1` body (found, renamed per endpoint) and the
//! `/v1/models` listing, as OpenAI words them.

use bytes::Bytes;
use http::Response;
use http::header::{self, HeaderValue};
use serde_json::json;

use crate::body::{GatewayBody, ScanError, as_str, top_level_fields};
use crate::error::{ErrorKind, GatewayError};
use crate::table::{Endpoint, Service, Table};

/// The `model` of a `/v1` body, and where its value sits in the body.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ModelField {
    pub(super) name: String,
    pub(super) range: std::ops::Range<usize>,
}

pub(super) fn model_of(body: &[u8]) -> Result<ModelField, GatewayError> {
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
pub(super) fn model_for<'a>(
    endpoint: &'a Endpoint,
    service: &'a Service,
    asked: &'a str,
) -> &'a str {
    match &endpoint.served_model {
        Some(served) => served,
        None if asked == service.id => service.id.split_once('/').map_or(asked, |(_, name)| name),
        None => asked,
    }
}

/// `body` with its `model` value replaced by `model`.
pub(super) fn with_model(body: &Bytes, field: &ModelField, model: &str) -> Bytes {
    let quoted = serde_json::Value::String(model.to_string()).to_string();
    let mut out = Vec::with_capacity(body.len() + quoted.len());
    out.extend_from_slice(&body[..field.range.start]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[field.range.end..]);
    Bytes::from(out)
}

/// No service answers `model`: said so, and where a deployment of that
/// name serves but no ModelService routes to it, what to do.
pub(super) fn model_not_found(
    table: &Table,
    allowed: &impl Fn(&str) -> bool,
    model: &str,
) -> GatewayError {
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
pub(super) fn model_entry(name: &str, service: &Service) -> serde_json::Value {
    json!({ "id": name, "object": "model", "created": service.created, "owned_by": service.id })
}

/// `GET /v1/models`: the models a request can be served for now (some
/// endpoint of its service healthy), as OpenAI lists them.
pub(super) fn models(
    table: &Table,
    allowed: &impl Fn(&str) -> bool,
    now_ms: u64,
) -> Response<GatewayBody> {
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
pub(super) fn model(
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
