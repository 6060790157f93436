//! The simulated clouds and Crossplane on the control plane: watches every
//! Crossplane kind, moves each managed resource through the cloud's stage
//! table ([`crate::cloud`]), brings workload clusters and their nodes into
//! being, writes connection Secrets, installs Helm releases into workload
//! clusters and reports each provider's health.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use kube::Client;
use kube::config::Kubeconfig;
use modelplane_supervisor::Supervisor;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::clock::timestamp;
use crate::cloud::{self, Observation, Phase, Role};
use crate::cluster::Workloads;
use crate::cluster::dra::Hardware;
use crate::crossplane::{self, KINDS};
use crate::faults::Faults;
use crate::informer::{self, Touched};
use crate::profile::Profile;

mod install;
mod kinds;
mod releases;
mod work;

use install::install;
use kinds::EXTRA;
pub use kinds::{FleetKind, fault_kind};
use releases::secret_field;
use work::{Connection, Effect, Hands, Work};

/// Field manager of what the simulated Crossplane writes.
pub const MANAGER: &str = "crossplane";
/// Namespace of the simulated cloud credentials.
const CREDENTIALS_NAMESPACE: &str = "crossplane-system";
/// How often something blocked on what the sim does not watch is looked at again.
const RETRY: Duration = Duration::from_secs(1);
/// How often at most every resource is planned again after broad changes.
const FULL_PLAN_EVERY: Duration = Duration::from_millis(500);
/// Steps carried out at once, as a provider's reconcilers run side by side.
const STEPS_AT_ONCE: usize = 16;

/// What the fleet simulation needs.
#[derive(Clone)]
pub struct Config {
    /// The control plane.
    pub control: Client,
    /// The control plane's kubeconfig (workload clusters' kubeconfigs are
    /// derived from it: the same server, `/clusters/<name>`).
    pub kubeconfig: Kubeconfig,
    /// Timings.
    pub profile: Profile,
    /// Injected faults.
    pub faults: Arc<Faults>,
}

/// A control-plane object the clouds watch.
type Key = informer::Key<FleetKind>;

/// The group of Crossplane's Usage and ClusterUsage.
const USAGES: &str = "protection.crossplane.io";

