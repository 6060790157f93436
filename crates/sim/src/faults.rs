//! Faults injected into the running simulation, by a library call (tests)
//! or `modelplane sim fault …`: each is looked up where the simulated part
//! it breaks would fail.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Every fault in force.
#[derive(Debug, Default)]
pub struct Faults {
    /// `(cluster, kind)` → the cloud's error for creating it (`kind` `*` for all).
    provisioning: Mutex<BTreeMap<(String, String), String>>,
}

impl Faults {
    /// Creating `kind` resources of cluster `cluster` fails with `error`
    /// (for example EKS `InsufficientCapacity` for a capacity block).
    pub fn fail_provisioning(&self, cluster: &str, kind: &str, error: &str) {
        if let Ok(mut p) = self.provisioning.lock() {
            p.insert((cluster.into(), kind.into()), error.into());
        }
    }

    /// Clears provisioning failures of `cluster`.
    pub fn clear_provisioning(&self, cluster: &str) {
        if let Ok(mut p) = self.provisioning.lock() {
            p.retain(|(c, _), _| c != cluster);
        }
    }

    /// The error creating `kind` in `cluster` fails with, if any.
    pub fn provisioning_failure(&self, cluster: &str, kind: &str) -> Option<String> {
        let p = self.provisioning.lock().ok()?;
        p.get(&(cluster.to_string(), kind.to_string()))
            .or_else(|| p.get(&(cluster.to_string(), "*".to_string())))
            .cloned()
    }
}
