//! The controller's benchmark (issue 13's targets), against the real
//! binaries: `modelplane apiserver` holds the control plane and every
//! workload cluster (Existing clusters, each a logical cluster reached
//! through its kubeconfig Secret); `modelplane controller` reconciles; this
//! harness plays Crossplane's Helm releases and each cluster's Gateway (as
//! the controller test does), then measures:
//! 1. from `kubectl apply` of the deployments to every workload object
//!    applied on its cluster — each object compose wants there for each
//!    replica, found on the cluster (100 clusters × 8 pools, 100
//!    deployments, 1,000 replicas); and to every ModelReplica Ready, the
//!    harness reporting each workload ready as soon as it is found (it
//!    plays LWS, the Deployment controller and the kubelets, with no
//!    start-up time: what is measured is the controller);
//! 2. the controller idle afterwards — once it has settled (the API
//!    server answered no write for 5 s: the replicas' statuses and events
//!    written): CPU over 60 s, resident memory, and the writes meanwhile;
//! 3. one changed deployment reflected on its clusters, seen by watches
//!    opened on them before the change, p50 of several (`ROUNDS`).
//!
//! `cargo build --release -p modelplane && cargo run --release -p controller-bench`
//! (`CLUSTERS`, `DEPLOYMENTS`, `REPLICAS`, `IDLE_SECONDS` to scale it down;
//! `MODELPLANE_BIN` to measure another build, a baseline).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, Config};
use modelplane_api::types::{InferenceCluster, ModelReplica};
use modelplane_compose::{ReadinessRule, ReplicaInputs, Target, compose_model_replica};
use serde_json::{Value, json};

const POOLS: usize = 8;

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

/// The binary measured: `MODELPLANE_BIN` (a baseline's, run side by
/// side), else this tree's release build.
fn binary() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("MODELPLANE_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/modelplane"),
        PathBuf::from,
    );
    if !path.exists() {
        bail!(
            "{} is missing: cargo build --release -p modelplane first",
            path.display()
        );
    }
    Ok(path)
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn crd(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{group}") },
        "spec": { "group": group, "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": { "plural": plural, "singular": kind.to_lowercase(), "kind": kind },
            "versions": [{ "name": version, "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }] }
    })
}

const CONTROL_KINDS: [(&str, &str, &str, &str, bool); 6] = [
    (
        "kubernetes.m.crossplane.io",
        "v1alpha1",
        "ClusterProviderConfig",
        "clusterproviderconfigs",
        false,
    ),
    (
        "kubernetes.m.crossplane.io",
        "v1alpha1",
        "ProviderConfig",
        "providerconfigs",
        true,
    ),
    (
        "helm.m.crossplane.io",
        "v1beta1",
        "ProviderConfig",
        "providerconfigs",
        true,
    ),
    (
        "helm.m.crossplane.io",
        "v1beta1",
        "Release",
        "releases",
        true,
    ),
    (
        "protection.crossplane.io",
        "v1beta1",
        "Usage",
        "usages",
        true,
    ),
    (
        "protection.crossplane.io",
        "v1beta1",
        "ClusterUsage",
        "clusterusages",
        false,
    ),
];

const CLUSTER_KINDS: [(&str, &str, &str, &str, bool); 6] = [
    (
        "inference.networking.k8s.io",
        "v1",
        "InferencePool",
        "inferencepools",
        true,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
        "httproutes",
        true,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "Gateway",
        "gateways",
        true,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "GatewayClass",
        "gatewayclasses",
        false,
    ),
    (
        "gateway.envoyproxy.io",
        "v1alpha1",
        "EnvoyProxy",
        "envoyproxies",
        true,
    ),
    (
        "llm-d.ai",
        "v1alpha1",
        "EndpointPickerConfig",
        "endpointpickerconfigs",
        true,
    ),
];

async fn apply(client: &Client, object: &Value) -> anyhow::Result<()> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
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
    Ok(())
}

