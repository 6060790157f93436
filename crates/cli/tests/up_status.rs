//! What `modelplane up` says of its fleet is true, seen as a user sees it
//! through kubectl, `up`'s own progress and the gateway: a deployment short
//! of replicas is not Ready (and says how short and why) though it is
//! Available; capacity freed places what waited at once; an unreachable
//! cluster and a node that stops answering are named in status and events
//! while nothing is deleted; a restart keeps what the user changed and says
//! the fleet is ready only once its engines answer; a healthy start warns of
//! nothing; deployments are never Ready before their endpoints exist; the
//! original's gated example stages with its token and serves; `/v1/models`
//! lists what can serve.

mod common;

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::up::{Up, free_port, up, up_at_time_scale};
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

fn is(object: &Value, type_: &str, status: &str) -> bool {
    condition(object, type_).is_some_and(|c| c["status"] == status)
}

/// `GET` through the fleet gateway: status code and body.
fn get(up: &Up, path: &str) -> (u16, String) {
    request(up, path, None)
}

fn request(up: &Up, path: &str, body: Option<&str>) -> (u16, String) {
    let mut command = Command::new("curl");
    command.args(["-s", "--max-time", "30", "-w", "\n%{http_code}"]);
    if let Some(body) = body {
        command.args(["-H", "content-type: application/json", "-d", body]);
    }
    let out = command
        .arg(format!("http://{}{path}", up.gateway))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Eight H200s on one node, replicas as asked: more than the fleet's free
/// H200 nodes can hold at once.
const TP8: &str = r#"
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: qwen3-tp8
  namespace: ml-team
spec:
  replicas: 3
  template:
    spec:
      engines:
      - name: tp8
        members:
        - role: Standalone
          nodeSelector:
            devices:
            - name: gpu
              count: 8
              selectors:
              - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("100Gi")) >= 0
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                args: ["--model=Qwen/Qwen3-32B", "--served-model-name=qwen3-tp8", "--tensor-parallel-size=8"]
"#;

fn tp8(up: &Up) -> Value {
    json(up, &["get", "md", "qwen3-tp8", "-n", "ml-team"])
}

/// Three replicas asked, two H200 nodes free: two placed and serving, the
/// deployment Available and not Ready, its columns and `up` saying 2/3.
fn a_deployment_short_of_replicas_is_available_but_not_ready(up: &Up) {
    up.apply(TP8);
    wait_for(
        "two of three replicas ready",
        Duration::from_secs(180),
        || (tp8(up)["status"]["replicas"]["ready"] == 2).then_some(()),
    );
    up.kubectl(&[
        "wait",
        "--for=condition=Available",
        "md/qwen3-tp8",
        "-n",
        "ml-team",
        "--timeout=60s",
    ]);
    assert!(
        up.try_kubectl(&[
            "wait",
            "--for=condition=Ready",
            "md/qwen3-tp8",
            "-n",
            "ml-team",
            "--timeout=5s",
        ])
        .is_none(),
        "kubectl wait for Ready times out on a deployment short of replicas"
    );
    let md = tp8(up);
    let scheduled = condition(&md, "ReplicasScheduled").expect("ReplicasScheduled");
    assert_eq!(scheduled["status"], "False", "{md}");
    assert_eq!(scheduled["reason"], "InsufficientCapacity", "{md}");
    assert!(
        scheduled["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("2 of 3 replicas placed")),
        "{scheduled}"
    );
    assert!(is(&md, "Ready", "False"), "{md}");
    let table = up.kubectl(&["get", "md", "qwen3-tp8", "-n", "ml-team"]);
    assert!(
        table
            .lines()
            .next()
            .is_some_and(|h| h.contains("READY") && h.contains("AVAILABLE")),
        "{table}"
    );
    assert!(table.contains("2/3"), "READY is ready/desired: {table}");
    up.wait_printed(
        "deployment ml-team/qwen3-tp8: 2/3 replicas ready",
        Duration::from_secs(10),
    );
    // Every cluster explained, the one that took two and is now full too.
    let described = up.kubectl(&["describe", "md", "qwen3-tp8", "-n", "ml-team"]);
    assert!(
        described.contains("us-east/h200") && described.contains("FailedScheduling"),
        "{described}"
    );
    // It serves, but no ModelService routes to it: a 404 that says so,
    // and /v1/models lists only what can serve, each with its creation.
    let (code, body) = request(
        up,
        "/v1/chat/completions",
        Some(r#"{"model":"qwen3-tp8","messages":[{"role":"user","content":"Hi"}]}"#),
    );
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("no ModelService routes to it"), "{body}");
    let (code, body) = get(up, "/v1/models");
    assert_eq!(code, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).expect("a model list");
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["qwen3-8b", "qwen3-coder"], "{body}");
    for model in listed["data"].as_array().into_iter().flatten() {
        assert!(model["created"].as_i64() > Some(1_700_000_000), "{model}");
    }
}

