//! Providers on demand (DECISIONS §A8): every Crossplane provider package
//! Modelplane may need is installed once and never deleted (that would
//! garbage-collect its CRDs and every managed resource); each runs through
//! its own DeploymentRuntimeConfig whose `replicas` is 1 while a cloud is in
//! use — an InferenceCluster on it, or managed resources of it still present
//! — and 0 otherwise.
//!
//! Data flow: the clusters' sources and the clouds with managed resources
//! left → one [`ProviderPlan`] per package (replicas and why) → a Provider and
//! a DeploymentRuntimeConfig per package.

use std::collections::BTreeSet;
use std::fmt;

use modelplane_api::types::{InferenceCluster, Source};
use serde::Serialize;
use serde_json::json;

use crate::{Composition, Desired, ReadinessRule, Target};

/// What a provider package serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Cloud {
    /// Amazon Web Services (EKS clusters).
    Aws,
    /// Google Cloud (GKE clusters).
    Gcp,
    /// Microsoft Azure (AKS clusters).
    Azure,
    /// Nebius.
    Nebius,
    /// Vultr.
    Vultr,
    /// Helm releases of every cluster's serving stack (and the Traefik gateway).
    Helm,
    /// Kubernetes objects wrapped for Crossplane (the original's way to reach
    /// clusters; Modelplane applies plain manifests, so only leftovers need it).
    Kubernetes,
}

impl fmt::Display for Cloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cloud::Aws => "AWS",
            Cloud::Gcp => "GCP",
            Cloud::Azure => "Azure",
            Cloud::Nebius => "Nebius",
            Cloud::Vultr => "Vultr",
            Cloud::Helm => "Helm",
            Cloud::Kubernetes => "Kubernetes",
        })
    }
}

/// The provider packages of each cloud: (name, fully qualified package).
pub const PACKAGES: &[(Cloud, &str, &str)] = &[
    (
        Cloud::Aws,
        "provider-family-aws",
        "xpkg.crossplane.io/crossplane-contrib/provider-family-aws:v2.6.0",
    ),
    (
        Cloud::Aws,
        "provider-aws-ec2",
        "xpkg.crossplane.io/crossplane-contrib/provider-aws-ec2:v2.6.0",
    ),
    (
        Cloud::Aws,
        "provider-aws-efs",
        "xpkg.crossplane.io/crossplane-contrib/provider-aws-efs:v2.6.0",
    ),
    (
        Cloud::Aws,
        "provider-aws-eks",
        "xpkg.crossplane.io/crossplane-contrib/provider-aws-eks:v2.6.0",
    ),
    (
        Cloud::Aws,
        "provider-aws-iam",
        "xpkg.crossplane.io/crossplane-contrib/provider-aws-iam:v2.6.0",
    ),
    (
        Cloud::Gcp,
        "provider-family-gcp",
        "xpkg.crossplane.io/crossplane-contrib/provider-family-gcp:v2.6.0",
    ),
    (
        Cloud::Gcp,
        "provider-gcp-cloudplatform",
        "xpkg.crossplane.io/crossplane-contrib/provider-gcp-cloudplatform:v2.6.0",
    ),
    (
        Cloud::Gcp,
        "provider-gcp-compute",
        "xpkg.crossplane.io/crossplane-contrib/provider-gcp-compute:v2.6.0",
    ),
    (
        Cloud::Gcp,
        "provider-gcp-container",
        "xpkg.crossplane.io/crossplane-contrib/provider-gcp-container:v2.6.0",
    ),
    (
        Cloud::Azure,
        "provider-family-azure",
        "xpkg.crossplane.io/crossplane-contrib/provider-family-azure:v2.6.0",
    ),
    (
        Cloud::Azure,
        "provider-azure-containerservice",
        "xpkg.crossplane.io/crossplane-contrib/provider-azure-containerservice:v2.6.0",
    ),
    (
        Cloud::Azure,
        "provider-azure-network",
        "xpkg.crossplane.io/crossplane-contrib/provider-azure-network:v2.6.0",
    ),
    (
        Cloud::Nebius,
        "provider-nebius",
        "xpkg.upbound.io/upbound/provider-nebius:v1.0.1",
    ),
    (
        Cloud::Vultr,
        "provider-vultr",
        "xpkg.upbound.io/vultr/provider-vultr:v1.0.0",
    ),
    (
        Cloud::Helm,
        "provider-helm",
        "xpkg.crossplane.io/crossplane-contrib/provider-helm:v1.4.0",
    ),
    (
        Cloud::Kubernetes,
        "provider-kubernetes",
        "xpkg.crossplane.io/crossplane-contrib/provider-kubernetes:v1.3.0",
    ),
];

/// The cloud whose providers build a cluster of this source.
pub fn cloud_of(source: Source) -> Option<Cloud> {
    match source {
        Source::Eks => Some(Cloud::Aws),
        Source::Gke => Some(Cloud::Gcp),
        Source::Aks => Some(Cloud::Azure),
        Source::Nebius => Some(Cloud::Nebius),
        Source::Vultr => Some(Cloud::Vultr),
        Source::Existing => None,
    }
}

