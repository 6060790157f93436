//! Modelplane's controllers, on any Kubernetes API server.
//!
//! Data flow (STYLE.md 1–3): watches on the control plane and on every
//! workload cluster update one [`index::Index`] synchronously and queue the
//! subjects a change concerns; workers take a subject from the [`queue`],
//! take a snapshot of the index, ask the pure world for its composition,
//! and hand the effects to the [`target`] connections — server-side apply
//! as `modelplane` (forced), pruning of owned objects no longer desired
//! (never while the composition holds, never before the lists are read),
//! and a status patch only when the status changed. Every write Modelplane
//! makes is labelled `modelplane.ai/owner-uid` with the uid of the object
//! it was composed for (owner references cannot cross clusters). Every task
//! belongs to the [`Supervisor`].

pub mod clusters;
pub mod drain;
pub mod events;
pub mod index;
pub mod lease;
pub mod metrics;
pub mod placing;
pub mod queue;
pub mod rbac;
pub mod reconcile;
pub mod status;
pub mod target;
pub mod watch;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modelplane_compose::Target;
use modelplane_compose::world::{ObjectRef, Subject};

use crate::index::Kind;
use crate::queue::Queue;
use crate::target::Connection;
use crate::watch::Watched;
use modelplane_supervisor::Supervisor;

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Reconcilers running at once.
    pub workers: usize,
    /// How often everything is reconciled again even without a change.
    pub resync: Duration,
    /// Where clients reach the built-in fleet gateway (the InferenceGateway's
    /// address when its backend is Modelplane), if it runs.
    pub gateway_address: Option<String>,
    /// Leader election; without it this process always leads.
    pub election: Option<lease::Election>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served, if anywhere.
    pub probes: Option<std::net::SocketAddr>,
    /// How long a ModelReplica no longer wanted keeps serving what it was
    /// sent, out of the routing, before it is deleted (`drain`).
    pub drain: Duration,
    /// How workload clusters' clients are made from their kubeconfigs.
    pub connector: clusters::Connector,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            workers: 4,
            resync: Duration::from_secs(300),
            gateway_address: None,
            election: None,
            probes: None,
            drain: Duration::from_secs(30),
            connector: clusters::Connector::default(),
        }
    }
}

/// One unit of work.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Work {
    /// Compose and apply a subject.
    Reconcile(Subject),
    /// Delete what Modelplane applied on a target for owners that are gone.
    Orphans(Target),
    /// (Re)connect to a workload cluster from its kubeconfig Secret.
    Connect(String),
}

impl Work {
    /// The fleet's own work: connecting clusters and composing what they
    /// run on (their cloud resources, stacks, providers, gateways). Models
    /// are placed only on Ready clusters, so this goes first (see
    /// [`queue`]).
    pub fn is_fleet(&self) -> bool {
        match self {
            Work::Connect(_) => true,
            Work::Orphans(_) => false,
            Work::Reconcile(subject) => matches!(
                subject,
                Subject::Cluster(_)
                    | Subject::Cloud(..)
                    | Subject::Stack(_)
                    | Subject::Providers
                    | Subject::Gateway(_)
                    | Subject::Class(_)
            ),
        }
    }
}

/// What every task shares.
pub struct Shared {
    /// What the watches observed.
    pub index: index::Locked,
    /// What to do next.
    pub queue: Queue<Work>,
    /// The control plane.
    pub control: Arc<Connection>,
    /// Workload clusters by InferenceCluster name.
    pub clusters: clusters::Clusters,
    /// The kinds watched on each target.
    watched: Mutex<HashSet<(Target, String, String)>>,
    /// Shared objects (created, never pruned) applied by this process.
    pub shared_applied: Mutex<HashSet<(Target, ObjectRef)>>,
    /// Owns every task.
    pub supervisor: Supervisor,
    /// Records Events on the control plane.
    pub events: events::Recorder,
    /// Whether this process leads (always, without leader election).
    pub leading: tokio::sync::watch::Receiver<bool>,
    /// What it counts.
    pub metrics: metrics::Metrics,
    /// Why each control-plane kind's watch last failed, until it works
    /// again (`/readyz` says it while the kind is not listed).
    pub watch_errors: Mutex<std::collections::BTreeMap<Kind, String>>,
    /// How long a ModelReplica drains before it is deleted.
    pub drain: Duration,
    /// The pools a deployment's reconcile holds from its plan until its
    /// replicas are in the index: deployments placed side by side on a
    /// pool would each see the same free GPUs and book them twice.
    pub placing: placing::Turns,
    /// Since when subjects have been failing.
    pub failing: reconcile::Failing,
    /// How workload clusters' clients are made.
    pub connector: clusters::Connector,
}