/// The coder deleted frees two H200 nodes: the replica that waited is
/// created at once (not at a resync), and serves.
fn freed_capacity_places_the_waiting_replica_at_once(up: &Up) {
    let started = Instant::now();
    up.kubectl(&[
        "delete",
        "md",
        "qwen3-coder",
        "-n",
        "ml-team",
        "--wait=false",
    ]);
    let created = wait_for("the third replica created", Duration::from_secs(30), || {
        let placed = tp8(up)["status"]["replicas"]["total"].as_i64();
        (placed == Some(3)).then(|| started.elapsed())
    });
    println!("the waiting replica was created {created:?} after the delete");
    up.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "md/qwen3-tp8",
        "-n",
        "ml-team",
        "--timeout=180s",
    ]);
    let replicas = json(
        up,
        &[
            "get",
            "mr",
            "-n",
            "ml-team",
            "-l",
            "modelplane.ai/deployment=qwen3-tp8",
        ],
    );
    for replica in items(&replicas) {
        let owner = &replica["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "ModelDeployment", "{replica}");
        assert_eq!(owner["controller"], true, "{replica}");
        assert_eq!(owner["uid"], tp8(up)["metadata"]["uid"], "{replica}");
        assert_eq!(
            replica["metadata"]["labels"]["crossplane.io/composite"], "qwen3-tp8",
            "the original's label: {replica}"
        );
    }
}

/// A cluster whose API stops answering is said to be unreachable within
/// ten seconds — by the cluster, an event, `up` and its replicas — while
/// nothing is deleted; all of it clears once it answers.
fn an_unreachable_cluster_is_said_within_ten_seconds(up: &Up) {
    let replicas_before = json(up, &["get", "mr", "-n", "ml-team"]);
    let uids = |list: &Value| -> Vec<String> {
        let mut uids: Vec<String> = items(list)
            .iter()
            .filter_map(|r| r["metadata"]["uid"].as_str().map(str::to_string))
            .collect();
        uids.sort();
        uids
    };
    let cut = Instant::now();
    up.sim(&["fault", "unreachable", "--cluster", "us-east"]);
    wait_for("us-east said unreachable", Duration::from_secs(10), || {
        let ic = json(up, &["get", "ic", "us-east"]);
        (is(&ic, "Reachable", "False") && is(&ic, "Ready", "False")).then_some(())
    });
    println!("us-east said unreachable {:?} after the cut", cut.elapsed());
    let table = up.kubectl(&["get", "ic", "us-east"]);
    assert!(
        table.contains("REACHABLE") && table.contains("False"),
        "{table}"
    );
    let events = json(
        up,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=us-east,reason=Unreachable",
        ],
    );
    assert!(!items(&events).is_empty(), "an Unreachable event: {events}");
    up.wait_printed("cluster us-east: unreachable", Duration::from_secs(10));
    wait_for("its replicas say so", Duration::from_secs(10), || {
        let on_east = json(
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
        let all = items(&on_east);
        (!all.is_empty() && all.iter().all(|r| is(r, "ClusterReachable", "False"))).then_some(())
    });
    up.sim(&["heal", "unreachable-us-east"]);
    wait_for("us-east reachable again", Duration::from_secs(60), || {
        let ic = json(up, &["get", "ic", "us-east"]);
        (is(&ic, "Reachable", "True") && is(&ic, "Ready", "True")).then_some(())
    });
    assert_eq!(
        uids(&json(up, &["get", "mr", "-n", "ml-team"])),
        uids(&replicas_before),
        "nothing deleted or replaced"
    );
}

