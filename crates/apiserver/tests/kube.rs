//! kube-rs 5 against the server in-process (`Client::new(router)`): every
//! `Api` verb and patch type, the status subresource, a `watcher` that
//! survives an in-stream 410 by re-listing, the `finalizer()` helper end
//! to end, a `Controller` with `.owns()`, and the events recorder.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource as _, ResourceExt};
use modelplane_apiserver::Store;
use modelplane_apiserver::{ApiServer, router};
use serde_json::json;

fn client() -> (tempfile::TempDir, Arc<ApiServer>, Client) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::new(Store::open(&dir.path().join("state.db")).expect("store"));
    let service = tower::ServiceBuilder::new()
        .map_request(|r: http::Request<kube::client::Body>| r.map(axum::body::Body::new))
        .service(router(server.clone()));
    (dir, server, Client::new(service, "default"))
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({ "metadata": { "name": name }, "data": { "k": "v" } }))
        .expect("cm")
}

#[tokio::test]
async fn every_api_verb_and_patch_type() {
    let (_dir, _server, client) = client();
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let created = api
        .create(&PostParams::default(), &cm("a"))
        .await
        .expect("create");
    assert!(created.metadata.uid.is_some());
    let got = api.get("a").await.expect("get");
    assert_eq!(got.resource_version(), created.resource_version());

    let mut replaced = got.clone();
    replaced
        .data
        .get_or_insert_default()
        .insert("k".into(), "w".into());
    let replaced = api
        .replace("a", &PostParams::default(), &replaced)
        .await
        .expect("replace");
    let stale = api.replace("a", &PostParams::default(), &got).await;
    assert!(matches!(stale, Err(kube::Error::Api(e)) if e.code == 409));

    let merged = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "x": "1" } } })),
        )
        .await
        .expect("merge");
    assert_eq!(merged.labels().get("x").map(String::as_str), Some("1"));
    let json_patch: json_patch::Patch =
        serde_json::from_value(json!([{ "op": "add", "path": "/data/j", "value": "2" }]))
            .expect("patch");
    api.patch("a", &PatchParams::default(), &Patch::<()>::Json(json_patch))
        .await
        .expect("json patch");
    let strategic = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({ "data": { "j": null } })),
        )
        .await
        .expect("strategic");
    assert!(!strategic.data.unwrap_or_default().contains_key("j"));
    let applied = api
        .patch("b", &PatchParams::apply("tester"), &Patch::Apply(json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "b" }, "data": { "s": "1" } })))
        .await
        .expect("server-side apply creates");
    assert_eq!(
        applied.managed_fields()[0].manager.as_deref(),
        Some("tester")
    );

    let list = api
        .list(&ListParams::default().labels("x=1"))
        .await
        .expect("list");
    assert_eq!(list.items.len(), 1);
    assert!(replaced.resource_version() < list.metadata.resource_version);
    api.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(matches!(api.get("a").await, Err(kube::Error::Api(e)) if e.code == 404));
}

