//! `modelplane controller` as a separate process against `modelplane
//! apiserver`: the control plane is the server's root cluster, the workload
//! cluster a logical cluster of it reached only through the kubeconfig
//! Secret of an Existing InferenceCluster. Asserted through kubectl, as a
//! user sees it.

mod common;

use common::condition;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::existing::{self, AVAILABLE, get_json, names, set_status};
use common::up::free_port;
use common::{Process, Server, wait_for};
use serde_json::Value;

// Generous: CI runs these beside every other suite on two cores, where a
// leader's first replica once took over 60 s to appear (c0c3ddb's run).
const WAIT: Duration = Duration::from_secs(180);

fn fleet(server: &Server) {
    fleet_through(server, None);
}

/// The fleet, with the workload cluster reached at `through` (a proxy's
/// `https://host:port`) instead of the server's own address.
fn fleet_through(server: &Server, through: Option<&str>) {
    fleet_of(server, through, 4);
}

/// The fleet: one Existing Standard cluster `edge`, its one pool `nodes`
/// L4 nodes.
fn fleet_of(server: &Server, through: Option<&str>, nodes: usize) {
    existing::control_plane(server);
    existing::existing_cluster(server, "edge", through);
    server.apply(
        None,
        &r#"
apiVersion: modelplane.ai/v1alpha1
kind: InferenceClass
metadata:
  name: l4
spec:
  devices:
  - name: gpu
    driver: gpu.nvidia.com
    deviceClassName: gpu.nvidia.com
    count: 1
    capacity:
      memory: { value: "23034Mi" }
---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: edge
spec:
  stack: Standard
  cluster:
    source: Existing
    existing:
      secretRef:
        name: edge-kubeconfig
  nodePools:
  - name: l4
    className: l4
    nodeCount: NODES
"#
        .replace("NODES", &nodes.to_string()),
    );
}

/// The platform's stand-in for the `edge` cluster, its Gateway at `edge`.
fn platform(server: &Server, stop: &std::sync::atomic::AtomicBool, edge: &str) {
    existing::platform(server, stop, &[("edge", edge)]);
}

fn controller(server: &Server) -> Process {
    controller_draining(server, 2)
}

/// The controller, draining a replica scaled away for `drain` seconds.
fn controller_draining(server: &Server, drain: u32) -> Process {
    Process(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["controller", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .args(["--gateway-address", "gateway.example:8080", "--resync", "1"])
            .args(["--drain-seconds", &drain.to_string()])
            // One controller: no Lease renewals among the writes counted.
            .arg("--no-leader-election")
            .env("RUST_LOG", "info")
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the controller"),
    )
}

const DEPLOYMENT: &str = r#"
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: qwen3-8b
  namespace: ml-team
spec:
  replicas: REPLICAS
  template:
    spec:
      engines:
      - name: qwen3-8b
        members:
        - role: Standalone
          nodeSelector:
            devices:
            - name: gpu
              selectors:
              - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                args: [--model=Qwen/Qwen3-8B, --served-model-name=qwen3-8b]
"#;

#[test]
fn an_existing_cluster_gets_its_stack_then_a_deployment_becomes_ready_endpoints_on_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    fleet(&server);
    server.apply(None, &DEPLOYMENT.replace("REPLICAS", "3"));
    let _controller = controller(&server);
    // The data plane: an engine, the workload cluster's edge gateway in front
    // of it (routing /<namespace>/<replica>/ as the composed HTTPRoutes do),
    // and the fleet gateway fed by the control plane's watches.
    let (engine_port, edge_port, fleet_port) = (free_port(), free_port(), free_port());
    let edge_dir = dir.path().join("edge-routes");
    std::fs::create_dir_all(&edge_dir).expect("edge dir");
    let _engine = spawn(&[
        "engine-sim",
        "--model",
        "qwen3-8b",
        "--listen",
        &format!("127.0.0.1:{engine_port}"),
    ]);
    let _edge = Process(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args([
                "gateway",
                "--listen",
                &format!("127.0.0.1:{edge_port}"),
                "--reload-interval-ms",
                "100",
                "--config",
            ])
            .arg(&edge_dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("the edge gateway"),
    );
    let _fleet = Process(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args([
                "gateway",
                "--listen",
                &format!("127.0.0.1:{fleet_port}"),
                "--kubeconfig",
            ])
            .arg(&server.kubeconfig)
            .stdout(Stdio::null())
            .spawn()
            .expect("the fleet gateway"),
    );
    let edge = format!("127.0.0.1:{edge_port}");
    let data_plane = DataPlane {
        engine_port,
        fleet_port,
        edge_dir,
        edge: edge.clone(),
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| platform(&server, &stop, &edge));
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| steps(&server, &data_plane)));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}

/// Where the data plane of the test listens.
struct DataPlane {
    engine_port: u16,
    fleet_port: u16,
    edge_dir: std::path::PathBuf,
    edge: String,
}

fn spawn(args: &[&str]) -> Process {
    Process(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn modelplane"),
    )
}

/// POSTs a chat completion for `model` to 127.0.0.1:`port`: status and body.
fn chat(port: u16, model: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let body =
        serde_json::json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] })
            .to_string();
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        tcp,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut text = String::new();
    tcp.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, text.split_once("\r\n\r\n")?.1.to_string()))
}