/// A client of the server `kubeconfig` names, over HTTP/2 as the
/// controller's are: kube's own, HTTP/1.1, opened a connection per request
/// in flight, and the harness's thousand clusters' clients took 3,000 of
/// the server's 4,096 connections, stalling every new one.
async fn client_for(kubeconfig: &str) -> anyhow::Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(modelplane_kubeclient::client(config)?)
}

struct Fleet {
    root: Client,
    clusters: Vec<Client>,
}

async fn build_fleet(
    kubeconfig: &str,
    kubeconfig_path: &Path,
    url: &str,
    clusters: usize,
) -> anyhow::Result<Fleet> {
    let root = client_for(kubeconfig).await?;
    // Modelplane's CRDs, as a user installs them.
    let installed = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} crds | kubectl --kubeconfig {} apply --server-side -f - >/dev/null",
            binary()?.display(),
            kubeconfig_path.display()
        ))
        .status()?;
    if !installed.success() {
        bail!("installing the CRDs failed");
    }
    for (g, v, k, p, n) in CONTROL_KINDS {
        apply(&root, &crd(g, v, k, p, n)).await?;
    }
    for ns in ["modelplane-system", "ml-team"] {
        apply(
            &root,
            &json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } }),
        )
        .await?;
    }
    for p in 0..POOLS {
        apply(
            &root,
            &json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClass",
                "metadata": { "name": format!("pool-{p}") },
                "spec": { "devices": [{ "name": "gpu", "driver": "gpu.nvidia.com",
                    "deviceClassName": "gpu.nvidia.com", "count": 1,
                    "capacity": { "memory": { "value": "23034Mi" } } }] } }),
        )
        .await?;
    }
    let mut clients = Vec::new();
    for c in 0..clusters {
        let name = format!("c{c}");
        apply(
            &root,
            &json!({ "apiVersion": "tenancy.modelplane.ai/v1alpha1", "kind": "LogicalCluster",
                     "metadata": { "name": name } }),
        )
        .await?;
        let logical = kubeconfig.replace(
            &format!("server: {url}"),
            &format!("server: {url}/clusters/{name}"),
        );
        let cluster = client_for(&logical).await?;
        for (g, v, k, p, n) in CLUSTER_KINDS {
            apply(&cluster, &crd(g, v, k, p, n)).await?;
        }
        apply(
            &cluster,
            &json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "modelplane-system" } }),
        )
        .await?;
        apply(
            &root,
            &json!({ "apiVersion": "v1", "kind": "Secret",
                "metadata": { "name": format!("{name}-kubeconfig"), "namespace": "modelplane-system" },
                "stringData": { "kubeconfig": logical } }),
        )
        .await?;
        let pools: Vec<Value> = (0..POOLS)
            .map(|p| json!({ "name": format!("p{p}"), "className": format!("pool-{p}"), "nodeCount": 2 }))
            .collect();
        apply(
            &root,
            &json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceCluster",
                "metadata": { "name": name },
                "spec": { "stack": "Standard",
                    "cluster": { "source": "Existing", "existing": { "secretRef": { "name": format!("{name}-kubeconfig") } } },
                    "nodePools": pools } }),
        )
        .await?;
        clients.push(cluster);
    }
    Ok(Fleet {
        root,
        clusters: clients,
    })
}

