//! The REST surface in-process (the router as a tower service): CRUD,
//! selectors and paging, conflicts and no-op writes, merge patch, the status
//! subresource, and watches that resume, filter and expire.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use modelplane_apiserver::Store;
use modelplane_apiserver::{ApiServer, router};
use serde_json::{Value, json};
use tower::ServiceExt;

struct Fixture {
    _dir: tempfile::TempDir,
    server: Arc<ApiServer>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("state.db")).expect("store");
        let server = ApiServer::new(store);
        for ns in ["ns", "other", "first", "ml"] {
            modelplane_apiserver::create_namespace(server.store(), ns).expect("namespace");
        }
        Fixture { _dir: dir, server }
    }

    async fn call(&self, method: Method, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
        let (status, _, body) = self.send(method, uri, body).await;
        (status, body)
    }

    /// Like [`Fixture::call`], with the response's `Warning` headers.
    async fn send(
        &self,
        method: Method,
        uri: &str,
        body: Option<Value>,
    ) -> (StatusCode, Vec<String>, Value) {
        let request = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(
                "content-type",
                if method == Method::PATCH {
                    "application/merge-patch+json"
                } else {
                    "application/json"
                },
            )
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .expect("request");
        let response = router(self.server.clone())
            .oneshot(request)
            .await
            .expect("response");
        let status = response.status();
        let warnings = response
            .headers()
            .get_all("warning")
            .iter()
            .map(|v| v.to_str().unwrap_or_default().to_string())
            .collect();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (
            status,
            warnings,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// A watch's events until the stream ends.
    async fn watch(&self, uri: &str) -> Vec<Value> {
        let request = Request::builder()
            .uri(uri)
            .body(Body::empty())
            .expect("request");
        let response = router(self.server.clone())
            .oneshot(request)
            .await
            .expect("response");
        assert_eq!(response.status(), StatusCode::OK);
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
            .collect()
    }
}

const CM: &str = "/api/v1/namespaces/ns/configmaps";

fn cm(name: &str, labels: Value) -> Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name, "labels": labels }, "data": { "k": "v" } })
}

fn rv(object: &Value) -> i64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .parse()
        .expect("number")
}

