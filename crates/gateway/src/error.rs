//! Gateway errors, classified once and rendered once: every failure of a
//! request becomes a [`GatewayError`] with a kind (which fixes the status,
//! OpenAI's error `type` and a stable `code`), a source (client, upstream or
//! the gateway itself) and a message; [`GatewayError::response`] writes
//! OpenAI's `{"error":{"message","type","code"}}` body and the
//! `x-modelplane-error-code` header.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::json;

/// Who caused a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The request was wrong.
    Client,
    /// An engine or provider failed.
    Upstream,
    /// The gateway failed.
    Internal,
}

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The body is not a JSON object.
    InvalidJson,
    /// A `/v1` request without a string `model`.
    MissingModel,
    /// A body that names `model` twice or with escapes in the key.
    ConflictingModel,
    /// The model name matches services in several namespaces.
    AmbiguousModel,
    /// No or a wrong API key.
    InvalidApiKey,
    /// No service answers the model (or the key may not use it).
    ModelNotFound,
    /// No service at `/<namespace>/<service>/`.
    ServiceNotFound,
    /// Nothing is served at this path.
    PathNotFound,
    /// A path with dot-segments or encoded separators.
    InvalidPath,
    /// The body is larger than the cap.
    RequestTooLarge,
    /// The request body could not be read.
    BodyRead,
    /// No endpoint of the service is healthy.
    NoHealthyEndpoint,
    /// The engine did not answer in time.
    UpstreamTimeout,
    /// The engine failed while the request was being proxied.
    UpstreamFailed,
}

/// One failed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Said to the client.
    pub message: String,
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code())
    }
}

impl std::error::Error for GatewayError {}

impl GatewayError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> GatewayError {
        GatewayError {
            kind,
            message: message.into(),
        }
    }

    /// Who caused it.
    pub fn source(&self) -> Source {
        match self.kind {
            ErrorKind::UpstreamTimeout | ErrorKind::UpstreamFailed => Source::Upstream,
            ErrorKind::NoHealthyEndpoint => Source::Internal,
            _ => Source::Client,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self.kind {
            ErrorKind::InvalidJson
            | ErrorKind::MissingModel
            | ErrorKind::ConflictingModel
            | ErrorKind::InvalidPath
            | ErrorKind::AmbiguousModel
            | ErrorKind::BodyRead => StatusCode::BAD_REQUEST,
            ErrorKind::InvalidApiKey => StatusCode::UNAUTHORIZED,
            ErrorKind::ModelNotFound | ErrorKind::ServiceNotFound | ErrorKind::PathNotFound => {
                StatusCode::NOT_FOUND
            }
            ErrorKind::RequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::NoHealthyEndpoint => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::UpstreamFailed => StatusCode::BAD_GATEWAY,
        }
    }

    /// OpenAI's error `type`.
    pub fn error_type(&self) -> &'static str {
        match self.kind {
            ErrorKind::InvalidApiKey => "authentication_error",
            _ if self.status().is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// A stable code, also the metric label.
    pub fn code(&self) -> &'static str {
        match self.kind {
            ErrorKind::InvalidJson => "invalid_json",
            ErrorKind::MissingModel => "missing_model",
            ErrorKind::ConflictingModel => "conflicting_model",
            ErrorKind::AmbiguousModel => "ambiguous_model",
            ErrorKind::InvalidApiKey => "invalid_api_key",
            ErrorKind::ModelNotFound => "model_not_found",
            ErrorKind::ServiceNotFound => "service_not_found",
            ErrorKind::PathNotFound => "not_found",
            ErrorKind::InvalidPath => "invalid_path",
            ErrorKind::RequestTooLarge => "request_too_large",
            ErrorKind::BodyRead => "body_read_failed",
            ErrorKind::NoHealthyEndpoint => "no_healthy_endpoint",
            ErrorKind::UpstreamTimeout => "upstream_timeout",
            ErrorKind::UpstreamFailed => "upstream_error",
        }
    }

    /// The response: OpenAI's error body, the status, the code header.
    pub fn response<B: From<Bytes>>(&self) -> Response<B> {
        let body = json!({ "error": { "message": self.message, "type": self.error_type(), "param": null, "code": self.code() } });
        let mut response = Response::new(B::from(Bytes::from(body.to_string())));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            "x-modelplane-error-code",
            HeaderValue::from_static(self.code()),
        );
        if self.kind == ErrorKind::InvalidApiKey {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_status_type_and_code() {
        let cases = [
            (
                ErrorKind::InvalidJson,
                400,
                "invalid_request_error",
                "invalid_json",
            ),
            (
                ErrorKind::MissingModel,
                400,
                "invalid_request_error",
                "missing_model",
            ),
            (
                ErrorKind::InvalidApiKey,
                401,
                "authentication_error",
                "invalid_api_key",
            ),
            (
                ErrorKind::ModelNotFound,
                404,
                "invalid_request_error",
                "model_not_found",
            ),
            (
                ErrorKind::RequestTooLarge,
                413,
                "invalid_request_error",
                "request_too_large",
            ),
            (
                ErrorKind::NoHealthyEndpoint,
                503,
                "server_error",
                "no_healthy_endpoint",
            ),
            (
                ErrorKind::UpstreamTimeout,
                504,
                "server_error",
                "upstream_timeout",
            ),
            (
                ErrorKind::UpstreamFailed,
                502,
                "server_error",
                "upstream_error",
            ),
        ];
        for (kind, status, error_type, code) in cases {
            let e = GatewayError::new(kind, "m");
            assert_eq!(
                (e.status().as_u16(), e.error_type(), e.code()),
                (status, error_type, code)
            );
        }
        let e = GatewayError::new(ErrorKind::ModelNotFound, "The model `x` does not exist.");
        assert_eq!(
            e.to_string(),
            "The model `x` does not exist. (model_not_found)"
        );
        let response: Response<Bytes> = e.response();
        assert_eq!(
            response.headers()["x-modelplane-error-code"],
            "model_not_found"
        );
        let body: serde_json::Value = serde_json::from_slice(response.body()).expect("json");
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
}