/// Plays Crossplane and the clusters' gateway controllers until stopped:
/// Releases Ready (their namespaces created on every cluster, as Helm does),
/// GatewayClasses Accepted, Gateways with an address.
async fn platform(fleet: &Fleet, stop: tokio::sync::watch::Receiver<bool>) {
    let releases: Api<DynamicObject> = Api::namespaced_with(
        fleet.root.clone(),
        "modelplane-system",
        &resource("helm.m.crossplane.io", "v1beta1", "Release", "releases"),
    );
    let ready = json!({ "status": { "conditions": [
        { "type": "Ready", "status": "True", "reason": "Available" },
        { "type": "Synced", "status": "True", "reason": "ReconcileSuccess" } ] } });
    let mut namespaces: BTreeSet<String> = BTreeSet::new();
    let mut done: BTreeSet<String> = BTreeSet::new();
    while !*stop.borrow() {
        if let Ok(list) = releases.list(&ListParams::default()).await {
            for release in list.items {
                let name = release.metadata.name.clone().unwrap_or_default();
                if let Some(ns) = release.data["spec"]["forProvider"]["namespace"].as_str()
                    && namespaces.insert(ns.to_string())
                {
                    for cluster in &fleet.clusters {
                        let _ = apply(cluster, &json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } })).await;
                    }
                }
                if done.insert(name.clone()) {
                    let _ = releases
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&ready))
                        .await;
                }
            }
        }
        for (i, cluster) in fleet.clusters.iter().enumerate() {
            let key = format!("gateway-{i}");
            if done.contains(&key) {
                continue;
            }
            let classes: Api<DynamicObject> = Api::all_with(
                cluster.clone(),
                &resource(
                    "gateway.networking.k8s.io",
                    "v1",
                    "GatewayClass",
                    "gatewayclasses",
                ),
            );
            let gateways: Api<DynamicObject> = Api::namespaced_with(
                cluster.clone(),
                "modelplane-system",
                &resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways"),
            );
            let (Ok(cl), Ok(gw)) = (
                classes.list(&ListParams::default()).await,
                gateways.list(&ListParams::default()).await,
            ) else {
                continue;
            };
            if cl.items.is_empty() || gw.items.is_empty() {
                continue;
            }
            for class in cl.items {
                let _ = classes
                    .patch_status(
                        &class.metadata.name.unwrap_or_default(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": { "conditions": [{ "type": "Accepted", "status": "True" }] } })),
                    )
                    .await;
            }
            for gateway in gw.items {
                let _ = gateways
                    .patch_status(
                        &gateway.metadata.name.unwrap_or_default(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": { "addresses": [{ "type": "IPAddress", "value": format!("10.0.{}.{}", i / 250, i % 250 + 1) }] } })),
                    )
                    .await;
            }
            done.insert(key);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn deployment(name: &str, replicas: usize, max_len: usize) -> Value {
    json!({ "apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelDeployment",
        "metadata": { "name": name, "namespace": "ml-team" },
        "spec": { "replicas": replicas, "template": { "spec": { "engines": [{ "name": "engine",
            "members": [{ "role": "Standalone",
                "nodeSelector": { "devices": [{ "name": "gpu", "selectors": [{ "cel": "device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"20Gi\")) >= 0" }] }] },
                "template": { "spec": { "containers": [{ "name": "engine", "image": "vllm/vllm-openai:v0.23.0",
                    "args": [format!("--model=Qwen/{name}"), format!("--max-model-len={max_len}")] }] } } }] }] } } } })
}

/// An object on a workload cluster: apiVersion, kind, namespace, name.
type ObjectKey = (String, String, String, String);

/// What is still to be applied: each placed replica's workload objects, as
/// compose wants them, by cluster index, until they are found there.
#[derive(Default)]
struct Awaited {
    replicas: BTreeSet<String>,
    /// How each awaited object is ready (what its in-cluster controller
    /// reports once its pods run), and how many replicas it wants.
    rules: std::collections::BTreeMap<(usize, ObjectKey), (ReadinessRule, i64)>,
    /// Objects found since the last [`Awaited::report_ready`].
    found: Vec<(usize, ObjectKey)>,
    objects: std::collections::BTreeMap<usize, BTreeSet<ObjectKey>>,
    /// Every object awaited so far, found or not.
    total: usize,
}

impl Awaited {
    /// Adds the objects of replicas placed since the last call.
    async fn add_placed(&mut self, fleet: &Fleet) -> anyhow::Result<()> {
        let replicas: Api<ModelReplica> = Api::namespaced(fleet.root.clone(), "ml-team");
        let clusters: Api<InferenceCluster> = Api::all(fleet.root.clone());
        let placed = replicas.list(&ListParams::default()).await?.items;
        if placed.iter().all(|r| {
            self.replicas
                .contains(r.metadata.name.as_deref().unwrap_or_default())
        }) {
            return Ok(());
        }
        let clusters = clusters.list(&ListParams::default()).await?.items;
        for replica in placed {
            let name = replica.metadata.name.clone().unwrap_or_default();
            if self.replicas.contains(&name) {
                continue;
            }
            let cluster = clusters
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(&replica.spec.cluster_name));
            let composition = compose_model_replica(ReplicaInputs {
                replica: &replica,
                cluster,
                observed: &Default::default(),
            });
            for desired in composition.desired {
                let Target::Cluster(cluster) = &desired.target else {
                    continue;
                };
                let index = cluster.strip_prefix('c').and_then(|i| i.parse().ok());
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                let o = &desired.object;
                self.total += 1;
                let index = index.context("a cluster named cN")?;
                let key = (
                    text(&o["apiVersion"]),
                    text(&o["kind"]),
                    text(&o["metadata"]["namespace"]),
                    text(&o["metadata"]["name"]),
                );
                let wants = o["spec"]["replicas"].as_i64().unwrap_or(1);
                self.rules
                    .insert((index, key.clone()), (desired.ready_when.clone(), wants));
                self.objects.entry(index).or_default().insert(key);
            }
            self.replicas.insert(name);
        }
        Ok(())
    }

    /// Drops the objects now found on their clusters; how many are left.
    async fn drop_found(&mut self, fleet: &Fleet) -> anyhow::Result<usize> {
        for (index, objects) in &mut self.objects {
            let kinds: BTreeSet<(String, String, String)> = objects
                .iter()
                .map(|(v, k, ns, _)| (v.clone(), k.clone(), ns.clone()))
                .collect();
            for (api_version, kind, namespace) in kinds {
                let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
                let gvk = kube::api::GroupVersionKind::gvk(group, version, &kind);
                let resource = ApiResource::from_gvk(&gvk);
                let client = fleet.clusters[*index].clone();
                let api: Api<DynamicObject> = if namespace.is_empty() {
                    Api::all_with(client, &resource)
                } else {
                    Api::namespaced_with(client, &namespace, &resource)
                };
                let Ok(list) = api.list_metadata(&ListParams::default()).await else {
                    continue;
                };
                for item in list.items {
                    let name = item.metadata.name.unwrap_or_default();
                    let key = (api_version.clone(), kind.clone(), namespace.clone(), name);
                    if objects.remove(&key) {
                        self.found.push((*index, key));
                    }
                }
            }
        }
        self.objects.retain(|_, objects| !objects.is_empty());
        Ok(self.objects.values().map(BTreeSet::len).sum())
    }
}

impl Awaited {
    /// Reports each object found since the last call ready, as its
    /// in-cluster controller would once its pods run (the harness plays
    /// LWS, the Deployment controller and the kubelets, with no start-up
    /// time): the controller then reads the replica Ready.
    async fn report_ready(&mut self, fleet: &Fleet) {
        let found = std::mem::take(&mut self.found);
        let patches = found.into_iter().filter_map(|(index, key)| {
            let (rule, wants) = self.rules.get(&(index, key.clone()))?;
            let status = match rule {
                ReadinessRule::ConditionTrue(type_) => json!({ "conditions": [
                    { "type": type_, "status": "True", "reason": "MinimumReplicasAvailable" }] }),
                ReadinessRule::ReplicasAvailable => json!({
                    "replicas": wants, "readyReplicas": wants, "availableReplicas": wants }),
                _ => return None,
            };
            let (api_version, kind, namespace, name) = key;
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
            let gvk = kube::api::GroupVersionKind::gvk(group, version, &kind);
            let api: Api<DynamicObject> = Api::namespaced_with(
                fleet.clusters[index].clone(),
                &namespace,
                &ApiResource::from_gvk(&gvk),
            );
            Some(async move {
                let patch = Patch::Merge(json!({ "status": status }));
                let _ = api
                    .patch_status(&name, &PatchParams::default(), &patch)
                    .await;
            })
        });
        futures_util::stream::iter(patches)
            .for_each_concurrent(32, |patch| patch)
            .await;
    }
}

/// How many of `wanted` ModelReplicas are Ready.
async fn replicas_ready(fleet: &Fleet) -> anyhow::Result<usize> {
    let replicas: Api<ModelReplica> = Api::namespaced(fleet.root.clone(), "ml-team");
    let list = replicas.list(&ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .filter(|r| {
            r.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count())
}

/// Applies `documents` with `kubectl apply`, as a user would.
fn kubectl_apply(kubeconfig: &Path, documents: &[Value], dir: &Path) -> anyhow::Result<()> {
    let file = dir.join("deployments.json");
    let list = json!({ "apiVersion": "v1", "kind": "List", "items": documents });
    std::fs::write(&file, list.to_string())?;
    let out = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .arg("apply")
        .arg("-f")
        .arg(&file)
        .output()
        .context("kubectl")?;
    if !out.status.success() {
        bail!("kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// Watches on the clusters a deployment's replicas run on: each event an
/// engine workload of one of its replicas (the replica's name) and its
/// arguments.
struct EngineWatches {
    replicas: usize,
    events: futures_util::stream::BoxStream<'static, (String, String)>,
}

async fn engine_watches(fleet: &Fleet, name: &str) -> anyhow::Result<EngineWatches> {
    use kube::runtime::watcher;
    let mrs: Api<DynamicObject> = Api::namespaced_with(
        fleet.root.clone(),
        "ml-team",
        &resource("modelplane.ai", "v1alpha1", "ModelReplica", "modelreplicas"),
    );
    let placed = mrs
        .list(&ListParams::default().labels(&format!("modelplane.ai/deployment={name}")))
        .await?;
    let mut by_cluster: std::collections::BTreeMap<usize, Vec<String>> = Default::default();
    for mr in placed.items {
        let cluster = mr
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("modelplane.ai/cluster"));
        let index = cluster.and_then(|c| c.strip_prefix('c')?.parse().ok());
        if let (Some(index), Some(replica)) = (index, mr.metadata.name) {
            by_cluster.entry(index).or_default().push(replica);
        }
    }
    let replicas = by_cluster.values().map(Vec::len).sum();
    let mut streams = Vec::new();
    for (index, names) in by_cluster {
        let api: Api<DynamicObject> = Api::namespaced_with(
            fleet.clusters[index].clone(),
            "ml-team",
            &resource("apps", "v1", "Deployment", "deployments"),
        );
        let mut events = watcher(
            api,
            watcher::Config::default().labels("modelplane.ai/owner-uid"),
        )
        .boxed();
        // Past the initial list: what comes next is a change.
        loop {
            match tokio::time::timeout(Duration::from_secs(30), events.next()).await {
                Ok(Some(Ok(watcher::Event::InitDone))) => break,
                Ok(Some(_)) => {}
                _ => bail!("the watch on cluster c{index} did not start"),
            }
        }
        let engines = events.filter_map(move |event| {
            let found = match event {
                Ok(watcher::Event::Apply(d)) => {
                    let workload = d.metadata.name.unwrap_or_default();
                    let is_engine =
                        d.data["spec"]["template"]["metadata"]["labels"]["modelplane.ai/workload"]
                            .is_string();
                    names
                        .iter()
                        .find(|replica| is_engine && workload.starts_with(&format!("{replica}-")))
                        .map(|replica| {
                            (
                                replica.clone(),
                                d.data["spec"]["template"]["spec"]["containers"][0]["args"]
                                    .to_string(),
                            )
                        })
                }
                _ => None,
            };
            futures_util::future::ready(found)
        });
        streams.push(engines.boxed());
    }
    Ok(EngineWatches {
        replicas,
        events: futures_util::stream::select_all(streams).boxed(),
    })
}

/// Writes the API server answered, all its logical clusters together
/// (from its `/metrics`).
async fn writes(client: &Client) -> anyhow::Result<u64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let write = |line: &&str| {
        ["POST", "PUT", "PATCH", "APPLY", "DELETE"]
            .iter()
            .any(|verb| line.contains(&format!("verb=\"{verb}\"")))
    };
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(write)
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

/// Waits until `client`'s API server answers no write for `quiet`.
async fn settle(client: &Client, quiet: Duration) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let (mut last, mut since) = (writes(client).await?, Instant::now());
    while since.elapsed() < quiet {
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the controller still writes after 5 minutes");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = writes(client).await?;
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    Ok(started.elapsed() - quiet)
}

/// Reconciles the controller has done, from its `/metrics`.
async fn reconciles(probes: std::net::SocketAddr) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut text = String::new();
    if let Ok(mut tcp) = tokio::net::TcpStream::connect(probes).await {
        let _ = tcp.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await;
        let _ = tcp.read_to_string(&mut text).await;
    }
    text.lines()
        .filter(|l| l.starts_with("modelplane_controller_reconciles_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
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

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib * 1024.0 / 1e6)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (clusters, deployments, replicas) = (
        env("CLUSTERS", 100),
        env("DEPLOYMENTS", 100),
        env("REPLICAS", 10),
    );
    let idle = env("IDLE_SECONDS", 60);
    let rounds = env("ROUNDS", 15);
    let dir = std::env::temp_dir().join(format!("controller-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut server = Command::new(binary()?)
        .args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(server.stdout.take().context("stdout")?).read_line(&mut line)?;
    let _server = Killed(server);
    let url = line
        .strip_prefix("serving on ")
        .and_then(|r| r.split(';').next())
        .context("the server's ready line")?
        .to_string();
    let kubeconfig_path = dir.join("kubeconfig");
    let kubeconfig = std::fs::read_to_string(&kubeconfig_path)?;

    let started = Instant::now();
    let fleet = build_fleet(&kubeconfig, &kubeconfig_path, &url, clusters).await?;
    println!(
        "fleet of {clusters} clusters × {POOLS} pools declared in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let probes = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let controller = Killed(
        Command::new(binary()?)
            .args(["controller", "--no-leader-election", "--kubeconfig"])
            .arg(&kubeconfig_path)
            .arg("--probes-listen")
            .arg(probes.to_string())
            .args(
                std::env::var("CONTROLLER_WORKERS")
                    .map(|n| vec!["--workers".to_string(), n])
                    .unwrap_or_default(),
            )
            .env(
                "RUST_LOG",
                std::env::var("CONTROLLER_LOG").unwrap_or_else(|_| "error".into()),
            )
            .spawn()?,
    );
    let pid = controller.0.id();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let platform_task = {
        let fleet = Fleet {
            root: fleet.root.clone(),
            clusters: fleet.clusters.clone(),
        };
        tokio::spawn(async move { platform(&fleet, stopped).await })
    };
    let ics: Api<DynamicObject> = Api::all_with(
        fleet.root.clone(),
        &resource(
            "modelplane.ai",
            "v1alpha1",
            "InferenceCluster",
            "inferenceclusters",
        ),
    );
    let ready_at = Instant::now();
    loop {
        let list = ics.list(&ListParams::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|c| {
                c.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|k| k["type"] == "Ready" && k["status"] == "True")
                    && c.data["status"]["gateway"]["address"].is_string()
            })
            .count();
        if ready == clusters {
            break;
        }
        if ready_at.elapsed() > Duration::from_secs(600) {
            bail!("only {ready} of {clusters} clusters Ready after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "every cluster Ready with its stack in {:.1} s",
        ready_at.elapsed().as_secs_f64()
    );

    // 1. `kubectl apply` → every workload object applied.
    let mds: Api<DynamicObject> = Api::namespaced_with(
        fleet.root.clone(),
        "ml-team",
        &resource(
            "modelplane.ai",
            "v1alpha1",
            "ModelDeployment",
            "modeldeployments",
        ),
    );
    let manifests: Vec<Value> = (0..deployments)
        .map(|d| deployment(&format!("model-{d}"), replicas, 4096))
        .collect();
    let applied_at = Instant::now();
    kubectl_apply(&kubeconfig_path, &manifests, &dir)?;
    let kubectl_took = applied_at.elapsed();
    let wanted = deployments * replicas;
    let mut awaited = Awaited::default();
    loop {
        awaited.add_placed(&fleet).await?;
        let left = awaited.drop_found(&fleet).await?;
        awaited.report_ready(&fleet).await;
        if awaited.replicas.len() >= wanted && left == 0 {
            break;
        }
        if applied_at.elapsed() > Duration::from_secs(240) {
            let missing: Vec<_> = awaited.objects.iter().take(3).collect();
            bail!(
                "after 4 minutes, {} of {wanted} replicas placed and {left} of their objects not applied, such as {missing:?}",
                awaited.replicas.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let to_all = applied_at.elapsed();
    println!(
        "{deployments} deployments, {} replicas: every workload object ({} in all) applied on its cluster {:.1} s after `kubectl apply` started (target ≤ 30 s; kubectl itself took {:.1} s)",
        awaited.replicas.len(),
        awaited.total,
        to_all.as_secs_f64(),
        kubectl_took.as_secs_f64()
    );

    loop {
        let ready = replicas_ready(&fleet).await?;
        if ready >= wanted {
            break;
        }
        if applied_at.elapsed() > Duration::from_secs(600) {
            bail!("after 10 minutes, {ready} of {wanted} replicas Ready");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "every replica Ready {:.1} s after `kubectl apply` started (target ≤ 180 s), their workloads reported ready as soon as they were applied",
        applied_at.elapsed().as_secs_f64()
    );

    // 2. Idle, once settled.
    let settling = settle(&fleet.root, Duration::from_secs(5)).await?;
    println!(
        "settled (no write for 5 s) {:.1} s after the last workload was applied",
        settling.as_secs_f64()
    );
    let reconciles0 = reconciles(probes).await;
    let (cpu0, wall0, writes0) = (cpu_seconds(pid), Instant::now(), writes(&fleet.root).await?);
    tokio::time::sleep(Duration::from_secs(idle as u64)).await;
    let cpu = (cpu_seconds(pid) - cpu0) / wall0.elapsed().as_secs_f64() * 100.0;
    println!(
        "controller idle over {idle} s: CPU {cpu:.2}% (target ≤ 1%), resident memory {:.0} MB (target ≤ 300 MB), {} writes",
        rss_mb(pid),
        writes(&fleet.root).await? - writes0
    );
    let reconciled = reconciles(probes).await - reconciles0;
    println!("reconciles while idle: {reconciled} (the periodic resync is every 5 minutes)");

    // 3. One changed deployment reflected on its clusters, seen the way a
    // controller sees it: by watches on those clusters, opened (and past
    // their initial list) before the change.
    let mut latencies = Vec::new();
    for round in 0..rounds {
        let name = format!("model-{}", round % deployments);
        let max_len = 8192 + round;
        let needle = format!("--max-model-len={max_len}");
        let mut watches = engine_watches(&fleet, &name).await?;
        let start = Instant::now();
        mds.patch(
            &name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(deployment(&name, replicas, max_len)),
        )
        .await?;
        let mut changed = BTreeSet::new();
        while changed.len() < watches.replicas {
            let next = tokio::time::timeout(Duration::from_secs(60), watches.events.next()).await;
            let Ok(Some((replica, args))) = next else {
                bail!(
                    "{name}'s change reached {} of {} replicas in 60 s",
                    changed.len(),
                    watches.replicas
                );
            };
            if args.contains(&needle) {
                changed.insert(replica);
            }
        }
        latencies.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "one changed deployment ({replicas} replicas) reflected on every cluster it runs on, seen by watches: p50 {:.0} ms, min {:.0} ms, max {:.0} ms over {} changes (target p50 ≤ 200 ms)",
        latencies[latencies.len() / 2],
        latencies.first().copied().unwrap_or_default(),
        latencies.last().copied().unwrap_or_default(),
        latencies.len()
    );
    let _ = stop.send(true);
    let _ = platform_task.await;
    drop(controller);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
