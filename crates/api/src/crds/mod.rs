//! The 14 kinds of Modelplane's API and their CustomResourceDefinitions.
//!
//! Data flow: each kind's schema functions (`platform`, `models`,
//! `infrastructure`) build its `spec` and `status` schemas from the shared
//! fragments of `common`; [`KindInfo`] adds names, scope, printer columns and
//! subresources; [`crd`] assembles an `apiextensions.k8s.io/v1` CRD from both.
//! `modelplane crds`, `modelplane validate` and the API server all read
//! [`KINDS`], so every kind is described exactly once.

pub mod common;
mod infrastructure;
mod models;
mod platform;

use serde_json::{Value, json};

use crate::schema::{Schema, object};

/// API group of the user-facing kinds.
pub const GROUP: &str = "modelplane.ai";
/// API group of the internal kinds an InferenceCluster composes.
pub const INFRASTRUCTURE_GROUP: &str = "infrastructure.modelplane.ai";
/// The one served and stored version.
pub const VERSION: &str = "v1alpha1";
/// The category `kubectl get modelplane` lists.
pub const CATEGORY: &str = "modelplane";

/// Whether objects of a kind live in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Cluster-wide, like Nodes.
    Cluster,
    /// Inside a namespace, like Pods.
    Namespaced,
}

/// An `additionalPrinterColumns` entry.
#[derive(Clone, Copy, Debug)]
pub struct PrinterColumn {
    /// Column header.
    pub name: &'static str,
    /// `string`, `integer` or `date`.
    pub type_: &'static str,
    /// Simple JSONPath into the object.
    pub json_path: &'static str,
}

/// Everything needed to build one kind's CRD.
#[derive(Clone, Copy)]
pub struct KindInfo {
    /// API group.
    pub group: &'static str,
    /// Kind, e.g. `ModelDeployment`.
    pub kind: &'static str,
    /// Plural resource name.
    pub plural: &'static str,
    /// Short names for kubectl.
    pub short_names: &'static [&'static str],
    /// Cluster or namespaced.
    pub scope: Scope,
    /// Printer columns before AGE.
    pub columns: &'static [PrinterColumn],
    /// Whether the scale subresource is served (ModelDeployment).
    pub scale: bool,
    /// Builds the `spec` and `status` schemas.
    pub schemas: fn() -> (Schema, Schema),
    /// One-line description of the kind.
    pub description: &'static str,
}

impl std::fmt::Debug for KindInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindInfo")
            .field("group", &self.group)
            .field("kind", &self.kind)
            .finish()
    }
}

impl KindInfo {
    /// `group/version`, the `apiVersion` of this kind's objects.
    pub fn api_version(&self) -> String {
        format!("{}/{VERSION}", self.group)
    }

    /// The CRD's name, `<plural>.<group>`.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    /// The lowercase singular name.
    pub fn singular(&self) -> String {
        self.kind.to_ascii_lowercase()
    }

    /// The full `openAPIV3Schema` of this kind.
    pub fn schema(&self) -> Value {
        let (spec, status) = (self.schemas)();
        object()
            .prop(
                "apiVersion",
                crate::schema::string().doc("APIVersion of this object."),
            )
            .prop("kind", crate::schema::string().doc("Kind of this object."))
            .prop("metadata", object())
            .req("spec", spec.doc("Desired state."))
            .prop("status", status.doc("Observed state."))
            .doc(self.description)
            .into_value()
    }
}

const fn col(name: &'static str, type_: &'static str, json_path: &'static str) -> PrinterColumn {
    PrinterColumn {
        name,
        type_,
        json_path,
    }
}

