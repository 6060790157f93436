//! Many logical clusters in one server (issue 11's targets), kube-rs over
//! loopback TLS, the server in its own process:
//! - creating an empty logical cluster: the `LogicalCluster` create in the
//!   root and the first answer from inside it (baseline: a ConfigMap create
//!   in the root, side by side);
//! - 1,000 logical clusters, each with a namespace, a LeaderWorkerSet-sized
//!   CRD, 20 nodes and 50 pods: the server's resident memory;
//! - one change to 100 watchers in one of those clusters, against the same
//!   in the root before the fill (baseline).
//!
//! `cargo bench -p modelplane-apiserver --bench clusters` (CLUSTERS=N for a
//! smaller fleet).

mod common;

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::{Client, Config};
use serde_json::{Value, json};

use common::{median, percentile, rss_mib, start_server};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A schema shaped like a big CRD's: nested objects, each property
/// described, `depth` levels of `width` properties (LeaderWorkerSet's
/// schema embeds two pod templates and is of this size).
fn schema(depth: usize, width: usize) -> Value {
    if depth == 0 {
        return json!({ "type": "string", "description": "d".repeat(120) });
    }
    let properties: serde_json::Map<String, Value> = (0..width)
        .map(|i| (format!("field{i}"), schema(depth - 1, width)))
        .collect();
    json!({ "type": "object", "description": "d".repeat(120), "properties": properties })
}

fn lws_crd() -> Value {
    let mut root = schema(4, 7);
    root["properties"]["spec"] = schema(3, 6);
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "leaderworkersets.leaderworkerset.x-k8s.io" },
        "spec": {
            "group": "leaderworkerset.x-k8s.io", "scope": "Namespaced",
            "names": { "plural": "leaderworkersets", "singular": "leaderworkerset",
                       "kind": "LeaderWorkerSet", "shortNames": ["lws"] },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": root } }]
        }
    })
}

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "labels": {
            "kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": "p5.48xlarge",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3" } },
        "spec": { "taints": [{ "key": "nvidia.com/gpu", "effect": "NoSchedule" }] },
        "status": { "capacity": { "cpu": "192", "memory": "2048Gi", "nvidia.com/gpu": "8" },
                    "conditions": [{ "type": "Ready", "status": "True" }] }
    })
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": "work", "labels": { "app": "engine" } },
        "spec": { "containers": [{ "name": "engine", "image": "vllm/vllm-openai:v0.11.0",
            "command": ["vllm", "serve", "Qwen/Qwen3-8B", "--port=8000"],
            "env": [{ "name": "MODELPLANE_RANK", "value": "0" }],
            "resources": { "limits": { "nvidia.com/gpu": "1" } } }] }
    })
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn client_at(kubeconfig: &kube::config::Kubeconfig, path: &str) -> Client {
    let mut kubeconfig = kubeconfig.clone();
    for cluster in &mut kubeconfig.clusters {
        if let Some(c) = cluster.cluster.as_mut()
            && let Some(server) = c.server.as_mut()
        {
            server.push_str(path);
        }
    }
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

async fn create(api: &Api<DynamicObject>, object: Value) {
    let object: DynamicObject = serde_json::from_value(object).expect("object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("create");
}

/// Creates the logical cluster `name` and returns the time until its first
/// answer from inside.
async fn new_cluster(root: &Client, kubeconfig: &kube::config::Kubeconfig, name: &str) -> f64 {
    let lcs: Api<DynamicObject> = Api::all_with(
        root.clone(),
        &resource(
            "tenancy.modelplane.ai",
            "v1alpha1",
            "LogicalCluster",
            "logicalclusters",
        ),
    );
    let inside = client_at(kubeconfig, &format!("/clusters/{name}")).await;
    let start = Instant::now();
    create(
        &lcs,
        json!({ "apiVersion": "tenancy.modelplane.ai/v1alpha1", "kind": "LogicalCluster",
                "metadata": { "name": name } }),
    )
    .await;
    let namespaces: Api<DynamicObject> =
        Api::all_with(inside, &resource("", "v1", "Namespace", "namespaces"));
    namespaces.get("default").await.expect("first answer");
    start.elapsed().as_secs_f64() * 1000.0
}

async fn fill(kubeconfig: &kube::config::Kubeconfig, name: &str) {
    let client = client_at(kubeconfig, &format!("/clusters/{name}")).await;
    let all = |r: ApiResource| Api::<DynamicObject>::all_with(client.clone(), &r);
    create(
        &all(resource("", "v1", "Namespace", "namespaces")),
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "work" } }),
    )
    .await;
    create(
        &all(resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        )),
        lws_crd(),
    )
    .await;
    let nodes = all(resource("", "v1", "Node", "nodes"));
    futures_util::stream::iter(0..20)
        .for_each_concurrent(4, |i| {
            let nodes = nodes.clone();
            async move { create(&nodes, node(&format!("node-{i}"))).await }
        })
        .await;
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "work", &resource("", "v1", "Pod", "pods"));
    futures_util::stream::iter(0..50)
        .for_each_concurrent(4, |i| {
            let pods = pods.clone();
            async move { create(&pods, pod(&format!("engine-{i}"))).await }
        })
        .await;
}

