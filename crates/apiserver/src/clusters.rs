//! Many clusters in one server, the way kcp serves them: every path under
//! `/clusters/<name>/…` is an independent cluster — its own objects, CRDs,
//! namespaces, discovery and OpenAPI — kept in the same store as the root
//! cluster (see [`crate::keyspace`]).
//!
//! A logical cluster exists while the root cluster holds a
//! `LogicalCluster` of that name (`tenancy.modelplane.ai/v1alpha1`,
//! cluster-scoped): create one with kubectl or [`Clusters::create`],
//! delete it and every object in it goes. Its kubeconfig is the root's with
//! `/clusters/<name>` after the server's address. An empty cluster costs
//! its three built-in namespaces and a small table; nothing runs for it
//! until it is used.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use serde_json::json;

use crate::keyspace::{Keyspace, logical_prefix};
use crate::resources::{Resource, validate_name};
use crate::server::{ApiServer, Shared};
use crate::store::{self, EventKind, Store, Write};

pub use crate::resources::LOGICAL_CLUSTERS_GROUP as GROUP;
/// Where a logical cluster's paths start.
pub const PATH_PREFIX: &str = "/clusters/";

/// The `LogicalCluster` kind, served by the root cluster only.
fn resource() -> Resource {
    crate::resources::logical_clusters()
}

/// What a logical cluster's kubeconfig needs of the server.
struct Endpoint {
    url: String,
    ca: String,
    token: String,
}

/// Every cluster of one store: the root one and the logical ones.
pub struct Clusters {
    store: Arc<Store>,
    shared: Arc<Shared>,
    root: Arc<ApiServer>,
    logical: RwLock<HashMap<String, Arc<ApiServer>>>,
    endpoint: OnceLock<Endpoint>,
}

/// Why a logical cluster could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The name is not a DNS-1123 label.
    #[error("invalid logical cluster name {name:?}: {message}")]
    InvalidName {
        /// The name given.
        name: String,
        /// Kubernetes' words.
        message: String,
    },
    /// The store refused the write.
    #[error(transparent)]
    Store(#[from] store::Error),
}

impl Clusters {
    /// Every cluster of `store`.
    pub fn open(store: Store) -> Arc<Clusters> {
        let store = Arc::new(store);
        let shared = Arc::<Shared>::default();
        let root = ApiServer::in_space(Keyspace::root(store.clone()), shared.clone(), true);
        Arc::new(Clusters {
            store,
            shared,
            root,
            logical: RwLock::default(),
            endpoint: OnceLock::new(),
        })
    }

    /// The root cluster.
    pub fn root(&self) -> &Arc<ApiServer> {
        &self.root
    }

    /// Sets where clients reach the server, for [`Clusters::kubeconfig`].
    pub fn set_endpoint(&self, url: &str, ca: &str, token: &str) {
        let _ = self.endpoint.set(Endpoint {
            url: url.to_string(),
            ca: ca.to_string(),
            token: token.to_string(),
        });
    }

    /// A kubeconfig for the logical cluster `name`, once the server serves.
    pub fn kubeconfig(&self, name: &str) -> Option<String> {
        let endpoint = self.endpoint.get()?;
        Some(crate::kubeconfig::kubeconfig(
            &format!("{}{PATH_PREFIX}{name}", endpoint.url),
            &endpoint.ca,
            &endpoint.token,
        ))
    }

    /// The names of the logical clusters, from the root's `LogicalCluster`s.
    pub fn names(&self) -> Result<Vec<String>, store::Error> {
        let (_, items) = self.root.store().list(&resource().prefix(), None, None)?;
        Ok(items
            .iter()
            .filter_map(|s| s.key.rsplit('/').next().map(str::to_string))
            .collect())
    }

    /// The logical cluster `name` if it exists (blocking on first use: its
    /// built-in namespaces are written then).
    pub fn get(&self, name: &str) -> Result<Option<Arc<ApiServer>>, store::Error> {
        if let Some(server) = self.logical.read().ok().and_then(|m| m.get(name).cloned()) {
            return Ok(Some(server));
        }
        if self
            .root
            .store()
            .get(&resource().key(None, name))?
            .is_none()
        {
            return Ok(None);
        }
        Ok(Some(self.start(name)))
    }

    /// Serves the logical cluster `name` from now on.
    fn start(&self, name: &str) -> Arc<ApiServer> {
        let Ok(mut logical) = self.logical.write() else {
            return self.instance(name);
        };
        logical
            .entry(name.to_string())
            .or_insert_with(|| self.instance(name))
            .clone()
    }

