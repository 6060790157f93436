//! Capacity freed to a waiting replica placed (bench/RESULTS.md, issue 32):
//! on one simulated cluster with a pool of two 8-GPU nodes, `holder` (two
//! replicas of eight GPUs) fills both nodes and `waiting` (one replica of
//! eight) is left unplaced; then `holder` is deleted, and the harness
//! measures the seconds from the delete's answer to `waiting`'s
//! ModelReplica created and to it Ready (its engine serving). Watched, not
//! polled. Before the control loop re-planned on every change, the replica
//! waited for the 300 s resync.
//!
//! `cargo build --release -p modelplane -p sim-bench && ./target/release/freed`
//! — RUNS (default 5); WAIT the seconds to wait for the replica (default
//! 400, past the 300 s resync a baseline waits for); MODELPLANE the binary to run (default
//! target/release/modelplane); KEEP=1 keeps the data dir and its log.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::{StreamExt, TryStreamExt};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, WatchEvent, WatchParams,
};
use sim_bench::{Up, binary, env};

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(text) = stdin {
        std::io::Write::write_all(&mut child.stdin.take().context("stdin")?, text.as_bytes())?;
    }
    drop(child.stdin.take());
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// One cluster, one pool of two nodes of eight GPUs.
const FLEET: &str = r#"apiVersion: modelplane.ai/v1alpha1
kind: InferenceClass
metadata:
  name: h200-8x
spec:
  provisioning:
    provider: EKS
    eks:
      instanceType: p5en.48xlarge
      accelerator:
        type: nvidia-h200
        count: 8
  devices:
  - name: gpu
    driver: gpu.nvidia.com
    deviceClassName: gpu.nvidia.com
    count: 8
    capacity:
      memory: { value: "143771Mi" }
---
apiVersion: modelplane.ai/v1alpha1
kind: InferenceCluster
metadata:
  name: c0
spec:
  cluster:
    source: EKS
    eks:
      region: us-east-1
  nodePools:
  - name: h200
    className: h200-8x
    nodeCount: 2
    zones: [us-east-1a]
---
apiVersion: v1
kind: Namespace
metadata:
  name: ml-team
"#;

fn deployment(name: &str, replicas: usize) -> String {
    format!(
        r#"apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata:
  name: {name}
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
              count: 8
              selectors:
              - cel: device.driver == "gpu.nvidia.com"
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                args:
                - --model=Qwen/Qwen3-0.6B
                - --served-model-name={name}
                - --tensor-parallel-size=8
"#
    )
}

fn ready(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Seconds from `since` until a ModelReplica of `deployment` exists, and
/// until one is Ready. Watches again when the server ends a watch.
async fn created_then_ready(
    replicas: &Api<DynamicObject>,
    deployment: &str,
    since: Instant,
) -> anyhow::Result<(f64, f64)> {
    let selector = format!("modelplane.ai/deployment={deployment}");
    let mut created = None;
    loop {
        let list = replicas
            .list(&ListParams::default().labels(&selector))
            .await?;
        if !list.items.is_empty() {
            created.get_or_insert(since.elapsed().as_secs_f64());
        }
        if let Some(c) = created
            && list.items.iter().any(ready)
        {
            return Ok((c, since.elapsed().as_secs_f64()));
        }
        let version = list.metadata.resource_version.unwrap_or_default();
        let mut events = replicas
            .watch(
                &WatchParams::default().labels(&selector).timeout(290),
                &version,
            )
            .await?
            .boxed();
        while let Some(event) = events.try_next().await? {
            let object = match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => o,
                WatchEvent::Error(e) => bail!("watch: {e:?}"),
                _ => continue,
            };
            let at = since.elapsed().as_secs_f64();
            let created_at = *created.get_or_insert(at);
            if ready(&object) {
                return Ok((created_at, at));
            }
        }
    }
}

