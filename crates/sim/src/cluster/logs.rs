//! The kubelet's log endpoint, as the API server reaches it for
//! `kubectl logs`: `GET /containerLogs/{namespace}/{pod}/{container}`,
//! `?previous=true` for the container's last run, `tailLines=N`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;

/// Pod `(namespace, name)` → (this run's log, the previous run's).
pub type Logs = Arc<Mutex<BTreeMap<(String, String), (String, String)>>>;

fn answer(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response
}

/// Answers one request from `logs`.
pub fn respond(logs: &Logs, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ["containerLogs", namespace, pod, _container] = parts.as_slice() else {
        return answer(StatusCode::NOT_FOUND, format!("no such path {path}\n"));
    };
    let query: BTreeMap<String, String> = request
        .uri()
        .query()
        .map(|q| {
            q.split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default();
    let Some((current, previous)) = logs
        .lock()
        .ok()
        .and_then(|l| l.get(&(namespace.to_string(), pod.to_string())).cloned())
    else {
        return answer(
            StatusCode::NOT_FOUND,
            format!("pod {namespace}/{pod} is not running on this node\n"),
        );
    };
    let text = if query.get("previous").is_some_and(|p| p == "true") {
        if previous.is_empty() {
            return answer(
                StatusCode::BAD_REQUEST,
                format!("previous terminated container in pod \"{pod}\" not found"),
            );
        }
        previous
    } else {
        current
    };
    let text = match query.get("tailLines").and_then(|n| n.parse::<usize>().ok()) {
        Some(n) => {
            let lines: Vec<&str> = text.lines().collect();
            let mut tail = lines[lines.len().saturating_sub(n)..].join("\n");
            tail.push('\n');
            tail
        }
        None => text,
    };
    answer(StatusCode::OK, text)
}

/// Serves `logs` on `listener` until dropped.
pub async fn serve(listener: tokio::net::TcpListener, logs: Logs) {
    let handler = move |request: Request<Incoming>| {
        let response = respond(&logs, &request);
        async move { Ok::<_, Infallible>(response) }
    };
    let limits = modelplane_listener::http1::ListenerLimits::default();
    let never = std::future::pending::<()>();
    if let Err(e) = modelplane_listener::http1::serve_http1(
        listener,
        handler,
        never,
        std::time::Duration::ZERO,
        limits,
    )
    .await
    {
        tracing::error!(error = %e, "kubelet endpoint stopped");
    }
}
