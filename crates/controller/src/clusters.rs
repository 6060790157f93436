//! Connections to workload clusters, one per InferenceCluster, built from
//! the kubeconfig in its Secret and rebuilt when that Secret changes. A
//! cluster that cannot be reached keeps its connection: the watches retry
//! with backoff, and nothing is decided from what cannot be seen.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use modelplane_compose::Target;
use modelplane_compose::world::Subject;

use crate::Shared;
use crate::target::Connection;

/// Why a workload cluster has no connection.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The cluster publishes no kubeconfig yet.
    #[error("cluster {cluster} has no kubeconfig yet: {why}")]
    NoKubeconfig {
        /// The InferenceCluster.
        cluster: String,
        /// What is missing.
        why: String,
    },
    /// The kubeconfig does not work.
    #[error("cluster {cluster}: the kubeconfig in Secret {secret} is not usable: {message}")]
    BadKubeconfig {
        /// The InferenceCluster.
        cluster: String,
        /// `namespace/name` of the Secret.
        secret: String,
        /// What is wrong.
        message: String,
    },
    /// The control plane could not be read.
    #[error("reading Secret {secret} for cluster {cluster}: {source}")]
    Read {
        /// The InferenceCluster.
        cluster: String,
        /// `namespace/name` of the Secret.
        secret: String,
        /// The client's error.
        #[source]
        source: Box<kube::Error>,
    },
}

/// How a workload cluster's client is made from its kubeconfig: over
/// HTTP/2 where the server speaks it (`modelplane-kubeclient`) by default;
/// in process for tests of the controller against the embedded API server.
#[derive(Clone)]
pub struct Connector(Arc<ConnectFn>);

type ConnectFn = dyn Fn(kube::Config) -> Result<kube::Client, String> + Send + Sync;

impl Connector {
    /// A connector making clients with `connect`.
    pub fn new(
        connect: impl Fn(kube::Config) -> Result<kube::Client, String> + Send + Sync + 'static,
    ) -> Connector {
        Connector(Arc::new(connect))
    }

    fn connect(&self, config: kube::Config) -> Result<kube::Client, String> {
        (self.0)(config)
    }
}

impl Default for Connector {
    fn default() -> Self {
        Connector::new(|config| modelplane_kubeclient::client(config).map_err(|e| e.to_string()))
    }
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Connector")
    }
}

struct Connected {
    connection: Arc<Connection>,
    /// The Secret's resourceVersion the connection was built from.
    version: String,
}

/// Every workload cluster connected.
#[derive(Default)]
pub struct Clusters {
    connected: RwLock<HashMap<String, Connected>>,
}

impl Clusters {
    /// The connection to cluster `name`, if any.
    pub fn get(&self, name: &str) -> Option<Arc<Connection>> {
        self.connected
            .read()
            .ok()?
            .get(name)
            .map(|c| c.connection.clone())
    }

    fn version(&self, name: &str) -> Option<String> {
        self.connected
            .read()
            .ok()?
            .get(name)
            .map(|c| c.version.clone())
    }

    /// How many clusters are connected.
    pub fn count(&self) -> usize {
        self.connected.read().map(|c| c.len()).unwrap_or(0)
    }

    /// Drops the connection to `name` (its InferenceCluster is gone).
    pub fn remove(&self, name: &str) -> bool {
        self.connected
            .write()
            .map(|mut c| c.remove(name).is_some())
            .unwrap_or(false)
    }
}

/// Connects to cluster `name` (or reconnects, when its Secret changed).
pub async fn connect(shared: &Arc<Shared>, name: &str) -> Result<(), ConnectError> {
    let cluster = shared
        .index
        .read()
        .ok()
        .and_then(|i| i.world.clusters.get(name).cloned());
    let Some(cluster) = cluster else {
        if let Ok(mut index) = shared.index.write() {
            index.world.reachability.remove(name);
        }
        if shared.clusters.remove(name) {
            shared.forget_watches(&Target::Cluster(name.to_string()));
            tracing::info!(cluster = name, "disconnected: the InferenceCluster is gone");
        }
        return Ok(());
    };
    let located = shared
        .index
        .read()
        .map_err(|_| ConnectError::NoKubeconfig {
            cluster: name.to_string(),
            why: "the index is poisoned".into(),
        })?
        .world
        .kubeconfig_secret(name);
    let (namespace, secret_name, key) = located.map_err(|why| ConnectError::NoKubeconfig {
        cluster: name.to_string(),
        why,
    })?;
    drop(cluster);
    let secret_path = format!("{namespace}/{secret_name}");
    let secrets: Api<Secret> = Api::namespaced(shared.control.client().clone(), &namespace);
    let secret = secrets
        .get_opt(&secret_name)
        .await
        .map_err(|e| ConnectError::Read {
            cluster: name.to_string(),
            secret: secret_path.clone(),
            source: Box::new(e),
        })?
        .ok_or_else(|| ConnectError::NoKubeconfig {
            cluster: name.to_string(),
            why: format!("Secret {secret_path} does not exist"),
        })?;
    let version = secret.metadata.resource_version.clone().unwrap_or_default();
    if shared.clusters.version(name).as_deref() == Some(version.as_str()) {
        return Ok(());
    }
    let bad = |message: String| ConnectError::BadKubeconfig {
        cluster: name.to_string(),
        secret: secret_path.clone(),
        message,
    };
    let text = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&key))
        .map(|b| String::from_utf8_lossy(&b.0).to_string())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(&key).cloned())
        })
        .ok_or_else(|| bad(format!("it has no key {key:?}")))?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).map_err(|e| bad(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    let client = shared.connector.connect(config).map_err(bad)?;
    let target = Target::Cluster(name.to_string());
    {
        // Swapped under the index's lock, so no watch of the old connection
        // writes after the target's objects are forgotten.
        let Ok(mut index) = shared.index.write() else {
            return Ok(());
        };
        if let Ok(mut connected) = shared.clusters.connected.write() {
            connected.insert(
                name.to_string(),
                Connected {
                    connection: Arc::new(
                        Connection::new(format!("cluster {name}"), client)
                            .gated(shared.control.gate().clone()),
                    ),
                    version,
                },
            );
        }
        index.drop_target(&target);
        // A new connection answers until its watches find otherwise.
        index.world.reachability.insert(name.to_string(), None);
    }
    shared
        .metrics
        .clusters_connected
        .set(i64::try_from(shared.clusters.count()).unwrap_or(i64::MAX));
    shared.forget_watches(&target);
    shared.watch_target(&target);
    tracing::info!(cluster = name, secret = %secret_path, "connected");
    // Whatever waited for this cluster (its replicas, its stack, its cloud
    // cluster's objects on it) goes now rather than at its next retry.
    let subjects: Vec<Subject> = shared
        .index
        .read()
        .map(|i| i.subjects())
        .unwrap_or_default();
    for subject in subjects {
        shared.queue.add(crate::Work::Reconcile(subject));
    }
    Ok(())
}