/// A node that stops posting its status under a replica is named in the
/// replica's conditions and in a new event; healed, it serves again and
/// its `Serving` event is counted again.
fn a_node_not_ready_is_named_with_a_fresh_event(up: &Up) {
    let replicas = json(
        up,
        &[
            "get",
            "mr",
            "-n",
            "ml-team",
            "-l",
            "modelplane.ai/cluster=us-west,modelplane.ai/deployment=qwen3-8b",
        ],
    );
    let replica = items(&replicas)
        .into_iter()
        .next()
        .expect("a qwen3-8b replica on us-west");
    let name = replica["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    let pods: Value = serde_json::from_str(&up.kubectl_on(
        "us-west",
        &[
            "get",
            "pods",
            "-n",
            "ml-team",
            "-l",
            &format!("modelplane.ai/serving={name}"),
            "-o",
            "json",
        ],
    ))
    .expect("pods");
    let node = items(&pods)[0]["spec"]["nodeName"]
        .as_str()
        .expect("bound")
        .to_string();
    let faulted = jiff::Timestamp::now();
    let printed = up.sim(&[
        "fault",
        "node-not-ready",
        "--cluster",
        "us-west",
        "--node",
        &node,
    ]);
    let fault = printed
        .split_whitespace()
        .next()
        .and_then(|f| f.strip_prefix("fault/"))
        .expect("the fault's name")
        .to_string();
    let message = wait_for(
        "the replica to name the node",
        Duration::from_secs(90),
        || {
            let r = json(up, &["get", "mr", &name, "-n", "ml-team"]);
            condition(&r, "ModelReady")
                .filter(|c| c["reason"] == "NodeNotReady")
                .and_then(|c| c["message"].as_str().map(str::to_string))
        },
    );
    assert!(message.contains(&node), "{message}");
    // The incident is recorded anew: an event naming the node, last seen
    // after the fault began (not the old event, with its old timestamp).
    let table = up.kubectl(&[
        "get",
        "events",
        "-n",
        "ml-team",
        "--field-selector",
        &format!("involvedObject.name={name},reason=NodeNotReady"),
        "-o",
        "json",
    ]);
    let events: Value = serde_json::from_str(&table).expect("events");
    let fresh = items(&events).iter().any(|e| {
        let seen = e["lastTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        e["message"].as_str().is_some_and(|m| m.contains(&node))
            && seen.is_some_and(|t| t.as_second() >= faulted.as_second())
    });
    assert!(fresh, "an event since the fault names the node: {table}");
    up.sim(&["heal", &fault]);
    wait_for(
        "the replica serving again",
        Duration::from_secs(120),
        || {
            let r = json(up, &["get", "mr", &name, "-n", "ml-team"]);
            is(&r, "Ready", "True").then_some(())
        },
    );
    let events = json(
        up,
        &[
            "get",
            "events",
            "-n",
            "ml-team",
            "--field-selector",
            &format!("involvedObject.name={name},reason=Serving"),
        ],
    );
    let counted: u64 = items(&events)
        .iter()
        .map(|e| e["count"].as_u64().unwrap_or(1))
        .sum();
    assert!(counted >= 2, "serving again is counted again: {events}");
}

/// A selector no device in the fleet matches: `NoMatchingDevices` (not
/// full capacity), in words that name the attributes the devices have,
/// each reason said once.
fn a_selector_matching_nothing_says_so_in_words(up: &Up) {
    let b300 = TP8.replace("name: qwen3-tp8", "name: qwen3-b300").replace(
        r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("100Gi")) >= 0"#,
        r#"device.attributes["gpu.nvidia.com"].productName == "B300""#,
    );
    up.apply(&b300);
    let scheduled = wait_for("qwen3-b300 explained", Duration::from_secs(30), || {
        let md = json(up, &["get", "md", "qwen3-b300", "-n", "ml-team"]);
        condition(&md, "ReplicasScheduled")
            .filter(|c| c["status"] == "False" && c["reason"] != "Scheduling")
            .cloned()
    });
    assert_eq!(scheduled["reason"], "NoMatchingDevices", "{scheduled}");
    let events = json(
        up,
        &[
            "get",
            "events",
            "-n",
            "ml-team",
            "--field-selector",
            "involvedObject.name=qwen3-b300,reason=FailedScheduling",
        ],
    );
    let message = items(&events)
        .first()
        .and_then(|e| e["message"].as_str().map(str::to_string))
        .expect("a FailedScheduling event");
    assert!(!message.contains("Undeclared reference"), "{message}");
    assert!(message.contains("productName"), "{message}");
    up.kubectl(&["delete", "md", "qwen3-b300", "-n", "ml-team"]);
}

