//! Arbitrary bodies at every verb of several kinds (a built-in, a namespace,
//! Modelplane's CRD kinds with their status and scale subresources), JSON
//! and Kubernetes protobuf (envelopes naming real and made-up kinds around
//! arbitrary message bytes): only
//! 2xx or 4xx answers, every 4xx a `Status`, never a dropped connection or
//! a 5xx, and the server still serving afterwards; then a quarter as many
//! over TCP and TLS (every one answered, none a dropped connection) and a
//! sample through kubectl (`--raw`). `BODY_CASES` sets how
//! many cases run (2,000 by default; the harness runs 100,000:
//! `BODY_CASES=100000 cargo test --release -p modelplane-apiserver --test bodies`).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use modelplane_apiserver::Store;
use modelplane_apiserver::{ApiServer, router};
use proptest::prelude::*;
use serde_json::{Value, json};
use tower::ServiceExt;

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-zA-Z0-9./:_$-]{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "v1",
            "ConfigMap",
            "metadata",
            "spec",
            "status",
            "default",
            "ns",
            "c",
            "Foreground",
            "All",
            "modelplane.ai/v1alpha1",
            "ModelDeployment",
            "InferenceCluster",
        ])
        .prop_map(|s| Value::String(s.to_string())),
        (0usize..3).prop_map(|n| Value::String("x".repeat(n * 40_000))),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "apiVersion",
                    "kind",
                    "metadata",
                    "name",
                    "namespace",
                    "labels",
                    "annotations",
                    "finalizers",
                    "ownerReferences",
                    "resourceVersion",
                    "uid",
                    "spec",
                    "status",
                    "data",
                    "replicas",
                    "engines",
                    "members",
                    "op",
                    "path",
                    "value",
                    "$patch",
                    "preconditions",
                    "propagationPolicy",
                    "dryRun",
                    "cluster",
                    "template",
                ]),
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

/// A body: usually JSON of some shape, sometimes an object that starts as a
/// plausible manifest, sometimes bytes that are not JSON at all.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => value().prop_map(|v| v.to_string().into_bytes()),
        3 => (value(), value()).prop_map(|(metadata, spec)| {
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "spec": spec, "data": spec })
                .to_string()
                .into_bytes()
        }),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        2 => protobuf(),
    ]
}

/// A length-delimited protobuf field (lengths under 16 KiB).
fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
    let len = bytes.len();
    let mut out = vec![(number << 3) | 2];
    if len < 0x80 {
        out.push(len as u8);
    } else {
        out.extend([(len as u8) | 0x80, (len >> 7) as u8]);
    }
    out.extend_from_slice(bytes);
    out
}

/// A Kubernetes protobuf body: the magic, then a `runtime.Unknown` naming a
/// kind (real or not) around arbitrary or almost-right message bytes.
fn protobuf() -> impl Strategy<Value = Vec<u8>> {
    let kinds = prop::sample::select(vec![
        ("v1", "ConfigMap"),
        ("v1", "Namespace"),
        ("v1", "Secret"),
        ("v1", "Pod"),
        ("apps/v1", "Deployment"),
        ("modelplane.ai/v1alpha1", "ModelDeployment"),
        ("v1", ""),
    ]);
    let raw = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..96),
        // An ObjectMeta (field 1) with a name, then arbitrary fields.
        prop::collection::vec(any::<u8>(), 0..48).prop_map(|tail| [
            field(1, &field(1, b"c")),
            tail
        ]
        .concat()),
    ];
    (kinds, raw, any::<bool>()).prop_map(|((api_version, kind), raw, magic)| {
        let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
        let unknown = [field(1, &type_meta), field(2, &raw)].concat();
        let magic: &[u8] = if magic { b"k8s\0" } else { b"k8s" };
        [magic, &unknown].concat()
    })
}

