//! Every command block in docs/ runs as written: each page's `sh` blocks,
//! in order, in one shell (`bash -euo pipefail`) from the repository's
//! root, with `modelplane` and kubectl 1.33 on the PATH. `cargo run
//! --release --` and `./target/release/modelplane` are the binary under
//! test (the blocks would otherwise build a second, release copy), and a
//! block's `cargo build --release` is left out. The state a page writes
//! is outside the repository or ignored by git: `git status` is the same
//! after it.

use std::path::{Path, PathBuf};
use std::process::Command;

const DOCS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs");

/// The `sh` blocks of `markdown`, in order, as one script.
fn script(markdown: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in markdown.lines() {
        if line.starts_with("```") {
            inside = !inside && line.trim_end() == "```sh";
            continue;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// What the test runs instead of what a user pastes: the binary under test.
fn as_tested(script: &str) -> String {
    script
        .lines()
        .filter(|l| l.trim() != "cargo build --release")
        .map(|l| {
            l.replace("cargo run --release --", "modelplane")
                .replace("./target/release/modelplane", "modelplane")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `/tmp/…` directories a script writes, removed before it runs so
/// each run starts fresh.
fn scratch_dirs(script: &str) -> Vec<String> {
    let mut dirs: Vec<String> = script
        .match_indices("/tmp/")
        .map(|(at, _)| {
            script[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "/-_.".contains(*c))
                .collect::<String>()
        })
        .map(|p| p.splitn(4, '/').take(3).collect::<Vec<_>>().join("/"))
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// A directory holding `modelplane` (the binary under test) and kubectl
/// 1.33, the newest the machine has, first on the PATH.
fn bin_dir(root: &Path) -> PathBuf {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_modelplane"), bin.join("modelplane"))
        .expect("link modelplane");
    let kubectl = Path::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33");
    if kubectl.exists() {
        std::os::unix::fs::symlink(kubectl, bin.join("kubectl")).expect("link kubectl");
    }
    bin
}

fn git_status(repo: &Path) -> Option<String> {
    let out = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(repo)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// Runs `page`'s blocks; what bash printed, or why it failed.
fn run(page: &str, repo: &Path, path: &str) -> Result<String, String> {
    let markdown = std::fs::read_to_string(Path::new(DOCS).join(page)).expect("read the page");
    let script = as_tested(&script(&markdown));
    for dir in scratch_dirs(&script) {
        let _ = std::fs::remove_dir_all(dir);
    }
    let before = git_status(repo);
    let mut command = Command::new("timeout");
    command
        .args(["600", "bash", "-euo", "pipefail", "-c", &script])
        .current_dir(repo)
        .env("PATH", path)
        .env_remove("KUBECONFIG");
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    // Into files, not pipes: a server the page left in the background
    // would hold a pipe open, and waiting for its end would never return.
    let output = tempfile::tempdir().expect("tempdir");
    let (stdout, stderr) = (output.path().join("out"), output.path().join("err"));
    let mut child = command
        .stdout(std::fs::File::create(&stdout).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("bash runs");
    let group = child.id();
    let status = child.wait().expect("bash ends");
    // Whatever the page left running in the background goes with it.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(std::process::Stdio::null())
        .status();
    let printed = format!(
        "{}\n--- stderr\n{}",
        std::fs::read_to_string(&stdout).unwrap_or_default(),
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
    if !status.success() {
        return Err(format!("{page} exited with {status}:\n{printed}"));
    }
    if git_status(repo) != before {
        return Err(format!("{page} left files in the repository"));
    }
    Ok(printed)
}

#[test]
fn every_command_block_in_docs_runs_as_written() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let scratch = tempfile::tempdir().expect("tempdir");
    let path = format!(
        "{}:{}",
        bin_dir(scratch.path()).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut pages: Vec<String> = std::fs::read_dir(DOCS)
        .expect("docs/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".md"))
        .collect();
    pages.sort();
    let mut failed = Vec::new();
    for page in &pages {
        match run(page, &repo, &path) {
            Ok(printed) => println!("=== {page}: ok\n{printed}"),
            Err(why) => failed.push(why),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[test]
fn a_page_is_its_sh_blocks_in_order_with_the_binary_under_test() {
    let page = "text\n```sh\ncargo build --release\n./target/release/modelplane crds\n```\n\
                ```yaml\nkind: X\n```\n```sh\ncargo run --release -- up --data-dir /tmp/mp-x/y &\n```\n";
    let tested = as_tested(&script(page));
    assert_eq!(
        tested,
        "modelplane crds\nmodelplane up --data-dir /tmp/mp-x/y &"
    );
    assert_eq!(scratch_dirs(&tested), ["/tmp/mp-x"]);
}
