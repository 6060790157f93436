//! `modelplane controller` as a separate process against `modelplane
//! apiserver`: the control plane is the server's root cluster, the workload
//! cluster a logical cluster of it reached only through the kubeconfig
//! Secret of an Existing InferenceCluster. Asserted through kubectl, as a
//! user sees it.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Process, Server, wait_for};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

fn get_json(server: &Server, cluster: Option<&str>, args: &[&str]) -> Option<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (ok, out, _) = server.kubectl_in(cluster, &all, None);
    ok.then(|| serde_json::from_str(&out).ok()).flatten()
}

fn condition(object: &Value, type_: &str) -> Option<String> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

fn fleet(server: &Server) {
    server.apply(
        None,
        &String::from_utf8(
            Command::new(env!("CARGO_BIN_EXE_modelplane"))
                .arg("crds")
                .output()
                .expect("crds")
                .stdout,
        )
        .expect("utf-8"),
    );
    server.apply(
        None,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: modelplane-system\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml-team\n---\napiVersion: tenancy.modelplane.ai/v1alpha1\nkind: LogicalCluster\nmetadata:\n  name: edge\n",
    );
    // What the stack's charts install on the workload cluster (the
    // simulated fleet does this in embedded mode).
    for (group, kind, plural) in [
        (
            "inference.networking.k8s.io",
            "InferencePool",
            "inferencepools",
        ),
        ("gateway.networking.k8s.io", "HTTPRoute", "httproutes"),
    ] {
        server.apply(Some("edge"), &crd(group, kind, plural));
    }
    let kubeconfig = server.logical_kubeconfig("edge");
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": "edge-kubeconfig", "namespace": "modelplane-system" },
        "stringData": { "kubeconfig": kubeconfig },
    });
    server.apply(None, &secret.to_string());
    server.apply(
        None,
        r#"
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
    nodeCount: 2
"#,
    );
    // What the cluster's own reconciler publishes once its stack runs: the
    // scheduler's view of it (pools, Ready, the gateway's address).
    let status = serde_json::json!({ "status": {
        "conditions": [{ "type": "Ready", "status": "True", "reason": "Available" }],
        "gateway": { "address": "10.0.0.7" },
        "gpuPools": [{ "name": "l4", "nodes": 2, "devices": [{
            "name": "gpu", "driver": "gpu.nvidia.com", "deviceClassName": "gpu.nvidia.com",
            "count": 1, "claim": "DRA", "capacity": { "memory": { "value": "23034Mi" } } }] }],
    }});
    server.kubectl(&[
        "patch",
        "inferencecluster",
        "edge",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
}

/// A CRD serving `kind` in `group` at `v1`, any content.
fn crd(group: &str, kind: &str, plural: &str) -> String {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{group}") },
        "spec": { "group": group, "scope": "Namespaced",
            "names": { "plural": plural, "singular": kind.to_lowercase(), "kind": kind },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }] }
    })
    .to_string()
}

fn controller(server: &Server) -> Process {
    Process(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["controller", "--kubeconfig"])
            .arg(&server.kubeconfig)
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

fn names(server: &Server, cluster: Option<&str>, args: &[&str]) -> Vec<String> {
    let mut all = args.to_vec();
    all.extend(["-o", "name"]);
    let (ok, out, _) = server.kubectl_in(cluster, &all, None);
    if !ok {
        return Vec::new();
    }
    let mut names: Vec<String> = out.lines().map(str::to_string).collect();
    names.sort();
    names
}

#[test]
fn a_deployment_becomes_replicas_then_workloads_on_its_cluster_then_ready_endpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    fleet(&server);
    server.apply(None, &DEPLOYMENT.replace("REPLICAS", "2"));
    let _controller = controller(&server);

    // Two ModelReplicas on the control plane, owned by the deployment.
    let replicas = wait_for("two ModelReplicas", WAIT, || {
        let found = names(&server, None, &["get", "modelreplicas", "-n", "ml-team"]);
        (found.len() == 2).then_some(found)
    });
    let deployment =
        get_json(&server, None, &["get", "md", "qwen3-8b", "-n", "ml-team"]).expect("md");
    let uid = deployment["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    for replica in &replicas {
        let replica = get_json(&server, None, &["get", replica, "-n", "ml-team"]).expect("replica");
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
                &server,
                Some("edge"),
                &["get", "deployments", "-n", "ml-team"],
            );
            (found.len() >= 2).then_some(found)
        },
    );
    for workload in &workloads {
        let object = get_json(
            &server,
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
    assert!(names(&server, None, &["get", "deployments", "-n", "ml-team"]).is_empty());

    // The workloads become Available, as the readiness rule says: the
    // replicas turn Ready, and the deployment gets an endpoint per replica.
    for workload in &workloads {
        server.kubectl_in(
            Some("edge"),
            &[
                "patch",
                workload,
                "-n",
                "ml-team",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"conditions":[{"type":"Available","status":"True"}]}}"#,
            ],
            None,
        );
    }
    wait_for("both replicas Ready", WAIT, || {
        replicas
            .iter()
            .all(|r| {
                get_json(&server, None, &["get", r, "-n", "ml-team"])
                    .and_then(|o| condition(&o, "Ready"))
                    .as_deref()
                    == Some("True")
            })
            .then_some(())
    });
    let endpoints = wait_for("two ModelEndpoints", WAIT, || {
        let found = names(&server, None, &["get", "modelendpoints", "-n", "ml-team"]);
        (found.len() == 2).then_some(found)
    });
    let endpoint =
        get_json(&server, None, &["get", &endpoints[0], "-n", "ml-team"]).expect("endpoint");
    assert!(
        endpoint["spec"]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://10.0.0.7/ml-team/")),
        "{endpoint}"
    );

    // Scale 2 → 1: exactly one replica's objects go, everywhere.
    server.kubectl(&["scale", "md/qwen3-8b", "-n", "ml-team", "--replicas=1"]);
    wait_for("one ModelReplica left", WAIT, || {
        (names(&server, None, &["get", "modelreplicas", "-n", "ml-team"]).len() == 1).then_some(())
    });
    wait_for("one replica's workloads left on the cluster", WAIT, || {
        let left = names(
            &server,
            Some("edge"),
            &["get", "deployments", "-n", "ml-team"],
        );
        (left.len() == workloads.len() / 2).then_some(())
    });
    wait_for("one ModelEndpoint left", WAIT, || {
        (names(&server, None, &["get", "modelendpoints", "-n", "ml-team"]).len() == 1).then_some(())
    });
}
