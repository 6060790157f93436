//! Watches feed the index: the one watch driver's changes
//! (`modelplane-watch`: kube-runtime watchers relisting with backoff on
//! their own) turned into the index's `apply`, `delete` and `reset`, and
//! the subjects those return queued.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube::runtime::watcher;
use modelplane_api::labels;
use modelplane_compose::Target;
use modelplane_watch::Change;
use serde_json::Value;

use crate::Shared;
use crate::index::{Kind, Observe};
use crate::target::{Connection, TargetError};

/// How often a target that stopped answering is asked again.
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// How often a kind that is not served is looked up again.
const NOT_SERVED_RETRY: Duration = Duration::from_secs(60);

/// What one watch stream is of.
#[derive(Clone, Debug)]
pub enum Watched {
    /// A control-plane kind the controller reads.
    Control(Kind),
    /// Objects of `(apiVersion, kind)` Modelplane applied on a target.
    Owned(Target, String, String),
    /// A cloud provider's configs on the control plane (a platform team's).
    Config(String, String),
    /// The Secrets of the system namespace, where clusters' kubeconfigs are:
    /// a changed one reconnects its cluster.
    Kubeconfigs,
    /// A target's CustomResourceDefinitions: one installed (a chart's, on a
    /// workload cluster) makes its kind served without waiting for a retry.
    Crds(Target),
    /// What a workload cluster runs for Modelplane without Modelplane
    /// owning it: serving pods, or GPU nodes (read for replicas' status).
    Workloads(Target, Observe),
}

impl Watched {
    fn type_meta(&self) -> (String, String) {
        match self {
            Watched::Control(kind) => {
                let (a, k) = kind.type_meta();
                (a.to_string(), k.to_string())
            }
            Watched::Owned(_, a, k) | Watched::Config(a, k) => (a.clone(), k.clone()),
            Watched::Kubeconfigs => ("v1".into(), "Secret".into()),
            Watched::Crds(_) => (
                "apiextensions.k8s.io/v1".into(),
                "CustomResourceDefinition".into(),
            ),
            Watched::Workloads(_, Observe::Pods | Observe::CachePods) => {
                ("v1".into(), "Pod".into())
            }
            Watched::Workloads(_, Observe::Nodes) => ("v1".into(), "Node".into()),
        }
    }
}

/// `object` as the index keeps it: without kubectl's last-applied copy
/// (the watch driver skips its managedFields), which nothing here reads
/// and which are most of a small object's size (a fleet's thousands of
/// workloads are the controller's memory).
fn shape(mut object: Value) -> Value {
    if let Some(annotations) = object["metadata"]["annotations"].as_object_mut() {
        annotations.remove(LAST_APPLIED);
    }
    modelplane_watch::compact(object)
}

fn name_of(object: &Value) -> Option<String> {
    object["metadata"]["name"].as_str().map(str::to_string)
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Whether `watched` is of a connection that was replaced (its kubeconfig
/// changed): such a watch ends, the new connection runs its own.
fn replaced(shared: &Shared, watched: &Watched, connection: &Arc<Connection>) -> bool {
    match watched {
        Watched::Owned(target, ..) | Watched::Crds(target) | Watched::Workloads(target, _) => {
            !shared
                .connection(target)
                .is_some_and(|current| Arc::ptr_eq(&current, connection))
        }
        _ => false,
    }
}

/// Why the API server could not be reached, when `error` says it could not
/// (an answer, even an error, means it is reachable).
fn transport_failure(error: &watcher::Error) -> Option<String> {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => {
            (!matches!(e, kube::Error::Api(_))).then(|| e.to_string())
        }
        _ => None,
    }
}

/// Asks `connection`'s API server every few seconds until it answers, then
/// marks it reachable and reconciles everything again.
async fn probe(shared: Arc<Shared>, watched: Watched, connection: Arc<Connection>) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        if replaced(&shared, &watched, &connection) || connection.unreachable().is_none() {
            return;
        }
        if connection.client().apiserver_version().await.is_ok() {
            if let (Watched::Control(k), Ok(mut errors)) = (&watched, shared.watch_errors.lock()) {
                errors.remove(k);
            }
            if connection.set_unreachable(None) {
                tracing::info!(target = %connection.name, "answers again");
                reachability_changed(&shared, &watched, None);
            }
            return;
        }
    }
}

/// Records whether the target `watched` is of answers (`why` not, if it
/// does not) where compositions read it, and composes what is on it again.
fn reachability_changed(shared: &Shared, watched: &Watched, why: Option<String>) {
    if let Target::Cluster(name) = target_of(watched)
        && let Ok(mut index) = shared.index.write()
    {
        let since = jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .map(|t| t.to_string())
            .unwrap_or_default();
        index.world.reachability.insert(
            name,
            why.map(|why| modelplane_compose::world::Unreachable { why, since }),
        );
    }
    requeue_on(shared, watched);
}

fn target_of(watched: &Watched) -> Target {
    match watched {
        Watched::Owned(target, ..) | Watched::Crds(target) | Watched::Workloads(target, _) => {
            target.clone()
        }
        _ => Target::ControlPlane,
    }
}

