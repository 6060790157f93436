//! The README's "Try it" block runs as written, in one shell: `up
//! --example` in the background, kubectl waiting for every replica, curl
//! and the OpenAI Python client streaming tokens, then stopping it. Only
//! `cargo run --release --` is replaced by the binary under test (the block
//! would otherwise build a second, release copy), and its last line — the
//! test command itself — is left out.

use std::process::Command;

const README: &str = include_str!("../../../README.md");

/// The first `sh` block after `## Try it`.
fn try_it() -> String {
    let section = README
        .split("## Try it")
        .nth(1)
        .expect("the README has a Try it section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("Try it has a sh block");
    block.to_string()
}

#[test]
fn the_readme_try_it_block_brings_up_the_fleet_and_streams_tokens() {
    let block = try_it();
    let (run, test) = block
        .split_once("# Run the tests.")
        .expect("the block ends with the test command");
    assert_eq!(
        test.trim(),
        "cargo test --workspace",
        "the README's test command"
    );
    assert!(
        run.contains("cargo run --release -- up --example &"),
        "the first command brings up the example fleet: {run}"
    );
    let script = run.replace("cargo run --release --", env!("CARGO_BIN_EXE_modelplane"));
    let dir = tempfile::tempdir().expect("tempdir");
    let kubectl = std::path::Path::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33");
    let mut path = std::env::var("PATH").unwrap_or_default();
    if kubectl.exists() {
        // The README's `kubectl`, the newest the machine has.
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).expect("bin");
        std::os::unix::fs::symlink(kubectl, bin.join("kubectl")).expect("link kubectl");
        path = format!("{}:{path}", bin.display());
    }
    let out = Command::new("timeout")
        .args(["600", "bash", "-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the block fails:\n{stdout}\n{stderr}");
    for expected in [
        "every replica is ready",
        "us-east",
        "us-west",
        "chat.completion.chunk",
        "stopped;",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} not shown:\n{stdout}"
        );
    }
    assert!(
        stdout.matches("data: [DONE]").count() >= 2,
        "both curl streams end: {stdout}"
    );
}