/// Until `deployment` has `count` Ready ModelReplicas (polled: not timed).
fn wait_replicas(kubeconfig: &Path, deployment: &str, count: usize) -> anyhow::Result<()> {
    let selector = format!("modelplane.ai/deployment={deployment}");
    let start = Instant::now();
    loop {
        let out = kubectl(
            kubeconfig,
            &["get", "mr", "-n", "ml-team", "-l", &selector, "-o", "json"],
            None,
        )
        .unwrap_or_default();
        let items: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let items = items["items"].as_array().cloned().unwrap_or_default();
        let ready = items
            .iter()
            .filter(|o| {
                o["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .count();
        if items.len() == count && ready == count {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(600) {
            bail!("{deployment}: {ready} of {count} replicas Ready after 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Until `deployment` says a replica is not placed for lack of room.
fn wait_unplaced(kubeconfig: &Path, deployment: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let reason = kubectl(
            kubeconfig,
            &[
                "get",
                "md",
                deployment,
                "-n",
                "ml-team",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"ReplicasScheduled\")].reason}",
            ],
            None,
        )
        .unwrap_or_default();
        if reason == "InsufficientCapacity" {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("{deployment} not reported short of room (ReplicasScheduled {reason:?})");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A client of the control plane `up` serves.
async fn client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

fn main() -> anyhow::Result<()> {
    let runs = env("RUNS", 5).max(1);
    let patience = Duration::from_secs(env("WAIT", 400) as u64);
    let dir = std::env::temp_dir().join(format!("sim-bench-freed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _up = Up(Command::new(binary()?)
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
        .spawn()?);
    let kubeconfig = dir.join("kubeconfig");
    let start = Instant::now();
    while kubectl(&kubeconfig, &["apply", "-f", "-"], Some(FLEET)).is_err() {
        if start.elapsed() > Duration::from_secs(120) {
            bail!("the control plane did not answer");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = runtime.block_on(client(&kubeconfig))?;
    let resource = ApiResource {
        group: "modelplane.ai".into(),
        version: "v1alpha1".into(),
        api_version: "modelplane.ai/v1alpha1".into(),
        kind: "ModelDeployment".into(),
        plural: "modeldeployments".into(),
    };
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "ml-team", &resource);
    let replicas: Api<DynamicObject> = Api::namespaced_with(
        client,
        "ml-team",
        &ApiResource {
            kind: "ModelReplica".into(),
            plural: "modelreplicas".into(),
            ..resource
        },
    );
    let (mut created, mut served) = (Vec::new(), Vec::new());
    for run in 0..runs {
        kubectl(
            &kubeconfig,
            &["apply", "-f", "-"],
            Some(&deployment("holder", 2)),
        )?;
        wait_replicas(&kubeconfig, "holder", 2)?;
        kubectl(
            &kubeconfig,
            &["apply", "-f", "-"],
            Some(&deployment("waiting", 1)),
        )?;
        wait_unplaced(&kubeconfig, "waiting")?;
        // Settled: nothing more happens until capacity frees.
        std::thread::sleep(Duration::from_secs(3));
        let (c, r) = runtime.block_on(async {
            deployments
                .delete("holder", &DeleteParams::default())
                .await?;
            let freed = Instant::now();
            tokio::time::timeout(patience, created_then_ready(&replicas, "waiting", freed))
                .await
                .map_err(|_| anyhow::anyhow!("no replica of waiting Ready within {patience:?}"))?
        })?;
        println!("run {run}: replica created {c:.2} s, Ready {r:.2} s after holder deleted");
        created.push(c);
        served.push(r);
        // Back to the start: nothing of either left.
        kubectl(
            &kubeconfig,
            &["delete", "md", "waiting", "-n", "ml-team", "--wait"],
            None,
        )?;
        wait_replicas(&kubeconfig, "waiting", 0)?;
        wait_replicas(&kubeconfig, "holder", 0)?;
    }
    println!(
        "median of {runs}: replica created {:.2} s, Ready {:.2} s after capacity freed",
        median(created),
        median(served)
    );
    if std::env::var_os("KEEP").is_some() {
        println!("data dir kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
