//! The simulated fleet at scale (issue 14's target: 1,000 clusters × 8
//! pools × 16 nodes in one process, ≤ 2 GiB, idle CPU ≤ 5 %, every node
//! Ready ≤ 60 s on the fast profile): `modelplane apiserver` + `modelplane
//! sim`; the harness writes, per cluster, the managed resources an EKS
//! cluster's nodes need (its `Cluster`, `ClusterAuth` and one `NodeGroup`
//! per pool) and waits until every node of every cluster is Ready.
//!
//! `cargo build --release -p modelplane && cargo run --release -p sim-bench --bin scale`
//! (`CLUSTERS`, `POOLS`, `NODES`, `IDLE_SECONDS`, `MODELPLANE`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::StreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, WatchEvent, WatchParams,
};
use kube::{Client, Config};
use serde_json::{Value, json};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
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

async fn apply(client: &Client, ar: &ApiResource, object: &Value) -> anyhow::Result<()> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    for attempt in 0..100 {
        match api
            .patch(
                name,
                &PatchParams::apply("bench").force(),
                &Patch::Apply(object),
            )
            .await
        {
            Ok(_) => return Ok(()),
            // The simulator installs the CRDs as it starts.
            Err(_) if attempt < 99 => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("unreachable")
}

async fn client_for(kubeconfig: &str) -> anyhow::Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

fn managed(kind: &str, name: &str, cluster: &str, for_provider: Value) -> Value {
    json!({
        "apiVersion": "eks.aws.m.upbound.io/v1beta1", "kind": kind,
        "metadata": { "name": name, "namespace": "modelplane-system", "labels": { "modelplane.ai/cluster": cluster } },
        "spec": { "providerConfigRef": { "kind": "ClusterProviderConfig", "name": "default" }, "forProvider": for_provider },
    })
}

/// Writers declaring clusters at once.
const WRITERS: usize = 16;

/// Cluster `c`'s managed resources: its `Cluster`, `ClusterAuth` and a
/// `NodeGroup` of `nodes` per pool.
async fn declare(
    root: &Client,
    (cluster_r, auth_r, group_r): &(ApiResource, ApiResource, ApiResource),
    c: usize,
    pools: usize,
    nodes: usize,
) -> anyhow::Result<()> {
    let name = format!("c{c:04}");
    apply(
        root,
        cluster_r,
        &managed(
            "Cluster",
            &format!("{name}-cluster"),
            &name,
            json!({ "region": "us-east-1" }),
        ),
    )
    .await?;
    let mut auth = managed(
        "ClusterAuth",
        &format!("{name}-auth"),
        &name,
        json!({ "region": "us-east-1", "clusterNameRef": { "name": format!("{name}-cluster") } }),
    );
    auth["spec"]["writeConnectionSecretToRef"] = json!({ "name": format!("{name}-kubeconfig") });
    apply(root, auth_r, &auth).await?;
    for p in 0..pools {
        let group = managed(
            "NodeGroup",
            &format!("{name}-pool-{p}"),
            &name,
            json!({
                "region": "us-east-1", "clusterNameRef": { "name": format!("{name}-cluster") }, "instanceTypes": ["p5en.48xlarge"],
                "scalingConfig": { "desiredSize": nodes, "minSize": 0, "maxSize": nodes },
                "labels": { "modelplane.ai/pool": format!("pool-{p}") },
                "taint": [{ "key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE" }],
            }),
        );
        apply(root, group_r, &group).await?;
    }
    Ok(())
}

/// Waits until `want` nodes of the cluster `kubeconfig` reaches are Ready,
/// adding what it counts to `ready_nodes`. One client for the whole wait:
/// a client per attempt opened a TLS connection each time, a thousand every
/// half second, and the handshakes took a quarter of the API server's CPU
/// from the simulator it serves.
async fn nodes_ready(
    kubeconfig: String,
    want: usize,
    ready_nodes: Arc<AtomicUsize>,
) -> anyhow::Result<()> {
    let client = client_for(&kubeconfig).await?;
    let mut before = 0;
    sim_bench::until_ready(&client, "/api/v1/nodes", want, |now| {
        ready_nodes.fetch_add(now, Ordering::Relaxed);
        ready_nodes.fetch_sub(before, Ordering::Relaxed);
        before = now;
    })
    .await
}

/// The name of the connection Secret of cluster `c`, as `declare` asks for it.
fn kubeconfig_secret(c: usize) -> String {
    format!("c{c:04}-kubeconfig")
}

/// Calls `found` once for each cluster (by index) whose kubeconfig Secret
/// the simulated cloud has written, watching the control plane's Secrets:
/// a cluster's node watch starts once its API can answer.
async fn kubeconfigs_written(
    root: &Client,
    clusters: usize,
    mut found: impl FnMut(usize),
) -> anyhow::Result<()> {
    let secrets: Api<DynamicObject> = Api::namespaced_with(
        root.clone(),
        "modelplane-system",
        &resource("v1", "Secret", "secrets"),
    );
    let mut pending: HashMap<String, usize> =
        (0..clusters).map(|c| (kubeconfig_secret(c), c)).collect();
    let mut note = |name: Option<&String>| {
        if let Some(c) = name.and_then(|n| pending.remove(n)) {
            found(c);
        }
        pending.is_empty()
    };
    loop {
        let list = secrets.list_metadata(&ListParams::default()).await?;
        let mut all = clusters == 0;
        for s in &list.items {
            all = note(s.metadata.name.as_ref());
        }
        if all {
            return Ok(());
        }
        let version = list.metadata.resource_version.unwrap_or_default();
        let mut events = secrets
            .watch_metadata(&WatchParams::default(), &version)
            .await?
            .boxed();
        // A watch that ends or fails: list again.
        while let Some(Ok(event)) = events.next().await {
            if let WatchEvent::Added(s) | WatchEvent::Modified(s) = &event
                && note(s.metadata.name.as_ref())
            {
                return Ok(());
            }
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (clusters, pools, nodes) = (env("CLUSTERS", 100), env("POOLS", 8), env("NODES", 16));
    let idle = env("IDLE_SECONDS", 30);
    // `MODELPLANE=<binary>` measures another build (side by side with this one).
    let binary = std::env::var_os("MODELPLANE").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/modelplane"),
        std::path::PathBuf::from,
    );
    let dir = std::env::temp_dir().join(format!("sim-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut server = Command::new(&binary)
        .args([
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--max-connections",
            "18000",
            "--data-dir",
        ])
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(server.stdout.take().context("stdout")?).read_line(&mut line)?;
    let server = Killed(server);
    let kubeconfig = std::fs::read_to_string(dir.join("kubeconfig"))?;
    let log: Stdio = match std::env::var("SIM_LOG_FILE") {
        Ok(path) => std::fs::File::create(path)?.into(),
        Err(_) => Stdio::null(),
    };
    let sim = Killed(
        Command::new(&binary)
            .args(["sim", "--kubeconfig"])
            .arg(dir.join("kubeconfig"))
            .env(
                "RUST_LOG",
                std::env::var("SIM_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stderr(log)
            .spawn()?,
    );
    let root = client_for(&kubeconfig).await?;
    let url = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .context("server")?
        .to_string();
    let ns = resource("v1", "Namespace", "namespaces");
    apply(&root, &ns, &json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "modelplane-system" } })).await?;
    let pkg = |kind: &str, plural: &str, v: &str| {
        resource(&format!("pkg.crossplane.io/{v}"), kind, plural)
    };
    apply(&root, &pkg("DeploymentRuntimeConfig", "deploymentruntimeconfigs", "v1beta1"), &json!({ "apiVersion": "pkg.crossplane.io/v1beta1", "kind": "DeploymentRuntimeConfig", "metadata": { "name": "provider-aws-eks" }, "spec": { "deploymentTemplate": { "spec": { "replicas": 1, "selector": {}, "template": {} } } } })).await?;
    apply(&root, &pkg("Provider", "providers", "v1"), &json!({ "apiVersion": "pkg.crossplane.io/v1", "kind": "Provider", "metadata": { "name": "provider-aws-eks" }, "spec": { "package": "xpkg.crossplane.io/crossplane-contrib/provider-aws-eks:v2.6.0", "runtimeConfigRef": { "name": "provider-aws-eks" } } })).await?;

    let started = Instant::now();
    let (cluster_r, auth_r, group_r) = (
        resource("eks.aws.m.upbound.io/v1beta1", "Cluster", "clusters"),
        resource(
            "eks.aws.m.upbound.io/v1beta1",
            "ClusterAuth",
            "clusterauths",
        ),
        resource("eks.aws.m.upbound.io/v1beta1", "NodeGroup", "nodegroups"),
    );
    // Sixteen writers at once: what is measured is the simulator, not how
    // fast one client writes ten thousand objects in a row.
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..WRITERS {
        let (root, rs) = (
            root.clone(),
            (cluster_r.clone(), auth_r.clone(), group_r.clone()),
        );
        writers.spawn(async move {
            for c in (writer..clusters).step_by(WRITERS) {
                declare(&root, &rs, c, pools, nodes).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = writers.join_next().await {
        done??;
    }
    let declared = started.elapsed();
    println!(
        "{clusters} clusters × {pools} pools × {nodes} nodes declared in {:.1} s",
        declared.as_secs_f64()
    );

    let want = pools * nodes;
    let ready_nodes = Arc::new(AtomicUsize::new(0));
    let written = Arc::new(AtomicUsize::new(0));
    let progress = {
        let (ready_nodes, written) = (ready_nodes.clone(), written.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                println!(
                    "{:5.1} s: {} clusters answering, {} of {} nodes Ready",
                    started.elapsed().as_secs_f64(),
                    written.load(Ordering::Relaxed),
                    ready_nodes.load(Ordering::Relaxed),
                    clusters * want
                );
            }
        })
    };
    let everything = async {
        let mut waits = tokio::task::JoinSet::new();
        kubeconfigs_written(&root, clusters, |c| {
            written.fetch_add(1, Ordering::Relaxed);
            let kubeconfig = kubeconfig.replace(&url, &format!("{url}/clusters/c{c:04}"));
            waits.spawn(nodes_ready(kubeconfig, want, ready_nodes.clone()));
        })
        .await?;
        while let Some(finished) = waits.join_next().await {
            finished.context("a cluster's wait ended early")??;
        }
        anyhow::Ok(())
    };
    let waited = tokio::time::timeout(Duration::from_secs(1800), everything).await;
    progress.abort();
    waited.map_err(|_| {
        anyhow::anyhow!(
            "after 30 minutes {} of {} nodes are Ready",
            ready_nodes.load(Ordering::Relaxed),
            clusters * want
        )
    })??;
    let all_ready = started.elapsed();
    println!(
        "every node Ready ({} nodes) {:.1} s after the first write",
        clusters * want,
        all_ready.as_secs_f64()
    );
    let (sim_pid, server_pid) = (sim.0.id(), server.0.id());
    // CPU spent, less swayed than the time by what else the machine runs.
    println!(
        "CPU spent by then: sim {:.1} s, apiserver {:.1} s",
        cpu_seconds(sim_pid),
        cpu_seconds(server_pid)
    );
    let cpu0 = cpu_seconds(sim_pid);
    tokio::time::sleep(Duration::from_secs(idle as u64)).await;
    let cpu = (cpu_seconds(sim_pid) - cpu0) / idle as f64 * 100.0;
    println!(
        "sim idle CPU over {idle} s: {cpu:.2} %; sim RSS {:.0} MiB; apiserver RSS {:.0} MiB",
        rss_mib(sim_pid),
        rss_mib(server_pid)
    );
    drop(sim);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
