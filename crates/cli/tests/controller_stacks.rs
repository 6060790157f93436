//! The example fleet under `modelplane controller` with no simulator: its
//! two clusters are Existing ones (logical clusters of one `modelplane
//! apiserver`, reached only through their kubeconfig Secrets), us-east on
//! the Standard stack and us-west on Dynamo (each declaring a cache storage
//! class, as an Existing cluster does), and the example's qwen3-8b manifest
//! places one replica on each, the qwen3-coder with its ModelCache one on
//! us-west. On each cluster the controller applies exactly what
//! `modelplane render -f examples/` prints for each replica (the render
//! golden); once the test sets the workloads' status as their
//! readiness rules read it, both replicas turn Ready, their endpoints get
//! their addresses, the ModelService routes to both, and the fleet gateway,
//! fed by watches, sends a chat completion through each cluster's edge
//! gateway to an engine-sim.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::existing::{self, AVAILABLE, get_json, names, set_status};
use common::up::free_port;
use common::{Process, Server, wait_for};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);

/// Every kind a replica's composition applies on its cluster, as kubectl
/// names them.
const ON_CLUSTER: &str = "deployments.apps,services,configmaps,serviceaccounts,roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io,resourceclaimtemplates.resource.k8s.io,inferencepools.inference.networking.k8s.io,httproutes.gateway.networking.k8s.io,podcliquesets.grove.io,leaderworkersets.leaderworkerset.x-k8s.io";

/// What `modelplane render -f examples/` prints, reviewed.
const RENDERED: &str = include_str!("golden/render/examples/output.snap");

