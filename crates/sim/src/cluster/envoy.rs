//! Envoy Gateway in a workload cluster: accepts the GatewayClasses naming
//! its controller, runs one edge data plane (a modelplane-gateway) for the
//! cluster, and programs each Gateway of an accepted class with the address
//! that data plane listens on.
//!
//! A real Envoy Gateway publishes a LoadBalancer IP serving the listener's
//! port; the simulator cannot bind port 80 without privileges, so the
//! address it publishes carries the port it bound (`127.0.0.1:PORT`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube::runtime::watcher;
use modelplane_gateway::state::{Gateway, GatewayConfig};
use serde_json::{Value, json};

use super::Workload;
use crate::client::{self, Kind};

/// The controller name Envoy Gateway answers for.
pub const CONTROLLER_NAME: &str = "gateway.envoyproxy.io/gatewayclass-controller";
const MANAGER: &str = "envoy-gateway";

fn gateway_class() -> Kind {
    Kind::new(
        "gateway.networking.k8s.io/v1",
        "GatewayClass",
        "gatewayclasses",
        false,
    )
}

fn gateway() -> Kind {
    Kind::new("gateway.networking.k8s.io/v1", "Gateway", "gateways", true)
}

/// Runs until the cluster's scope stops.
pub async fn run(workload: Arc<Workload>) {
    let edge = match Edge::start(&workload).await {
        Ok(edge) => edge,
        Err(e) => {
            tracing::error!(cluster = %workload.name, error = %e, "cannot start the edge gateway");
            return;
        }
    };
    let client = workload.client().clone();
    let wakes = |kind: Kind| {
        let api = modelplane_watch::api(client.clone(), &kind.resource, None);
        modelplane_watch::changes(api, watcher::Config::default(), modelplane_watch::whole)
            .map(drop)
    };
    let (classes, gateways) = (wakes(gateway_class()), wakes(gateway()));
    let mut changes = futures_util::stream::select(classes, gateways).boxed();
    // The watches are read as they come, whatever a pass is waiting on: they
    // share the cluster's HTTP/2 connection with the pass's own requests.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    workload.scope.spawn("sim-envoy-watch", async move {
        while changes.next().await.is_some() {
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    while rx.recv().await.is_some() {
        // Take the burst of events in one pass.
        while let Ok(Some(())) = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await {}
        if let Err(e) = reconcile(&workload, &edge.address).await {
            tracing::debug!(cluster = %workload.name, error = %e, "envoy gateway pass failed");
        }
    }
}

/// The cluster's edge data plane.
pub struct Edge {
    /// Where it listens.
    pub address: String,
    /// The gateway it runs.
    pub gateway: Arc<Gateway>,
}

impl Edge {
    async fn start(workload: &Arc<Workload>) -> std::io::Result<Edge> {
        // A load balancer keeps its address: after a restart, the one the
        // Gateways were programmed with, if it is still free.
        let previous = previous_address(workload).await;
        let listener = match previous {
            Some(address) => match tokio::net::TcpListener::bind(&address).await {
                Ok(listener) => listener,
                Err(_) => tokio::net::TcpListener::bind("127.0.0.1:0").await?,
            },
            None => tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        };
        let address = listener.local_addr()?.to_string();
        let gateway = Gateway::new(GatewayConfig::default())?;
        let serving = gateway.clone();
        workload.scope.spawn("sim-edge-gateway", async move {
            let never = std::future::pending::<()>();
            if let Err(e) =
                modelplane_gateway::server::serve(listener, serving, never, Duration::ZERO).await
            {
                tracing::error!(error = %e, "edge gateway stopped");
            }
        });
        if let Ok(mut edge) = workload.edge.lock() {
            *edge = Some(gateway.clone());
        }
        // The routes may all be there already: compile them now.
        workload.nudge.notify_one();
        Ok(Edge { address, gateway })
    }
}

/// The address this cluster's Gateways were last programmed with.
async fn previous_address(workload: &Workload) -> Option<String> {
    let gateways = gateway()
        .api(workload.client(), None)
        .list(&Default::default())
        .await
        .ok()?;
    gateways.items.iter().find_map(|gw| {
        let gw = serde_json::to_value(gw).ok()?;
        gw["status"]["addresses"][0]["value"]
            .as_str()
            .filter(|a| a.starts_with("127."))
            .map(str::to_string)
    })
}

fn condition(type_: &str, reason: &str, message: &str, generation: &Value, stamp: &str) -> Value {
    json!({ "type": type_, "status": "True", "reason": reason, "message": message,
        "observedGeneration": generation, "lastTransitionTime": stamp })
}

fn is_true(object: &Value, type_: &str) -> bool {
    crate::cloud::condition(object, type_).is_some_and(|c| c["status"] == "True")
}

async fn reconcile(workload: &Workload, address: &str) -> Result<(), kube::Error> {
    let client = workload.client();
    let stamp = crate::clock::timestamp();
    let mut accepted = Vec::new();
    for class in gateway_class()
        .api(client, None)
        .list(&Default::default())
        .await?
    {
        let class = serde_json::to_value(class).unwrap_or_default();
        if class["spec"]["controllerName"] != CONTROLLER_NAME {
            continue;
        }
        accepted.push(
            class["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        if !is_true(&class, "Accepted") {
            let status = json!({ "conditions": [condition("Accepted", "Accepted", "Valid GatewayClass", &class["metadata"]["generation"], &stamp)] });
            client::apply_status(client, &gateway_class(), &class, &status, MANAGER).await?;
        }
    }
    for gw in gateway()
        .api(client, None)
        .list(&Default::default())
        .await?
    {
        let gw = serde_json::to_value(gw).unwrap_or_default();
        let class = gw["spec"]["gatewayClassName"].as_str().unwrap_or_default();
        if !accepted.iter().any(|a| a == class) {
            continue;
        }
        let programmed =
            is_true(&gw, "Programmed") && gw["status"]["addresses"][0]["value"] == address;
        if programmed {
            continue;
        }
        let generation = &gw["metadata"]["generation"];
        let listeners: Vec<Value> = gw["spec"]["listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| json!({
                "name": l["name"], "attachedRoutes": 0,
                "supportedKinds": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute" }],
                "conditions": [
                    condition("Accepted", "Accepted", "Listener is valid", generation, &stamp),
                    condition("Programmed", "Programmed", "Sending translated listener configuration to the data plane", generation, &stamp),
                ],
            }))
            .collect();
        let status = json!({
            "addresses": [{ "type": "IPAddress", "value": address }],
            "conditions": [
                condition("Accepted", "Accepted", "The Gateway has been scheduled by Envoy Gateway", generation, &stamp),
                condition("Programmed", "Programmed", "Address assigned to the Gateway, 1/1 envoy replicas available", generation, &stamp),
            ],
            "listeners": listeners,
        });
        client::apply_status(client, &gateway(), &gw, &status, MANAGER).await?;
    }
    Ok(())
}
