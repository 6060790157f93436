//! The controller's reconcile paths in process: `modelplane_controller::run`
//! against the embedded API server's router (no socket, no child process),
//! the workload cluster a logical cluster reached only through its
//! InferenceCluster's kubeconfig Secret. What only a process shows (a
//! kill mid-apply, leader election between processes, a proxy in the
//! way, kubectl's view) stays in `controller.rs`.

mod common;

use common::condition;

use std::collections::BTreeSet;
use std::time::Duration;

use common::in_process::Plane;
use futures_util::StreamExt;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);
const EDGE: &str = "10.0.0.7";

const REPLICA: (&str, &str) = ("modelplane.ai/v1alpha1", "ModelReplica");
const ENDPOINT: (&str, &str) = ("modelplane.ai/v1alpha1", "ModelEndpoint");
const CLUSTER: (&str, &str) = ("modelplane.ai/v1alpha1", "InferenceCluster");
const DEPLOYMENT: (&str, &str) = ("apps/v1", "Deployment");

/// Polls `probe` until it gives something, or fails the test after `within`.
async fn wait_for<T>(what: &str, within: Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn name(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The fleet: one Existing Standard cluster `edge`, its one pool `nodes`
/// single-GPU L4 nodes.
async fn fleet(plane: &Plane, nodes: usize) {
    fleet_of_pools(plane, &[("l4", nodes)]).await;
}

/// The fleet: one Existing Standard cluster `edge` with `pools` (name,
/// nodes) of single-GPU L4 nodes.
async fn fleet_of_pools(plane: &Plane, pools: &[(&str, usize)]) {
    let pools: Vec<Value> = pools
        .iter()
        .map(|(name, nodes)| json!({ "name": name, "className": "l4", "nodeCount": nodes }))
        .collect();
    plane.control_plane().await;
    plane.existing_cluster("edge").await;
    plane
        .apply(
            None,
            &[
                json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClass",
                    "metadata": { "name": "l4" },
                    "spec": { "devices": [{ "name": "gpu", "driver": "gpu.nvidia.com",
                        "deviceClassName": "gpu.nvidia.com", "count": 1,
                        "capacity": { "memory": { "value": "23034Mi" } } }] } }),
                json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
                    "metadata": { "name": "edge" },
                    "spec": { "stack": "Standard",
                        "cluster": { "source": "Existing",
                            "existing": { "secretRef": { "name": "edge-kubeconfig" } } },
                        "nodePools": pools } }),
            ],
        )
        .await;
}

fn deployment(name: &str, replicas: usize) -> Value {
    json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
        "metadata": { "name": name, "namespace": "ml-team" },
        "spec": { "replicas": replicas, "template": { "spec": { "engines": [{ "name": "qwen3-8b",
            "members": [{ "role": "Standalone",
                "nodeSelector": { "devices": [{ "name": "gpu", "selectors": [
                    { "cel": "device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"20Gi\")) >= 0" }] }] },
                "template": { "spec": { "containers": [{ "name": "engine",
                    "image": "vllm/vllm-openai:v0.23.0",
                    "args": ["--model=Qwen/Qwen3-8B", "--served-model-name=qwen3-8b"] }] } } }] }] } } } })
}

fn config() -> modelplane_controller::Config {
    modelplane_controller::Config {
        gateway_address: Some("gateway.example:8080".into()),
        resync: Duration::from_secs(1),
        drain: Duration::from_secs(2),
        ..modelplane_controller::Config::default()
    }
}

/// Runs `steps` beside the platform's stand-in for `edge`, stopping it
/// however `steps` ends.
async fn with_platform(plane: &Plane, steps: impl Future<Output = ()>) {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let platform = plane.platform(&[("edge", EDGE)], stopped);
    let steps = async {
        steps.await;
        let _ = stop.send(true);
    };
    tokio::join!(platform, steps);
}

