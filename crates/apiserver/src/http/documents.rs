//! What is served beside the resources: discovery, OpenAPI v2 and v3, and
//! a pod's log (asked of its node's kubelet).

use super::*;

/// A pod's log, from the kubelet of its node.
pub(super) async fn pod_log(
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
                .iter()
                .find(|r| r.group.is_empty() && r.plural == "nodes")
                .cloned()
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
    super::logs::pod_log(&pod, node.as_ref(), query).await
}

/// Aggregated discovery of `/api` or `/apis`, when the client asks for it.
pub(super) fn aggregated_discovery(
    server: &ApiServer,
    path: &str,
    accept: &str,
) -> Option<Response> {
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
pub(super) fn openapi_v2(server: &ApiServer, accept: &str) -> Response {
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
pub(super) fn discover(server: &ApiServer, path: &str) -> Option<Value> {
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