/// One run of the paged-reflector check: 2,000 objects, listed 100 at a
/// time while every page after the first changes one object and deletes
/// another on the pages already read; the reflector must end with exactly
/// the server's objects.
async fn paged_reflector_run(run: usize) {
    use kube::runtime::reflector;
    use tower::ServiceExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::new(Store::open(&dir.path().join("state.db")).expect("store"));
    let writes: Vec<modelplane_apiserver::Write> = (0..2000)
        .map(|i| modelplane_apiserver::Write::Create {
            key: format!("/core/configmaps/default/cm-{i:04}"),
            value: json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": format!("cm-{i:04}"), "namespace": "default",
                              "uid": format!("uid-{i}"), "creationTimestamp": "2026-12-01T00:00:00Z" },
                "data": { "k": "v" } })
            .to_string()
            .into_bytes(),
        })
        .collect();
    for written in server.store().write_all(writes) {
        written.expect("create");
    }
    let router = router(server.clone());
    let pages = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let service = {
        let pages = pages.clone();
        tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let (router, pages) = (router.clone(), pages.clone());
            async move {
                let request = request.map(axum::body::Body::new);
                let later_page = request.method() == http::Method::GET
                    && request
                        .uri()
                        .query()
                        .is_some_and(|q| q.contains("continue="));
                if later_page {
                    // Between two pages: a change and a deletion on pages read.
                    let page = pages.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    let changed = format!("cm-{:04}", (page * 100 + run * 7) % (page * 100));
                    let deleted = format!("cm-{:04}", page * 100 - 1 - run % 50);
                    let base = "/api/v1/namespaces/default/configmaps";
                    let patch = http::Request::patch(format!("{base}/{changed}"))
                        .header("content-type", "application/merge-patch+json")
                        .body(axum::body::Body::from(
                            json!({ "data": { "k": format!("page {page}") } }).to_string(),
                        ))
                        .expect("patch");
                    let delete = http::Request::delete(format!("{base}/{deleted}"))
                        .body(axum::body::Body::empty())
                        .expect("delete");
                    let _ = router.clone().oneshot(patch).await;
                    let _ = router.clone().oneshot(delete).await;
                }
                router.oneshot(request).await
            }
        })
    };
    let client = Client::new(service, "default");
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api.clone(), watcher::Config::default().page_size(100)),
    );
    let driven = tokio::spawn(stream.for_each(|_| futures_util::future::ready(())));
    reader.wait_until_ready().await.expect("synced");
    assert_eq!(
        pages.load(std::sync::atomic::Ordering::SeqCst),
        19,
        "run {run}: 2,000 objects in pages of 100"
    );
    let state = |objects: Vec<Arc<ConfigMap>>| -> BTreeMap<String, (String, String)> {
        objects
            .iter()
            .map(|o| {
                (
                    o.name_any(),
                    (
                        o.resource_version().unwrap_or_default(),
                        serde_json::to_string(&o.data).unwrap_or_default(),
                    ),
                )
            })
            .collect()
    };
    let truth: Vec<Arc<ConfigMap>> = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .map(Arc::new)
        .collect();
    let truth = state(truth);
    assert_eq!(truth.len(), 2000 - 19, "run {run}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while state(reader.state()) != truth && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = state(reader.state());
    let differing: std::collections::BTreeSet<&String> = truth
        .keys()
        .chain(seen.keys())
        .filter(|name| truth.get(*name) != seen.get(*name))
        .collect();
    assert!(
        differing.is_empty(),
        "run {run}: the reflector differs on {differing:?}"
    );
    driven.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paged_reflector_ends_with_the_servers_state_while_earlier_pages_change() {
    for run in 0..20 {
        paged_reflector_run(run).await;
    }
}

/// The count `/metrics` shows for `series` (0 when never counted).
fn counted(server: &ApiServer, series: &str) -> u64 {
    server
        .metrics()
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_watcher_that_falls_behind_compaction_gets_410_and_lists_again() {
    const EXPIRED: &str = r#"apiserver_watch_events_total{type="ERROR",resource="configmaps"}"#;
    const LISTS: &str =
        r#"apiserver_request_total{verb="LIST",resource="configmaps",subresource="",code="200"}"#;
    let (_dir, server, client) = client();
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &cm("first"))
        .await
        .expect("create");
    // After its list, the watcher watches from the list's version: when it
    // is next polled, which is after the compaction below.
    let mut events = watcher(api.clone(), watcher::Config::default().timeout(1))
        .applied_objects()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("in time");
    assert_eq!(first.expect("event").expect("object").name_any(), "first");
    assert_eq!(counted(&server, LISTS), 1, "the watcher's first list");
    // The store moves on where this watcher does not look, and is compacted
    // past everything it saw: the version it watches from is too old.
    let elsewhere: Api<ConfigMap> = Api::namespaced(client, "kube-public");
    for name in ["a", "b", "c"] {
        elsewhere
            .create(&PostParams::default(), &cm(name))
            .await
            .expect("create elsewhere");
    }
    let now = server.store().revision().expect("revision");
    server.store().compact(now).expect("compact");
    let watching = tokio::spawn(async move {
        let mut seen = Vec::new();
        while !seen.contains(&"second".to_string()) {
            match events.next().await {
                Some(Ok(object)) => seen.push(object.name_any()),
                Some(Err(_)) => {} // the 410, after which the watcher lists again
                None => break,
            }
        }
        seen
    });
    // What the server sent: the 410 in the resumed watch's stream, then the
    // watcher's second list.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while counted(&server, LISTS) < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counted(&server, EXPIRED), 1, "one 410 sent");
    assert_eq!(counted(&server, LISTS), 2, "then the watcher listed again");
    api.create(&PostParams::default(), &cm("second"))
        .await
        .expect("create");
    let seen = tokio::time::timeout(Duration::from_secs(10), watching)
        .await
        .expect("the relisted watcher sees the next change")
        .expect("joins");
    assert_eq!(seen.last().map(String::as_str), Some("second"));
}

#[tokio::test]
async fn the_finalizer_helper_adds_runs_cleanup_and_removes_its_finalizer() {
    let (_dir, _server, client) = client();
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &cm("guarded"))
        .await
        .expect("create");
    let reconcile = |api: Api<ConfigMap>| async move {
        let object = Arc::new(api.get("guarded").await.expect("get"));
        finalizer(&api, "example.com/cleanup", object, |event| async move {
            Ok::<_, std::convert::Infallible>(match event {
                FinalizerEvent::Apply(_) => Action::requeue(Duration::from_secs(60)),
                FinalizerEvent::Cleanup(_) => Action::await_change(),
            })
        })
        .await
    };
    // First pass: the helper adds its finalizer (JSON patch with `test` null).
    reconcile(api.clone()).await.expect("adds the finalizer");
    assert_eq!(
        api.get("guarded").await.expect("get").finalizers(),
        ["example.com/cleanup"]
    );
    assert_eq!(
        reconcile(api.clone()).await.expect("apply"),
        Action::requeue(Duration::from_secs(60))
    );
    api.delete("guarded", &DeleteParams::default())
        .await
        .expect("delete marks it");
    assert_eq!(
        reconcile(api.clone()).await.expect("cleanup"),
        Action::await_change()
    );
    assert!(matches!(api.get("guarded").await, Err(kube::Error::Api(e)) if e.code == 404));
}