fn example(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/fleet")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// examples/fleet/inference-clusters.yaml with each cluster's source
/// `Existing`, its kubeconfig in the Secret `<name>-kubeconfig`; nothing
/// else changed.
fn existing_clusters() -> String {
    let mut clusters = example("inference-clusters.yaml");
    for (name, region) in [("us-east", "us-east-1"), ("us-west", "us-west-2")] {
        let eks = format!("    source: EKS\n    eks:\n      region: {region}\n");
        assert!(
            clusters.contains(&eks),
            "{name}'s EKS source in the example"
        );
        clusters = clusters.replace(
            &eks,
            &format!(
                "    source: Existing\n    existing:\n      secretRef:\n        name: {name}-kubeconfig\n      cache:\n        storageClassName: efs-sc\n"
            ),
        );
    }
    clusters
}

/// The objects the render golden has on `cluster` whose names start with
/// `prefix`.
fn rendered(cluster: &str, prefix: &str) -> Vec<Value> {
    let section = RENDERED
        .split(&format!("# ---- cluster {cluster}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("{cluster} in the render golden"));
    let section = section.split("\n# ---- ").next().unwrap_or_default();
    section
        .split("\n---\n")
        .map(|d| d.trim_start_matches("---\n"))
        .filter(|d| d.contains("apiVersion:"))
        .map(|d| serde_saphyr::from_str::<Value>(d).expect("a rendered document"))
        .filter(|o| {
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect()
}

/// Where `observed` differs from `golden`: every field `golden` has must be
/// there with the same value (lists of the same length, item by item);
/// fields only `observed` has (what the server and the controller add:
/// uid, owner labels, managed fields) are not compared.
fn differs(golden: &Value, observed: &Value, at: &str) -> Option<String> {
    match (golden, observed) {
        (Value::Object(g), Value::Object(o)) => g.iter().find_map(|(key, value)| {
            differs(
                value,
                o.get(key).unwrap_or(&Value::Null),
                &format!("{at}.{key}"),
            )
        }),
        (Value::Array(g), Value::Array(o)) if g.len() == o.len() => g
            .iter()
            .zip(o)
            .enumerate()
            .find_map(|(i, (g, o))| differs(g, o, &format!("{at}[{i}]"))),
        _ if golden == observed => None,
        _ => Some(format!("{at}: rendered {golden}, applied {observed}")),
    }
}

fn condition_true(object: &Value, type_: &str) -> bool {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

/// `kind.group` as kubectl names a resource of `api_version`'s `kind`.
fn resource(api_version: &str, kind: &str) -> String {
    match api_version.split_once('/') {
        Some((group, _)) => format!("{}.{group}", kind.to_lowercase()),
        None => kind.to_lowercase(),
    }
}

fn modelplane(args: &[&str]) -> Process {
    Process(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .expect("modelplane starts"),
    )
}

/// POSTs a chat completion for `model` to the fleet gateway at `port`.
fn chat(port: u16, model: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "-H", "content-type: application/json", "-d"])
        .arg(
            serde_json::json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] })
                .to_string(),
        )
        .arg(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.contains("chat.completion").then_some(text)
}

/// A cluster of the example and where its edge gateway listens.
struct Edge {
    cluster: &'static str,
    port: u16,
    routes: std::path::PathBuf,
}

#[test]
fn the_example_fleet_on_existing_clusters_serves_what_render_prints_on_each_stack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    existing::control_plane(&server);
    for cluster in ["us-east", "us-west"] {
        existing::existing_cluster(&server, cluster, None);
    }
    server.apply(None, &example("namespace.yaml"));
    server.apply(None, &example("inference-classes.yaml"));
    server.apply(None, &existing_clusters());
    server.apply(None, &example("qwen3-8b.yaml"));
    server.apply(None, &example("qwen3-coder.yaml"));
    server.apply(
        None,
        "apiVersion: modelplane.ai/v1alpha1\nkind: InferenceGateway\nmetadata:\n  name: default\nspec: {}\n",
    );

    // The data plane: an engine-sim, each cluster's edge gateway in front of
    // it (routing what the composed HTTPRoutes route), the fleet gateway.
    let engine_port = free_port();
    let _engine = modelplane(&[
        "engine-sim",
        "--model",
        "qwen3-8b",
        "--listen",
        &format!("127.0.0.1:{engine_port}"),
    ]);
    let edges: Vec<Edge> = ["us-east", "us-west"]
        .into_iter()
        .map(|cluster| {
            let routes = dir.path().join(format!("edge-{cluster}"));
            std::fs::create_dir_all(&routes).expect("routes dir");
            Edge {
                cluster,
                port: free_port(),
                routes,
            }
        })
        .collect();
    let _edge_gateways: Vec<Process> = edges
        .iter()
        .map(|edge| {
            modelplane(&[
                "gateway",
                "--listen",
                &format!("127.0.0.1:{}", edge.port),
                "--reload-interval-ms",
                "100",
                "--config",
                edge.routes.to_str().expect("utf-8 path"),
            ])
        })
        .collect();
    let fleet_port = free_port();
    let _fleet_gateway = modelplane(&[
        "gateway",
        "--listen",
        &format!("127.0.0.1:{fleet_port}"),
        "--kubeconfig",
        server.kubeconfig.to_str().expect("utf-8 path"),
    ]);
    let _controller = Process(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["controller", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .args(["--gateway-address", "gateway.example:8080"])
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the controller starts"),
    );
    let addresses: Vec<(&str, String)> = edges
        .iter()
        .map(|e| (e.cluster, format!("127.0.0.1:{}", e.port)))
        .collect();
    let gateways: Vec<(&str, &str)> = addresses.iter().map(|(c, a)| (*c, a.as_str())).collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| existing::platform(&server, &stop, &gateways));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            steps(&server, &edges, engine_port, fleet_port)
        }));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}

/// The ModelReplicas of `deployment` in ml-team: `(cluster, name)`, sorted.
fn replicas_of(server: &Server, deployment: &str) -> Option<Vec<(String, String)>> {
    let selector = format!("modelplane.ai/deployment={deployment}");
    let list = get_json(
        server,
        None,
        &["get", "mr", "-n", "ml-team", "-l", &selector],
    )?;
    let mut placed: Vec<(String, String)> = list["items"]
        .as_array()?
        .iter()
        .filter_map(|r| {
            Some((
                r["spec"]["clusterName"].as_str()?.to_string(),
                r["metadata"]["name"].as_str()?.to_string(),
            ))
        })
        .collect();
    placed.sort();
    Some(placed)
}