/// Every kind Modelplane serves, user-facing first.
pub const KINDS: &[KindInfo] = &[
    KindInfo {
        group: GROUP,
        kind: "InferenceGateway",
        plural: "inferencegateways",
        short_names: &["ig"],
        scope: Scope::Cluster,
        columns: &[
            col("GATEWAY", "string", ".spec.backend"),
            col("ADDRESS", "string", ".status.address"),
        ],
        scale: false,
        schemas: platform::inference_gateway,
        description: "The fleet's single OpenAI-compatible front door; a singleton named default.",
    },
    KindInfo {
        group: GROUP,
        kind: "InferenceClass",
        plural: "inferenceclasses",
        short_names: &["icl"],
        scope: Scope::Cluster,
        columns: &[],
        scale: false,
        schemas: platform::inference_class,
        description: "A reusable hardware recipe for one GPU node pool: the devices each node offers, and how a cloud builds it.",
    },
    KindInfo {
        group: GROUP,
        kind: "InferenceCluster",
        plural: "inferenceclusters",
        short_names: &["ic"],
        scope: Scope::Cluster,
        columns: &[
            col("SOURCE", "string", ".spec.cluster.source"),
            col("STACK", "string", ".spec.stack"),
            col("GATEWAY", "string", ".status.gateway.address"),
            col(
                "READY",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].status",
            ),
            col(
                "REACHABLE",
                "string",
                ".status.conditions[?(@.type==\"Reachable\")].status",
            ),
        ],
        scale: false,
        schemas: platform::inference_cluster,
        description: "A Kubernetes cluster registered as GPU capacity for the fleet, provisioned on a cloud or existing.",
    },
    KindInfo {
        group: GROUP,
        kind: "ModelDeployment",
        plural: "modeldeployments",
        short_names: &["md"],
        scope: Scope::Namespaced,
        columns: &[
            col("READY", "string", ".status.ready"),
            col("PLACED", "integer", ".status.replicas.total"),
            col(
                "AVAILABLE",
                "string",
                ".status.conditions[?(@.type==\"Available\")].status",
            ),
        ],
        scale: true,
        schemas: models::model_deployment,
        description: "A model to serve: engines, devices and a replica count, placed by Modelplane onto clusters that fit.",
    },
    KindInfo {
        group: GROUP,
        kind: "ModelReplica",
        plural: "modelreplicas",
        short_names: &["mr"],
        scope: Scope::Namespaced,
        columns: &[col("CLUSTER", "string", ".spec.clusterName")],
        scale: false,
        schemas: models::model_replica,
        description: "One serving instance of a ModelDeployment pinned to one cluster; composed by Modelplane.",
    },
    KindInfo {
        group: GROUP,
        kind: "ModelService",
        plural: "modelservices",
        short_names: &["ms"],
        scope: Scope::Namespaced,
        columns: &[col("ADDRESS", "string", ".status.address")],
        scale: false,
        schemas: models::model_service,
        description: "One stable OpenAI-compatible endpoint over weighted groups of ModelEndpoints.",
    },
    KindInfo {
        group: GROUP,
        kind: "ModelEndpoint",
        plural: "modelendpoints",
        short_names: &["me"],
        scope: Scope::Namespaced,
        columns: &[col("URL", "string", ".spec.url")],
        scale: false,
        schemas: models::model_endpoint,
        description: "One addressable inference backend: a ready replica, or an external provider.",
    },
    KindInfo {
        group: GROUP,
        kind: "ModelCache",
        plural: "modelcaches",
        short_names: &["mc"],
        scope: Scope::Namespaced,
        columns: &[
            col("SOURCE", "string", ".spec.huggingFace.repo"),
            col("READY", "string", ".status.summary.ready"),
        ],
        scale: false,
        schemas: models::model_cache,
        description: "Model weights staged once per matched cluster and mounted by deployments at /mnt/models.",
    },
    KindInfo {
        group: INFRASTRUCTURE_GROUP,
        kind: "ServingStack",
        plural: "servingstacks",
        short_names: &["ss"],
        scope: Scope::Namespaced,
        columns: &[col("GATEWAY", "string", ".status.gateway.address")],
        scale: false,
        schemas: infrastructure::serving_stack,
        description: "The serving substrate of one workload cluster; composed by InferenceCluster.",
    },
    KindInfo {
        group: INFRASTRUCTURE_GROUP,
        kind: "EKSCluster",
        plural: "eksclusters",
        short_names: &["eks"],
        scope: Scope::Namespaced,
        columns: &[col("REGION", "string", ".spec.region")],
        scale: false,
        schemas: infrastructure::eks_cluster,
        description: "An Amazon EKS cluster and its node pools; composed by InferenceCluster.",
    },
    KindInfo {
        group: INFRASTRUCTURE_GROUP,
        kind: "GKECluster",
        plural: "gkeclusters",
        short_names: &["gke"],
        scope: Scope::Namespaced,
        columns: &[col("REGION", "string", ".spec.region")],
        scale: false,
        schemas: infrastructure::gke_cluster,
        description: "A Google GKE cluster and its node pools; composed by InferenceCluster.",
    },
    KindInfo {
        group: INFRASTRUCTURE_GROUP,
        kind: "AKSCluster",
        plural: "aksclusters",
        short_names: &["aks"],
        scope: Scope::Namespaced,
        columns: &[col("LOCATION", "string", ".spec.location")],
        scale: false,
        schemas: infrastructure::aks_cluster,
        description: "An Azure AKS cluster and its node pools; composed by InferenceCluster.",
    },
    KindInfo {
        group: INFRASTRUCTURE_GROUP,
        kind: "NebiusCluster",
        plural: "nebiusclusters",
        short_names: &["mk8s"],
        scope: Scope::Namespaced,
        columns: &[],
        scale: false,
        schemas: infrastructure::nebius_cluster,
        description: "A Nebius Managed Kubernetes cluster and its node groups; composed by InferenceCluster.",
    },
    KindInfo {
        group: INFRASTRUCTURE_GROUP,
        kind: "VultrCluster",
        plural: "vultrclusters",
        short_names: &["vke"],
        scope: Scope::Namespaced,
        columns: &[col("REGION", "string", ".spec.region")],
        scale: false,
        schemas: infrastructure::vultr_cluster,
        description: "A Vultr Kubernetes Engine cluster and its node pools; composed by InferenceCluster.",
    },
];

