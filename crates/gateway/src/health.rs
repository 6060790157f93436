//! Active health checks: every `health_interval`, each endpoint Modelplane
//! composed gets `GET …/health` (below its rewrite path, as the engine
//! serves it); what a result does to the endpoint is decided in
//! [`crate::outlier`] (out after several failures in a row, back with the
//! first pass). External endpoints (SaaS providers) are not probed: their
//! failures count passively, request by request.

use std::sync::Arc;

use http::{Request, Uri};

use crate::body::UpstreamBody;
use crate::metrics::EndpointLabels;
use crate::state::Gateway;
use crate::table::Endpoint;

/// The path an endpoint's engine answers health checks on.
pub fn health_path(endpoint: &Endpoint) -> String {
    match &endpoint.rewrite {
        Some(rewrite) => format!("{}/health", rewrite.trim_end_matches('/')),
        None => "/health".into(),
    }
}

/// Probes one endpoint and records the result.
pub async fn probe(gateway: &Gateway, endpoint: &Endpoint) -> bool {
    let uri = Uri::builder()
        .scheme(endpoint.scheme.clone())
        .authority(endpoint.authority.clone())
        .path_and_query(health_path(endpoint))
        .build();
    let ok = match uri {
        Ok(uri) => {
            let mut request = Request::new(UpstreamBody::empty());
            *request.uri_mut() = uri;
            if let Some(bearer) = &endpoint.bearer {
                request
                    .headers_mut()
                    .insert(http::header::AUTHORIZATION, bearer.clone());
            }
            matches!(
                tokio::time::timeout(gateway.config().health_timeout, gateway.client().request(request)).await,
                Ok(Ok(response)) if response.status().is_success()
            )
        }
        Err(_) => false,
    };
    if !ok {
        gateway
            .metrics()
            .probe_failures
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.id.clone(),
            })
            .inc();
    }
    gateway.probed(endpoint, ok);
    ok
}

/// Probes every composed endpoint of the current table each interval, until
/// `shutdown`.
pub async fn run(gateway: Arc<Gateway>, shutdown: impl std::future::Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        let mut probes = tokio::task::JoinSet::new();
        for endpoint in gateway.table().endpoints() {
            if endpoint.external {
                continue;
            }
            let gateway = gateway.clone();
            probes.spawn(async move {
                probe(&gateway, &endpoint).await;
            });
        }
        while probes.join_next().await.is_some() {}
        tokio::select! {
            () = tokio::time::sleep(gateway.config().health_interval) => {}
            () = &mut shutdown => return,
        }
    }
}