#[tokio::test]
async fn create_get_replace_delete_with_kubernetes_status_errors() {
    let f = Fixture::new();
    let (code, created) = f.call(Method::POST, CM, Some(cm("a", json!({})))).await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(created["metadata"]["namespace"], "ns");
    assert!(created["metadata"]["uid"].is_string());
    let (code, again) = f.call(Method::POST, CM, Some(cm("a", json!({})))).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert_eq!(again["reason"], "AlreadyExists");
    assert_eq!(again["message"], "configmaps \"a\" already exists");

    let (code, got) = f.call(Method::GET, &format!("{CM}/a"), None).await;
    assert_eq!((code, rv(&got)), (StatusCode::OK, rv(&created)));

    let mut changed = got.clone();
    changed["data"]["k"] = json!("w");
    let (code, replaced) = f
        .call(Method::PUT, &format!("{CM}/a"), Some(changed.clone()))
        .await;
    assert_eq!(code, StatusCode::OK);
    assert!(rv(&replaced) > rv(&got));
    let (code, stale) = f.call(Method::PUT, &format!("{CM}/a"), Some(changed)).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert!(
        stale["message"]
            .as_str()
            .expect("message")
            .contains("the object has been modified")
    );

    let (code, same) = f
        .call(Method::PUT, &format!("{CM}/a"), Some(replaced.clone()))
        .await;
    assert_eq!(
        (code, rv(&same)),
        (StatusCode::OK, rv(&replaced)),
        "a no-op write keeps the revision"
    );

    let (code, _) = f.call(Method::DELETE, &format!("{CM}/a"), None).await;
    assert_eq!(code, StatusCode::OK);
    let (code, gone) = f.call(Method::GET, &format!("{CM}/a"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(gone["kind"], "Status");
    assert_eq!(gone["details"]["name"], "a");

    let (code, invalid) = f
        .call(Method::POST, CM, Some(cm("Bad_Name", json!({}))))
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(invalid["reason"], "Invalid");
    let (code, _) = f
        .call(Method::GET, "/api/v1/namespaces/ns/widgets", None)
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, version) = f.call(Method::GET, "/version", None).await;
    assert_eq!(
        (code, version["major"].as_str()),
        (StatusCode::OK, Some("1"))
    );
}

#[tokio::test]
async fn lists_filter_by_selectors_and_page_with_continue() {
    let f = Fixture::new();
    for i in 0..5 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        f.call(
            Method::POST,
            CM,
            Some(cm(&format!("c{i}"), json!({ "tier": tier }))),
        )
        .await;
    }
    f.call(
        Method::POST,
        "/api/v1/namespaces/other/configmaps",
        Some(cm("x", json!({}))),
    )
    .await;

    let (_, all) = f.call(Method::GET, "/api/v1/configmaps", None).await;
    assert_eq!(all["kind"], "ConfigMapList");
    assert_eq!(all["items"].as_array().map(Vec::len), Some(6));
    let (_, even) = f
        .call(
            Method::GET,
            &format!("{CM}?labelSelector=tier%3Deven"),
            None,
        )
        .await;
    assert_eq!(even["items"].as_array().map(Vec::len), Some(3));
    let (_, named) = f
        .call(
            Method::GET,
            &format!("{CM}?fieldSelector=metadata.name%3Dc4"),
            None,
        )
        .await;
    assert_eq!(named["items"][0]["metadata"]["name"], "c4");

    let mut names = Vec::new();
    let mut uri = format!("{CM}?limit=2");
    loop {
        let (_, page) = f.call(Method::GET, &uri, None).await;
        names.extend(page["items"].as_array().expect("items").iter().map(|i| {
            i["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }));
        match page["metadata"]["continue"].as_str() {
            Some(token) => uri = format!("{CM}?limit=2&continue={token}"),
            None => break,
        }
    }
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4"]);
}

#[tokio::test]
async fn merge_patch_and_the_status_subresource() {
    let f = Fixture::new();
    let deployments = "/apis/apps/v1/namespaces/ns/deployments";
    let (_, created) = f
        .call(Method::POST, deployments, Some(json!({ "metadata": { "name": "d" }, "spec": { "replicas": 1 }, "status": { "replicas": 9 } })))
        .await;
    assert!(created.get("status").is_none(), "create drops status");
    let (code, patched) = f
        .call(
            Method::PATCH,
            &format!("{deployments}/d"),
            Some(json!({ "metadata": { "labels": { "a": "b" } }, "spec": { "replicas": 3 } })),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(patched["metadata"]["generation"], 2);
    assert_eq!(patched["metadata"]["labels"]["a"], "b");
    let (code, status) = f
        .call(
            Method::PATCH,
            &format!("{deployments}/d/status"),
            Some(json!({ "status": { "readyReplicas": 3 }, "spec": { "replicas": 100 } })),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(status["status"]["readyReplicas"], 3);
    assert_eq!(
        status["spec"]["replicas"], 3,
        "the status endpoint ignores spec"
    );
    assert_eq!(
        status["metadata"]["generation"], 2,
        "status writes never bump generation"
    );
    let (code, removed) = f
        .call(
            Method::PATCH,
            &format!("{deployments}/d"),
            Some(json!({ "metadata": { "labels": { "a": null } } })),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        removed["metadata"].get("labels").is_none(),
        "null removes, and empty maps are omitted"
    );
    let (code, _) = f
        .call(Method::PATCH, &format!("{CM}/none"), Some(json!({})))
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn watches_resume_filter_bookmark_and_expire() {
    let f = Fixture::new();
    // Revision 1 goes elsewhere, so `rv(a) - 1` is a real revision, not "0" (any).
    f.call(
        Method::POST,
        "/api/v1/namespaces/first/configmaps",
        Some(cm("first", json!({}))),
    )
    .await;
    let (_, a) = f
        .call(Method::POST, CM, Some(cm("a", json!({ "w": "yes" }))))
        .await;
    f.call(Method::POST, CM, Some(cm("b", json!({})))).await;
    f.call(
        Method::POST,
        "/api/v1/namespaces/other/configmaps",
        Some(cm("c", json!({ "w": "yes" }))),
    )
    .await;
    f.call(Method::DELETE, &format!("{CM}/a"), None).await;

    // From a revision: every later change under the prefix, in order.
    let events = f
        .watch(&format!(
            "{CM}?watch=true&resourceVersion={}&timeoutSeconds=1&allowWatchBookmarks=true",
            rv(&a)
        ))
        .await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["ADDED", "DELETED", "BOOKMARK"]);
    assert_eq!(events[0]["object"]["metadata"]["name"], "b");

    // With a label selector, across namespaces.
    let events = f
        .watch(&format!(
            "/api/v1/configmaps?watch=1&resourceVersion={}&timeoutSeconds=1&labelSelector=w",
            rv(&a) - 1
        ))
        .await;
    let names: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default(),
                e["object"]["metadata"]["name"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(names, [("ADDED", "a"), ("ADDED", "c"), ("DELETED", "a")]);

    // sendInitialEvents: the current state, then a bookmark marking its end.
    let events = f.watch(&format!("{CM}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")).await;
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[1]["type"], "BOOKMARK");
    assert_eq!(
        events[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    // Compacted history: an in-stream 410.
    let now = f.server.store().revision().expect("revision");
    f.server.store().compact(now).expect("compact");
    let events = f
        .watch(&format!("{CM}?watch=true&resourceVersion={}", rv(&a)))
        .await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
}

#[tokio::test]
async fn a_live_watch_sees_writes_made_after_it_started() {
    let f = Arc::new(Fixture::new());
    let watcher = {
        let f = f.clone();
        tokio::spawn(async move {
            f.watch(&format!(
                "{CM}?watch=true&resourceVersion=0&timeoutSeconds=2"
            ))
            .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    f.call(Method::POST, CM, Some(cm("live", json!({})))).await;
    let events = watcher.await.expect("watcher");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[0]["object"]["metadata"]["name"], "live");
}

#[tokio::test]
async fn bodies_other_than_json_or_protobuf_are_unsupported_media() {
    let f = Fixture::new();
    let send = |content_type: &str, body: Vec<u8>| {
        let request = Request::builder()
            .method(Method::POST)
            .uri(CM)
            .header("content-type", content_type)
            .body(Body::from(body))
            .expect("request");
        router(f.server.clone()).oneshot(request)
    };
    let response = send("application/cbor", vec![0xa0])
        .await
        .expect("response");
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // Protobuf is read; an envelope with nothing in it names what is wrong.
    let response = send(
        "application/vnd.kubernetes.protobuf",
        vec![0x6b, 0x38, 0x73, 0x00],
    )
    .await
    .expect("response");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = response.into_body().collect().await.expect("body");
    let status: Value = serde_json::from_slice(&body.to_bytes()).expect("a Status");
    assert_eq!(
        status["message"],
        "the protobuf envelope cannot be decoded: it names no kind"
    );
}

#[tokio::test]
async fn finalizers_hold_a_deletion_until_the_last_one_is_removed() {
    let f = Fixture::new();
    let mut object = cm("held", json!({}));
    object["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    f.call(Method::POST, CM, Some(object)).await;

    let (code, marked) = f.call(Method::DELETE, &format!("{CM}/held"), None).await;
    assert_eq!(code, StatusCode::OK);
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        marked["metadata"]["generation"], 2,
        "setting deletionTimestamp bumps generation"
    );
    let (code, again) = f.call(Method::DELETE, &format!("{CM}/held"), None).await;
    assert_eq!(
        (code, rv(&again)),
        (StatusCode::OK, rv(&marked)),
        "a second delete changes nothing"
    );

    let (code, refused) = f
        .call(
            Method::PATCH,
            &format!("{CM}/held"),
            Some(json!({ "metadata": { "finalizers": ["example.com/cleanup", "late"] } })),
        )
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");

    let (code, _) = f
        .call(
            Method::PATCH,
            &format!("{CM}/held"),
            Some(json!({ "metadata": { "finalizers": null } })),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = f.call(Method::GET, &format!("{CM}/held"), None).await;
    assert_eq!(
        code,
        StatusCode::NOT_FOUND,
        "removing the last finalizer completes the deletion"
    );

    let (code, conflict) = f
        .call(
            Method::DELETE,
            &format!("{CM}/held"),
            Some(json!({ "preconditions": { "resourceVersion": "1" } })),
        )
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{conflict}");
}

/// Polls until `uri` answers `code` (the garbage collector runs in the background).
async fn eventually(f: &Fixture, uri: &str, code: StatusCode) -> Value {
    for _ in 0..100 {
        let (got, body) = f.call(Method::GET, uri, None).await;
        if got == code {
            return body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("{uri} never answered {code}");
}

fn owned_by(name: &str, owner: &Value) -> Value {
    let mut object = cm(name, json!({}));
    object["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
    }]);
    object
}

#[tokio::test]
async fn deleting_an_owner_collects_its_dependents_in_the_background() {
    let f = Fixture::new();
    let (_, owner) = f.call(Method::POST, CM, Some(cm("owner", json!({})))).await;
    let (_, child) = f
        .call(Method::POST, CM, Some(owned_by("child", &owner)))
        .await;
    f.call(Method::POST, CM, Some(owned_by("grandchild", &child)))
        .await;
    let (_, other) = f
        .call(Method::POST, CM, Some(cm("other-owner", json!({}))))
        .await;
    let mut shared = owned_by("shared", &owner);
    shared["metadata"]["ownerReferences"]
        .as_array_mut()
        .expect("refs")
        .push(json!({ "apiVersion": "v1", "kind": "ConfigMap", "name": "other-owner", "uid": other["metadata"]["uid"] }));
    f.call(Method::POST, CM, Some(shared)).await;

    let (code, _) = f.call(Method::DELETE, &format!("{CM}/owner"), None).await;
    assert_eq!(code, StatusCode::OK);
    eventually(&f, &format!("{CM}/child"), StatusCode::NOT_FOUND).await;
    eventually(&f, &format!("{CM}/grandchild"), StatusCode::NOT_FOUND).await;
    // A dependent with a live owner stays, without the dead reference.
    let shared = eventually(&f, &format!("{CM}/shared"), StatusCode::OK).await;
    for _ in 0..100 {
        let (_, s) = f.call(Method::GET, &format!("{CM}/shared"), None).await;
        if s["metadata"]["ownerReferences"].as_array().map(Vec::len) == Some(1) {
            assert_eq!(s["metadata"]["ownerReferences"][0]["name"], "other-owner");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the dead owner's reference was never dropped: {shared}");
}

#[tokio::test]
async fn orphan_propagation_keeps_dependents_and_drops_the_reference() {
    let f = Fixture::new();
    let (_, owner) = f.call(Method::POST, CM, Some(cm("owner", json!({})))).await;
    f.call(Method::POST, CM, Some(owned_by("child", &owner)))
        .await;
    let (code, _) = f
        .call(
            Method::DELETE,
            &format!("{CM}/owner"),
            Some(json!({ "propagationPolicy": "Orphan" })),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    for _ in 0..100 {
        let (code, child) = f.call(Method::GET, &format!("{CM}/child"), None).await;
        assert_eq!(
            code,
            StatusCode::OK,
            "an orphaned dependent is never deleted"
        );
        if child["metadata"].get("ownerReferences").is_none() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the orphan kept its owner reference");
}

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const CLUSTERS: &str = "/apis/modelplane.ai/v1alpha1/inferenceclusters";

async fn install_crds(f: &Fixture) {
    for crd in modelplane_api::crds::all_crds() {
        let (code, created) = f.call(Method::POST, CRDS, Some(crd)).await;
        assert_eq!(code, StatusCode::CREATED, "{created}");
        let established = created["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        });
        assert!(established, "{created}");
    }
}

fn existing_cluster(stack: &str) -> Value {
    json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
        "metadata": { "name": "us-east" },
        "spec": { "stack": stack, "cluster": { "source": "Existing", "existing": { "secretRef": { "name": "kc" } } } },
    })
}

#[tokio::test]
async fn crds_serve_modelplane_kinds_with_admission_and_cel() {
    let f = Fixture::new();
    install_crds(&f).await;
    let (code, discovery) = f
        .call(Method::GET, "/apis/modelplane.ai/v1alpha1", None)
        .await;
    assert_eq!(code, StatusCode::OK);
    let names: Vec<&str> = discovery["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(
        names.contains(&"modeldeployments") && names.contains(&"modeldeployments/status"),
        "{names:?}"
    );

    let (code, created) = f
        .call(Method::POST, CLUSTERS, Some(existing_cluster("Dynamo")))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    assert_eq!(
        created["spec"]["cluster"]["existing"]["secretRef"]["key"], "kubeconfig",
        "defaults applied"
    );

    let mut bad = existing_cluster("Foo");
    bad["metadata"]["name"] = json!("bad");
    let (code, refused) = f.call(Method::POST, CLUSTERS, Some(bad)).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused["details"]["causes"][0]["field"], "spec.stack");

    let mut changed = created.clone();
    changed["spec"]["stack"] = json!("Standard");
    let (code, immutable) = f
        .call(Method::PUT, &format!("{CLUSTERS}/us-east"), Some(changed))
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        immutable["message"]
            .as_str()
            .expect("message")
            .contains("stack is immutable; create a new InferenceCluster to change stacks"),
        "{immutable}"
    );

    // Deleting the CRD deletes its objects, then stops serving the kind.
    let (code, _) = f
        .call(
            Method::DELETE,
            &format!("{CRDS}/inferenceclusters.modelplane.ai"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    eventually(&f, CLUSTERS, StatusCode::NOT_FOUND).await;
    for _ in 0..100 {
        if f.server
            .store()
            .list("/modelplane.ai/inferenceclusters/", None, None)
            .expect("list")
            .1
            .is_empty()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the InferenceClusters outlived their CRD");
}

#[tokio::test]
async fn crds_are_served_again_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    {
        let f = Fixture {
            _dir: tempfile::tempdir().expect("unused"),
            server: ApiServer::new(Store::open(&path).expect("store")),
        };
        install_crds(&f).await;
        let (code, _) = f
            .call(Method::POST, CLUSTERS, Some(existing_cluster("Standard")))
            .await;
        assert_eq!(code, StatusCode::CREATED);
    }
    let f = Fixture {
        _dir: dir,
        server: ApiServer::new(Store::open(&path).expect("reopen")),
    };
    let (code, got) = f
        .call(Method::GET, &format!("{CLUSTERS}/us-east"), None)
        .await;
    assert_eq!(code, StatusCode::OK, "{got}");
}

#[tokio::test]
async fn the_scale_subresource_reads_and_writes_the_parents_replicas() {
    let f = Fixture::new();
    install_crds(&f).await;
    let deployments = "/apis/modelplane.ai/v1alpha1/namespaces/ml/modeldeployments";
    let md = json!({
        "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
        "metadata": { "name": "m" },
        "spec": { "replicas": 1, "template": { "spec": { "engines": [{
            "name": "e",
            "members": [{ "role": "Standalone", "nodeSelector": { "devices": [{ "name": "gpu", "selectors": [{ "cel": "device.driver == \"gpu.nvidia.com\"" }] }] }, "template": { "spec": { "containers": [{ "name": "engine", "image": "vllm/vllm-openai" }] } } }],
        }] } } },
    });
    let (code, created) = f.call(Method::POST, deployments, Some(md)).await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    let (code, scale) = f
        .call(Method::GET, &format!("{deployments}/m/scale"), None)
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        (scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()),
        (Some("Scale"), Some(1))
    );
    let (code, scaled) = f
        .call(
            Method::PATCH,
            &format!("{deployments}/m/scale"),
            Some(json!({ "spec": { "replicas": 4 } })),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{scaled}");
    assert_eq!(scaled["spec"]["replicas"], 4);
    let (_, parent) = f.call(Method::GET, &format!("{deployments}/m"), None).await;
    assert_eq!(
        (
            parent["spec"]["replicas"].as_i64(),
            parent["metadata"]["generation"].as_i64()
        ),
        (Some(4), Some(2))
    );
    let (code, _) = f
        .call(
            Method::PATCH,
            &format!("{deployments}/m/scale"),
            Some(json!({ "spec": { "replicas": 11 } })),
        )
        .await;
    assert_eq!(
        code,
        StatusCode::UNPROCESSABLE_ENTITY,
        "the parent's maximum holds"
    );
    let (code, _) = f.call(Method::GET, &format!("{CM}/x/scale"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "ConfigMaps have no scale");
}

#[tokio::test]
async fn foreground_deletion_removes_dependents_before_the_owner() {
    let f = Fixture::new();
    let (_, owner) = f.call(Method::POST, CM, Some(cm("owner", json!({})))).await;
    let mut held = owned_by("held-child", &owner);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    f.call(Method::POST, CM, Some(held)).await;
    let (code, marked) = f
        .call(
            Method::DELETE,
            &format!("{CM}/owner"),
            Some(json!({ "propagationPolicy": "Foreground" })),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    // The child is marked but held by its finalizer, so the owner waits.
    let child = eventually(&f, &format!("{CM}/held-child"), StatusCode::OK).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (code, _) = f.call(Method::GET, &format!("{CM}/owner"), None).await;
    assert_eq!(
        code,
        StatusCode::OK,
        "the owner outlives a dependent that is still there: {child}"
    );
    // Releasing the child lets the deletion finish.
    let (code, _) = f
        .call(
            Method::PATCH,
            &format!("{CM}/held-child"),
            Some(json!({ "metadata": { "finalizers": null } })),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    eventually(&f, &format!("{CM}/held-child"), StatusCode::NOT_FOUND).await;
    eventually(&f, &format!("{CM}/owner"), StatusCode::NOT_FOUND).await;
}

#[tokio::test]
async fn namespaces_must_exist_and_take_their_contents_when_deleted() {
    let f = Fixture::new();
    let (code, missing) = f
        .call(
            Method::POST,
            "/api/v1/namespaces/nowhere/configmaps",
            Some(cm("a", json!({}))),
        )
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(missing["message"], "namespaces \"nowhere\" not found");
    let (code, default) = f
        .call(Method::GET, "/api/v1/namespaces/default", None)
        .await;
    assert_eq!(
        (code, default["status"]["phase"].as_str()),
        (StatusCode::OK, Some("Active"))
    );

    let (code, _) = f
        .call(
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({ "metadata": { "name": "team" } })),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);
    let team = "/api/v1/namespaces/team/configmaps";
    f.call(Method::POST, team, Some(cm("a", json!({})))).await;
    let mut held = cm("held", json!({}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    f.call(Method::POST, team, Some(held)).await;

    let (code, terminating) = f
        .call(Method::DELETE, "/api/v1/namespaces/team", None)
        .await;
    assert_eq!(
        (code, terminating["status"]["phase"].as_str()),
        (StatusCode::OK, Some("Terminating"))
    );
    let (code, refused) = f
        .call(Method::POST, team, Some(cm("late", json!({}))))
        .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{refused}");
    eventually(&f, &format!("{team}/a"), StatusCode::NOT_FOUND).await;
    // The held object keeps the namespace until its finalizer goes.
    let (code, _) = f.call(Method::GET, "/api/v1/namespaces/team", None).await;
    assert_eq!(code, StatusCode::OK);
    f.call(
        Method::PATCH,
        &format!("{team}/held"),
        Some(json!({ "metadata": { "finalizers": null } })),
    )
    .await;
    eventually(&f, "/api/v1/namespaces/team", StatusCode::NOT_FOUND).await;
}

/// A CRD of some other project: a schema with a minimum, a default, a CEL
/// rule and a transition rule.
fn gadget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "gadgets.example.com" },
        "spec": { "group": "example.com", "scope": "Namespaced",
            "names": { "plural": "gadgets", "singular": "gadget", "kind": "Gadget" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                    "spec": { "type": "object",
                        "x-kubernetes-validations": [
                            { "rule": "self.replicas <= 10", "message": "at most 10 replicas" },
                            { "rule": "self.size == oldSelf.size", "message": "size is immutable" },
                        ],
                        "properties": {
                            "replicas": { "type": "integer", "minimum": 1 },
                            "size": { "type": "string", "default": "small" },
                        } },
                } } } }] },
    })
}

fn gadget(name: &str, spec: Value) -> Value {
    json!({ "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": { "name": name }, "spec": spec })
}

/// Each CRD write changes what is served at once, by itself: a version
/// added, a schema changed, the CRD gone; the other CRDs stay as they were.
#[tokio::test]
async fn a_crds_changes_are_served_as_each_is_written() {
    let f = Fixture::new();
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let mut other = gadget_crd();
    other["metadata"]["name"] = json!("gadgets.other.example.com");
    other["spec"]["group"] = json!("other.example.com");
    for crd in [gadget_crd(), other] {
        assert_eq!(
            f.call(Method::POST, crds, Some(crd)).await.0,
            StatusCode::CREATED
        );
    }
    let served = |path: &'static str| {
        let f = &f;
        async move { f.call(Method::GET, path, None).await.0 == StatusCode::OK }
    };
    assert!(!served("/apis/example.com/v2/namespaces/ns/gadgets").await);

    // A second version, whose schema allows any number of replicas.
    let mut crd = gadget_crd();
    let mut v2 = crd["spec"]["versions"][0].clone();
    v2["name"] = json!("v2");
    v2["storage"] = json!(false);
    v2["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] = json!([]);
    crd["spec"]["versions"]
        .as_array_mut()
        .expect("versions")
        .push(v2);
    let (code, body) = f
        .call(
            Method::PUT,
            &format!("{crds}/gadgets.example.com"),
            Some(crd),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(served("/apis/example.com/v2/namespaces/ns/gadgets").await);
    let mut many = gadget("many", json!({ "replicas": 50 }));
    many["apiVersion"] = json!("example.com/v2");
    let (code, body) = f
        .call(
            Method::POST,
            "/apis/example.com/v2/namespaces/ns/gadgets",
            Some(many),
        )
        .await;
    assert_eq!(
        code,
        StatusCode::CREATED,
        "v2's own schema admits it: {body}"
    );
    let (code, _) = f
        .call(
            Method::POST,
            "/apis/example.com/v1/namespaces/ns/gadgets",
            Some(gadget("too-many", json!({ "replicas": 50 }))),
        )
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "v1 keeps its rule");

    // Gone: first its objects, then the CRD; the other CRD is still served.
    let (code, body) = f
        .call(
            Method::DELETE,
            &format!("{crds}/gadgets.other.example.com"),
            None,
        )
        .await;
    assert!(code.is_success(), "{body}");
    for _ in 0..100 {
        if !served("/apis/other.example.com/v1/namespaces/ns/gadgets").await {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!served("/apis/other.example.com/v1/namespaces/ns/gadgets").await);
    assert!(served("/apis/example.com/v1/namespaces/ns/gadgets").await);
    assert!(served("/apis/example.com/v2/namespaces/ns/gadgets").await);
}

#[tokio::test]
async fn other_crds_get_pruning_defaults_openapi_and_cel_with_field_validation() {
    let f = Fixture::new();
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    assert_eq!(
        f.call(Method::POST, crds, Some(gadget_crd())).await.0,
        StatusCode::CREATED
    );
    let gadgets = "/apis/example.com/v1/namespaces/ns/gadgets";

    // Warn (the default): pruned, defaulted, and a warning names the field.
    let (status, warnings, created) = f
        .send(
            Method::POST,
            gadgets,
            Some(gadget("a", json!({ "replicas": 2, "colour": "red" }))),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["spec"], json!({ "replicas": 2, "size": "small" }));
    assert_eq!(warnings, vec![r#"299 - "unknown field \"spec.colour\"""#]);

    // Ignore: pruned silently. Strict: refused before anything else.
    let (status, warnings, _) = f
        .send(
            Method::POST,
            &format!("{gadgets}?fieldValidation=Ignore"),
            Some(gadget("b", json!({ "replicas": 2, "colour": "red" }))),
        )
        .await;
    assert_eq!((status, warnings.len()), (StatusCode::CREATED, 0));
    let (status, strict) = f
        .call(
            Method::POST,
            &format!("{gadgets}?fieldValidation=Strict"),
            Some(gadget("c", json!({ "replicas": 0, "colour": "red" }))),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        strict["message"],
        r#"Gadget in version "v1" cannot be handled as a Gadget: strict decoding error: unknown field "spec.colour""#
    );
    let (status, bad) = f
        .call(
            Method::POST,
            &format!("{gadgets}?fieldValidation=Sometimes"),
            Some(gadget("c", json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");

    // OpenAPI constraints and CEL rules: 422 in the API server's words.
    let (status, invalid) = f
        .call(
            Method::POST,
            gadgets,
            Some(gadget("w1", json!({ "replicas": -1 }))),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        invalid["message"],
        r#"gadgets.example.com "w1" is invalid: spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 1"#
    );
    assert_eq!(invalid["details"]["causes"][0]["field"], "spec.replicas");
    let (status, invalid) = f
        .call(
            Method::POST,
            gadgets,
            Some(gadget("w2", json!({ "replicas": 11 }))),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        invalid["message"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 10 replicas"),
        "{invalid}"
    );

    // Transition rules see the stored object.
    let (status, immutable) = f
        .call(
            Method::PATCH,
            &format!("{gadgets}/a"),
            Some(json!({ "spec": { "size": "large" } })),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        immutable["message"]
            .as_str()
            .unwrap_or_default()
            .contains("size is immutable"),
        "{immutable}"
    );
    let (status, _) = f
        .call(
            Method::PATCH,
            &format!("{gadgets}/a"),
            Some(json!({ "spec": { "replicas": 3 } })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn dry_run_checks_everything_and_stores_nothing() {
    let f = Fixture::new();
    let cms = "/api/v1/namespaces/ns/configmaps";
    let (_, created) = f.call(Method::POST, cms, Some(cm("kept", json!({})))).await;
    let revision = f.server.store().revision().expect("revision");

    let (status, dry) = f
        .call(
            Method::POST,
            &format!("{cms}?dryRun=All"),
            Some(cm("ghost", json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(dry["metadata"]["name"], "ghost");
    assert_eq!(
        f.call(Method::GET, &format!("{cms}/ghost"), None).await.0,
        StatusCode::NOT_FOUND
    );
    // Conflicts still show.
    let (status, _) = f
        .call(
            Method::POST,
            &format!("{cms}?dryRun=All"),
            Some(cm("kept", json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    let (status, patched) = f
        .call(
            Method::PATCH,
            &format!("{cms}/kept?dryRun=All"),
            Some(json!({ "metadata": { "labels": { "dry": "yes" } } })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(patched["metadata"]["labels"]["dry"], "yes");
    let (_, stored) = f.call(Method::GET, &format!("{cms}/kept"), None).await;
    assert_eq!(stored, created, "the dry-run patch changed nothing");

    let (status, _) = f
        .call(
            Method::DELETE,
            &format!("{cms}/kept"),
            Some(json!({ "kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"] })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        f.call(Method::GET, &format!("{cms}/kept"), None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        f.server.store().revision().expect("revision"),
        revision,
        "no revision spent"
    );

    let (status, _) = f
        .call(
            Method::POST,
            &format!("{cms}?dryRun=Some"),
            Some(cm("x", json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn watches_beyond_the_limit_get_429_until_one_closes() {
    let f = Fixture::new();
    f.server.limit_watches(2);
    let uri = "/api/v1/namespaces/ns/configmaps?watch=true&timeoutSeconds=30";
    let open = |f: &Fixture| {
        let request = Request::builder()
            .uri(uri)
            .body(Body::empty())
            .expect("request");
        router(f.server.clone()).oneshot(request)
    };
    let first = open(&f).await.expect("first");
    let second = open(&f).await.expect("second");
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let (status, refused) = f.call(Method::GET, uri, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused["reason"], "TooManyRequests");
    // Closing a watch frees its slot.
    drop(first);
    let mut reopened = StatusCode::TOO_MANY_REQUESTS;
    for _ in 0..50 {
        let response = open(&f).await.expect("again");
        reopened = response.status();
        if reopened == StatusCode::OK {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(reopened, StatusCode::OK);
    drop(second);
}

#[tokio::test]
async fn bodies_over_the_limit_get_a_413_status() {
    let f = Fixture::new();
    let big = "x".repeat(modelplane_apiserver::MAX_BODY + 1);
    let (status, refused) = f
        .call(
            Method::POST,
            "/api/v1/namespaces/ns/configmaps",
            Some(json!({ "metadata": { "name": "big" }, "data": { "k": big } })),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(refused["kind"], "Status");
    assert_eq!(refused["reason"], "RequestEntityTooLarge");
}

impl Fixture {
    /// A request with its own content type and raw body; the status and the body.
    async fn raw(
        &self,
        method: Method,
        uri: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .body(Body::from(body))
            .expect("request");
        let response = router(self.server.clone())
            .oneshot(request)
            .await
            .expect("response");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

#[tokio::test]
async fn every_page_of_a_list_carries_the_first_pages_resource_version() {
    let f = Fixture::new();
    for i in 0..4 {
        f.call(Method::POST, CM, Some(cm(&format!("c{i}"), json!({}))))
            .await;
    }
    let (_, first) = f.call(Method::GET, &format!("{CM}?limit=2"), None).await;
    let snapshot = rv(&first);
    // Writes while the pages are read: the next page must still claim the
    // snapshot, so a watch from it delivers them.
    f.call(Method::POST, CM, Some(cm("late", json!({})))).await;
    let token = first["metadata"]["continue"].as_str().expect("more");
    let (_, second) = f
        .call(Method::GET, &format!("{CM}?limit=2&continue={token}"), None)
        .await;
    assert_eq!(rv(&second), snapshot);
    let events = f
        .watch(&format!(
            "{CM}?watch=true&timeoutSeconds=1&resourceVersion={snapshot}"
        ))
        .await;
    assert!(
        events
            .iter()
            .any(|e| e["object"]["metadata"]["name"] == "late")
    );
}

#[tokio::test]
async fn writes_follow_kubernetes_preconditions() {
    let f = Fixture::new();
    install_crds(&f).await;
    let path = "/apis/modelplane.ai/v1alpha1/inferenceclusters";
    let (code, created) = f
        .call(Method::POST, path, Some(existing_cluster("Standard")))
        .await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    // A custom resource cannot be replaced unconditionally.
    let mut unconditional = created.clone();
    unconditional["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("resourceVersion");
    let (code, status) = f
        .call(Method::PUT, &format!("{path}/byo"), Some(unconditional))
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("must be specified for an update")
    );
    // A built-in kind can.
    let (_, c) = f.call(Method::POST, CM, Some(cm("plain", json!({})))).await;
    let mut plain = c.clone();
    plain["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("resourceVersion");
    plain["data"]["k"] = json!("w");
    let (code, _) = f
        .call(Method::PUT, &format!("{CM}/plain"), Some(plain))
        .await;
    assert_eq!(code, StatusCode::OK);
    // DELETE honours a uid precondition.
    let wrong = json!({ "preconditions": { "uid": "not-its-uid" } });
    let (code, status) = f
        .call(Method::DELETE, &format!("{CM}/plain"), Some(wrong))
        .await;
    assert_eq!(code, StatusCode::CONFLICT, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Precondition failed: UID in precondition")
    );
    let right = json!({ "preconditions": { "uid": c["metadata"]["uid"] } });
    let (code, _) = f
        .call(Method::DELETE, &format!("{CM}/plain"), Some(right))
        .await;
    assert_eq!(code, StatusCode::OK);
}

#[tokio::test]
async fn the_built_in_namespaces_may_not_be_deleted() {
    let f = Fixture::new();
    for ns in ["default", "kube-system", "kube-public"] {
        let (code, status) = f
            .call(Method::DELETE, &format!("/api/v1/namespaces/{ns}"), None)
            .await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{status}");
        assert_eq!(
            status["message"],
            format!("namespaces \"{ns}\" is forbidden: this namespace may not be deleted")
        );
    }
}

#[tokio::test]
async fn health_endpoints_and_built_in_defaults() {
    let f = Fixture::new();
    for path in ["/healthz", "/readyz", "/livez"] {
        let request = Request::builder()
            .uri(path)
            .body(Body::empty())
            .expect("request");
        let response = router(f.server.clone())
            .oneshot(request)
            .await
            .expect("response");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    let secret = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" }, "data": { "k": "dg==" } });
    let (_, created) = f
        .call(Method::POST, "/api/v1/namespaces/ns/secrets", Some(secret))
        .await;
    assert_eq!(created["type"], "Opaque");
    // stringData is merged into data, encoded, and not kept.
    let secret = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "t" },
        "data": { "k": "dg==", "j": "dg==" }, "stringData": { "j": "kubeconfig: yes" } });
    let (_, created) = f
        .call(Method::POST, "/api/v1/namespaces/ns/secrets", Some(secret))
        .await;
    assert_eq!(
        created["data"],
        json!({ "k": "dg==", "j": "a3ViZWNvbmZpZzogeWVz" })
    );
    assert!(created.get("stringData").is_none(), "{created}");
    let (_, ns) = f.call(Method::GET, "/api/v1/namespaces/ns", None).await;
    assert_eq!(ns["status"]["phase"], "Active");
}

#[tokio::test]
async fn bodies_of_the_wrong_shape_get_a_status_not_a_dropped_connection() {
    let f = Fixture::new();
    f.call(Method::POST, CM, Some(cm("c", json!({})))).await;
    let item = format!("{CM}/c");
    let (apply_item, apply_new) = (
        format!("{item}?fieldManager=m"),
        format!("{CM}/new?fieldManager=m"),
    );
    let cases: Vec<(Method, &str, &str, &str)> = vec![
        (Method::PUT, item.as_str(), "application/json", "[]"),
        (
            Method::PUT,
            item.as_str(),
            "application/json",
            r#"{"metadata":"x"}"#,
        ),
        (Method::POST, CM, "application/json", "[]"),
        (Method::POST, CM, "application/json", r#"{"metadata":[]}"#),
        (
            Method::PATCH,
            item.as_str(),
            "application/json-patch+json",
            r#"[{"op":"replace","path":"","value":[]}]"#,
        ),
        (
            Method::PATCH,
            item.as_str(),
            "application/json-patch+json",
            r#"[{"op":"replace","path":"/metadata","value":7}]"#,
        ),
        (
            Method::PATCH,
            item.as_str(),
            "application/strategic-merge-patch+json",
            r#"{"$patch":"delete"}"#,
        ),
        (
            Method::PATCH,
            apply_item.as_str(),
            "application/apply-patch+yaml",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":"x"}"#,
        ),
        (
            Method::PATCH,
            apply_new.as_str(),
            "application/apply-patch+yaml",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":"x"}"#,
        ),
        (Method::DELETE, item.as_str(), "application/json", "[1]"),
    ];
    for (method, uri, content_type, body) in cases {
        let (code, status) = f
            .raw(method.clone(), uri, content_type, body.as_bytes().to_vec())
            .await;
        assert!(
            code.is_client_error(),
            "{method} {uri} {body}: {code} {status}"
        );
        assert_eq!(status["kind"], "Status", "{method} {uri} {body}");
    }
    let (code, _) = f.call(Method::GET, &item, None).await;
    assert_eq!(code, StatusCode::OK, "still serving, the object intact");
}

#[tokio::test]
async fn a_selective_watch_sees_objects_leave_and_enter_its_selection() {
    let f = Arc::new(Fixture::new());
    let (_, created) = f
        .call(Method::POST, CM, Some(cm("sel", json!({ "team": "a" }))))
        .await;
    let from = rv(&created);
    let uri =
        format!("{CM}?watch=true&labelSelector=team%3Da&timeoutSeconds=2&resourceVersion={from}");
    let live = {
        let (f, uri) = (f.clone(), uri.clone());
        tokio::spawn(async move { f.watch(&uri).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let relabel = |team: &str| json!({ "metadata": { "labels": { "team": team } } });
    f.call(Method::PATCH, &format!("{CM}/sel"), Some(relabel("b")))
        .await;
    f.call(Method::PATCH, &format!("{CM}/sel"), Some(relabel("a")))
        .await;
    let expect = |events: &[Value]| {
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(kinds, ["DELETED", "ADDED"], "{events:?}");
        assert_eq!(
            events[0]["object"]["metadata"]["labels"]["team"], "a",
            "deleted as it last matched"
        );
        assert_eq!(events[1]["object"]["metadata"]["labels"]["team"], "a");
    };
    expect(&live.await.expect("live watch"));
    // The same from the log, resumed from before the changes.
    expect(
        &f.watch(&uri.replace("timeoutSeconds=2", "timeoutSeconds=1"))
            .await,
    );
}

#[tokio::test]
async fn a_table_watch_sends_each_event_as_a_table_row() {
    let f = Fixture::new();
    f.call(Method::POST, CM, Some(cm("t", json!({})))).await;
    let request = Request::builder()
        .uri(format!(
            "{CM}?watch=true&resourceVersion=0&timeoutSeconds=1"
        ))
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Body::empty())
        .expect("request");
    let response = router(f.server.clone())
        .oneshot(request)
        .await
        .expect("response");
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let events: Vec<Value> = String::from_utf8_lossy(&bytes)
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect();
    assert_eq!(events[0]["type"], "ADDED");
    let table = &events[0]["object"];
    assert_eq!(table["kind"], "Table", "{table}");
    assert_eq!(table["rows"][0]["cells"][0], "t");
    assert!(
        table["columnDefinitions"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    );
}

#[tokio::test]
async fn a_foreground_deletion_held_by_a_finalizer_writes_nothing_while_it_waits() {
    let f = Fixture::new();
    let (_, owner) = f
        .call(Method::POST, CM, Some(cm("waiting-owner", json!({}))))
        .await;
    let mut held = owned_by("waiting-child", &owner);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    f.call(Method::POST, CM, Some(held)).await;
    let before = f.server.store().revision().expect("revision");
    f.call(
        Method::DELETE,
        &format!("{CM}/waiting-owner"),
        Some(json!({ "propagationPolicy": "Foreground" })),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let writes = f.server.store().revision().expect("revision") - before;
    assert!(
        writes <= 3,
        "{writes} writes while blocked (owner marked, child marked)"
    );
}

#[tokio::test]
async fn a_sweep_collects_dependents_whose_owner_went_without_collection() {
    let f = Fixture::new();
    let (_, owner) = f
        .call(Method::POST, CM, Some(cm("gone-owner", json!({}))))
        .await;
    f.call(Method::POST, CM, Some(owned_by("left-child", &owner)))
        .await;
    // The owner vanishes without a collection (as around a crash).
    f.server
        .store()
        .write(modelplane_apiserver::Write::Delete {
            key: "/core/configmaps/ns/gone-owner".into(),
            expected: None,
        })
        .expect("delete");
    let (code, _) = f.call(Method::GET, &format!("{CM}/left-child"), None).await;
    assert_eq!(code, StatusCode::OK, "nothing collected it yet");
    modelplane_apiserver::collect_garbage(f.server.clone()).await;
    let (code, _) = f.call(Method::GET, &format!("{CM}/left-child"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_deleted_while_its_dependents_are_being_written_loses_them_all() {
    let f = Arc::new(Fixture::new());
    let (_, owner) = f
        .call(Method::POST, CM, Some(cm("busy-owner", json!({}))))
        .await;
    let children: Vec<String> = (0..20).map(|i| format!("busy-child-{i}")).collect();
    for name in &children {
        f.call(Method::POST, CM, Some(owned_by(name, &owner))).await;
    }
    // A writer keeps changing every dependent, so the collector's reads go
    // stale and its conditional deletes conflict, again and again.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (f, stop, children) = (f.clone(), stop.clone(), children.clone());
        tokio::spawn(async move {
            let mut round = 0u64;
            let mut written = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                for name in &children {
                    let patch = json!({ "data": { "round": round.to_string() } });
                    let (code, _) = f
                        .call(Method::PATCH, &format!("{CM}/{name}"), Some(patch))
                        .await;
                    if code == StatusCode::OK {
                        written += 1;
                    }
                }
            }
            written
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let (code, _) = f
        .call(Method::DELETE, &format!("{CM}/busy-owner"), None)
        .await;
    assert_eq!(code, StatusCode::OK);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.await.expect("writer");
    assert!(
        written > 20,
        "the writer raced the collection ({written} writes)"
    );
    for name in &children {
        eventually(&f, &format!("{CM}/{name}"), StatusCode::NOT_FOUND).await;
    }
}

#[tokio::test]
async fn deleting_a_crd_waits_for_its_objects_finalizers() {
    let f = Fixture::new();
    f.call(
        Method::POST,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        Some(gadget_crd()),
    )
    .await;
    let path = "/apis/example.com/v1/namespaces/ns/gadgets";
    let mut held = gadget("held", json!({ "replicas": 1 }));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let (code, body) = f.call(Method::POST, path, Some(held)).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com";
    let (code, _) = f.call(Method::DELETE, crd, None).await;
    assert_eq!(code, StatusCode::OK);
    let marked = eventually(&f, &format!("{path}/held"), StatusCode::OK).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (_, object) = f.call(Method::GET, &format!("{path}/held"), None).await;
    assert!(
        object["metadata"]["deletionTimestamp"].is_string(),
        "marked, held: {marked}"
    );
    let (code, crd_now) = f.call(Method::GET, crd, None).await;
    assert_eq!(code, StatusCode::OK, "the CRD waits for its objects");
    assert!(crd_now["metadata"]["deletionTimestamp"].is_string());
    f.call(
        Method::PATCH,
        &format!("{path}/held"),
        Some(json!({ "metadata": { "finalizers": null } })),
    )
    .await;
    eventually(&f, crd, StatusCode::NOT_FOUND).await;
}

/// A status apply for an object that does not exist is 404 (it must not
/// create one), and a write carrying another object's uid is 409: a
/// scheduler or kubelet working from an old view never writes into an
/// object deleted and created again under the same name.
#[tokio::test]
async fn status_applies_never_create_and_a_stale_uid_conflicts() {
    let f = Fixture::new();
    let pods = "/api/v1/namespaces/ns/pods";
    let apply = |uri: String, body: Value| {
        Request::builder()
            .method(Method::PATCH)
            .uri(uri)
            .header("content-type", "application/apply-patch+yaml")
            .body(Body::from(body.to_string()))
            .expect("request")
    };
    let status_apply = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" }, "status": { "phase": "Running" } });
    let response = router(f.server.clone())
        .oneshot(apply(
            format!("{pods}/p/status?fieldManager=kubelet"),
            status_apply.clone(),
        ))
        .await
        .expect("response");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let (code, _) = f.call(Method::GET, &format!("{pods}/p"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "nothing was created");

    let (_, created) = f
        .call(Method::POST, pods, Some(json!({ "metadata": { "name": "p" }, "spec": { "containers": [{ "name": "c", "image": "i" }] } })))
        .await;
    let (code, body) = f
        .call(
            Method::PATCH,
            &format!("{pods}/p"),
            Some(json!({ "metadata": { "uid": "not-this-one" }, "spec": { "nodeName": "n1" } })),
        )
        .await;
    assert_eq!(code, StatusCode::CONFLICT, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("Precondition failed: UID in precondition")),
        "{body}"
    );
    let (code, bound) = f
        .call(Method::PATCH, &format!("{pods}/p"), Some(json!({ "metadata": { "uid": created["metadata"]["uid"] }, "spec": { "nodeName": "n1" } })))
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(bound["spec"]["nodeName"], "n1");
    let mut stale = status_apply;
    stale["metadata"]["uid"] = json!("not-this-one");
    let response = router(f.server.clone())
        .oneshot(apply(
            format!("{pods}/p/status?fieldManager=kubelet"),
            stale,
        ))
        .await
        .expect("response");
    assert_eq!(response.status(), StatusCode::CONFLICT);
}

/// A client that hears of a CRD on a watch and asks for its kind at once
/// (a controller waiting for a chart's kinds) finds it served: failed on
/// main (discovery answered 404 now and then: the resource table was
/// rebuilt only after the write had been told to watchers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_told_to_a_watch_is_served_to_whoever_heard_of_it() {
    let f = Arc::new(Fixture::new());
    let mut events = f.server.store().subscribe();
    let kinds = 40;
    let heard = {
        let f = f.clone();
        tokio::spawn(async move {
            let mut missing = Vec::new();
            for i in 0..kinds {
                let event = events.recv().await.expect("the CRD's event");
                assert!(
                    event.key.contains(&format!("gadgets.g{i}.example.com")),
                    "{}",
                    event.key
                );
                let (code, _) = f
                    .call(Method::GET, &format!("/apis/g{i}.example.com/v1"), None)
                    .await;
                if code != StatusCode::OK {
                    missing.push(i);
                }
            }
            missing
        })
    };
    for i in 0..kinds {
        let mut crd = gadget_crd();
        let group = format!("g{i}.example.com");
        crd["metadata"]["name"] = json!(format!("gadgets.{group}"));
        crd["spec"]["group"] = json!(group);
        let (code, body) = f
            .call(
                Method::POST,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                Some(crd),
            )
            .await;
        assert_eq!(code, StatusCode::CREATED, "{body}");
    }
    let missing = heard.await.expect("listener");
    assert!(
        missing.is_empty(),
        "heard of but not served: groups {missing:?}"
    );
}

/// Labels and annotations as Kubernetes validates them: on main every one
/// of these was stored (the issue's `-bad key-`, a 300-character key,
/// 1.1 MB of annotations).
#[tokio::test]
async fn invalid_labels_and_oversized_annotations_are_refused_as_kubernetes_refuses_them() {
    let f = Fixture::new();
    let (code, refused) = f
        .call(Method::POST, CM, Some(cm("a", json!({ "-bad key-": "x" }))))
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["reason"], "Invalid");
    assert_eq!(
        refused["message"],
        "ConfigMap \"a\" is invalid: metadata.labels: Invalid value: \"-bad key-\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    );
    assert_eq!(refused["details"]["causes"][0]["field"], "metadata.labels");
    assert_eq!(
        refused["details"]["causes"][0]["reason"],
        "FieldValueInvalid"
    );

    let long = "k".repeat(300);
    let (code, refused) = f
        .call(Method::POST, CM, Some(cm("b", json!({ long: "x" }))))
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("name part must be no more than 63 characters")),
        "{refused}"
    );

    let mut big = cm("c", json!({}));
    big["metadata"]["annotations"] = json!({ "note": "x".repeat(1_100_000) });
    let (code, refused) = f.call(Method::POST, CM, Some(big)).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(
        refused["message"],
        "ConfigMap \"c\" is invalid: metadata.annotations: Too long: must have at most 262144 bytes"
    );
    assert_eq!(
        refused["details"]["causes"][0]["reason"],
        "FieldValueTooLong"
    );

    // An update is checked too: a valid object cannot be patched invalid.
    let (code, _) = f
        .call(Method::POST, CM, Some(cm("d", json!({ "ok": "yes" }))))
        .await;
    assert_eq!(code, StatusCode::CREATED);
    let mut bad = cm("d", json!({ "ok": "not ok!" }));
    bad["metadata"]["resourceVersion"] = json!(null);
    let (code, refused) = f.call(Method::PUT, &format!("{CM}/d"), Some(bad)).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(
        refused["message"].as_str().is_some_and(
            |m| m.contains("Invalid value: \"not ok!\": a valid label must be an empty string")
        ),
        "{refused}"
    );
}
