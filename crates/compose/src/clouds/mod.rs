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

use crate::{Composition, Desired, ReadinessRule, Target};

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

/// The cloud cluster XR kinds, one per provisioning source.
pub const XR_KINDS: [&str; 5] = [
    "EKSCluster",
    "GKECluster",
    "AKSCluster",
    "NebiusCluster",
    "VultrCluster",
];

/// What composing a cloud cluster XR reads besides the XR.
#[derive(Clone, Copy, Debug)]
pub struct CloudObservations<'a> {
    /// The provider configs observed (a GKE or Nebius XR reads its project
    /// and credentials from the one its `credentials` name).
    pub provider_configs: &'a [Value],
    /// The managed resource that writes the kubeconfig is Ready.
    pub control_plane_ready: bool,
    /// The EFS file system's ID, once AWS created it.
    pub file_system_id: Option<&'a str>,
}

/// Why a cloud cluster XR cannot be composed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    /// Its kind is no cloud cluster, or it does not parse as one.
    #[error("{0}")]
    Invalid(String),
    /// The provider config its credentials name is not observed.
    #[error("{kind} {name} of {group} does not exist (it gives the cluster's project)")]
    MissingProviderConfig {
        /// `ClusterProviderConfig` or `ProviderConfig`.
        kind: String,
        /// Its name.
        name: String,
        /// The provider's API group.
        group: String,
    },
    /// The provider config lacks a field composition needs.
    #[error("{0}")]
    IncompleteProviderConfig(String),
}

/// The provider config a cloud XR's credentials name, among those given.
fn provider_config<'a>(
    xr: &Value,
    group: &str,
    given: &'a [Value],
) -> Result<&'a Value, CloudError> {
    let credentials = &xr["spec"]["credentials"];
    let kind = credentials["type"]
        .as_str()
        .unwrap_or("ClusterProviderConfig");
    let name = credentials["name"].as_str().unwrap_or("default");
    given
        .iter()
        .find(|c| {
            c["kind"] == kind
                && c["metadata"]["name"] == name
                && c["apiVersion"]
                    .as_str()
                    .is_some_and(|a| a.split('/').next() == Some(group))
        })
        .ok_or_else(|| CloudError::MissingProviderConfig {
            kind: kind.into(),
            name: name.into(),
            group: group.into(),
        })
}

fn typed<T: serde::de::DeserializeOwned>(xr: &Value) -> Result<T, CloudError> {
    serde_json::from_value(xr.clone()).map_err(|e| {
        CloudError::Invalid(format!(
            "{} {} does not parse: {e}",
            xr["kind"].as_str().unwrap_or("object"),
            xr["metadata"]["name"].as_str().unwrap_or_default()
        ))
    })
}

/// A cloud cluster XR's managed resources (and in-cluster extras), by its
/// kind — the one dispatch from an XR to its cloud's composition.
pub fn compose_cloud(
    xr: &Value,
    observed: CloudObservations<'_>,
) -> Result<Composition, CloudError> {
    let project = |group: &str| -> Result<String, CloudError> {
        let config = provider_config(xr, group, observed.provider_configs)?;
        config["spec"]["projectID"]
            .as_str()
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .ok_or_else(|| {
                CloudError::IncompleteProviderConfig(format!(
                    "{} {} of {group} has no spec.projectID",
                    config["kind"].as_str().unwrap_or_default(),
                    config["metadata"]["name"].as_str().unwrap_or_default()
                ))
            })
    };
    let ready = observed.control_plane_ready;
    Ok(match xr["kind"].as_str().unwrap_or_default() {
        "EKSCluster" => compose_eks_cluster(EksInputs {
            cluster: &typed(xr)?,
            control_plane_ready: ready,
            file_system_id: observed.file_system_id,
        }),
        "GKECluster" => compose_gke_cluster(GkeInputs {
            cluster: &typed(xr)?,
            project: Some(&project("gcp.m.upbound.io")?),
            control_plane_ready: ready,
        }),
        "AKSCluster" => compose_aks_cluster(AksInputs {
            cluster: &typed(xr)?,
            control_plane_ready: ready,
        }),
        "NebiusCluster" => {
            let group = "nebius.m.upbound.io";
            let config = provider_config(xr, group, observed.provider_configs)?;
            let secret = &config["spec"]["credentials"]["secretRef"];
            let field = |f: &str| {
                secret[f].as_str().map(str::to_string).ok_or_else(|| {
                    CloudError::IncompleteProviderConfig(format!(
                        "the {group} provider config has no spec.credentials.secretRef.{f}"
                    ))
                })
            };
            let credentials = modelplane_api::types::StackSecret {
                type_: "NebiusServiceAccountCredentials".into(),
                name: field("name")?,
                key: field("key")?,
                namespace: secret["namespace"].as_str().map(str::to_string),
            };
            compose_nebius_cluster(NebiusInputs {
                cluster: &typed(xr)?,
                project: Some(&project(group)?),
                credentials: Some(&credentials),
                control_plane_ready: ready,
            })
        }
        "VultrCluster" => compose_vultr_cluster(VultrInputs {
            cluster: &typed(xr)?,
            control_plane_ready: ready,
        }),
        other => {
            return Err(CloudError::Invalid(format!(
                "{other:?} is not a cloud cluster kind ({})",
                XR_KINDS.join(", ")
            )));
        }
    })
}
