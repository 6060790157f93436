//! What `up` shows while the fleet comes up: one line per change of a
//! cluster's or a deployment's state, read from their status as kubectl
//! would show it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use serde_json::Value;

/// Prints one timestamped line.
pub fn step(started: Instant, what: &str) {
    println!("[{:>6.1}s] {what}", started.elapsed().as_secs_f64());
}

fn api(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: modelplane_api::crds::GROUP.into(),
        version: modelplane_api::crds::VERSION.into(),
        api_version: format!(
            "{}/{}",
            modelplane_api::crds::GROUP,
            modelplane_api::crds::VERSION
        ),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::all_with(client.clone(), &resource)
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The first condition that is not True, as `reason: message`.
fn waiting_on(object: &Value) -> String {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["status"] != "True" && c["type"] != "Ready")
        .or_else(|| condition(object, "Ready"))
        .map(|c| {
            let reason = c["reason"].as_str().unwrap_or_default();
            match c["message"].as_str().filter(|m| !m.is_empty()) {
                Some(message) => format!("{reason}: {message}"),
                None => reason.to_string(),
            }
        })
        .unwrap_or_else(|| "waiting for the controllers".into())
}

fn is_ready(object: &Value) -> bool {
    condition(object, "Ready").is_some_and(|c| c["status"] == "True")
}

fn cluster_state(object: &Value) -> String {
    let spec = &object["spec"];
    let stack = spec["stack"].as_str().unwrap_or("Standard");
    let source = spec["cluster"]["source"].as_str().unwrap_or_default();
    if is_ready(object) {
        let gateway = object["status"]["gateway"]["address"]
            .as_str()
            .or_else(|| object["status"]["gatewayAddress"].as_str())
            .unwrap_or("");
        format!("ready ({source}, {stack} stack) {gateway}")
            .trim_end()
            .to_string()
    } else {
        format!(
            "provisioning ({source}, {stack} stack): {}",
            waiting_on(object)
        )
    }
}

fn deployment_state(object: &Value) -> String {
    let replicas = &object["status"]["replicas"];
    let (ready, total) = (
        replicas["ready"].as_i64().unwrap_or(0),
        replicas["total"].as_i64().unwrap_or(0),
    );
    if is_ready(object) {
        format!("{ready}/{total} replicas ready")
    } else {
        format!("{ready}/{total} replicas ready; {}", waiting_on(object))
    }
}

fn key(object: &DynamicObject) -> String {
    match &object.metadata.namespace {
        Some(ns) => format!(
            "{ns}/{}",
            object.metadata.name.as_deref().unwrap_or_default()
        ),
        None => object.metadata.name.clone().unwrap_or_default(),
    }
}

/// Prints every change of a cluster's or deployment's state until stopped.
pub async fn follow(client: kube::Client, started: Instant) {
    let clusters = api(&client, "InferenceCluster", "inferenceclusters");
    let deployments = api(&client, "ModelDeployment", "modeldeployments");
    let mut shown: BTreeMap<String, String> = BTreeMap::new();
    let mut all_ready = false;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let (Ok(cs), Ok(ds)) = (
            clusters.list(&Default::default()).await,
            deployments.list(&Default::default()).await,
        ) else {
            continue;
        };
        let mut now = BTreeMap::new();
        let mut ready = !ds.items.is_empty();
        for c in &cs.items {
            let value = serde_json::to_value(c).unwrap_or_default();
            now.insert(format!("cluster {}", key(c)), cluster_state(&value));
        }
        for d in &ds.items {
            let value = serde_json::to_value(d).unwrap_or_default();
            ready &= is_ready(&value);
            now.insert(format!("deployment {}", key(d)), deployment_state(&value));
        }
        for (what, state) in &now {
            if shown.get(what) != Some(state) {
                step(started, &format!("{what}: {state}"));
            }
        }
        shown = now;
        if ready && !all_ready {
            step(started, "every replica is ready: send it a prompt (above)");
        }
        all_ready = ready;
    }
}