fn steps(server: &Server, data_plane: &DataPlane) {
    // The cluster's stack is installed (as the platform stands in), its
    // Gateway answers: the InferenceCluster is Ready with that address.
    wait_for("the InferenceCluster Ready with its gateway", WAIT, || {
        let cluster = get_json(server, None, &["get", "inferencecluster", "edge"])?;
        (condition(&cluster, "Ready").as_deref() == Some("True")
            && cluster["status"]["gateway"]["address"] == data_plane.edge.as_str())
        .then_some(())
    });

    // A class has nothing to compose: it is Accepted, and Ready.
    let class = get_json(server, None, &["get", "inferenceclass", "l4"]).expect("class");
    assert_eq!(
        condition(&class, "Ready").as_deref(),
        Some("True"),
        "{class}"
    );

    // Three ModelReplicas on the control plane, owned by the deployment.
    let replicas = wait_for("three ModelReplicas", WAIT, || {
        let found = names(server, None, &["get", "modelreplicas", "-n", "ml-team"]);
        (found.len() == 3).then_some(found)
    });
    let deployment =
        get_json(server, None, &["get", "md", "qwen3-8b", "-n", "ml-team"]).expect("md");
    let uid = deployment["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    for replica in &replicas {
        let replica = get_json(server, None, &["get", replica, "-n", "ml-team"]).expect("replica");
        assert_eq!(
            replica["metadata"]["labels"]["modelplane.ai/owner-uid"],
            uid.as_str()
        );
        assert_eq!(replica["spec"]["clusterName"], "edge");
    }

    // Each replica's engine Deployment in the team's namespace on the
    // workload cluster, labelled with its replica's uid.
    let workloads = wait_for(
        "the engine Deployments on the workload cluster",
        WAIT,
        || {
            let found = names(
                server,
                Some("edge"),
                &["get", "deployments", "-n", "ml-team"],
            );
            // Each replica's engine and endpoint picker.
            (found.len() == 2 * replicas.len()).then_some(found)
        },
    );
    for workload in &workloads {
        let object = get_json(
            server,
            Some("edge"),
            &["get", workload, "-n", "ml-team", "--show-managed-fields"],
        )
        .expect("workload");
        assert!(
            object["metadata"]["labels"]["modelplane.ai/owner-uid"].is_string(),
            "{workload} is labelled with its owner"
        );
        assert!(
            object["metadata"]["managedFields"]
                .as_array()
                .is_some_and(|m| m
                    .iter()
                    .any(|e| e["manager"] == "modelplane" && e["operation"] == "Apply")),
            "{workload} is applied server-side as modelplane"
        );
    }
    // Nothing of the workloads lands on the control plane.
    assert!(names(server, None, &["get", "deployments", "-n", "ml-team"]).is_empty());

    // The workloads become Available, as the readiness rule says: the
    // replicas turn Ready, and the deployment gets an endpoint per replica.
    set_status(server, Some("edge"), Some("ml-team"), &workloads, AVAILABLE);
    wait_for("every replica Ready", WAIT, || {
        replicas
            .iter()
            .all(|r| {
                get_json(server, None, &["get", r, "-n", "ml-team"])
                    .and_then(|o| condition(&o, "Ready"))
                    .as_deref()
                    == Some("True")
            })
            .then_some(())
    });
    let endpoints = wait_for("three ModelEndpoints", WAIT, || {
        let found = names(server, None, &["get", "modelendpoints", "-n", "ml-team"]);
        (found.len() == 3).then_some(found)
    });
    let endpoint =
        get_json(server, None, &["get", &endpoints[0], "-n", "ml-team"]).expect("endpoint");
    assert!(
        endpoint["spec"]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with(&format!("http://{}/ml-team/", data_plane.edge))),
        "{endpoint}"
    );

    // The story of the deployment and its replicas, as kubectl tells it.
    let events = get_json(server, None, &["get", "events", "-n", "ml-team"]).expect("events");
    let told = |kind: &str, reason: &str| {
        events["items"].as_array().into_iter().flatten().any(|e| {
            e["involvedObject"]["kind"] == kind
                && e["reason"] == reason
                && e["source"]["component"] == "modelplane"
        })
    };
    assert!(told("ModelDeployment", "Scheduled"), "{events}");
    assert!(told("ModelReplica", "Composing"), "{events}");
    let (ok, described, _) =
        server.kubectl_in(None, &["describe", "md", "qwen3-8b", "-n", "ml-team"], None);
    assert!(
        ok && described.contains("Scheduled 3 replicas"),
        "{described}"
    );

    // The fleet gateway and a ModelService over the deployment's endpoints:
    // the service gets its address through the gateway, and its route.
    server.apply(
        None,
        "apiVersion: modelplane.ai/v1alpha1\nkind: InferenceGateway\nmetadata:\n  name: default\nspec: {}\n---\napiVersion: modelplane.ai/v1alpha1\nkind: ModelService\nmetadata:\n  name: qwen3-8b\n  namespace: ml-team\nspec:\n  endpoints:\n  - selector:\n      matchLabels:\n        modelplane.ai/deployment: qwen3-8b\n",
    );
    wait_for("the ModelService routed, with its address", WAIT, || {
        let service = get_json(
            server,
            None,
            &["get", "modelservice", "qwen3-8b", "-n", "ml-team"],
        )?;
        (service["status"]["address"] == "http://gateway.example:8080/ml-team/qwen3-8b"
            && condition(&service, "RoutingReady").as_deref() == Some("True")
            && condition(&service, "EndpointsResolved").as_deref() == Some("True"))
        .then_some(())
    });
    for endpoint in &endpoints {
        wait_for("each endpoint's backend", WAIT, || {
            let e = get_json(server, None, &["get", endpoint, "-n", "ml-team"])?;
            (condition(&e, "RoutingReady").as_deref() == Some("True")).then_some(())
        });
    }

    // The edge gateway routes each replica's prefix to the engine, as the
    // composed HTTPRoutes do on a real cluster…
    let mut routes = String::new();
    for replica in &replicas {
        let name = replica.rsplit('/').next().expect("name");
        routes.push_str(&format!(
            "apiVersion: modelplane.ai/v1alpha1\nkind: ModelService\nmetadata:\n  name: {name}\n  namespace: ml-team\nspec:\n  endpoints:\n  - selector:\n      matchLabels:\n        edge: {name}\n---\napiVersion: modelplane.ai/v1alpha1\nkind: ModelEndpoint\nmetadata:\n  name: {name}\n  namespace: ml-team\n  labels:\n    edge: {name}\nspec:\n  url: http://127.0.0.1:{}/\n  rewritePath: /\n---\n",
            data_plane.engine_port
        ));
    }
    std::fs::write(data_plane.edge_dir.join("routes.yaml"), routes).expect("edge routes");
    // …and the fleet gateway, fed by watches, routes a chat completion by
    // the deployment's name through them to the engine.
    let (code, answer) = wait_for("a chat completion through the fleet gateway", WAIT, || {
        chat(data_plane.fleet_port, "qwen3-8b").filter(|(code, _)| *code == 200)
    });
    assert_eq!(code, 200);
    assert!(answer.contains("chat.completion"), "{answer}");

    // A user edits a field Modelplane owns (reverted) and adds a label (kept).
    let engine = workloads
        .iter()
        .find(|w| !w.ends_with("-epp") && !w.contains("-epp-"))
        .expect("an engine workload")
        .clone();
    server.kubectl_in(
        Some("edge"),
        &[
            "patch",
            &engine,
            "-n",
            "ml-team",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"team":"mine"}},"spec":{"replicas":7}}"#,
        ],
        None,
    );
    wait_for(
        "the owned field restored and the user's label kept",
        WAIT,
        || {
            let w = get_json(server, Some("edge"), &["get", &engine, "-n", "ml-team"])?;
            (w["spec"]["replicas"] == 1 && w["metadata"]["labels"]["team"] == "mine").then_some(())
        },
    );

    // Nothing changes: a minute of resyncs every second writes nothing.
    // The server's revision (a raw list's resourceVersion: every write to
    // the control plane or the cluster, a logical cluster of the same
    // store, moves it) stays put. The controller runs without election, so
    // no Lease renewal moves it either.
    let revision = |cluster| revision(server, cluster);
    std::thread::sleep(Duration::from_secs(2));
    let before = (revision(None), revision(Some("edge")));
    assert!(before.0.is_some_and(|r| r > 0), "a revision: {before:?}");
    std::thread::sleep(Duration::from_secs(60));
    assert_eq!(
        (revision(None), revision(Some("edge"))),
        before,
        "an unchanged world is written to"
    );

    // Scale 3 → 1: the two replicas going away leave the routing first
    // (their ModelEndpoints go, they are marked draining and keep their
    // workloads), then, drained, exactly their objects go, everywhere.
    let before = owned_objects(server);
    server.kubectl(&["scale", "md/qwen3-8b", "-n", "ml-team", "--replicas=1"]);
    let draining = wait_for(
        "the two surplus replicas out of the routing, draining",
        WAIT,
        || {
            let endpoints = names(server, None, &["get", "modelendpoints", "-n", "ml-team"]);
            let replicas = get_json(server, None, &["get", "modelreplicas", "-n", "ml-team"])?;
            let marked: Vec<String> = replicas["items"]
                .as_array()?
                .iter()
                .filter(|r| {
                    r["metadata"]["annotations"]["modelplane.ai/draining-since"].is_string()
                })
                .filter_map(|r| r["metadata"]["name"].as_str().map(str::to_string))
                .collect();
            (endpoints.len() == 1 && replicas["items"].as_array()?.len() == 3 && marked.len() == 2)
                .then_some(marked)
        },
    );
    let without_endpoints = |objects: &Owned| -> Owned {
        objects
            .iter()
            .filter(|(_, (_, kind, _))| kind != "modelendpoint")
            .map(|(uid, object)| (uid.clone(), object.clone()))
            .collect()
    };
    assert_eq!(
        without_endpoints(&owned_objects(server)),
        without_endpoints(&before),
        "{draining:?} keep every object but their endpoints while they drain"
    );
    // What the two replicas owned, here and on the cluster: their
    // ModelReplicas and ModelEndpoints (named as they are) and every
    // workload object named after them.
    let theirs = |name: &str| {
        draining
            .iter()
            .any(|replica| name == replica || name.starts_with(&format!("{replica}-")))
    };
    let expected: Owned = before
        .iter()
        .filter(|(_, (_, _, name))| !theirs(name))
        .map(|(uid, object)| (uid.clone(), object.clone()))
        .collect();
    assert!(
        before.len() - expected.len() >= 2 * 10,
        "the two replicas owned their objects: {} of {}",
        before.len() - expected.len(),
        before.len()
    );
    wait_for("exactly the two replicas' objects deleted", WAIT, || {
        (owned_objects(server) == expected).then_some(())
    });
}

