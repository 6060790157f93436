//! The API server end to end (issue 6 targets), kube-rs over loopback TLS
//! against `serve()` on 127.0.0.1, the server in a child process (this
//! binary re-run with `MODELPLANE_BENCH_SERVE_DIR`) so its memory is its own:
//! - durable creates of 2 KB custom objects from 16 concurrent clients
//!   (baseline: the same creates one at a time);
//! - a list of 10,000 objects (baseline: the store's own list);
//! - one change delivered to 100 watchers, latency percentiles;
//! - the server's resident memory idle and with 10,000 objects stored.
//!
//! `cargo bench -p modelplane-apiserver --bench api`

mod common;

use std::time::Instant;

use common::{median, percentile, rss_mib, start_server};

use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::{Client, Config};
use serde_json::json;

/// The `modelplane` binary's allocator, so the memory figures are its.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const VALUE: usize = 2048;

fn widget(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": { "name": name },
        "spec": { "payload": "x".repeat(VALUE) },
    }))
    .expect("widget")
}

async fn create_many(
    api: &Api<DynamicObject>,
    prefix: &str,
    count: usize,
    concurrency: usize,
) -> f64 {
    let start = Instant::now();
    futures_util::stream::iter(0..count)
        .for_each_concurrent(concurrency, |i| {
            let api = api.clone();
            let name = format!("{prefix}-{i:05}");
            async move {
                api.create(&PostParams::default(), &widget(&name))
                    .await
                    .expect("create");
            }
        })
        .await;
    count as f64 / start.elapsed().as_secs_f64()
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
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir on disk");
    let server = start_server(dir.path());
    let pid = server.0.id();
    println!("server resident memory, idle: {:.0} MiB", rss_mib(pid));
    let kubeconfig =
        kube::config::Kubeconfig::read_from(dir.path().join("kubeconfig")).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    let client = Client::try_from(config).expect("client");

    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
            ),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.example.com" },
        "spec": { "group": "example.com", "scope": "Namespaced",
                  "names": { "plural": "widgets", "singular": "widget", "kind": "Widget" },
                  "versions": [{ "name": "v1", "served": true, "storage": true,
                                 "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }] },
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("install the CRD");
    let resource = ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);

    let sequential = create_many(&api, "seq", 200, 1).await;
    let concurrent = create_many(&api, "par", 2000, 16).await;
    println!(
        "creates/s of 2 KB custom objects: 16 concurrent {concurrent:.0}/s, one at a time {sequential:.0}/s (baseline)"
    );

    let _ = create_many(&api, "fill", 10_000 - 2200, 16).await;
    let mut list_ms = Vec::new();
    for _ in 0..7 {
        let start = Instant::now();
        let list = api.list(&ListParams::default()).await.expect("list");
        assert_eq!(list.items.len(), 10_000);
        list_ms.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    println!("list of 10,000 objects: median {:.1} ms", median(list_ms));
    println!(
        "server resident memory with 10,000 objects (after the lists): {:.0} MiB",
        rss_mib(pid)
    );

    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::default_namespaced(client.clone());
    let mut latencies = common::watch_latencies(configmaps, 100).await;
    latencies.sort_by(f64::total_cmp);
    println!(
        "one change to 100 watchers (from the write's start): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} deliveries",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
        latencies.len()
    );
}
