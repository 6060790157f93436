//! The kubelets of a workload cluster: for each pod bound to one of its
//! nodes, the image pull (cached per node), the `$(VAR)` expansion, the
//! process the command line starts ([`super::launch`]), and then:
//!
//! - an engine loads its weights — from the ModelCache volume at the
//!   storage's bandwidth, shared by every pod reading it at once; or, on a
//!   cluster running the ModelExpress server whose pool has a fabric, from a
//!   peer that already serves the model at the fabric's bandwidth — joins
//!   its ranks (rank 0 serves only once every rank reached it through the
//!   address it was given), and serves on the pod's own loopback address as
//!   an engine-sim answering the names its command gives;
//! - a process that exits is restarted with CrashLoopBackOff's back-off,
//!   its output kept as the container's log;
//! - a hydration Job's download copies the model at storage bandwidth and
//!   exits 0; anything else runs until stopped.
//!
//! The kubelet is stateful (processes, transfers); what it writes is
//! computed from that state and the snapshot.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

mod addresses;
mod process;
mod weights;

pub use addresses::Addresses;
pub use weights::Source;

use super::launch::{Exit, Launch};
use super::world::{ClusterKind, World, Write, deleting, name, namespace, pod_done};
use crate::profile::Profile;
use addresses::Address;
use modelplane_api::labels::ENGINE_PORT;
use process::{resolve, serve, start};

const SOURCE: &str = "kubelet";
/// The kubelet's hold on a pod it runs, so a deletion waits for the container to stop.
const FINALIZER: &str = "sim.modelplane.ai/kubelet";
/// How long stopping a container takes.
const TERMINATION: Duration = Duration::from_secs(1);

/// The pod's finalizers with the kubelet's added or removed.
fn finalizers(pod: &Value, hold: bool) -> Write {
    let mut list: Vec<Value> = pod["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != FINALIZER)
        .collect();
    if hold {
        list.push(json!(FINALIZER));
    }
    Write::Patch {
        kind: ClusterKind::Pod,
        namespace: namespace(pod).to_string(),
        name: name(pod).to_string(),
        patch: json!({ "metadata": { "uid": pod["metadata"]["uid"], "finalizers": list } }),
    }
}

/// A pod: `(namespace, name)`.
type PodKey = (String, String);

/// How long a kubelet waits to create a failed sandbox again.
const SANDBOX_RETRY: Duration = Duration::from_secs(10);

#[derive(Debug)]
enum Stage {
    Pulling {
        until: Duration,
    },
    /// Being deleted: stopped, the pod kept until `until`.
    Terminating {
        until: Duration,
    },
    /// The process is starting (a Python engine imports for a while before
    /// it even reads its arguments).
    Starting {
        until: Duration,
    },
    /// Waiting to reach rank 0 (ranks above 0), until `until`.
    Connecting {
        until: Duration,
    },
    Loading {
        remaining: f64,
        source: Source,
    },
    /// Weights loaded; rank 0 waits for its other ranks.
    Joining,
    Running,
    BackOff {
        until: Duration,
    },
    Succeeded,
    Failed,
}

/// A running engine process: dropping `stop` ends it and every connection.
#[derive(Debug)]
struct Serving {
    _stop: watch::Sender<bool>,
}

#[derive(Debug)]
struct Run {
    uid: String,
    node: String,
    address: Address,
    stage: Stage,
    restarts: u32,
    last_exit: Option<(Exit, String)>,
    log: String,
    /// The log of the container's previous run.
    previous: String,
    launch: Option<Launch>,
    download: bool,
    serving: Option<Serving>,
    started_at: String,
    written: Value,
}

/// What a cluster's kubelets hold.
#[derive(Debug)]
pub struct Kubelets {
    images: HashMap<String, HashSet<String>>,
    runs: BTreeMap<PodKey, Run>,
    /// When the last step ran, for transfers.
    last: Option<Duration>,
    /// Pods whose sandbox failed, and when to create it again.
    sandbox_retries: HashMap<PodKey, Duration>,
    /// The port a pod's address holds: the engine port (another in tests).
    held_port: u16,
    /// Where pods' addresses come from: the fleet's.
    addresses: Addresses,
}

impl Default for Kubelets {
    fn default() -> Kubelets {
        Kubelets {
            images: HashMap::new(),
            runs: BTreeMap::new(),
            last: None,
            sandbox_retries: HashMap::new(),
            held_port: ENGINE_PORT,
            addresses: Addresses::default(),
        }
    }
}

/// What a kubelet step needs besides the snapshot.
pub struct Context<'a> {
    /// Now.
    pub now: Duration,
    /// Timings.
    pub profile: &'a Profile,
    /// The ModelExpress server runs in the cluster.
    pub model_express: bool,
    /// Pool name → its fabric.
    pub fabrics: &'a BTreeMap<String, String>,
    /// Spawns a process's task (the cluster's scope).
    pub spawn: &'a dyn Fn(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>),
    /// Nodes whose kubelet is down (a fault): nothing there serves or reports.
    pub silent_nodes: &'a HashSet<String>,
    /// The storage reads this many times slower (a fault; 1 when healthy).
    pub storage_factor: f64,
    /// Pods (`namespace/name`) whose engine is killed now.
    pub kills: &'a [String],
}