mod controller {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::apps::v1::Deployment;
    use kube::runtime::Controller;

    struct Context {
        client: Client,
        reconciles: AtomicUsize,
    }

    /// Keeps a child ConfigMap for each Deployment and writes its status
    /// every time, as controllers do; unchanged status must be a no-op.
    async fn reconcile(parent: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
        ctx.reconciles.fetch_add(1, Ordering::SeqCst);
        let ns = parent.namespace().unwrap_or_default();
        let owner = parent.controller_owner_ref(&()).expect("owner reference");
        let child: ConfigMap = serde_json::from_value(json!({
            "metadata": { "name": format!("{}-child", parent.name_any()), "ownerReferences": [owner] },
            "data": { "replicas": parent.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0).to_string() },
        }))
        .expect("child");
        Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
            .patch(
                &child.name_any(),
                // Forced, as controllers apply what they own: an edit by
                // someone else took the field over, and Kubernetes answers
                // an unforced apply of it with a 409.
                &PatchParams::apply("test-controller").force(),
                &Patch::Apply(child),
            )
            .await?;
        let status = json!({ "status": { "observedGeneration": parent.metadata.generation } });
        Api::<Deployment>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &parent.name_any(),
                &PatchParams::default(),
                &Patch::Merge(status),
            )
            .await?;
        Ok(Action::await_change())
    }

    fn error_policy(_: Arc<Deployment>, _: &kube::Error, _: Arc<Context>) -> Action {
        Action::requeue(Duration::from_millis(100))
    }

    #[tokio::test]
    async fn a_controller_reconciles_on_child_changes_and_settles() {
        let (_dir, _server, client) = client();
        let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
        let configmaps: Api<ConfigMap> = Api::default_namespaced(client.clone());
        let ctx = Arc::new(Context {
            client: client.clone(),
            reconciles: AtomicUsize::new(0),
        });
        let run = Controller::new(deployments.clone(), watcher::Config::default())
            .owns(configmaps.clone(), watcher::Config::default())
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|_| async {});
        let handle = tokio::spawn(run);

        let parent: Deployment = serde_json::from_value(json!({
            "metadata": { "name": "web" },
            "spec": { "replicas": 2, "selector": { "matchLabels": { "app": "web" } },
                      "template": { "metadata": { "labels": { "app": "web" } }, "spec": { "containers": [{ "name": "c", "image": "nginx" }] } } },
        }))
        .expect("deployment");
        deployments
            .create(&PostParams::default(), &parent)
            .await
            .expect("create");
        let child = wait_for(|| async { configmaps.get("web-child").await.ok() }).await;
        assert_eq!(
            child
                .data
                .unwrap_or_default()
                .get("replicas")
                .map(String::as_str),
            Some("2")
        );

        // Settled: repeated status and child writes change nothing, so no reconcile follows.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let settled = ctx.reconciles.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(
            ctx.reconciles.load(Ordering::SeqCst),
            settled,
            "the controller loops on no-op writes"
        );

        // Someone edits the child: the owner is reconciled and the child restored.
        configmaps
            .patch(
                "web-child",
                &PatchParams::default(),
                &Patch::Merge(json!({ "data": { "replicas": "9" } })),
            )
            .await
            .expect("edit child");
        wait_for(|| async {
            let c = configmaps.get("web-child").await.ok()?;
            (c.data
                .unwrap_or_default()
                .get("replicas")
                .map(String::as_str)
                == Some("2"))
            .then_some(())
        })
        .await;
        assert!(ctx.reconciles.load(Ordering::SeqCst) > settled);
        let status = deployments.get_status("web").await.expect("status");
        assert_eq!(status.status.and_then(|s| s.observed_generation), Some(1));
        handle.abort();
    }

    async fn wait_for<T, F, Fut>(mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        for _ in 0..200 {
            if let Some(v) = probe().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("condition not reached in 5 s");
    }
}