#[test]
fn up_says_what_is_true_of_its_fleet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let up = up(dir.path(), free_port(), true);
    up.wait_printed("every replica is ready", Duration::from_secs(300));
    a_deployment_short_of_replicas_is_available_but_not_ready(&up);
    freed_capacity_places_the_waiting_replica_at_once(&up);
    an_unreachable_cluster_is_said_within_ten_seconds(&up);
    a_node_not_ready_is_named_with_a_fresh_event(&up);
    a_selector_matching_nothing_says_so_in_words(&up);
}

/// The WARN lines of `up`'s log.
fn warnings(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("modelplane.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" WARN "))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_restart_keeps_the_users_changes_and_is_ready_only_once_engines_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let first = up(dir.path(), port, true);
    first.wait_printed("every replica is ready", Duration::from_secs(300));
    assert_eq!(
        warnings(dir.path()),
        Vec::<String>::new(),
        "a healthy start warns of nothing"
    );
    first.kubectl(&["scale", "md", "qwen3-8b", "-n", "ml-team", "--replicas=1"]);
    first.kubectl(&["delete", "md", "qwen3-coder", "-n", "ml-team"]);
    wait_for("the scale down done", Duration::from_secs(60), || {
        let md = json(&first, &["get", "md", "qwen3-8b", "-n", "ml-team"]);
        (md["status"]["replicas"]["total"] == 1).then_some(())
    });
    drop(first);
    let again = up(dir.path(), port, true);
    again.wait_printed("example fleet applied at", Duration::from_secs(60));
    again.wait_printed("every replica is ready", Duration::from_secs(300));
    // Said once every engine answers: a prompt streams at once.
    again.streams("/v1/chat/completions", "qwen3-8b");
    let md = json(&again, &["get", "md", "qwen3-8b", "-n", "ml-team"]);
    assert_eq!(md["spec"]["replicas"], 1, "the user's scale stands");
    assert!(
        again
            .try_kubectl(&["get", "md", "qwen3-coder", "-n", "ml-team"])
            .is_none(),
        "the deleted deployment is not re-created"
    );
    let record = again.kubectl(&[
        "get",
        "configmap",
        "modelplane-up",
        "-n",
        "modelplane-system",
        "-o",
        "jsonpath={.data.exampleAppliedAt}",
    ]);
    assert!(!record.is_empty(), "how it knows is readable");
}

/// `kubectl get KIND -n NS -w -o json`: every object version it prints,
/// read as printed (a pipe left unread would stall kubectl's watch).
struct Watching {
    child: std::process::Child,
    printed: std::thread::JoinHandle<String>,
}

impl Watching {
    fn start(up: &Up, kind: &str, namespace: &str) -> Watching {
        let mut child = Command::new(common::kubectl())
            .arg("--kubeconfig")
            .arg(&up.kubeconfig)
            .args(["get", kind, "-n", namespace, "-w", "-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl watches");
        let mut out = child.stdout.take().expect("piped stdout");
        let printed = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        });
        Watching { child, printed }
    }

    fn stop(mut self) -> Vec<Value> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let text = self.printed.join().unwrap_or_default();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map_while(Result::ok)
            .collect()
    }
}

