//! `modelplane up --example` under what goes wrong, seen as a user sees it:
//! a deployment no pool fits says why per cluster and pool and is placed
//! once fixed; a workload cluster whose API stops answering deletes
//! nothing, its replicas say why and keep serving, and the fleet converges
//! without restarting a serving pod; an engine killed mid-stream ends the
//! stream at once, restarts, and serves again; the GKE providers run only
//! while a GKE cluster exists; scaling and draining a node under load lose
//! nothing the gateway had not sent to the drained engine; a second coder
//! replica loads its weights from its peer.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::up::{Up, free_port, up};
use common::wait_for;
use serde_json::Value;

fn json(up: &Up, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&up.kubectl(&all)).expect("kubectl prints JSON")
}

fn items(value: &Value) -> Vec<Value> {
    value["items"].as_array().cloned().unwrap_or_default()
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// `name → uid` of what `args` lists.
fn uids(list: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = items(list)
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                o["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

const UNPLACEABLE: &str = r#"
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: qwen3-big
  namespace: ml-team
spec:
  replicas: 1
  template:
    spec:
      engines:
      - name: big
        members:
        - role: Standalone
          nodeSelector:
            devices:
            - name: gpu
              selectors:
              - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("MEMORY")) >= 0
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                args: ["--model=Qwen/Qwen3-32B", "--served-model-name=qwen3-big"]
"#;

fn why_not_placed_then_placed(up: &Up) {
    up.apply(&UNPLACEABLE.replace("MEMORY", "200Gi"));
    let described = wait_for(
        "kubectl describe to say why",
        Duration::from_secs(60),
        || {
            let text = up.kubectl(&["describe", "md", "qwen3-big", "-n", "ml-team"]);
            text.contains("FailedScheduling").then_some(text)
        },
    );
    for (place, why) in [
        ("us-east/l4", "matches no device; closest"),
        ("us-east/h200", "matches no device; closest"),
        ("us-west/l4", "matches no device; closest"),
        ("us-west/h200", "matches no device; closest"),
    ] {
        assert!(
            described.contains(place) && described.contains(why),
            "describe names {place}: {described}"
        );
    }
    assert!(
        described.contains("200Gi"),
        "the failing selector: {described}"
    );
    up.apply(&UNPLACEABLE.replace("MEMORY", "100Gi"));
    wait_for(
        "the fixed deployment placed",
        Duration::from_secs(60),
        || {
            let replicas = up.kubectl(&["get", "mr", "-n", "ml-team"]);
            replicas.contains("qwen3-big-").then_some(())
        },
    );
    up.kubectl(&["delete", "md", "qwen3-big", "-n", "ml-team"]);
    wait_for("its replica gone", Duration::from_secs(60), || {
        let replicas = up.kubectl(&["get", "mr", "-n", "ml-team"]);
        (!replicas.contains("qwen3-big-")).then_some(())
    });
    // And its pods, wherever it ran, so what follows sees only the rest.
    wait_for("its pods gone", Duration::from_secs(60), || {
        ["us-east", "us-west"]
            .iter()
            .all(|cluster| {
                !up.kubectl_on(cluster, &["get", "pods", "-n", "ml-team", "-o", "name"])
                    .contains("qwen3-big-")
            })
            .then_some(())
    });
}

fn an_unreachable_cluster_deletes_nothing(up: &Up) {
    let replicas_before = uids(&json(up, &["get", "mr", "-n", "ml-team"]));
    let pods = |up: &Up| -> Value {
        serde_json::from_str(
            &up.kubectl_on("us-east", &["get", "pods", "-n", "ml-team", "-o", "json"]),
        )
        .expect("pods")
    };
    let pods_before = uids(&pods(up));
    up.sim(&["fault", "unreachable", "--cluster", "us-east"]);
    let message = wait_for("the replicas to say why", Duration::from_secs(90), || {
        let list = json(
            up,
            &[
                "get",
                "mr",
                "-n",
                "ml-team",
                "-l",
                "modelplane.ai/cluster=us-east",
            ],
        );
        let all = items(&list);
        let messages: Vec<String> = all
            .iter()
            .filter_map(|r| condition(r, "Synced"))
            .filter(|c| c["status"] == "False")
            .filter_map(|c| c["message"].as_str().map(str::to_string))
            .filter(|m| m.contains("does not answer"))
            .collect();
        (!all.is_empty() && messages.len() == all.len()).then(|| messages[0].clone())
    });
    assert!(message.contains("cluster us-east"), "{message}");
    // Serving goes on: the cluster's data plane is not its API.
    for _ in 0..5 {
        up.streams("/ml-team/qwen3-8b/v1/chat/completions", "qwen3-8b");
    }
    assert_eq!(
        uids(&json(up, &["get", "mr", "-n", "ml-team"])),
        replicas_before
    );
    up.sim(&["heal", "unreachable-us-east"]);
    wait_for("the replicas synced again", Duration::from_secs(90), || {
        let list = json(
            up,
            &[
                "get",
                "mr",
                "-n",
                "ml-team",
                "-l",
                "modelplane.ai/cluster=us-east",
            ],
        );
        items(&list)
            .iter()
            .all(|r| condition(r, "Synced").is_some_and(|c| c["status"] == "True"))
            .then_some(())
    });
    assert_eq!(
        uids(&json(up, &["get", "mr", "-n", "ml-team"])),
        replicas_before
    );
    let after = pods(up);
    assert_eq!(uids(&after), pods_before, "no serving pod replaced");
    for pod in items(&after) {
        assert_eq!(
            pod["status"]["containerStatuses"][0]["restartCount"], 0,
            "no serving pod restarted: {}",
            pod["metadata"]["name"]
        );
    }
}

fn a_killed_engine_ends_its_stream_and_serves_again(up: &Up) {
    let gateway = up.gateway.clone();
    let started = Instant::now();
    let stream = std::thread::spawn(move || {
        let body = r#"{"model":"qwen3-coder","stream":true,"max_tokens":4000,"messages":[{"role":"user","content":"A long answer"}]}"#;
        let out = Command::new("curl")
            .args([
                "-sN",
                "--max-time",
                "60",
                "-H",
                "content-type: application/json",
                "-d",
                body,
            ])
            .arg(format!(
                "http://{gateway}/ml-team/qwen3-coder/v1/chat/completions"
            ))
            .output()
            .expect("curl runs");
        (
            Instant::now(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    });
    std::thread::sleep(Duration::from_secs(2));
    let pods = up.kubectl_on("us-west", &["get", "pods", "-n", "ml-team", "-o", "name"]);
    let leader = pods
        .lines()
        .find(|p| p.contains("qwen3-coder") && p.contains("leader"))
        .unwrap_or_else(|| panic!("the coder's leader pod: {pods}"))
        .trim_start_matches("pod/")
        .to_string();
    let killed_at = Instant::now();
    up.sim(&[
        "fault",
        "kill-engine",
        "--cluster",
        "us-west",
        "--pod",
        &format!("ml-team/{leader}"),
    ]);
    let (ended, text) = stream.join().expect("the stream thread");
    assert!(
        text.contains("chat.completion.chunk"),
        "it streamed first: {text}"
    );
    assert!(
        !text.contains("data: [DONE]"),
        "the stream did not complete: {text}"
    );
    assert!(
        ended.duration_since(killed_at) < Duration::from_secs(10),
        "the client learns at once (ended {:?} after the kill, {:?} after it began)",
        ended.duration_since(killed_at),
        ended.duration_since(started)
    );
    wait_for("the coder to serve again", Duration::from_secs(240), || {
        let text = up.stream("/ml-team/qwen3-coder/v1/chat/completions", "qwen3-coder");
        text.contains("data: [DONE]").then_some(())
    });
    let restarts = up.kubectl_on(
        "us-west",
        &[
            "get",
            "pod",
            "-n",
            "ml-team",
            &leader,
            "-o",
            "jsonpath={.status.containerStatuses[0].restartCount}",
        ],
    );
    assert_ne!(restarts.trim(), "0", "the engine restarted in its pod");
}

fn replicas_of(up: &Up, runtime: &str) -> Option<i64> {
    let value: Value = serde_json::from_str(&up.try_kubectl(&[
        "get",
        "deploymentruntimeconfigs.pkg.crossplane.io",
        runtime,
        "-o",
        "json",
    ])?)
    .ok()?;
    value["spec"]["deploymentTemplate"]["spec"]["replicas"].as_i64()
}

fn gke_providers_run_only_while_a_gke_cluster_exists(up: &Up) {
    assert_eq!(
        replicas_of(up, "provider-gcp-container"),
        Some(0),
        "an EKS-only fleet never runs the GCP providers"
    );
    let upstream = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/upstream-manifests/examples/llama-3.1-8b"
    );
    for file in ["inference-class-gke.yaml", "inference-cluster-gke.yaml"] {
        let text =
            std::fs::read_to_string(format!("{upstream}/{file}")).expect("upstream manifest");
        up.apply(&text);
    }
    wait_for("the GCP providers to run", Duration::from_secs(60), || {
        (replicas_of(up, "provider-gcp-container") == Some(1)).then_some(())
    });
    wait_for(
        "the GKE cluster to provision",
        Duration::from_secs(180),
        || {
            let cluster = json(up, &["get", "ic", "gke-l4-single"]);
            condition(&cluster, "Ready")
                .is_some_and(|c| c["status"] == "True")
                .then_some(())
        },
    );
    up.kubectl(&["delete", "ic", "gke-l4-single"]);
    wait_for(
        "the GCP providers to idle",
        Duration::from_secs(180),
        || (replicas_of(up, "provider-gcp-container") == Some(0)).then_some(()),
    );
    assert_eq!(
        replicas_of(up, "provider-aws-eks"),
        Some(1),
        "the EKS clusters keep theirs"
    );
}

/// Requests sent one after another until stopped, so at most one is in
/// flight at a time: (sent, failed ones with when they were sent).
fn steady_load(
    gateway: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(usize, Vec<(Instant, String)>)> {
    std::thread::spawn(move || {
        let body =
            r#"{"model":"qwen3-8b","max_tokens":20,"messages":[{"role":"user","content":"Hi"}]}"#;
        let (mut sent, mut failed) = (0, Vec::new());
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let started = Instant::now();
            let out = Command::new("curl")
                .args([
                    "-s",
                    "--max-time",
                    "30",
                    "-H",
                    "content-type: application/json",
                    "-d",
                    body,
                ])
                .arg(format!(
                    "http://{gateway}/ml-team/qwen3-8b/v1/chat/completions"
                ))
                .output()
                .expect("curl runs");
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            sent += 1;
            if !text.contains("chat.completion") {
                failed.push((started, text));
            }
        }
        (sent, failed)
    })
}

fn ready_replicas(up: &Up) -> i64 {
    json(up, &["get", "md", "qwen3-8b", "-n", "ml-team"])["status"]["replicas"]["ready"]
        .as_i64()
        .unwrap_or(0)
}

fn scaling_under_load_fails_no_request(up: &Up) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = steady_load(up.gateway.clone(), stop.clone());
    for (step, (replicas, wait)) in [(1, 120), (3, 180), (1, 120)].into_iter().enumerate() {
        up.kubectl(&[
            "scale",
            "md",
            "qwen3-8b",
            "-n",
            "ml-team",
            &format!("--replicas={replicas}"),
        ]);
        if step == 2 {
            // 3 → 1: the two going away leave the routing (their endpoints
            // go) while they still exist, draining, before they are deleted.
            wait_for(
                "two replicas draining out of the routing",
                Duration::from_secs(60),
                || {
                    let replicas: Value = serde_json::from_str(&up.kubectl(&[
                        "get",
                        "mr",
                        "-n",
                        "ml-team",
                        "-l",
                        "modelplane.ai/deployment=qwen3-8b",
                        "-o",
                        "json",
                    ]))
                    .ok()?;
                    let draining = items(&replicas)
                        .iter()
                        .filter(|r| {
                            r["metadata"]["annotations"]["modelplane.ai/draining-since"].is_string()
                        })
                        .count();
                    let endpoints = up
                        .kubectl(&[
                            "get",
                            "modelendpoints",
                            "-n",
                            "ml-team",
                            "-l",
                            "modelplane.ai/deployment=qwen3-8b",
                            "-o",
                            "name",
                        ])
                        .lines()
                        .count();
                    (items(&replicas).len() == 3 && draining == 2 && endpoints == 1).then_some(())
                },
            );
        }
        wait_for(
            &format!("{replicas} replicas ready and no more"),
            Duration::from_secs(wait),
            || {
                let listed = up.kubectl(&[
                    "get",
                    "mr",
                    "-n",
                    "ml-team",
                    "-l",
                    "modelplane.ai/deployment=qwen3-8b",
                    "-o",
                    "name",
                ]);
                (ready_replicas(up) == replicas && listed.lines().count() == replicas as usize)
                    .then_some(())
            },
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (sent, failed) = load.join().expect("the load thread");
    println!(
        "scaling 1 → 3 → 1 under load: {sent} requests, {} failed",
        failed.len()
    );
    assert!(sent > 20, "a steady load ran: {sent} requests");
    assert!(
        failed.is_empty(),
        "{} of {sent} requests failed: {:?}",
        failed.len(),
        failed.first()
    );
}

/// The `qwen3-8b` engine pods of workload cluster `cluster` (not its
/// endpoint picker's, `-epp-`), not being deleted.
fn serving_pods(up: &Up, cluster: &str) -> Vec<Value> {
    let pods: Value = serde_json::from_str(
        &up.kubectl_on(cluster, &["get", "pods", "-n", "ml-team", "-o", "json"]),
    )
    .expect("pods");
    items(&pods)
        .into_iter()
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("qwen3-8b") && !n.contains("-epp-"))
                && p["metadata"]["deletionTimestamp"].is_null()
        })
        .collect()
}

fn pod_ready(pod: &Value) -> bool {
    condition(pod, "Ready").is_some_and(|c| c["status"] == "True")
}

/// An operator adds a node to us-east's L4 pool: the cluster publishes the
/// larger pool and the node joins.
fn growing_a_pool_adds_a_node(up: &Up) {
    up.kubectl(&[
        "patch",
        "ic",
        "us-east",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/spec/nodePools/0/name","value":"l4"},{"op":"replace","path":"/spec/nodePools/0/nodeCount","value":2}]"#,
    ]);
    wait_for(
        "us-east to publish two L4 nodes",
        Duration::from_secs(60),
        || {
            let cluster = json(up, &["get", "ic", "us-east"]);
            cluster["status"]["gpuPools"]
                .as_array()?
                .iter()
                .any(|p| p["name"] == "l4" && p["nodes"] == 2)
                .then_some(())
        },
    );
    wait_for(
        "the second L4 node to join",
        Duration::from_secs(120),
        || {
            let nodes = up.kubectl_on("us-east", &["get", "nodes"]);
            nodes
                .lines()
                .any(|l| l.starts_with("l4-node-1 ") && l.contains(" Ready"))
                .then_some(())
        },
    );
}

fn draining_a_node_moves_its_replica_and_loses_only_what_it_served(up: &Up) {
    up.kubectl(&["scale", "md", "qwen3-8b", "-n", "ml-team", "--replicas=2"]);
    wait_for("2 replicas ready", Duration::from_secs(180), || {
        (ready_replicas(up) == 2).then_some(())
    });
    let before = serving_pods(up, "us-east");
    assert_eq!(before.len(), 1, "one replica on us-east: {before:?}");
    let (old_pod, node) = (
        before[0]["metadata"]["uid"]
            .as_str()
            .expect("a uid")
            .to_string(),
        before[0]["spec"]["nodeName"]
            .as_str()
            .expect("bound to a node")
            .to_string(),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = steady_load(up.gateway.clone(), stop.clone());
    std::thread::sleep(Duration::from_secs(3));
    // What an operator types to drain a node.
    up.kubectl_on(
        "us-east",
        &["taint", "nodes", &node, "maintenance=now:NoExecute"],
    );
    let gone = wait_for("the pod evicted", Duration::from_secs(60), || {
        let pods = serving_pods(up, "us-east");
        (!pods
            .iter()
            .any(|p| p["metadata"]["uid"] == old_pod.as_str()))
        .then(Instant::now)
    });
    let moved = wait_for(
        "the replica to serve again on another node",
        Duration::from_secs(180),
        || {
            let pods = serving_pods(up, "us-east");
            pods.iter()
                .find(|p| pod_ready(p))
                .and_then(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
                .filter(|_| ready_replicas(up) == 2)
        },
    );
    assert_ne!(moved, node, "placed again, off the drained node");
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (sent, failed) = load.join().expect("the load thread");
    println!(
        "draining {node} under load: {sent} requests, {} failed",
        failed.len()
    );
    assert!(sent > 20, "a steady load ran: {sent} requests");
    // One request is in flight at a time: only the one the drained engine
    // was serving when it stopped may be lost, and it was sent before.
    assert!(failed.len() <= 1, "{} failed: {failed:?}", failed.len());
    for (sent_at, body) in &failed {
        assert!(
            *sent_at < gone,
            "sent after the eviction and failed: {body}"
        );
    }
    let events = up.kubectl_on("us-east", &["get", "events", "-n", "ml-team"]);
    assert!(
        events.contains("TaintManagerEviction"),
        "the eviction is in the cluster's events: {events}"
    );
    up.kubectl_on(
        "us-east",
        &["taint", "nodes", &node, "maintenance=now:NoExecute-"],
    );
}

/// How many times the Job controller of `cluster` reported a coder Job
/// completed (a finished Job is deleted after its TTL; its events stay).
fn coder_jobs_completed(up: &Up, cluster: &str) -> usize {
    let events: Value = serde_json::from_str(
        &up.kubectl_on(cluster, &["get", "events", "-n", "ml-team", "-o", "json"]),
    )
    .expect("events");
    items(&events)
        .iter()
        .filter(|e| e["involvedObject"]["kind"] == "Job" && e["reason"] == "Completed")
        .filter(|e| {
            e["involvedObject"]["name"]
                .as_str()
                .is_some_and(|n| n.contains("-qwen3-coder-hydrate-"))
        })
        .map(|e| e["count"].as_u64().unwrap_or(1) as usize)
        .sum()
}

/// The coder's weights are staged once on its cluster and mounted by its
/// pods; a second replica on the Dynamo cluster loads from the first over
/// the fabric (ModelExpress), as its events say.
fn a_second_coder_replica_loads_from_its_peer(up: &Up) {
    assert_eq!(
        coder_jobs_completed(up, "us-west"),
        1,
        "the weights were staged once on us-west"
    );
    assert_eq!(
        coder_jobs_completed(up, "us-east"),
        0,
        "nothing staged where the coder does not run"
    );
    up.kubectl(&[
        "patch",
        "ic",
        "us-west",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/spec/nodePools/1/name","value":"h200"},{"op":"replace","path":"/spec/nodePools/1/nodeCount","value":4}]"#,
    ]);
    up.kubectl(&[
        "scale",
        "md",
        "qwen3-coder",
        "-n",
        "ml-team",
        "--replicas=2",
    ]);
    wait_for("two coder replicas ready", Duration::from_secs(300), || {
        let md = json(up, &["get", "md", "qwen3-coder", "-n", "ml-team"]);
        (md["status"]["replicas"]["ready"] == 2).then_some(())
    });
    let pods: Value = serde_json::from_str(
        &up.kubectl_on("us-west", &["get", "pods", "-n", "ml-team", "-o", "json"]),
    )
    .expect("pods");
    let coder: Vec<Value> = items(&pods)
        .into_iter()
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("qwen3-coder") && !n.contains("-epp-"))
        })
        .collect();
    assert_eq!(coder.len(), 4, "two replicas of two pods each");
    for pod in &coder {
        let mounted = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["persistentVolumeClaim"]["claimName"].is_string());
        assert!(
            mounted,
            "{} mounts the cache volume",
            pod["metadata"]["name"]
        );
    }
    let events: Value = serde_json::from_str(
        &up.kubectl_on("us-west", &["get", "events", "-n", "ml-team", "-o", "json"]),
    )
    .expect("events");
    let from_peer: Vec<String> = items(&events)
        .iter()
        .filter(|e| e["reason"] == "LoadingWeights")
        .filter_map(|e| e["message"].as_str())
        .filter(|m| m.contains("from peer") && m.contains("ModelExpress"))
        .map(str::to_string)
        .collect();
    assert!(
        !from_peer.is_empty(),
        "the second replica loads from its peer: {events}"
    );
    println!("{}", from_peer.join("\n"));
    assert_eq!(
        coder_jobs_completed(up, "us-west"),
        1,
        "the second replica did not stage the weights again"
    );
}

#[test]
fn up_holds_through_faults_and_explains_what_it_cannot_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = up(dir.path(), free_port(), true);
    up.wait_printed("every replica is ready", Duration::from_secs(300));
    why_not_placed_then_placed(&up);
    an_unreachable_cluster_deletes_nothing(&up);
    a_killed_engine_ends_its_stream_and_serves_again(&up);
    gke_providers_run_only_while_a_gke_cluster_exists(&up);
    growing_a_pool_adds_a_node(&up);
    scaling_under_load_fails_no_request(&up);
    draining_a_node_moves_its_replica_and_loses_only_what_it_served(&up);
    a_second_coder_replica_loads_from_its_peer(&up);
}
