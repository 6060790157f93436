//! What `up` shows while the fleet runs: one line per change of a
//! cluster's, a model cache's or a deployment's state (and per one
//! deleted), read from their status as kubectl would show it, and when
//! every replica serves.

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
    if let Some(unreachable) = condition(object, "Reachable").filter(|c| c["status"] == "False") {
        return format!(
            "unreachable, everything on it held: {}",
            unreachable["message"].as_str().unwrap_or_default()
        );
    }
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
    let ready = replicas["ready"].as_i64().unwrap_or(0);
    // Of those asked for, not of those placed: 1 of 3 placed is 1/3.
    let desired = replicas["desired"]
        .as_i64()
        .or_else(|| object["spec"]["replicas"].as_i64())
        .unwrap_or(0);
    if is_ready(object) {
        format!("{ready}/{desired} replicas ready")
    } else {
        format!("{ready}/{desired} replicas ready; {}", waiting_on(object))
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

fn cache_state(object: &Value) -> String {
    let ready = object["status"]["summary"]["ready"]
        .as_str()
        .unwrap_or("0/0");
    let phases: Vec<String> = object["status"]["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{} {}",
                c["name"].as_str().unwrap_or_default(),
                c["phase"].as_str().unwrap_or_default()
            )
            .to_lowercase()
        })
        .collect();
    let mut state = format!("staged on {ready} clusters");
    if !phases.is_empty() {
        state = format!("{state} ({})", phases.join(", "));
    }
    if !is_ready(object) {
        state = format!("{state}; {}", waiting_on(object));
    }
    state
}

/// A kind whose objects' states are followed: what its objects are called
/// in progress lines, its kind and plural, and how a state reads.
type Followed = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Value) -> String,
);

const FOLLOWED: &[Followed] = &[
    (
        "cluster",
        "InferenceCluster",
        "inferenceclusters",
        cluster_state,
    ),
    ("cache", "ModelCache", "modelcaches", cache_state),
    (
        "deployment",
        "ModelDeployment",
        "modeldeployments",
        deployment_state,
    ),
];

/// Every followed object's state now, by `kind key`; `None` when one
/// list could not be read; and whether every deployment is Ready.
async fn states(client: &kube::Client) -> Option<(BTreeMap<String, String>, bool)> {
    let mut now = BTreeMap::new();
    let mut deployments_ready = true;
    let mut deployments = 0;
    for (what, kind, plural, state) in FOLLOWED {
        let list = api(client, kind, plural)
            .list(&Default::default())
            .await
            .ok()?;
        for object in &list.items {
            let value = serde_json::to_value(object).unwrap_or_default();
            let shown = if object.metadata.deletion_timestamp.is_some() {
                "deleting".to_string()
            } else {
                state(&value)
            };
            now.insert(format!("{what} {}", key(object)), shown);
            if *kind == "ModelDeployment" {
                deployments += 1;
                deployments_ready &= is_ready(&value);
            }
        }
    }
    Some((now, deployments > 0 && deployments_ready))
}

/// Whether every replica's engine answers: each endpoint composed for a
/// Ready replica that a ModelService routes to answers the gateway's health
/// check (a status read back after a restart says Ready before its engine
/// has loaded again).
async fn engines_answer(
    client: &kube::Client,
    gateway: &modelplane_gateway::state::Gateway,
) -> bool {
    if gateway.publishes() == 0 {
        return false;
    }
    let listed = api(client, "ModelEndpoint", "modelendpoints")
        .list(&kube::api::ListParams::default().labels(modelplane_api::labels::DEPLOYMENT))
        .await;
    let Ok(composed) = listed else {
        return false;
    };
    let routed: BTreeMap<String, _> = gateway
        .table()
        .endpoints()
        .into_iter()
        .map(|e| (e.id.clone(), e))
        .collect();
    for endpoint in composed.items.iter().filter_map(|e| routed.get(&key(e))) {
        if !modelplane_gateway::health::probe(gateway, endpoint).await {
            return false;
        }
    }
    true
}

/// Prints every change of a cluster's, cache's or deployment's state, and
/// every one deleted, until stopped; then, once every deployment is Ready
/// and every engine answers, that the fleet is ready.
pub async fn follow(
    client: kube::Client,
    gateway: std::sync::Arc<modelplane_gateway::state::Gateway>,
    started: Instant,
) {
    let mut shown: BTreeMap<String, String> = BTreeMap::new();
    let mut all_ready = false;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let Some((now, deployments_ready)) = states(&client).await else {
            continue;
        };
        for (what, state) in &now {
            if shown.get(what) != Some(state) {
                step(started, &format!("{what}: {state}"));
            }
        }
        for what in shown.keys().filter(|w| !now.contains_key(*w)) {
            step(started, &format!("{what}: deleted"));
        }
        shown = now;
        let ready = deployments_ready && engines_answer(&client, &gateway).await;
        if ready && !all_ready {
            step(started, "every replica is ready: send it a prompt (above)");
        }
        all_ready = ready;
    }
}
