//! The simulated fleet driven by what `modelplane render` prints, applied
//! with kubectl as a user would (no controller runs): the clouds provision
//! both example clusters, their stacks install, every engine pod runs, and
//! each replica's cluster gateway streams tokens from an engine-sim serving
//! the name its manifest's command gives.

mod common;

use common::condition;

use std::io::{Read, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Process, Server, wait_for};
use serde_json::Value;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/fleet");

fn modelplane(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .args(args)
        .output()
        .expect("modelplane runs");
    assert!(
        out.status.success(),
        "modelplane {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `modelplane sim` against `server`, once it has installed Crossplane's
/// kinds (the Fault CRD is its last).
fn sim(server: &Server) -> Process {
    let process = Process(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["sim", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .args(["--time-scale", "5"])
            .env("RUST_LOG", "warn")
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the simulator"),
    );
    wait_for("the simulator's CRDs", Duration::from_secs(60), || {
        let (ok, _, _) = server.kubectl_in(None, &["get", "crd", "faults.sim.modelplane.ai"], None);
        ok.then_some(())
    });
    process
}

fn get_json(server: &Server, cluster: Option<&str>, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let (ok, out, _) = server.kubectl_in(cluster, &all, None);
    ok.then(|| serde_json::from_str(&out).ok()).flatten()
}

/// Every object as one multi-document stream, as `kubectl apply -f -` reads it.
fn documents(objects: &[Value]) -> String {
    objects.iter().map(|o| format!("---\n{o}\n")).collect()
}

/// An HTTP/1.1 request to `address`; the status and the body as received.
fn post(address: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, response))
}

fn platform_ready(server: &Server) {
    for cluster in ["us-east", "us-west"] {
        wait_for(
            &format!("cluster {cluster} provisioned"),
            Duration::from_secs(60),
            || {
                let (ok, _, _) = server.kubectl_in(None, &["get", "logicalcluster", cluster], None);
                ok.then_some(())
            },
        );
    }
    wait_for(
        "every Helm release installed",
        Duration::from_secs(60),
        || {
            let releases = get_json(
                server,
                None,
                &["releases.helm.m.crossplane.io", "-n", "modelplane-system"],
            )?;
            let items = releases["items"].as_array()?;
            (!items.is_empty()
                && items
                    .iter()
                    .all(|r| condition(r, "Ready").as_deref() == Some("True")))
            .then_some(())
        },
    );
}

/// `text` without its cluster selectors (a `clusterSelector:` line and
/// the two below it).
fn without_cluster_selector(text: &str) -> String {
    let mut out = Vec::new();
    let mut skip = 0;
    for line in text.lines() {
        if line.trim_start() == "clusterSelector:" {
            skip = 3;
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        out.push(line);
    }
    out.join("\n") + "\n"
}

/// us-east's L4 pool with a second node, for an evicted engine to move to.
fn with_a_spare_l4_node(text: &str) -> String {
    text.replacen(
        "nodeCount: 1\n    zones: [us-east-1a]\n",
        "nodeCount: 2\n    zones: [us-east-1a, us-east-1b]\n",
        1,
    )
}

/// The example fleet with its deployments unpinned (placed by the
/// scheduler alone, as this test's placements expect) and a spare L4
/// node on us-east, in `dir`.
fn unpinned_examples(dir: &std::path::Path) -> String {
    let fleet = dir.join("examples");
    std::fs::create_dir_all(&fleet).expect("examples dir");
    for entry in std::fs::read_dir(EXAMPLES).expect("examples") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read example");
        std::fs::write(
            fleet.join(path.file_name().expect("name")),
            with_a_spare_l4_node(&without_cluster_selector(&text)),
        )
        .expect("write example");
    }
    fleet.display().to_string()
}

/// The example fleet, rendered and applied, with the simulator running;
/// returns what render printed once every Helm release is installed.
fn example_fleet(server: &Server) -> Value {
    let examples = unpinned_examples(&server.dir);
    let examples = examples.as_str();
    server.apply(None, &modelplane(&["crds"]));
    server.apply(
        None,
        &modelplane(&["providers", "-f", examples, "-o", "yaml"]),
    );
    server.apply(
        None,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: modelplane-system\n",
    );
    let (ok, out, err) = server.kubectl_in(None, &["apply", "-f", examples], None);
    assert!(ok, "{out}{err}");
    let rendered: Value =
        serde_json::from_str(&modelplane(&["render", "-f", examples, "-o", "json"])).expect("json");
    let control: Vec<Value> = rendered["controlPlane"]
        .as_array()
        .expect("control plane objects")
        .iter()
        .filter(|o| o["kind"] != "ModelReplica")
        .cloned()
        .collect();
    server.apply(None, &documents(&control));
    platform_ready(server);
    rendered
}

/// Each cluster's workloads applied, as the controller would, and every engine Ready.
fn workloads_up(server: &Server, rendered: &Value) {
    for (cluster, objects) in rendered["clusters"].as_object().expect("clusters") {
        // The cache's storage class, as the controller applies it once the
        // cloud's file system is known.
        server.apply(Some(cluster), "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: modelplane-rwx-efs\nprovisioner: efs.csi.aws.com\n");
        server.apply(
            Some(cluster),
            &documents(objects.as_array().expect("objects")),
        );
    }
    for cluster in ["us-east", "us-west"] {
        wait_for(
            &format!("every engine pod of {cluster} Ready"),
            Duration::from_secs(120),
            || {
                let pods = get_json(server, Some(cluster), &["pods", "-n", "ml-team"])?;
                let items = pods["items"].as_array()?;
                let engines: Vec<&Value> = items
                    .iter()
                    .filter(|p| p["metadata"]["labels"]["modelplane.ai/serving"].is_string())
                    .collect();
                (!engines.is_empty()
                    && engines
                        .iter()
                        .all(|p| condition(p, "Ready").as_deref() == Some("True")))
                .then_some(())
            },
        );
    }
}

#[test]
fn the_simulator_runs_the_rendered_example_fleet_and_every_replica_streams_tokens() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path());
    let _sim = sim(&server);
    let rendered = example_fleet(&server);

    // Every managed resource is Ready, nodes joined with their pools' labels and taints.
    let vpcs = get_json(
        &server,
        None,
        &["vpcs.ec2.aws.m.upbound.io", "-n", "modelplane-system"],
    )
    .expect("vpcs");
    assert!(vpcs["items"].as_array().is_some_and(|v| {
        v.len() == 2
            && v.iter()
                .all(|o| condition(o, "Ready").as_deref() == Some("True"))
    }));
    let nodes = get_json(&server, Some("us-east"), &["nodes"]).expect("nodes");
    let l4 = nodes["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|n| n["metadata"]["labels"]["modelplane.ai/pool"] == "l4")
        .count();
    assert_eq!(l4, 2, "the l4 pool's two nodes");

    workloads_up(&server, &rendered);

    // Each replica's route, through its cluster's gateway, to the model its command serves.
    let mut streamed = 0;
    for (cluster, objects) in rendered["clusters"].as_object().expect("clusters") {
        let gateway = get_json(
            &server,
            Some(cluster),
            &["gateway", "-n", "modelplane-system", "inference-gateway"],
        )
        .expect("gateway");
        let address = gateway["status"]["addresses"][0]["value"]
            .as_str()
            .expect("an address")
            .to_string();
        for route in objects
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| o["kind"] == "HTTPRoute")
        {
            let prefix = route["spec"]["rules"][0]["matches"][0]["path"]["value"]
                .as_str()
                .expect("prefix");
            let model = if prefix.contains("coder") {
                "qwen3-coder"
            } else {
                "qwen3-8b"
            };
            let body = format!(
                r#"{{"model":"{model}","stream":true,"max_tokens":4,"messages":[{{"role":"user","content":"hi"}}]}}"#
            );
            let (status, response) = wait_for(
                &format!("{cluster}{prefix} answers"),
                Duration::from_secs(30),
                || {
                    post(&address, &format!("{prefix}v1/chat/completions"), &body)
                        .filter(|(s, _)| *s == 200)
                },
            );
            assert_eq!(status, 200);
            assert!(
                response.contains(&format!(r#""model":"{model}""#)),
                "{response}"
            );
            assert!(response.contains("data: [DONE]"), "streamed: {response}");
            streamed += 1;
        }
    }
    let routes = rendered["clusters"]
        .as_object()
        .expect("clusters")
        .values()
        .flat_map(|o| o.as_array().cloned().unwrap_or_default())
        .filter(|o| o["kind"] == "HTTPRoute")
        .count();
    assert!(
        routes >= 2 && streamed == routes,
        "a stream through every rendered route: {streamed} of {routes}"
    );
    // The hydration Job ran and completed on each cluster.
    for cluster in ["us-east", "us-west"] {
        let jobs = get_json(&server, Some(cluster), &["jobs", "-n", "ml-team"]).expect("jobs");
        let jobs = jobs["items"].as_array().cloned().unwrap_or_default();
        assert!(
            !jobs.is_empty()
                && jobs
                    .iter()
                    .all(|job| condition(job, "Complete").as_deref() == Some("True")),
            "{cluster}: a hydration Job, complete: {jobs:?}"
        );
    }
}

/// Two clusters with the same hardware, one per stack, and the v0.4
/// qwen3-coder manifest with one replica on each.
fn coder_fleet(dir: &std::path::Path) -> std::path::PathBuf {
    let fleet = dir.join("fleet");
    std::fs::create_dir_all(&fleet).expect("fleet dir");
    for file in ["namespace.yaml", "inference-classes.yaml"] {
        std::fs::copy(format!("{EXAMPLES}/{file}"), fleet.join(file)).expect("copy");
    }
    let coder = std::fs::read_to_string(format!("{EXAMPLES}/qwen3-coder.yaml")).expect("coder");
    std::fs::write(
        fleet.join("qwen3-coder.yaml"),
        without_cluster_selector(&coder.replacen("  replicas: 1\n", "  replicas: 2\n", 1)),
    )
    .expect("write");
    let cluster = |name: &str, stack: &str, region: &str| {
        format!(
            "apiVersion: modelplane.ai/v1alpha1\nkind: InferenceCluster\nmetadata:\n  name: {name}\nspec:\n  stack: {stack}\n  cluster:\n    source: EKS\n    eks:\n      region: {region}\n  nodePools:\n  - name: h200\n    className: h200-8x\n    nodeCount: 2\n    zones: [{region}a]\n    fabric:\n      type: EFA\n---\n"
        )
    };
    std::fs::write(
        fleet.join("clusters.yaml"),
        cluster("standard", "Standard", "us-east-1") + &cluster("dynamo", "Dynamo", "us-west-2"),
    )
    .expect("write");
    fleet
}

fn pods(server: &Server, cluster: &str) -> Vec<Value> {
    get_json(server, Some(cluster), &["pods", "-n", "ml-team"])
        .and_then(|p| p["items"].as_array().cloned())
        .unwrap_or_default()
}

fn engine_pods(server: &Server, cluster: &str) -> Vec<Value> {
    pods(server, cluster)
        .into_iter()
        .filter(|p| p["spec"]["containers"][0]["name"] == "engine")
        .collect()
}

fn without_alias(mut object: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                if let Some(Value::Array(env)) = map.get_mut("env") {
                    env.retain(|e| e["name"] != "MODELPLANE_LEADER_ADDRESS");
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut object["spec"]);
    object
}

/// The v0.4 qwen3-coder manifest (Leader + Worker, `$(MODELPLANE_LEADER_ADDRESS)`
/// in both commands) runs on a Standard (LeaderWorkerSet) and a Dynamo
/// (Grove + KAI) cluster alike: the worker reaches its leader through the
/// alias and the leader serves. With the alias's env entry removed, the
/// kubelet leaves `$(MODELPLANE_LEADER_ADDRESS)` as written, the shell's
/// command substitution gives nothing, and vLLM refuses the empty address
/// on both stacks: CrashLoopBackOff, the engine's error in `kubectl logs`.
#[test]
fn the_qwen3_coder_manifest_runs_on_both_stacks_and_crashes_on_both_without_its_alias() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fleet = coder_fleet(dir.path());
    let fleet = fleet.to_str().expect("utf-8");
    let server = Server::start(dir.path());
    server.apply(None, &modelplane(&["crds"]));
    let _sim = sim(&server);
    server.apply(None, &modelplane(&["providers", "-f", fleet, "-o", "yaml"]));
    server.apply(
        None,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: modelplane-system\n",
    );
    let (ok, out, err) = server.kubectl_in(None, &["apply", "-f", fleet], None);
    assert!(ok, "{out}{err}");
    let rendered: Value =
        serde_json::from_str(&modelplane(&["render", "-f", fleet, "-o", "json"])).expect("json");
    let control: Vec<Value> = rendered["controlPlane"]
        .as_array()
        .expect("objects")
        .iter()
        .filter(|o| o["kind"] != "ModelReplica")
        .cloned()
        .collect();
    server.apply(None, &documents(&control));
    for cluster in ["standard", "dynamo"] {
        wait_for(
            &format!("cluster {cluster}"),
            Duration::from_secs(60),
            || {
                server
                    .kubectl_in(None, &["get", "logicalcluster", cluster], None)
                    .0
                    .then_some(())
            },
        );
    }
    wait_for(
        "every Helm release installed",
        Duration::from_secs(60),
        || {
            let releases = get_json(
                &server,
                None,
                &["releases.helm.m.crossplane.io", "-n", "modelplane-system"],
            )?;
            let items = releases["items"].as_array()?;
            (!items.is_empty()
                && items
                    .iter()
                    .all(|r| condition(r, "Ready").as_deref() == Some("True")))
            .then_some(())
        },
    );
    let clusters = rendered["clusters"].as_object().expect("clusters").clone();
    assert!(
        clusters.contains_key("standard") && clusters.contains_key("dynamo"),
        "a replica on each: {:?}",
        clusters.keys()
    );
    for (cluster, objects) in &clusters {
        server.apply(Some(cluster), "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: modelplane-rwx-efs\nprovisioner: efs.csi.aws.com\n");
        server.apply(
            Some(cluster),
            &documents(objects.as_array().expect("objects")),
        );
    }
    for (cluster, objects) in &clusters {
        wait_for(
            &format!("the coder's two engine pods on {cluster} Ready"),
            Duration::from_secs(120),
            || {
                let engines = engine_pods(&server, cluster);
                (engines.len() == 2
                    && engines
                        .iter()
                        .all(|p| condition(p, "Ready").as_deref() == Some("True")))
                .then_some(())
            },
        );
        let gateway = get_json(
            &server,
            Some(cluster),
            &["gateway", "-n", "modelplane-system", "inference-gateway"],
        )
        .expect("gateway");
        let address = gateway["status"]["addresses"][0]["value"]
            .as_str()
            .expect("address")
            .to_string();
        let route = objects
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["kind"] == "HTTPRoute")
            .expect("a route");
        let prefix = route["spec"]["rules"][0]["matches"][0]["path"]["value"]
            .as_str()
            .expect("prefix");
        let body = r#"{"model":"qwen3-coder","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}"#;
        let (_, response) = wait_for(
            &format!("{cluster} serves qwen3-coder"),
            Duration::from_secs(30),
            || {
                post(&address, &format!("{prefix}v1/chat/completions"), body)
                    .filter(|(s, _)| *s == 200)
            },
        );
        assert!(
            response.contains(r#""model":"qwen3-coder""#) && response.contains("data: [DONE]"),
            "{response}"
        );
    }

    // The same workloads without the alias's env entry.
    for (cluster, objects) in &clusters {
        let workload = objects
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["kind"] == "LeaderWorkerSet" || o["kind"] == "PodCliqueSet")
            .expect("a workload")
            .clone();
        let kind = workload["kind"].as_str().expect("kind").to_lowercase();
        let name = workload["metadata"]["name"].as_str().expect("name");
        let (ok, out, err) = server.kubectl_in(
            Some(cluster),
            &["delete", &kind, name, "-n", "ml-team", "--wait=false"],
            None,
        );
        assert!(ok, "{out}{err}");
        wait_for(
            &format!("{cluster}: the old engine pods gone"),
            Duration::from_secs(30),
            || engine_pods(&server, cluster).is_empty().then_some(()),
        );
        server.apply(Some(cluster), &documents(&[without_alias(workload)]));
    }
    for cluster in clusters.keys() {
        // A crashed container's log, read while its pod is there (LWS
        // recreates a group whose container restarted, so keep looking).
        let log = wait_for(
            &format!("{cluster}: a crash-looping engine's log"),
            Duration::from_secs(60),
            || {
                let engines = engine_pods(&server, cluster);
                let crashed = engines.iter().find(|p| {
                    p["status"]["containerStatuses"][0]["restartCount"]
                        .as_u64()
                        .unwrap_or(0)
                        >= 1
                        && p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                            == "CrashLoopBackOff"
                })?;
                let pod = crashed["metadata"]["name"].as_str()?;
                let (ok, log, _) = server.kubectl_in(
                    Some(cluster),
                    &["logs", pod, "-n", "ml-team", "--previous"],
                    None,
                );
                ok.then_some(log)
            },
        );
        assert!(
            log.contains("sh: 1: MODELPLANE_LEADER_ADDRESS: not found"),
            "{cluster}: {log}"
        );
        assert!(
            log.contains("Invalid master address ''"),
            "{cluster}: {log}"
        );
        assert!(
            engine_pods(&server, cluster)
                .iter()
                .all(|p| condition(p, "Ready").as_deref() != Some("True")),
            "{cluster}: nothing serves"
        );
    }
}