const PATHS: &[&str] = &[
    "/api/v1/namespaces/ns/configmaps",
    "/api/v1/namespaces/ns/configmaps/c",
    "/api/v1/namespaces/ns/configmaps/fresh",
    "/api/v1/namespaces",
    "/api/v1/namespaces/ns",
    "/apis/modelplane.ai/v1alpha1/namespaces/ns/modeldeployments",
    "/apis/modelplane.ai/v1alpha1/namespaces/ns/modeldeployments/md",
    "/apis/modelplane.ai/v1alpha1/namespaces/ns/modeldeployments/md/status",
    "/apis/modelplane.ai/v1alpha1/namespaces/ns/modeldeployments/md/scale",
    "/apis/modelplane.ai/v1alpha1/inferenceclusters/byo",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
];

const VERBS: &[(&str, &str)] = &[
    ("POST", "application/json"),
    ("PUT", "application/json"),
    ("PATCH", "application/merge-patch+json"),
    ("PATCH", "application/json-patch+json"),
    ("PATCH", "application/strategic-merge-patch+json"),
    ("PATCH", "application/apply-patch+yaml"),
    ("DELETE", "application/json"),
    ("POST", "application/vnd.kubernetes.protobuf"),
    ("PUT", "application/vnd.kubernetes.protobuf"),
];

fn server() -> (tempfile::TempDir, Arc<ApiServer>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::new(Store::open(&dir.path().join("state.db")).expect("store"));
    modelplane_apiserver::create_namespace(server.store(), "ns").expect("namespace");
    (dir, server)
}

async fn send(
    server: &Arc<ApiServer>,
    method: &str,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).expect("method"))
        .uri(uri)
        .header("content-type", content_type)
        .body(Body::from(body))
        .expect("request");
    let response = router(server.clone())
        .oneshot(request)
        .await
        .expect("an answer");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a whole body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The ConfigMap `c` the corpus's paths name.
fn config_map() -> Vec<u8> {
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" }, "data": { "k": "v" } })
        .to_string()
        .into_bytes()
}

/// The CRDs and the ConfigMap `c`, each created (so the corpus reaches
/// existing objects and CRD kinds, not only 404s).
async fn seed(server: &Arc<ApiServer>) {
    for crd in modelplane_api::crds::all_crds() {
        let (code, answer) = send(
            server,
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "application/json",
            crd.to_string().into_bytes(),
        )
        .await;
        assert_eq!(code, StatusCode::CREATED, "{answer}");
    }
    let (code, answer) = send(server, "POST", PATHS[0], "application/json", config_map()).await;
    assert_eq!(code, StatusCode::CREATED, "{answer}");
}

fn cases() -> u32 {
    std::env::var("BODY_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000)
}

#[test]
fn arbitrary_bodies_at_every_verb_get_a_status_and_the_server_stays_up() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (_dir, server) = server();
    runtime.block_on(seed(&server));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: cases(),
        ..ProptestConfig::default()
    });
    let strategy = (0..PATHS.len(), 0..VERBS.len(), body());
    let ran = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&strategy, |(p, v, body)| {
            let (method, content_type) = VERBS[v];
            let uri = if content_type.contains("apply") {
                format!("{}?fieldManager=prop", PATHS[p])
            } else {
                PATHS[p].to_string()
            };
            let (code, answer) =
                runtime.block_on(send(&server, method, &uri, content_type, body.clone()));
            ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            prop_assert!(
                code.is_success() || code.is_client_error(),
                "{method} {uri} ({content_type}) {}: {code} {answer}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            );
            if code.is_client_error() {
                prop_assert_eq!(&answer["kind"], "Status", "{} {}: {}", method, uri, answer);
            }
            Ok(())
        })
        .expect("every body answered with a Status");
    let (code, _) = runtime.block_on(send(
        &server,
        "GET",
        "/api/v1/namespaces/ns/configmaps",
        "application/json",
        Vec::new(),
    ));
    let ran = ran.into_inner();
    assert_eq!(code, StatusCode::OK, "still serving after {ran} cases");
    println!("{ran} arbitrary bodies, every one answered 2xx or with a 4xx Status");
}

