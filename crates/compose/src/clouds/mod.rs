//! Cloud cluster XRs → Crossplane managed resources (`behavior.md` §9) and
//! the in-cluster extras each cloud needs (§8.2). Every managed resource is a
//! namespaced (`*.m.*`) v2 API object on the control plane, in the XR's
//! namespace, named `child_name(<xr>, <part>)`, and refers to its siblings by
//! name (`…Ref`), so the composition needs no observed IDs except where a
//! value must be copied (the EFS file system's ID into its StorageClass).

pub mod aks;
pub mod eks;
pub mod gke;
pub mod nebius;
pub mod vultr;

use modelplane_api::names;
use modelplane_api::types::{CredentialsRef, ProviderConfigKind};
use serde_json::{Value, json};

use crate::{Desired, ReadinessRule, Target};

pub use aks::{AksInputs, compose_aks_cluster};
pub use eks::{EksInputs, compose_eks_cluster};
pub use gke::{GkeInputs, compose_gke_cluster};
pub use nebius::{NebiusInputs, compose_nebius_cluster};
pub use vultr::{VultrInputs, compose_vultr_cluster};

/// Labels on every provisioned node: its pool and, for GPU pools, the accelerator.
pub const NODE_POOL_LABEL: &str = modelplane_api::labels::POOL;

/// The taint that keeps non-GPU pods off GPU nodes.
pub const GPU_TAINT_KEY: &str = "nvidia.com/gpu";

/// Builds a cloud's managed resources for one XR.
pub(crate) struct Builder<'a> {
    pub xr: &'a str,
    pub namespace: &'a str,
    pub provider_config: Value,
    pub out: Vec<Desired>,
}

impl<'a> Builder<'a> {
    pub fn new(xr: &'a str, namespace: &'a str, credentials: Option<&CredentialsRef>) -> Self {
        let kind = match credentials.map(CredentialsRef::kind) {
            Some(ProviderConfigKind::ProviderConfig) => "ProviderConfig",
            _ => "ClusterProviderConfig",
        };
        let name = credentials
            .and_then(|c| c.name.clone())
            .unwrap_or_else(|| "default".into());
        Builder {
            xr,
            namespace,
            provider_config: json!({ "kind": kind, "name": name }),
            out: Vec::new(),
        }
    }

    /// The name of the part `part` of this XR.
    pub fn name(&self, part: &str) -> String {
        names::child_name(&[self.xr, part])
    }

    /// A reference to a sibling part, as `…Ref` fields take it.
    pub fn reference(&self, part: &str) -> Value {
        json!({ "name": self.name(part) })
    }

    /// Adds a managed resource; ready when its `Ready` condition is.
    pub fn managed(&mut self, api_version: &str, kind: &str, part: &str, for_provider: Value) {
        self.out.push(Desired {
            target: Target::ControlPlane,
            object: json!({
                "apiVersion": api_version,
                "kind": kind,
                "metadata": {
                    "name": self.name(part),
                    "namespace": self.namespace,
                    "labels": { modelplane_api::labels::CLUSTER: self.xr },
                },
                "spec": {
                    "providerConfigRef": self.provider_config,
                    "forProvider": for_provider,
                },
            }),
            ready_when: ReadinessRule::ConditionTrue("Ready".into()),
        });
    }

    /// Sets the external name (the cloud's own name) of the last resource added.
    pub fn with_external_name(&mut self, external: &str) {
        if let Some(last) = self.out.last_mut() {
            last.object["metadata"]["annotations"] =
                json!({ modelplane_api::labels::EXTERNAL_NAME: external });
        }
    }

    /// Writes the connection secret of the last managed resource added.
    pub fn with_connection_secret(&mut self, secret: &str) {
        if let Some(last) = self.out.last_mut() {
            last.object["spec"]["writeConnectionSecretToRef"] = json!({ "name": secret });
        }
    }

    /// Adds a plain object applied to the workload cluster itself.
    pub fn on_cluster(&mut self, object: Value, ready_when: ReadinessRule) {
        self.out.push(Desired {
            target: Target::Cluster(self.xr.to_string()),
            object,
            ready_when,
        });
    }

    /// Adds a Helm release installed into the workload cluster through the
    /// XR's own provider-helm config.
    pub fn release(
        &mut self,
        part: &str,
        chart: &str,
        repository: &str,
        version: &str,
        namespace: &str,
        values: Value,
    ) {
        let config = self.name("helm");
        self.out.push(Desired {
            target: Target::ControlPlane,
            object: json!({
                "apiVersion": "helm.m.crossplane.io/v1beta1",
                "kind": "Release",
                "metadata": {
                    "name": self.name(part),
                    "namespace": self.namespace,
                    "labels": { modelplane_api::labels::CLUSTER: self.xr },
                    "annotations": { modelplane_api::labels::EXTERNAL_NAME: part },
                },
                "spec": {
                    // The release dies with the cluster: never delete it first.
                    "managementPolicies": ["Observe", "Create", "Update", "LateInitialize"],
                    "providerConfigRef": { "kind": "ProviderConfig", "name": config },
                    "forProvider": {
                        "chart": { "name": chart, "repository": repository, "version": version },
                        "namespace": namespace,
                        "values": values,
                    },
                },
            }),
            ready_when: ReadinessRule::ConditionTrue("Ready".into()),
        });
    }

    /// The provider-helm config that reaches the new cluster through the
    /// kubeconfig connection secret.
    pub fn helm_provider_config(&mut self, secret: &str) {
        self.out.push(Desired {
            target: Target::ControlPlane,
            object: json!({
                "apiVersion": "helm.m.crossplane.io/v1beta1",
                "kind": "ProviderConfig",
                "metadata": { "name": self.name("helm"), "namespace": self.namespace },
                "spec": { "credentials": { "source": "Secret", "secretRef": { "name": secret, "key": "kubeconfig" } } },
            }),
            ready_when: ReadinessRule::Created,
        });
    }
}
