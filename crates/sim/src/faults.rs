//! Faults injected into the running simulation — by a library call (tests),
//! or by a `Fault` object (`sim.modelplane.ai/v1alpha1`) on the control
//! plane, which `modelplane sim fault …` writes. Each is looked up where the
//! simulated part it breaks would fail; deleting the Fault heals it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::Notify;

/// What breaks.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// A node's kubelet stops posting status (and its pods stop serving).
    NodeNotReady {
        /// The node.
        node: String,
    },
    /// A taint on a node (`NoExecute` evicts what does not tolerate it).
    NodeTaint {
        /// The node.
        node: String,
        /// Taint key.
        key: String,
        /// Taint value.
        value: String,
        /// `NoSchedule` or `NoExecute`.
        effect: String,
    },
    /// An engine process is killed (once), as an OOM kill would.
    KillEngine {
        /// `namespace/name` of the pod.
        pod: String,
    },
    /// The cluster's API stops answering whoever reaches it through its kubeconfig.
    Unreachable,
    /// Creating managed resources of `kind` (`*`: any) fails with the cloud's error.
    ProvisioningFailure {
        /// Managed resource kind.
        kind: String,
        /// The cloud's error.
        message: String,
    },
    /// The cluster's storage reads `factor` times slower.
    SlowStorage {
        /// Bandwidth divisor.
        factor: f64,
    },
}

impl Fault {
    /// The fault a `Fault` object's spec describes, or why it is not one.
    pub fn from_spec(spec: &Value) -> Result<(String, Fault), String> {
        let text = |k: &str| spec[k].as_str().map(str::to_string);
        let cluster = text("cluster").ok_or("spec.cluster is required")?;
        let node = || text("node").ok_or("spec.node is required for this type");
        let fault = match spec["type"].as_str().unwrap_or_default() {
            "NodeNotReady" => Fault::NodeNotReady { node: node()? },
            "NodeTaint" => Fault::NodeTaint {
                node: node()?,
                key: text("key").unwrap_or_else(|| "sim.modelplane.ai/drain".into()),
                value: text("value").unwrap_or_default(),
                effect: text("effect").unwrap_or_else(|| "NoExecute".into()),
            },
            "KillEngine" => Fault::KillEngine {
                pod: text("pod").ok_or("spec.pod (namespace/name) is required for KillEngine")?,
            },
            "Unreachable" => Fault::Unreachable,
            "ProvisioningFailure" => Fault::ProvisioningFailure {
                kind: text("kind").unwrap_or_else(|| "*".into()),
                message: text("message").unwrap_or_else(|| {
                    "InsufficientCapacity: the cloud has no capacity for this request".into()
                }),
            },
            "SlowStorage" => Fault::SlowStorage {
                factor: spec["factor"]
                    .as_f64()
                    .filter(|f| *f >= 1.0)
                    .unwrap_or(10.0),
            },
            other => {
                return Err(format!(
                    "unknown fault type {other:?}: NodeNotReady, NodeTaint, KillEngine, Unreachable, ProvisioningFailure or SlowStorage"
                ));
            }
        };
        Ok((cluster, fault))
    }
}

/// Every fault in force, by name.
#[derive(Debug, Default)]
pub struct Faults {
    faults: Mutex<BTreeMap<String, (String, Fault)>>,
    /// One-shot faults already carried out.
    done: Mutex<BTreeSet<String>>,
    /// Woken on every change, so the simulated parts look again.
    pub changed: Notify,
}

impl Faults {
    /// Injects `fault` into cluster `cluster` under `name` (replacing one of that name).
    pub fn inject(&self, name: &str, cluster: &str, fault: Fault) {
        if let Ok(mut f) = self.faults.lock() {
            if f.get(name)
                .is_some_and(|(c, old)| c == cluster && *old == fault)
            {
                return;
            }
            f.insert(name.into(), (cluster.into(), fault));
        }
        if let Ok(mut d) = self.done.lock() {
            d.remove(name);
        }
        self.changed.notify_waiters();
    }

    /// Heals the fault `name`.
    pub fn clear(&self, name: &str) {
        if let Ok(mut f) = self.faults.lock() {
            f.remove(name);
        }
        self.changed.notify_waiters();
    }