/// Objects by uid: (target, kind, name).
type Owned = BTreeMap<String, (String, String, String)>;

/// Every object Modelplane owns in ml-team, on the control plane and the
/// `edge` cluster.
fn owned_objects(server: &Server) -> Owned {
    let mut objects = BTreeMap::new();
    for (target, cluster, kinds) in [
        ("control-plane", None, "modelreplicas,modelendpoints"),
        (
            "edge",
            Some("edge"),
            "deployments,services,configmaps,serviceaccounts,roles,rolebindings,resourceclaimtemplates,inferencepools,httproutes",
        ),
    ] {
        let list = get_json(
            server,
            cluster,
            &[
                "get",
                kinds,
                "-n",
                "ml-team",
                "-l",
                "modelplane.ai/owner-uid",
            ],
        )
        .unwrap_or_default();
        for object in list["items"].as_array().into_iter().flatten() {
            let field = |v: &Value| v.as_str().unwrap_or_default().to_string();
            objects.insert(
                field(&object["metadata"]["uid"]),
                (
                    target.to_string(),
                    field(&object["kind"]).to_lowercase(),
                    field(&object["metadata"]["name"]),
                ),
            );
        }
    }
    objects
}

/// The server's revision as a raw list in `cluster` reports it: every write
/// to the control plane or a logical cluster of the same store moves it.
fn revision(server: &Server, cluster: Option<&str>) -> Option<u64> {
    let path = match cluster {
        Some(cluster) => format!("/clusters/{cluster}/api/v1/namespaces/default/configmaps"),
        None => "/api/v1/namespaces/default/configmaps".to_string(),
    };
    let list: Value = serde_json::from_str(&server.kubectl(&["get", "--raw", &path])).ok()?;
    list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse::<u64>().ok())
}

/// Every object of every kind, on the control plane and the `edge`
/// cluster, written after `revision` (created or changed: its
/// resourceVersion is later), but the election's Lease.
/// Waits until nothing but Lease renewals is written for 2 s; the revision
/// it was quiet since.
fn wait_for_quiet(server: &Server) -> u64 {
    wait_for("a quiet world", WAIT, || {
        let at = revision(server, None)?;
        std::thread::sleep(Duration::from_secs(2));
        written_since(server, at).is_empty().then_some(at)
    })
}

fn written_since(server: &Server, revision: u64) -> Vec<String> {
    let mut written = Vec::new();
    for cluster in [None, Some("edge")] {
        let (ok, kinds, err) = server.kubectl_in(
            cluster,
            &["api-resources", "--verbs=list", "-o", "name"],
            None,
        );
        assert!(ok, "api-resources: {err}");
        let kinds = kinds.lines().collect::<Vec<_>>().join(",");
        let list = get_json(server, cluster, &["get", &kinds, "-A"]).expect("every object");
        for item in list["items"].as_array().into_iter().flatten() {
            let version = item["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            if version > revision && item["kind"] != "Lease" {
                written.push(format!(
                    "{} {} {}/{}",
                    cluster.unwrap_or("control-plane"),
                    item["kind"].as_str().unwrap_or_default(),
                    item["metadata"]["namespace"].as_str().unwrap_or_default(),
                    item["metadata"]["name"].as_str().unwrap_or_default(),
                ));
            }
        }
    }
    written
}

