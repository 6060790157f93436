//! `GET pods/{name}/log`: as Kubernetes does it, the API server asks the
//! kubelet of the pod's node (`status.daemonEndpoints.kubeletEndpoint` on
//! the node's InternalIP) for `/containerLogs/{namespace}/{pod}/{container}`
//! and answers with what it says.

use std::collections::BTreeMap;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::Failure;

fn bad(message: String) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, "BadRequest", message)
}

/// Where the kubelet of `node` answers: `host:port`.
fn kubelet_address(node: &Value) -> Option<String> {
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64()?;
    let ip = node["status"]["addresses"]
        .as_array()?
        .iter()
        .find(|a| a["type"] == "InternalIP")?["address"]
        .as_str()?;
    Some(format!("{ip}:{port}"))
}

/// The container a log request is for: the one named, else the only one.
fn container(pod: &Value, query: &BTreeMap<String, String>) -> Result<String, Failure> {
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    match query.get("container") {
        Some(c) if names.contains(&c.as_str()) => Ok(c.clone()),
        Some(c) => Err(bad(format!(
            "container {c} is not valid for pod {pod_name}"
        ))),
        None if names.len() == 1 => Ok(names[0].to_string()),
        None => Err(bad(format!(
            "a container name must be specified for pod {pod_name}, choose one of: [{}]",
            names.join(" ")
        ))),
    }
}

/// The log of `pod`'s container, from its node's kubelet.
pub async fn pod_log(
    pod: &Value,
    node: Option<&Value>,
    query: &BTreeMap<String, String>,
) -> Result<Response, Failure> {
    let container = container(pod, query)?;
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let waiting = || {
        bad(format!(
            "container \"{container}\" in pod \"{pod_name}\" is waiting to start: ContainerCreating"
        ))
    };
    let node = node.ok_or_else(waiting)?;
    let address = kubelet_address(node).ok_or_else(waiting)?;
    let mut path = format!("/containerLogs/{namespace}/{pod_name}/{container}");
    let forwarded: Vec<String> = ["previous", "tailLines", "timestamps"]
        .iter()
        .filter_map(|k| query.get(*k).map(|v| format!("{k}={v}")))
        .collect();
    if !forwarded.is_empty() {
        path.push('?');
        path.push_str(&forwarded.join("&"));
    }
    let unreachable = |e: String| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            format!("Get \"http://{address}{path}\": {e}"),
        )
    };
    let stream = tokio::net::TcpStream::connect(&address)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let request = hyper::Request::get(&path)
        .header(header::HOST, &address)
        .header(header::CONNECTION, "close")
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|e| unreachable(e.to_string()))?;
    // The connection is driven here, beside the request: it ends once the
    // kubelet has answered and closed it.
    let fetch = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok::<_, String>((status, body))
    };
    let (fetched, _) = tokio::join!(fetch, connection);
    let (status, body) = fetched.map_err(unreachable)?;
    if !status.is_success() {
        return Err(bad(String::from_utf8_lossy(&body).trim().to_string()));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain")], body).into_response())
}