/// Cloud provider configs a cloud cluster's composition reads: the GCP
/// project, the Nebius project and credentials.
pub const PROVIDER_CONFIGS: &[(&str, &str)] = &[
    ("gcp.m.upbound.io/v1beta1", "ClusterProviderConfig"),
    ("gcp.m.upbound.io/v1beta1", "ProviderConfig"),
    ("nebius.m.upbound.io/v1beta1", "ClusterProviderConfig"),
    ("nebius.m.upbound.io/v1beta1", "ProviderConfig"),
];

impl Shared {
    /// A controller's shared state over the control plane `control`.
    pub fn new(
        control: Connection,
        leading: tokio::sync::watch::Receiver<bool>,
        drain: Duration,
        connector: clusters::Connector,
    ) -> Arc<Shared> {
        let events = events::Recorder::new(control.client().clone(), control.gate().clone());
        Arc::new(Shared {
            events,
            leading,
            metrics: metrics::Metrics::default(),
            index: index::Locked::default(),
            queue: Queue::prioritizing(Work::is_fleet),
            control: Arc::new(control),
            clusters: clusters::Clusters::default(),
            watched: Mutex::default(),
            shared_applied: Mutex::default(),
            supervisor: Supervisor::default(),
            watch_errors: Mutex::default(),
            drain,
            placing: placing::Turns::default(),
            failing: reconcile::Failing::default(),
            connector,
        })
    }

    /// The connection to `target`, if there is one.
    pub fn connection(&self, target: &Target) -> Option<Arc<Connection>> {
        match target {
            Target::ControlPlane => Some(self.control.clone()),
            Target::Cluster(name) => self.clusters.get(name),
        }
    }

    /// Starts watching Modelplane's objects of `(api_version, kind)` on
    /// `target`, unless that watch runs already.
    pub fn ensure_watch(self: &Arc<Self>, target: &Target, api_version: &str, kind: &str) {
        let key = (target.clone(), api_version.to_string(), kind.to_string());
        let Ok(mut watched) = self.watched.lock() else {
            return;
        };
        if !watched.insert(key) {
            return;
        }
        let Some(connection) = self.connection(target) else {
            return;
        };
        let what = Watched::Owned(target.clone(), api_version.into(), kind.into());
        self.supervisor
            .spawn("owned watch", watch::run(self.clone(), connection, what));
    }

    /// Stops tracking the watches of `target` (its connection is replaced:
    /// the new one starts its own).
    pub fn forget_watches(&self, target: &Target) {
        if let Ok(mut watched) = self.watched.lock() {
            watched.retain(|(t, ..)| t != target);
        }
    }

    /// Starts the default owned watches on `target`.
    pub fn watch_target(self: &Arc<Self>, target: &Target) {
        // Every kind compositions apply there, so what an earlier run
        // applied is known (and pruned once no longer desired) before this
        // run applies anything of that kind.
        for (api_version, kind) in modelplane_compose::kinds::on(target) {
            self.ensure_watch(target, api_version, kind);
        }
        if let Some(connection) = self.connection(target) {
            self.supervisor.spawn(
                "crd watch",
                watch::run(
                    self.clone(),
                    connection.clone(),
                    Watched::Crds(target.clone()),
                ),
            );
            if let Target::Cluster(_) = target {
                // What replicas' status tells of their pods and nodes, and
                // caches' of their downloads.
                for what in [
                    index::Observe::Pods,
                    index::Observe::Nodes,
                    index::Observe::CachePods,
                ] {
                    self.supervisor.spawn(
                        "workload watch",
                        watch::run(
                            self.clone(),
                            connection.clone(),
                            Watched::Workloads(target.clone(), what),
                        ),
                    );
                }
            }
        }
    }
}