/// The election's Lease, once there is one.
fn lease_if_any(server: &Server) -> Option<k8s_openapi::api::coordination::v1::LeaseSpec> {
    let lease = get_json(
        server,
        None,
        &[
            "get",
            "lease",
            "modelplane-controller",
            "-n",
            "modelplane-system",
        ],
    )?;
    serde_json::from_value::<k8s_openapi::api::coordination::v1::Lease>(lease)
        .expect("a Lease")
        .spec
}

/// The election's Lease.
fn lease(server: &Server) -> k8s_openapi::api::coordination::v1::LeaseSpec {
    lease_if_any(server).expect("the Lease")
}

/// Seconds from the last renewal of `before` (the stopped holder's) to the
/// acquisition of `after` (its successor's), by the Lease's own times.
fn takeover_seconds(
    before: &k8s_openapi::api::coordination::v1::LeaseSpec,
    after: &k8s_openapi::api::coordination::v1::LeaseSpec,
) -> f64 {
    let renewed = before.renew_time.as_ref().expect("renewed").0;
    let acquired = after.acquire_time.as_ref().expect("acquired").0;
    acquired.duration_since(renewed).as_secs_f64()
}

/// A lease of 3 s is taken only once expired (by a candidate's next try,
/// a second later at most; how soon is a benchmark's figure, not a test's:
/// the ceiling is generous for a shared two-core machine).
const TAKEOVER_SECONDS: std::ops::RangeInclusive<f64> = 2.99..=15.0;

/// A controller named `identity` with a 3 s lease, probes on `port`.
fn candidate(server: &Server, identity: &str, port: u16) -> Process {
    Process(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["controller", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .args(["--identity", identity, "--lease-duration", "3"])
            .args(["--drain-seconds", "2"])
            .args(["--probes-listen", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn,modelplane_controller::lease=info")
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a controller"),
    )
}

/// `GET path` on 127.0.0.1:`port`: the status code and body.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    tcp.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, text.split_once("\r\n\r\n")?.1.to_string()))
}

/// The sum of a metric's samples in the text exposition.
fn metric(port: u16, name: &str) -> Option<f64> {
    let (_, body) = http_get(port, "/metrics")?;
    Some(
        body.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

fn holder(server: &Server) -> Option<String> {
    lease_if_any(server)?.holder_identity
}

fn replica_count(server: &Server) -> usize {
    names(server, None, &["get", "modelreplicas", "-n", "ml-team"]).len()
}

#[test]
fn a_standby_takes_over_from_a_stopped_leader_which_then_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    fleet(&server);
    server.apply(None, &DEPLOYMENT.replace("REPLICAS", "1"));
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| platform(&server, &stop, "10.0.0.7"));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            election_steps(&server);
        }));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}

fn election_steps(server: &Server) {
    let (port_a, port_b) = (free_port(), free_port());
    let mut a = candidate(server, "a", port_a);
    wait_for("a to lead", WAIT, || {
        (holder(server).as_deref() == Some("a")).then_some(())
    });
    wait_for("a's replica", WAIT, || {
        (replica_count(server) == 1).then_some(())
    });
    let b = candidate(server, "b", port_b);
    wait_for("b's probes", WAIT, || {
        http_get(port_b, "/readyz").filter(|(c, _)| *c == 200)
    });
    assert_eq!(http_get(port_b, "/healthz").map(|(c, _)| c), Some(200));
    assert_eq!(
        metric(port_b, "modelplane_controller_leader"),
        Some(0.0),
        "b stands by"
    );
    assert_eq!(
        metric(port_a, "modelplane_controller_leader"),
        Some(1.0),
        "a leads"
    );

    // a stalls: b leads once a's lease (3 s) expired, at its next try. It
    // is stopped idle: a write it had already decided and not yet sent
    // would go out when it wakes, as any client's would (the Lease fences
    // decisions, not requests in flight: docs/controller.md).
    wait_for_quiet(server);
    let pid = a.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let stalled = lease(server);
    wait_for("b to lead", Duration::from_secs(30), || {
        (holder(server).as_deref() == Some("b")).then_some(())
    });
    let took = takeover_seconds(&stalled, &lease(server));
    assert!(
        TAKEOVER_SECONDS.contains(&took),
        "b took over {took:.2} s after a's last renewal"
    );
    server.kubectl(&["scale", "md/qwen3-8b", "-n", "ml-team", "--replicas=2"]);
    wait_for("b places the second replica", WAIT, || {
        (replica_count(server) == 2).then_some(())
    });

    // a wakes with its lease long gone, to the watch events of everything
    // b did meanwhile: it writes nothing, counted by the server — in a
    // quiet world, every write after the wake but b's Lease renewals would
    // be a's.
    let woke_at = wait_for_quiet(server);
    let applied_before =
        metric(port_b, "modelplane_controller_objects_applied_total").expect("b's metrics");
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .expect("kill")
            .success()
    );
    // Its first renewal after waking finds b holding the Lease. A write a
    // sent before it was stopped completes when it wakes; counting from
    // when a knows it lost the Lease leaves only writes sent after that.
    wait_for("a to know it lost the lease", WAIT, || {
        (metric(port_a, "modelplane_controller_leader") == Some(0.0)).then_some(())
    });
    let a_before = metric(port_a, "modelplane_controller_objects_applied_total")
        .expect("a's metrics after waking");
    std::thread::sleep(Duration::from_secs(2));
    let written = written_since(server, woke_at);
    assert!(
        written.is_empty(),
        "written after the stale leader woke: {written:?}"
    );
    server.kubectl(&["scale", "md/qwen3-8b", "-n", "ml-team", "--replicas=3"]);
    wait_for("the third replica", WAIT, || {
        (replica_count(server) == 3).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        metric(port_a, "modelplane_controller_objects_applied_total"),
        Some(a_before),
        "the woken leader wrote"
    );
    assert_eq!(metric(port_a, "modelplane_controller_leader"), Some(0.0));
    assert!(
        metric(port_b, "modelplane_controller_objects_applied_total").expect("b") > applied_before,
        "b made the writes"
    );
    assert_eq!(holder(server).as_deref(), Some("b"));

    // b dies: a takes over again once b's lease expired.
    drop(b);
    let died = lease(server);
    wait_for("a to lead again", Duration::from_secs(30), || {
        (holder(server).as_deref() == Some("a")).then_some(())
    });
    let took = takeover_seconds(&died, &lease(server));
    assert!(
        TAKEOVER_SECONDS.contains(&took),
        "a took over {took:.2} s after b's last renewal"
    );
    server.kubectl(&["scale", "md/qwen3-8b", "-n", "ml-team", "--replicas=1"]);
    wait_for("a scales down", WAIT, || {
        (replica_count(server) == 1).then_some(())
    });
    let _ = a.0.kill();
}