    /// Creating `kind` in `cluster` fails with `error` (a library shortcut).
    pub fn fail_provisioning(&self, cluster: &str, kind: &str, error: &str) {
        let fault = Fault::ProvisioningFailure {
            kind: kind.into(),
            message: error.into(),
        };
        self.inject(&format!("provisioning-{cluster}-{kind}"), cluster, fault);
    }

    fn of(&self, cluster: &str) -> Vec<(String, Fault)> {
        self.faults
            .lock()
            .map(|f| {
                f.iter()
                    .filter(|(_, (c, _))| c == cluster)
                    .map(|(n, (_, fault))| (n.clone(), fault.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The error creating `kind` in `cluster` fails with, if any.
    pub fn provisioning_failure(&self, cluster: &str, kind: &str) -> Option<String> {
        self.of(cluster).into_iter().find_map(|(_, f)| match f {
            Fault::ProvisioningFailure { kind: k, message } if k == kind || k == "*" => {
                Some(message)
            }
            _ => None,
        })
    }

    /// Whether cluster `cluster`'s API is cut off.
    pub fn unreachable(&self, cluster: &str) -> bool {
        self.of(cluster)
            .iter()
            .any(|(_, f)| *f == Fault::Unreachable)
    }

    /// How many times slower `cluster`'s storage reads (1 when healthy).
    pub fn storage_factor(&self, cluster: &str) -> f64 {
        self.of(cluster)
            .iter()
            .filter_map(|(_, f)| match f {
                Fault::SlowStorage { factor } => Some(*factor),
                _ => None,
            })
            .fold(1.0, f64::max)
    }

    /// The node faults of `cluster`.
    pub fn node_faults(&self, cluster: &str) -> Vec<Fault> {
        self.of(cluster)
            .into_iter()
            .map(|(_, f)| f)
            .filter(|f| matches!(f, Fault::NodeNotReady { .. } | Fault::NodeTaint { .. }))
            .collect()
    }

    /// The pods of `cluster` to kill now (each kill happens once).
    pub fn take_kills(&self, cluster: &str) -> Vec<String> {
        let mut out = Vec::new();
        let Ok(mut done) = self.done.lock() else {
            return out;
        };
        for (name, fault) in self.of(cluster) {
            if let Fault::KillEngine { pod } = fault
                && done.insert(name)
            {
                out.push(pod);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_fault_object_reads_as_its_fault_and_bad_ones_say_why() {
        let (cluster, fault) = Fault::from_spec(
            &json!({ "cluster": "us-east", "type": "NodeTaint", "node": "h200-node-0" }),
        )
        .expect("valid");
        assert_eq!(cluster, "us-east");
        assert_eq!(
            fault,
            Fault::NodeTaint {
                node: "h200-node-0".into(),
                key: "sim.modelplane.ai/drain".into(),
                value: String::new(),
                effect: "NoExecute".into()
            }
        );
        assert!(
            Fault::from_spec(&json!({ "cluster": "c", "type": "Meteor" }))
                .expect_err("unknown")
                .starts_with("unknown fault type \"Meteor\"")
        );
        assert!(Fault::from_spec(&json!({ "type": "Unreachable" })).is_err());
    }

    #[test]
    fn kills_happen_once_and_clearing_heals() {
        let faults = Faults::default();
        faults.inject("k", "c", Fault::KillEngine { pod: "ml/p".into() });
        assert_eq!(faults.take_kills("c"), vec!["ml/p"]);
        assert!(faults.take_kills("c").is_empty());
        faults.inject("u", "c", Fault::Unreachable);
        assert!(faults.unreachable("c") && !faults.unreachable("other"));
        faults.clear("u");
        assert!(!faults.unreachable("c"));
        faults.fail_provisioning("c", "NodeGroup", "InsufficientCapacity");
        assert_eq!(
            faults.provisioning_failure("c", "NodeGroup").as_deref(),
            Some("InsufficientCapacity")
        );
        assert_eq!(faults.provisioning_failure("c", "VPC"), None);
    }
}
