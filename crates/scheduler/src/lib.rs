//! Fleet placement: which cluster and pool each replica of a ModelDeployment
//! lands on, with the reasons every other cluster and pool was passed over.
//!
//! Data flow: API objects become [`Deployment`], [`Cluster`] and
//! [`ExistingReplica`] once (`from_resource`, devices interned); [`schedule`]
//! compiles the deployment's selectors, retains the replicas that still fit,
//! scales down, builds the node ledger and fills the shortfall one replica at
//! a time, then explains every cluster it did not choose. It is a pure
//! function (`behavior.md` §1, with DECISIONS §B H1 and H2): the same inputs
//! give the same [`Schedule`], and a failure to compute one is a [`Hold`],
//! never an empty placement.
#![warn(missing_docs)]

mod algorithm;
pub mod capacity;
mod matching;
pub mod model;
mod taints;

use modelplane_api::types::Role;
use serde::Serialize;

pub use algorithm::explain::{ClosestDevice, Explanation, FreeOnNodes, Reason, Usage};
pub use matching::{DeviceMiss, ResolvedRequest, SelectorError};
pub use model::{Cluster, Deployment, DeviceInterner, Existing, ExistingReplica};

/// One replica's place: a cluster, an index, and a pool per engine member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// InferenceCluster name.
    pub cluster: String,
    /// Index of the replica on that cluster.
    pub index: i64,
    /// The cluster's gateway address ("" when it has none yet).
    pub gateway_address: String,
    /// Engines, in deployment order.
    pub engines: Vec<EnginePlacement>,
    /// Whether this replica existed before (retained) or is new.
    #[serde(skip)]
    pub retained: bool,
}

/// Where one engine of a replica runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EnginePlacement {
    /// Engine name.
    pub name: String,
    /// Members, in deployment order.
    pub members: Vec<MemberPlacement>,
}

/// Where one member of an engine runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberPlacement {
    /// Role.
    pub role: Role,
    /// Pool on the cluster.
    pub pool: String,
    /// DRA requests resolved on that pool.
    pub device_requests: Vec<ResolvedRequest>,
}

/// The scheduler's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// Placements, sorted by cluster name then index.
    pub placements: Vec<Placement>,
    /// `spec.replicas`.
    pub requested: u32,
    /// Candidate clusters (matching the selector) that were considered.
    #[serde(skip)]
    pub candidates: usize,
    /// Existing replicas of this deployment that are not kept.
    pub dropped: Vec<Dropped>,
    /// Why each cluster and pool not chosen was not chosen.
    pub explanations: Vec<Explanation>,
}

/// An existing replica of the deployment that is not kept, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Dropped {
    /// ModelReplica name (empty for a replica dropped by scale-down, which
    /// may be one of several with that identity).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub replica: String,
    /// Its cluster.
    pub cluster: String,
    /// Its index.
    pub index: i64,
    /// Why it goes.
    pub reason: DropReason,
}

/// Why an existing replica is not kept (it is deleted, and replaced if the
/// deployment is short).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DropReason {
    /// Its cluster is gone or no longer matches the cluster selector.
    ClusterNotCandidate,
    /// Another replica with the same cluster and index was kept.
    Duplicate,
    /// An untolerated NoExecute taint drains its cluster.
    Evicted,
    /// Its engines, members or pinned pools no longer fit the deployment.
    NoLongerFits,
    /// More replicas exist than `spec.replicas`.
    ScaledDown,
}

/// Why no placement could be computed; the caller keeps what exists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Hold {
    /// A selector does not compile.
    #[error("invalid nodeSelector CEL expression: {0}")]
    InvalidSelector(#[from] Box<SelectorError>),
    /// No InferenceCluster matches the deployment's cluster selector.
    #[error("no InferenceCluster matches the cluster selector")]
    NoClusters {
        /// Why each cluster was not a candidate.
        explanations: Vec<Explanation>,
    },
}

/// Options of one scheduling pass.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Place new replicas (false while the model cache is unresolved or missing).
    pub fill: bool,
    /// When to explain every cluster and pool not chosen.
    pub explain: Explain,
}

/// When a pass explains the clusters and pools it did not choose: the
/// explanations cost a look at every pool of every cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Explain {
    /// Never.
    Never,
    /// Only when the deployment is short of replicas after the pass: why
    /// the rest found no place, without a second pass to ask.
    WhenShort,
    /// Always (`modelplane schedule --explain`).
    Always,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            fill: true,
            explain: Explain::Always,
        }
    }
}

/// Places `deployment`'s replicas on `clusters` (every InferenceCluster;
/// those not matching the deployment's selector are only explained), given
/// every existing ModelReplica of every deployment.
pub fn schedule<R: Existing + ?Sized>(
    deployment: &Deployment,
    clusters: &[Cluster],
    replicas: &R,
    options: Options,
) -> Result<Schedule, Hold> {
    algorithm::run(deployment, clusters, replicas, options)
}