/// Looks a kind up by `apiVersion` and `kind`.
pub fn find(api_version: &str, kind: &str) -> Option<&'static KindInfo> {
    KINDS
        .iter()
        .find(|k| k.kind == kind && k.api_version() == api_version)
}

/// Whether `api_version` belongs to one of Modelplane's groups (any version).
pub fn is_modelplane_group(api_version: &str) -> bool {
    let group = api_version.split('/').next().unwrap_or_default();
    group == GROUP || group == INFRASTRUCTURE_GROUP
}

/// The `apiextensions.k8s.io/v1` CustomResourceDefinition of a kind.
pub fn crd(info: &KindInfo) -> Value {
    let mut columns: Vec<Value> = info
        .columns
        .iter()
        .map(|c| json!({"name": c.name, "type": c.type_, "jsonPath": c.json_path}))
        .collect();
    columns.push(json!({"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"}));
    let mut subresources = json!({"status": {}});
    if info.scale {
        subresources["scale"] = json!({
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas.total",
        });
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": info.crd_name()},
        "spec": {
            "group": info.group,
            "names": {
                "kind": info.kind,
                "listKind": format!("{}List", info.kind),
                "plural": info.plural,
                "singular": info.singular(),
                "shortNames": info.short_names,
                "categories": [CATEGORY],
            },
            "scope": match info.scope { Scope::Cluster => "Cluster", Scope::Namespaced => "Namespaced" },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": info.schema()},
                "subresources": subresources,
                "additionalPrinterColumns": columns,
            }],
        },
    })
}

/// Every CRD, in [`KINDS`] order.
pub fn all_crds() -> Vec<Value> {
    KINDS.iter().map(crd).collect()
}

/// Every CRD as multi-document YAML, as `modelplane crds` prints it.
pub fn render_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for crd in all_crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}
