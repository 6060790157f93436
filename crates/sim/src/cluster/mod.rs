//! Simulated workload clusters: each a logical cluster of the API server
//! (`/clusters/<name>`), reached through its kubeconfig, with the nodes its
//! cloud pools bring and the in-cluster controllers its Helm releases start.

pub mod dra;
pub mod edge;
pub mod envoy;
pub mod expand;
pub mod grove;
pub mod kcm;
pub mod kubelet;
pub mod launch;
pub mod logs;
pub mod lws;
pub mod nodes;
pub mod proxy;
pub mod run;
pub mod scheduler;
pub mod world;

#[cfg(test)]
mod packing_tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kube::Client;
use kube::config::Kubeconfig;
use modelplane_supervisor::{Scope, Supervisor};
use serde_json::json;

use crate::client::{self, Kind, builtin};
use crate::cloud::Pool;
use crate::error::{self, Error};
use crate::faults::Faults;
use crate::helm::{self, Chart, Controller};
use crate::profile::Profile;
use world::ClusterKind;

/// A cluster's control loop's inbox: what its watches saw.
type Inbox = tokio::sync::mpsc::UnboundedSender<crate::informer::Change<ClusterKind>>;

/// Field manager of what the simulated kubelets and cloud node agents write.
const NODE_MANAGER: &str = "kubelet";
/// Nodes of one pool registering at once.
const NODES_AT_ONCE: usize = 16;
/// Field manager of what Helm installs.
const HELM_MANAGER: &str = "helm";

/// The `LogicalCluster` kind of the embedded API server.
fn logical_cluster() -> Kind {
    Kind::new(
        "tenancy.modelplane.ai/v1alpha1",
        "LogicalCluster",
        "logicalclusters",
        false,
    )
}

/// Every workload cluster the simulator runs controllers in.
pub struct Workloads {
    supervisor: Supervisor,
    profile: Profile,
    faults: Arc<Faults>,
    by_server: Mutex<HashMap<String, Arc<Workload>>>,
    by_name: Mutex<BTreeMap<String, Arc<Workload>>>,
    /// The loopback addresses every cluster's pods are given.
    addresses: kubelet::Addresses,
}

impl Workloads {
    /// None yet.
    pub fn new(supervisor: Supervisor, profile: Profile, faults: Arc<Faults>) -> Arc<Workloads> {
        Arc::new(Workloads {
            supervisor,
            profile,
            faults,
            by_server: Mutex::default(),
            by_name: Mutex::default(),
            addresses: kubelet::Addresses::default(),
        })
    }

    /// The cluster the cloud created as `name`.
    pub fn by_name(&self, name: &str) -> Option<Arc<Workload>> {
        self.by_name.lock().ok()?.get(name).cloned()
    }

    /// The API server URL of cluster `name`.
    pub fn server(&self, name: &str) -> Option<String> {
        self.by_name(name).map(|w| w.server.clone())
    }