/// What the kubelets did: writes, and when to look again.
pub struct Pass {
    /// Pod statuses and events.
    pub writes: Vec<Write>,
    /// The next time something is due, if anything is.
    pub wake: Option<Duration>,
}

fn pod_key(pod: &Value) -> PodKey {
    (namespace(pod).to_string(), name(pod).to_string())
}

fn backoff(profile: &Profile, restarts: u32) -> Duration {
    let seconds = (10u64 << restarts.saturating_sub(1).min(5)).min(300);
    profile.scale(Duration::from_secs(seconds))
}

impl Kubelets {
    /// Kubelets giving pods addresses from `addresses`.
    pub fn new(addresses: Addresses) -> Kubelets {
        Kubelets {
            addresses,
            ..Kubelets::default()
        }
    }

    /// One pass over every pod bound to a node.
    pub fn step(&mut self, world: &World<'_>, cx: &Context<'_>) -> Pass {
        let elapsed = self
            .last
            .map_or(Duration::ZERO, |l| cx.now.saturating_sub(l));
        self.last = Some(cx.now);
        let mut writes = Vec::new();
        // Pods gone: their processes are gone. Pods being deleted: their
        // processes stop, and once stopped the kubelet lets the deletion
        // finish (its finalizer), as a graceful termination does; until
        // then the pod and its logs are still there.
        self.runs.retain(|k, run| {
            world
                .get(ClusterKind::Pod, &k.0, &k.1)
                .is_some_and(|p| p["metadata"]["uid"] == run.uid.as_str())
        });
        for pod in world.all(ClusterKind::Pod).filter(|p| deleting(p)) {
            self.terminate(pod, cx, &mut writes);
        }
        self.advance_transfers(elapsed, cx.profile, cx.storage_factor);
        let pods: Vec<&Value> = world
            .all(ClusterKind::Pod)
            .filter(|p| p["spec"]["nodeName"].is_string() && !deleting(p))
            .collect();
        for kill in cx.kills {
            if let Some((ns, pod)) = kill.split_once('/') {
                self.kill(ns, pod, cx);
            }
        }
        let pods: Vec<&Value> = pods
            .into_iter()
            .filter(|p| {
                !p["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| cx.silent_nodes.contains(n))
            })
            .collect();
        // Retries only of pods stepped now: one not stepped (its node
        // silent, or being deleted) would wake the loop at a time past.
        self.sandbox_retries
            .retain(|k, _| pods.iter().any(|p| namespace(p) == k.0 && name(p) == k.1));
        let mut cannot_listen = self.silence(cx);
        for pod in &pods {
            self.pod_step(world, pod, cx, &mut writes);
        }
        cannot_listen.extend(self.join_ranks(world, cx));
        for (key, exit) in cannot_listen {
            if let (Some(pod), Some(run)) = (
                world.get(ClusterKind::Pod, &key.0, &key.1),
                self.runs.get_mut(&key),
            ) {
                exited(pod, run, exit, cx, &mut writes);
            }
        }
        for pod in &pods {
            if let Some(status) = self.status(world, pod) {
                writes.push(status);
            }
        }
        Pass {
            writes,
            wake: self.next_wake(cx.profile, cx.storage_factor),
        }
    }

    fn advance_transfers(&mut self, elapsed: Duration, profile: &Profile, factor: f64) {
        let readers = self
            .runs
            .values()
            .filter(|r| {
                matches!(
                    r.stage,
                    Stage::Loading {
                        source: Source::Storage,
                        ..
                    }
                )
            })
            .count()
            .max(1) as f64;
        let secs = elapsed.as_secs_f64() * profile.time_scale.max(f64::MIN_POSITIVE);
        for run in self.runs.values_mut() {
            if let Stage::Loading { remaining, source } = &mut run.stage {
                let rate = match source {
                    Source::Storage => profile.storage_bandwidth / factor / readers,
                    Source::Peer { .. } => profile.fabric_bandwidth,
                };
                *remaining -= rate * secs;
            }
        }
    }

    fn next_wake(&self, profile: &Profile, factor: f64) -> Option<Duration> {
        let readers = self
            .runs
            .values()
            .filter(|r| {
                matches!(
                    r.stage,
                    Stage::Loading {
                        source: Source::Storage,
                        ..
                    }
                )
            })
            .count()
            .max(1) as f64;
        let now = self.last.unwrap_or_default();
        self.runs
            .values()
            .filter_map(|run| match &run.stage {
                Stage::Pulling { until }
                | Stage::Terminating { until }
                | Stage::Starting { until }
                | Stage::BackOff { until }
                | Stage::Connecting { until } => Some(*until),
                Stage::Loading { remaining, source } => {
                    let rate = match source {
                        Source::Storage => profile.storage_bandwidth / factor / readers,
                        Source::Peer { .. } => profile.fabric_bandwidth,
                    };
                    Some(
                        now + profile.scale(Duration::from_secs_f64((remaining / rate).max(0.0)))
                            + Duration::from_millis(1),
                    )
                }
                _ => None,
            })
            .chain(self.sandbox_retries.values().copied())
            .min()
    }

    fn pod_step(
        &mut self,
        world: &World<'_>,
        pod: &Value,
        cx: &Context<'_>,
        writes: &mut Vec<Write>,
    ) {
        let key = pod_key(pod);
        let node = pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let container = &pod["spec"]["containers"][0];
        let image = container["image"].as_str().unwrap_or_default().to_string();
        if !self.runs.contains_key(&key) {
            if pod_done(pod)
                || self
                    .sandbox_retries
                    .get(&key)
                    .is_some_and(|at| cx.now < *at)
            {
                return;
            }
            let address = match self.addresses.next(self.held_port) {
                Ok(address) => {
                    self.sandbox_retries.remove(&key);
                    address
                }
                Err(e) => {
                    tracing::warn!(pod = %name(pod), port = self.held_port, error = %e, "cannot create a pod sandbox");
                    writes.push(event(
                        pod,
                        "Warning",
                        "FailedCreatePodSandBox",
                        format!(
                            "Failed to create pod sandbox (engine port {}): {e}",
                            self.held_port
                        ),
                    ));
                    self.sandbox_retries
                        .insert(key, cx.now + cx.profile.scale(SANDBOX_RETRY));
                    return;
                }
            };
            let cached = self.images.get(&node).is_some_and(|i| i.contains(&image));
            let until = if cached {
                cx.now
            } else {
                cx.now + cx.profile.scale(cx.profile.image_pull)
            };
            if !cached {
                writes.push(event(
                    pod,
                    "Normal",
                    "Pulling",
                    format!("Pulling image \"{image}\""),
                ));
            }
            writes.push(finalizers(pod, true));
            self.runs.insert(
                key.clone(),
                Run {
                    uid: pod["metadata"]["uid"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    node: node.clone(),
                    address,
                    stage: Stage::Pulling { until },
                    restarts: 0,
                    last_exit: None,
                    log: String::new(),
                    previous: String::new(),
                    launch: None,
                    download: false,
                    serving: None,
                    started_at: world.timestamp.to_string(),
                    written: Value::Null,
                },
            );
        }
        let Some(run) = self.runs.get_mut(&key) else {
            return;
        };
        match &run.stage {
            Stage::Pulling { until } | Stage::BackOff { until } if cx.now >= *until => {
                if matches!(run.stage, Stage::Pulling { .. })
                    && !self.images.get(&node).is_some_and(|i| i.contains(&image))
                {
                    writes.push(event(
                        pod,
                        "Normal",
                        "Pulled",
                        format!("Successfully pulled image \"{image}\""),
                    ));
                    self.images
                        .entry(node.clone())
                        .or_default()
                        .insert(image.clone());
                }
                let Some(run) = self.runs.get_mut(&key) else {
                    return;
                };
                let container_name = container["name"].as_str().unwrap_or("main");
                writes.push(event(
                    pod,
                    "Normal",
                    "Started",
                    format!("Started container {container_name}"),
                ));
                run.started_at = crate::clock::timestamp();
                // A new container: its log starts empty; the crashed one's
                // is the previous log.
                run.log.clear();
                let starting = cx.profile.scale(cx.profile.engine_start);
                run.stage = Stage::Starting {
                    until: cx.now + starting,
                };
            }
            Stage::Starting { until } if cx.now >= *until => start(world, pod, run, cx, writes),
            Stage::Connecting { until } if cx.now >= *until => {
                let address = run
                    .launch
                    .as_ref()
                    .and_then(|l| l.master_addr.clone())
                    .unwrap_or_default();
                let exit = Exit {
                    code: 1,
                    log: format!(
                        "RuntimeError: could not reach rank 0 at {address}: Name or service not known\n"
                    ),
                };
                exited(pod, run, exit, cx, writes);
            }
            Stage::Loading { remaining, .. } if *remaining <= 0.0 => {
                if run.download {
                    run.log.push_str("download complete\n");
                    run.stage = Stage::Succeeded;
                } else {
                    writes.push(event(
                        pod,
                        "Normal",
                        "WeightsLoaded",
                        "Model weights loaded".into(),
                    ));
                    run.stage = Stage::Joining;
                }
            }
            _ => {}
        }
    }

    /// Rank 0 of a multi-node engine serves once every rank reached it;
    /// a single-node engine serves once its weights are loaded. Returns the
    /// engines that could not listen.
    fn join_ranks(&mut self, world: &World<'_>, cx: &Context<'_>) -> Vec<(PodKey, Exit)> {
        let mut failed = Vec::new();
        let mut joined: HashMap<PodKey, u32> = HashMap::new();
        for run in self.runs.values() {
            let Some(launch) = &run.launch else { continue };
            if launch.node_rank == 0 || !matches!(run.stage, Stage::Joining | Stage::Running) {
                continue;
            }
            let Some(leader) = launch
                .master_addr
                .as_deref()
                .and_then(|a| resolve(world, a))
            else {
                continue;
            };
            *joined.entry(pod_key(leader)).or_default() += 1;
        }
        for (key, run) in &mut self.runs {
            if !matches!(run.stage, Stage::Joining) {
                continue;
            }
            let Some(launch) = run.launch.clone() else {
                run.stage = Stage::Running;
                continue;
            };
            let ready =
                launch.node_rank > 0 || joined.get(key).copied().unwrap_or(0) + 1 >= launch.nnodes;
            if !ready {
                continue;
            }
            run.stage = Stage::Running;
            if let Some(port) = launch.port {
                match serve(run.address.ip, port, &launch, cx) {
                    Ok(serving) => {
                        run.log.push_str(&format!(
                            "INFO:     Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)\n"
                        ));
                        run.serving = Some(serving);
                    }
                    Err(exit) => failed.push((key.clone(), exit)),
                }
            }
        }
        failed
    }

    /// The status the kubelet reports for `pod`, if it changed.
    fn status(&mut self, world: &World<'_>, pod: &Value) -> Option<Write> {
        let run = self.runs.get_mut(&pod_key(pod))?;
        let container = &pod["spec"]["containers"][0];
        let container_name = container["name"].as_str().unwrap_or("main");
        let ready = matches!(run.stage, Stage::Running);
        let (phase, state) = match &run.stage {
            Stage::Pulling { .. } => (
                "Pending",
                json!({ "waiting": { "reason": "ContainerCreating" } }),
            ),
            Stage::BackOff { .. } => (
                "Running",
                json!({ "waiting": { "reason": "CrashLoopBackOff",
                "message": format!("back-off restarting failed container={container_name} pod={}_{}({})", name(pod), namespace(pod), run.uid) } }),
            ),
            Stage::Succeeded => (
                "Succeeded",
                json!({ "terminated": { "exitCode": 0, "reason": "Completed", "startedAt": run.started_at, "finishedAt": world.timestamp } }),
            ),
            Stage::Failed => (
                "Failed",
                json!({ "terminated": { "exitCode": run.last_exit.as_ref().map_or(1, |e| e.0.code), "reason": "Error" } }),
            ),
            _ => (
                "Running",
                json!({ "running": { "startedAt": run.started_at } }),
            ),
        };
        let mut state = state;
        let message = termination_message(container, run);
        if let (Some(message), Some(terminated)) = (&message, state.get_mut("terminated")) {
            terminated["message"] = json!(message);
        }
        let mut container_status = json!({
            "name": container_name, "image": container["image"], "imageID": "",
            "ready": ready, "started": !matches!(run.stage, Stage::Pulling { .. } | Stage::BackOff { .. }),
            "restartCount": run.restarts, "state": state,
        });
        if let Some((exit, finished)) = &run.last_exit {
            container_status["lastState"] = json!({ "terminated": { "exitCode": exit.code, "reason": "Error", "finishedAt": finished } });
            if let Some(message) = message {
                container_status["lastState"]["terminated"]["message"] = json!(message);
            }
        }
        let condition = |type_: &str, ok: bool| json!({ "type": type_, "status": if ok { "True" } else { "False" } });
        let status = json!({
            "phase": phase,
            "hostIP": "127.0.0.1",
            "podIP": run.address.ip.to_string(),
            "podIPs": [{ "ip": run.address.ip.to_string() }],
            "startTime": run.started_at,
            "conditions": [
                condition("PodReadyToStartContainers", true),
                condition("Initialized", true),
                condition("ContainersReady", ready),
                condition("Ready", ready),
                condition("PodScheduled", true),
            ],
            "containerStatuses": [container_status],
        });
        if status == run.written {
            return None;
        }
        run.written = status.clone();
        Some(Write::Status {
            kind: ClusterKind::Pod,
            object: pod.clone(),
            status,
            manager: SOURCE,
        })
    }

    /// Engines on a silent node stop answering (the node is down); on a
    /// node back, they serve again and the kubelet reports afresh. Returns
    /// the engines that could not listen again.
    fn silence(&mut self, cx: &Context<'_>) -> Vec<(PodKey, Exit)> {
        let mut failed = Vec::new();
        for (key, run) in &mut self.runs {
            let silent = cx.silent_nodes.contains(&run.node);
            if silent {
                run.serving = None;
                run.written = Value::Null;
                continue;
            }
            let port = run.launch.as_ref().and_then(|l| l.port);
            if let (Stage::Running, None, Some(port), Some(launch)) =
                (&run.stage, &run.serving, port, run.launch.clone())
            {
                match serve(run.address.ip, port, &launch, cx) {
                    Ok(serving) => run.serving = Some(serving),
                    Err(exit) => failed.push((key.clone(), exit)),
                }
            }
        }
        failed
    }

    /// Stops the container of a pod being deleted, then lets it go.
    fn terminate(&mut self, pod: &Value, cx: &Context<'_>, writes: &mut Vec<Write>) {
        let holds = pod["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == FINALIZER));
        let Some(run) = self.runs.get_mut(&pod_key(pod)) else {
            if holds {
                writes.push(finalizers(pod, false));
            }
            return;
        };
        match run.stage {
            Stage::Terminating { until } if cx.now >= until => {
                if holds {
                    writes.push(finalizers(pod, false));
                }
            }
            Stage::Terminating { .. } => {}
            _ => {
                let container = pod["spec"]["containers"][0]["name"]
                    .as_str()
                    .unwrap_or("main");
                writes.push(event(
                    pod,
                    "Normal",
                    "Killing",
                    format!("Stopping container {container}"),
                ));
                run.serving = None;
                run.stage = Stage::Terminating {
                    until: cx.now + cx.profile.scale(TERMINATION),
                };
            }
        }
    }

    /// Every container's log: this run's and the previous one's.
    pub fn logs(&self) -> BTreeMap<PodKey, (String, String)> {
        self.runs
            .iter()
            .map(|(k, r)| (k.clone(), (r.log.clone(), r.previous.clone())))
            .collect()
    }

    /// Kills the engine process of `pod`, as a crash would: its
    /// connections close at once; the kubelet restarts it.
    pub fn kill(&mut self, namespace: &str, pod: &str, cx: &Context<'_>) -> bool {
        let Some(run) = self.runs.get_mut(&(namespace.to_string(), pod.to_string())) else {
            return false;
        };
        run.serving = None;
        run.restarts += 1;
        run.last_exit = Some((
            Exit {
                code: 137,
                log: "Killed\n".into(),
            },
            String::new(),
        ));
        run.log.push_str("Killed\n");
        run.stage = Stage::BackOff {
            until: cx.now + backoff(cx.profile, run.restarts),
        };
        true
    }

    /// Where each pod serving an engine listens.
    pub fn engines(&self) -> Vec<(PodKey, SocketAddr)> {
        self.runs
            .iter()
            .filter(|(_, r)| r.serving.is_some())
            .filter_map(|(k, r)| {
                Some((
                    k.clone(),
                    SocketAddr::from((r.address.ip, r.launch.as_ref()?.port?)),
                ))
            })
            .collect()
    }
}

fn event(pod: &Value, type_: &'static str, reason: &str, message: String) -> Write {
    Write::Event {
        object: pod.clone(),
        type_,
        reason: reason.into(),
        message,
        source: SOURCE,
    }
}

fn exited(pod: &Value, run: &mut Run, exit: Exit, cx: &Context<'_>, writes: &mut Vec<Write>) {
    run.log.push_str(&exit.log);
    // Until it restarts, the dead container is both the latest and the
    // previous one `kubectl logs` can show.
    run.previous = run.log.clone();
    run.serving = None;
    let restart = pod["spec"]["restartPolicy"].as_str().unwrap_or("Always");
    let finished = crate::clock::timestamp();
    let failed = exit.code != 0;
    run.last_exit = Some((exit, finished));
    if restart == "Never" || (restart == "OnFailure" && !failed) {
        run.stage = if failed {
            Stage::Failed
        } else {
            Stage::Succeeded
        };
        return;
    }
    run.restarts += 1;
    run.stage = Stage::BackOff {
        until: cx.now + backoff(cx.profile, run.restarts),
    };
    let container = pod["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap_or("main");
    writes.push(event(
        pod,
        "Warning",
        "BackOff",
        format!(
            "Back-off restarting failed container {container} in pod {}_{}({})",
            name(pod),
            namespace(pod),
            run.uid
        ),
    ));
}

/// The message of the container's last termination, as the kubelet
/// writes it under `terminationMessagePolicy: FallbackToLogsOnError` for a
/// container that exited with an error and wrote no termination file: the
/// tail of its log, at most 80 lines and 2,048 bytes. `None` otherwise (the
/// default policy reads only `/dev/termination-log`, which engines here
/// never write).
fn termination_message(container: &Value, run: &Run) -> Option<String> {
    const MAX_LINES: usize = 80;
    const MAX_BYTES: usize = 2048;
    let (exit, _) = run.last_exit.as_ref()?;
    if exit.code == 0 || container["terminationMessagePolicy"] != "FallbackToLogsOnError" {
        return None;
    }
    let lines: Vec<&str> = run.previous.lines().collect();
    let mut tail = lines[lines.len().saturating_sub(MAX_LINES)..].join("\n");
    if tail.len() > MAX_BYTES {
        let mut cut = tail.len() - MAX_BYTES;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail = tail[cut..].to_string();
    }
    (!tail.is_empty()).then_some(tail)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::atomic::AtomicU32;

    use super::addresses::*;
    use super::weights::*;
    use super::*;
    use crate::cluster::world::Snapshot;
    use crate::informer::Change;

    /// A port no one uses, so that these tests' addresses meet neither
    /// each other nor the pods of tests running beside them. The socket
    /// keeps it out of the system's hands (another test's `0.0.0.0:0`)
    /// without taking it on any 127.1.x.y address.
    fn spare_port() -> (tokio::net::TcpSocket, u16) {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("a free port");
        let port = socket.local_addr().expect("its port").port();
        (socket, port)
    }

    #[test]
    fn an_address_whose_engine_port_another_process_holds_is_skipped() {
        let (counter, (_spare, port)) = (AtomicU32::new(1), spare_port());
        let first = Ipv4Addr::new(127, 1, 0, 1);
        let _other = std::net::TcpListener::bind((first, port)).expect("another process");
        assert_eq!(
            next_address(&counter, port).expect("an address").ip,
            Ipv4Addr::new(127, 1, 0, 2)
        );
    }

    /// Another process's kubelet (a test's second simulator) hands out
    /// addresses from the same range: while this pod's engine pulls, starts
    /// and loads, its address must not look free, or both engines bind it.
    #[test]
    fn a_pods_address_stays_taken_while_its_engine_is_not_listening() {
        let (counter, (_spare, port)) = (AtomicU32::new(1), spare_port());
        let address = next_address(&counter, port).expect("an address");
        let engine_port = SocketAddr::from((address.ip, port));
        let other = tokio::net::TcpSocket::new_v4().expect("socket");
        assert!(
            other.bind(engine_port).is_err(),
            "{engine_port} looks free to another process"
        );
        assert!(
            std::net::TcpStream::connect(engine_port).is_err(),
            "no engine listens yet: refused"
        );
        let engine = std::net::TcpListener::bind(engine_port).expect("its own engine listens");
        assert!(std::net::TcpStream::connect(engine_port).is_ok());
        drop(engine);
    }

    /// Kubelets of other clusters (in this process or another) probe at
    /// the same time: a probe in progress is not a listener everywhere.
    #[test]
    fn another_kubelets_probe_does_not_take_every_address() {
        let (_spare, port) = spare_port();
        let probing = tokio::net::TcpSocket::new_v4().expect("socket");
        probing.set_reuseaddr(true).expect("reuse");
        probing
            .bind(SocketAddr::from((PROBE_ADDRESS, port)))
            .expect("another kubelet's probe");
        assert!(next_address(&AtomicU32::new(1), port).is_ok());
    }

    /// A process listening on the port on every address takes them all:
    /// the search ends with its error instead of spinning.
    #[test]
    fn a_listener_on_every_address_ends_the_search_with_its_error() {
        let everywhere = std::net::TcpListener::bind("0.0.0.0:0").expect("a listener");
        let port = everywhere.local_addr().expect("its port").port();
        let error = next_address(&AtomicU32::new(1), port).expect_err("no address is free");
        assert!(matches!(error, NoAddress::TakenEverywhere), "{error:?}");
    }

    /// The pod's address is held from its first step until the pod is gone,
    /// through the pull, the start and the load.
    #[tokio::test]
    async fn a_pods_address_is_held_until_the_pod_is_gone() {
        let (_spare, port) = spare_port();
        let mut snapshot = Snapshot::default();
        snapshot.change(Change::Apply(ClusterKind::Pod, engine_pod(port)));
        let host = Host::new();
        let cx = |now| host.at(now);
        let mut kubelets = Kubelets {
            held_port: port,
            ..Kubelets::default()
        };
        let engine_port = |kubelets: &Kubelets| {
            let ip = kubelets.runs[&("ml".to_string(), "e".to_string())]
                .address
                .ip;
            SocketAddr::from((ip, port))
        };
        let free = |at: SocketAddr| {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket.bind(at).is_ok()
        };
        let world = World {
            snapshot: &snapshot,
            timestamp: "t",
        };
        kubelets.step(&world, &cx(Duration::ZERO));
        let at = engine_port(&kubelets);
        for second in 0..3 {
            assert!(!free(at), "{at} looks free at step {second}");
            kubelets.step(&world, &cx(Duration::from_secs(second * 100)));
        }
        snapshot.change(Change::Delete(ClusterKind::Pod, engine_pod(port)));
        let world = World {
            snapshot: &snapshot,
            timestamp: "t",
        };
        kubelets.step(&world, &cx(Duration::from_secs(400)));
        assert!(kubelets.runs.is_empty());
        assert!(free(at), "{at} is still held after its pod went");
    }

    /// With the held port taken on every address, the pod gets one
    /// FailedCreatePodSandBox event and is tried again every 10 s, not on
    /// every pass; once the port is free, its sandbox is created.
    #[tokio::test]
    async fn a_port_taken_on_every_address_fails_the_sandbox_and_is_tried_again_later() {
        let everywhere = std::net::TcpListener::bind("0.0.0.0:0").expect("a listener");
        let port = everywhere.local_addr().expect("its port").port();
        let mut snapshot = Snapshot::default();
        snapshot.change(Change::Apply(ClusterKind::Pod, engine_pod(port)));
        let world = World {
            snapshot: &snapshot,
            timestamp: "t",
        };
        let host = Host::new();
        let cx = |now| host.at(now);
        let mut kubelets = Kubelets {
            held_port: port,
            ..Kubelets::default()
        };
        let failures = |pass: &Pass| {
            pass.writes
                .iter()
                .filter(|w| matches!(w, Write::Event { reason, .. } if reason == "FailedCreatePodSandBox"))
                .count()
        };
        let pass = kubelets.step(&world, &cx(Duration::ZERO));
        assert_eq!(failures(&pass), 1);
        let retry = host.profile.scale(SANDBOX_RETRY);
        assert_eq!(pass.wake, Some(retry));
        let pass = kubelets.step(&world, &cx(retry / 2));
        assert_eq!(failures(&pass), 0, "tried again before its time");
        assert!(kubelets.runs.is_empty());
        drop(everywhere);
        kubelets.step(&world, &cx(retry));
        assert_eq!(kubelets.runs.len(), 1, "created once the port is free");
    }

    /// What a kubelet step needs besides the snapshot: the fast profile,
    /// no fabric or fault, engines spawned by a supervisor.
    struct Host {
        profile: Profile,
        fabrics: BTreeMap<String, String>,
        silent_nodes: HashSet<String>,
        spawn: Box<Spawn>,
    }

    /// How a kubelet starts an engine's task.
    type Spawn = dyn Fn(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>);

    impl Host {
        fn new() -> Host {
            let supervisor = modelplane_supervisor::Supervisor::default();
            Host {
                profile: Profile::fast(),
                fabrics: BTreeMap::new(),
                silent_nodes: HashSet::new(),
                spawn: Box::new(move |task| supervisor.spawn("engine", task)),
            }
        }

        fn at(&self, now: Duration) -> Context<'_> {
            Context {
                now,
                profile: &self.profile,
                model_express: false,
                fabrics: &self.fabrics,
                spawn: &*self.spawn,
                silent_nodes: &self.silent_nodes,
                storage_factor: 1.0,
                kills: &[],
            }
        }
    }

    fn engine_pod(port: u16) -> Value {
        json!({ "metadata": { "name": "e", "namespace": "ml", "uid": "u-e" },
            "spec": { "nodeName": "n1", "containers": [{ "name": "engine", "image": "vllm/vllm-openai:v0.23.0",
                "command": ["vllm", "serve"], "args": ["m", format!("--port={port}")] }] } })
    }

    /// An engine whose port another process listens on exits as uvicorn
    /// does, and the kubelet restarts it: the pod is never Ready, and the
    /// error is in its previous log.
    #[tokio::test]
    async fn an_engine_whose_port_is_taken_exits_and_its_pod_is_not_ready() {
        let (_spare, port) = spare_port();
        let mut snapshot = Snapshot::default();
        snapshot.change(Change::Apply(ClusterKind::Pod, engine_pod(port)));
        let world = World {
            snapshot: &snapshot,
            timestamp: "t",
        };
        let host = Host::new();
        let cx = |now| host.at(now);
        let mut kubelets = Kubelets {
            held_port: port,
            ..Kubelets::default()
        };
        kubelets.step(&world, &cx(Duration::ZERO));
        let key = ("ml".to_string(), "e".to_string());
        let ip = kubelets.runs[&key].address.ip;
        let _other = std::net::TcpListener::bind((ip, port)).expect("another process listens");
        let mut status = Value::Null;
        for second in 1..20 {
            let pass = kubelets.step(&world, &cx(Duration::from_secs(second * 100)));
            for write in pass.writes {
                if let Write::Status { status: s, .. } = write {
                    status = s;
                }
            }
            assert_ne!(
                status["conditions"][3],
                json!({ "type": "Ready", "status": "True" }),
                "{status}"
            );
        }
        let container = &status["containerStatuses"][0];
        assert!(container["restartCount"].as_u64() >= Some(2), "{status}");
        assert_eq!(container["lastState"]["terminated"]["exitCode"], 1);
        assert!(
            kubelets.runs[&key].previous.contains(
                &format!("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', {port}): address already in use\n")
            ),
            "{}",
            kubelets.runs[&key].previous
        );
    }

    /// A hydration container given a token the Hub refuses exits with the
    /// Hub's 401, and under `FallbackToLogsOnError` its last termination
    /// carries the tail of its log (never the token).
    #[test]
    fn a_refused_token_fails_the_download_and_its_log_tail_is_the_termination_message() {
        let script = "set -e\nhf download Qwen/Qwen3-8B --local-dir /mnt/artifact\n";
        let pod = json!({ "metadata": { "name": "h", "namespace": "ml", "uid": "u-h" },
            "spec": { "nodeName": "n1", "restartPolicy": "OnFailure", "containers": [{
                "name": "hydrate", "image": "python:3.11-slim",
                "command": ["/bin/sh", "-c", script],
                "env": [{ "name": "HF_TOKEN", "valueFrom": { "secretKeyRef": { "name": "auth", "key": "HF_TOKEN" } } }],
                "terminationMessagePolicy": "FallbackToLogsOnError" }] } });
        let secret = json!({ "metadata": { "name": "auth", "namespace": "ml" },
            "data": { "HF_TOKEN": "bm90LWEtdG9rZW4=" } });
        let mut snapshot = Snapshot::default();
        snapshot.change(Change::Apply(ClusterKind::Pod, pod));
        snapshot.change(Change::Apply(ClusterKind::Secret, secret));
        let world = World {
            snapshot: &snapshot,
            timestamp: "t",
        };
        let host = Host::new();
        let (_spare, port) = spare_port();
        let mut kubelets = Kubelets {
            held_port: port,
            ..Kubelets::default()
        };
        let mut status = Value::Null;
        for second in 0..30 {
            for write in kubelets
                .step(&world, &host.at(Duration::from_secs(second * 100)))
                .writes
            {
                if let Write::Status { status: s, .. } = write {
                    status = s;
                }
            }
        }
        let last = &status["containerStatuses"][0]["lastState"]["terminated"];
        assert_eq!(last["exitCode"], 1, "{status}");
        let message = last["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("401 Client Error: Unauthorized"),
            "{status}"
        );
        assert!(!message.contains("not-a-token"), "{message}");
    }

    #[test]
    fn parameters_are_read_from_a_models_name() {
        assert_eq!(parameters("Qwen/Qwen3-8B"), Some(8.0));
        assert_eq!(
            parameters("Qwen/Qwen3-Coder-480B-A35B-Instruct"),
            Some(480.0)
        );
        assert_eq!(parameters("meta-llama/Llama-3.1-70B-Instruct"), Some(70.0));
        assert_eq!(parameters("/mnt/models"), None);
    }

    #[test]
    fn the_back_off_doubles_from_ten_seconds_to_five_minutes() {
        let p = Profile::fast();
        assert_eq!(backoff(&p, 1), Duration::from_secs(10));
        assert_eq!(backoff(&p, 2), Duration::from_secs(20));
        assert_eq!(backoff(&p, 9), Duration::from_secs(300));
    }
}
