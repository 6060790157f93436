//! `modelplane up --example` measured as a user meets it (bench/RESULTS.md):
//! seconds from the command to the first streamed token and to every
//! replica serving, then the converged process's CPU and resident memory
//! while idle, and the latency the fleet gateway adds in front of an engine
//! (the same tiny request straight to the engine pod and through the
//! gateway, interleaved; medians).
//!
//! `cargo build --release -p modelplane && cargo run --release -p sim-bench --bin up`
//! — RUNS (default 3), IDLE_SECONDS (default 60), REQUESTS (default 200).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn binary() -> anyhow::Result<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/modelplane");
    if !path.exists() {
        bail!(
            "{} is missing: cargo build --release -p modelplane first",
            path.display()
        );
    }
    Ok(path)
}

/// Killed when dropped.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// curl's output and its total time in seconds.
fn curl(url: &str, body: &str) -> Option<(String, f64)> {
    let out = Command::new("curl")
        .args([
            "-sN",
            "--max-time",
            "10",
            "-H",
            "content-type: application/json",
        ])
        .args(["-d", body, "-w", "\n%{time_total}"])
        .arg(url)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, time) = text.rsplit_once('\n')?;
    Some((body.to_string(), time.trim().parse().ok()?))
}

fn streams(gateway: &str, model: &str) -> bool {
    let body = format!(
        r#"{{"model":"{model}","stream":true,"max_tokens":1,"messages":[{{"role":"user","content":"Hi"}}]}}"#
    );
    curl(&format!("http://{gateway}/v1/chat/completions"), &body)
        .is_some_and(|(text, _)| text.contains("chat.completion.chunk"))
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > timeout {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// CPU seconds (user + system) of `pid` so far.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: f64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    Ok(ticks / 100.0)
}

fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("VmRSS")?;
    Ok(kib / 1024.0)
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()?;
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// An engine pod's address (`IP:8000`) on cluster us-east, through its
/// kubeconfig Secret.
fn engine_address(dir: &Path) -> anyhow::Result<String> {
    let control = dir.join("kubeconfig");
    let secrets = kubectl(
        &control,
        &["get", "secrets", "-n", "modelplane-system", "-o", "name"],
    )?;
    let secret = secrets
        .lines()
        .find(|s| s.starts_with("secret/us-east-kubeconfig"))
        .context("us-east's kubeconfig Secret")?;
    let encoded = kubectl(
        &control,
        &[
            "get",
            "-n",
            "modelplane-system",
            secret,
            "-o",
            "jsonpath={.data.kubeconfig}",
        ],
    )?;
    let mut child = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(
        &mut child.stdin.take().context("stdin")?,
        encoded.as_bytes(),
    )?;
    let cluster = dir.join("us-east.kubeconfig");
    std::fs::write(&cluster, child.wait_with_output()?.stdout)?;
    let ips = kubectl(
        &cluster,
        &[
            "get",
            "pods",
            "-n",
            "ml-team",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.podIP}{\"\\n\"}{end}",
        ],
    )?;
    let ip = ips
        .lines()
        .find(|l| l.starts_with("qwen3-8b-") && !l.contains("-epp-"))
        .and_then(|l| l.split_whitespace().nth(1))
        .context("an engine pod's IP")?;
    Ok(format!("{ip}:8000"))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

struct Run {
    first_token: f64,
    all_serving: f64,
}

fn one_run(binary: &Path, run: u64) -> anyhow::Result<(Run, Up, String, PathBuf)> {
    let dir = std::env::temp_dir().join(format!("sim-bench-up-{}-{run}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let gateway = format!("127.0.0.1:{}", free_port()?);
    let started = Instant::now();
    let up = Up(Command::new(binary)
        .args([
            "up",
            "--example",
            "--listen",
            "127.0.0.1:0",
            "--gateway-listen",
            &gateway,
        ])
        .arg("--data-dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()?);
    wait_until("the first streamed token", Duration::from_secs(300), || {
        streams(&gateway, "qwen3-8b")
    })?;
    let first_token = started.elapsed().as_secs_f64();
    wait_until("every replica serving", Duration::from_secs(600), || {
        streams(&gateway, "qwen3-coder")
    })?;
    let all_serving = started.elapsed().as_secs_f64();
    Ok((
        Run {
            first_token,
            all_serving,
        },
        up,
        gateway,
        dir,
    ))
}

fn main() -> anyhow::Result<()> {
    let binary = binary()?;
    let runs = env("RUNS", 3).max(1);
    let mut first = Vec::new();
    let mut all = Vec::new();
    let mut last = None;
    for i in 0..runs {
        // One `up` at a time: the previous run's stops first.
        if let Some((up, _, dir)) = last.take() {
            drop::<Up>(up);
            let _ = std::fs::remove_dir_all(dir);
        }
        let (run, up, gateway, dir) = one_run(&binary, i)?;
        println!(
            "run {i}: first token {:.1} s, every replica serving {:.1} s",
            run.first_token, run.all_serving
        );
        first.push(run.first_token);
        all.push(run.all_serving);
        last = Some((up, gateway, dir));
    }
    println!(
        "median: first token {:.1} s, every replica serving {:.1} s",
        median(first),
        median(all)
    );

    let (up, gateway, dir) = last.context("one run")?;
    let pid = up.0.id();
    let idle = env("IDLE_SECONDS", 60);
    let before = cpu_seconds(pid)?;
    std::thread::sleep(Duration::from_secs(idle));
    let cpu = (cpu_seconds(pid)? - before) / idle as f64 * 100.0;
    println!(
        "idle {idle} s: CPU {cpu:.2} %, resident {:.0} MiB",
        rss_mib(pid)?
    );

    let engine = engine_address(&dir)?;
    let body = r#"{"model":"qwen3-8b","max_tokens":1,"messages":[{"role":"user","content":"Hi"}]}"#;
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for _ in 0..env("REQUESTS", 200) {
        if let Some((_, t)) = curl(&format!("http://{engine}/v1/chat/completions"), body) {
            direct.push(t * 1000.0);
        }
        if let Some((_, t)) = curl(
            &format!("http://{gateway}/ml-team/qwen3-8b/v1/chat/completions"),
            body,
        ) {
            through.push(t * 1000.0);
        }
    }
    let (d, t) = (median(direct), median(through));
    println!(
        "latency (median of {} each, interleaved): engine {d:.2} ms, through the fleet and cluster gateways {t:.2} ms, added {:.2} ms",
        env("REQUESTS", 200),
        t - d
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