fn revision(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

const RACE_CLUSTER: &str = r#"
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: us-central
  labels:
    modelplane.ai/region: us-central
spec:
  cluster:
    source: EKS
    eks:
      region: us-east-2
  nodePools:
  - name: h200
    className: h200-8x
    nodeCount: 4
    zones: [us-east-2a]
"#;

/// Four nodes of eight H200s, and six replicas asking four each.
const TP4_FLEET: &str = r#"
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: us-south
  labels:
    modelplane.ai/region: us-south
spec:
  cluster:
    source: EKS
    eks:
      region: us-west-1
  nodePools:
  - name: h200
    className: h200-8x
    nodeCount: 4
    zones: [us-west-1a]
---
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: qwen3-tp4
  namespace: race
spec:
  replicas: 6
  template:
    spec:
      clusterSelector:
        matchLabels:
          modelplane.ai/region: us-south
      engines:
      - name: tp4
        members:
        - role: Standalone
          nodeSelector:
            devices:
            - name: gpu
              count: 4
              selectors:
              - cel: device.driver == "gpu.nvidia.com"
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                args: ["--model=Qwen/Qwen3-8B", "--served-model-name=qwen3-tp4", "--tensor-parallel-size=4"]
"#;

/// Six TP4 replicas on four 8-GPU nodes: all six placed, bound by the
/// cluster's own scheduler two to a node, and Ready.
fn six_tp4_replicas_share_four_8_gpu_nodes(up: &Up) {
    up.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "md/qwen3-tp4",
        "-n",
        "race",
        "--timeout=240s",
    ]);
    let table = up.kubectl(&["get", "md", "qwen3-tp4", "-n", "race"]);
    assert!(table.contains("6/6"), "{table}");
    let pods: Value = serde_json::from_str(&up.kubectl_on(
        "us-south",
        &[
            "get",
            "pods",
            "-n",
            "race",
            "-l",
            "modelplane.ai/serving",
            "-o",
            "json",
        ],
    ))
    .expect("pods");
    let mut nodes: Vec<String> = items(&pods)
        .iter()
        .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
        .collect();
    assert_eq!(nodes.len(), 6, "six pods bound: {pods}");
    nodes.sort();
    nodes.dedup();
    assert!(nodes.len() <= 4, "on the four nodes: {nodes:?}");
}

fn race_deployment(i: usize) -> String {
    format!(
        r#"
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: small-{i}
  namespace: race
spec:
  replicas: 1
  template:
    spec:
      clusterSelector:
        matchLabels:
          modelplane.ai/region: us-central
      engines:
      - name: small
        members:
        - role: Standalone
          nodeSelector:
            devices:
            - name: gpu
              selectors:
              - cel: device.driver == "gpu.nvidia.com"
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                args: ["--model=Qwen/Qwen3-0.6B", "--served-model-name=small-{i}"]
---"#
    )
}

/// Thirty deployments applied ten at a time, on one GPU each of a cluster
/// of four 8-GPU nodes: watched, none turns Ready before its endpoint
/// exists, none turns Ready and back; six TP4 replicas share another four
/// nodes; then the original's gated example stages with its token and
/// serves.
#[test]
fn deployments_are_ready_only_with_their_endpoints_and_the_gated_example_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The original's coder stages 480 B parameters: time runs faster.
    let up = up_at_time_scale(dir.path(), free_port(), true, 16);
    up.wait_printed("example fleet applied", Duration::from_secs(60));
    up.apply(RACE_CLUSTER);
    up.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: race\n");
    up.apply(TP4_FLEET);
    wait_for("us-central ready", Duration::from_secs(120), || {
        is(&json(&up, &["get", "ic", "us-central"]), "Ready", "True").then_some(())
    });
    let deployments = Watching::start(&up, "md", "race");
    let endpoints = Watching::start(&up, "me", "race");
    for batch in 0..3 {
        let manifests: String = (batch * 10..batch * 10 + 10).map(race_deployment).collect();
        up.apply(&manifests);
        std::thread::sleep(Duration::from_secs(2));
    }
    wait_for("thirty deployments Ready", Duration::from_secs(300), || {
        let all = json(&up, &["get", "md", "-n", "race"]);
        let ready = items(&all)
            .iter()
            .filter(|d| {
                d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("small-"))
            })
            .filter(|d| is(d, "Ready", "True"))
            .count();
        (ready == 30).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    let deployment_versions = deployments.stop();
    let endpoint_versions = endpoints.stop();
    assert!(!deployment_versions.is_empty() && !endpoint_versions.is_empty());
    for i in 0..30 {
        let name = format!("small-{i}");
        let versions: Vec<&Value> = deployment_versions
            .iter()
            .filter(|d| d["metadata"]["name"] == name.as_str())
            .collect();
        let first_ready = versions
            .iter()
            .find(|d| is(d, "Ready", "True"))
            .unwrap_or_else(|| panic!("{name} seen Ready"));
        let endpoint_created = endpoint_versions
            .iter()
            .filter(|e| e["metadata"]["labels"]["modelplane.ai/deployment"] == name.as_str())
            .map(revision)
            .min()
            .unwrap_or_else(|| panic!("{name}'s endpoint seen"));
        assert!(
            endpoint_created < revision(first_ready),
            "{name} turned Ready (revision {}) before its endpoint existed (revision {endpoint_created})",
            revision(first_ready)
        );
        let mut was_ready = false;
        for version in &versions {
            let ready = is(version, "Ready", "True");
            assert!(
                !was_ready || ready,
                "{name} turned Ready and back: {version}"
            );
            was_ready |= ready;
        }
    }
    six_tp4_replicas_share_four_8_gpu_nodes(&up);
    the_gated_example_stages_with_its_token_and_serves(&up);
}