fn sim_command(server: &Server, args: &[&str]) -> String {
    let mut all = vec!["sim"];
    all.extend_from_slice(args);
    let kubeconfig = server.kubeconfig.to_str().expect("utf-8").to_string();
    all.extend_from_slice(&["--kubeconfig", &kubeconfig]);
    modelplane(&all)
}

fn serving_pod(server: &Server, cluster: &str, serving_prefix: &str) -> Option<Value> {
    pods(server, cluster).into_iter().find(|p| {
        p["metadata"]["labels"]["modelplane.ai/serving"]
            .as_str()
            .is_some_and(|s| s.starts_with(serving_prefix))
            && condition(p, "Ready").as_deref() == Some("True")
            && p["metadata"]["deletionTimestamp"].is_null()
    })
}

/// Faults, injected with `modelplane sim fault` and healed with `heal`, as
/// the real parts fail: a NoExecute taint evicts the replica's pod and its
/// Deployment places it again on the pool's other node; a killed engine
/// restarts and serves again; an unreachable cluster refuses whoever uses
/// its connection Secret's kubeconfig while its pods keep running; a
/// provider scaled to 0 reconciles nothing (no status, the Provider not
/// Healthy) until it runs again.
#[test]
fn injected_faults_break_what_they_name_and_heal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path());
    let _sim = sim(&server);
    let rendered = example_fleet(&server);
    workloads_up(&server, &rendered);

    // A NoExecute taint on the node of us-east's qwen3-8b engine.
    let pod = serving_pod(&server, "us-east", "qwen3-8b").expect("the qwen3-8b engine");
    let (name, node) = (
        pod["metadata"]["name"].as_str().expect("name").to_string(),
        pod["spec"]["nodeName"].as_str().expect("node").to_string(),
    );
    let out = sim_command(
        &server,
        &[
            "fault",
            "node-taint",
            "--cluster",
            "us-east",
            "--node",
            &node,
        ],
    );
    assert!(out.contains("injected"), "{out}");
    let replaced = wait_for(
        "the engine evicted and placed again",
        Duration::from_secs(60),
        || {
            serving_pod(&server, "us-east", "qwen3-8b")
                .filter(|p| p["metadata"]["name"] != name.as_str())
        },
    );
    assert_ne!(
        replaced["spec"]["nodeName"],
        node.as_str(),
        "not on the tainted node"
    );
    let faults = server.kubectl(&["get", "faults"]);
    assert!(
        faults.contains("node-taint-us-east-") && faults.contains("True"),
        "{faults}"
    );
    sim_command(&server, &["heal", &format!("node-taint-us-east-{node}")]);
    wait_for("the taint gone", Duration::from_secs(30), || {
        let n = get_json(&server, Some("us-east"), &["node", &node])?;
        n["spec"]["taints"]
            .as_array()?
            .iter()
            .all(|t| t["key"] != "sim.modelplane.ai/drain")
            .then_some(())
    });

    // An engine killed: it restarts and serves again.
    let pod = serving_pod(&server, "us-west", "qwen3-8b").expect("the Dynamo qwen3-8b engine");
    let pod_name = pod["metadata"]["name"].as_str().expect("name").to_string();
    sim_command(
        &server,
        &[
            "fault",
            "kill-engine",
            "--cluster",
            "us-west",
            "--pod",
            &format!("ml-team/{pod_name}"),
        ],
    );
    wait_for(
        "the killed engine restarted and Ready",
        Duration::from_secs(60),
        || {
            let p = get_json(
                &server,
                Some("us-west"),
                &["pod", &pod_name, "-n", "ml-team"],
            )?;
            (p["status"]["containerStatuses"][0]["restartCount"].as_u64()? >= 1
                && condition(&p, "Ready").as_deref() == Some("True"))
            .then_some(())
        },
    );

    // us-east unreachable through its connection Secret's kubeconfig.
    let secret = get_json(
        &server,
        None,
        &[
            "secret",
            "-n",
            "modelplane-system",
            "us-east-kubeconfig-4bdef",
        ],
    )
    .expect("the connection secret");
    let kubeconfig = String::from_utf8(base64_decode(
        secret["data"]["kubeconfig"].as_str().expect("kubeconfig"),
    ))
    .expect("utf-8");
    let path = dir.path().join("us-east.kubeconfig");
    std::fs::write(&path, kubeconfig).expect("write");
    let through_secret = || {
        Command::new(common::kubectl())
            .arg("--kubeconfig")
            .arg(&path)
            .args(["get", "nodes", "--request-timeout=3s"])
            .output()
            .expect("kubectl")
            .status
            .success()
    };
    assert!(through_secret(), "reachable before the fault");
    sim_command(&server, &["fault", "unreachable", "--cluster", "us-east"]);
    wait_for("us-east unreachable", Duration::from_secs(10), || {
        (!through_secret()).then_some(())
    });
    assert!(
        serving_pod(&server, "us-east", "qwen3-8b").is_some(),
        "its pods keep running"
    );
    sim_command(&server, &["heal", "unreachable-us-east"]);
    wait_for("us-east reachable again", Duration::from_secs(10), || {
        through_secret().then_some(())
    });

    // provider-aws-ec2 scaled to 0: a new VPC is not reconciled.
    server.kubectl(&[
        "patch",
        "deploymentruntimeconfig",
        "provider-aws-ec2",
        "--type=merge",
        "-p",
        r#"{"spec":{"deploymentTemplate":{"spec":{"replicas":0}}}}"#,
    ]);
    wait_for(
        "provider-aws-ec2 not Healthy",
        Duration::from_secs(10),
        || {
            let p = get_json(&server, None, &["provider", "provider-aws-ec2"])?;
            (condition(&p, "Healthy").as_deref() == Some("False")).then_some(())
        },
    );
    server.apply(None, "apiVersion: ec2.aws.m.upbound.io/v1beta1\nkind: VPC\nmetadata:\n  name: extra\n  namespace: modelplane-system\nspec:\n  forProvider:\n    region: us-east-1\n    cidrBlock: 10.9.0.0/16\n");
    std::thread::sleep(Duration::from_secs(2));
    let vpc = get_json(
        &server,
        None,
        &[
            "vpc.ec2.aws.m.upbound.io",
            "extra",
            "-n",
            "modelplane-system",
        ],
    )
    .expect("vpc");
    assert!(
        vpc["status"]["conditions"].is_null(),
        "nothing reconciles it: {vpc}"
    );
    server.kubectl(&[
        "patch",
        "deploymentruntimeconfig",
        "provider-aws-ec2",
        "--type=merge",
        "-p",
        r#"{"spec":{"deploymentTemplate":{"spec":{"replicas":1}}}}"#,
    ]);
    wait_for(
        "the VPC Ready once its provider runs",
        Duration::from_secs(20),
        || {
            let v = get_json(
                &server,
                None,
                &[
                    "vpc.ec2.aws.m.upbound.io",
                    "extra",
                    "-n",
                    "modelplane-system",
                ],
            )?;
            (condition(&v, "Ready").as_deref() == Some("True")).then_some(())
        },
    );
}

