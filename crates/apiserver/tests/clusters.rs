//! Logical clusters through kube-rs over TLS, each reached only through its
//! own kubeconfig: separate objects, namespaces, CRDs and watches; created
//! by a library call or a `LogicalCluster` in the root cluster; deleted
//! with everything in them; resumed after a restart.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use modelplane_apiserver::Clusters;
use modelplane_apiserver::{Config as ServeConfig, serve_clusters};
use serde_json::json;

struct Running {
    clusters: Arc<Clusters>,
    root: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

async fn start(dir: &std::path::Path) -> Running {
    let (ready, ready_rx) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = ServeConfig {
        data_dir: modelplane_apiserver::DataDir::lock(dir).expect("lock the data dir"),
        listen: "127.0.0.1:0".parse().expect("addr"),
        max_connections: modelplane_apiserver::MAX_CONNECTIONS,
    };
    let task = tokio::spawn(serve_clusters(
        config,
        move |_, path, clusters| drop(ready.send((path.to_path_buf(), clusters.clone()))),
        async move {
            let _ = stopped.await;
        },
    ));
    let (path, clusters) = ready_rx.await.expect("ready");
    Running {
        clusters,
        root: std::fs::read_to_string(path).expect("kubeconfig"),
        stop: Some(stop),
        task,
    }
}

async fn client(kubeconfig: &str) -> Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

fn cm(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({ "metadata": { "name": name }, "data": { "k": value } }))
        .expect("cm")
}

fn logical_cluster() -> ApiResource {
    ApiResource {
        group: "tenancy.modelplane.ai".into(),
        version: "v1alpha1".into(),
        api_version: "tenancy.modelplane.ai/v1alpha1".into(),
        kind: "LogicalCluster".into(),
        plural: "logicalclusters".into(),
    }
}

fn crd(group: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("widgets.{group}") },
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }]
        }
    })
}

async fn names(api: &Api<ConfigMap>) -> Vec<String> {
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn each_logical_cluster_sees_only_its_own_objects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = start(dir.path()).await;
    running.clusters.create("a").expect("create a");
    // The other one the way a user makes it: a LogicalCluster in the root.
    let root = client(&running.root).await;
    let lcs: Api<DynamicObject> = Api::all_with(root.clone(), &logical_cluster());
    let b: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "tenancy.modelplane.ai/v1alpha1", "kind": "LogicalCluster",
        "metadata": { "name": "b" },
    }))
    .expect("lc");
    lcs.create(&PostParams::default(), &b)
        .await
        .expect("create b");

    let a = client(&running.clusters.kubeconfig("a").expect("kubeconfig a")).await;
    let b = client(&running.clusters.kubeconfig("b").expect("kubeconfig b")).await;
    let (in_root, in_a, in_b): (Api<ConfigMap>, Api<ConfigMap>, Api<ConfigMap>) = (
        Api::default_namespaced(root.clone()),
        Api::default_namespaced(a.clone()),
        Api::default_namespaced(b.clone()),
    );
    // Each has its own built-in namespaces.
    for client in [&a, &b] {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let mut found: Vec<String> = namespaces
            .list(&ListParams::default())
            .await
            .expect("namespaces")
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        found.sort();
        assert_eq!(found, ["default", "kube-public", "kube-system"]);
    }

    // A watch in a sees a's change only.
    let mut watch_a = watcher(in_a.clone(), watcher::Config::default()).boxed();
    in_a.create(&PostParams::default(), &cm("same-name", "a"))
        .await
        .expect("create in a");
    in_b.create(&PostParams::default(), &cm("same-name", "b"))
        .await
        .expect("create in b: the same name in another cluster");
    in_b.create(&PostParams::default(), &cm("only-b", "b"))
        .await
        .expect("create in b");
    in_root
        .create(&PostParams::default(), &cm("only-root", "root"))
        .await
        .expect("create in root");
    assert_eq!(names(&in_a).await, ["same-name"]);
    assert_eq!(names(&in_b).await, ["only-b", "same-name"]);
    assert_eq!(names(&in_root).await, ["only-root"]);
    assert_eq!(
        in_a.get("same-name")
            .await
            .expect("get")
            .data
            .expect("data")["k"],
        "a"
    );
    let mut seen = Vec::new();
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(500), watch_a.next()).await
    {
        if let Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) = event {
            seen.push(cm.name_any());
        }
    }
    assert_eq!(seen, ["same-name"], "a's watch saw only a's object");

    // A CRD installed in a is served by a alone.
    let crds: Api<DynamicObject> = Api::all_with(
        a.clone(),
        &ApiResource {
            group: "apiextensions.k8s.io".into(),
            version: "v1".into(),
            api_version: "apiextensions.k8s.io/v1".into(),
            kind: "CustomResourceDefinition".into(),
            plural: "customresourcedefinitions".into(),
        },
    );
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd("example.com")).expect("crd"),
    )
    .await
    .expect("crd in a");
    let served = |client: Client| async move {
        kube::Discovery::new(client)
            .run_aggregated()
            .await
            .expect("discovery")
            .groups()
            .any(|g| g.name() == "example.com")
    };
    assert!(served(a.clone()).await, "a serves its CRD");
    assert!(!served(b.clone()).await, "b does not");
    assert!(!served(root.clone()).await, "nor does the root");

    // Deleting b deletes everything in it; a is untouched.
    lcs.delete("b", &DeleteParams::default())
        .await
        .expect("delete b");
    let gone = async {
        loop {
            match in_b.list(&ListParams::default()).await {
                Err(kube::Error::Api(e)) if e.code == 404 => return,
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), gone)
        .await
        .expect("b answers 404 once deleted");
    let store = running.clusters.root().store().shared().clone();
    let left = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (_, left) = store.list("~b/", None, None).expect("list");
            if left.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(left.is_ok(), "every object of b is deleted from the store");
    assert_eq!(names(&in_a).await, ["same-name"]);
    running.stop().await;
}

