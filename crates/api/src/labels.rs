//! Label and annotation keys, fixed names and injected variables
//! (`api.md` §12).

/// Prefix reserved for Modelplane's own labels on templates.
pub const RESERVED_PREFIX: &str = "modelplane.ai/";

/// ModelReplica / ModelEndpoint: the owning ModelDeployment.
pub const DEPLOYMENT: &str = "modelplane.ai/deployment";
/// ModelReplica / ModelEndpoint: the InferenceCluster it is pinned to.
pub const CLUSTER: &str = "modelplane.ai/cluster";
/// ModelReplica / ModelEndpoint: the replica's index within its cluster.
pub const REPLICA_INDEX: &str = "modelplane.ai/replica-index";
/// Objects Modelplane owns, for pruning: the owner's UID.
pub const OWNER_UID: &str = "modelplane.ai/owner-uid";
/// Hand-made ModelEndpoints of external providers (a convention).
pub const EXTERNAL_PROVIDER: &str = "modelplane.ai/external-provider";
/// Helm releases on the control plane.
pub const RELEASE: &str = "modelplane.ai/release";
/// ServingStack-composed resources, for deletion ordering.
pub const RESOURCE: &str = "modelplane.ai/resource";
/// The recipe a ServingStack installs (set by the InferenceCluster composition).
pub const RECIPE: &str = "modelplane.ai/recipe";
/// Marks the consumer a provider-config Usage protects against.
pub const USAGE_CONSUMER: &str = "modelplane.ai/usage-consumer";

/// Node label: the node pool a node belongs to.
pub const POOL: &str = "modelplane.ai/pool";
/// Node label: the accelerator type of a provisioned GPU node.
pub const GPU: &str = "modelplane.ai/gpu";
/// Pod label: the replica a Standalone pod or leader serves.
pub const SERVING: &str = "modelplane.ai/serving";
/// Pod label: the native Deployment's selector.
pub const WORKLOAD: &str = "modelplane.ai/workload";
/// Pod label on a LeaderWorkerSet leader.
pub const LWS_ROLE: &str = "modelplane.ai/lws-role";
/// Label on a cache's PVC, Job and Secret.
pub const MODEL_CACHE: &str = "modelplane.ai/modelcache";
/// Pod annotation forcing an endpoint-picker rollout on config change.
pub const EPP_CONFIG_CHECKSUM: &str = "modelplane.ai/epp-config-checksum";
/// Pod labels of Prefill/Decode engines.
pub const LLMD_ROLE: &str = "llm-d.ai/role";
/// Pod label marking an llm-d inference-serving pod.
pub const LLMD_INFERENCE_SERVING: &str = "llm-d.ai/inference-serving";
/// Crossplane's label on a composed resource: the name of its composite
/// (a ModelReplica's or ModelEndpoint's ModelDeployment).
pub const COMPOSITE: &str = "crossplane.io/composite";
/// Annotation carrying a managed resource's external name.
pub const EXTERNAL_NAME: &str = "crossplane.io/external-name";

/// Namespace of the control plane's internal objects.
pub const SYSTEM_NAMESPACE: &str = "modelplane-system";
/// On a composed object that several Modelplane objects want (a team's
/// namespace on a workload cluster): the controller creates it when missing,
/// never takes ownership of it and never prunes it. (Serving workloads and
/// caches live in their team's namespace — the ModelReplica's or
/// ModelCache's — on the workload cluster, so two teams' objects never
/// collide: see docs/isolation.md.)
pub const SHARED: &str = "modelplane.ai/shared";
/// The one InferenceGateway.
pub const GATEWAY_NAME: &str = "default";
/// Field manager of every server-side apply Modelplane makes.
pub const FIELD_MANAGER: &str = "modelplane";

/// The engine container's name.
pub const ENGINE_CONTAINER: &str = "engine";
/// The port every engine serves on.
pub const ENGINE_PORT: u16 = 8000;
/// Where a model cache is mounted.
pub const CACHE_MOUNT: &str = "/mnt/models";
/// Env var: the leader's address in a multi-node gang.
pub const LEADER_ADDRESS_ENV: &str = "MODELPLANE_LEADER_ADDRESS";
/// Env var: a pod's rank in a multi-node gang (leader 0).
pub const RANK_ENV: &str = "MODELPLANE_RANK";

/// Pod label KAI reads the queue from.
pub const KAI_QUEUE_LABEL: &str = "kai.scheduler/queue";
/// The KAI queue a Dynamo cluster's recipe creates for Modelplane's workloads.
pub const KAI_QUEUE: &str = "modelplane";
/// The scheduler every GPU pod of a Dynamo cluster uses.
pub const KAI_SCHEDULER_NAME: &str = "kai-scheduler";
/// Address of the ModelExpress server the Dynamo recipe installs on each cluster.
pub const MODELEXPRESS_ADDRESS: &str = "modelexpress-server.modelexpress.svc.cluster.local:8001";
/// Env var ModelExpress clients read for the server address.
pub const MX_SERVER_ADDRESS_ENV: &str = "MX_SERVER_ADDRESS";
/// The older env var some ModelExpress clients read (it wins when both are set).
pub const MODEL_EXPRESS_URL_ENV: &str = "MODEL_EXPRESS_URL";
/// Gateway on each workload cluster that serving routes attach to.
pub const CLUSTER_GATEWAY_NAME: &str = "inference-gateway";