    /// Brings cluster `name` into being: a logical cluster next to the
    /// control plane, served once its API answers.
    pub async fn create(
        &self,
        control: &Client,
        root: &Kubeconfig,
        name: &str,
    ) -> Result<Arc<Workload>, Error> {
        if let Some(existing) = self.by_name(name) {
            return Ok(existing);
        }
        let object = json!({
            "apiVersion": "tenancy.modelplane.ai/v1alpha1", "kind": "LogicalCluster",
            "metadata": { "name": name },
        });
        client::create(control, &logical_cluster(), &object)
            .await
            .map_err(error::api(format!("create logical cluster {name}")))?;
        let kubeconfig = client::logical_kubeconfig(root, name)?;
        let direct = parse(&kubeconfig)?;
        let server = client::server(&direct).ok_or_else(no_server)?;
        let upstream = server
            .split("://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .ok_or_else(|| {
                Error::Kubeconfig(format!("names a server without an address: {server}"))
            })?
            .to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(error::io(format!("open cluster {name}'s API address")))?;
        let published_address = listener
            .local_addr()
            .map_err(error::io(format!("read cluster {name}'s API address")))?
            .to_string();
        // What the connection Secret carries: the cluster reached through its
        // network path (which faults can cut).
        let published = kubeconfig.replace(&upstream, &published_address);
        let workload = self.register(&kubeconfig, name, Some(published)).await?;
        workload.scope.spawn(
            "sim-api-proxy",
            proxy::run(
                listener,
                upstream,
                name.to_string(),
                self.faults.clone(),
                workload.scope.clone(),
            ),
        );
        if let Ok(mut by_name) = self.by_name.lock() {
            by_name.insert(name.to_string(), workload.clone());
        }
        Ok(workload)
    }

    /// The cluster a kubeconfig reaches (one the cloud created, or any
    /// other cluster a Helm release is installed into).
    pub async fn connect(&self, kubeconfig: &str) -> Result<Arc<Workload>, Error> {
        let parsed = parse(kubeconfig)?;
        let server = client::server(&parsed).ok_or_else(no_server)?;
        if let Some(existing) = self
            .by_server
            .lock()
            .ok()
            .and_then(|m| m.get(&server).cloned())
        {
            return Ok(existing);
        }
        let name = server.rsplit('/').next().unwrap_or(&server).to_string();
        // A kubeconfig naming an address the cluster no longer answers on
        // (written before a restart) fails at once, as a refused connection
        // does; the caller retries once its Secret is current.
        if let Some(known) = self.by_name(&name) {
            return Err(Error::Moved {
                at: Kubeconfig::from_yaml(&known.kubeconfig)
                    .ok()
                    .as_ref()
                    .and_then(client::server)
                    .unwrap_or_default(),
                cluster: name,
                server,
            });
        }
        self.register(kubeconfig, &name, None).await
    }

    /// Starts the simulated controllers of the cluster `kubeconfig` reaches;
    /// `published` is the kubeconfig others get (through its network path).
    async fn register(
        &self,
        kubeconfig: &str,
        name: &str,
        published: Option<String>,
    ) -> Result<Arc<Workload>, Error> {
        let parsed = parse(kubeconfig)?;
        let server = client::server(&parsed).ok_or_else(no_server)?;
        let client = client::connect(&parsed)
            .await
            .map_err(error::api(format!("connect to cluster {name}")))?;
        wait_served(&client, name).await?;
        let kubelet = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(error::io("open the kubelet endpoint"))?;
        let mut by_server = self.by_server.lock()?;
        if let Some(existing) = by_server.get(&server) {
            return Ok(existing.clone());
        }
        let kubelet_port = kubelet
            .local_addr()
            .map_err(error::io("read the kubelet endpoint"))?
            .port();
        let workload = Arc::new(Workload {
            name: name.to_string(),
            kubeconfig: published.unwrap_or_else(|| kubeconfig.to_string()),
            faults: self.faults.clone(),
            server: server.clone(),
            client,
            scope: self.supervisor.scope(),
            profile: self.profile.clone(),
            pools: Mutex::default(),
            controllers: Mutex::default(),
            installed: Mutex::default(),
            edge: Mutex::default(),
            hardware: Mutex::default(),
            kubelet_port,
            addresses: self.addresses.clone(),
            watches: Mutex::default(),
            logs: logs::Logs::default(),
            nudge: tokio::sync::Notify::new(),
        });
        workload.scope.spawn(
            "sim-kubelet-endpoint",
            logs::serve(kubelet, workload.logs.clone()),
        );
        by_server.insert(server, workload.clone());
        // Whoever reaches it through its network path reaches the same cluster.
        if let Some(published) = Kubeconfig::from_yaml(&workload.kubeconfig)
            .ok()
            .as_ref()
            .and_then(client::server)
        {
            by_server.insert(published, workload.clone());
        }
        workload
            .scope
            .spawn("sim-cluster", run::run(workload.clone()));
        tracing::info!(cluster = name, "workload cluster is up");
        Ok(workload)
    }

    /// Tears cluster `name` down: its controllers stop, its logical cluster
    /// (and everything in it) is deleted.
    pub async fn delete(&self, control: &Client, name: &str) -> Result<(), Error> {
        let removed = self.by_name.lock().ok().and_then(|mut m| m.remove(name));
        if let Some(workload) = removed {
            workload.scope.stop();
            if let Ok(mut by_server) = self.by_server.lock() {
                by_server.retain(|_, w| !Arc::ptr_eq(w, &workload));
            }
        }
        client::delete(control, &logical_cluster(), None, name)
            .await
            .map_err(error::api(format!("delete logical cluster {name}")))?;
        tracing::info!(cluster = name, "workload cluster deleted");
        Ok(())
    }
}

