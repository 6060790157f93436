//! A fleet applied to `modelplane up` (bench/RESULTS.md, issue 15): CLUSTERS
//! simulated EKS clusters (half Standard, half Dynamo) with one pool of
//! single-GPU nodes each, and DEPLOYMENTS ModelDeployments of REPLICAS
//! replicas, applied with one `kubectl apply`; seconds until every cluster
//! is Ready and until every ModelReplica is Ready (its engine serving).
//!
//! `cargo build --release -p modelplane -p sim-bench && ./target/release/fleet`
//! — CLUSTERS (default 100), DEPLOYMENTS (default 100), REPLICAS (default 10);
//! MODELPLANE the binary to run (default target/release/modelplane); KEEP=1
//! keeps the data dir and its log.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sim_bench::{Up, binary, env};

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

/// The class of the fleet's pools: one 24 GiB GPU a node.
const CLASS: &str = r#"apiVersion: modelplane.ai/v1alpha1
kind: InferenceClass
metadata:
  name: l4-1x
spec:
  provisioning:
    provider: EKS
    eks:
      instanceType: g6.xlarge
      accelerator:
        type: nvidia-l4
        count: 1
  devices:
  - name: gpu
    driver: gpu.nvidia.com
    deviceClassName: gpu.nvidia.com
    count: 1
    attributes:
      architecture: { string: Ada }
    capacity:
      memory: { value: "23034Mi" }
---
apiVersion: v1
kind: Namespace
metadata:
  name: ml-team
"#;

fn cluster(i: usize, nodes: usize) -> String {
    let stack = if i.is_multiple_of(2) {
        "Standard"
    } else {
        "Dynamo"
    };
    format!(
        r#"---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: c{i}
spec:
  stack: {stack}
  cluster:
    source: EKS
    eks:
      region: us-east-1
  nodePools:
  - name: l4
    className: l4-1x
    nodeCount: {nodes}
    zones: [us-east-1a]
"#
    )
}

fn deployment(i: usize, replicas: usize) -> String {
    format!(
        r#"---
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: m{i}
  namespace: ml-team
spec:
  replicas: {replicas}
  template:
    spec:
      engines:
      - name: engine
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
                args:
                - --model=Qwen/Qwen3-0.6B
                - --served-model-name=m{i}
"#
    )
}

/// Seconds from `since` until `wanted` objects at `path` are Ready, with a
/// line each time the count changes. Watched, not polled: a `kubectl get`
/// of every ModelReplica every half second took a fifth of the machine
/// from the `up` it measured.
async fn wait_ready(
    client: &kube::Client,
    path: &str,
    wanted: usize,
    since: Instant,
) -> anyhow::Result<f64> {
    let resource = path.rsplit('/').next().unwrap_or(path);
    let mut printed: Option<Instant> = None;
    let last = std::cell::Cell::new(0);
    let counting = sim_bench::until_ready(client, path, wanted, |now| {
        last.set(now);
        // A line a second at most, and the last.
        if now < wanted && printed.is_some_and(|p| p.elapsed() < Duration::from_secs(1)) {
            return;
        }
        printed = Some(Instant::now());
        eprintln!(
            "{:6.1} s: {now} of {wanted} {resource} Ready",
            since.elapsed().as_secs_f64()
        );
    });
    tokio::time::timeout(Duration::from_secs(900), counting)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "{} of {wanted} {resource} Ready after 15 minutes",
                last.get()
            )
        })??;
    Ok(since.elapsed().as_secs_f64())
}

/// A client of the control plane `up` serves.
async fn client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

fn main() -> anyhow::Result<()> {
    let (clusters, deployments, replicas) = (
        env("CLUSTERS", 100),
        env("DEPLOYMENTS", 100),
        env("REPLICAS", 10),
    );
    // A little room beyond one replica a node, as a platform team leaves.
    let nodes = (deployments * replicas).div_ceil(clusters) + 2;
    let dir = std::env::temp_dir().join(format!("sim-bench-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let up = Up(Command::new(binary()?)
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--gateway-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?);
    let kubeconfig = dir.join("kubeconfig");
    let started = Instant::now();
    while kubectl(
        &kubeconfig,
        &["get", "crd", "modeldeployments.modelplane.ai"],
    )
    .is_err()
    {
        if started.elapsed() > Duration::from_secs(120) {
            bail!("up did not serve its CRDs in 2 minutes");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut manifest = CLASS.to_string();
    manifest.extend((0..clusters).map(|i| cluster(i, nodes)));
    manifest.extend((0..deployments).map(|i| deployment(i, replicas)));
    let file = dir.join("fleet.yaml");
    std::fs::write(&file, manifest)?;

    let applied = Instant::now();
    kubectl(
        &kubeconfig,
        &[
            "apply",
            "--server-side",
            "-f",
            file.to_str().context("path")?,
        ],
    )?;
    println!(
        "{clusters} clusters × {nodes} single-GPU nodes, {deployments} deployments × {replicas} replicas applied in {:.1} s",
        applied.elapsed().as_secs_f64()
    );
    let runtime = tokio::runtime::Runtime::new()?;
    let all = runtime.block_on(async {
        let client = client(&kubeconfig).await?;
        let clusters_ready = wait_ready(
            &client,
            "/apis/modelplane.ai/v1alpha1/inferenceclusters",
            clusters,
            applied,
        )
        .await?;
        println!("every cluster Ready {clusters_ready:.1} s after the apply");
        let all = wait_ready(
            &client,
            "/apis/modelplane.ai/v1alpha1/modelreplicas",
            deployments * replicas,
            applied,
        )
        .await?;
        anyhow::Ok(all)
    })?;
    println!(
        "every replica Ready {all:.1} s after the apply (target ≤ 60 s for 100 clusters and 1,000 replicas)"
    );
    let pid = up.0.id();
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    println!("up's resident memory then: {:.0} MB", rss * 1024.0 / 1e6);
    drop(up);
    if std::env::var_os("KEEP").is_some() {
        println!("kept {} (up's log: modelplane.log)", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