/// Reports each of `workloads` (Deployments on `edge`) Available, as the
/// Deployment controller does once its pods are ready.
async fn available(plane: &Plane, workloads: &[Value]) {
    for workload in workloads {
        let status = json!({ "conditions": [{ "type": "Available", "status": "True" }] });
        plane
            .set_status(
                Some("edge"),
                DEPLOYMENT,
                Some("ml-team"),
                &name(workload),
                status,
            )
            .await;
    }
}

async fn cluster_ready(plane: &Plane) {
    wait_for(
        "the InferenceCluster Ready with its gateway",
        WAIT,
        async || {
            let clusters = plane.list(None, CLUSTER, None).await;
            let edge = clusters.iter().find(|c| name(c) == "edge")?;
            (condition(edge, "Ready").as_deref() == Some("True")
                && edge["status"]["gateway"]["address"] == EDGE)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_on_an_existing_cluster_becomes_ready_with_an_endpoint_per_replica() {
    let plane = Plane::start().await;
    fleet(&plane, 4).await;
    plane.apply(None, &[deployment("qwen3-8b", 3)]).await;
    let controller = plane.controller(config());
    with_platform(&plane, async {
        cluster_ready(&plane).await;

        // Three ModelReplicas on the control plane, owned by the deployment.
        let replicas = wait_for("three ModelReplicas", WAIT, async || {
            let found = plane.list(None, REPLICA, Some("ml-team")).await;
            (found.len() == 3).then_some(found)
        })
        .await;
        let deployments = plane
            .list(
                None,
                ("modelplane.ai/v1alpha1", "ModelDeployment"),
                Some("ml-team"),
            )
            .await;
        let uid = deployments[0]["metadata"]["uid"].clone();
        for replica in &replicas {
            assert_eq!(
                replica["metadata"]["labels"]["modelplane.ai/owner-uid"],
                uid
            );
            assert_eq!(replica["spec"]["clusterName"], "edge");
        }

        // Each replica's engine and endpoint picker Deployments in the
        // team's namespace on the workload cluster, applied server-side as
        // modelplane and labelled with their owner; none on the control plane.
        let workloads = wait_for(
            "the Deployments on the workload cluster",
            WAIT,
            async || {
                let found = plane.list(Some("edge"), DEPLOYMENT, Some("ml-team")).await;
                (found.len() == 2 * replicas.len()).then_some(found)
            },
        )
        .await;
        for workload in &workloads {
            assert!(workload["metadata"]["labels"]["modelplane.ai/owner-uid"].is_string());
            assert!(
                workload["metadata"]["managedFields"]
                    .as_array()
                    .is_some_and(|m| m
                        .iter()
                        .any(|e| e["manager"] == "modelplane" && e["operation"] == "Apply")),
                "{} is applied server-side as modelplane",
                name(workload)
            );
        }
        assert!(
            plane
                .list(None, DEPLOYMENT, Some("ml-team"))
                .await
                .is_empty()
        );

        // Available, as the readiness rule says: every replica Ready, and an
        // endpoint per replica routed through the cluster's gateway.
        available(&plane, &workloads).await;
        wait_for("every replica Ready", WAIT, async || {
            let found = plane.list(None, REPLICA, Some("ml-team")).await;
            found
                .iter()
                .all(|r| condition(r, "Ready").as_deref() == Some("True"))
                .then_some(())
        })
        .await;
        let endpoints = wait_for("three ModelEndpoints", WAIT, async || {
            let found = plane.list(None, ENDPOINT, Some("ml-team")).await;
            (found.len() == 3).then_some(found)
        })
        .await;
        for endpoint in &endpoints {
            assert!(
                endpoint["spec"]["url"]
                    .as_str()
                    .is_some_and(|u| u.starts_with(&format!("http://{EDGE}/ml-team/"))),
                "{endpoint}"
            );
        }

        // The story, as Events.
        let events = plane.list(None, ("v1", "Event"), Some("ml-team")).await;
        let told = |kind: &str, reason: &str| {
            events.iter().any(|e| {
                e["involvedObject"]["kind"] == kind
                    && e["reason"] == reason
                    && e["source"]["component"] == "modelplane"
            })
        };
        assert!(told("ModelDeployment", "Scheduled"), "{events:?}");
        assert!(told("ModelReplica", "Composing"), "{events:?}");
    })
    .await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_placed_together_never_book_more_than_the_pool_holds() {
    let ever = placed_together(&[("l4", 12)], 30).await;
    assert_eq!(
        ever.len(),
        12,
        "one replica per single-GPU node, the other deployments waiting for capacity: {ever:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_placed_together_on_two_pools_never_book_more_than_either_holds() {
    // Turns are per pool: placements on the two pools go side by side,
    // and a plan that finds its pool taken meanwhile asks for the other.
    let ever = placed_together(&[("l4", 6), ("l4-b", 6)], 30).await;
    assert_eq!(ever.len(), 12, "{ever:?}");
}

/// Every ModelReplica ever made (seen by a watch, so one made and removed
/// again counts) when `deployments` one-replica deployments are applied at
/// once to `edge` with `pools`; asserts that no pool ever held more
/// replicas than it has nodes.
async fn placed_together(pools: &[(&str, usize)], deployments: usize) -> BTreeSet<String> {
    let nodes: usize = pools.iter().map(|(_, n)| n).sum();
    let plane = Plane::start().await;
    fleet_of_pools(&plane, pools).await;
    let controller = plane.controller(config());
    let ever = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    with_platform(&plane, async {
        cluster_ready(&plane).await;
        let resource = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "modelplane.ai",
            "v1alpha1",
            "ModelReplica",
        ));
        let api = modelplane_watch::api(plane.root.clone(), &resource, Some("ml-team"));
        let mut made =
            modelplane_watch::changes(api, Default::default(), modelplane_watch::whole).boxed();
        let seen = ever.clone();
        let watching = tokio::spawn(async move {
            while let Some(Ok(change)) = made.next().await {
                let objects = match change {
                    modelplane_watch::Change::Applied(o) => vec![o],
                    modelplane_watch::Change::Listed(objects) => objects,
                    modelplane_watch::Change::Deleted(_) => Vec::new(),
                };
                if let Ok(mut seen) = seen.lock() {
                    for o in &objects {
                        let pool = o["spec"]["engines"][0]["members"][0]["nodePoolName"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                        seen.insert(name(o), pool);
                    }
                }
            }
        });
        // Every deployment at once: the controller's workers place them
        // side by side, each from the same fleet.
        let all: Vec<Value> = (0..deployments)
            .map(|i| deployment(&format!("model-{i:03}"), 1))
            .collect();
        plane.apply(None, &all).await;
        wait_for("every deployment looked at", WAIT, async || {
            let mds = plane
                .list(
                    None,
                    ("modelplane.ai/v1alpha1", "ModelDeployment"),
                    Some("ml-team"),
                )
                .await;
            (mds.len() == deployments && mds.iter().all(|d| d["status"].is_object())).then_some(())
        })
        .await;
        wait_for("the pools full", WAIT, async || {
            (plane.list(None, REPLICA, Some("ml-team")).await.len() == nodes).then_some(())
        })
        .await;
        // A few resyncs (every second) more, then: never more than fit.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            plane.list(None, REPLICA, Some("ml-team")).await.len(),
            nodes
        );
        watching.abort();
    })
    .await;
    controller.stop().await;
    let ever = ever.lock().map(|e| e.clone()).unwrap_or_default();
    for (pool, holds) in pools {
        let on = ever.values().filter(|p| p == pool).count();
        assert!(
            on <= *holds,
            "{on} replicas ever on pool {pool} of {holds} nodes: {ever:?}"
        );
    }
    ever.into_keys().collect()
}

/// The uids of what serves: the replicas and endpoints on the control
/// plane, their workloads on `edge`.
async fn serving(plane: &Plane) -> BTreeSet<(String, String)> {
    let mut serving = BTreeSet::new();
    let kinds = [
        (None, REPLICA),
        (None, ENDPOINT),
        (Some("edge"), DEPLOYMENT),
        (Some("edge"), ("v1", "Service")),
        (Some("edge"), ("v1", "ConfigMap")),
        (
            Some("edge"),
            ("inference.networking.k8s.io/v1", "InferencePool"),
        ),
    ];
    for (cluster, kind) in kinds {
        for object in plane.list(cluster, kind, Some("ml-team")).await {
            let uid = object["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            serving.insert((format!("{}/{}", kind.1, name(&object)), uid));
        }
    }
    serving
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_deletes_nothing_and_the_fleet_converges_when_it_answers() {
    let plane = Plane::start().await;
    fleet(&plane, 4).await;
    plane.apply(None, &[deployment("qwen3-8b", 2)]).await;
    let controller = plane.controller(config());
    with_platform(&plane, async {
        cluster_ready(&plane).await;
        let workloads = wait_for("both replicas' workloads", WAIT, async || {
            let found = plane.list(Some("edge"), DEPLOYMENT, Some("ml-team")).await;
            (found.len() == 4).then_some(found)
        })
        .await;
        available(&plane, &workloads).await;
        wait_for(
            "both replicas Ready, with their endpoints",
            WAIT,
            async || {
                let replicas = plane.list(None, REPLICA, Some("ml-team")).await;
                let endpoints = plane.list(None, ENDPOINT, Some("ml-team")).await;
                (replicas.len() == 2
                    && endpoints.len() == 2
                    && replicas
                        .iter()
                        .all(|r| condition(r, "Ready").as_deref() == Some("True")))
                .then_some(())
            },
        )
        .await;
        let before = serving(&plane).await;

        // The cluster stops answering. A change that needs it (an engine
        // argument) cannot be applied there: the replicas say why, and
        // nothing anywhere is deleted or replaced.
        plane.set_up("edge", false);
        let mut changed = deployment("qwen3-8b", 2);
        changed["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]
            ["containers"][0]["args"]
            .as_array_mut()
            .expect("args")
            .push(json!("--max-model-len=8192"));
        plane.apply(None, &[changed]).await;
        let said = wait_for(
            "the replicas to say their cluster cannot be written",
            WAIT,
            async || {
                let replicas = plane.list(None, REPLICA, Some("ml-team")).await;
                let synced = replicas.first()?["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Synced")?
                    .clone();
                (synced["status"] == "False").then_some(synced)
            },
        )
        .await;
        assert!(
            said["message"]
                .as_str()
                .is_some_and(|m| m.contains("cluster edge")),
            "{said}"
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            serving(&plane).await,
            before,
            "nothing was deleted or replaced while the cluster was away"
        );
        let replicas = plane.list(None, REPLICA, Some("ml-team")).await;
        assert!(
            replicas
                .iter()
                .all(|r| condition(r, "Ready").as_deref() == Some("True")),
            "what serves stays Ready"
        );

        // It answers again: the change lands, the same objects serve.
        plane.set_up("edge", true);
        wait_for(
            "the replicas synced again, the change on the cluster",
            WAIT,
            async || {
                let replicas = plane.list(None, REPLICA, Some("ml-team")).await;
                let synced = replicas
                    .iter()
                    .all(|r| condition(r, "Synced").as_deref() == Some("True"));
                let engines = plane.list(Some("edge"), DEPLOYMENT, Some("ml-team")).await;
                let changed = engines
                    .iter()
                    .filter(|d| d.to_string().contains("--max-model-len=8192"))
                    .count();
                (synced && changed == 2).then_some(())
            },
        )
        .await;
        assert_eq!(
            serving(&plane).await,
            before,
            "the fleet converged without replacing what serves"
        );
    })
    .await;
    controller.stop().await;
}
