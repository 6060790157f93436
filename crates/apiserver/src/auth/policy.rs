//! A cluster's RBAC policy as of its store's latest access change: read
//! once and kept until an RBAC object (or a ServiceAccount) of any cluster
//! changes, so a request pays a counter read, not four list queries.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::rbac::{Objects, Policy};
use crate::keyspace::Keyspace;

/// Where each RBAC kind is kept.
const CLUSTER_ROLES: &str = "/rbac.authorization.k8s.io/clusterroles/";
const ROLES: &str = "/rbac.authorization.k8s.io/roles/";
const CLUSTER_ROLE_BINDINGS: &str = "/rbac.authorization.k8s.io/clusterrolebindings/";
const ROLE_BINDINGS: &str = "/rbac.authorization.k8s.io/rolebindings/";

/// The policy last read, with the access generation it was read at.
#[derive(Default)]
pub struct Cache {
    read: Mutex<Option<(u64, Arc<Policy>)>>,
}

impl Cache {
    /// The policy of `store` now. A read that fails leaves the last
    /// policy in place (and is tried again on the next request).
    pub fn policy(&self, store: &Keyspace) -> Result<Arc<Policy>, crate::store::Error> {
        let generation = store.shared().access_generation();
        if let Ok(read) = self.read.lock()
            && let Some((at, policy)) = &*read
            && *at == generation
        {
            return Ok(policy.clone());
        }
        // Read after taking the generation: a change landing meanwhile
        // bumps it past what is kept, and the next request reads again.
        let policy = Arc::new(Policy::new(&objects(store)?));
        if let Ok(mut read) = self.read.lock() {
            *read = Some((generation, policy.clone()));
        }
        Ok(policy)
    }
}

fn objects(store: &Keyspace) -> Result<Objects, crate::store::Error> {
    let read = |prefix: &str| -> Result<Vec<Value>, crate::store::Error> {
        let (_, items) = store.list(prefix, None, None)?;
        Ok(items
            .iter()
            .filter_map(|s| serde_json::from_slice(&s.value).ok())
            .collect())
    };
    Ok(Objects {
        cluster_roles: read(CLUSTER_ROLES)?,
        roles: read(ROLES)?,
        cluster_role_bindings: read(CLUSTER_ROLE_BINDINGS)?,
        role_bindings: read(ROLE_BINDINGS)?,
    })
}
