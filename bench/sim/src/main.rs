//! The simulated fleet's benchmark (issue 14's measurements), against the
//! real binaries: `modelplane apiserver` holds the control plane and the
//! workload clusters, `modelplane sim` (realistic profile, time scale
//! `TIME_SCALE`) provisions them and runs their pods; what `modelplane
//! render` prints is applied as a user would. Two measurements, each on a
//! Standard and a Dynamo cluster of the same hardware and storage:
//!
//! 1. **weights**: a 70B-class model (140 GiB in its ModelCache) on 8 nodes
//!    of 8×H200 with EFA: replica 1 starts alone; once it serves, replicas
//!    2..8 start together. The time until each is Ready, in simulated
//!    seconds, and an SVG plot of it (`bench/sim/weights.svg`).
//! 2. **gangs**: two Leader + Worker deployments (2 nodes each) contend for
//!    3 nodes; the GPU-seconds held by gangs that are not whole, over
//!    `GANG_SECONDS` simulated seconds.
//!
//! `cargo build --release -p modelplane && cargo run --release -p sim-bench`

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, Config};
use serde_json::{Value, json};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn env(name: &str, default: f64) -> f64 {
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

fn modelplane(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(binary()?).args(args).output()?;
    if !out.status.success() {
        bail!(
            "modelplane {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn apply(client: &Client, object: &Value) -> anyhow::Result<()> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let mut last = None;
    // A CRD just installed may take a moment to be served.
    for _ in 0..50 {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((ar, caps)) => {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
                    Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
                        Api::namespaced_with(client.clone(), ns, &ar)
                    }
                    _ => Api::all_with(client.clone(), &ar),
                };
                api.patch(
                    name,
                    &PatchParams::apply("bench").force(),
                    &Patch::Apply(object),
                )
                .await
                .with_context(|| format!("applying {kind} {name}"))?;
                return Ok(());
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{kind} is not served: {last:?}")
}

async fn apply_all(client: &Client, objects: &[Value]) -> anyhow::Result<()> {
    for object in objects {
        apply(client, object).await?;
    }
    Ok(())
}

fn documents(text: &str) -> Vec<Value> {
    // `modelplane crds` and `providers -o yaml` print YAML; JSON is asked for elsewhere.
    text.split("\n---")
        .filter(|d| !d.trim().is_empty())
        .filter_map(|d| yaml_to_json(d).ok())
        .collect()
}

fn yaml_to_json(yaml: &str) -> anyhow::Result<Value> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("python3 with PyYAML")?;
    let mut child = out;
    std::io::Write::write_all(&mut child.stdin.take().context("stdin")?, yaml.as_bytes())?;
    let output = child.wait_with_output()?;
    Ok(serde_json::from_slice(&output.stdout)?)
}

async fn client_for(kubeconfig: &str) -> anyhow::Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

fn is_true(object: &Value, type_: &str) -> bool {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

async fn list(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Vec<Value> {
    let ar = resource(api_version, kind, plural);
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .collect()
        })
        .unwrap_or_default()
}

async fn wait<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if started.elapsed() > timeout {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/fleet");

/// A fleet of one EKS cluster `name` on `stack` with `nodes` 8×H200 EFA
/// nodes, and `deployment` (YAML).
fn fleet(
    dir: &Path,
    name: &str,
    stack: &str,
    nodes: u32,
    deployment: &str,
) -> anyhow::Result<PathBuf> {
    let fleet = dir.join(name);
    std::fs::create_dir_all(&fleet)?;
    for file in ["namespace.yaml", "inference-classes.yaml"] {
        std::fs::copy(format!("{EXAMPLES}/{file}"), fleet.join(file))?;
    }
    std::fs::write(
        fleet.join("cluster.yaml"),
        format!(
            "apiVersion: modelplane.ai/v1alpha1\nkind: InferenceCluster\nmetadata:\n  name: {name}\nspec:\n  stack: {stack}\n  cluster:\n    source: EKS\n    eks:\n      region: us-east-1\n  nodePools:\n  - name: h200\n    className: h200-8x\n    nodeCount: {nodes}\n    zones: [us-east-1a]\n    fabric:\n      type: EFA\n"
        ),
    )?;
    std::fs::write(fleet.join("deployment.yaml"), deployment)?;
    Ok(fleet)
}

const LLAMA: &str = r#"apiVersion: modelplane.ai/v1alpha1
kind: ModelCache
metadata: { name: llama-70b, namespace: ml-team }
spec:
  source: HuggingFace
  huggingFace: { repo: meta-llama/Llama-3.1-70B-Instruct, sizeGiB: 140 }
---
apiVersion: modelplane.ai/v1alpha1
kind: ModelDeployment
metadata: { name: llama-70b, namespace: ml-team }
spec:
  replicas: 8
  template:
    spec:
      modelCacheRef: { name: llama-70b }
      engines:
      - name: main
        members:
        - role: Standalone
          nodeSelector:
            devices:
            - name: gpu
              count: 8
              selectors:
              - cel: device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("120Gi")) >= 0
          template:
            spec:
              containers:
              - name: engine
                image: vllm/vllm-openai:v0.23.0
                command: ["/bin/sh", "-c"]
                args: ["exec vllm serve /mnt/models --served-model-name=llama-70b --tensor-parallel-size=8 --load-format modelexpress --port=8000"]
"#;

struct Rendered {
    control: Vec<Value>,
    cluster: Vec<Value>,
}

fn render(fleet: &Path, cluster: &str) -> anyhow::Result<Rendered> {
    let out: Value = serde_json::from_str(&modelplane(&[
        "render",
        "-f",
        fleet.to_str().context("utf-8")?,
        "-o",
        "json",
    ])?)?;
    let control = out["controlPlane"]
        .as_array()
        .context("control plane")?
        .iter()
        .filter(|o| o["kind"] != "ModelReplica")
        .cloned()
        .collect();
    let cluster = out["clusters"][cluster]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(Rendered { control, cluster })
}

struct Setup {
    _server: Killed,
    _sim: Killed,
    root: Client,
    kubeconfig: String,
}

async fn setup(dir: &Path, fleets: &[&Path], time_scale: f64) -> anyhow::Result<Setup> {
    let mut server = Command::new(binary()?)
        .args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"))
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(server.stdout.take().context("stdout")?).read_line(&mut line)?;
    let server = Killed(server);
    let kubeconfig_path = dir.join("data/kubeconfig");
    let kubeconfig = std::fs::read_to_string(&kubeconfig_path)?;
    let sim = Killed(
        Command::new(binary()?)
            .args([
                "sim",
                "--profile",
                "realistic",
                "--time-scale",
                &time_scale.to_string(),
                "--kubeconfig",
            ])
            .arg(&kubeconfig_path)
            .env("RUST_LOG", "error")
            .stderr(Stdio::null())
            .spawn()?,
    );
    let root = client_for(&kubeconfig).await?;
    apply_all(&root, &documents(&modelplane(&["crds"])?)).await?;
    apply(&root, &json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "modelplane-system" } })).await?;
    for fleet in fleets {
        let path = fleet.to_str().context("utf-8")?;
        apply_all(
            &root,
            &documents(&modelplane(&["providers", "-f", path, "-o", "yaml"])?),
        )
        .await?;
        // Namespaces first, then the rest in name order.
        let mut files: Vec<PathBuf> = std::fs::read_dir(fleet)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        files.sort_by_key(|p| (!p.ends_with("namespace.yaml"), p.clone()));
        for file in files {
            apply_all(&root, &documents(&std::fs::read_to_string(file)?)).await?;
        }
    }
    Ok(Setup {
        _server: server,
        _sim: sim,
        root,
        kubeconfig,
    })
}