/// The server over TCP and TLS, as clients reach it; its kubeconfig.
fn serving(
    runtime: &tokio::runtime::Runtime,
    dir: &std::path::Path,
) -> (tokio::sync::oneshot::Sender<()>, std::path::PathBuf) {
    use modelplane_apiserver::{Config, MAX_CONNECTIONS, serve};
    let (ready, path) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = Config {
        data_dir: modelplane_apiserver::DataDir::lock(dir).expect("lock the data dir"),
        listen: "127.0.0.1:0".parse().expect("addr"),
        max_connections: MAX_CONNECTIONS,
    };
    runtime.spawn(serve(
        config,
        move |_, p| drop(ready.send(p.to_path_buf())),
        async move {
            let _ = stopped.await;
        },
    ));
    (stop, runtime.block_on(path).expect("ready"))
}

/// kubectl 1.33 from the Google Cloud SDK, else the one on the PATH.
fn kubectl() -> std::path::PathBuf {
    let sdk = std::path::PathBuf::from("/usr/lib/google-cloud-sdk/bin/kubectl.1.33");
    if sdk.exists() { sdk } else { "kubectl".into() }
}

#[test]
fn arbitrary_bodies_over_tcp_and_through_kubectl_get_a_status_never_a_dropped_connection() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let (stop, kubeconfig) = serving(&runtime, dir.path());
    let client = runtime.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
            &Default::default(),
        )
        .await
        .expect("config");
        kube::Client::try_from(config).expect("client")
    });
    // The same seed as in-process: a namespace, the CRDs, a ConfigMap.
    let seed = |method: &str, path: &str, body: Vec<u8>| {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body)
            .expect("request");
        runtime.block_on(client.send(request.map(Into::into)))
    };
    let created = |method: &str, path: &str, body: Vec<u8>| {
        let response = seed(method, path, body).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(response.status(), StatusCode::CREATED, "{method} {path}");
    };
    created(
        "POST",
        "/api/v1/namespaces",
        br#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns"}}"#.to_vec(),
    );
    for crd in modelplane_api::crds::all_crds() {
        created(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd.to_string().into_bytes(),
        );
    }
    created("POST", PATHS[0], config_map());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: cases() / 4,
        ..ProptestConfig::default()
    });
    let strategy = (0..PATHS.len(), 0..VERBS.len(), body());
    runner
        .run(&strategy, |(p, v, body)| {
            let (method, content_type) = VERBS[v];
            let uri = if content_type.contains("apply") {
                format!("{}?fieldManager=prop", PATHS[p])
            } else {
                PATHS[p].to_string()
            };
            let request = http::Request::builder()
                .method(method)
                .uri(&uri)
                .header("content-type", content_type)
                .body(body.clone())
                .expect("request");
            // An error here (a reset, an EOF) is a dropped connection.
            let response = runtime
                .block_on(client.send(request.map(Into::into)))
                .map_err(|e| TestCaseError::fail(format!("{method} {uri}: {e}")))?;
            let code = response.status();
            prop_assert!(
                code.is_success() || code.is_client_error(),
                "{method} {uri}: {code}"
            );
            Ok(())
        })
        .expect("every body over TCP answered");

    // A sample of the corpus through kubectl itself (`--raw` sends the
    // body as it is): the server answers each with a Status kubectl prints.
    let kubectl_cases: u32 = std::env::var("KUBECTL_BODY_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(40);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: kubectl_cases,
        ..ProptestConfig::default()
    });
    let verbs = prop::sample::select(vec!["create", "replace"]);
    let file = dir.path().join("body");
    runner
        .run(&(0..PATHS.len(), verbs, body()), |(p, verb, body)| {
            std::fs::write(&file, &body).expect("body file");
            let out = std::process::Command::new(kubectl())
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args([verb, "--raw", PATHS[p], "-f"])
                .arg(&file)
                .output()
                .expect("kubectl runs");
            let err = String::from_utf8_lossy(&out.stderr);
            // kubectl prints a Status's message; a lost connection reads
            // as one of these instead.
            let dropped = [
                "connection reset",
                "broken pipe",
                "EOF",
                "connection refused",
                "Timeout",
            ]
            .iter()
            .any(|t| err.contains(t));
            prop_assert!(
                out.status.success() || (!err.is_empty() && !dropped),
                "kubectl {verb} --raw {}: {err}",
                PATHS[p]
            );
            Ok(())
        })
        .expect("every body through kubectl answered with a Status");
    stop.send(())
        .expect("the server still running to be stopped");
}
