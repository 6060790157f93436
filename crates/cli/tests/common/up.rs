//! `modelplane up` in a child process, and what a user does with it:
//! kubectl against its control plane and its clusters, curl through its
//! gateway.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Process, wait_for};

/// A running `modelplane up` and what it printed so far.
pub struct Up {
    pub process: Process,
    printed: Arc<Mutex<Vec<String>>>,
    pub kubeconfig: PathBuf,
    pub gateway: String,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub fn up(dir: &Path, gateway_port: u16, example: bool) -> Up {
    up_at_time_scale(dir, gateway_port, example, 4)
}

/// [`up`] with simulated time divided by `scale`: for tests whose story
/// includes minutes of staging a large model.
pub fn up_at_time_scale(dir: &Path, gateway_port: u16, example: bool, scale: u32) -> Up {
    // Under a typical user's umask (022): what `up` keeps private must be
    // so whatever the shell's umask lets through.
    let mut command = Command::new("sh");
    command
        .args(["-c", "umask 022 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_modelplane"))
        .args(["up", "--data-dir"])
        .arg(dir)
        .args(["--listen", "127.0.0.1:0", "--gateway-listen"])
        .arg(format!("127.0.0.1:{gateway_port}"))
        // Simulated minutes shortened: the test waits on what a user sees,
        // not on wall-clock provisioning.
        .args(["--time-scale", &scale.to_string()]);
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
    pub fn printed(&self, text: &str) -> bool {
        self.printed
            .lock()
            .expect("lines")
            .iter()
            .any(|l| l.contains(text))
    }

    pub fn wait_printed(&self, text: &str, timeout: Duration) {
        wait_for(&format!("`up` to print {text:?}"), timeout, || {
            self.printed(text).then_some(())
        });
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = Command::new(super::kubectl())
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
    pub fn stream(&self, path: &str, model: &str) -> String {
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

    pub fn streams(&self, path: &str, model: &str) {
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

impl Up {
    /// kubectl's result, without failing on an error.
    pub fn try_kubectl(&self, args: &[&str]) -> Option<String> {
        let out = Command::new(super::kubectl())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// A kubeconfig file for workload cluster `name`, from its Secret on the
    /// control plane, as a user would get it.
    pub fn cluster_kubeconfig(&self, name: &str) -> PathBuf {
        let secrets = self.kubectl(&["get", "secrets", "-n", "modelplane-system", "-o", "name"]);
        let secret = secrets
            .lines()
            .find(|s| s.starts_with(&format!("secret/{name}-kubeconfig")))
            .unwrap_or_else(|| panic!("cluster {name}'s kubeconfig Secret: {secrets}"))
            .to_string();
        let encoded = self.kubectl(&[
            "get",
            "-n",
            "modelplane-system",
            &secret,
            "-o",
            "jsonpath={.data.kubeconfig}",
        ]);
        let decoded = Command::new("base64")
            .arg("-d")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write as _;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(encoded.as_bytes())?;
                child.wait_with_output()
            })
            .expect("base64 runs");
        let path = self.kubeconfig.with_file_name(format!("{name}.kubeconfig"));
        std::fs::write(&path, decoded.stdout).expect("write the cluster's kubeconfig");
        path
    }

    /// kubectl against workload cluster `name`.
    pub fn kubectl_on(&self, name: &str, args: &[&str]) -> String {
        let kubeconfig = self.cluster_kubeconfig(name);
        let out = Command::new(super::kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl on {name} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// `modelplane sim …` against this control plane.
    pub fn sim(&self, args: &[&str]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .arg("sim")
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .output()
            .expect("modelplane sim runs");
        assert!(
            out.status.success(),
            "modelplane sim {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Applies `manifest` with kubectl.
    pub fn apply(&self, manifest: &str) {
        assert!(
            kubectl_apply(&self.kubeconfig, manifest),
            "kubectl apply failed"
        );
    }
}

/// `kubectl apply -f -` of `manifest` against `kubeconfig`: whether the
/// server acknowledged it (kubectl's error, if not, on stderr).
pub fn kubectl_apply(kubeconfig: &Path, manifest: &str) -> bool {
    let mut child = Command::new(super::kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("kubectl runs");
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(manifest.as_bytes())
            .expect("write the manifest");
    }
    child.wait().is_ok_and(|s| s.success())
}