/// A TCP proxy to `target` that can stop answering: while down, every
/// connection is cut and new ones are closed at once, as a cluster whose
/// API server went away.
struct Proxy {
    port: u16,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    fn start(target: std::net::SocketAddr) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = up.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if !flag.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(upstream) = std::net::TcpStream::connect(target) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone(), upstream.try_clone()),
                    (upstream.try_clone(), client.try_clone()),
                ] {
                    let (Ok(mut from), Ok(mut to)) = (from, to) else {
                        continue;
                    };
                    let flag = flag.clone();
                    std::thread::spawn(move || {
                        use std::io::{Read, Write};
                        let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
                        let mut buf = [0u8; 16384];
                        while flag.load(Ordering::SeqCst) {
                            match from.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    if to.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                                Err(e)
                                    if e.kind() == std::io::ErrorKind::WouldBlock
                                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                                Err(_) => break,
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, up }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `kind`/`name` → uid of every object `args` lists.
fn uids(server: &Server, cluster: Option<&str>, args: &[&str]) -> BTreeMap<String, String> {
    get_json(server, cluster, args)
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|o| {
            (
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                ),
                o["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn an_unreachable_cluster_or_a_lost_provider_config_deletes_nothing_and_the_fleet_converges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let address: std::net::SocketAddr = server
        .url
        .trim_start_matches("https://")
        .parse()
        .expect("the server's address");
    let proxy = Proxy::start(address);
    fleet_through(&server, Some(&format!("https://127.0.0.1:{}", proxy.port)));
    server.apply(None, &DEPLOYMENT.replace("REPLICAS", "2"));
    let _controller = controller(&server);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| platform(&server, &stop, "10.0.0.7"));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fault_steps(&server, &proxy);
        }));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}

fn serving(server: &Server) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let control = uids(
        server,
        None,
        &["get", "modelreplicas,modelendpoints", "-n", "ml-team"],
    );
    let cluster = uids(
        server,
        Some("edge"),
        &[
            "get",
            "deployments,services,configmaps,inferencepools",
            "-n",
            "ml-team",
        ],
    );
    (control, cluster)
}