#[tokio::test]
async fn the_events_recorder_publishes_and_counts_repeats() {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};

    let (_dir, _server, client) = client();
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let object = api
        .create(&PostParams::default(), &cm("noted"))
        .await
        .expect("create");
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "modelplane-test".into(),
            instance: None,
        },
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "Reconciled".into(),
        note: Some("all good".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = object.object_ref(&());
    recorder
        .publish(&event, &reference)
        .await
        .expect("first publish creates an Event");
    recorder
        .publish(&event, &reference)
        .await
        .expect("a repeat patches its series");
    let events: Api<K8sEvent> = Api::default_namespaced(client);
    let list = events
        .list(&ListParams::default())
        .await
        .expect("list events");
    assert_eq!(list.items.len(), 1, "a repeat is one Event with a series");
    let recorded = &list.items[0];
    assert_eq!(recorded.reason.as_deref(), Some("Reconciled"));
    assert_eq!(
        recorded.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("noted")
    );
    assert_eq!(recorded.series.as_ref().map(|s| s.count), Some(2));
}

#[tokio::test]
async fn a_streaming_list_watcher_gets_the_initial_state_then_changes() {
    let (_dir, _server, client) = client();
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for name in ["one", "two"] {
        api.create(&PostParams::default(), &cm(name))
            .await
            .expect("create");
    }
    let config = watcher::Config::default().streaming_lists().timeout(2);
    let mut events = watcher(api.clone(), config).applied_objects().boxed();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let next = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("in time");
        seen.push(next.expect("event").expect("object").name_any());
    }
    seen.sort();
    assert_eq!(seen, ["one", "two"]);
    api.create(&PostParams::default(), &cm("three"))
        .await
        .expect("create");
    let next = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("in time");
    assert_eq!(next.expect("event").expect("object").name_any(), "three");
}

