//! Carrying out what the fleet planned: an object's effect on the simulated
//! world (a workload cluster, a pool's nodes, a connection Secret, a Helm
//! release), then its status. Each piece of work owns what it needs, so it
//! runs while the fleet goes on watching and planning.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Config, FleetKind, Key, MANAGER, secret_field};
use crate::client::{self, builtin};
use crate::cloud;
use crate::cluster::Workloads;
use crate::cluster::dra::Hardware;
use crate::error::Error;
use crate::helm;
use crate::informer::key_of;

/// What an object's step does besides its status.
#[derive(Debug)]
pub(super) enum Effect {
    /// The workload cluster `name` exists (and, when its resource writes
    /// one, its connection Secret with its kubeconfig).
    Cluster {
        name: String,
        connection: Option<Connection>,
    },
    /// The workload cluster `name` is deleted.
    ClusterGone { name: String },
    /// The nodes of a pool exist in cluster `cluster`.
    Pool {
        cluster: String,
        id: String,
        pool: cloud::Pool,
        provider: &'static str,
        hardware: Hardware,
    },
    /// A pool's nodes are gone.
    PoolGone { cluster: String, id: String },
    /// The connection Secret of a resource is written.
    Connection(Connection),
    /// A chart is installed into the cluster a kubeconfig reaches.
    Release {
        kubeconfig: String,
        chart: &'static helm::Chart,
        namespace: String,
    },
}

/// A resource's connection Secret `namespace/name`: a cluster's kubeconfig
/// (`cluster`), or a key of a `kind` that brings no cluster.
#[derive(Debug)]
pub(super) struct Connection {
    pub namespace: String,
    pub name: String,
    pub cluster: Option<String>,
    pub kind: String,
}

/// One step to carry out.
pub(super) struct Work {
    pub kind: FleetKind,
    pub object: Arc<Value>,
    pub effect: Option<Effect>,
    pub status: Option<Value>,
}

impl Work {
    /// The object the work is for.
    pub fn key(&self) -> Key {
        key_of(self.kind, &self.object)
    }
}

/// What a connection Secret holds: the cluster as reached through its
/// network path (its kubeconfig and endpoint), or a key. None while the
/// cluster does not exist yet.
pub(super) fn connection_data(workloads: &Workloads, connection: &Connection) -> Option<Value> {
    match &connection.cluster {
        Some(cluster) => {
            let workload = workloads.by_name(cluster)?;
            Some(json!({ "kubeconfig": workload.kubeconfig, "endpoint": workload.server }))
        }
        None => Some(json!({ "private_key": format!("simulated {} key", connection.kind) })),
    }
}

/// Whether `secret` already holds `data`.
pub(super) fn holds(secret: &Value, data: &Value) -> bool {
    data.as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| value.as_str() == secret_field(secret, key).as_deref())
}

/// What carries work out: cheap to share, so each piece of work holds it.
pub(super) struct Hands {
    pub config: Config,
    pub workloads: Arc<Workloads>,
    /// Since when each object's step has failed: a cluster coming up (or
    /// reached again after a restart) fails steps for a while, which is
    /// logged at debug; a step failing longer warns.
    pub failing: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

/// How long a step may fail before it warns.
const QUIET_FOR: std::time::Duration = std::time::Duration::from_secs(120);

impl Hands {
    /// Carries out one step: the effect first (a cluster must exist before
    /// it is reported Ready), then the status. False if it must be retried.
    pub async fn execute(&self, work: Work) -> bool {
        let name = work.object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(effect) = work.effect
            && let Err(e) = self.apply_effect(effect).await
        {
            let lasting = self.failing.lock().is_ok_and(|mut failing| {
                failing
                    .entry(name.clone())
                    .or_insert_with(std::time::Instant::now)
                    .elapsed()
                    >= QUIET_FOR
            });
            if lasting {
                tracing::warn!(object = %name, error = %e, "simulated cloud step failed; retrying");
            } else {
                tracing::debug!(object = %name, error = %e, "simulated cloud step not done yet; retrying");
            }
            return false;
        }
        if let Ok(mut failing) = self.failing.lock() {
            failing.remove(&name);
        }
        if let Some(status) = work.status {
            let kind = work.kind.api();
            let manager = work
                .kind
                .crossplane()
                .and_then(|k| k.provider)
                .unwrap_or(MANAGER);
            if let Err(e) =
                client::apply_status(&self.config.control, &kind, &work.object, &status, manager)
                    .await
            {
                tracing::debug!(object = %work.object["metadata"]["name"], error = %e, "status write failed; retrying");
                return false;
            }
        }
        true
    }

    async fn apply_effect(&self, effect: Effect) -> Result<(), Error> {
        let control = &self.config.control;
        match effect {
            Effect::Cluster { name, connection } => {
                self.workloads
                    .create(control, &self.config.kubeconfig, &name)
                    .await?;
                match connection {
                    Some(connection) => self.write_connection(&connection).await,
                    None => Ok(()),
                }
            }
            Effect::ClusterGone { name } => self.workloads.delete(control, &name).await,
            Effect::Pool {
                cluster,
                id,
                pool,
                provider,
                hardware,
            } => {
                let workload = self
                    .workloads
                    .by_name(&cluster)
                    .ok_or_else(|| Error::NoCluster(cluster.clone()))?;
                workload.set_hardware(&pool.name, hardware);
                workload.set_pool(&id, pool, provider).await
            }
            Effect::PoolGone { cluster, id } => match self.workloads.by_name(&cluster) {
                Some(workload) => workload.remove_pool(&id).await,
                None => Ok(()),
            },
            Effect::Connection(connection) => self.write_connection(&connection).await,
            Effect::Release {
                kubeconfig,
                chart,
                namespace,
            } => {
                let workload = self.workloads.connect(&kubeconfig).await?;
                workload.install(chart, &namespace).await
            }
        }
    }

    /// Writes a resource's connection Secret.
    async fn write_connection(&self, connection: &Connection) -> Result<(), Error> {
        let data = connection_data(&self.workloads, connection)
            .ok_or_else(|| Error::NoCluster(connection.cluster.clone().unwrap_or_default()))?;
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "connection.crossplane.io/v1alpha1",
            "metadata": { "name": connection.name, "namespace": connection.namespace },
            "stringData": data,
        });
        Ok(client::apply(&self.config.control, &builtin::secret(), &secret, MANAGER).await?)
    }
}