fn fault_steps(server: &Server, proxy: &Proxy) {
    // The engines' workloads become Available: everything serves.
    let workloads = wait_for("both replicas' workloads", WAIT, || {
        let found = names(
            server,
            Some("edge"),
            &["get", "deployments", "-n", "ml-team"],
        );
        (found.len() == 4).then_some(found)
    });
    set_status(server, Some("edge"), Some("ml-team"), &workloads, AVAILABLE);
    let replicas = names(server, None, &["get", "modelreplicas", "-n", "ml-team"]);
    wait_for("both replicas Ready", WAIT, || {
        replicas
            .iter()
            .all(|r| {
                get_json(server, None, &["get", r, "-n", "ml-team"])
                    .and_then(|o| condition(&o, "Ready"))
                    .as_deref()
                    == Some("True")
            })
            .then_some(())
    });
    wait_for("two ModelEndpoints", WAIT, || {
        (names(server, None, &["get", "modelendpoints", "-n", "ml-team"]).len() == 2).then_some(())
    });
    let before = serving(server);
    assert_eq!(before.0.len(), 4, "{before:?}");

    // The cluster's API stops answering. A change that needs it (an engine
    // argument) cannot be applied there: the replicas say why, and nothing
    // anywhere is deleted.
    proxy.set_up(false);
    server.kubectl(&[
        "patch", "md", "qwen3-8b", "-n", "ml-team", "--type=json", "-p",
        r#"[{"op":"add","path":"/spec/template/spec/engines/0/members/0/template/spec/containers/0/args/-","value":"--max-model-len=8192"}]"#,
    ]);
    let said = wait_for(
        "the replicas to say their cluster cannot be written",
        WAIT,
        || {
            let r = get_json(server, None, &["get", &replicas[0], "-n", "ml-team"])?;
            let synced = r["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Synced")?
                .clone();
            (synced["status"] == "False").then_some(synced)
        },
    );
    assert!(
        said["message"]
            .as_str()
            .is_some_and(|m| m.contains("cluster edge")),
        "{said}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        serving(server),
        before,
        "nothing was deleted or replaced while the cluster was away"
    );
    let r = get_json(server, None, &["get", &replicas[0], "-n", "ml-team"]).expect("replica");
    assert_eq!(
        condition(&r, "Ready").as_deref(),
        Some("True"),
        "what serves stays Ready"
    );

    // It comes back: the change lands, everything converges, same objects.
    proxy.set_up(true);
    wait_for("the replicas synced again", WAIT, || {
        replicas
            .iter()
            .all(|r| {
                get_json(server, None, &["get", r, "-n", "ml-team"])
                    .and_then(|o| condition(&o, "Synced"))
                    .as_deref()
                    == Some("True")
            })
            .then_some(())
    });
    assert_eq!(
        serving(server),
        before,
        "the fleet converged without replacing what serves"
    );

    // A provider config disappears: the stack holds (its releases stay),
    // the config is composed again.
    let releases = uids(
        server,
        None,
        &[
            "get",
            "releases.helm.m.crossplane.io",
            "-n",
            "modelplane-system",
        ],
    );
    assert!(!releases.is_empty());
    let configs = names(
        server,
        None,
        &[
            "get",
            "providerconfigs.helm.m.crossplane.io",
            "-n",
            "modelplane-system",
        ],
    );
    let config = configs.first().expect("a helm provider config").clone();
    server.kubectl(&["delete", &config, "-n", "modelplane-system"]);
    wait_for("the provider config composed again", WAIT, || {
        names(
            server,
            None,
            &[
                "get",
                "providerconfigs.helm.m.crossplane.io",
                "-n",
                "modelplane-system",
            ],
        )
        .contains(&config)
        .then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        uids(
            server,
            None,
            &[
                "get",
                "releases.helm.m.crossplane.io",
                "-n",
                "modelplane-system"
            ]
        ),
        releases,
        "no release was deleted or replaced"
    );
    assert_eq!(serving(server), before);
}

/// Faults a kube client's layer injects between the controller and the
/// control plane: the InferenceClass API answering 403 (as without RBAC
/// rights), and every ModelDeployment read with a selector that no longer
/// compiles (as after a CEL environment change).
#[derive(Clone, Default)]
struct Faults {
    forbid_classes: std::sync::Arc<std::sync::atomic::AtomicBool>,
    break_selectors: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The selector of `DEPLOYMENT` as it travels in JSON, and the same with a
/// syntax error, the same length (so a chunk's bytes can be swapped).
const SELECTOR_END: &[u8] = b"quantity(\\\"20Gi\\\")) >= 0";
const BROKEN_END: &[u8] = b"quantity(\\\"20Gi\\\")) >= (";

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type FaultBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, BoxError>;

impl<S> tower::Layer<S> for Faults {
    type Service = Faulty<S>;
    fn layer(&self, inner: S) -> Faulty<S> {
        Faulty {
            inner,
            faults: self.clone(),
        }
    }
}

struct Faulty<S> {
    inner: S,
    faults: Faults,
}

fn swap(bytes: bytes::Bytes) -> bytes::Bytes {
    let mut out = bytes.to_vec();
    let mut at = 0;
    while let Some(i) = out[at..]
        .windows(SELECTOR_END.len())
        .position(|w| w == SELECTOR_END)
    {
        out[at + i..at + i + SELECTOR_END.len()].copy_from_slice(BROKEN_END);
        at += i + SELECTOR_END.len();
    }
    out.into()
}

impl<S, B> tower::Service<http::Request<kube::client::Body>> for Faulty<S>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<FaultBody>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        use http_body_util::BodyExt;
        use std::sync::atomic::Ordering;
        let path = request.uri().path().to_string();
        if self.faults.forbid_classes.load(Ordering::SeqCst) && path.contains("/inferenceclasses") {
            let status = serde_json::json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "inferenceclasses.modelplane.ai is forbidden: User \"modelplane\" cannot list resource \"inferenceclasses\"",
                "reason": "Forbidden", "code": 403 });
            let response = http::Response::builder()
                .status(403)
                .header("content-type", "application/json")
                .body(
                    http_body_util::Full::new(bytes::Bytes::from(status.to_string()))
                        .map_err(|never| match never {})
                        .boxed_unsync(),
                )
                .map_err(Into::into);
            return Box::pin(std::future::ready(response));
        }
        let breaking = self.faults.break_selectors.load(Ordering::SeqCst)
            && path.contains("/modeldeployments");
        let answer = self.inner.call(request);
        Box::pin(async move {
            let (mut parts, body) = answer.await.map_err(Into::into)?.into_parts();
            let body = body.map_err(Into::into);
            let body = if breaking {
                parts.headers.remove(http::header::CONTENT_LENGTH);
                body.map_frame(|frame| frame.map_data(swap)).boxed_unsync()
            } else {
                body.boxed_unsync()
            };
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

/// The controller in this process, its control-plane client through
/// `faults`; stops when dropped.
struct InProcess {
    /// Where its `/metrics` and `/readyz` are served.
    probes: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcess {
    fn start(server: &Server, faults: &Faults) -> InProcess {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (kubeconfig, faults) = (server.kubeconfig.clone(), faults.clone());
        let probes = free_port();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let kubeconfig =
                    kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
                let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .expect("config");
                let client = kube::client::ClientBuilder::try_from(config)
                    .expect("client")
                    .with_layer(&faults)
                    .build();
                let config = modelplane_controller::Config {
                    resync: Duration::from_secs(1),
                    gateway_address: Some("gateway.example:8080".into()),
                    probes: Some(std::net::SocketAddr::from(([127, 0, 0, 1], probes))),
                    ..Default::default()
                };
                let control =
                    modelplane_controller::target::Connection::new("control plane", client);
                modelplane_controller::run(config, control, async move {
                    let _ = stopped.await;
                })
                .await
                .expect("the controller runs");
            });
        });
        InProcess {
            probes,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn an_unreadable_class_list_or_a_broken_selector_deletes_nothing_and_the_fleet_converges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    fleet(&server);
    server.apply(None, &DEPLOYMENT.replace("REPLICAS", "2"));
    let faults = Faults::default();
    let controller = InProcess::start(&server, &faults);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| platform(&server, &stop, "10.0.0.7"));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            read_fault_steps(&server, &faults, controller);
        }));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}

/// Everything serves; the replicas are Ready and Synced again.
fn serving_and_synced(server: &Server) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let replicas = names(server, None, &["get", "modelreplicas", "-n", "ml-team"]);
    wait_for("both replicas Ready and Synced", WAIT, || {
        (replicas.len() == 2
            && replicas.iter().all(|r| {
                get_json(server, None, &["get", r, "-n", "ml-team"]).is_some_and(|o| {
                    condition(&o, "Ready").as_deref() == Some("True")
                        && condition(&o, "Synced").as_deref() == Some("True")
                })
            }))
        .then_some(())
    });
    serving(server)
}

