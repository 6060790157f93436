//! The kinds compositions apply, per target. A controller watches them from
//! its start, so what an earlier run applied is known — and pruned once no
//! longer desired — even before this run applies anything of that kind: a
//! cloud cluster deleted while the controller was down still has its
//! managed resources found and deleted. Tests compose every upstream case
//! and check each object's kind is listed here.

use crate::{Desired, Target};

/// What compositions apply on the control plane.
pub const CONTROL_PLANE: &[(&str, &str)] = &[
    ("modelplane.ai/v1alpha1", "ModelReplica"),
    ("modelplane.ai/v1alpha1", "ModelEndpoint"),
    ("infrastructure.modelplane.ai/v1alpha1", "ServingStack"),
    ("infrastructure.modelplane.ai/v1alpha1", "EKSCluster"),
    ("infrastructure.modelplane.ai/v1alpha1", "GKECluster"),
    ("infrastructure.modelplane.ai/v1alpha1", "AKSCluster"),
    ("infrastructure.modelplane.ai/v1alpha1", "NebiusCluster"),
    ("infrastructure.modelplane.ai/v1alpha1", "VultrCluster"),
    ("v1", "Service"),
    ("discovery.k8s.io/v1", "EndpointSlice"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    // A Traefik InferenceGateway's: its Gateway, MetalLB's address pool.
    ("gateway.networking.k8s.io/v1", "Gateway"),
    ("gateway.networking.k8s.io/v1", "GatewayClass"),
    ("v1", "Namespace"),
    ("metallb.io/v1beta1", "IPAddressPool"),
    ("metallb.io/v1beta1", "L2Advertisement"),
    (
        "kubernetes.m.crossplane.io/v1alpha1",
        "ClusterProviderConfig",
    ),
    ("kubernetes.m.crossplane.io/v1alpha1", "ProviderConfig"),
    ("helm.m.crossplane.io/v1beta1", "ProviderConfig"),
    ("helm.m.crossplane.io/v1beta1", "Release"),
    ("protection.crossplane.io/v1beta1", "Usage"),
    ("protection.crossplane.io/v1beta1", "ClusterUsage"),
    ("pkg.crossplane.io/v1", "Provider"),
    ("pkg.crossplane.io/v1beta1", "DeploymentRuntimeConfig"),
    // A cloud cluster's own objects: the Nebius node groups' cloud-init.
    ("v1", "Secret"),
    // Cloud clusters' managed resources, by provider.
    ("ec2.aws.m.upbound.io/v1beta1", "EIP"),
    ("ec2.aws.m.upbound.io/v1beta1", "InternetGateway"),
    ("ec2.aws.m.upbound.io/v1beta1", "LaunchTemplate"),
    ("ec2.aws.m.upbound.io/v1beta1", "NATGateway"),
    ("ec2.aws.m.upbound.io/v1beta1", "Route"),
    ("ec2.aws.m.upbound.io/v1beta1", "RouteTable"),
    ("ec2.aws.m.upbound.io/v1beta1", "RouteTableAssociation"),
    ("ec2.aws.m.upbound.io/v1beta1", "SecurityGroup"),
    ("ec2.aws.m.upbound.io/v1beta1", "SecurityGroupEgressRule"),
    ("ec2.aws.m.upbound.io/v1beta1", "SecurityGroupIngressRule"),
    ("ec2.aws.m.upbound.io/v1beta1", "Subnet"),
    ("ec2.aws.m.upbound.io/v1beta1", "VPC"),
    ("efs.aws.m.upbound.io/v1beta1", "FileSystem"),
    ("efs.aws.m.upbound.io/v1beta1", "MountTarget"),
    ("eks.aws.m.upbound.io/v1beta1", "Addon"),
    ("eks.aws.m.upbound.io/v1beta1", "Cluster"),
    ("eks.aws.m.upbound.io/v1beta1", "ClusterAuth"),
    ("eks.aws.m.upbound.io/v1beta1", "NodeGroup"),
    ("eks.aws.m.upbound.io/v1beta1", "PodIdentityAssociation"),
    ("iam.aws.m.upbound.io/v1beta1", "Policy"),
    ("iam.aws.m.upbound.io/v1beta1", "Role"),
    ("iam.aws.m.upbound.io/v1beta1", "RolePolicyAttachment"),
    ("cloudplatform.gcp.m.upbound.io/v1beta1", "ProjectIAMMember"),
    ("cloudplatform.gcp.m.upbound.io/v1beta1", "ProjectService"),
    ("cloudplatform.gcp.m.upbound.io/v1beta1", "ServiceAccount"),
    (
        "cloudplatform.gcp.m.upbound.io/v1beta1",
        "ServiceAccountKey",
    ),
    ("compute.gcp.m.upbound.io/v1beta1", "Network"),
    ("compute.gcp.m.upbound.io/v1beta1", "Subnetwork"),
    ("container.gcp.m.upbound.io/v1beta1", "Cluster"),
    ("container.gcp.m.upbound.io/v1beta1", "NodePool"),
    ("azure.m.upbound.io/v1beta1", "ResourceGroup"),
    ("network.azure.m.upbound.io/v1beta1", "Subnet"),
    ("network.azure.m.upbound.io/v1beta1", "VirtualNetwork"),
    (
        "containerservice.azure.m.upbound.io/v1beta1",
        "KubernetesCluster",
    ),
    (
        "containerservice.azure.m.upbound.io/v1beta1",
        "KubernetesClusterNodePool",
    ),
    ("compute.nebius.m.upbound.io/v1beta1", "Filesystem"),
    ("mk8s.nebius.m.upbound.io/v1beta1", "Cluster"),
    ("mk8s.nebius.m.upbound.io/v1beta1", "NodeGroup"),
    ("vpc.nebius.m.upbound.io/v1beta1", "Network"),
    ("vpc.nebius.m.upbound.io/v1beta1", "Subnet"),
    ("vke.vultr.m.upbound.io/v1beta1", "Kubernetes"),
    ("vke.vultr.m.upbound.io/v1beta1", "KubernetesNodePool"),
];

/// What compositions apply on each workload cluster.
pub const WORKLOAD_CLUSTER: &[(&str, &str)] = &[
    ("apps/v1", "Deployment"),
    ("v1", "ResourceQuota"),
    ("gateway.networking.k8s.io/v1", "Gateway"),
    ("gateway.networking.k8s.io/v1", "GatewayClass"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("grove.io/v1alpha1", "PodCliqueSet"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ("inference.networking.k8s.io/v1", "InferencePool"),
    ("v1", "PersistentVolumeClaim"),
    ("batch/v1", "Job"),
    ("v1", "Secret"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("v1", "Namespace"),
    ("gateway.envoyproxy.io/v1alpha1", "EnvoyProxy"),
    ("scheduling.run.ai/v2", "Queue"),
];

/// What the Roles composed on a workload cluster grant (the endpoint
/// picker's): `(apiGroup, resource, verbs)`. Whoever applies them must hold
/// these rights itself — Kubernetes refuses a Role that grants more than
/// its creator has.
pub const GRANTED_ON_CLUSTER: &[(&str, &str, &[&str])] = &[
    ("", "pods", &["get", "watch", "list"]),
    (
        "inference.networking.k8s.io",
        "inferencepools",
        &["get", "watch", "list"],
    ),
    (
        "inference.networking.x-k8s.io",
        "inferenceobjectives",
        &["get", "watch", "list"],
    ),
];

/// The kinds applied on `target`.
pub fn on(target: &Target) -> &'static [(&'static str, &'static str)] {
    match target {
        Target::ControlPlane => CONTROL_PLANE,
        Target::Cluster(_) => WORKLOAD_CLUSTER,
    }
}

/// Whether `desired`'s kind is listed for its target.
pub fn listed(desired: &Desired) -> bool {
    let api_version = desired.object["apiVersion"].as_str().unwrap_or_default();
    on(&desired.target)
        .iter()
        .any(|&(a, k)| a == api_version && k == desired.kind())
}

/// What the controllers do with an object of a kind beyond applying it and
/// pruning it: kind policy lives here, with the compositions, not in the
/// generic reconcile loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handling {
    /// It books capacity the scheduler counts (a ModelReplica holds GPUs on
    /// its cluster): a plan that writes one takes a placement turn, and it is
    /// counted as soon as it is applied, before its watch event arrives.
    pub books: bool,
    /// It leaves the routing before it goes: once no longer desired it is
    /// marked draining and pruned only after the drain period.
    pub drains: bool,
}

/// How an object of `kind` on `target` is handled.
pub fn handling(target: &Target, kind: &str) -> Handling {
    match (target, kind) {
        (Target::ControlPlane, "ModelReplica") => Handling {
            books: true,
            drains: true,
        },
        _ => Handling::default(),
    }
}

impl Desired {
    /// How this object is handled (see [`handling`]).
    pub fn handling(&self) -> Handling {
        handling(&self.target, self.kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_books_capacity_and_drains_and_nothing_else_does() {
        let replica = handling(&Target::ControlPlane, "ModelReplica");
        assert!(replica.books && replica.drains);
        let on_a_cluster = handling(&Target::Cluster("a".into()), "ModelReplica");
        assert_eq!(on_a_cluster, Handling::default());
        for (api_version, kind) in CONTROL_PLANE.iter().filter(|(_, k)| *k != "ModelReplica") {
            assert_eq!(
                handling(&Target::ControlPlane, kind),
                Handling::default(),
                "{api_version} {kind}"
            );
        }
    }
}