#[tokio::test]
async fn over_tcp_and_tls_with_the_kubeconfig_it_writes() {
    use modelplane_apiserver::{Config as ServeConfig, serve};
    let dir = tempfile::tempdir().expect("tempdir");
    let (ready, path) = tokio::sync::oneshot::channel();
    let config = ServeConfig {
        data_dir: modelplane_apiserver::DataDir::lock(dir.path()).expect("lock the data dir"),
        listen: "127.0.0.1:0".parse().expect("addr"),
        max_connections: modelplane_apiserver::MAX_CONNECTIONS,
    };
    let server = tokio::spawn(serve(
        config,
        move |_, p| drop(ready.send(p.to_path_buf())),
        std::future::pending(),
    ));
    let kubeconfig =
        kube::config::Kubeconfig::read_from(path.await.expect("ready")).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &Default::default())
        .await
        .expect("config");
    let client = Client::try_from(config).expect("client");
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &cm("tcp"))
        .await
        .expect("create over TLS with the token");
    assert_eq!(api.get("tcp").await.expect("get").name_any(), "tcp");

    // The same server with another token: 401.
    let mut forged = kubeconfig;
    if let Some(user) = forged
        .auth_infos
        .first_mut()
        .and_then(|a| a.auth_info.as_mut())
    {
        user.token = Some("not-the-token".to_string().into());
    }
    let config = kube::Config::from_custom_kubeconfig(forged, &Default::default())
        .await
        .expect("config");
    let api: Api<ConfigMap> = Api::default_namespaced(Client::try_from(config).expect("client"));
    assert!(matches!(api.get("tcp").await, Err(kube::Error::Api(e)) if e.code == 401));
    server.abort();
}

/// `modelplane apiserver` over TCP with at most `max_connections`, stopped
/// by the sender; its kubeconfig's path.
async fn serving(
    dir: &std::path::Path,
    max_connections: usize,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
    kube::config::Kubeconfig,
) {
    use modelplane_apiserver::{Config as ServeConfig, serve};
    let (ready, path) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = ServeConfig {
        data_dir: modelplane_apiserver::DataDir::lock(dir).expect("lock the data dir"),
        listen: "127.0.0.1:0".parse().expect("addr"),
        max_connections,
    };
    let server = tokio::spawn(serve(
        config,
        move |_, p| drop(ready.send(p.to_path_buf())),
        async move {
            let _ = stopped.await;
        },
    ));
    let kubeconfig =
        kube::config::Kubeconfig::read_from(path.await.expect("ready")).expect("kubeconfig");
    (stop, server, kubeconfig)
}

/// A client with its own connections.
async fn tcp_client(kubeconfig: &kube::config::Kubeconfig) -> Client {
    let config = kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_its_connection_cap_a_client_waits_for_one_to_close() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stop, server, kubeconfig) = serving(dir.path(), 1).await;
    let watching: Api<ConfigMap> = Api::default_namespaced(tcp_client(&kubeconfig).await);
    let watch = watching
        .watch(&kube::api::WatchParams::default(), "0")
        .await
        .expect("a watch holds the one connection");
    let other: Api<ConfigMap> = Api::default_namespaced(tcp_client(&kubeconfig).await);
    let waited = tokio::time::timeout(
        Duration::from_millis(500),
        other.list(&ListParams::default()),
    )
    .await;
    assert!(
        waited.is_err(),
        "the second client waits while the watch holds the slot"
    );
    drop(watch);
    drop(watching);
    let listed = tokio::time::timeout(Duration::from_secs(10), other.list(&ListParams::default()))
        .await
        .expect("served once the watch's connection closed");
    assert!(listed.expect("list").items.is_empty());
    let _ = stop.send(());
    let _ = server.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_ends_watches_at_once_and_the_server_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stop, server, kubeconfig) = serving(dir.path(), 16).await;
    let api: Api<ConfigMap> = Api::default_namespaced(tcp_client(&kubeconfig).await);
    let mut watch = api
        .watch(&kube::api::WatchParams::default(), "0")
        .await
        .expect("watch")
        .boxed();
    let started = std::time::Instant::now();
    let _ = stop.send(());
    // The stream ends (cleanly or cut), well inside the drain period.
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = watch.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the watch ended when the server stopped");
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server returns without waiting out its drain")
        .expect("joins")
        .expect("serves");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn aggregated_and_legacy_discovery_find_the_same_kinds() {
    let (_dir, _server, client) = client();
    let aggregated = kube::Discovery::new(client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    let legacy = kube::Discovery::new(client)
        .run()
        .await
        .expect("legacy discovery");
    for discovery in [&aggregated, &legacy] {
        let (cm, caps) = discovery
            .resolve_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "ConfigMap"))
            .expect("ConfigMap discovered");
        assert_eq!(cm.plural, "configmaps");
        assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
        assert!(discovery.has_group("apps") && discovery.has_group("coordination.k8s.io"));
    }
    let groups = |d: &kube::Discovery| {
        let mut names: Vec<String> = d.groups().map(|g| g.name().to_string()).collect();
        names.sort();
        names
    };
    assert_eq!(groups(&aggregated), groups(&legacy));
}