/// The EKS provider, running, as compose installs it.
fn eks_provider() -> String {
    documents(&[
        serde_json::json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "modelplane-system" } }),
        serde_json::json!({ "apiVersion": "pkg.crossplane.io/v1beta1", "kind": "DeploymentRuntimeConfig",
            "metadata": { "name": "provider-aws-eks" },
            "spec": { "deploymentTemplate": { "spec": { "replicas": 1, "selector": {}, "template": {} } } } }),
        serde_json::json!({ "apiVersion": "pkg.crossplane.io/v1", "kind": "Provider", "metadata": { "name": "provider-aws-eks" },
            "spec": { "package": "xpkg.crossplane.io/crossplane-contrib/provider-aws-eks:v2.6.0",
                "runtimeConfigRef": { "name": "provider-aws-eks" } } }),
    ])
}

/// An EKS cluster's managed resources: its `Cluster`, its `ClusterAuth`
/// (which writes the kubeconfig Secret `<name>-kubeconfig`) and, given a
/// node count, one `NodeGroup` of that many nodes.
fn eks_cluster(name: &str, nodes: Option<u32>) -> String {
    let managed = |kind: &str, object: &str, for_provider: Value| {
        serde_json::json!({
            "apiVersion": "eks.aws.m.upbound.io/v1beta1", "kind": kind,
            "metadata": { "name": object, "namespace": "modelplane-system", "labels": { "modelplane.ai/cluster": name } },
            "spec": { "providerConfigRef": { "kind": "ClusterProviderConfig", "name": "default" }, "forProvider": for_provider },
        })
    };
    let cluster_ref = serde_json::json!({ "name": format!("{name}-cluster") });
    let mut objects = vec![
        managed(
            "Cluster",
            &format!("{name}-cluster"),
            serde_json::json!({ "region": "us-east-1" }),
        ),
        managed(
            "ClusterAuth",
            &format!("{name}-auth"),
            serde_json::json!({ "region": "us-east-1", "clusterNameRef": cluster_ref }),
        ),
    ];
    objects[1]["spec"]["writeConnectionSecretToRef"] =
        serde_json::json!({ "name": format!("{name}-kubeconfig") });
    if let Some(nodes) = nodes {
        objects.push(managed(
            "NodeGroup",
            &format!("{name}-pool"),
            serde_json::json!({
                "region": "us-east-1", "clusterNameRef": cluster_ref, "instanceTypes": ["m6i.xlarge"],
                "scalingConfig": { "desiredSize": nodes, "minSize": 0, "maxSize": nodes },
            }),
        ));
    }
    documents(&objects)
}