/// Creates `modelplane-system` (the Lease, cloud clusters and stacks live
/// there) unless it exists, retrying until the control plane answers.
async fn ensure_system_namespace(client: kube::Client) {
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    let namespace = k8s_openapi::api::core::v1::Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(modelplane_api::labels::SYSTEM_NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    loop {
        match namespaces
            .get_opt(modelplane_api::labels::SYSTEM_NAMESPACE)
            .await
        {
            Ok(Some(_)) => return,
            Ok(None) => match namespaces.create(&Default::default(), &namespace).await {
                Ok(_) => {
                    tracing::info!(
                        namespace = modelplane_api::labels::SYSTEM_NAMESPACE,
                        "created"
                    );
                    return;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => return,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot create the system namespace; retrying")
                }
            },
            Err(e) => tracing::debug!(error = %e, "cannot read the system namespace; retrying"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A task meant to run until stopped, as a critical one: its end is the
/// error `"<what> stopped"`.
async fn ended(task: impl std::future::Future<Output = ()>, what: &str) -> Result<(), String> {
    task.await;
    Err(format!("{what} stopped"))
}

/// Runs the controllers against `control` until `shutdown` resolves. With
/// leader election, watches run from the start (a warm index for a fast
/// takeover) and work only while leading. Fails when the probes' address
/// cannot be bound, or when a task it cannot run without (a control-plane
/// watch, a worker) ends or panics.
pub async fn run(
    config: Config,
    control: Connection,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let probes = match config.probes {
        Some(address) => Some(tokio::net::TcpListener::bind(address).await?),
        None => None,
    };
    let (leading, _) = tokio::sync::watch::channel(config.election.is_none());
    let control = match &config.election {
        Some(_) => control.gated(Arc::new(lease::WriteGate::default())),
        None => control,
    };
    let shared = Shared::new(
        control,
        leading.subscribe(),
        config.drain,
        config.connector.clone(),
    );
    shared.supervisor.spawn(
        "system namespace",
        ensure_system_namespace(shared.control.client().clone()),
    );
    if let Some(election) = config.election.clone() {
        let campaigning = lease::campaign(
            shared.control.client().clone(),
            election,
            shared.control.gate().clone(),
            leading,
        );
        // Its end would leave every worker waiting to lead for ever.
        shared
            .supervisor
            .spawn_critical("leader election", ended(campaigning, "leader election"));
    }
    if let Ok(mut index) = shared.index.write() {
        index.world.builtin_gateway = config.gateway_address.clone();
    }
    // What the controller cannot run without: a control-plane watch or a
    // worker (or the campaign above) that ends or panics stops it with
    // that error.
    for kind in Kind::ALL {
        let watching = watch::run(
            shared.clone(),
            shared.control.clone(),
            Watched::Control(kind),
        );
        shared
            .supervisor
            .spawn_critical("control watch", ended(watching, "a control-plane watch"));
    }
    shared.watch_target(&Target::ControlPlane);
    shared.supervisor.spawn(
        "kubeconfig watch",
        watch::run(shared.clone(), shared.control.clone(), Watched::Kubeconfigs),
    );
    for (api_version, kind) in PROVIDER_CONFIGS {
        shared.supervisor.spawn(
            "provider config watch",
            watch::run(
                shared.clone(),
                shared.control.clone(),
                Watched::Config((*api_version).into(), (*kind).into()),
            ),
        );
    }
    for _ in 0..config.workers.max(1) {
        let working = reconcile::work(shared.clone());
        shared
            .supervisor
            .spawn_critical("worker", ended(working, "a worker"));
    }
    shared
        .supervisor
        .spawn("resync", reconcile::resync(shared.clone(), config.resync));
    if let Some(listener) = probes {
        shared
            .supervisor
            .spawn("probes", metrics::serve(listener, shared.clone()));
    }
    let mut leading = shared.leading.clone();
    let gauge = shared.clone();
    shared.supervisor.spawn("leader gauge", async move {
        loop {
            gauge
                .metrics
                .leader
                .set(i64::from(*leading.borrow_and_update()));
            if leading.changed().await.is_err() {
                return;
            }
        }
    });
    let failed = tokio::select! {
        () = shutdown => None,
        why = shared.supervisor.failure() => Some(why),
    };
    shared.supervisor.shutdown().await;
    match failed {
        None => Ok(()),
        Some(why) => Err(std::io::Error::other(why)),
    }
}