fn main() {
    if common::serve_if_child() {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(bench());
}

async fn bench() {
    let count: usize = std::env::var("CLUSTERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir on disk");
    let server = start_server(dir.path());
    let pid = server.0.id();
    println!("server resident memory, idle: {:.0} MiB", rss_mib(pid));
    let kubeconfig = Arc::new(
        kube::config::Kubeconfig::read_from(dir.path().join("kubeconfig")).expect("kubeconfig"),
    );
    let root = client_at(&kubeconfig, "").await;

    let mut root_latencies =
        common::watch_latencies(Api::<ConfigMap>::default_namespaced(root.clone()), 100).await;
    root_latencies.sort_by(f64::total_cmp);
    println!(
        "server resident memory after 100 watchers in the root: {:.0} MiB",
        rss_mib(pid)
    );

    // Creating empty clusters, one at a time, beside ConfigMap creates.
    let configmaps: Api<DynamicObject> =
        Api::default_namespaced_with(root.clone(), &resource("", "v1", "ConfigMap", "configmaps"));
    let (mut empty, mut baseline) = (Vec::new(), Vec::new());
    for i in 0..50 {
        empty.push(new_cluster(&root, &kubeconfig, &format!("empty-{i}")).await);
        let start = Instant::now();
        create(
            &configmaps,
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": format!("cm-{i}") } }),
        )
        .await;
        baseline.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "creating an empty logical cluster, to its first answer: median {:.2} ms (a ConfigMap create in the root, side by side: {:.2} ms)",
        median(empty),
        median(baseline)
    );
    println!(
        "server resident memory with 50 empty logical clusters: {:.0} MiB",
        rss_mib(pid)
    );

    let start = Instant::now();
    futures_util::stream::iter(0..count)
        .for_each_concurrent(8, |i| {
            let (root, kubeconfig) = (root.clone(), kubeconfig.clone());
            async move {
                let name = format!("cluster-{i}");
                new_cluster(&root, &kubeconfig, &name).await;
                fill(&kubeconfig, &name).await;
            }
        })
        .await;
    println!(
        "{count} logical clusters, each with a namespace, a {} KB CRD, 20 nodes and 50 pods: filled in {:.1} s",
        lws_crd().to_string().len() / 1024,
        start.elapsed().as_secs_f64()
    );
    println!(
        "server resident memory with {count} filled logical clusters: {:.0} MiB",
        rss_mib(pid)
    );

    let inside = client_at(&kubeconfig, "/clusters/cluster-0").await;
    let mut latencies =
        common::watch_latencies(Api::<ConfigMap>::default_namespaced(inside), 100).await;
    latencies.sort_by(f64::total_cmp);
    println!(
        "one change to 100 watchers in a logical cluster among {count}: p50 {:.2} ms, p99 {:.2} ms (in the root before the fill: p50 {:.2} ms, p99 {:.2} ms)",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        percentile(&root_latencies, 0.5),
        percentile(&root_latencies, 0.99),
    );
    println!("server resident memory at the end: {:.0} MiB", rss_mib(pid));
}
