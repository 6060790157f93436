//! `modelplane up --example` as a newcomer runs it: one process brings up
//! the example fleet, kubectl shows placement and readiness, curl and the
//! OpenAI Python client stream tokens through the fleet gateway from a
//! deployment on each stack, SIGTERM stops it cleanly, and `up` on the same
//! data dir resumes the same fleet.

mod common;

use std::process::Command;
use std::time::Duration;

use common::up::{Up, free_port, up};
use common::wait_for;

const OPENAI_SCRIPT: &str = r#"
import sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1], api_key="unused")
stream = client.chat.completions.create(
    model=sys.argv[2], stream=True,
    messages=[{"role": "user", "content": "Hello"}])
text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
assert text, "no tokens"
print(text)
"#;

/// The OpenAI Python client must be there: a missing client fails the
/// test (`.ci/run` installs it), it never skips it.
fn require_openai_client() {
    let imported = Command::new("python3")
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        imported,
        "the OpenAI Python client is not installed: `python3 -m pip install openai` (.ci/run does)"
    );
}

#[test]
fn up_serves_the_example_fleet_on_both_stacks_and_resumes_it_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let first = up(dir.path(), port, true);
    first.wait_printed("example fleet applied", Duration::from_secs(60));
    first.wait_printed("every replica is ready", Duration::from_secs(300));

    // What kubectl shows: placement and readiness in the printer columns.
    let deployments = first.kubectl(&["get", "md", "-n", "ml-team"]);
    let row = |name: &str| {
        deployments
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} listed: {deployments}"))
            .split_whitespace()
            .nth(1)
            .map(str::to_string)
    };
    assert_eq!(row("qwen3-8b ").as_deref(), Some("2/2"), "{deployments}");
    assert_eq!(row("qwen3-coder ").as_deref(), Some("1/1"), "{deployments}");
    // The same qwen3-8b manifest is spread one replica per cluster, so it
    // runs on both stacks; the coder is on the Dynamo cluster.
    let placed = |deployment: &str| {
        let mut clusters: Vec<String> = first
            .kubectl(&[
                "get",
                "mr",
                "-n",
                "ml-team",
                "-l",
                &format!("modelplane.ai/deployment={deployment}"),
                "-o",
                "jsonpath={range .items[*]}{.spec.clusterName}{\"\\n\"}{end}",
            ])
            .lines()
            .map(str::to_string)
            .collect();
        clusters.sort();
        clusters
    };
    assert_eq!(placed("qwen3-8b"), ["us-east", "us-west"]);
    assert_eq!(placed("qwen3-coder"), ["us-west"]);
    let clusters = first.kubectl(&["get", "ic"]);
    assert!(
        clusters.contains("Standard") && clusters.contains("Dynamo"),
        "{clusters}"
    );
    // The events tell a replica's story: placed, its workloads applied,
    // the engine loading its weights (on its cluster), serving, ready.
    let events = first.kubectl(&["get", "events", "-n", "ml-team", "--sort-by=.lastTimestamp"]);
    let on_cluster = first.kubectl_on("us-east", &["get", "events", "-n", "ml-team"]);
    assert!(
        on_cluster.contains("LoadingWeights"),
        "the engine's weights loading, on its cluster: {on_cluster}"
    );
    for (object, reason) in [
        ("modeldeployment/qwen3-8b", "Scheduled"),
        ("modelreplica/qwen3-8b-", "Composing"),
        ("modelreplica/qwen3-8b-", "Serving"),
        ("modelreplica/qwen3-8b-", "Ready"),
    ] {
        assert!(
            events
                .lines()
                .any(|l| l.contains(object) && l.split_whitespace().any(|w| w == reason)),
            "{reason} of {object} in: {events}"
        );
    }
    // Each stack runs it its own way: a Deployment on Standard (a one-node
    // engine needs no LeaderWorkerSet), a Grove PodCliqueSet on Dynamo.
    let standard = first.kubectl_on(
        "us-east",
        &["get", "deployments", "-n", "ml-team", "-o", "name"],
    );
    assert!(
        standard
            .lines()
            .any(|d| d.contains("qwen3-8b") && !d.contains("-epp-")),
        "the engine's Deployment on us-east: {standard}"
    );
    let grove = first.kubectl_on(
        "us-west",
        &["get", "podcliquesets", "-n", "ml-team", "-o", "name"],
    );
    assert!(
        grove.contains("qwen3-8b"),
        "a PodCliqueSet on us-west: {grove}"
    );

    // One deployment on each stack streams through /v1 and its service prefix.
    for model in ["qwen3-8b", "qwen3-coder"] {
        first.streams("/v1/chat/completions", model);
        first.streams(&format!("/ml-team/{model}/v1/chat/completions"), model);
    }
    require_openai_client();
    for model in ["qwen3-8b", "qwen3-coder"] {
        let out = Command::new("python3")
            .args(["-c", OPENAI_SCRIPT])
            .arg(format!("http://{}/v1", first.gateway))
            .arg(model)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "the OpenAI client streams from {model}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let uids = |up: &Up| {
        up.kubectl(&[
            "get",
            "mr",
            "-n",
            "ml-team",
            "-o",
            "jsonpath={.items[*].metadata.uid}",
        ])
    };
    let before = uids(&first);

    // SIGTERM drains and stops everything.
    let pid = first.process.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    first.wait_printed("stopped;", Duration::from_secs(60));
    drop(first);

    // The same data dir resumes the same fleet: nothing re-applied, the
    // replicas serve again.
    let second = up(dir.path(), port, false);
    second.wait_printed("every replica is ready", Duration::from_secs(180));
    let after = second.kubectl(&["get", "mr", "-n", "ml-team", "-o", "name"]);
    assert_eq!(after.lines().count(), 3, "three replicas: {after}");
    assert_eq!(
        uids(&second),
        before,
        "the same three replicas, not new ones"
    );
    // Its engines restart with it (the simulated fleet is this process):
    // each serves again once its weights are loaded.
    for model in ["qwen3-8b", "qwen3-coder"] {
        wait_for(
            &format!("the resumed {model} to serve"),
            Duration::from_secs(240),
            || {
                let text = second.stream(&format!("/ml-team/{model}/v1/chat/completions"), model);
                text.contains("data: [DONE]").then_some(())
            },
        );
        second.streams("/v1/chat/completions", model);
    }
}