fn parse(kubeconfig: &str) -> Result<Kubeconfig, Error> {
    Kubeconfig::from_yaml(kubeconfig).map_err(|e| Error::Kubeconfig(format!("is invalid: {e}")))
}

fn no_server() -> Error {
    Error::Kubeconfig("names no server".into())
}

async fn wait_served(client: &Client, name: &str) -> Result<(), Error> {
    let namespaces = builtin::namespace().api(client, None);
    let mut last = String::new();
    for _ in 0..50 {
        match namespaces.list(&Default::default()).await {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(Error::NotAnswering {
        cluster: name.to_string(),
        last,
    })
}

/// The annotation with which the simulated storage records that a volume
/// holds what a Job wrote into it.
pub const HYDRATED: &str = "sim.modelplane.ai/hydrated";

/// One simulated workload cluster.
pub struct Workload {
    /// Its name (the InferenceCluster's, for clusters the cloud created).
    pub name: String,
    /// Its kubeconfig, as its connection Secret carries it.
    pub kubeconfig: String,
    /// Faults in force.
    faults: Arc<Faults>,
    /// Its API server URL.
    pub server: String,
    client: Client,
    scope: Scope,
    /// Timings of what happens in it (image pulls, engine starts, weights).
    pub profile: Profile,
    /// Cloud resource name → the pool it brings.
    /// The second is `None` once every node of it registered, else how many
    /// of its nodes may exist (a registration failed or is under way).
    pools: Mutex<BTreeMap<String, (Pool, Option<u32>)>>,
    controllers: Mutex<BTreeSet<Controller>>,
    /// The charts installed, with their namespace: Helm installs a release
    /// once (and does not reconcile what it installed afterwards).
    installed: Mutex<BTreeSet<(&'static str, String)>>,
    /// The edge data plane, once Envoy Gateway runs.
    edge: Mutex<Option<Arc<modelplane_gateway::state::Gateway>>>,
    /// Pool name → its devices and fabric.
    hardware: Mutex<BTreeMap<String, dra::Hardware>>,
    /// Where its kubelets answer (pod logs).
    kubelet_port: u16,
    /// Where its pods' addresses come from: the fleet's.
    addresses: kubelet::Addresses,
    /// The control loop's inbox, once it runs, and the kinds watched into it.
    watches: Mutex<(Option<Inbox>, BTreeSet<ClusterKind>)>,
    /// The containers' logs the kubelets serve.
    logs: logs::Logs,
    /// Wakes the cluster's loop for a change it does not watch (its edge
    /// data plane started).
    pub nudge: tokio::sync::Notify,
}

impl Workload {
    /// The client its in-cluster controllers use.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Starts the watches feeding `tx`: the built-in kinds, and whatever a
    /// chart installed already.
    pub fn start_watches(&self, tx: Inbox) {
        let pending: Vec<ClusterKind> = match self.watches.lock() {
            Ok(mut w) => {
                w.0 = Some(tx);
                w.1.extend(ClusterKind::BUILTIN);
                w.1.iter().copied().collect()
            }
            Err(_) => return,
        };
        for kind in pending {
            self.spawn_watch(kind);
        }
    }

    /// Watches `kind` from now on (once its CRD is served).
    fn watch(&self, kind: ClusterKind) {
        let start = self
            .watches
            .lock()
            .is_ok_and(|mut w| w.1.insert(kind) && w.0.is_some());
        if start {
            self.spawn_watch(kind);
        }
    }

    fn spawn_watch(&self, kind: ClusterKind) {
        let Some(tx) = self.watches.lock().ok().and_then(|w| w.0.clone()) else {
            return;
        };
        self.scope.spawn(
            "sim-cluster-watch",
            crate::informer::watch(self.client.clone(), kind.api(), kind, ClusterKind::trim, tx),
        );
    }

    /// The controllers its Helm releases started.
    pub fn controllers(&self) -> BTreeSet<Controller> {
        self.controllers
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// Pool name → the devices and fabric of its nodes.
    pub fn hardware(&self) -> BTreeMap<String, dra::Hardware> {
        self.hardware.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// The devices and fabric of pool `pool`'s nodes.
    pub fn set_hardware(&self, pool: &str, hardware: dra::Hardware) {
        if let Ok(mut h) = self.hardware.lock() {
            h.insert(pool.to_string(), hardware);
        }
    }

    /// The taints of each pool's nodes, as the cloud sets them.
    pub fn pool_taints(&self) -> BTreeMap<String, Vec<crate::cloud::Taint>> {
        self.pools
            .lock()
            .map(|p| {
                p.values()
                    .map(|(pool, _)| (pool.name.clone(), pool.taints.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The edge data plane, once Envoy Gateway runs.
    pub fn edge(&self) -> Option<Arc<modelplane_gateway::state::Gateway>> {
        self.edge.lock().ok()?.clone()
    }

    /// Whether the pool cloud resource `resource` brings is `pool`, with
    /// every node registered, and its nodes have `hardware`: nothing to do.
    pub fn has_pool(&self, resource: &str, pool: &Pool, hardware: &dra::Hardware) -> bool {
        let registered = self
            .pools
            .lock()
            .is_ok_and(|pools| pools.get(resource) == Some(&(pool.clone(), None)));
        registered
            && self
                .hardware
                .lock()
                .is_ok_and(|h| h.get(&pool.name) == Some(hardware))
    }

    /// The pool cloud resource `resource` brings has its nodes: nodes are
    /// added up to its count and removed above it.
    pub async fn set_pool(
        &self,
        resource: &str,
        pool: Pool,
        provider: &'static str,
    ) -> Result<(), Error> {
        let (previous, old_count) = {
            let mut pools = self.pools.lock()?;
            let previous = pools.get(resource).cloned();
            // Nodes that may exist: the pool's, or more if a registration failed.
            let old_count = previous
                .as_ref()
                .map_or(0, |(p, existing)| existing.unwrap_or(0).max(p.count));
            let pending = Some(old_count.max(pool.count));
            pools.insert(resource.to_string(), (pool.clone(), pending));
            (previous, old_count)
        };
        let stamp = crate::clock::timestamp();
        // A node already there stays as it is when only the count changed:
        // re-applying it would reset what others set on it (a user's
        // `kubectl taint`). After a failed registration, every node again.
        let kept = match &previous {
            Some((p, None))
                if (crate::cloud::Pool {
                    count: pool.count,
                    ..p.clone()
                }) == pool =>
            {
                p.count
            }
            _ => 0,
        };
        // Each node's kubelet registers on its own, all at once.
        let registering =
            nodes::PoolNodes::new(&pool, resource, provider, self.kubelet_port, &stamp);
        let failed = futures_util::stream::iter(kept..pool.count)
            .map(|index| {
                let node = registering.node(index);
                async move { self.register_node(&node).await }
            })
            .buffer_unordered(NODES_AT_ONCE)
            .filter_map(|r| std::future::ready(r.err()))
            .next()
            .await;
        if let Some(e) = failed {
            // Left pending: the retry registers every node again.
            return Err(e);
        }
        for index in pool.count..old_count {
            client::delete(
                &self.client,
                &builtin::node(),
                None,
                &nodes::node_name(&pool.name, index),
            )
            .await?;
        }
        if let Ok(mut pools) = self.pools.lock()
            && let Some(entry) = pools.get_mut(resource)
            && entry.0 == pool
        {
            entry.1 = None;
        }
        Ok(())
    }

    /// Registers `node` as its kubelet does: one create carrying its status;
    /// a node that exists already (a pool changed, or the simulator
    /// restarted) gets its labels, taints and status applied instead.
    async fn register_node(&self, node: &serde_json::Value) -> Result<(), Error> {
        let kind = builtin::node();
        let created = client::create_new(&self.client, &kind, node, Some(NODE_MANAGER)).await?;
        if created {
            return Ok(());
        }
        let mut spec_only = node.clone();
        if let Some(o) = spec_only.as_object_mut() {
            o.remove("status");
        }
        client::apply(&self.client, &kind, &spec_only, NODE_MANAGER).await?;
        // As a kubelet posts its status: a patch, so that a later write of
        // the conditions alone leaves the rest of it.
        Ok(client::merge_status(&self.client, &kind, node, &node["status"], NODE_MANAGER).await?)
    }

    /// The pool `resource` is gone, and its nodes with it.
    pub async fn remove_pool(&self, resource: &str) -> Result<(), Error> {
        let known = self.pools.lock()?.get(resource).cloned();
        if let Some((pool, existing)) = known {
            // Every node that may exist; the pool is forgotten only once
            // they are gone (a retry deletes the rest).
            for index in 0..existing.unwrap_or(0).max(pool.count) {
                client::delete(
                    &self.client,
                    &builtin::node(),
                    None,
                    &nodes::node_name(&pool.name, index),
                )
                .await?;
            }
            if let Ok(mut pools) = self.pools.lock() {
                pools.remove(resource);
            }
        }
        Ok(())
    }

    /// Installs `chart` into `namespace`: the namespace, the chart's CRDs,
    /// and its controller, started once. A release planned again (every
    /// pass that sees it deployed) is installed already.
    pub async fn install(
        self: &Arc<Self>,
        chart: &'static Chart,
        namespace: &str,
    ) -> Result<(), Error> {
        let release = (chart.name, namespace.to_string());
        if self.installed.lock().is_ok_and(|i| i.contains(&release)) {
            return Ok(());
        }
        let ns =
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": namespace } });
        client::apply(&self.client, &builtin::namespace(), &ns, HELM_MANAGER).await?;
        for crd in chart.crds {
            client::apply(
                &self.client,
                &builtin::crd(),
                &helm::crd(*crd),
                HELM_MANAGER,
            )
            .await?;
            if let Some(kind) = ClusterKind::of(crd.0, crd.2) {
                self.watch(kind);
            }
        }
        if let Ok(mut installed) = self.installed.lock() {
            installed.insert(release);
        }
        if let Some(controller) = chart.controller {
            let fresh = self.controllers.lock()?.insert(controller);
            if fresh {
                self.start(controller);
            }
        }
        Ok(())
    }

    fn start(self: &Arc<Self>, controller: Controller) {
        let me = self.clone();
        match controller {
            Controller::EnvoyGateway => self.scope.spawn("sim-envoy-gateway", envoy::run(me)),
            // Not simulated yet: their CRDs are served, nothing acts on them.
            other => {
                tracing::debug!(cluster = %self.name, controller = ?other, "controller not simulated yet")
            }
        }
    }
}
