//! Sub-types shared by several kinds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The Crossplane provider configuration that authenticates cloud API calls.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialsRef {
    /// `ProviderConfig` or `ClusterProviderConfig` (the default).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<ProviderConfigKind>,
    /// Name of the provider configuration; `default` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl CredentialsRef {
    /// The configuration's kind, `ClusterProviderConfig` when unset.
    pub fn kind(&self) -> ProviderConfigKind {
        self.type_.unwrap_or_default()
    }

    /// The configuration's name, `default` when unset.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("default")
    }
}

/// Kind of a Crossplane provider configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProviderConfigKind {
    /// Namespaced.
    ProviderConfig,
    /// Cluster-scoped (the default).
    #[default]
    ClusterProviderConfig,
}

/// Selects objects by labels: an AND of equalities; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must all match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
}

impl LabelSelector {
    /// Whether `labels` carry every required label.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .flatten()
            .all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// One observed condition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type, e.g. `ReplicasScheduled`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 time of the last status change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Generation the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A reference to a key of a Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key within the Secret.
    pub key: String,
}

/// Whether a device is claimed through DRA or only matched for placement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Claim {
    /// Matched and claimed through a ResourceClaim (the default).
    #[default]
    #[serde(rename = "DRA")]
    Dra,
    /// Matched for placement only (e.g. an InfiniBand NIC without a DRA driver).
    Synthetic,
}

/// A typed attribute value; exactly one field is set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributeValue {
    /// A string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// A semantic version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// A boolean.
    #[serde(rename = "bool", default, skip_serializing_if = "Option::is_none")]
    pub bool_: Option<bool>,
    /// An integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int: Option<i64>,
}

/// A capacity: a Kubernetes quantity such as `81559Mi`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityValue {
    /// The quantity, as written.
    pub value: String,
}

/// One kind of device a node offers, as a DRA driver would publish it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Name of this kind of device (`gpu`, `nic`).
    pub name: String,
    /// DRA (claimed) or Synthetic (placement only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
    /// DRA driver, also the attribute and capacity domain.
    pub driver: String,
    /// DeviceClass to claim from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_class_name: Option<String>,
    /// Devices of this kind per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Typed attributes by bare name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, AttributeValue>>,
    /// Capacities by bare name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<BTreeMap<String, CapacityValue>>,
}

impl Device {
    /// The claim, `DRA` when unset.
    pub fn claim(&self) -> Claim {
        self.claim.unwrap_or_default()
    }

    /// Devices per node, 1 when unset.
    pub fn count(&self) -> i32 {
        self.count.unwrap_or(1)
    }
}
