//! One workload cluster's control loop: its watches fill a snapshot; each
//! change (or a due time) runs every simulated controller over it — the
//! controller manager, the DRA driver, LWS, Grove, the schedulers, the
//! kubelets — and their writes go to the cluster's API server. The edge
//! data plane's table follows the routes and ready pods.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Workload;
use super::kubelet::{self, Kubelets};
use super::scheduler::{self, Assumed};
use super::world::{self, ClusterKind, World, Write};
use super::{dra, edge, grove, kcm, lws};
use crate::client;
use crate::cluster::world::Snapshot;
use crate::helm::Controller;

/// Runs until the cluster's scope stops.
pub async fn run(workload: Arc<Workload>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    workload.start_watches(tx);
    let mut state = State {
        snapshot: Snapshot::default(),
        kubelets: Kubelets::new(workload.addresses.clone()),
        assumed: Assumed::default(),
        events: HashSet::new(),
        edge: String::new(),
        epoch: Instant::now(),
    };
    let mut wake: Option<Instant> = None;
    loop {
        tokio::select! {
            change = rx.recv() => {
                let Some(change) = change else { return };
                state.snapshot.change(change);
                // Take the burst in one pass.
                while let Ok(more) = rx.try_recv() {
                    state.snapshot.change(more);
                }
            }
            () = sleep_until(wake) => {}
            () = workload.faults.changed.notified() => {}
            () = workload.nudge.notified() => {}
        }
        wake = state.step(&workload).await;
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

struct State {
    snapshot: Snapshot,
    kubelets: Kubelets,
    assumed: Assumed,
    /// Events recorded, once each.
    events: HashSet<(String, String, String)>,
    /// What the edge table was compiled from.
    edge: String,
    epoch: Instant,
}

impl State {
    async fn step(&mut self, workload: &Arc<Workload>) -> Option<Instant> {
        let now = self.epoch.elapsed();
        let stamp = crate::clock::timestamp();
        let controllers = workload.controllers();
        let hardware = workload.hardware();
        let fabrics = hardware
            .iter()
            .filter_map(|(pool, hw)| Some((pool.clone(), hw.fabric.clone()?)))
            .collect();
        let faults = workload.faults.node_faults(&workload.name);
        let silent_nodes: HashSet<String> = faults
            .iter()
            .filter_map(|f| match f {
                crate::faults::Fault::NodeNotReady { node } => Some(node.clone()),
                _ => None,
            })
            .collect();
        let kills = workload.faults.take_kills(&workload.name);
        let pool_taints = workload.pool_taints();
        let spawn_scope = workload.scope.clone();
        let spawn = move |task: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
            spawn_scope.spawn("sim-engine", task);
        };
        let (writes, wake) = {
            let world = World {
                snapshot: &self.snapshot,
                timestamp: &stamp,
            };
            self.assumed.settle(&world);
            let mut writes = super::nodes::fault_writes(&world, &pool_taints, &faults);
            writes.extend(kcm::step(&world));
            if controllers.contains(&Controller::DraDriver) {
                writes.extend(dra::driver_step(&world, dra::NVIDIA, &hardware));
            }
            if controllers.contains(&Controller::Dranet) {
                writes.extend(dra::driver_step(&world, dra::DRANET, &hardware));
            }
            if controllers.contains(&Controller::LeaderWorkerSet) {
                writes.extend(lws::step(&world));
            }
            if controllers.contains(&Controller::Grove) {
                writes.extend(grove::step(&world));
            }
            let pass = scheduler::default_scheduler(&world, &self.assumed);
            self.assumed.pods.extend(pass.assumed.pods);
            self.assumed.claims.extend(pass.assumed.claims);
            writes.extend(pass.writes);
            if controllers.contains(&Controller::Kai) {
                let pass = scheduler::kai_scheduler(&world, &self.assumed);
                self.assumed.pods.extend(pass.assumed.pods);
                self.assumed.claims.extend(pass.assumed.claims);
                writes.extend(pass.writes);
            }
            let cx = kubelet::Context {
                now,
                profile: &workload.profile,
                model_express: controllers.contains(&Controller::ModelExpress),
                fabrics: &fabrics,
                spawn: &spawn,
                silent_nodes: &silent_nodes,
                storage_factor: workload.faults.storage_factor(&workload.name),
                kills: &kills,
            };
            let pass = self.kubelets.step(&world, &cx);
            writes.extend(pass.writes);
            if let Ok(mut logs) = workload.logs.lock() {
                *logs = self.kubelets.logs();
            }
            publish_edge(&mut self.edge, workload, &world);
            (writes, pass.wake)
        };
        let writes: Vec<Write> = writes.into_iter().filter(|w| self.first_time(w)).collect();
        let client = workload.client();
        let failed = futures_util::stream::iter(writes)
            .map(|w| execute(client, w))
            .buffer_unordered(16)
            .filter(|ok| std::future::ready(!ok))
            .count()
            .await;
        let retry = (failed > 0).then(|| now + Duration::from_millis(500));
        [wake, retry]
            .into_iter()
            .flatten()
            .min()
            .map(|at| self.epoch + at)
    }

    /// Events are recorded once per object, reason and message.
    fn first_time(&mut self, write: &Write) -> bool {
        match write {
            Write::Event {
                object,
                reason,
                message,
                ..
            } => self.events.insert((
                world::uid(object).to_string(),
                reason.clone(),
                message.clone(),
            )),
            _ => true,
        }
    }
}

/// Compiles the edge table when the routes or ready pods changed.
fn publish_edge(published: &mut String, workload: &Workload, world: &World<'_>) {
    let Some(gateway) = workload.edge() else {
        return;
    };
    let objects = edge::objects(world);
    let fingerprint = edge::fingerprint(&objects);
    if fingerprint == *published {
        return;
    }
    let started = Instant::now();
    let table = objects.compile(Some(&gateway.table()));
    gateway.publish(table, started.elapsed());
    *published = fingerprint;
}

/// Carries out one write; false if it failed (it is retried on the next pass).
async fn execute(client: &kube::Client, write: Write) -> bool {
    let result = match &write {
        Write::Apply {
            kind,
            object,
            manager,
        } => client::apply(client, &kind.api(), object, manager).await,
        Write::Status {
            kind,
            object,
            status,
            manager,
        } => client::apply_status(client, &kind.api(), object, status, manager).await,
        Write::StatusPatch {
            kind,
            object,
            status,
            manager,
        } => client::merge_status(client, &kind.api(), object, status, manager).await,
        Write::Patch {
            kind,
            namespace,
            name,
            patch,
        } => {
            let ns = (!namespace.is_empty()).then_some(namespace.as_str());
            client::merge(client, &kind.api(), ns, name, patch).await
        }
        Write::Delete {
            kind,
            namespace,
            name,
        } => {
            let ns = (!namespace.is_empty()).then_some(namespace.as_str());
            client::delete(client, &kind.api(), ns, name).await
        }
        Write::Event {
            object,
            type_,
            reason,
            message,
            source,
        } => {
            client::create(
                client,
                &ClusterKind::Event.api(),
                &event(object, type_, reason, message, source),
            )
            .await
        }
    };
    match result {
        Ok(()) => true,
        // Gone, or replaced by another object of the same name, meanwhile:
        // the next pass works from what is there now.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => true,
        Err(e) => {
            tracing::debug!(error = %e, "simulated cluster write failed; retrying");
            false
        }
    }
}

fn event(object: &Value, type_: &str, reason: &str, message: &str, source: &str) -> Value {
    let ns = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let stamp = crate::clock::timestamp();
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {
            "name": format!("{}.{}", world::name(object), world::short_hash(&format!("{}{reason}{message}", world::uid(object)), 10)),
            "namespace": ns,
        },
        "involvedObject": {
            "apiVersion": object["apiVersion"], "kind": object["kind"], "name": object["metadata"]["name"],
            "namespace": ns, "uid": object["metadata"]["uid"],
        },
        "type": type_, "reason": reason, "message": message,
        "source": { "component": source },
        "reportingComponent": source,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    })
}