#[tokio::test]
async fn metadata_only_reads_and_watches() {
    let (_dir, _server, client) = client();
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &cm("meta"))
        .await
        .expect("create");
    let got = api.get_metadata("meta").await.expect("get_metadata");
    assert_eq!(got.name_any(), "meta");
    assert_eq!(
        got.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    let listed = api
        .list_metadata(&ListParams::default())
        .await
        .expect("list_metadata");
    assert_eq!(listed.items.len(), 1);
    assert!(listed.metadata.resource_version.is_some());

    let metadata: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::default_namespaced(api.clone().into_client());
    let mut stream = watcher(metadata, watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("in time")
        .expect("event")
        .expect("object");
    assert_eq!(first.name_any(), "meta");
    api.create(&PostParams::default(), &cm("meta2"))
        .await
        .expect("create");
    let second = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("in time")
        .expect("event")
        .expect("object");
    assert_eq!(second.name_any(), "meta2");
}

#[tokio::test]
async fn status_and_scale_subresources_through_their_api_calls() {
    use k8s_openapi::api::apps::v1::Deployment;
    let (_dir, _server, client) = client();
    let api: Api<Deployment> = Api::default_namespaced(client);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "web" } },
                  "template": { "metadata": { "labels": { "app": "web" } },
                                "spec": { "containers": [{ "name": "c", "image": "nginx" }] } } },
    }))
    .expect("deployment");
    api.create(&PostParams::default(), &deployment)
        .await
        .expect("create");

    let replicas = || async {
        api.get("web")
            .await
            .expect("get")
            .spec
            .and_then(|s| s.replicas)
    };
    // Scale: read, patch, replace; the parent's spec.replicas follows.
    let scale = api.get_scale("web").await.expect("get_scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(1));
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "replicas": 3 } })),
    )
    .await
    .expect("patch_scale");
    assert_eq!(replicas().await, Some(3));
    let mut scale = api.get_scale("web").await.expect("get_scale");
    scale.spec.get_or_insert_default().replicas = Some(5);
    api.replace_scale("web", &PostParams::default(), &scale)
        .await
        .expect("replace_scale");
    assert_eq!(replicas().await, Some(5));

    // Status: replace_status writes only the status; the spec stays.
    let mut current = api.get_status("web").await.expect("get_status");
    current.status = Some(serde_json::from_value(json!({ "readyReplicas": 2 })).expect("status"));
    current.spec.get_or_insert_default().replicas = Some(9);
    let written = api
        .replace_status("web", &PostParams::default(), &current)
        .await
        .expect("replace_status");
    assert_eq!(written.status.and_then(|s| s.ready_replicas), Some(2));
    assert_eq!(
        written.spec.and_then(|s| s.replicas),
        Some(5),
        "status writes ignore the spec"
    );
}