/// Waits for cluster `name` and its stack, then gives a client for it.
async fn cluster_up(setup: &Setup, name: &str, control: &[Value]) -> anyhow::Result<Client> {
    apply_all(&setup.root, control).await?;
    wait(
        &format!("cluster {name} and its stack"),
        Duration::from_secs(600),
        async || {
            let releases = list(
                &setup.root,
                "helm.m.crossplane.io/v1beta1",
                "Release",
                "releases",
                Some("modelplane-system"),
            )
            .await;
            let ours: Vec<&Value> = releases
                .iter()
                .filter(|r| {
                    r["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(name))
                })
                .collect();
            (!ours.is_empty() && ours.iter().all(|r| is_true(r, "Ready"))).then_some(())
        },
    )
    .await?;
    let url = setup
        .kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .context("server")?
        .to_string();
    let client = client_for(
        &setup
            .kubeconfig
            .replace(&url, &format!("{url}/clusters/{name}")),
    )
    .await?;
    apply(&client, &json!({ "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": { "name": "modelplane-rwx-efs" }, "provisioner": "efs.csi.aws.com" })).await?;
    Ok(client)
}

fn engine_of(object: &Value) -> Option<String> {
    let kind = object["kind"].as_str()?;
    matches!(kind, "Deployment" | "LeaderWorkerSet" | "PodCliqueSet")
        .then(|| object["metadata"]["name"].as_str().map(str::to_string))
        .flatten()
        .filter(|n| !n.contains("-epp-"))
}

/// The replicas (their `modelplane.ai/serving` label) with a Ready engine pod.
async fn ready_replicas(client: &Client) -> BTreeSet<String> {
    list(client, "v1", "Pod", "pods", Some("ml-team"))
        .await
        .into_iter()
        .filter(|p| is_true(p, "Ready") && p["spec"]["containers"][0]["name"] == "engine")
        .filter_map(|p| {
            p["metadata"]["labels"]["modelplane.ai/serving"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

/// Measurement 1 on one stack: simulated seconds from replicas 2..8's start to each Ready.
async fn weights(dir: &Path, stack: &str, time_scale: f64) -> anyhow::Result<(f64, Vec<f64>)> {
    let name = format!("w-{}", stack.to_lowercase());
    let fleet = fleet(dir, &name, stack, 8, LLAMA)?;
    let rendered = render(&fleet, &name)?;
    let setup = setup(
        &dir.join(&name).with_extension("run"),
        &[&fleet],
        time_scale,
    )
    .await?;
    let client = cluster_up(&setup, &name, &rendered.control).await?;
    let engines: Vec<&Value> = rendered
        .cluster
        .iter()
        .filter(|o| engine_of(o).is_some())
        .collect();
    let first = engines.first().context("an engine workload")?;
    let others: Vec<Value> = rendered
        .cluster
        .iter()
        .filter(|o| engine_of(o).is_none() || o != first)
        .cloned()
        .collect();
    let (first_objects, rest): (Vec<Value>, Vec<Value>) =
        others.into_iter().partition(|o| engine_of(o).is_none());
    let started = Instant::now();
    apply_all(&client, &first_objects).await?;
    apply(&client, first).await?;
    wait("replica 1 Ready", Duration::from_secs(600), async || {
        (ready_replicas(&client).await.len() == 1).then_some(())
    })
    .await?;
    let first_ready = started.elapsed().as_secs_f64() * time_scale;
    let t0 = Instant::now();
    apply_all(&client, &rest).await?;
    let mut times = Vec::new();
    while times.len() < rest.len() {
        let ready = ready_replicas(&client).await.len().saturating_sub(1);
        while times.len() < ready {
            times.push(t0.elapsed().as_secs_f64() * time_scale);
        }
        if t0.elapsed() > Duration::from_secs(600) {
            bail!("replicas 2..8 not Ready after 10 minutes on {stack}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((first_ready, times))
}

/// Measurement 2 on one stack: GPU-seconds held by gangs not whole.
async fn gangs(dir: &Path, stack: &str, time_scale: f64, seconds: f64) -> anyhow::Result<f64> {
    let name = format!("g-{}", stack.to_lowercase());
    let coder = std::fs::read_to_string(format!("{EXAMPLES}/qwen3-coder.yaml"))?;
    let two = format!(
        "{coder}\n---\n{}",
        coder.replace(
            "name: qwen3-coder\n  namespace",
            "name: qwen3-coder-b\n  namespace"
        )
    );
    // Rendered where both fit (4 nodes), run where only one does (3 nodes).
    let roomy = fleet(&dir.join("roomy"), &name, stack, 4, &two)?;
    let rendered = render(&roomy, &name)?;
    let tight = fleet(dir, &name, stack, 3, &two)?;
    let tight_rendered = render(&tight, &name)?;
    let setup = setup(
        &dir.join(&name).with_extension("run"),
        &[&tight],
        time_scale,
    )
    .await?;
    let client = cluster_up(&setup, &name, &tight_rendered.control).await?;
    apply_all(&client, &rendered.cluster).await?;
    let sample = Duration::from_millis(100);
    let started = Instant::now();
    let mut held = 0.0;
    while started.elapsed().as_secs_f64() * time_scale < seconds {
        let pods = list(&client, "v1", "Pod", "pods", Some("ml-team")).await;
        let mut groups: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for pod in pods
            .iter()
            .filter(|p| p["spec"]["containers"][0]["name"] == "engine")
        {
            let labels = &pod["metadata"]["labels"];
            let gang = labels["grove.io/podgang"]
                .as_str()
                .or(labels["leaderworkerset.sigs.k8s.io/group-key"].as_str())
                .unwrap_or_default()
                .to_string();
            let entry = groups.entry(gang).or_default();
            entry.0 += 1;
            entry.1 += usize::from(pod["spec"]["nodeName"].is_string());
        }
        // Every engine pod of these gangs holds 8 GPUs once bound; a gang with
        // some pods bound and others not holds them serving nothing.
        let incomplete: usize = groups
            .values()
            .filter(|(all, bound)| *bound > 0 && bound < all)
            .map(|(_, bound)| bound * 8)
            .sum();
        held += incomplete as f64 * sample.as_secs_f64() * time_scale;
        tokio::time::sleep(sample).await;
    }
    Ok(held)
}

fn svg(series: &[(&str, &str, Vec<f64>)]) -> String {
    let (w, h, m) = (640.0, 360.0, 50.0);
    let max = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().copied())
        .fold(1.0_f64, f64::max)
        * 1.1;
    let x = |i: usize| m + (i as f64) * (w - 2.0 * m) / 6.0;
    let y = |v: f64| h - m - v / max * (h - 2.0 * m);
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n"
    );
    out.push_str(&format!("<text x='{}' y='20' text-anchor='middle'>Time until replica N is Ready (70B, 140 GiB; replicas 2–8 start together)</text>\n", w / 2.0));
    out.push_str(&format!("<line x1='{m}' y1='{}' x2='{}' y2='{}' stroke='black'/><line x1='{m}' y1='{m}' x2='{m}' y2='{}' stroke='black'/>\n", h - m, w - m, h - m, h - m));
    for i in 0..7 {
        out.push_str(&format!(
            "<text x='{}' y='{}' text-anchor='middle'>{}</text>\n",
            x(i),
            h - m + 16.0,
            i + 2
        ));
    }
    out.push_str(&format!(
        "<text x='{}' y='{}' text-anchor='middle'>replica N</text>\n",
        w / 2.0,
        h - 12.0
    ));
    for k in 0..=4 {
        let v = max * f64::from(k) / 4.0;
        out.push_str(&format!(
            "<text x='{}' y='{}' text-anchor='end'>{v:.0} s</text>\n",
            m - 4.0,
            y(v) + 4.0
        ));
    }
    for (n, (label, color, values)) in series.iter().enumerate() {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        out.push_str(&format!(
            "<polyline fill='none' stroke='{color}' stroke-width='2' points='{}'/>\n",
            points.join(" ")
        ));
        out.push_str(&format!(
            "<text x='{}' y='{}' fill='{color}'>{label}</text>\n",
            w - m - 150.0,
            m + 16.0 * n as f64
        ));
    }
    out.push_str("</svg>\n");
    out
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let time_scale = env("TIME_SCALE", 60.0);
    let gang_seconds = env("GANG_SECONDS", 300.0);
    let dir = std::env::temp_dir().join(format!("sim-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;

    let (std_first, standard) = weights(&dir, "Standard", time_scale).await?;
    let (dyn_first, dynamo) = weights(&dir, "Dynamo", time_scale).await?;
    println!("weights, simulated seconds (realistic profile, time scale {time_scale}):");
    println!(
        "  replica 1 Ready after: Standard {std_first:.1} s, Dynamo {dyn_first:.1} s (cache hydration included)"
    );
    for (i, (s, d)) in standard.iter().zip(&dynamo).enumerate() {
        println!("  replica {}: Standard {s:.1} s, Dynamo {d:.1} s", i + 2);
    }
    if let (Some(s), Some(d)) = (standard.last(), dynamo.last()) {
        println!(
            "  replica 8: Standard / Dynamo = {:.1}×",
            s / d.max(f64::MIN_POSITIVE)
        );
    }
    let plot = Path::new(env!("CARGO_MANIFEST_DIR")).join("weights.svg");
    std::fs::write(
        &plot,
        svg(&[
            ("Standard (storage)", "#c0392b", standard),
            ("Dynamo + ModelExpress (EFA)", "#2471a3", dynamo),
        ]),
    )?;
    println!("  plot: {}", plot.display());

    let standard = gangs(&dir, "Standard", time_scale, gang_seconds).await?;
    let dynamo = gangs(&dir, "Dynamo", time_scale, gang_seconds).await?;
    println!(
        "gangs: GPU-seconds held by incomplete gangs over {gang_seconds:.0} simulated seconds: Standard {standard:.0}, Dynamo {dynamo:.0}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