fn upstream(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/upstream-manifests/examples/qwen3-coder")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The original's qwen3-coder example, as published, with the `hf-token`
/// Secret its cache asks for: a refused token says so in the cache's
/// status; a good one stages the weights on its cluster, and it serves.
fn the_gated_example_stages_with_its_token_and_serves(up: &Up) {
    // The example fleet's own coder goes: the original's takes its names.
    up.kubectl(&["delete", "md,ms,mc", "qwen3-coder", "-n", "ml-team"]);
    let secret = |token: &str| {
        up.kubectl(&[
            "delete",
            "secret",
            "hf-token",
            "-n",
            "ml-team",
            "--ignore-not-found",
        ]);
        up.kubectl(&[
            "create",
            "secret",
            "generic",
            "hf-token",
            "-n",
            "ml-team",
            &format!("--from-literal=HF_TOKEN={token}"),
        ]);
    };
    secret("not-a-token");
    for file in [
        "inference-class.yaml",
        "inference-cluster.yaml",
        "model-cache.yaml",
    ] {
        up.apply(&upstream(file));
    }
    wait_for("eks-coder ready", Duration::from_secs(120), || {
        is(&json(up, &["get", "ic", "eks-coder"]), "Ready", "True").then_some(())
    });
    // The Job retries, then fails (backoffLimit 3) and deletes its pod: the
    // cache's status and an event keep what its download said.
    let refused = wait_for("the refused token said", Duration::from_secs(300), || {
        let cache = json(up, &["get", "mc", "qwen3-coder", "-n", "ml-team"]);
        condition(&cache, "ArtifactReady")
            .filter(|c| c["reason"] == "Failed")
            .and_then(|c| c["message"].as_str().map(str::to_string))
            .filter(|m| m.contains("eks-coder"))
    });
    assert!(
        refused.contains("failed on") && refused.contains("401 Client Error: Unauthorized"),
        "{refused}"
    );
    let events = up.kubectl(&[
        "get",
        "events",
        "-n",
        "ml-team",
        "--field-selector",
        "involvedObject.name=qwen3-coder,reason=HydrationFailed",
    ]);
    assert!(events.contains("401 Client Error"), "{events}");
    let log =
        std::fs::read_to_string(up.kubeconfig.with_file_name("modelplane.log")).unwrap_or_default();
    for said in [&refused, &events, &log] {
        assert!(!said.contains("not-a-token"), "the token is never said");
    }
    // A good token: a new hydration Job runs with it (the failed one
    // goes), and the cache stages.
    secret("hf_example_token");
    wait_for("the cache staged", Duration::from_secs(600), || {
        let cache = json(up, &["get", "mc", "qwen3-coder", "-n", "ml-team"]);
        is(&cache, "ArtifactReady", "True").then_some(())
    });
    for file in ["model-deployment.yaml", "model-service.yaml"] {
        up.apply(&upstream(file));
    }
    up.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "md/qwen3-coder",
        "-n",
        "ml-team",
        "--timeout=600s",
    ]);
    wait_for("the coder served", Duration::from_secs(60), || {
        let text = up.stream("/ml-team/qwen3-coder/v1/chat/completions", "qwen3-coder");
        text.contains("data: [DONE]").then_some(())
    });
    let status = up.kubectl(&["get", "mc", "qwen3-coder", "-n", "ml-team", "-o", "yaml"]);
    assert!(
        !status.contains("hf_example_token"),
        "the token is not in status"
    );
}