#[tokio::test]
async fn apply_owns_fields_conflicts_name_the_owner_and_status_and_scale_take_applies() {
    use k8s_openapi::api::apps::v1::Deployment;
    let (_dir, _server, client) = client();
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let applied = |value: &str| -> ConfigMap {
        serde_json::from_value(json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "owned" }, "data": { "k": value } }))
            .expect("cm")
    };
    api.patch(
        "owned",
        &PatchParams::apply("alice"),
        &Patch::Apply(applied("1")),
    )
    .await
    .expect("create by apply");
    // An update takes the field over; an unforced apply of it is a 409
    // naming the manager and the field.
    api.patch(
        "owned",
        &PatchParams {
            field_manager: Some("editor".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({ "data": { "k": "2" } })),
    )
    .await
    .expect("edit");
    let conflict = api
        .patch(
            "owned",
            &PatchParams::apply("alice"),
            &Patch::Apply(applied("1")),
        )
        .await;
    match conflict {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 409);
            assert!(
                e.message.contains("conflict with \"editor\"") && e.message.contains(".data.k"),
                "{}",
                e.message
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let forced = api
        .patch(
            "owned",
            &PatchParams::apply("alice").force(),
            &Patch::Apply(applied("1")),
        )
        .await
        .expect("forced");
    assert_eq!(
        forced.data.unwrap_or_default().get("k").map(String::as_str),
        Some("1")
    );

    // Server-side apply on /status and /scale takes effect.
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let parent: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "web" } },
                  "template": { "metadata": { "labels": { "app": "web" } }, "spec": { "containers": [{ "name": "c", "image": "nginx" }] } } },
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &parent)
        .await
        .expect("create");
    let status = json!({ "apiVersion": "apps/v1", "kind": "Deployment", "status": { "observedGeneration": 1, "readyReplicas": 1 } });
    deployments
        .patch_status(
            "web",
            &PatchParams::apply("ctl").force(),
            &Patch::Apply(status),
        )
        .await
        .expect("apply status");
    let got = deployments.get_status("web").await.expect("status");
    assert_eq!(got.status.and_then(|s| s.ready_replicas), Some(1));
    let scale =
        json!({ "apiVersion": "autoscaling/v1", "kind": "Scale", "spec": { "replicas": 3 } });
    deployments
        .patch_scale(
            "web",
            &PatchParams::apply("ctl").force(),
            &Patch::Apply(scale),
        )
        .await
        .expect("apply scale");
    let got = deployments.get("web").await.expect("get");
    assert_eq!(got.spec.and_then(|s| s.replicas), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_unconditional_patches_all_succeed_and_all_land() {
    let (_dir, _server, client) = client();
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &cm("shared"))
        .await
        .expect("create");
    let mut writers = Vec::new();
    for i in 0..64 {
        let api = api.clone();
        writers.push(tokio::spawn(async move {
            api.patch(
                "shared",
                &PatchParams::default(),
                &Patch::Merge(json!({ "data": { format!("k{i}"): i.to_string() } })),
            )
            .await
        }));
    }
    for writer in writers {
        writer
            .await
            .expect("task")
            .expect("an unconditional patch never loses a race");
    }
    let data = api
        .get("shared")
        .await
        .expect("get")
        .data
        .unwrap_or_default();
    for i in 0..64 {
        assert_eq!(
            data.get(&format!("k{i}")).map(String::as_str),
            Some(i.to_string().as_str()),
            "k{i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_applies_that_create_the_same_object_all_succeed() {
    let (_dir, _server, client) = client();
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut writers = Vec::new();
    for i in 0..16 {
        let api = api.clone();
        writers.push(tokio::spawn(async move {
            let object = json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "born-once" }, "data": { "k": "v" } });
            api.patch(
                "born-once",
                &PatchParams::apply(&format!("writer-{i}")).force(),
                &Patch::Apply(object),
            )
            .await
        }));
    }
    for writer in writers {
        writer
            .await
            .expect("task")
            .expect("an apply that finds the object created meanwhile updates it");
    }
    // And a POST of an existing object is still AlreadyExists.
    let again = api.create(&PostParams::default(), &cm("born-once")).await;
    assert!(
        matches!(again, Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists")
    );
}
