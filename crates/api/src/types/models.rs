//! The ML team's kinds: ModelDeployment, ModelReplica, ModelService,
//! ModelEndpoint, ModelCache.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::common::*;
use super::platform::{ConditionsStatus, Labels, TaintEffect};

/// Spec of a model to serve: engines, devices and a replica count.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "modelplane.ai",
    version = "v1alpha1",
    kind = "ModelDeployment",
    plural = "modeldeployments",
    shortname = "md",
    category = "modelplane",
    namespaced,
    status = "ModelDeploymentStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct ModelDeploymentSpec {
    /// Replicas, 1..=10; each a full copy on one cluster.
    pub replicas: i32,
    /// What every replica runs.
    pub template: DeploymentTemplate,
}

/// A deployment's replica template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeploymentTemplate {
    /// Labels copied onto composed replicas and endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The replica's spec.
    pub spec: DeploymentTemplateSpec,
}

/// Metadata of a deployment's template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateMetadata {
    /// Labels (not under `modelplane.ai/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
}

/// What one replica runs and where it may go.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentTemplateSpec {
    /// InferenceClusters this deployment may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Model weights staged on each cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_cache_ref: Option<ModelCacheRef>,
    /// Serving mode; Unified when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<Serving>,
    /// Cluster taints tolerated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Engines, all on the replica's cluster.
    pub engines: Vec<Engine<DeploymentMember>>,
}

/// A reference to a ModelCache in the same namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCacheRef {
    /// Cache name.
    pub name: String,
}

/// Serving mode.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Serving {
    /// `Unified` or `PrefillDecode`; Unified when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ServingMode>,
}

/// How requests are served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServingMode {
    /// Every engine serves whole requests.
    #[default]
    Unified,
    /// A Prefill engine and a Decode engine behind an endpoint picker.
    PrefillDecode,
}

/// A tolerated taint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toleration {
    /// Taint key; empty with Exists tolerates everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    /// Value for `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Effect; all effects when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
}

/// How a toleration matches a taint's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TolerationOperator {
    /// Any value.
    Exists,
    /// The same value (default).
    #[default]
    Equal,
}

/// An engine: one or two members (Standalone, or Leader and Worker).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Engine<M> {
    /// Engine name.
    pub name: String,
    /// Identical copies inside one replica (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copies: Option<i32>,
    /// Phase under PrefillDecode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// `[Standalone]` or `[Leader, Worker]`.
    pub members: Vec<M>,
}

impl<M> Engine<M> {
    /// Copies, 1 when unset.
    pub fn copies(&self) -> i32 {
        self.copies.unwrap_or(1)
    }
}

/// Phase of a PrefillDecode engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Prompt processing.
    Prefill,
    /// Token generation.
    Decode,
}

/// A member's role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// A single pod.
    #[default]
    Standalone,
    /// The leader pod of a gang (rank 0).
    Leader,
    /// The worker pods of a gang.
    Worker,
}

/// A multi-node gang's size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worker {
    /// Worker pods (one per node) besides the leader.
    pub nodes: i32,
}

/// A deployment's member: devices to ask for and the pod to run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentMember {
    /// Role, Standalone when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Devices every pod needs on its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
    /// Gang size (Worker only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<Worker>,
    /// The pod: one container named `engine`.
    pub template: PodTemplateSpec,
}

/// Devices a member needs on each node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSelector {
    /// Requests, by name.
    pub devices: Vec<DeviceRequest>,
}

/// A request for devices matching CEL selectors.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRequest {
    /// Request name (the DRA DeviceRequest name).
    pub name: String,
    /// Devices per node (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Selectors, all of which must hold.
    pub selectors: Vec<Selector>,
}

/// One selector over a device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    /// A DRA CEL expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<String>,
}

/// Observed state of a deployment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelDeploymentStatus {
    /// Replica counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicaCounts>,
    /// Ready replicas of those asked for, as `ready/desired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// Desired, placed and ready replica counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaCounts {
    /// Replicas asked for (`spec.replicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<i32>,
    /// Replicas placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i32>,
    /// Placed replicas that are Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<i32>,
}

/// Spec of one serving instance of a deployment, pinned to one cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "modelplane.ai",
    version = "v1alpha1",
    kind = "ModelReplica",
    plural = "modelreplicas",
    shortname = "mr",
    category = "modelplane",
    namespaced,
    status = "ConditionsStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct ModelReplicaSpec {
    /// The InferenceCluster.
    pub cluster_name: String,
    /// Model cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_cache_ref: Option<ModelCacheRef>,
    /// Serving mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<Serving>,
    /// Engines with the scheduler's decisions.
    pub engines: Vec<Engine<ReplicaMember>>,
}