#[tokio::test]
async fn logical_clusters_survive_a_restart_and_deleted_ones_leave_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = start(dir.path()).await;
    for name in ["kept", "dropped"] {
        running.clusters.create(name).expect("create");
        let api: Api<ConfigMap> =
            Api::default_namespaced(client(&running.clusters.kubeconfig(name).expect("kc")).await);
        api.create(&PostParams::default(), &cm("x", name))
            .await
            .expect("create cm");
    }
    // A deletion cut short: the LogicalCluster is gone, its objects are not.
    let root_store = running.clusters.root().store().clone();
    root_store
        .write(modelplane_apiserver::Write::Delete {
            key: "/tenancy.modelplane.ai/logicalclusters/dropped".into(),
            expected: None,
        })
        .expect("delete the object only");
    let shared = root_store.shared().clone();
    running.stop().await;

    let running = start(dir.path()).await;
    let kept: Api<ConfigMap> =
        Api::default_namespaced(client(&running.clusters.kubeconfig("kept").expect("kc")).await);
    assert_eq!(
        kept.get("x")
            .await
            .expect("kept's object")
            .data
            .expect("data")["k"],
        "kept"
    );
    let (_, left) = running
        .clusters
        .root()
        .store()
        .shared()
        .list("~dropped/", None, None)
        .expect("list");
    assert!(left.is_empty(), "the dropped cluster's objects are gone");
    drop(shared);
    running.stop().await;
}

#[tokio::test]
async fn an_unknown_logical_cluster_is_a_404_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = start(dir.path()).await;
    let root = client(&running.root).await;
    let request = http::Request::get("/clusters/nowhere/api/v1/namespaces")
        .body(Vec::new())
        .expect("request");
    match root.request_text(request).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 404);
            assert!(e.message.contains("nowhere"), "{}", e.message);
        }
        other => panic!("expected a 404, got {other:?}"),
    }
    assert!(matches!(
        running.clusters.create("Not_A_Label"),
        Err(modelplane_apiserver::CreateError::InvalidName { .. })
    ));
    running.stop().await;
}
