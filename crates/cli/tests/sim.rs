//! The simulated fleet driven by what `modelplane render` prints, applied
//! with kubectl as a user would (no controller runs): the clouds provision
//! both example clusters, their stacks install, every engine pod runs, and
//! each replica's cluster gateway streams tokens from an engine-sim serving
//! the name its manifest's command gives.

mod common;

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

fn sim(server: &Server) -> Process {
    Process(
        Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["sim", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .args(["--time-scale", "5"])
            .env("RUST_LOG", "warn")
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the simulator"),
    )
}

fn get_json(server: &Server, cluster: Option<&str>, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
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

#[test]
fn the_simulator_runs_the_rendered_example_fleet_and_every_replica_streams_tokens() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path());
    server.apply(None, &modelplane(&["crds"]));
    let _sim = sim(&server);
    server.apply(
        None,
        &modelplane(&["providers", "-f", EXAMPLES, "-o", "yaml"]),
    );
    server.apply(
        None,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: modelplane-system\n",
    );
    let (ok, out, err) = server.kubectl_in(None, &["apply", "-f", EXAMPLES], None);
    assert!(ok, "{out}{err}");
    let rendered: Value =
        serde_json::from_str(&modelplane(&["render", "-f", EXAMPLES, "-o", "json"])).expect("json");
    let control: Vec<Value> = rendered["controlPlane"]
        .as_array()
        .expect("control plane objects")
        .iter()
        .filter(|o| o["kind"] != "ModelReplica")
        .cloned()
        .collect();
    server.apply(None, &documents(&control));
    platform_ready(&server);

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
                let pods = get_json(&server, Some(cluster), &["pods", "-n", "ml-team"])?;
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
    // Each replica's route, through its cluster's gateway, to the model its command serves.
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
        }
    }
    // The hydration Job ran and completed on each cluster.
    for cluster in ["us-east", "us-west"] {
        let jobs = get_json(&server, Some(cluster), &["jobs", "-n", "ml-team"]).expect("jobs");
        assert!(
            jobs["items"]
                .as_array()
                .is_some_and(|j| j
                    .iter()
                    .all(|job| condition(job, "Complete").as_deref() == Some("True"))),
            "{cluster}: {jobs}"
        );
    }
}
