//! What the CLI's process tests share: `modelplane apiserver` in a child
//! process, kubectl pointed at it, and waiting for what a user would see.

#![allow(dead_code)]

pub mod existing;
pub mod in_process;
pub mod up;

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The status (`"True"`, `"False"`…) of `object`'s condition `type_`.
pub fn condition(object: &serde_json::Value, type_: &str) -> Option<String> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

/// kubectl 1.33 from the Google Cloud SDK, else the one on the PATH.
pub fn kubectl() -> PathBuf {
    let sdk = PathBuf::from("/usr/lib/google-cloud-sdk/bin/kubectl.1.33");
    if sdk.exists() {
        sdk
    } else {
        PathBuf::from("kubectl")
    }
}

/// The kubectl versions the tests drive, both required (this machine kind
/// ships them with the Google Cloud SDK; a missing one fails the run, it
/// never shrinks it): 1.27, the oldest supported, which validates against
/// `/openapi/v2` and sends JSON, and 1.33 (OpenAPI v3, protobuf bodies).
pub fn kubectl_versions() -> Vec<PathBuf> {
    ["1.27", "1.33"]
        .iter()
        .map(|version| {
            let path = PathBuf::from(format!("/usr/lib/google-cloud-sdk/bin/kubectl.{version}"));
            assert!(
                path.exists(),
                "kubectl {version} is missing at {}: the tests drive kubectl 1.27 and 1.33",
                path.display()
            );
            path
        })
        .collect()
}

/// A `modelplane` child process, killed when dropped.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `kubectl get --watch` running beside a test ([`Server::watch_names`]).
pub struct Watch {
    _process: Process,
    seen: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
}

impl Watch {
    /// Every distinct name the watch has reported so far.
    pub fn seen(&self) -> std::collections::BTreeSet<String> {
        self.seen.lock().expect("names").clone()
    }
}

/// `modelplane apiserver` on a free port.
pub struct Server {
    pub process: Process,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
}

impl Server {
    pub fn start(dir: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["apiserver", "--data-dir"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the apiserver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the ready line");
        let url = line
            .strip_prefix("serving on ")
            .and_then(|rest| rest.split(';').next())
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_string();
        Server {
            process: Process(child),
            dir: dir.to_path_buf(),
            kubeconfig: dir.join("kubeconfig"),
            url,
        }
    }

    /// kubectl against this server (or the logical cluster `cluster`).
    pub fn kubectl_in(
        &self,
        cluster: Option<&str>,
        args: &[&str],
        stdin: Option<&str>,
    ) -> (bool, String, String) {
        let mut command = Command::new(kubectl());
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(
                self.dir
                    .join(format!("kube-cache-{}", cluster.unwrap_or("root"))),
            );
        if let Some(cluster) = cluster {
            command
                .arg("--server")
                .arg(format!("{}/clusters/{cluster}", self.url));
        }
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("kubectl runs");
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("write stdin");
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().expect("kubectl ends");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// kubectl against the root cluster; panics on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl_in(None, args, None);
        assert!(ok, "kubectl {args:?}: {out}{err}");
        out
    }

    /// `kubectl apply --server-side -f -` of `manifest` in `cluster`.
    pub fn apply(&self, cluster: Option<&str>, manifest: &str) {
        let (ok, out, err) = self.kubectl_in(
            cluster,
            &["apply", "--server-side", "-f", "-"],
            Some(manifest),
        );
        assert!(ok, "apply: {out}{err}");
    }

    /// `kubectl get <args> --watch -o name` in the background: every name it
    /// reports (each object listed first, then each one an event names).
    pub fn watch_names(&self, args: &[&str]) -> Watch {
        let mut child = Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["get", "--watch", "-o", "name"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("kubectl get --watch");
        let stdout = child.stdout.take().expect("stdout");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let lines = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                lines.lock().expect("names").insert(line);
            }
        });
        Watch {
            _process: Process(child),
            seen,
        }
    }

    /// A kubeconfig for the logical cluster `name` (the root's, with its path).
    pub fn logical_kubeconfig(&self, name: &str) -> String {
        std::fs::read_to_string(&self.kubeconfig)
            .expect("kubeconfig")
            .replace(
                &format!("server: {}", self.url),
                &format!("server: {}/clusters/{name}", self.url),
            )
    }
}

/// Polls `check` every 100 ms until it gives a value, or panics after
/// `timeout` naming `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