    fn instance(&self, name: &str) -> Arc<ApiServer> {
        ApiServer::in_space(
            Keyspace::logical(self.store.clone(), name),
            self.shared.clone(),
            false,
        )
    }

    /// Creates the logical cluster `name` (nothing if it exists) and serves
    /// it (blocking: one commit for the cluster and its namespaces).
    pub fn create(&self, name: &str) -> Result<Arc<ApiServer>, CreateError> {
        validate_name(name, true).map_err(|message| CreateError::InvalidName {
            name: name.to_string(),
            message,
        })?;
        let key = resource().key(None, name);
        if self.root.store().get(&key)?.is_none() {
            let mut object = json!({
                "apiVersion": format!("{GROUP}/v1alpha1"),
                "kind": "LogicalCluster",
                "metadata": { "name": name },
            });
            let _ = crate::object::prepare_create(
                &mut object,
                &resource(),
                None,
                &crate::object::Identity::fresh(),
            );
            match self.root.store().write(Write::Create {
                key,
                value: object.to_string().into_bytes(),
            }) {
                Ok(_) | Err(store::Error::AlreadyExists(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(self.start(name))
    }

    /// Deletes the logical cluster `name` and every object in it.
    pub fn delete(&self, name: &str) -> Result<(), store::Error> {
        match self.root.store().write(Write::Delete {
            key: resource().key(None, name),
            expected: None,
        }) {
            Ok(_) | Err(store::Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        self.forget(name)
    }

    /// Stops serving `name` and deletes what its keyspace still holds.
    fn forget(&self, name: &str) -> Result<(), store::Error> {
        if let Ok(mut logical) = self.logical.write() {
            logical.remove(name);
        }
        let space = Keyspace::logical(self.store.clone(), name);
        loop {
            let (_, items) = space.list("/", None, Some(1000))?;
            if items.is_empty() {
                return Ok(());
            }
            let deletes = items
                .into_iter()
                .map(|s| Write::Delete {
                    key: s.key,
                    expected: None,
                })
                .collect();
            for outcome in space.write_all(deletes) {
                match outcome {
                    Ok(_) | Err(store::Error::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Every logical cluster served now, root first.
    pub fn all(&self) -> Vec<Arc<ApiServer>> {
        let mut all = vec![self.root.clone()];
        if let Ok(logical) = self.logical.read() {
            all.extend(logical.values().cloned());
        }
        all
    }

    /// Serves every existing logical cluster and removes the objects of
    /// deleted ones (a deletion cut short by a crash). Blocking.
    pub fn resume(&self) -> Result<Vec<Arc<ApiServer>>, store::Error> {
        let names = self.names()?;
        let mut from = "~".to_string();
        while let Some(key) = self.store.first_key_from(&from)? {
            let Some(name) = key
                .strip_prefix('~')
                .and_then(|rest| rest.split('/').next())
                .map(str::to_string)
            else {
                break;
            };
            if !names.contains(&name) {
                self.forget(&name)?;
            }
            let Some(next) = store::prefix_end(&format!("{}/", logical_prefix(&name))) else {
                break;
            };
            from = next;
        }
        Ok(names.iter().map(|name| self.start(name)).collect())
    }

    /// Follows the root's `LogicalCluster` deletions (made through the API)
    /// and removes those clusters' objects; runs until the store closes.
    pub async fn follow_deletions(self: Arc<Clusters>) {
        let prefix = resource().prefix();
        let mut changes = self.root.store().subscribe();
        loop {
            let event = match changes.recv().await {
                Ok(event) => event,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    // Missed some: check every served cluster still exists.
                    let clusters = self.clone();
                    let _ = tokio::task::spawn_blocking(move || clusters.drop_deleted()).await;
                    continue;
                }
                Err(_) => return,
            };
            if event.kind != EventKind::Deleted {
                continue;
            }
            if let Some(name) = event.key.strip_prefix(&prefix).map(str::to_string) {
                let clusters = self.clone();
                let _ = tokio::task::spawn_blocking(move || clusters.forget(&name)).await;
            }
        }
    }

    fn drop_deleted(&self) -> Result<(), store::Error> {
        let names = self.names()?;
        let served: Vec<String> = self
            .logical
            .read()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for name in served.iter().filter(|n| !names.contains(n)) {
            self.forget(name)?;
        }
        Ok(())
    }
}
