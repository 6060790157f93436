//! Routing to the logical clusters (see the clusters module): a path under
//! `/clusters/<name>/…` goes to that cluster's router, everything else to
//! the root cluster's.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tower::ServiceExt;

use super::router;
use crate::clusters::{Clusters, GROUP, PATH_PREFIX};
use crate::server::ApiServer;

/// The router of every cluster: `/clusters/<name>/…` to that logical
/// cluster, everything else to the root one.
pub fn clusters_router(clusters: Arc<Clusters>) -> Router {
    let root = router(clusters.root().clone());
    Router::new().fallback(dispatch).with_state(Routes {
        clusters,
        root,
        logical: Arc::default(),
    })
}

/// Each logical cluster's server and its router, by name.
type Routers = HashMap<String, (Arc<ApiServer>, Router)>;

#[derive(Clone)]
struct Routes {
    clusters: Arc<Clusters>,
    root: Router,
    /// Each logical cluster's router, made on its first request, with the
    /// server it serves: a cluster deleted and made again is a new server.
    logical: Arc<RwLock<Routers>>,
}

impl Routes {
    fn router_of(&self, name: &str, server: Arc<ApiServer>) -> Router {
        let cached = self.logical.read().ok().and_then(|m| {
            m.get(name)
                .filter(|(s, _)| Arc::ptr_eq(s, &server))
                .map(|(_, r)| r.clone())
        });
        if let Some(router) = cached {
            return router;
        }
        let made = router(server.clone());
        if let Ok(mut logical) = self.logical.write() {
            logical.insert(name.to_string(), (server, made.clone()));
        }
        made
    }
}

async fn dispatch(State(routes): State<Routes>, mut request: Request) -> Response {
    let Some((name, rest)) = split_path(request.uri()) else {
        return routes.root.oneshot(request).await.into_response();
    };
    let clusters = routes.clusters.clone();
    let lookup = name.clone();
    let served = tokio::task::spawn_blocking(move || clusters.get(&lookup)).await;
    let router = match served {
        Ok(Ok(Some(server))) => routes.router_of(&name, server),
        Ok(Ok(None)) => return not_found(&name),
        _ => return unavailable(),
    };
    *request.uri_mut() = rest;
    router.oneshot(request).await.into_response()
}

/// `/clusters/<name>/rest?query` as the name and `/rest?query`.
fn split_path(uri: &Uri) -> Option<(String, Uri)> {
    let after = uri.path().strip_prefix(PATH_PREFIX)?;
    let (name, rest) = match after.split_once('/') {
        Some((name, rest)) => (name, format!("/{rest}")),
        None => (after, "/".to_string()),
    };
    if name.is_empty() {
        return None;
    }
    let path_and_query = match uri.query() {
        Some(query) => format!("{rest}?{query}"),
        None => rest,
    };
    Some((name.to_string(), path_and_query.parse().ok()?))
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (
        code,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        Body::from(body.to_string()),
    )
        .into_response()
}

fn not_found(name: &str) -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("logicalclusters.{GROUP} \"{name}\" not found"),
    )
}

fn unavailable() -> Response {
    status(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        "the store is not available".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::split_path;

    #[test]
    fn a_logical_cluster_path_splits_into_its_name_and_the_path_inside() {
        let split = |s: &str| split_path(&s.parse().expect("uri")).map(|(n, u)| (n, u.to_string()));
        assert_eq!(
            split("/clusters/a/api/v1/pods?limit=1"),
            Some(("a".into(), "/api/v1/pods?limit=1".into()))
        );
        assert_eq!(split("/clusters/a"), Some(("a".into(), "/".into())));
        assert_eq!(split("/clusters/"), None);
        assert_eq!(split("/api/v1/pods"), None);
    }
}