/// How many nodes cluster `cluster` has; None if it cannot be listed.
fn node_count(server: &Server, cluster: &str) -> Option<usize> {
    let (ok, out, _) = server.kubectl_in(Some(cluster), &["get", "nodes", "-o", "name"], None);
    ok.then(|| out.lines().count())
}

/// The simulated cloud goes on with the rest of the fleet while a pool's
/// nodes register: a cluster declared meanwhile answers before that pool
/// is whole. (It once carried out its steps a batch at a time, each batch
/// waiting for its slowest step: at a thousand clusters, kubeconfigs came
/// in bursts, tens of seconds apart, behind node registrations.)
#[test]
fn a_pool_registering_its_nodes_holds_up_no_other_cluster() {
    const NODES: u32 = 4000;
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path());
    let _sim = sim(&server);
    server.apply(None, &eks_provider());
    server.apply(None, &eks_cluster("first", Some(NODES)));
    wait_for(
        "the first cluster's nodes registering",
        Duration::from_secs(60),
        || node_count(&server, "first").filter(|n| *n > 0),
    );
    server.apply(None, &eks_cluster("second", None));
    wait_for(
        "the second cluster's kubeconfig",
        Duration::from_secs(60),
        || {
            let (ok, _, _) = server.kubectl_in(
                None,
                &[
                    "get",
                    "secret",
                    "second-kubeconfig",
                    "-n",
                    "modelplane-system",
                ],
                None,
            );
            ok.then_some(())
        },
    );
    let registered = node_count(&server, "first").expect("the first cluster's nodes listed");
    assert!(
        registered < NODES as usize,
        "the second cluster answered only once the first's {NODES} nodes had all registered"
    );
}

fn base64_decode(text: &str) -> Vec<u8> {
    let out = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("base64");
    let mut child = out;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    child.wait_with_output().expect("base64").stdout
}