fn read_fault_steps(server: &Server, faults: &Faults, controller: InProcess) {
    use std::sync::atomic::Ordering;
    let workloads = wait_for("both replicas' workloads", WAIT, || {
        let found = names(
            server,
            Some("edge"),
            &["get", "deployments", "-n", "ml-team"],
        );
        (found.len() == 4).then_some(found)
    });
    set_status(server, Some("edge"), Some("ml-team"), &workloads, AVAILABLE);
    let before = serving_and_synced(server);
    assert_eq!(before.0.len(), 4, "{before:?}");

    // The InferenceClass API answers 403, and the controller restarts into
    // it (a cold cache: it cannot list a single class). Nothing is deleted.
    faults.forbid_classes.store(true, Ordering::SeqCst);
    drop(controller);
    let controller = InProcess::start(server, faults);
    server.kubectl(&[
        "label",
        "md",
        "qwen3-8b",
        "-n",
        "ml-team",
        "touched=1",
        "--overwrite",
    ]);
    // It says why it is not ready, and holds everything meanwhile.
    let (code, why) = wait_for("the controller to say what it cannot read", WAIT, || {
        http_get(controller.probes, "/readyz").filter(|(_, body)| body.contains("403"))
    });
    assert_eq!(code, 503, "{why}");
    assert!(
        why.contains("InferenceClass (") && why.contains("forbidden"),
        "{why}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        serving(server),
        before,
        "nothing deleted while classes are unreadable"
    );
    faults.forbid_classes.store(false, Ordering::SeqCst);
    assert_eq!(
        serving_and_synced(server),
        before,
        "converged, the same objects"
    );

    // Every ModelDeployment now reads with a selector that does not compile:
    // the deployment says so and holds its replicas.
    faults.break_selectors.store(true, Ordering::SeqCst);
    drop(controller);
    let controller = InProcess::start(server, faults);
    server.kubectl(&[
        "label",
        "md",
        "qwen3-8b",
        "-n",
        "ml-team",
        "touched=2",
        "--overwrite",
    ]);
    let said = wait_for("the deployment to say its selector is broken", WAIT, || {
        let md = get_json(server, None, &["get", "md", "qwen3-8b", "-n", "ml-team"])?;
        md["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| {
                c["status"] == "False" && c["message"].as_str().is_some_and(|m| m.contains(">= ("))
            })
            .cloned()
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        serving(server),
        before,
        "nothing deleted for a selector that does not compile: {said}"
    );
    faults.break_selectors.store(false, Ordering::SeqCst);
    server.kubectl(&[
        "label",
        "md",
        "qwen3-8b",
        "-n",
        "ml-team",
        "touched=3",
        "--overwrite",
    ]);
    assert_eq!(
        serving_and_synced(server),
        before,
        "converged, the same objects"
    );
    drop(controller);
}

/// What the controller made for `deployments` ModelDeployments, once every
/// one is placed and nothing changes any more: each object on the control
/// plane and on the cluster by kind and name, with what differs between two
/// runs of the same thing (uids, versions, times, status) left out. With
/// `kill_after`, the controller is killed with SIGKILL once that many
/// replicas exist, and started again.
/// `count` deployments of one replica each, `model-000` on.
fn one_replica_deployments(count: usize) -> String {
    (0..count)
        .map(|i| {
            DEPLOYMENT
                .replace("REPLICAS", "1")
                .replace("name: qwen3-8b\n", &format!("name: model-{i:03}\n"))
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn converged(deployments: usize, kill_after: Option<usize>) -> BTreeMap<String, Value> {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    fleet_of(&server, None, deployments);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| platform(&server, &stop, "10.0.0.7"));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut controller = controller(&server);
            wait_for("the cluster Ready", WAIT, || {
                get_json(&server, None, &["get", "ic", "edge"])
                    .and_then(|c| condition(&c, "Ready"))
                    .filter(|s| s == "True")
            });
            // Replicas as they are made, seen by a watch, not a poll: the
            // kill lands as soon as `kill_after` exist.
            let made = server.watch_names(&["modelreplicas", "-n", "ml-team"]);
            server.apply(None, &one_replica_deployments(deployments));
            if let Some(after) = kill_after {
                wait_for("replicas to be made", WAIT, || {
                    (made.seen().len() >= after).then_some(())
                });
                controller.0.kill().expect("kill -9");
                controller.0.wait().expect("reaped");
                // Killed mid-apply, not after: some of what converging makes
                // was still to be made.
                let replicas = names(&server, None, &["get", "modelreplicas", "-n", "ml-team"]);
                let workloads = names(
                    &server,
                    Some("edge"),
                    &["get", "deployments", "-n", "ml-team"],
                );
                assert!(
                    replicas.len() < deployments || workloads.len() < 2 * deployments,
                    "killed after the apply had finished: {} replicas, {} workloads",
                    replicas.len(),
                    workloads.len()
                );
                println!(
                    "killed with {} replicas and {} workloads of {deployments} deployments",
                    replicas.len(),
                    workloads.len()
                );
                controller = self::controller(&server);
            }
            let snapshot = || {
                let mut objects = BTreeMap::new();
                for (cluster, kinds) in [
                    (None, "modelreplicas,modelendpoints"),
                    (
                        Some("edge"),
                        "deployments,services,configmaps,serviceaccounts,roles,rolebindings,inferencepools,httproutes,resourceclaimtemplates",
                    ),
                ] {
                    let list =
                        get_json(&server, cluster, &["get", kinds, "-n", "ml-team"]).expect("list");
                    for mut object in list["items"].as_array().cloned().unwrap_or_default() {
                        let key = format!(
                            "{}/{}/{}",
                            cluster.unwrap_or("control"),
                            object["kind"].as_str().unwrap_or_default(),
                            object["metadata"]["name"].as_str().unwrap_or_default()
                        );
                        if let Some(metadata) = object["metadata"].as_object_mut() {
                            for field in [
                                "uid",
                                "resourceVersion",
                                "creationTimestamp",
                                "managedFields",
                                "generation",
                                "ownerReferences",
                            ] {
                                metadata.remove(field);
                            }
                            if let Some(labels) =
                                metadata.get_mut("labels").and_then(Value::as_object_mut)
                            {
                                labels.remove("modelplane.ai/owner-uid");
                            }
                        }
                        if let Some(object) = object.as_object_mut() {
                            object.remove("status");
                        }
                        objects.insert(key, object);
                    }
                }
                objects
            };
            let settled = wait_for(
                "every deployment placed and nothing changing",
                WAIT * 3,
                || {
                    let placed =
                        names(&server, None, &["get", "modelreplicas", "-n", "ml-team"]).len();
                    if placed < deployments {
                        return None;
                    }
                    let first = snapshot();
                    std::thread::sleep(Duration::from_secs(2));
                    (snapshot() == first).then_some(first)
                },
            );
            drop(controller);
            settled
        }));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

#[test]
fn a_controller_killed_mid_apply_of_100_deployments_ends_where_an_uninterrupted_one_does() {
    let uninterrupted = converged(100, None);
    let crashed = converged(100, Some(30));
    let replicas = crashed
        .keys()
        .filter(|k| k.starts_with("control/ModelReplica/"))
        .count();
    assert_eq!(replicas, 100, "one replica per deployment, no duplicates");
    // Each deployment: its replica and endpoint, and nine objects on the
    // cluster (engine and endpoint picker, claims, pool, route, RBAC…).
    assert_eq!(
        uninterrupted.len(),
        100 * 11,
        "every object of every deployment"
    );
    let only = |a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>| -> Vec<String> {
        a.keys().filter(|k| !b.contains_key(*k)).cloned().collect()
    };
    assert_eq!(
        only(&crashed, &uninterrupted),
        Vec::<String>::new(),
        "orphans or duplicates"
    );
    assert_eq!(
        only(&uninterrupted, &crashed),
        Vec::<String>::new(),
        "objects missing"
    );
    for (key, object) in &uninterrupted {
        assert_eq!(&crashed[key], object, "{key} differs");
    }
}