fn steps(server: &Server, edges: &[Edge], engine_port: u16, fleet_port: u16) {
    for (cluster, stack) in [("us-east", "Standard"), ("us-west", "Dynamo")] {
        wait_for(&format!("{cluster} Ready on {stack}"), WAIT, || {
            let ic = get_json(server, None, &["get", "ic", cluster])?;
            (condition_true(&ic, "Ready") && ic["spec"]["stack"] == stack).then_some(())
        });
    }

    // One replica of the same manifest on each cluster.
    let replicas = wait_for("a qwen3-8b replica per cluster", WAIT, || {
        let placed = replicas_of(server, "qwen3-8b")?;
        (placed.len() == 2).then_some(placed)
    });
    assert_eq!(
        replicas.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>(),
        ["us-east", "us-west"]
    );

    // On each cluster, what render prints for that replica, field by field.
    for (cluster, replica) in &replicas {
        applies_what_render_prints(server, cluster, replica);
    }
    // The coder (its ModelCache staged on us-west: the Job completed and
    // the volume bound by the stand-in) on the Dynamo cluster, likewise.
    let coder = wait_for("the coder's replica", WAIT, || {
        match replicas_of(server, "qwen3-coder")?.as_slice() {
            [(cluster, name)] if cluster == "us-west" => Some(name.clone()),
            _ => None,
        }
    });
    applies_what_render_prints(server, "us-west", &coder);
    // Each stack its own engine workload: a Deployment on Standard, a Grove
    // PodCliqueSet on Dynamo, and nothing of either on the other.
    let podcliquesets = |cluster| {
        names(
            server,
            Some(cluster),
            &["get", "podcliquesets", "-n", "ml-team"],
        )
    };
    assert!(podcliquesets("us-east").is_empty());
    assert_eq!(
        podcliquesets("us-west").len(),
        2,
        "qwen3-8b's and the coder's"
    );

    // The workloads become ready as their readiness rules read them: the
    // Deployments Available, the PodCliqueSet's replicas available.
    for (cluster, _) in &replicas {
        let deployments = names(
            server,
            Some(cluster),
            &["get", "deployments", "-n", "ml-team"],
        );
        set_status(
            server,
            Some(cluster),
            Some("ml-team"),
            &deployments,
            AVAILABLE,
        );
    }
    set_status(
        server,
        Some("us-west"),
        Some("ml-team"),
        &podcliquesets("us-west"),
        r#"{"status":{"replicas":1,"availableReplicas":1}}"#,
    );
    wait_for("both replicas Ready", WAIT, || {
        replicas
            .iter()
            .all(|(_, r)| {
                get_json(server, None, &["get", "mr", r, "-n", "ml-team"])
                    .is_some_and(|o| condition_true(&o, "Ready"))
            })
            .then_some(())
    });

    // Each replica's endpoint at its cluster's gateway, both listed by the
    // ModelService's route on the fleet gateway.
    for (cluster, replica) in &replicas {
        let edge = edges
            .iter()
            .find(|e| e.cluster == cluster)
            .expect("an edge");
        let url = format!("http://127.0.0.1:{}/ml-team/{replica}/v1", edge.port);
        wait_for(&format!("{replica}'s endpoint at {url}"), WAIT, || {
            let list = get_json(server, None, &["get", "modelendpoints", "-n", "ml-team"])?;
            list["items"]
                .as_array()?
                .iter()
                .any(|e| e["spec"]["url"] == url.as_str())
                .then_some(())
        });
        // The edge gateway routes the replica's prefix to the engine, as the
        // composed HTTPRoute does on a real cluster.
        std::fs::write(
            edge.routes.join("routes.yaml"),
            format!(
                "apiVersion: modelplane.ai/v1alpha1\nkind: ModelService\nmetadata:\n  name: {replica}\n  namespace: ml-team\nspec:\n  endpoints:\n  - selector:\n      matchLabels:\n        edge: {replica}\n---\napiVersion: modelplane.ai/v1alpha1\nkind: ModelEndpoint\nmetadata:\n  name: {replica}\n  namespace: ml-team\n  labels:\n    edge: {replica}\nspec:\n  url: http://127.0.0.1:{engine_port}/\n  rewritePath: /\n"
            ),
        )
        .expect("edge routes");
    }
    wait_for("the ModelService routed over both endpoints", WAIT, || {
        let service = get_json(
            server,
            None,
            &["get", "modelservice", "qwen3-8b", "-n", "ml-team"],
        )?;
        let route = get_json(
            server,
            None,
            &[
                "get",
                "httproutes.gateway.networking.k8s.io",
                "qwen3-8b",
                "-n",
                "ml-team",
            ],
        )?;
        let backends: usize = route["spec"]["rules"]
            .as_array()?
            .iter()
            .map(|rule| rule["backendRefs"].as_array().map_or(0, Vec::len))
            .sum();
        (condition_true(&service, "RoutingReady")
            && service["status"]["address"] == "http://gateway.example:8080/ml-team/qwen3-8b"
            && backends == 2)
            .then_some(())
    });
    // The fleet gateway, fed by watches, spreads chat completions over both
    // replicas: the engine-sim answers through each cluster's edge.
    let answer = wait_for("a chat completion through the fleet gateway", WAIT, || {
        chat(fleet_port, "qwen3-8b")
    });
    assert!(answer.contains("qwen3-8b"), "{answer}");
    wait_for("an answer from each replica's cluster", WAIT, || {
        chat(fleet_port, "qwen3-8b")?;
        let metrics = http_get(fleet_port, "/metrics")?;
        replicas
            .iter()
            .all(|(_, replica)| {
                // The counter is published at 0 with the routing table:
                // answered means more than 0.
                metrics.lines().any(|l| {
                    l.starts_with("modelplane_gateway_requests_total{")
                        && l.contains(&format!("endpoint=\"ml-team/{replica}\""))
                        && l.contains("status=\"200\"")
                        && l.rsplit(' ')
                            .next()
                            .and_then(|n| n.parse::<f64>().ok())
                            .is_some_and(|n| n > 0.0)
                })
            })
            .then_some(())
    });
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5"])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// On `cluster`, `replica`'s objects are what render prints for it (the
/// golden), field by field, and no more.
fn applies_what_render_prints(server: &Server, cluster: &str, replica: &str) {
    let golden = rendered(cluster, &format!("{replica}-"))
        .into_iter()
        .chain(
            rendered(cluster, replica)
                .into_iter()
                .filter(|o| o["metadata"]["name"] == replica),
        )
        .collect::<Vec<_>>();
    assert!(
        golden.len() >= 8,
        "the golden has {replica}'s objects on {cluster}: {}",
        golden.len()
    );
    for object in &golden {
        let (kind, name) = (
            resource(
                object["apiVersion"].as_str().unwrap_or_default(),
                object["kind"].as_str().unwrap_or_default(),
            ),
            object["metadata"]["name"].as_str().unwrap_or_default(),
        );
        let applied = wait_for(&format!("{kind}/{name} on {cluster}"), WAIT, || {
            get_json(
                server,
                Some(cluster),
                &["get", &kind, name, "-n", "ml-team"],
            )
        });
        if let Some(difference) = differs(object, &applied, &format!("{kind}/{name}")) {
            panic!("on {cluster}, not what render prints: {difference}");
        }
        assert!(
            applied["metadata"]["labels"]["modelplane.ai/owner-uid"].is_string(),
            "{kind}/{name} on {cluster} is labelled with its owner"
        );
    }
    // …and nothing of it there that render does not print.
    let mut expected: Vec<String> = golden
        .iter()
        .map(|o| {
            let kind = resource(
                o["apiVersion"].as_str().unwrap_or_default(),
                o["kind"].as_str().unwrap_or_default(),
            );
            format!(
                "{kind}/{}",
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    expected.sort();
    let mut applied = names(
        server,
        Some(cluster),
        &[
            "get",
            ON_CLUSTER,
            "-n",
            "ml-team",
            "-l",
            "modelplane.ai/owner-uid",
        ],
    );
    applied.retain(|n| {
        let name = n.rsplit('/').next().unwrap_or_default();
        name == replica || name.starts_with(&format!("{replica}-"))
    });
    assert_eq!(applied, expected, "{replica}'s objects on {cluster}");
    println!(
        "{cluster}: {} objects of {replica} as rendered",
        golden.len()
    );
}