/// Runs the simulated clouds until the supervisor stops.
pub async fn run(config: Config, supervisor: Supervisor, workloads: Arc<Workloads>) {
    install(&config.control).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    // Crossplane's kinds, then the ones the clouds read besides.
    for kind in (0..KINDS.len()).map(FleetKind::Crossplane).chain(EXTRA) {
        supervisor.spawn(
            "sim-watch",
            informer::watch(
                config.control.clone(),
                kind.api(),
                kind,
                informer::keep_all,
                tx.clone(),
            ),
        );
    }
    drop(tx);
    let mut fleet = Fleet::new(config, workloads);
    // Steps under way. The fleet goes on watching and planning while they
    // run: a pool registering its nodes holds up no other cluster.
    let mut running = FuturesUnordered::new();
    loop {
        let wake = fleet.next_wake();
        tokio::select! {
            change = rx.recv() => {
                let Some(change) = change else { return };
                fleet.change(change);
                while let Ok(more) = rx.try_recv() {
                    fleet.change(more);
                }
            }
            Some((key, done)) = running.next() => fleet.finished(key, done),
            () = sleep_until(wake) => {}
        }
        for work in fleet.step(STEPS_AT_ONCE.saturating_sub(running.len())) {
            let hands = fleet.hands.clone();
            running.push(async move {
                let key = work.key();
                (key, hands.execute(work).await)
            });
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

fn group_label(object: &Value) -> Option<&str> {
    object["metadata"]["labels"][modelplane_api::labels::CLUSTER].as_str()
}

struct Fleet {
    hands: Arc<Hands>,
    epoch: Instant,
    objects: informer::Snapshot<FleetKind>,
    /// `(namespace, name)` → keys, for reference resolution.
    names: HashMap<(String, String), Vec<Key>>,
    /// A cloud cluster's label → its resources, planned together (a
    /// change to one can unblock the others); kept as objects come and go,
    /// so a change does not scan every object of the fleet.
    groups: HashMap<String, BTreeSet<Key>>,
    /// The group each grouped key is in.
    group_of: HashMap<Key, String>,
    /// Whether each managed resource was Ready when last seen.
    readiness: HashMap<Key, bool>,
    /// A connection Secret `(namespace, name)` → the resource writing it.
    connections: HashMap<(String, String), Key>,
    /// When each resource was first unblocked with its provider running.
    since: HashMap<Key, Duration>,
    wakes: BTreeMap<Duration, BTreeSet<Key>>,
    dirty: BTreeSet<Key>,
    /// Every resource is to be planned again (a change that gates many):
    /// one flag, where marking each resource once per such change made a
    /// fleet's thousand connection Secrets cost ten million insertions.
    everything: bool,
    /// When `everything` may be planned again.
    next_full_plan: Duration,
    gone: Vec<(FleetKind, Arc<Value>)>,
    /// Statuses to write besides the plan's (Faults').
    pending_status: Vec<(FleetKind, Value, Value)>,
    /// Work planned outside `dirty` (deletions, Faults' statuses), waiting
    /// for room or for its object's step under way.
    queued: VecDeque<Work>,
    /// The objects with a step under way: one at a time each, and one
    /// marked dirty meanwhile is planned again once it is done.
    running: HashSet<Key>,
    /// The object last taken out of `dirty`.
    cursor: Option<Key>,
}

impl Fleet {
    fn new(config: Config, workloads: Arc<Workloads>) -> Fleet {
        Fleet {
            hands: Arc::new(Hands {
                config,
                workloads,
                failing: Default::default(),
            }),
            epoch: Instant::now(),
            objects: informer::Snapshot::default(),
            names: HashMap::new(),
            groups: HashMap::new(),
            group_of: HashMap::new(),
            connections: HashMap::new(),
            readiness: HashMap::new(),
            since: HashMap::new(),
            wakes: BTreeMap::new(),
            dirty: BTreeSet::new(),
            everything: false,
            next_full_plan: Duration::ZERO,
            gone: Vec::new(),
            pending_status: Vec::new(),
            queued: VecDeque::new(),
            running: HashSet::new(),
            cursor: None,
        }
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn next_wake(&self) -> Option<Instant> {
        self.wakes.keys().next().map(|at| self.epoch + *at)
    }

    fn change(&mut self, change: informer::Change<FleetKind>) {
        for touched in self.objects.change(change) {
            match touched {
                Touched::Applied(key, object) if key.0 == FleetKind::Fault => {
                    self.fault_applied(&key, &object);
                    self.touch(&key, &object, false);
                }
                Touched::Deleted(key, object) if key.0 == FleetKind::Fault => {
                    self.hands.config.faults.clear(&key.2);
                    self.touch(&key, &object, true);
                }
                Touched::Applied(key, object) => {
                    let names = self
                        .names
                        .entry((key.1.clone(), key.2.clone()))
                        .or_default();
                    if !names.contains(&key) {
                        names.push(key.clone());
                    }
                    self.regroup(&key, group_label(&object));
                    if let Some(secret) = connection_secret(&key, &object) {
                        self.connections.insert(secret, key.clone());
                    }
                    self.touch(&key, &object, false);
                }
                Touched::Deleted(key, object) => {
                    self.since.remove(&key);
                    if let Some(keys) = self.names.get_mut(&(key.1.clone(), key.2.clone())) {
                        keys.retain(|k| k != &key);
                    }
                    if let Some(secret) = connection_secret(&key, &object) {
                        self.connections.remove(&secret);
                    }
                    self.touch(&key, &object, true);
                    self.regroup(&key, None);
                    self.gone.push((key.0, object));
                }
            }
        }
    }

    /// Marks what a change to `object` may affect: itself, its cluster's
    /// other resources (references), and everything for the kinds that
    /// gate many (providers, their configs, Secrets).
    fn touch(&mut self, key: &Key, object: &Value, gone: bool) {
        let kind = key.0.crossplane();
        if kind.is_some_and(|k| k.group == USAGES) {
            // Usages only guard deletion, which the simulated providers do
            // not block on: nothing here reads them.
            return;
        }
        if key.0 == FleetKind::Secret {
            self.secret_touched(key);
            return;
        }
        if key.0 == FleetKind::Cluster {
            // An InferenceCluster gives its pools' hardware: its own cloud
            // resources read it (the controllers write its status often).
            if let Some(related) = self.groups.get(&key.2) {
                self.dirty.extend(related.iter().cloned());
            }
            return;
        }
        let broad = EXTRA.contains(&key.0)
            || kind.is_some_and(|k| k.provider.is_none() || !crossplane::is_managed(k));
        if broad {
            self.everything = true;
            return;
        }
        self.dirty.insert(key.clone());
        // Others read of it only whether it is there and Ready (a reference
        // resolves to a Ready resource): a change that leaves both as they
        // were, most often its own status written back, concerns it alone.
        let ready = (!gone).then(|| cloud::is_ready(object));
        let before = match ready {
            Some(ready) => self.readiness.insert(key.clone(), ready),
            None => self.readiness.remove(key),
        };
        if before == ready {
            return;
        }
        if let Some(related) = group_label(object).and_then(|g| self.groups.get(g)) {
            self.dirty.extend(related.iter().cloned());
        }
    }

    /// Marks what reads Secret `key`: the resource it is the connection
    /// Secret of (rewritten if it no longer holds what it should), and the
    /// Helm releases it is the credentials of. Planning every resource again for each
    /// Secret instead cost a thousand clusters' fleet ten million plans.
    fn secret_touched(&mut self, key: &Key) {
        if let Some(owner) = self.connections.get(&(key.1.clone(), key.2.clone())) {
            self.dirty.insert(owner.clone());
        }
        let (Some(configs), Some(releases)) = (
            FleetKind::of("helm.m.crossplane.io", "ProviderConfig"),
            FleetKind::of("helm.m.crossplane.io", "Release"),
        ) else {
            return;
        };
        // The Helm provider configs whose credentials it is (as
        // `release_kubeconfig` reads them), then the releases using those.
        let reading: BTreeSet<(&str, &str)> = self
            .objects
            .of(configs)
            .filter(|(k, config)| {
                let secret = &config["spec"]["credentials"]["secretRef"];
                secret["name"] == key.2.as_str()
                    && secret["namespace"].as_str().unwrap_or(&k.1) == key.1
            })
            .map(|(k, _)| (k.1.as_str(), k.2.as_str()))
            .collect();
        let keys: Vec<Key> = self
            .objects
            .of(releases)
            .filter(|(k, release)| {
                let config = release["spec"]["providerConfigRef"]["name"]
                    .as_str()
                    .unwrap_or("default");
                reading.contains(&(k.1.as_str(), config))
            })
            .map(|(k, _)| k.clone())
            .collect();
        self.dirty.extend(keys);
    }

    /// Files `key` under `group` (none: under no group), out of any other.
    fn regroup(&mut self, key: &Key, group: Option<&str>) {
        if let Some(old) = self.group_of.remove(key)
            && let Some(keys) = self.groups.get_mut(&old)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.groups.remove(&old);
            }
        }
        if let Some(group) = group {
            self.groups
                .entry(group.to_string())
                .or_default()
                .insert(key.clone());
            self.group_of.insert(key.clone(), group.to_string());
        }
    }

    /// Plans what is due, and returns up to `room` steps to start, none for
    /// an object whose step is under way.
    fn step(&mut self, room: usize) -> Vec<Work> {
        let now = self.now();
        let due: Vec<Duration> = self.wakes.range(..=now).map(|(at, _)| *at).collect();
        for at in due {
            if let Some(keys) = self.wakes.remove(&at) {
                self.dirty.extend(keys);
            }
        }
        for (kind, object, status) in std::mem::take(&mut self.pending_status) {
            self.queued.push_back(Work {
                kind,
                object: Arc::new(object),
                effect: None,
                status: Some(status),
            });
        }
        for (kind, object) in std::mem::take(&mut self.gone) {
            self.queued.extend(self.gone_effect(kind, &object));
        }
        if self.everything && now < self.next_full_plan {
            // Broad changes come in runs (a fleet's provider configs): one
            // full plan per run's worth, as the loop's batches once gave.
            self.wakes.entry(self.next_full_plan).or_default();
        } else if std::mem::take(&mut self.everything) {
            self.next_full_plan = now + FULL_PLAN_EVERY;
            self.dirty = self
                .objects
                .keys()
                .filter(|k| !EXTRA.contains(&k.0))
                .cloned()
                .collect();
        }
        let mut work = Vec::new();
        let mut waiting = VecDeque::new();
        while work.len() < room
            && let Some(w) = self.queued.pop_front()
        {
            let key = w.key();
            if self.running.insert(key) {
                work.push(w);
            } else {
                waiting.push_back(w);
            }
        }
        waiting.append(&mut self.queued);
        self.queued = waiting;
        let mut skipped = Vec::new();
        while work.len() < room
            && let Some(key) = self.next_dirty()
        {
            if self.running.contains(&key) {
                skipped.push(key);
            } else if let Some(w) = self.plan(&key, now) {
                self.running.insert(key);
                work.push(w);
            }
        }
        self.dirty.extend(skipped);
        work
    }

    /// The next object to plan, taken out of `dirty`: the first after the
    /// last one taken, round the set. Taken from the start each time, the
    /// first kinds' steps that keep failing (a Helm release whose cluster
    /// is not up again after a restart, waiting 5 s to fail each time) took
    /// every worker, and the cloud clusters they waited for never had one.
    fn next_dirty(&mut self) -> Option<Key> {
        let after = self.cursor.as_ref().and_then(|last| {
            self.dirty
                .range((Bound::Excluded(last), Bound::Unbounded))
                .next()
        });
        let key = after.or_else(|| self.dirty.first())?.clone();
        self.dirty.remove(&key);
        self.cursor = Some(key.clone());
        Some(key)
    }

    /// The step for `key` is done; one that failed is tried again later.
    fn finished(&mut self, key: Key, done: bool) {
        self.running.remove(&key);
        if !done {
            let now = self.now();
            self.wake(key, now + RETRY);
        }
    }

    fn wake(&mut self, key: Key, at: Duration) {
        self.wakes.entry(at).or_default().insert(key);
    }

    fn get(&self, kind: FleetKind, namespace: &str, name: &str) -> Option<&Value> {
        self.objects.get(kind, namespace, name)
    }

    /// Whether `provider`'s runtime has replicas: its Provider exists and
    /// its DeploymentRuntimeConfig does not scale it to 0 (Crossplane sets
    /// 1 only when unset).
    fn provider_running(&self, provider: &str) -> bool {
        let provider_kind = FleetKind::of("pkg.crossplane.io", "Provider");
        let runtime_kind = FleetKind::of("pkg.crossplane.io", "DeploymentRuntimeConfig");
        let (Some(p), Some(r)) = (provider_kind, runtime_kind) else {
            return false;
        };
        let Some(package) = self.get(p, "", provider) else {
            return false;
        };
        let runtime = package["spec"]["runtimeConfigRef"]["name"]
            .as_str()
            .unwrap_or("default");
        let replicas = self
            .get(r, "", runtime)
            .and_then(|c| c["spec"]["deploymentTemplate"]["spec"]["replicas"].as_u64());
        replicas.unwrap_or(1) > 0
    }

    /// What a managed resource still waits on: its provider config, then
    /// each resource it refers to.
    fn blocked(&self, key: &Key, object: &Value, kind: &crossplane::Kind) -> Option<String> {
        let config = &object["spec"]["providerConfigRef"];
        let config_kind = config["kind"].as_str().unwrap_or("ClusterProviderConfig");
        let config_name = config["name"].as_str().unwrap_or("default");
        let family = provider_config_group(kind);
        let found = FleetKind::of(family, config_kind).and_then(|i| {
            let namespace = if config_kind == "ProviderConfig" {
                key.1.as_str()
            } else {
                ""
            };
            self.get(i, namespace, config_name)
        });
        if found.is_none() {
            return Some(format!(
                "cannot connect to the provider: cannot get referenced {config_kind}: {config_kind}.{family} \"{config_name}\" not found"
            ));
        }
        for (field, name) in cloud::references(&object["spec"]["forProvider"]) {
            let target = self
                .names
                .get(&(key.1.clone(), name.clone()))
                .and_then(|keys| {
                    keys.iter().filter_map(|k| self.objects.at(k)).find(|o| {
                        crossplane::find(
                            o["apiVersion"].as_str().unwrap_or_default(),
                            o["kind"].as_str().unwrap_or_default(),
                        )
                        .is_some_and(crossplane::is_managed)
                    })
                });
            match target {
                None => {
                    return Some(format!(
                        "cannot resolve references: spec.forProvider.{field}: referenced resource \"{name}\" not found"
                    ));
                }
                Some(t) if !cloud::is_ready(t) => {
                    return Some(format!(
                        "cannot resolve references: spec.forProvider.{field}: referenced field was empty (referenced resource may not yet be ready)"
                    ));
                }
                Some(_) => {}
            }
        }
        None
    }

    /// A Fault object: injected, and its status says whether it is in force.
    fn fault_applied(&mut self, key: &Key, object: &Value) {
        let (active, reason, message) = match crate::faults::Fault::from_spec(&object["spec"]) {
            Ok((cluster, fault)) => {
                self.hands.config.faults.inject(&key.2, &cluster, fault);
                (
                    true,
                    "Injected",
                    format!("in force in cluster {cluster} until this Fault is deleted"),
                )
            }
            Err(why) => {
                self.hands.config.faults.clear(&key.2);
                (false, "Invalid", why)
            }
        };
        let status = json!({ "conditions": [{ "type": "Active", "status": if active { "True" } else { "False" },
            "reason": reason, "message": message, "lastTransitionTime": timestamp() }] });
        let same = cloud::condition(object, "Active")
            .is_some_and(|c| c["reason"] == reason && c["message"] == message.as_str());
        if !same {
            self.pending_status
                .push((FleetKind::Fault, object.clone(), status));
        }
    }

    fn plan(&mut self, key: &Key, now: Duration) -> Option<Work> {
        let kind = key.0.crossplane()?;
        let object = self.objects.shared(key)?;
        if kind.kind == "Provider" {
            return Some(self.provider_health(key, object));
        }
        if !crossplane::is_managed(kind) {
            return None;
        }
        if kind.kind == "Release" {
            return self.plan_release(key, object, now);
        }
        let provider = kind.provider.unwrap_or_default();
        let running = self.provider_running(provider);
        let blocked = if running {
            self.blocked(key, &object, kind)
        } else {
            None
        };
        let role = cloud::role(kind.group, kind.kind);
        let group = group_label(&object).unwrap_or(&key.2).to_string();
        let failure = self
            .hands
            .config
            .faults
            .provisioning_failure(&group, kind.kind);
        if running && blocked.is_none() && !self.since.contains_key(key) {
            self.since.insert(key.clone(), now);
        }
        let observation = Observation {
            object: &object,
            provider_running: running,
            blocked: blocked.clone(),
            failure: failure.as_deref(),
            since: self.since.get(key).copied(),
            provisioning: self.hands.config.profile.provisioning(role),
            now,
        };
        let phase = cloud::phase(&observation);
        if let Phase::Creating { ready_at } = phase {
            self.wake(key.clone(), ready_at);
        }
        if matches!(phase, Phase::Blocked(_)) {
            // A reference not yet created or not yet Ready: look again (a
            // resource of another cluster's group, or of none, does not
            // replan this one when it turns Ready).
            self.wake(key.clone(), now + RETRY);
        }
        let available = phase == Phase::Available;
        let effect = available
            .then(|| self.effect(key, &object, kind, role, &group))
            .flatten();
        let endpoint = (available && role == Role::Cluster)
            .then(|| self.hands.workloads.server(&group))
            .flatten();
        let at_provider = available.then(|| cloud::at_provider(&object, endpoint.as_deref()));
        let status = cloud::status_update(&object, &phase, at_provider, &timestamp());
        (effect.is_some() || status.is_some()).then_some(Work {
            kind: key.0,
            object,
            effect,
            status,
        })
    }

    fn effect(
        &self,
        key: &Key,
        object: &Value,
        kind: &crossplane::Kind,
        role: Role,
        group: &str,
    ) -> Option<Effect> {
        match role {
            Role::Cluster => {
                // A cluster resource may write its own kubeconfig (GKE's
                // does; EKS's comes from ClusterAuth).
                let connection = connection_secret(key, object)
                    .map(|(namespace, name)| Connection {
                        namespace,
                        name,
                        cluster: Some(group.to_string()),
                        kind: kind.kind.to_string(),
                    })
                    .filter(|c| !self.written(c));
                if connection.is_none() && self.hands.workloads.by_name(group).is_some() {
                    return None;
                }
                return Some(Effect::Cluster {
                    name: group.to_string(),
                    connection,
                });
            }
            Role::Pool => {
                let pool = cloud::pool(kind.kind, kind.group, object)?;
                let hardware = self.hardware(group, &pool.name);
                let workload = self.hands.workloads.by_name(group);
                if workload.is_some_and(|w| w.has_pool(&key.2, &pool, &hardware)) {
                    // Each change to a cluster's resources plans them all.
                    return None;
                }
                return Some(Effect::Pool {
                    cluster: group.to_string(),
                    id: key.2.clone(),
                    pool,
                    provider: kind.provider.unwrap_or_default(),
                    hardware,
                });
            }
            Role::Other => {}
        }
        let (namespace, name) = connection_secret(key, object)?;
        let connection = Connection {
            namespace,
            name,
            cluster: (kind.kind != "ServiceAccountKey").then(|| group.to_string()),
            kind: kind.kind.to_string(),
        };
        // Each pass of a Ready resource would write it again otherwise.
        (!self.written(&connection)).then_some(Effect::Connection(connection))
    }

    /// Whether a connection Secret, as watched, holds what it should.
    fn written(&self, connection: &Connection) -> bool {
        let secret = self.get(FleetKind::Secret, &connection.namespace, &connection.name);
        let data = work::connection_data(&self.hands.workloads, connection);
        secret.zip(data).is_some_and(|(s, d)| work::holds(s, &d))
    }

    /// The devices and fabric of pool `pool` of InferenceCluster `cluster`:
    /// its InferenceClass's devices, the pool's fabric.
    fn hardware(&self, cluster: &str, pool: &str) -> Hardware {
        let Some(ic) = self.get(FleetKind::Cluster, "", cluster) else {
            return Hardware::default();
        };
        let Some(spec) = ic["spec"]["nodePools"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == pool)
        else {
            return Hardware::default();
        };
        let class = spec["className"].as_str().unwrap_or_default();
        let devices = self
            .get(FleetKind::Class, "", class)
            .and_then(|c| c["spec"]["devices"].as_array().cloned())
            .unwrap_or_default();
        Hardware {
            devices,
            fabric: spec["fabric"]["type"].as_str().map(str::to_string),
        }
    }

    fn gone_effect(&self, watched: FleetKind, object: &Arc<Value>) -> Option<Work> {
        let kind = watched.crossplane()?;
        let group = group_label(object)
            .or(object["metadata"]["name"].as_str())
            .unwrap_or_default()
            .to_string();
        let effect = match cloud::role(kind.group, kind.kind) {
            Role::Cluster => Effect::ClusterGone { name: group },
            Role::Pool => Effect::PoolGone {
                cluster: group,
                id: object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            },
            Role::Other => return None,
        };
        Some(Work {
            kind: watched,
            object: object.clone(),
            effect: Some(effect),
            status: None,
        })
    }
}

/// The connection Secret `(namespace, name)` resource `key` writes, if any
/// (in its own namespace unless it names one).
fn connection_secret(key: &Key, object: &Value) -> Option<(String, String)> {
    let to = &object["spec"]["writeConnectionSecretToRef"];
    let name = to["name"].as_str()?;
    let namespace = to["namespace"].as_str().unwrap_or(&key.1);
    Some((namespace.to_string(), name.to_string()))
}

/// The group of the ProviderConfig kinds a managed resource's provider reads.
fn provider_config_group(kind: &crossplane::Kind) -> &'static str {
    match kind.provider.unwrap_or_default() {
        p if p.starts_with("provider-aws") || p == "provider-family-aws" => "aws.m.upbound.io",
        p if p.starts_with("provider-gcp") || p == "provider-family-gcp" => "gcp.m.upbound.io",
        p if p.starts_with("provider-azure") || p == "provider-family-azure" => {
            "azure.m.upbound.io"
        }
        "provider-nebius" => "nebius.m.upbound.io",
        "provider-vultr" => "vultr.m.upbound.io",
        "provider-helm" => "helm.m.crossplane.io",
        _ => "kubernetes.m.crossplane.io",
    }
}
