//! `modelplane up --example` as a newcomer runs it: one process brings up
//! the example fleet, kubectl shows placement and readiness, curl and the
//! OpenAI Python client stream tokens through the fleet gateway from a
//! deployment on each stack, SIGTERM stops it cleanly, and `up` on the same
//! data dir resumes the same fleet.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Process, wait_for};

/// A running `modelplane up` and what it printed so far.
struct Up {
    process: Process,
    printed: Arc<Mutex<Vec<String>>>,
    kubeconfig: PathBuf,
    gateway: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn up(dir: &Path, gateway_port: u16, example: bool) -> Up {
    let mut command = Command::new(env!("CARGO_BIN_EXE_modelplane"));
    command
        .args(["up", "--data-dir"])
        .arg(dir)
        .args(["--listen", "127.0.0.1:0", "--gateway-listen"])
        .arg(format!("127.0.0.1:{gateway_port}"))
        // Simulated minutes shortened: the test waits on what a user sees,
        // not on wall-clock provisioning.
        .args(["--time-scale", "0.15"]);
    if example {
        command.arg("--example");
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start modelplane up");
    let stdout = child.stdout.take().expect("stdout");
    let printed = Arc::new(Mutex::new(Vec::new()));
    let sink = printed.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("up: {line}");
            sink.lock().expect("lines").push(line);
        }
    });
    Up {
        process: Process(child),
        printed,
        kubeconfig: dir.join("kubeconfig"),
        gateway: format!("127.0.0.1:{gateway_port}"),
    }
}

impl Up {
    fn printed(&self, text: &str) -> bool {
        self.printed
            .lock()
            .expect("lines")
            .iter()
            .any(|l| l.contains(text))
    }

    fn wait_printed(&self, text: &str, timeout: Duration) {
        wait_for(&format!("`up` to print {text:?}"), timeout, || {
            self.printed(text).then_some(())
        });
    }

    fn kubectl(&self, args: &[&str]) -> String {
        let out = Command::new(common::kubectl())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// A streamed chat completion through the fleet gateway at `path`.
    fn stream(&self, path: &str, model: &str) -> String {
        let body = format!(
            r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"Hello"}}]}}"#
        );
        let out = Command::new("curl")
            .args([
                "-sN",
                "--max-time",
                "30",
                "-H",
                "content-type: application/json",
            ])
            .args(["-d", &body])
            .arg(format!("http://{}{path}", self.gateway))
            .output()
            .expect("curl runs");
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    fn streams(&self, path: &str, model: &str) {
        let text = self.stream(path, model);
        assert!(
            text.contains("chat.completion.chunk") && text.contains("data: [DONE]"),
            "{path} for {model}: {text}"
        );
        assert!(
            text.contains(&format!(r#""model":"{model}""#)),
            "served by the model asked for: {text}"
        );
    }
}

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

fn openai_client_available() -> bool {
    Command::new("python3")
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success())
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
    assert_eq!(row("qwen3-8b ").as_deref(), Some("2"), "{deployments}");
    assert_eq!(row("qwen3-coder ").as_deref(), Some("1"), "{deployments}");
    let replicas = first.kubectl(&["get", "mr", "-n", "ml-team"]);
    for line in replicas.lines().skip(1) {
        let expected = if line.starts_with("qwen3-coder") {
            "us-west"
        } else {
            "us-east"
        };
        assert!(line.contains(expected), "placed on {expected}: {line}");
    }
    let clusters = first.kubectl(&["get", "ic"]);
    assert!(
        clusters.contains("Standard") && clusters.contains("Dynamo"),
        "{clusters}"
    );

    // One deployment on each stack streams through /v1 and its service prefix.
    for model in ["qwen3-8b", "qwen3-coder"] {
        first.streams("/v1/chat/completions", model);
        first.streams(&format!("/ml-team/{model}/v1/chat/completions"), model);
    }
    if openai_client_available() {
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
    } else {
        eprintln!("skipped: the OpenAI Python client is not installed (`pip install openai`)");
    }

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
    assert_eq!(after.lines().count(), 3, "the same three replicas: {after}");
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
