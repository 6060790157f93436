//! What a request asks to do, in the terms RBAC rules are written in: the
//! attributes kube-apiserver's request-info resolver reads off a path,
//! its method and its query (verb, API group, resource, subresource,
//! namespace, name), or the path of a non-resource request.

use std::collections::BTreeMap;

/// A request as the authorizer sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`, or a special verb (`impersonate`); for a
    /// non-resource request the lowercase HTTP method.
    pub verb: String,
    /// Addresses an API resource (else a path such as `/version`).
    pub resource_request: bool,
    /// The request path.
    pub path: String,
    /// API group; empty for the core group.
    pub api_group: String,
    /// API version.
    pub api_version: String,
    /// Namespace; empty at the cluster scope.
    pub namespace: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource (`status`, `scale`, `token`), or empty.
    pub subresource: String,
    /// Object name, or empty.
    pub name: String,
}

impl Attributes {
    /// `resource` or `resource/subresource`, as rules and messages name it.
    pub fn resource_path(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// Subresources of a namespace itself (`/api/v1/namespaces/x/status`).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// The attributes of `method path?query`, as kube-apiserver resolves them.
pub fn attributes(method: &str, path: &str, query: &BTreeMap<String, String>) -> Attributes {
    let non_resource = || Attributes {
        verb: method.to_ascii_lowercase(),
        path: path.to_string(),
        ..Attributes::default()
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
        return non_resource();
    }
    let mut info = Attributes {
        resource_request: true,
        path: path.to_string(),
        ..Attributes::default()
    };
    let mut rest = &parts[1..];
    if parts[0] == "apis" {
        if rest.len() < 3 {
            return non_resource();
        }
        info.api_group = rest[0].to_string();
        rest = &rest[1..];
    }
    info.api_version = rest[0].to_string();
    rest = &rest[1..];
    let by_method = rest[0] != "watch";
    if by_method {
        info.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
    } else {
        info.verb = "watch".into();
        rest = &rest[1..];
    }
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        info.namespace = rest[1].to_string();
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            rest = &rest[2..];
        }
    }
    if let Some(resource) = rest.first() {
        info.resource = resource.to_string();
    }
    if let Some(name) = rest.get(1) {
        info.name = name.to_string();
    }
    if let Some(subresource) = rest.get(2) {
        info.subresource = subresource.to_string();
    }
    if info.name.is_empty() && info.verb == "get" {
        let watch = query.get("watch").map(String::as_str);
        info.verb = if matches!(watch, Some("true" | "1" | "t" | "T" | "TRUE" | "True")) {
            "watch".into()
        } else {
            "list".into()
        };
    }
    if info.name.is_empty() && matches!(info.verb.as_str(), "list" | "watch") {
        // A list of one object by name is authorized as that object.
        if let Some(name) = exact_name(query.get("fieldSelector")) {
            info.name = name;
        }
    }
    if info.name.is_empty() && info.verb == "delete" {
        info.verb = "deletecollection".into();
    }
    info
}

/// The name a field selector requires exactly (`metadata.name=x`).
fn exact_name(selector: Option<&String>) -> Option<String> {
    let selector = selector?;
    if selector.contains(',') {
        return None;
    }
    let value = selector
        .strip_prefix("metadata.name==")
        .or_else(|| selector.strip_prefix("metadata.name="))?;
    let valid = !value.is_empty() && !value.contains(['/', '%']) && value != "." && value != "..";
    valid.then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: &str, path: &str, query: &[(&str, &str)]) -> Attributes {
        let query = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        attributes(method, path, &query)
    }

    #[test]
    fn resource_requests_resolve_as_kube_apiserver_resolves_them() {
        let a = of("GET", "/api/v1/namespaces/ml/pods", &[]);
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.resource.as_str()),
            ("list", "ml", "pods")
        );
        let a = of("GET", "/api/v1/pods", &[("watch", "true")]);
        assert_eq!((a.verb.as_str(), a.namespace.as_str()), ("watch", ""));
        let a = of(
            "PUT",
            "/apis/apps/v1/namespaces/ml/deployments/web/scale",
            &[],
        );
        assert_eq!(
            (
                a.verb.as_str(),
                a.api_group.as_str(),
                a.resource_path().as_str(),
                a.name.as_str()
            ),
            ("update", "apps", "deployments/scale", "web")
        );
        let a = of("DELETE", "/api/v1/namespaces/ml/configmaps", &[]);
        assert_eq!(a.verb, "deletecollection");
        // A namespace is its own namespace; its status is its subresource.
        let a = of("GET", "/api/v1/namespaces/ml", &[]);
        assert_eq!(
            (
                a.verb.as_str(),
                a.namespace.as_str(),
                a.resource.as_str(),
                a.name.as_str()
            ),
            ("get", "ml", "namespaces", "ml")
        );
        let a = of("PUT", "/api/v1/namespaces/ml/finalize", &[]);
        assert_eq!(
            (a.resource_path().as_str(), a.name.as_str()),
            ("namespaces/finalize", "ml")
        );
        let a = of("GET", "/api/v1/watch/namespaces/ml/pods", &[]);
        assert_eq!((a.verb.as_str(), a.resource.as_str()), ("watch", "pods"));
        let a = of(
            "GET",
            "/api/v1/namespaces/ml/secrets",
            &[("fieldSelector", "metadata.name=key")],
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "key"));
    }

    #[test]
    fn discovery_and_other_paths_are_non_resource_requests() {
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
            "/openapi/v3",
        ] {
            let a = of("GET", path, &[]);
            assert!(!a.resource_request, "{path}");
            assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", path));
        }
    }
}