/// What composes onto the target `watched` is of, again: its reachability
/// or its served kinds changed.
fn requeue_on(shared: &Shared, watched: &Watched) {
    let target = target_of(watched);
    let subjects = shared
        .index
        .read()
        .map(|index| index.subjects_on(&target))
        .unwrap_or_default();
    for subject in subjects {
        shared.queue.add(crate::Work::Reconcile(subject));
    }
}

/// Runs one watch until the supervisor stops it.
pub async fn run(shared: Arc<Shared>, connection: Arc<Connection>, watched: Watched) {
    let (api_version, kind) = watched.type_meta();
    let resource = loop {
        if replaced(&shared, &watched, &connection) {
            return;
        }
        // Listening before asking: a CRD installed while discovery answers
        // still wakes this watch.
        let kinds_changed = connection.kinds_changed.notified();
        tokio::pin!(kinds_changed);
        kinds_changed.as_mut().enable();
        match connection.resolve(&api_version, &kind).await {
            Ok((resource, _)) => break resource,
            Err(TargetError::NotServed { .. }) => {
                // Normal until its CRD is installed (a cloud's managed
                // resources, until its provider runs); the lists that depend
                // on it stay unsynced, so nothing is pruned meanwhile. The
                // target's CRD watch says when to look again; the timer is
                // for a target whose CRDs cannot be watched.
                tokio::select! {
                    () = tokio::time::sleep(NOT_SERVED_RETRY) => {}
                    () = kinds_changed => {}
                }
            }
            Err(e) => {
                if connection.coming_up() {
                    tracing::debug!(error = %e, "discovery not answered yet; retrying");
                } else {
                    tracing::warn!(error = %e, "discovery failed; retrying");
                }
                tokio::time::sleep(NOT_SERVED_RETRY).await;
            }
        }
    };
    let namespace = matches!(watched, Watched::Kubeconfigs).then_some(labels::SYSTEM_NAMESPACE);
    let api = modelplane_watch::api(connection.client().clone(), &resource, namespace);
    let config = match &watched {
        Watched::Control(_) | Watched::Config(..) | Watched::Kubeconfigs | Watched::Crds(_) => {
            watcher::Config::default()
        }
        Watched::Owned(..) => watcher::Config::default().labels(labels::OWNER_UID),
        Watched::Workloads(_, Observe::Pods) => watcher::Config::default().labels(labels::SERVING),
        Watched::Workloads(_, Observe::Nodes) => watcher::Config::default().labels(labels::POOL),
        Watched::Workloads(_, Observe::CachePods) => {
            watcher::Config::default().labels(labels::MODEL_CACHE)
        }
    };
    let mut changes = modelplane_watch::changes(api, config, shape).boxed();
    while let Some(change) = changes.next().await {
        let change = match change {
            Ok(change) => change,
            Err(_) if replaced(&shared, &watched, &connection) => return,
            Err(e) => {
                failed(&shared, &watched, &connection, &kind, &e);
                continue;
            }
        };
        connection.answered();
        if connection.set_unreachable(None) {
            tracing::info!(target = %connection.name, "answers again");
            reachability_changed(&shared, &watched, None);
        }
        match &watched {
            Watched::Crds(_) => {
                if replaced(&shared, &watched, &connection) {
                    return;
                }
                crds_changed(&shared, &watched, &connection, &change);
            }
            Watched::Kubeconfigs => {
                let secrets: Vec<&Value> = match &change {
                    Change::Applied(o) => vec![o],
                    Change::Listed(objects) => objects.iter().collect(),
                    Change::Deleted(_) => Vec::new(),
                };
                let clusters = shared.index.read().map_or_else(
                    |_| Vec::new(),
                    |index| {
                        secrets
                            .into_iter()
                            .filter_map(name_of)
                            .flat_map(|secret| index.clusters_reached_by(&secret))
                            .collect()
                    },
                );
                for cluster in clusters {
                    shared.queue.add(crate::Work::Connect(cluster));
                }
            }
            _ => {
                if !indexed(&shared, &watched, &connection, change) {
                    return;
                }
            }
        }
    }
}

/// Says why a watch failed, and whether its target stopped answering.
fn failed(
    shared: &Arc<Shared>,
    watched: &Watched,
    connection: &Arc<Connection>,
    kind: &str,
    e: &watcher::Error,
) {
    if connection.coming_up() {
        tracing::debug!(target = %connection.name, kind = %kind, error = %e, "watch not started yet; retrying");
    } else {
        tracing::warn!(target = %connection.name, kind = %kind, error = %e, "watch failed; retrying");
    }
    if let (Watched::Control(k), Ok(mut errors)) = (watched, shared.watch_errors.lock()) {
        errors.insert(*k, e.to_string());
    }
    if let Some(why) = transport_failure(e)
        && !connection.coming_up()
        && connection.set_unreachable(Some(why.clone()))
    {
        tracing::warn!(target = %connection.name, "does not answer; holding everything on it");
        reachability_changed(shared, watched, Some(why));
        // A watch that resumes yields nothing until something changes:
        // whether it answers again is asked directly.
        shared.supervisor.spawn(
            "reachability probe",
            probe(shared.clone(), watched.clone(), connection.clone()),
        );
    }
}