/// A replica's member: the deployment member with its pool and resolved requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaMember {
    /// Role, Standalone when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Pool on the pinned cluster.
    pub node_pool_name: String,
    /// Requests resolved against the pool's DRA devices; absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_requests: Option<Vec<ResolvedRequest>>,
    /// Gang size (Worker only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<Worker>,
    /// The pod.
    pub template: PodTemplateSpec,
}

/// A device request joined with the matched class device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedRequest {
    /// Request name.
    pub name: String,
    /// DeviceClass of the matched device.
    pub device_class_name: String,
    /// Devices per pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Selectors, copied verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selectors: Option<Vec<Selector>>,
}

impl DeploymentMember {
    /// Role, Standalone when unset.
    pub fn role(&self) -> Role {
        self.role.unwrap_or_default()
    }
}

impl ReplicaMember {
    /// Role, Standalone when unset.
    pub fn role(&self) -> Role {
        self.role.unwrap_or_default()
    }
}

/// Spec of one stable OpenAI-compatible URL over weighted endpoint groups.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "modelplane.ai",
    version = "v1alpha1",
    kind = "ModelService",
    plural = "modelservices",
    shortname = "ms",
    category = "modelplane",
    namespaced,
    status = "ModelServiceStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct ModelServiceSpec {
    /// Weighted groups of endpoints.
    pub endpoints: Vec<EndpointGroup>,
}

/// One weighted group of endpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointGroup {
    /// Relative share, 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// The group's endpoints, by labels.
    pub selector: LabelSelector,
}

impl EndpointGroup {
    /// Weight, 1 when unset.
    pub fn weight(&self) -> i32 {
        self.weight.unwrap_or(1)
    }
}

/// Observed state of a service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelServiceStatus {
    /// The service's URL on the fleet gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// Spec of one addressable inference backend.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "modelplane.ai",
    version = "v1alpha1",
    kind = "ModelEndpoint",
    plural = "modelendpoints",
    shortname = "me",
    category = "modelplane",
    namespaced,
    status = "ModelEndpointStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct ModelEndpointSpec {
    /// `scheme://host[:port][/path]`.
    pub url: String,
    /// Path prefix requests are rewritten to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite_path: Option<String>,
    /// Credentials presented to the endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<EndpointAuth>,
}

/// Credentials the gateway presents to an endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointAuth {
    /// Secret whose value is sent as `Authorization: Bearer …`.
    pub secret_ref: SecretKeyRef,
}

/// Observed state of an endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelEndpointStatus {
    /// Routing state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<EndpointRouting>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// Routing state of an endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointRouting {
    /// Backend Service name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_name: Option<String>,
}

/// Spec of model weights staged once per matched cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "modelplane.ai",
    version = "v1alpha1",
    kind = "ModelCache",
    plural = "modelcaches",
    shortname = "mc",
    category = "modelplane",
    namespaced,
    status = "ModelCacheStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
pub struct ModelCacheSpec {
    /// `HuggingFace`.
    pub source: CacheSource,
    /// Hugging Face source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugging_face: Option<HuggingFace>,
    /// Clusters to stage on; every cluster when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
}

/// Where weights come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheSource {
    /// The Hugging Face Hub.
    #[default]
    HuggingFace,
}

/// A Hugging Face repository.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HuggingFace {
    /// Repository id.
    pub repo: String,
    /// Branch, tag or commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Token Secret in the cache's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_secret: Option<HfAuthSecret>,
    /// Volume size per cluster, in GiB.
    #[serde(rename = "sizeGiB")]
    pub size_gib: i64,
}

/// A Hugging Face token Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HfAuthSecret {
    /// Secret name.
    pub name: String,
    /// Key, `HF_TOKEN` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Observed state of a cache.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCacheStatus {
    /// `<ready>/<matched>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<CacheSummary>,
    /// Per-cluster staging state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<CacheClusterStatus>>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// Summary of a cache's staging.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheSummary {
    /// `<ready>/<matched>`, e.g. `2/3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
}

/// Staging state on one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheClusterStatus {
    /// InferenceCluster name.
    pub name: String,
    /// `Pending`, `Hydrating`, `Ready` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<CachePhase>,
    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Staging phase on one cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CachePhase {
    /// Not started.
    Pending,
    /// Downloading.
    Hydrating,
    /// Staged.
    Ready,
    /// Failed.
    Failed,
}