/// The cloud whose provider serves managed resources of this API group.
pub fn cloud_of_group(group: &str) -> Option<Cloud> {
    let suffix = |s: &str| group.ends_with(s);
    if suffix("aws.upbound.io") || suffix("aws.m.upbound.io") {
        Some(Cloud::Aws)
    } else if suffix("gcp.upbound.io") || suffix("gcp.m.upbound.io") {
        Some(Cloud::Gcp)
    } else if suffix("azure.upbound.io") || suffix("azure.m.upbound.io") {
        Some(Cloud::Azure)
    } else if suffix("nebius.upbound.io") || suffix("nebius.m.upbound.io") {
        Some(Cloud::Nebius)
    } else if group.contains("vultr") {
        Some(Cloud::Vultr)
    } else if suffix("helm.crossplane.io") || suffix("helm.m.crossplane.io") {
        Some(Cloud::Helm)
    } else if suffix("kubernetes.crossplane.io") || suffix("kubernetes.m.crossplane.io") {
        Some(Cloud::Kubernetes)
    } else {
        None
    }
}

/// One provider's plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProviderPlan {
    /// Provider (and DeploymentRuntimeConfig) name.
    pub name: String,
    /// Fully qualified package.
    pub package: String,
    /// What it serves.
    pub cloud: Cloud,
    /// 1 while in use, else 0.
    pub replicas: u32,
    /// Why, in words.
    pub why: String,
}

/// What the plan reads.
#[derive(Clone, Copy, Debug)]
pub struct ProvidersInputs<'a> {
    /// Every InferenceCluster.
    pub clusters: &'a [InferenceCluster],
    /// Clouds (and Helm/Kubernetes) with managed resources still present.
    pub leftovers: &'a BTreeSet<Cloud>,
    /// The InferenceGateway uses the Traefik backend (a Helm release).
    pub traefik: bool,
}

/// Which providers run, and why.
pub fn plan_providers(inputs: ProvidersInputs<'_>) -> Vec<ProviderPlan> {
    let users = |cloud: Cloud| -> Vec<String> {
        inputs
            .clusters
            .iter()
            .filter(|c| match cloud {
                Cloud::Helm => true,
                Cloud::Kubernetes => false,
                _ => cloud_of(c.spec.cluster.source) == Some(cloud),
            })
            .filter_map(|c| c.metadata.name.clone())
            .collect()
    };
    PACKAGES
        .iter()
        .map(|(cloud, name, package)| {
            let clusters = users(*cloud);
            let leftovers = inputs.leftovers.contains(cloud);
            let gateway = *cloud == Cloud::Helm && inputs.traefik;
            let why = if !clusters.is_empty() {
                let noun = if *cloud == Cloud::Helm {
                    "serving stacks of"
                } else {
                    "used by"
                };
                format!("{noun} {}", clusters.join(", "))
            } else if leftovers {
                format!("{cloud} managed resources still exist")
            } else if gateway {
                "the Traefik InferenceGateway".to_string()
            } else {
                match cloud {
                    Cloud::Helm => "no cluster: idle".to_string(),
                    Cloud::Kubernetes => "not used by Modelplane's compositions: idle".to_string(),
                    _ => format!("no {cloud} cluster: idle"),
                }
            };
            ProviderPlan {
                name: (*name).to_string(),
                package: (*package).to_string(),
                cloud: *cloud,
                replicas: u32::from(!clusters.is_empty() || leftovers || gateway),
                why,
            }
        })
        .collect()
}

/// The Providers and DeploymentRuntimeConfigs of a plan. Every package is
/// always desired, so none is ever pruned.
pub fn compose_providers(inputs: ProvidersInputs<'_>) -> Composition {
    // A provider is never deleted (that would garbage-collect its CRDs and
    // every managed resource), whatever a later release lists.
    let mut out = Composition {
        hold: true,
        ..Composition::default()
    };
    for plan in plan_providers(inputs) {
        out.desired.push(Desired {
            target: Target::ControlPlane,
            object: json!({
                "apiVersion": "pkg.crossplane.io/v1beta1",
                "kind": "DeploymentRuntimeConfig",
                "metadata": { "name": plan.name },
                "spec": {
                    "deploymentTemplate": {
                        "spec": { "replicas": plan.replicas, "selector": {}, "template": {} },
                    },
                },
            }),
            ready_when: ReadinessRule::Created,
        });
        out.desired.push(Desired {
            target: Target::ControlPlane,
            object: json!({
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "Provider",
                "metadata": { "name": plan.name },
                "spec": {
                    "package": plan.package,
                    "runtimeConfigRef": {
                        "apiVersion": "pkg.crossplane.io/v1beta1",
                        "kind": "DeploymentRuntimeConfig",
                        "name": plan.name,
                    },
                },
            }),
            ready_when: ReadinessRule::ConditionTrue("Healthy".into()),
        });
    }
    out
}