/// Runs `steps` beside the platform's stand-in for `edge` (Helm releases
/// Ready, the Gateway's address), stopping it however `steps` ends.
fn with_platform(server: &Server, steps: impl FnOnce()) {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| platform(server, &stop, "10.0.0.7"));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(steps));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}

/// The ModelReplicas of ml-team: name → (uid, draining-since if marked).
fn replicas_marked(server: &Server) -> BTreeMap<String, (String, Option<String>)> {
    get_json(server, None, &["get", "modelreplicas", "-n", "ml-team"])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let text = |v: &Value| v.as_str().map(str::to_string);
            (
                text(&r["metadata"]["name"]).unwrap_or_default(),
                (
                    text(&r["metadata"]["uid"]).unwrap_or_default(),
                    text(&r["metadata"]["annotations"]["modelplane.ai/draining-since"]),
                ),
            )
        })
        .collect()
}

/// Every replica's workloads on `edge` made Available; waits for `count`
/// replicas Ready with their endpoints.
fn serving_replicas(server: &Server, count: usize) {
    let workloads = wait_for("the replicas' workloads", WAIT, || {
        let found = names(
            server,
            Some("edge"),
            &["get", "deployments", "-n", "ml-team"],
        );
        (found.len() == 2 * count).then_some(found)
    });
    set_status(server, Some("edge"), Some("ml-team"), &workloads, AVAILABLE);
    wait_for("the endpoints", WAIT, || {
        (names(server, None, &["get", "modelendpoints", "-n", "ml-team"]).len() == count)
            .then_some(())
    });
}

#[test]
fn a_replica_scaled_back_up_mid_drain_keeps_serving_and_the_team_namespace_outlives_its_deployment()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    fleet(&server);
    server.apply(None, &DEPLOYMENT.replace("REPLICAS", "2"));
    let _controller = controller_draining(&server, 20);
    with_platform(&server, || {
        serving_replicas(&server, 2);
        let before = replicas_marked(&server);
        assert_eq!(before.len(), 2);

        // Scale 2 → 1: one replica leaves the routing and drains.
        server.kubectl(&["scale", "md/qwen3-8b", "-n", "ml-team", "--replicas=1"]);
        let draining = wait_for("one replica draining", WAIT, || {
            let marked: Vec<String> = replicas_marked(&server)
                .into_iter()
                .filter_map(|(name, (_, since))| since.map(|_| name))
                .collect();
            (marked.len() == 1).then_some(marked[0].clone())
        });
        wait_for("its endpoint gone", WAIT, || {
            (names(&server, None, &["get", "modelendpoints", "-n", "ml-team"]).len() == 1)
                .then_some(())
        });

        // Back to 2 before the drain ends: the same replica loses its mark
        // and serves again; no new one is made.
        server.kubectl(&["scale", "md/qwen3-8b", "-n", "ml-team", "--replicas=2"]);
        wait_for("the drain cancelled", WAIT, || {
            let now = replicas_marked(&server);
            now.values().all(|(_, since)| since.is_none()).then_some(())
        });
        wait_for("its endpoint back", WAIT, || {
            (names(&server, None, &["get", "modelendpoints", "-n", "ml-team"]).len() == 2)
                .then_some(())
        });
        // Past the time the drain would have ended: the same two replicas.
        std::thread::sleep(Duration::from_secs(22));
        let uids = |m: BTreeMap<String, (String, Option<String>)>| -> BTreeMap<String, String> {
            m.into_iter().map(|(name, (uid, _))| (name, uid)).collect()
        };
        assert_eq!(
            uids(replicas_marked(&server)),
            uids(before),
            "{draining} was kept, and nothing replaced it"
        );

        // The team's namespace on the cluster is shared: never labelled as
        // Modelplane's, and it stays when everything Modelplane put in it
        // is gone.
        let namespace = get_json(&server, Some("edge"), &["get", "namespace", "ml-team"])
            .expect("the team namespace on the cluster");
        assert!(
            namespace["metadata"]["labels"]["modelplane.ai/owner-uid"].is_null()
                && namespace["metadata"]["ownerReferences"].is_null(),
            "owned by nobody: {namespace}"
        );
        let uid = namespace["metadata"]["uid"].clone();
        server.kubectl(&["delete", "md/qwen3-8b", "-n", "ml-team"]);
        wait_for("the deployment's workloads pruned", WAIT, || {
            let left = names(
                &server,
                Some("edge"),
                &[
                    "get",
                    "deployments,services,configmaps,inferencepools,httproutes",
                    "-n",
                    "ml-team",
                ],
            );
            left.is_empty().then_some(())
        });
        std::thread::sleep(Duration::from_secs(3));
        let after = get_json(&server, Some("edge"), &["get", "namespace", "ml-team"])
            .expect("the team namespace still there");
        assert_eq!(after["metadata"]["uid"], uid, "the same namespace");
        assert!(after["metadata"]["deletionTimestamp"].is_null(), "{after}");
    });
}

#[test]
fn a_changed_kubeconfig_secret_is_followed_to_the_clusters_new_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let address: std::net::SocketAddr = server
        .url
        .trim_start_matches("https://")
        .parse()
        .expect("the server's address");
    let (old, new) = (Proxy::start(address), Proxy::start(address));
    fleet_through(&server, Some(&format!("https://127.0.0.1:{}", old.port)));
    server.apply(None, &DEPLOYMENT.replace("REPLICAS", "1"));
    let _controller = controller(&server);
    with_platform(&server, || {
        serving_replicas(&server, 1);
        // The cluster moves: its old address stops answering and its
        // Secret names the new one. What the controller writes next goes
        // there.
        old.set_up(false);
        existing::existing_cluster(
            &server,
            "edge",
            Some(&format!("https://127.0.0.1:{}", new.port)),
        );
        server.kubectl(&["scale", "md/qwen3-8b", "-n", "ml-team", "--replicas=2"]);
        serving_replicas(&server, 2);
        let cluster = get_json(&server, None, &["get", "ic", "edge"]).expect("ic");
        assert_eq!(
            condition(&cluster, "Ready").as_deref(),
            Some("True"),
            "{cluster}"
        );
    });
}