/// A target's CRDs changed. A CRD's change concerns its group's kinds
/// only; the subjects on the target are looked at again when one of them
/// had been found missing (or one is removed). A relist may carry CRDs
/// installed while the watch was down.
fn crds_changed(shared: &Shared, watched: &Watched, connection: &Connection, change: &Change) {
    fn group(crd: &Value) -> &str {
        crd["spec"]["group"].as_str().unwrap_or_default()
    }
    let requeue = match change {
        Change::Applied(crd) => connection.forget_group(group(crd)),
        Change::Deleted(crd) => {
            connection.forget_group(group(crd));
            true
        }
        Change::Listed(_) => {
            connection.forget_kinds();
            true
        }
    };
    // Woken whatever the group: a watch whose discovery was in flight has
    // recorded nothing yet.
    connection.kinds_changed.notify_waiters();
    if requeue {
        requeue_on(shared, watched);
    }
}

/// Takes `change` into the index and queues what it concerns; `false`
/// when the watch is of a replaced connection and must end.
fn indexed(
    shared: &Shared,
    watched: &Watched,
    connection: &Arc<Connection>,
    change: Change,
) -> bool {
    let clusters: Vec<String> = match (&change, watched) {
        (Change::Applied(o) | Change::Deleted(o), Watched::Control(Kind::Cluster)) => {
            name_of(o).into_iter().collect()
        }
        (Change::Listed(objects), Watched::Control(Kind::Cluster)) => {
            objects.iter().filter_map(name_of).collect()
        }
        _ => Vec::new(),
    };
    // An owner deleted (a ModelReplica; a ServingStack, itself owned)
    // leaves its objects on every target to collect; so may one the index
    // had not seen yet when its objects were listed.
    let collect_everywhere = match (&change, watched) {
        (_, Watched::Workloads(..)) => false,
        (Change::Deleted(_), _) | (Change::Listed(_), Watched::Control(_)) => true,
        _ => false,
    };
    let subjects = {
        let Ok(mut index) = shared.index.write() else {
            return false;
        };
        // Checked under the index's lock, which a reconnect holds while it
        // swaps connections: a replaced connection's watch (its kubeconfig
        // changed) writes nothing more; the new one runs its own watches.
        if let Watched::Owned(target, ..) | Watched::Workloads(target, _) = watched
            && !shared
                .connection(target)
                .is_some_and(|current| Arc::ptr_eq(&current, connection))
        {
            return false;
        }
        if collect_everywhere {
            for target in index.world.applied.keys() {
                shared.queue.add(crate::Work::Orphans(target.clone()));
            }
        }
        // A target's objects are looked over when they were listed and
        // when one arrives whose owner is not known; not on every change
        // (each look goes over all the target's objects).
        if let Watched::Owned(target, ..) = watched {
            let orphan = match &change {
                Change::Listed(_) => true,
                Change::Applied(o) => o["metadata"]["labels"][labels::OWNER_UID]
                    .as_str()
                    .is_none_or(|owner| !index.knows_owner(owner)),
                Change::Deleted(_) => false,
            };
            if orphan {
                shared.queue.add(crate::Work::Orphans(target.clone()));
            }
        }
        match (change, watched) {
            (Change::Listed(objects), Watched::Control(k)) => index.reset(*k, &objects),
            (Change::Listed(objects), Watched::Owned(t, a, k)) => {
                index.reset_owned(t, (a, k), objects)
            }
            (Change::Listed(objects), Watched::Config(a, k)) => {
                index.reset_configs((a, k), objects)
            }
            (Change::Listed(objects), Watched::Workloads(t, what)) => {
                index.reset_workloads(t, *what, &objects)
            }
            (Change::Applied(o), Watched::Control(k)) => index.apply(*k, &o),
            (Change::Applied(o), Watched::Owned(t, ..)) => index.apply_owned(t, o),
            (Change::Applied(o), Watched::Config(..)) => index.apply_config(o),
            (Change::Applied(o), Watched::Workloads(t, what)) => index.apply_workload(t, *what, &o),
            (Change::Deleted(o), Watched::Control(k)) => index.delete(*k, &o),
            (Change::Deleted(o), Watched::Owned(t, ..)) => index.delete_owned(t, &o),
            (Change::Deleted(o), Watched::Config(..)) => index.delete_config(&o),
            (Change::Deleted(o), Watched::Workloads(t, what)) => {
                index.delete_workload(t, *what, &o)
            }
            // Not indexed: handled by the caller.
            (_, Watched::Kubeconfigs | Watched::Crds(_)) => Vec::new(),
        }
    };
    for cluster in clusters {
        shared.queue.add(crate::Work::Connect(cluster));
    }
    for subject in subjects {
        shared.queue.add(crate::Work::Reconcile(subject));
    }
    true
}
